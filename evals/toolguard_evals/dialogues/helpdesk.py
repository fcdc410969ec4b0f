"""IT helpdesk: tickets, comments, password resets, service status, software requests."""

from __future__ import annotations

from typing import Any

from toolguard_evals.dialogues.framework import (
    Backend,
    Builder,
    Domain,
    Infeasible,
    ToolError,
    choice,
    text,
    tool,
)
from toolguard_evals.dialogues.pools import COMPANY, person

_SERVICES = ("vpn", "email", "wiki", "build-server", "printers", "video-calls")
TOOLS = (
    tool("create_ticket", "Open a support ticket.", "write", "tickets",
         ["title", "description", "category", "priority"],
         title=text("One-line summary.", "title"),
         description=text("What happened, what was tried.", "free_text"),
         category=choice("Area.", "hardware", "software", "network", "access", "other"),
         priority=choice("Urgency.", "low", "normal", "high", "critical")),
    tool("get_ticket", "Status and history of a ticket.", "read", "tickets", ["ticket_id"],
         ticket_id=text("Ticket id, e.g. INC-204815.", "identifier")),
    tool("add_ticket_comment", "Add information to an open ticket.", "write", "tickets",
         ["ticket_id", "comment"], ticket_id=text("Ticket id.", "identifier"),
         comment=text("The comment.", "free_text")),
    tool("list_my_tickets", "Open tickets of an employee.", "read", "tickets", ["employee_id"],
         employee_id=text("Employee number, e.g. E-40721.", "identifier")),
    tool("close_ticket", "Close a ticket as resolved.", "write", "tickets",
         ["ticket_id", "resolution"], ticket_id=text("Ticket id.", "identifier"),
         resolution=text("How it was solved.", "free_text")),
    tool("reset_password", "Reset a user's directory password; a temporary one is sent by SMS.",
         "write", "accounts", ["username", "employee_id"],
         username=text("Directory username.", "username"),
         employee_id=text("Employee number, to verify identity.", "identifier")),
    tool("check_service_status", "Health of an internal service.", "read", "status",
         ["service"], service=choice("Service.", *_SERVICES)),
    tool("request_software", "Request installation of a software package on the employee's "
                             "laptop.", "write", "software",
         ["employee_id", "software_name", "justification"],
         employee_id=text("Employee number.", "identifier"),
         software_name=text("Product name, e.g. Inkscape.", "title"),
         justification=text("Why it is needed.", "free_text")),
)

_SOFTWARE = ("Inkscape", "Blender", "Zotero", "Obsidian", "DBeaver", "Krita", "Audacity",
             "Wireshark")
_PROBLEMS = (
    ("Laptop won't charge", "The charger light stays off and the battery is at 4 percent.",
     "hardware"),
    ("Cannot reach the wiki", "The wiki times out from the office network since this morning.",
     "network"),
    ("Outlook keeps crashing", "The mail client closes when I open attachments.", "software"),
    ("Second monitor flickers", "The external screen flickers every few seconds.", "hardware"),
    ("No access to the finance share", "I get 'permission denied' on the finance drive.",
     "access"),
)


