"""Email: contacts, sending, inbox, reading, replying, forwarding, folders."""

from __future__ import annotations

from typing import Any

from toolguard_evals.dialogues.framework import (
    Backend,
    Builder,
    Domain,
    Infeasible,
    ToolError,
    choice,
    flag,
    integer,
    strings,
    text,
    tool,
)
from toolguard_evals.dialogues.pools import EMAIL_DOMAINS, SUBJECT_TOPICS, person

TOOLS = (
    tool("search_contacts", "Find address-book entries whose name or email contains the query.",
         "read", "contacts", ["query"], query=text("Name or part of an email.", "person")),
    tool("send_email", "Send a new email.", "write", "send", ["to", "subject", "body"],
         to=strings("Recipient email addresses.", "email", fmt="email"),
         subject=text("Subject line.", "title"),
         body=text("Plain-text body.", "free_text"),
         cc=strings("Addresses in copy.", "email", fmt="email")),
    tool("list_messages", "Messages in a mail folder, newest first.", "read", "inbox",
         ["folder"], folder=choice("Folder.", "inbox", "archive", "spam", "sent"),
         unread_only=flag("Only unread messages.", default=False),
         limit=integer("Most messages to return.", None, minimum=1, maximum=50, default=10)),
    tool("read_message", "Full text of one message.", "read", "inbox", ["message_id"],
         message_id=text("Message id from list_messages.", "identifier")),
    tool("reply_to_message", "Reply to the sender of a message.", "write", "send",
         ["message_id", "body"], message_id=text("Message id.", "identifier"),
         body=text("Reply text.", "free_text")),
    tool("forward_message", "Forward a message to other people with an optional note.", "write",
         "send", ["message_id", "to"], message_id=text("Message id.", "identifier"),
         to=strings("Recipient email addresses.", "email", fmt="email"),
         note=text("Text put above the forwarded message.", "free_text")),
    tool("move_message", "Move a message to another folder.", "write", "organise",
         ["message_id", "folder"], message_id=text("Message id.", "identifier"),
         folder=choice("Target folder.", "inbox", "archive", "spam")),
)


class MailBackend(Backend):
    """An address book of 10 people and an inbox of 6 messages (3 unread)."""

    def setup(self) -> None:
        r = self.rng
        people = []
        for i in r.sample(range(40), 10):
            f, la = person(i + 40 * r.randrange(3))
            people.append({"name": f"{f} {la}",
                           "email": f"{f.lower()}.{la.lower()}@{r.choice(EMAIL_DOMAINS)}"})
        inbox = []
        for k, topic in enumerate(r.sample(SUBJECT_TOPICS, 6)):
            sender = people[r.randrange(len(people))]
            mid = self.unique(lambda: f"msg-{r.getrandbits(32):08x}")
            inbox.append({"message_id": mid, "folder": "inbox",
                          "from": sender["email"], "from_name": sender["name"],
                          "subject": topic.capitalize(), "unread": k < 3,
                          "body": f"Hi, could you send me your notes on the {topic} by "
                                  f"{r.choice(('Monday', 'Wednesday', 'Friday'))}? Thanks, "
                                  f"{sender['name'].split()[0]}"})
        self.s = {"contacts": people, "messages": inbox, "sent": []}

    def _msg(self, message_id: str) -> dict[str, Any]:
        messages: list[dict[str, Any]] = self.s["messages"]
        for m in messages:
            if m["message_id"] == message_id:
                return m
        raise ToolError(f"no message {message_id}")

    def do_search_contacts(self, query: str) -> dict[str, Any]:
        q = query.casefold()
        return {"contacts": [c for c in self.s["contacts"]
                             if q in c["name"].casefold() or q in c["email"]]}

    def _send(self, kind: str, **fields: Any) -> dict[str, Any]:
        mid = self.unique(lambda: f"sent-{self.rng.getrandbits(32):08x}")
        self.s["sent"].append({"id": mid, "kind": kind, **fields})
        return {"sent": True, "message_id": mid}

    def do_send_email(self, to: list[str], subject: str, body: str,
                      cc: list[str] | None = None) -> dict[str, Any]:
        if not to:
            raise ToolError("no recipient")
        return self._send("new", to=to, subject=subject, body=body, cc=cc or [])

    def do_list_messages(self, folder: str, unread_only: bool = False,
                         limit: int = 10) -> dict[str, Any]:
        msgs = [m for m in self.s["messages"] if m["folder"] == folder
                and (m["unread"] or not unread_only)]
        return {"folder": folder, "messages": [
            {k: m[k] for k in ("message_id", "from", "from_name", "subject", "unread")}
            for m in msgs[:limit]]}

    def do_read_message(self, message_id: str) -> dict[str, Any]:
        m = self._msg(message_id)
        m["unread"] = False
        return {k: m[k] for k in ("message_id", "from", "subject", "body")}

    def do_reply_to_message(self, message_id: str, body: str) -> dict[str, Any]:
        m = self._msg(message_id)
        return self._send("reply", to=[m["from"]], subject=f"Re: {m['subject']}", body=body)

    def do_forward_message(self, message_id: str, to: list[str],
                           note: str | None = None) -> dict[str, Any]:
        m = self._msg(message_id)
        return self._send("forward", to=to, subject=f"Fwd: {m['subject']}", body=note or "")

    def do_move_message(self, message_id: str, folder: str) -> dict[str, Any]:
        m = self._msg(message_id)
        if m["folder"] == folder:
            raise ToolError(f"message is already in {folder}")
        m["folder"] = folder
        return {"message_id": message_id, "folder": folder}


