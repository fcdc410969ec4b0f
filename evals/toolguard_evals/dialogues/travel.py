"""Travel booking: flight and hotel search, bookings, flight status, loyalty numbers."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from toolguard_evals.dialogues.framework import (
    Backend,
    Builder,
    Domain,
    Infeasible,
    ToolError,
    choice,
    integer,
    number,
    text,
    tool,
)
from toolguard_evals.dialogues.pools import CITIES, EMAIL_DOMAINS, person

TOOLS = (
    tool("search_flights", "Search flight offers between two cities on one day.", "read",
         "flights", ["origin", "destination", "date"],
         origin=text("Departure city.", "location"),
         destination=text("Arrival city.", "location"),
         date=text("Departure date, YYYY-MM-DD.", "date", fmt="date"),
         passengers=integer("Number of passengers.", minimum=1, maximum=9, default=1),
         cabin=choice("Cabin class.", "economy", "premium", "business", default="economy")),
    tool("book_flight", "Book a flight offer for one named passenger; returns a booking "
                        "reference.", "write", "flights", ["offer_id", "passenger_name", "email"],
         offer_id=text("Offer id from search_flights.", "identifier"),
         passenger_name=text("Passenger's full name as in the passport.", "person"),
         email=text("Email address for the e-ticket.", "email", fmt="email")),
    tool("search_hotels", "Hotels with free rooms in a city for the given nights.", "read",
         "hotels", ["city", "check_in", "check_out"],
         city=text("City.", "location"),
         check_in=text("Arrival date, YYYY-MM-DD.", "date", fmt="date"),
         check_out=text("Departure date, YYYY-MM-DD.", "date", fmt="date"),
         guests=integer("Number of guests.", minimum=1, maximum=8, default=1),
         max_price=number("Highest price per night in EUR.", minimum=0)),
    tool("book_hotel", "Reserve a room in a hotel found by search_hotels.", "write", "hotels",
         ["hotel_id", "check_in", "check_out", "guest_name"],
         hotel_id=text("Hotel id from search_hotels.", "identifier"),
         check_in=text("Arrival date, YYYY-MM-DD.", "date", fmt="date"),
         check_out=text("Departure date, YYYY-MM-DD.", "date", fmt="date"),
         guests=integer("Number of guests.", minimum=1, maximum=8, default=1),
         guest_name=text("Name the room is booked under.", "person")),
    tool("get_booking", "Details and status of a flight or hotel booking.", "read", "bookings",
         ["booking_ref"], booking_ref=text("Booking reference, e.g. BK-58120.", "identifier")),
    tool("cancel_booking", "Cancel a flight or hotel booking; refunds follow the fare rules.",
         "write", "bookings", ["booking_ref"],
         booking_ref=text("Booking reference, e.g. BK-58120.", "identifier")),
    tool("add_loyalty_number", "Attach a frequent-flyer or hotel loyalty number to a booking.",
         "write", "bookings", ["booking_ref", "loyalty_number"],
         booking_ref=text("Booking reference.", "identifier"),
         loyalty_number=text("Membership number of the loyalty programme.", "identifier")),
    tool("get_flight_status", "Live status of a flight by its flight number.", "read", "status",
         ["flight_number"], flight_number=text("Flight number such as KA 1234.", "code")),
)

_AIRLINES = (("Kestrel Airways", "KA"), ("Aurora Air", "AU"), ("Bluecrest", "BC"),
             ("Nordwind Express", "NX"))
_HOTEL_WORDS = ("Harbour", "Linden", "Old Town", "Meridian", "Cloister", "Riverside", "Atrium",
                "Granary", "Lantern", "Observatory")
_HOTEL_KINDS = ("Hotel", "Suites", "Inn", "Residence", "Boutique Hotel")


class TravelBackend(Backend):
    """Deterministic flight offers and hotels per (city, date); a few existing bookings."""

    def setup(self) -> None:
        r = self.rng
        first, last = person(r.randrange(1000))
        email = f"{first.lower()}.{last.lower()}@{r.choice(EMAIL_DOMAINS)}"
        self.s = {"traveller": {"name": f"{first} {last}", "email": email},
                  "bookings": {}, "offers": {}, "hotels": {}}
        for _ in range(2):
            ref = self.new_id("BK")
            city = r.choice(CITIES)[0]
            self.s["bookings"][ref] = {"kind": "hotel", "city": city, "status": "confirmed",
                                       "guest": self.s["traveller"]["name"],
                                       "nights": r.randrange(1, 5), "loyalty": None}

    def _rng_for(self, *parts: str) -> random.Random:
        return random.Random(":".join(("offers", *parts, str(self.s["traveller"]["name"]))))

    def do_search_flights(self, origin: str, destination: str, date: str, passengers: int = 1,
                          cabin: str = "economy") -> dict[str, Any]:
        if origin.casefold() == destination.casefold():
            raise ToolError("origin and destination are the same")
        dt.date.fromisoformat(date)
        r = self._rng_for(origin, destination, date, cabin)
        offers: list[dict[str, Any]] = []
        for _ in range(3):
            airline, code = r.choice(_AIRLINES)
            oid = f"OF-{r.randrange(10000, 99999)}"
            while any(o["offer_id"] == oid for o in offers):
                oid = f"OF-{r.randrange(10000, 99999)}"
            hh, mm = r.randrange(6, 21), r.choice((0, 15, 30, 45))
            price = round(r.uniform(60, 420) * (2.6 if cabin == "business" else 1.0), 2)
            offer = {"offer_id": oid, "airline": airline,
                     "flight_number": f"{code} {r.randrange(100, 9999)}",
                     "departure": f"{date}T{hh:02d}:{mm:02d}", "price_eur": price,
                     "passengers": passengers, "cabin": cabin}
            self.s["offers"][oid] = offer
            offers.append(offer)
        offers.sort(key=lambda o: str(o["departure"]))
        return {"origin": origin, "destination": destination, "offers": offers}

    def do_book_flight(self, offer_id: str, passenger_name: str, email: str) -> dict[str, Any]:
        offer = self.s["offers"].get(offer_id)
        if offer is None:
            raise ToolError(f"unknown or expired offer {offer_id}")
        ref = self.new_id("BK")
        self.s["bookings"][ref] = {"kind": "flight", "offer": offer_id, "status": "confirmed",
                                   "guest": passenger_name, "email": email, "loyalty": None}
        return {"booking_ref": ref, "status": "confirmed", "flight": offer["flight_number"],
                "departure": offer["departure"], "e_ticket_sent_to": email}

    def do_search_hotels(self, city: str, check_in: str, check_out: str, guests: int = 1,
                         max_price: float | None = None) -> dict[str, Any]:
        nights = (dt.date.fromisoformat(check_out) - dt.date.fromisoformat(check_in)).days
        if nights < 1:
            raise ToolError("check_out must be after check_in")
        r = self._rng_for(city)
        hotels: list[dict[str, Any]] = []
        for _ in range(4):
            hid = f"HT-{r.randrange(1000, 9999)}"
            while any(h["hotel_id"] == hid for h in hotels):
                hid = f"HT-{r.randrange(1000, 9999)}"
            h = {"hotel_id": hid, "name": f"{r.choice(_HOTEL_WORDS)} {r.choice(_HOTEL_KINDS)}",
                 "price_per_night": r.randrange(55, 260), "rating": round(r.uniform(3.4, 4.9), 1)}
            self.s["hotels"][hid] = {**h, "city": city}
            hotels.append(h)
        if max_price is not None:
            hotels = [h for h in hotels if int(str(h["price_per_night"])) <= max_price]
        hotels.sort(key=lambda h: int(str(h["price_per_night"])))
        return {"city": city, "nights": nights, "hotels": hotels}

    def do_book_hotel(self, hotel_id: str, check_in: str, check_out: str, guest_name: str,
                      guests: int = 1) -> dict[str, Any]:
        h = self.s["hotels"].get(hotel_id)
        if h is None:
            raise ToolError(f"unknown hotel {hotel_id}")
        ref = self.new_id("BK")
        nights = (dt.date.fromisoformat(check_out) - dt.date.fromisoformat(check_in)).days
        self.s["bookings"][ref] = {"kind": "hotel", "city": h["city"], "status": "confirmed",
                                   "guest": guest_name, "nights": nights, "loyalty": None}
        return {"booking_ref": ref, "hotel": h["name"], "nights": nights,
                "total_eur": nights * h["price_per_night"], "status": "confirmed"}

    def _booking(self, ref: str) -> dict[str, Any]:
        bk = self.s["bookings"].get(ref)
        if bk is None:
            raise ToolError(f"no booking {ref}")
        return dict(bk)

    def do_get_booking(self, booking_ref: str) -> dict[str, Any]:
        return {"booking_ref": booking_ref, **self._booking(booking_ref)}

    def do_cancel_booking(self, booking_ref: str) -> dict[str, Any]:
        bk = self._booking(booking_ref)
        if bk["status"] == "cancelled":
            raise ToolError("booking already cancelled")
        self.s["bookings"][booking_ref]["status"] = "cancelled"
        return {"booking_ref": booking_ref, "status": "cancelled", "refund": "full"}

    def do_add_loyalty_number(self, booking_ref: str, loyalty_number: str) -> dict[str, Any]:
        self._booking(booking_ref)
        self.s["bookings"][booking_ref]["loyalty"] = loyalty_number
        return {"booking_ref": booking_ref, "loyalty_number": loyalty_number, "added": True}

    def do_get_flight_status(self, flight_number: str) -> dict[str, Any]:
        r = self._rng_for(flight_number)
        delay = r.choice((0, 0, 0, 15, 40, 95))
        return {"flight_number": flight_number,
                "status": "on time" if delay == 0 else f"delayed {delay} min",
                "gate": f"{r.choice('ABCDE')}{r.randrange(1, 40)}"}


# ============================================================================ scenarios
def _traveller(b: Builder) -> dict[str, str]:
    return dict(b.backend.s["traveller"])


def _dates(b: Builder) -> tuple[dt.date, dt.date]:
    start = b.today + dt.timedelta(days=b.rng.randrange(1, 40))
    return start, start + dt.timedelta(days=b.rng.randrange(1, 6))


def _two_cities(b: Builder) -> tuple[str, str]:
    a, c = b.sample(CITIES, 2)
    return a[0], c[0]


def _choose(b: Builder, items: list[dict[str, Any]], what: str, label: str) -> dict[str, Any]:
    """The user picks one of ``items`` (already shown); returns the choice."""
    idx = b.pick(0, 1, len(items) - 1) if len(items) > 1 else 0
    ordinal = ("first", "second", "third", "fourth")[idx]
    said = b.pick(f"the {ordinal} one", f"Let's take the {ordinal} {what}.",
                  f"{items[idx][label]}, please", f"I'll go with number {idx + 1}.")
    b.user(said, kind="select")
    return items[idx]


def flight(b: Builder) -> None:
    origin, dest = _two_cities(b)
    day = b.today + dt.timedelta(days=b.rng.randrange(1, 30))
    when, how = b.date_phrase(day)
    cabin = b.pick("economy", "economy", "business")
    extra = "" if cabin == "economy" else " in business class"
    b.user(b.pick(f"Find me a flight from {origin} to {dest} on {when}{extra}.",
                  f"I need to get from {origin} to {dest} on {when}{extra}. What flights are "
                  "there?",
                  f"Any flights {origin} -> {dest} on {when}{extra}?"))
    args = {"origin": origin, "destination": dest, "date": day.isoformat()}
    if cabin != "economy":
        args["cabin"] = cabin
    out = b.call("search_flights", args, derived={"date": how})
    offers = out["offers"]
    b.ask("I found: " + "; ".join(f"{i + 1}) {o['airline']} {o['flight_number']} at "
                                  f"{o['departure'][11:]} for {o['price_eur']} EUR"
                                  for i, o in enumerate(offers)) + ". Which one should I book?")
    offer = _choose(b, offers, "flight", "flight_number")
    t = _traveller(b)
    res = b.call("book_flight", {"offer_id": offer["offer_id"], "passenger_name": t["name"],
                                 "email": t["email"]})
    b.memory["booking"] = res["booking_ref"]
    b.say(f"Booked {res['flight']}; your reference is {res['booking_ref']} and the e-ticket goes "
          f"to {t['email']}.")
    if b.chance(0.4):
        loyalty = f"{b.pick('KX', 'AU', 'BC')}{b.rng.randrange(10**7, 10**8)}"
        b.user(b.pick(f"Please add my frequent flyer number {loyalty} to it.",
                      f"Can you attach loyalty number {loyalty} to that booking?"),
               kind="anaphora")
        b.call("add_loyalty_number", {"booking_ref": res["booking_ref"],
                                      "loyalty_number": loyalty})
        b.say(f"Added {loyalty} to booking {res['booking_ref']}.")


def flight_for_someone(b: Builder) -> None:
    origin, dest = _two_cities(b)
    day = b.today + dt.timedelta(days=b.rng.randrange(2, 30))
    when, how = b.date_phrase(day)
    b.user(b.pick(f"My colleague needs a flight from {origin} to {dest} on {when}. Book the "
                  "earliest one for her.",
                  f"Book the earliest {origin}-{dest} flight on {when} for a colleague of "
                  "mine."))
    out = b.call("search_flights", {"origin": origin, "destination": dest,
                                    "date": day.isoformat()}, derived={"date": how})
    first = out["offers"][0]
    b.ask(f"The earliest is {first['flight_number']} at {first['departure'][11:]}. What is your "
          "colleague's full name and email address for the ticket?")
    f, la = person(b.rng.randrange(1000))
    email = f"{f[0].lower()}.{la.lower()}@{b.pick(*EMAIL_DOMAINS)}"
    b.user(b.pick(f"{f} {la}, {email}", f"Her name is {f} {la} and her email is {email}.",
                  f"It's for {f} {la} - email {email}"), kind="answer")
    res = b.call("book_flight", {"offer_id": first["offer_id"], "passenger_name": f"{f} {la}",
                                 "email": email})
    b.say(f"Booked {res['flight']} for {f} {la}; reference {res['booking_ref']}.")


def hotel(b: Builder) -> None:
    city = b.pick(*CITIES)[0]
    start, end = _dates(b)
    s_when, s_how = b.date_phrase(start, relative=False)
    e_when, e_how = b.date_phrase(end, relative=False)
    guests = b.pick(1, 2, 2, 3)
    g_text = {1: "", 2: b.pick(" for two", " for 2 guests"), 3: " for 3 people"}[guests]
    cheapest = min(h["price_per_night"] for h in b.preview(
        "search_hotels", {"city": city, "check_in": start.isoformat(),
                          "check_out": end.isoformat()})["hotels"])
    budget = b.pick(None, *[x for x in (120, 150, 200) if x >= cheapest])
    bud = f" under {budget} euros a night" if budget else ""
    b.user(b.pick(f"I need a hotel in {city} from {s_when} to {e_when}{g_text}{bud}.",
                  f"Look for hotels in {city}{g_text}, checking in {s_when} and out {e_when}{bud}.",
                  f"Can you find a place to stay in {city} between {s_when} and {e_when}{g_text}"
                  f"{bud}?"))
    args: dict[str, Any] = {"city": city, "check_in": start.isoformat(),
                            "check_out": end.isoformat(), "guests": guests}
    if budget:
        args["max_price"] = budget
    derived = {"check_in": s_how, "check_out": e_how,
               "guests": "two guests" if guests == 2 and "two" in b.last_user else None}
    out = b.call("search_hotels", args, derived=derived)
    if b.chance(0.35):
        end = end + dt.timedelta(days=1)
        e_when, e_how = b.date_phrase(end, relative=False)
        cheapest = out["hotels"][0]["price_per_night"]
        b.ask(f"I found {len(out['hotels'])} hotels, from {cheapest} EUR a night. Shall I book "
              "one?")
        b.user(b.pick(f"Wait, I'm leaving on {e_when}, not before. Search again please.",
                      f"No, make the check-out {e_when}."), kind="correction")
        args["check_out"] = end.isoformat()
        derived["check_out"] = e_how
        out = b.call("search_hotels", args, derived=derived)
    hotels = out["hotels"]
    b.ask("Options: " + "; ".join(f"{i + 1}) {h['name']} ({h['rating']}*) at "
                                  f"{h['price_per_night']} EUR/night"
                                  for i, h in enumerate(hotels)) + ". Which one?")
    h = _choose(b, hotels, "hotel", "name")
    res = b.call("book_hotel", {"hotel_id": h["hotel_id"], "check_in": args["check_in"],
                                "check_out": args["check_out"], "guests": guests,
                                "guest_name": _traveller(b)["name"]}, derived=derived)
    b.memory["booking"] = res["booking_ref"]
    b.say(f"Booked {res['hotel']} for {res['nights']} nights ({res['total_eur']} EUR); "
          f"reference {res['booking_ref']}.")


def vague_hotel(b: Builder) -> None:
    b.user(b.pick("I want to book a hotel.", "Can you sort out a hotel for my next trip?",
                  "I need somewhere to stay."),
           kind="vague_request", label="ask_user", missing=["city", "check_in", "check_out"])
    b.ask("Happy to. Which city, and for which dates?")
    city = b.pick(*CITIES)[0]
    start, end = _dates(b)
    s_when, s_how = b.date_phrase(start, relative=False)
    e_when, e_how = b.date_phrase(end, relative=False)
    if b.chance(0.4):
        b.user(b.pick(f"{city}.", f"In {city}."), kind="answer", label="ask_user",
               missing=["check_in", "check_out"])
        b.ask(f"And when will you arrive in {city} and leave?")
        b.user(b.pick(f"From {s_when} to {e_when}.", f"{s_when} until {e_when}"), kind="answer")
    else:
        b.user(b.pick(f"{city}, {s_when} to {e_when}.", f"In {city}, from {s_when} to {e_when}."),
               kind="answer")
    out = b.call("search_hotels", {"city": city, "check_in": start.isoformat(),
                                   "check_out": end.isoformat()},
                 derived={"check_in": s_how, "check_out": e_how})
    hotels = out["hotels"]
    b.ask(f"The cheapest is {hotels[0]['name']} at {hotels[0]['price_per_night']} EUR a night. "
          "Should I book it?")
    b.user(b.pick("Yes, that's correct.", "Yes, book it.", "Sounds good, go ahead."),
           kind="confirm")
    res = b.call("book_hotel", {"hotel_id": hotels[0]["hotel_id"], "check_in": start.isoformat(),
                                "check_out": end.isoformat(),
                                "guest_name": _traveller(b)["name"]},
                 derived={"check_in": s_how, "check_out": e_how})
    b.say(f"Done: {res['hotel']}, reference {res['booking_ref']}.")


def manage_booking(b: Builder) -> None:
    ref = b.memory.get("booking") or next(iter(b.backend.s["bookings"]))
    if b.chance(0.5) and "booking" not in b.memory:
        b.user(b.pick("Please cancel my booking.", "I need to cancel my reservation.",
                      "Cancel my hotel booking, plans changed."),
               kind="vague_request", label="ask_user", missing=["booking_ref"])
        b.ask("Sure. What is the booking reference?")
        b.user(b.pick(f"It's {ref}.", f"{ref}", f"The reference is {ref}"), kind="answer")
        res = b.call("cancel_booking", {"booking_ref": ref})
        b.say(f"Booking {ref} is cancelled with a {res['refund']} refund.")
        return
    said = ref if "booking" not in b.memory else b.pick(ref, "that booking")
    b.user(b.pick(f"What's the status of booking {ref}?", f"Can you check on {ref} for me?")
           if said == ref else b.pick("Is that booking confirmed?",
                                      "Can you double-check that booking?"),
           kind="request" if said == ref else "anaphora")
    info = b.call("get_booking", {"booking_ref": ref})
    b.say(f"Booking {ref} ({info['kind']}) is {info['status']}.")
    if b.chance(0.6):
        b.user(b.pick("Cancel it please.", "OK, then cancel it.", "Please cancel that one."),
               kind="anaphora")
        res = b.call("cancel_booking", {"booking_ref": ref})
        b.say(f"Cancelled {ref}; refund: {res['refund']}.")


def flight_status(b: Builder) -> None:
    airline, code = b.pick(*_AIRLINES)
    n1, n2 = b.rng.sample(range(100, 9999), 2)
    b.user(b.pick(f"Is flight {code} {n1} on time?", f"What's the status of {code} {n1}?",
                  f"Check {airline} flight {code} {n1} for me."))
    out = b.call("get_flight_status", {"flight_number": f"{code} {n1}"})
    b.say(f"{code} {n1} is {out['status']}, gate {out['gate']}.")
    if b.chance(0.7):
        b.user(b.pick(f"And {code} {n2}?", f"Do the same for {code} {n2}.",
                      f"How about flight {n2}, same airline?"), kind="anaphora")
        how = None if f"{code} {n2}" in b.last_user else "same airline code"
        out = b.call("get_flight_status", {"flight_number": f"{code} {n2}"},
                     derived={"flight_number": how})
        b.say(f"{code} {n2} is {out['status']}.")


def hotels_two_cities(b: Builder) -> None:
    c1, c2 = _two_cities(b)
    start, end = _dates(b)
    s_when, s_how = b.date_phrase(start, relative=False)
    e_when, e_how = b.date_phrase(end, relative=False)
    b.user(b.pick(f"What hotels are free in {c1} from {s_when} to {e_when}?",
                  f"Show me hotels in {c1}, {s_when} - {e_when}."))
    derived = {"check_in": s_how, "check_out": e_how}
    out = b.call("search_hotels", {"city": c1, "check_in": start.isoformat(),
                                   "check_out": end.isoformat()}, derived=derived)
    b.say(f"{len(out['hotels'])} hotels in {c1}; cheapest {out['hotels'][0]['name']}.")
    b.user(b.pick(f"Do the same for {c2}.", f"And in {c2}?", f"Same dates in {c2}, please."),
           kind="anaphora")
    out = b.call("search_hotels", {"city": c2, "check_in": start.isoformat(),
                                   "check_out": end.isoformat()}, derived=derived)
    b.say(f"In {c2} the cheapest is {out['hotels'][0]['name']} at "
          f"{out['hotels'][0]['price_per_night']} EUR.")


def _profile(b: Builder) -> str:
    t = _traveller(b)
    return f"The traveller is {t['name']} ({t['email']})."


DOMAIN = Domain(
    name="travel",
    service="Wayfarer Travel",
    tools=TOOLS,
    backend=TravelBackend,
    scenarios={"flight": flight, "flight_for_someone": flight_for_someone, "hotel": hotel,
               "vague_hotel": vague_hotel, "manage_booking": manage_booking,
               "flight_status": flight_status, "hotels_two_cities": hotels_two_cities},
    infeasible=(
        Infeasible(("Can you also rent me a car at the airport?",
                    "I'll need a rental car when I land, book one please."),
                   "I'm sorry, car rental isn't something I can book; I only handle flights "
                   "and hotels."),
        Infeasible(("Get me travel insurance for the trip.",
                    "Please add travel insurance."),
                   "I can't sell insurance, unfortunately."),
        Infeasible(("Reserve a table for dinner near the hotel.",
                    "Book me a restaurant for the first evening."),
                   "Restaurant reservations are outside what I can do here."),
        Infeasible(("Do I need a visa for this trip?", "Which vaccinations do I need there?"),
                   "I have no tool for entry or health requirements; please check the "
                   "official government site."),
    ),
    profile=_profile,
)

__all__ = ["DOMAIN", "TOOLS", "TravelBackend"]