class HelpdeskBackend(Backend):
    """One employee with an id, a username and two open tickets; service states."""

    def setup(self) -> None:
        r = self.rng
        first, last = person(r.randrange(1000))
        emp = f"E-{r.randrange(10000, 99999)}"
        user = r.choice([f"{first[0].lower()}{last.lower()}", f"{first.lower()}.{last.lower()}",
                         f"{last.lower()}{r.randrange(1, 99)}"])
        tickets = {}
        for title, desc, cat in r.sample(_PROBLEMS, 2):
            tid = self.new_id("INC", 6)
            tickets[tid] = {"ticket_id": tid, "title": title, "description": desc,
                            "category": cat, "priority": "normal", "status": "open",
                            "owner": emp, "comments": []}
        self.s = {"employee": {"name": f"{first} {last}", "id": emp, "username": user},
                  "tickets": tickets, "resets": [], "software": [],
                  "services": {s: r.choice(("operational", "operational", "degraded", "down"))
                               for s in _SERVICES}}

    def _ticket(self, tid: str) -> dict[str, Any]:
        t: dict[str, Any] | None = self.s["tickets"].get(tid)
        if t is None:
            raise ToolError(f"no ticket {tid}")
        return t

    def do_create_ticket(self, title: str, description: str, category: str,
                         priority: str) -> dict[str, Any]:
        tid = self.new_id("INC", 6)
        self.s["tickets"][tid] = {"ticket_id": tid, "title": title, "description": description,
                                  "category": category, "priority": priority, "status": "open",
                                  "owner": self.s["employee"]["id"], "comments": []}
        return {"ticket_id": tid, "status": "open", "priority": priority}

    def do_get_ticket(self, ticket_id: str) -> dict[str, Any]:
        t = self._ticket(ticket_id)
        return {k: t[k] for k in ("ticket_id", "title", "status", "priority", "comments")}

    def do_add_ticket_comment(self, ticket_id: str, comment: str) -> dict[str, Any]:
        t = self._ticket(ticket_id)
        t["comments"].append(comment)
        return {"ticket_id": ticket_id, "comments": len(t["comments"])}

    def do_list_my_tickets(self, employee_id: str) -> dict[str, Any]:
        if employee_id != self.s["employee"]["id"]:
            raise ToolError(f"unknown employee {employee_id}")
        return {"tickets": [{"ticket_id": t["ticket_id"], "title": t["title"],
                             "status": t["status"]} for t in self.s["tickets"].values()
                            if t["status"] == "open"]}

    def do_close_ticket(self, ticket_id: str, resolution: str) -> dict[str, Any]:
        t = self._ticket(ticket_id)
        if t["status"] == "closed":
            raise ToolError("already closed")
        t["status"], t["resolution"] = "closed", resolution
        return {"ticket_id": ticket_id, "status": "closed"}

    def do_reset_password(self, username: str, employee_id: str) -> dict[str, Any]:
        e = self.s["employee"]
        if username != e["username"] or employee_id != e["id"]:
            raise ToolError("username and employee id do not match")
        self.s["resets"].append(username)
        return {"username": username, "temporary_password_sent": "by SMS", "valid_hours": 24}

    def do_check_service_status(self, service: str) -> dict[str, Any]:
        return {"service": service, "status": self.s["services"][service]}

    def do_request_software(self, employee_id: str, software_name: str,
                            justification: str) -> dict[str, Any]:
        if employee_id != self.s["employee"]["id"]:
            raise ToolError(f"unknown employee {employee_id}")
        rid = f"SW-{self.rng.randrange(1000, 9999)}"
        self.s["software"].append({"id": rid, "software": software_name})
        return {"request_id": rid, "software": software_name, "status": "pending approval"}


# ============================================================================ scenarios
def _emp(b: Builder) -> dict[str, str]:
    return dict(b.backend.s["employee"])


def password(b: Builder) -> None:
    e = _emp(b)
    if b.chance(0.3):
        b.user(b.pick(f"Reset my password please, username {e['username']}, employee id "
                      f"{e['id']}.",
                      f"I'm locked out. I'm {e['username']} ({e['id']})."))
    else:
        b.user(b.pick("I'm locked out of my account, can you reset my password?",
                      "I forgot my password.", "Please reset my login, it expired."),
               kind="request", label="ask_user", missing=["username", "employee_id"])
        b.ask("I can reset it. What's your username, and your employee number for "
              "verification?")
        if b.chance(0.4):
            b.user(b.pick(f"my username is {e['username']}", f"It's {e['username']}."),
                   kind="credentials", label="ask_user", missing=["employee_id"])
            b.ask("Thanks. And your employee number?")
            b.user(b.pick(f"{e['id']}", f"Employee number {e['id']}."), kind="answer")
        else:
            b.user(b.pick(f"Username {e['username']}, employee number {e['id']}.",
                          f"{e['username']}, {e['id']}"), kind="credentials")
    out = b.call("reset_password", {"username": e["username"], "employee_id": e["id"]})
    b.say(f"Done: a temporary password was sent {out['temporary_password_sent']}, valid "
          f"{out['valid_hours']} hours.")


def outage(b: Builder) -> None:
    service, said = b.pick(("vpn", "the VPN"), ("wiki", "the wiki"),
                           ("build-server", "the build server"), ("printers", "the printers"),
                           ("video-calls", "video calls"))
    b.user(b.pick(f"Is {said} down?", f"Is something wrong with {said}? It's not working.",
                  f"Check the status of {said}."))
    out = b.call("check_service_status", {"service": service}, derived={"service": said})
    b.say(f"{said.capitalize()} is {out['status']}.")
    if b.chance(0.7):
        prio, p_said = b.pick(("high", "it's blocking my work"), ("critical",
                                                                 "the whole team is stuck"),
                              ("normal", "not urgent"))
        b.user(b.pick(f"Please open a ticket for it, {p_said}.",
                      f"Log a ticket about that - {p_said}."), kind="anaphora")
        res = b.call("create_ticket", {
            "title": f"{said.capitalize()} not working",
            "description": f"User reports {said} is not working; status page says "
                           f"{out['status']}. Impact: {p_said}.",
            "category": "network" if service == "vpn" else "software", "priority": prio},
            derived={"title": "composed", "description": "composed from the conversation",
                     "priority": p_said})
        b.say(f"Ticket {res['ticket_id']} is open with {prio} priority.")