# ============================================================================ scenarios
_NEWS = (
    ("the venue is confirmed for the 3rd of June", "Venue confirmed"),
    ("I'll be 15 minutes late tomorrow", "Running late"),
    ("the invoice was paid this morning", "Invoice paid"),
    ("the slides are in the shared folder now", "Slides uploaded"),
    ("we need to move our call to next week", "Call moved"),
    ("the client approved the second draft", "Draft approved"),
)


def _someone(b: Builder) -> dict[str, str]:
    return dict(b.pick(*b.backend.s["contacts"]))


def email_contact(b: Builder) -> None:
    c = _someone(b)
    first = c["name"].split()[0]
    news, subject = b.pick(*_NEWS)
    b.user(b.pick(f"Email {first} that {news}.", f"Let {c['name']} know by email that {news}.",
                  f"Write to {first}: {news}."))
    query = first if first in b.last_user else c["name"]
    hits = b.call("search_contacts", {"query": query}, reuse=True)
    email = hits["contacts"][0]["email"]
    body = f"Hi {first}, {news}. Best regards"
    b.call("send_email", {"to": [email], "subject": subject, "body": body},
           derived={"subject": "composed from the request", "body": "composed from the request"})
    b.say(f"Sent '{subject}' to {email}.")
    if b.chance(0.5):
        c2 = _someone(b)
        if c2["email"] == email:
            return
        b.user(b.pick(f"Send the same to {c2['name']}.", f"Tell {c2['name']} too."),
               kind="anaphora")
        hits2 = b.call("search_contacts", {"query": c2["name"]}, reuse=True)
        e2 = hits2["contacts"][0]["email"]
        body2 = f"Hi {c2['name'].split()[0]}, {news}. Best regards"
        b.call("send_email", {"to": [e2], "subject": subject, "body": body2},
               derived={"subject": "same as before", "body": "same message, new greeting"})
        b.say(f"Also sent it to {e2}.")


def email_address_given(b: Builder) -> None:
    f, la = person(b.rng.randrange(1000))
    addr = f"{f[0].lower()}{la.lower()}@{b.pick(*EMAIL_DOMAINS)}"
    subject = b.pick("Invoice 2291", "Signed contract", "Tuesday's workshop", "Parking permit")
    body = b.pick("The payment is scheduled for Friday.", "Please find the signed copy attached.",
                  "The workshop starts at 9 sharp in room B.", "My permit number is PP-7710.")
    b.user(b.pick(f"Send an email to {addr} with the subject '{subject}' saying \"{body}\"",
                  f"Mail {addr}, subject: {subject}. Text: {body}"))
    b.call("send_email", {"to": [addr], "subject": subject, "body": body})
    b.say(f"Sent to {addr}.")


