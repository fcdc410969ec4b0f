"""Calendar and meetings: events, contacts, free slots, meeting rooms."""

from __future__ import annotations

import datetime as dt
from typing import Any

from toolguard_evals.dialogues.framework import (
    Backend,
    Builder,
    Domain,
    Infeasible,
    ToolError,
    flag,
    integer,
    strings,
    text,
    tool,
)
from toolguard_evals.dialogues.pools import COMPANY_DOMAIN, SUBJECT_TOPICS, person

TOOLS = (
    tool("list_events", "The user's calendar events on one day.", "read", "events", ["date"],
         date=text("Day, YYYY-MM-DD.", "date", fmt="date")),
    tool("create_event", "Create a calendar event and invite attendees by email.", "write",
         "events", ["title", "date", "start_time", "duration_minutes"],
         title=text("Event title.", "title"),
         date=text("Day, YYYY-MM-DD.", "date", fmt="date"),
         start_time=text("Start, HH:MM (24 h).", "time"),
         duration_minutes=integer("Length in minutes.", minimum=5, maximum=600),
         attendees=strings("Email addresses of the invitees.", "email", fmt="email"),
         location=text("Where it takes place (room name or address).", "location")),
    tool("update_event", "Move or resize an existing event.", "write", "events", ["event_id"],
         event_id=text("Event id from list_events or create_event.", "identifier"),
         date=text("New day, YYYY-MM-DD.", "date", fmt="date"),
         start_time=text("New start, HH:MM.", "time"),
         duration_minutes=integer("New length in minutes.", minimum=5, maximum=600)),
    tool("cancel_event", "Cancel an event; attendees get a cancellation notice if asked.",
         "write", "events", ["event_id"],
         event_id=text("Event id.", "identifier"),
         notify_attendees=flag("Send a cancellation email to the attendees.", default=True)),
    tool("find_free_slots", "Free time windows of at least a given length on one day "
                            "(working hours 08:00-18:00).", "read", "availability",
         ["date", "duration_minutes"],
         date=text("Day, YYYY-MM-DD.", "date", fmt="date"),
         duration_minutes=integer("Needed length in minutes.", minimum=5, maximum=600)),
    tool("find_contact", "Look up a colleague or contact by (part of) their name.", "read",
         "contacts", ["name"], name=text("Name or part of it.", "person")),
    tool("list_rooms", "Meeting rooms with at least the given capacity.", "read", "rooms",
         ["min_capacity"], min_capacity=integer("Seats needed.", minimum=1, maximum=60)),
    tool("book_room", "Attach a meeting room to an event.", "write", "rooms",
         ["room_id", "event_id"], room_id=text("Room id from list_rooms.", "identifier"),
         event_id=text("Event id.", "identifier")),
)

_ROOMS = (("RM-101", "Birch", 4), ("RM-204", "Cedar", 8), ("RM-310", "Fjord", 12),
          ("RM-412", "Granite", 20), ("RM-118", "Heather", 6))