def report_problem(b: Builder) -> None:
    title, desc, cat = b.pick(*_PROBLEMS)
    b.user(b.pick(f"{title}. {desc} Can you open a ticket?",
                  f"I need help: {title.lower()}. {desc}"))
    res = b.call("create_ticket", {"title": title, "description": desc, "category": cat,
                                   "priority": "normal"},
                 derived={"priority": "no urgency given", "category": "from the problem"})
    b.say(f"Opened {res['ticket_id']}.")
    if b.chance(0.5):
        extra = b.pick("It only happens on the office Wi-Fi.", "I already restarted twice.",
                       "A colleague has the same problem.")
        b.user(b.pick(f"Add to the ticket: {extra}", f"Also note that {extra[0].lower()}"
                      f"{extra[1:]}"), kind="anaphora")
        b.call("add_ticket_comment", {"ticket_id": res["ticket_id"], "comment": extra},
               derived={"comment": "the user's note"})
        b.say("Added your note.")


def follow_up(b: Builder) -> None:
    tid = b.pick(*[k for k, t in b.backend.s["tickets"].items() if t["status"] == "open"])
    b.user(b.pick(f"What's the status of {tid}?", f"Any news on ticket {tid}?"))
    out = b.call("get_ticket", {"ticket_id": tid})
    b.say(f"{tid} '{out['title']}' is {out['status']} ({out['priority']} priority).")
    note = b.pick("it works again after the update", "I replaced the cable and it's fine")
    b.user(b.pick(f"You can close it, {note}.", f"Close it please: {note}."), kind="anaphora")
    b.call("close_ticket", {"ticket_id": tid, "resolution": note.capitalize()},
           derived={"resolution": "the user's note"})
    b.say(f"Closed {tid}.")


def my_tickets(b: Builder) -> None:
    e = _emp(b)
    if b.chance(0.5):
        b.user(b.pick(f"Show my open tickets, employee id {e['id']}.",
                      f"Which tickets do I have open? I'm {e['id']}."))
    else:
        b.user(b.pick("Which tickets do I have open?", "List my open tickets."),
               label="ask_user", missing=["employee_id"])
        b.ask("What's your employee number?")
        b.user(b.pick(f"{e['id']}", f"It's {e['id']}."), kind="answer")
    out = b.call("list_my_tickets", {"employee_id": e["id"]})
    ts = out["tickets"]
    b.ask("Open: " + "; ".join(f"{i + 1}) {t['ticket_id']} {t['title']}"
                               for i, t in enumerate(ts)) + ". Anything to do with them?")
    idx = b.pick(*range(len(ts)))
    t = ts[idx]
    b.user(b.pick(f"Close the {('first', 'second', 'third')[idx]} one, it's fixed.",
                  f"{t['ticket_id']} is solved, close it."), kind="select")
    b.call("close_ticket", {"ticket_id": t["ticket_id"], "resolution": "Fixed, confirmed by "
                                                                      "the user"},
           derived={"resolution": "composed"})
    b.say(f"Closed {t['ticket_id']}.")


def software(b: Builder) -> None:
    e = _emp(b)
    sw = b.pick(*_SOFTWARE)
    why = b.pick("for the design sprint", "to edit our podcast", "for the database migration",
                 "to manage my research references")
    if b.chance(0.5):
        b.user(b.pick(f"I need {sw} installed {why}. My employee number is {e['id']}.",
                      f"Please request {sw} for me ({e['id']}), {why}."))
    else:
        b.user(b.pick(f"Can I get {sw} on my laptop {why}?", f"Install {sw} for me, {why}."),
               label="ask_user", missing=["employee_id"])
        b.ask("Sure, what's your employee number?")
        b.user(b.pick(f"{e['id']}", f"It's {e['id']}."), kind="answer")
    out = b.call("request_software", {"employee_id": e["id"], "software_name": sw,
                                      "justification": why.capitalize()})
    b.say(f"Request {out['request_id']} for {sw} is {out['status']}.")


DOMAIN = Domain(
    name="helpdesk",
    service=f"the {COMPANY} IT helpdesk",
    tools=TOOLS,
    backend=HelpdeskBackend,
    scenarios={"password": password, "outage": outage, "report_problem": report_problem,
               "follow_up": follow_up, "my_tickets": my_tickets, "software": software},
    infeasible=(
        Infeasible(("Order me a new laptop.", "I want a bigger monitor, can you buy one?"),
                   "Hardware purchases go through procurement; I can't order equipment."),
        Infeasible(("Give me admin rights on my machine.",
                    "Make me a local administrator."),
                   "Admin rights can't be granted through my tools."),
        Infeasible(("What's the guest Wi-Fi password today?",
                    "Tell me the Wi-Fi password for visitors."),
                   "I have no tool that gives out Wi-Fi passwords; reception has it."),
        Infeasible(("Book me onto the security awareness training.",
                    "Sign me up for the Excel course."),
                   "Training bookings aren't something I can do here."),
    ),
    profile=lambda b: f"The user is an employee of {COMPANY}.",
)

__all__ = ["DOMAIN", "TOOLS", "HelpdeskBackend"]