def vague_email(b: Builder) -> None:
    rel = b.pick("my manager", "the new intern", "our accountant", "my team lead")
    b.user(b.pick(f"Send an email to {rel}.", f"Can you write to {rel} for me?",
                  f"Drop {rel} a line."),
           kind="vague_request", label="ask_user", missing=["to", "body"])
    b.ask(f"Sure. Who is {rel} (name or address), and what should the email say?")
    c = _someone(b)
    news, subject = b.pick(*_NEWS)
    b.user(b.pick(f"It's {c['name']}. Tell them {news}.", f"{c['name']} - say that {news}."),
           kind="answer")
    hits = b.call("search_contacts", {"query": c["name"]}, reuse=True)
    email = hits["contacts"][0]["email"]
    b.call("send_email", {"to": [email], "subject": subject,
                          "body": f"Hello, {news}. Kind regards"},
           derived={"subject": "composed from the request", "body": "composed from the request"})
    b.say(f"Sent to {c['name']} ({email}).")


def triage(b: Builder) -> None:
    b.user(b.pick("Do I have unread emails?", "What's new in my inbox?",
                  "Show me my unread mail."))
    out = b.call("list_messages", {"folder": "inbox", "unread_only": True})
    msgs = out["messages"]
    b.ask("Unread: " + "; ".join(f"{i + 1}) '{m['subject']}' from {m['from_name']}"
                                 for i, m in enumerate(msgs)) + ". Open one?")
    idx = b.pick(*range(min(3, len(msgs))))
    m = msgs[idx]
    b.user(b.pick(f"Open the one from {m['from_name'].split()[0]}.",
                  f"the {('first', 'second', 'third')[idx]} one",
                  f"Read me '{m['subject']}'."), kind="select")
    full = b.call("read_message", {"message_id": m["message_id"]})
    b.say(f"{m['from_name']} writes: {full['body']}")
    day = b.pick("Monday", "Thursday", "tomorrow")
    action = b.pick("reply", "forward", "archive")
    if action == "reply":
        b.user(b.pick(f"Reply that I agree and will send the notes on {day}.",
                      f"Answer: fine, the notes come on {day}."), kind="anaphora")
        b.call("reply_to_message", {"message_id": m["message_id"],
                                    "body": f"Sounds good - I'll send the notes on {day}."},
               derived={"body": "composed from the request"})
        b.say("Reply sent.")
    elif action == "forward":
        c = _someone(b)
        b.user(b.pick(f"Forward it to {c['name']}.", f"Send it on to {c['name']}, please."),
               kind="anaphora")
        hits = b.call("search_contacts", {"query": c["name"]}, reuse=True)
        b.call("forward_message", {"message_id": m["message_id"],
                                   "to": [hits["contacts"][0]["email"]]})
        b.say(f"Forwarded to {c['name']}.")
    else:
        b.user(b.pick("Archive it.", "Move it to the archive."), kind="anaphora")
        b.call("move_message", {"message_id": m["message_id"], "folder": "archive"})
        b.say("Archived.")


def spam(b: Builder) -> None:
    msgs = b.backend.s["messages"]
    m = b.pick(*msgs[3:])
    sender = m["from_name"]
    b.user(b.pick(f"Move the email from {sender} about '{m['subject']}' to spam.",
                  f"That '{m['subject']}' mail from {sender} is spam, move it."))
    out = b.call("list_messages", {"folder": "inbox"})
    mid = m["message_id"]
    assert any(x["message_id"] == mid for x in out["messages"])
    b.call("move_message", {"message_id": mid, "folder": "spam"})
    b.say(f"Moved '{m['subject']}' to spam.")


DOMAIN = Domain(
    name="mail",
    service="Quillpost Mail",
    tools=TOOLS,
    backend=MailBackend,
    scenarios={"email_contact": email_contact, "email_address_given": email_address_given,
               "vague_email": vague_email, "triage": triage, "spam": spam},
    infeasible=(
        Infeasible(("Call my mother and tell her I'm on my way.",
                    "Phone the client and leave a voicemail."),
                   "I can only send and manage emails; I can't place phone calls."),
        Infeasible(("Unsubscribe me from every newsletter.", "Block all mail from that domain "
                                                             "forever."),
                   "I have no tool for subscriptions or sender blocking."),
        Infeasible(("Set an out-of-office reply for next week.",
                    "Turn on my vacation responder."),
                   "Automatic replies can't be set with my tools, sorry."),
        Infeasible(("Recall the email I sent an hour ago.", "Unsend my last message."),
                   "Sent emails can't be recalled with the tools I have."),
    ),
    profile=None,
)

__all__ = ["DOMAIN", "TOOLS", "MailBackend"]