class CalendarBackend(Backend):
    """Contacts with unique first names and a calendar with a few events per day."""

    def setup(self) -> None:
        r = self.rng
        idx = r.sample(range(40), 10)
        contacts = []
        for i in idx:
            f, la = person(i + 40 * r.randrange(3))
            contacts.append({"name": f"{f} {la}", "email": f"{f.lower()}.{la.lower()}@"
                                                           f"{COMPANY_DOMAIN}"})
        self.s = {"contacts": contacts, "events": {}, "room_bookings": {}}

    def _day_events(self, date: str) -> list[dict[str, Any]]:
        if not any(e["date"] == date for e in self.s["events"].values()) and date not in \
                self.s.setdefault("seeded_days", []):
            self.s["seeded_days"].append(date)
            r = self.rng
            for hh in sorted(r.sample((9, 10, 11, 13, 14, 15, 16), 3)):
                eid = self.new_id("EV")
                self.s["events"][eid] = {
                    "event_id": eid, "title": r.choice(SUBJECT_TOPICS).capitalize(),
                    "date": date, "start_time": f"{hh:02d}:00",
                    "duration_minutes": r.choice((30, 45, 60)),
                    "attendees": [r.choice(self.s["contacts"])["email"]]}
        return sorted((e for e in self.s["events"].values() if e["date"] == date),
                      key=lambda e: e["start_time"])

    def do_list_events(self, date: str) -> dict[str, Any]:
        dt.date.fromisoformat(date)
        return {"date": date, "events": [dict(e) for e in self._day_events(date)]}

    def do_create_event(self, title: str, date: str, start_time: str, duration_minutes: int,
                        attendees: list[str] | None = None,
                        location: str | None = None) -> dict[str, Any]:
        dt.date.fromisoformat(date)
        self._day_events(date)
        eid = self.new_id("EV")
        ev: dict[str, Any] = {"event_id": eid, "title": title, "date": date,
                              "start_time": start_time, "duration_minutes": duration_minutes,
                              "attendees": list(attendees or [])}
        if location:
            ev["location"] = location
        self.s["events"][eid] = ev
        return {"created": True, **ev, "invitations_sent": len(ev["attendees"])}

    def _event(self, event_id: str) -> dict[str, Any]:
        ev = self.s["events"].get(event_id)
        if ev is None:
            raise ToolError(f"no event {event_id}")
        return dict(ev)

    def do_update_event(self, event_id: str, date: str | None = None,
                        start_time: str | None = None,
                        duration_minutes: int | None = None) -> dict[str, Any]:
        self._event(event_id)
        ev = self.s["events"][event_id]
        for k, v in (("date", date), ("start_time", start_time),
                     ("duration_minutes", duration_minutes)):
            if v is not None:
                ev[k] = v
        return {"updated": True, **ev}

    def do_cancel_event(self, event_id: str, notify_attendees: bool = True) -> dict[str, Any]:
        ev = self._event(event_id)
        del self.s["events"][event_id]
        return {"cancelled": event_id, "title": ev["title"],
                "notified": ev["attendees"] if notify_attendees else []}

    def do_find_free_slots(self, date: str, duration_minutes: int) -> dict[str, Any]:
        busy = [(int(e["start_time"][:2]) * 60 + int(e["start_time"][3:]),
                 int(e["start_time"][:2]) * 60 + int(e["start_time"][3:])
                 + e["duration_minutes"]) for e in self._day_events(date)]
        slots, t = [], 8 * 60
        for start, end in [*sorted(busy), (18 * 60, 18 * 60)]:
            if start - t >= duration_minutes:
                slots.append({"start": f"{t // 60:02d}:{t % 60:02d}",
                              "end": f"{start // 60:02d}:{start % 60:02d}"})
            t = max(t, end)
        return {"date": date, "free": slots}

    def do_find_contact(self, name: str) -> dict[str, Any]:
        hits = [c for c in self.s["contacts"] if name.casefold() in c["name"].casefold()]
        return {"matches": hits}

    def do_list_rooms(self, min_capacity: int) -> dict[str, Any]:
        return {"rooms": [{"room_id": i, "name": n, "capacity": c} for i, n, c in _ROOMS
                          if c >= min_capacity]}

    def do_book_room(self, room_id: str, event_id: str) -> dict[str, Any]:
        self._event(event_id)
        room = next((x for x in _ROOMS if x[0] == room_id), None)
        if room is None:
            raise ToolError(f"no room {room_id}")
        self.s["room_bookings"][event_id] = room_id
        self.s["events"][event_id]["location"] = room[1]
        return {"event_id": event_id, "room": room[1], "booked": True}


# ============================================================================ scenarios
def _day(b: Builder, lo: int = 1, hi: int = 12) -> dt.date:
    day = b.today + dt.timedelta(days=b.rng.randrange(lo, hi))
    while day.weekday() > 4:
        day += dt.timedelta(days=1)
    return day


def _contact(b: Builder) -> dict[str, str]:
    return dict(b.pick(*b.backend.s["contacts"]))


def _lookup(b: Builder, name: str) -> str:
    out = b.call("find_contact", {"name": name}, reuse=True)
    return str(out["matches"][0]["email"])


def meeting_with_contact(b: Builder) -> None:
    c = _contact(b)
    first = c["name"].split()[0]
    day = _day(b)
    when, how = b.date_phrase(day)
    start = b.pick("09:30", "10:00", "11:15", "14:00", "16:30")
    at, t_how = b.time_phrase(start)
    minutes = b.pick(30, 45, 60)
    topic = b.pick(*SUBJECT_TOPICS)
    said_name = b.pick(c["name"], first)
    b.user(b.pick(
        f"Set up a {minutes}-minute meeting with {said_name} on {when} at {at} about the {topic}.",
        f"Put a meeting about the {topic} in my calendar for {when}, {at}, {minutes} minutes, "
        f"and invite {said_name}.",
        f"Can you invite {said_name} to a {minutes} min call on {when} at {at}? Topic: {topic}.",
    ))
    email = _lookup(b, said_name)
    res = b.call("create_event", {"title": topic.capitalize(), "date": day.isoformat(),
                                  "start_time": start, "duration_minutes": minutes,
                                  "attendees": [email]},
                 derived={"date": how, "start_time": t_how})
    b.memory["event"] = res["event_id"]
    b.say(f"Created '{res['title']}' on {res['date']} at {start} and invited {email}.")
    if b.chance(0.4):
        new = b.pick("15:00", "17:00", "08:30")
        n_at, n_how = b.time_phrase(new)
        b.user(b.pick(f"No, make it {n_at} instead.", f"Sorry, move it to {n_at}."),
               kind="correction")
        b.call("update_event", {"event_id": res["event_id"], "start_time": new},
               derived={"start_time": n_how})
        b.say(f"Moved it to {new}.")


def vague_meeting(b: Builder) -> None:
    c = _contact(b)
    first = c["name"].split()[0]
    b.user(b.pick(f"Schedule a meeting with {first}.", f"I need to meet {first} soon, set "
                  "something up.", f"Book time with {first} please."),
           kind="vague_request", label="ask_user", missing=["date", "start_time"])
    b.ask(f"Sure. On which day and at what time should the meeting with {first} be, and for "
          "how long?")
    day = _day(b)
    when, how = b.date_phrase(day)
    start = b.pick("10:00", "13:30", "15:00")
    at, t_how = b.time_phrase(start)
    minutes = b.pick(30, 60)
    b.user(b.pick(f"{when} at {at}, {minutes} minutes.", f"Let's say {when}, {at}, for "
                  f"{minutes} min."), kind="answer")
    email = _lookup(b, first)
    res = b.call("create_event", {"title": f"Meeting with {first}", "date": day.isoformat(),
                                  "start_time": start, "duration_minutes": minutes,
                                  "attendees": [email]},
                 derived={"date": how, "start_time": t_how,
                          "title": "composed from the request"})
    b.say(f"Booked '{res['title']}' on {res['date']} at {start}.")


def reschedule(b: Builder) -> None:
    day = _day(b)
    when, how = b.date_phrase(day)
    b.user(b.pick(f"What's on my calendar on {when}?", f"Show me my meetings for {when}.",
                  f"What do I have {when}?"))
    out = b.call("list_events", {"date": day.isoformat()}, derived={"date": how})
    evs = out["events"]
    b.say("You have: " + "; ".join(f"{e['start_time']} {e['title']}" for e in evs) + ".")
    ev = b.pick(*evs)
    mode = b.pick("move", "cancel", "room")
    if mode == "move":
        new = b.pick("17:00", "08:00", "12:30")
        at, t_how = b.time_phrase(new)
        b.user(b.pick(f"Move the {ev['title'].lower()} to {at}.",
                      f"Push '{ev['title']}' to {at} please."), kind="anaphora")
        b.call("update_event", {"event_id": ev["event_id"], "start_time": new},
               derived={"start_time": t_how})
        b.say(f"'{ev['title']}' now starts at {new}.")
    elif mode == "cancel":
        b.user(b.pick(f"Cancel the {ev['start_time']} one and let the others know.",
                      f"Drop the {ev['title'].lower()}, and tell the attendees."),
               kind="anaphora")
        b.call("cancel_event", {"event_id": ev["event_id"], "notify_attendees": True})
        b.say(f"Cancelled '{ev['title']}' and notified the attendees.")
    else:
        seats = b.pick(6, 8, 10)
        b.user(b.pick(f"Find a room for {seats} people for the {ev['title'].lower()}.",
                      f"The {ev['title'].lower()} needs a room with {seats} seats."),
               kind="anaphora")
        rooms = b.call("list_rooms", {"min_capacity": seats}, reuse=True)["rooms"]
        b.ask(f"Free rooms: {', '.join(r['name'] for r in rooms)}. Which one?")
        room = b.pick(*rooms)
        b.user(b.pick(f"{room['name']}.", f"Take {room['name']}."), kind="select")
        b.call("book_room", {"room_id": room["room_id"], "event_id": ev["event_id"]})
        b.say(f"{room['name']} is booked for '{ev['title']}'.")


def free_slot(b: Builder) -> None:
    day = _day(b)
    when, how = b.date_phrase(day)
    minutes = b.pick(30, 60, 90)
    b.user(b.pick(f"When am I free on {when} for {minutes} minutes?",
                  f"Find me a free {minutes}-minute slot {when}."))
    out = b.call("find_free_slots", {"date": day.isoformat(), "duration_minutes": minutes},
                 derived={"date": how})
    slot = out["free"][0]
    b.ask(f"You're free from {slot['start']} to {slot['end']}"
          + (f" and {len(out['free']) - 1} more windows" if len(out["free"]) > 1 else "")
          + ". Want me to block it?")
    topic = b.pick("focus time", "quarterly planning", "interview prep")
    c = _contact(b)
    if b.chance(0.5):
        b.user(b.pick(f"Yes, book the first one as '{topic}'.",
                      f"Yes please, call it {topic}."), kind="confirm")
        b.call("create_event", {"title": topic, "date": day.isoformat(),
                                "start_time": slot["start"], "duration_minutes": minutes},
               derived={"date": how})
    else:
        b.user(b.pick(f"Yes, and invite {c['email']} to it. Title: {topic}.",
                      f"Book it as '{topic}' with {c['email']}."), kind="confirm")
        b.call("create_event", {"title": topic, "date": day.isoformat(),
                                "start_time": slot["start"], "duration_minutes": minutes,
                                "attendees": [c["email"]]}, derived={"date": how})
    b.say(f"Blocked {slot['start']} on {day.isoformat()} for {topic}.")


def two_invites(b: Builder) -> None:
    c1, c2 = b.sample(b.backend.s["contacts"], 2)
    day = _day(b)
    when, how = b.date_phrase(day)
    start = b.pick("09:00", "11:00", "15:30")
    at, t_how = b.time_phrase(start)
    topic = b.pick(*SUBJECT_TOPICS)
    b.user(b.pick(f"Invite {c1['name']} to a one-hour {topic} session on {when} at {at}.",
                  f"Book a 60 minute {topic} meeting {when} {at} with {c1['name']}."))
    e1 = _lookup(b, c1["name"])
    b.call("create_event", {"title": topic.capitalize(), "date": day.isoformat(),
                            "start_time": start, "duration_minutes": 60, "attendees": [e1]},
           derived={"date": how, "start_time": t_how, "duration_minutes": "one hour"})
    b.say(f"Done, {c1['name']} is invited.")
    day2 = day + dt.timedelta(days=1)
    w2, h2 = b.date_phrase(day2, relative=False)
    b.user(b.pick(f"Do the same with {c2['name']} on {w2}.",
                  f"Same again for {c2['name']}, but on {w2}."), kind="anaphora")
    e2 = _lookup(b, c2["name"])
    b.call("create_event", {"title": topic.capitalize(), "date": day2.isoformat(),
                            "start_time": start, "duration_minutes": 60, "attendees": [e2]},
           derived={"date": h2, "start_time": t_how, "duration_minutes": "one hour"})
    b.say(f"Also booked with {c2['name']} on {day2.isoformat()}.")


DOMAIN = Domain(
    name="calendar",
    service="Tidewell Calendar",
    tools=TOOLS,
    backend=CalendarBackend,
    scenarios={"meeting_with_contact": meeting_with_contact, "vague_meeting": vague_meeting,
               "reschedule": reschedule, "free_slot": free_slot, "two_invites": two_invites},
    infeasible=(
        Infeasible(("Can you order sandwiches for the meeting?",
                    "Please arrange catering for twelve people."),
                   "I can't order food or catering; I only manage calendar events and rooms."),
        Infeasible(("Join the video call for me and take notes.",
                    "Record the meeting and send me a transcript."),
                   "I can't join or record calls."),
        Infeasible(("Translate the agenda into Spanish.",
                    "Write the minutes of yesterday's meeting."),
                   "That's outside what my calendar tools can do."),
        Infeasible(("Text my phone ten minutes before each meeting.",
                    "Send me an SMS reminder for the standup."),
                   "I have no way to send text messages, sorry."),
    ),
    profile=lambda b: f"The user works at {COMPANY_DOMAIN}.",
)

__all__ = ["DOMAIN", "TOOLS", "CalendarBackend"]
