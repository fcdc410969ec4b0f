"""Banking: sign-in with username and password, accounts, transfers, payees, cards, FX."""

from __future__ import annotations

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
from toolguard_evals.dialogues.pools import PASSWORD_WORDS, USER_WORDS, person
from toolguard_evals.dialogues.records import Label, TurnKind

_TOKEN = text("Session token returned by bank_login.", "secret")
TOOLS = (
    tool("bank_login", "Sign in to online banking; returns a session token valid for 30 minutes.",
         "write", "session", ["username", "password"],
         username=text("Online-banking username.", "username"),
         password=text("Online-banking password.", "password")),
    tool("list_accounts", "List the signed-in customer's accounts (id, type, nickname).",
         "read", "accounts", ["session_token"], session_token=_TOKEN),
    tool("get_balance", "Current balance of one account.", "read", "accounts",
         ["session_token", "account_id"], session_token=_TOKEN,
         account_id=text("Account id from list_accounts, e.g. ACC-40211.", "identifier")),
    tool("list_transactions", "Recent transactions of one account, newest first.", "read",
         "accounts", ["session_token", "account_id"], session_token=_TOKEN,
         account_id=text("Account id from list_accounts, e.g. ACC-40211.", "identifier"),
         limit=integer("How many transactions to return (1-50).", None, minimum=1, maximum=50,
                       default=10)),
    tool("list_payees", "Saved payees of the customer (name and IBAN).", "read", "payees",
         ["session_token"], session_token=_TOKEN),
    tool("add_payee", "Save a new payee so money can be sent to them.", "write", "payees",
         ["session_token", "payee_name", "iban"], session_token=_TOKEN,
         payee_name=text("Full name of the payee.", "person"),
         iban=text("The payee's IBAN, without spaces.", "identifier")),
    tool("send_money", "Send money from one of the customer's accounts to an IBAN.", "write",
         "payments", ["session_token", "from_account", "to_iban", "amount"],
         session_token=_TOKEN,
         from_account=text("Account id to pay from.", "identifier"),
         to_iban=text("IBAN of the recipient, without spaces.", "identifier"),
         amount=number("Amount to send.", minimum=0.01),
         currency=choice("Currency of the amount.", "EUR", "GBP", "CHF", "USD", default="EUR"),
         reference=text("Payment reference shown to the recipient.", "free_text")),
    tool("list_cards", "The customer's payment cards (last four digits, type, status).", "read",
         "cards", ["session_token"], session_token=_TOKEN),
    tool("block_card", "Block a payment card at once (lost, stolen or damaged).", "write",
         "cards", ["session_token", "card_last_four", "reason"], session_token=_TOKEN,
         card_last_four=text("Last four digits of the card.", "code"),
         reason=choice("Why the card is blocked.", "lost", "stolen", "damaged")),
    tool("convert_currency", "Convert an amount between currencies at today's bank rate.",
         "read", "fx", ["amount", "from_currency", "to_currency"],
         amount=number("Amount to convert.", minimum=0),
         from_currency=text("ISO 4217 code of the source currency.", "code"),
         to_currency=text("ISO 4217 code of the target currency.", "code")),
)

_RATES = {"EUR": 1.0, "GBP": 0.86, "CHF": 0.95, "USD": 1.09, "NOK": 11.52, "SEK": 11.31,
          "PLN": 4.31, "JPY": 161.4, "DKK": 7.46}
_CURRENCY_NAMES = {"GBP": ("British pounds", "pounds sterling"), "CHF": ("Swiss francs",),
                   "USD": ("US dollars", "dollars"), "NOK": ("Norwegian kroner",),
                   "SEK": ("Swedish kronor",), "PLN": ("Polish zloty",), "JPY": ("Japanese yen",
                                                                                  "yen"),
                   "DKK": ("Danish kroner",), "EUR": ("euros",)}


def _iban(rng: Any, country: str = "DE") -> str:
    return country + "".join(str(rng.randrange(10)) for _ in range(20))


class BankBackend(Backend):
    """One customer with two or three accounts, payees and cards."""

    def setup(self) -> None:
        r = self.rng
        first, last = person(r.randrange(1000))
        user = self.pick_username(first, last)
        self.s = {
            "customer": {"name": f"{first} {last}", "username": user,
                         "password": f"{r.choice(PASSWORD_WORDS)}-{r.choice(PASSWORD_WORDS)}"
                                     f"-{r.randrange(10, 99)}"},
            "sessions": [],
            "accounts": {},
            "payees": [],
            "cards": [],
            "transfers": [],
        }
        for kind in ("checking", "savings", *(["joint"] if r.random() < 0.4 else [])):
            acc = self.new_id("ACC")
            txs = [{"date": f"2026-0{1 + i % 8}-{10 + i:02d}",
                    "amount": round(r.uniform(-180, 90), 2),
                    "counterparty": f"{person(r.randrange(1000))[1]} "
                                    f"{r.choice(['Market', 'GmbH', 'Ltd', 'Cafe'])}"}
                   for i in range(12)]
            self.s["accounts"][acc] = {"type": kind, "balance": round(r.uniform(1500, 9000), 2),
                                       "currency": "EUR", "transactions": txs}
        taken = {self.s["customer"]["name"]}
        while len(self.s["payees"]) < 3:
            f, la = person(r.randrange(1000))
            if f"{f} {la}" not in taken:
                taken.add(f"{f} {la}")
                self.s["payees"].append({"name": f"{f} {la}", "iban": _iban(r)})
        self.s["cards"] = [
            {"last_four": self.unique(lambda: f"{r.randrange(1000, 9999)}"),
             "type": "Visa debit", "status": "active"},
            {"last_four": self.unique(lambda: f"{r.randrange(1000, 9999)}"),
             "type": "Mastercard credit",
             "status": "active"},
        ]

    def pick_username(self, first: str, last: str) -> str:
        r = self.rng
        return r.choice([f"{first.lower()}.{last.lower()}", f"{first[0].lower()}{last.lower()}"
                         f"{r.randrange(10, 99)}", f"{r.choice(USER_WORDS)}_{first.lower()}"])

    def _session(self, token: str) -> None:
        if token not in self.s["sessions"]:
            raise ToolError("invalid or expired session token")

    def _account(self, account_id: str) -> dict[str, Any]:
        acc = self.s["accounts"].get(account_id)
        if acc is None:
            raise ToolError(f"no account {account_id}")
        return dict(acc)

    def do_bank_login(self, username: str, password: str) -> dict[str, Any]:
        c = self.s["customer"]
        if username != c["username"] or password != c["password"]:
            raise ToolError("wrong username or password")
        token = self.unique(lambda: f"sess_{self.rng.getrandbits(48):012x}")
        self.s["sessions"].append(token)
        return {"session_token": token, "customer": c["name"], "expires_in_minutes": 30}

    def do_list_accounts(self, session_token: str) -> dict[str, Any]:
        self._session(session_token)
        return {"accounts": [{"account_id": k, "type": v["type"], "currency": v["currency"]}
                             for k, v in self.s["accounts"].items()]}

    def do_get_balance(self, session_token: str, account_id: str) -> dict[str, Any]:
        self._session(session_token)
        acc = self._account(account_id)
        return {"account_id": account_id, "balance": acc["balance"], "currency": "EUR"}

    def do_list_transactions(self, session_token: str, account_id: str,
                             limit: int = 10) -> dict[str, Any]:
        self._session(session_token)
        acc = self._account(account_id)
        return {"account_id": account_id, "transactions": acc["transactions"][-limit:][::-1]}

    def do_list_payees(self, session_token: str) -> dict[str, Any]:
        self._session(session_token)
        return {"payees": list(self.s["payees"])}

    def do_add_payee(self, session_token: str, payee_name: str, iban: str) -> dict[str, Any]:
        self._session(session_token)
        if any(p["iban"] == iban for p in self.s["payees"]):
            raise ToolError("payee already saved")
        self.s["payees"].append({"name": payee_name, "iban": iban})
        return {"saved": True, "payee": {"name": payee_name, "iban": iban}}

    def do_send_money(self, session_token: str, from_account: str, to_iban: str,
                          amount: float, currency: str = "EUR",
                          reference: str = "") -> dict[str, Any]:
        self._session(session_token)
        acc = self.s["accounts"].get(from_account)
        if acc is None:
            raise ToolError(f"no account {from_account}")
        eur = amount / _RATES[currency]
        if eur > acc["balance"]:
            raise ToolError("insufficient funds")
        acc["balance"] = round(acc["balance"] - eur, 2)
        tid = self.new_id("TRF", 6)
        self.s["transfers"].append({"id": tid, "from": from_account, "to": to_iban,
                                    "amount": amount, "currency": currency,
                                    "reference": reference})
        return {"transfer_id": tid, "status": "executed", "new_balance": acc["balance"]}

    def do_list_cards(self, session_token: str) -> dict[str, Any]:
        self._session(session_token)
        return {"cards": [dict(c) for c in self.s["cards"]]}

    def do_block_card(self, session_token: str, card_last_four: str,
                      reason: str) -> dict[str, Any]:
        self._session(session_token)
        for c in self.s["cards"]:
            if c["last_four"] == card_last_four:
                c["status"] = f"blocked ({reason})"
                return {"card": card_last_four, "status": c["status"],
                        "replacement": "a new card is sent within 5 working days"}
        raise ToolError(f"no card ending {card_last_four}")

    def do_convert_currency(self, amount: float, from_currency: str,
                            to_currency: str) -> dict[str, Any]:
        if from_currency not in _RATES or to_currency not in _RATES:
            raise ToolError("unsupported currency")
        value = amount / _RATES[from_currency] * _RATES[to_currency]
        return {"amount": amount, "from": from_currency, "to": to_currency,
                "converted": round(value, 2), "rate": round(_RATES[to_currency]
                                                           / _RATES[from_currency], 4)}


# ============================================================================ scenarios
def _customer(b: Builder) -> dict[str, Any]:
    return dict(b.backend.s["customer"])


def _login(b: Builder) -> str:
    c = _customer(b)
    out = b.call("bank_login", {"username": c["username"], "password": c["password"]})
    b.memory["token"] = out["session_token"]
    return str(out["session_token"])


def _open(b: Builder, request: str, *, kind: TurnKind = "request",
          label_if_known: Label = "proceed") -> str:
    """Open the request turn; ask for credentials first when there is no session.

    Returns the session token (the request's work continues in the current turn).
    """
    if "token" in b.memory:
        b.user(request, kind=kind, label=label_if_known)
        return str(b.memory["token"])
    c = _customer(b)
    style = b.pick("inline", "ask", "ask", "ask_split")
    if style == "inline":
        b.user(b.pick(
            f"{request} My username is {c['username']} and the password is {c['password']}.",
            f"Username {c['username']}, password {c['password']}. {request}",
            f"{request} (login: {c['username']} / {c['password']})",
        ), kind=kind)
        return _login(b)
    b.user(request, kind=kind, label="ask_user", missing=["username", "password"])
    b.ask(b.pick("Sure. To do that I need to sign you in first: what are your online-banking "
                 "username and password?",
                 "I can help with that once you're signed in. Could you give me your username "
                 "and password?"))
    if style == "ask_split":
        b.user(b.pick(f"It's {c['username']}.", f"username is {c['username']}",
                      f"{c['username']}"), kind="credentials", label="ask_user",
               missing=["password"])
        b.ask("Thanks. And your password?")
        b.user(b.pick(f"{c['password']}", f"The password is {c['password']}",
                      f"it's {c['password']}"), kind="credentials")
    else:
        b.user(b.pick(
            f"my username is {c['username']} and my password is {c['password']}",
            f"Username: {c['username']}, password: {c['password']}",
            f"{c['username']} / {c['password']}",
            f"Sure, it's {c['username']}, password {c['password']}.",
        ), kind="credentials")
    return _login(b)


def _accounts(b: Builder, token: str) -> list[dict[str, Any]]:
    if "accounts" in b.memory:
        return list(b.memory["accounts"])
    out = b.call("list_accounts", {"session_token": token})
    b.memory["accounts"] = out["accounts"]
    return list(out["accounts"])


def balance(b: Builder) -> None:
    kind = b.pick("checking", "savings")
    token = _open(b, b.pick(f"How much money is in my {kind} account?",
                            f"What's the balance on my {kind} account right now?",
                            f"Can you check my {kind} balance?"))
    acc = next(a for a in _accounts(b, token) if a["type"] == kind)
    out = b.call("get_balance", {"session_token": token, "account_id": acc["account_id"]})
    b.say(f"Your {kind} account {acc['account_id']} holds {out['balance']:.2f} EUR.")
    if b.chance(0.6):
        other = "savings" if kind == "checking" else "checking"
        acc2 = next(a for a in _accounts(b, token) if a["type"] == other)
        b.memory["_last_account"] = acc2["account_id"]
        b.user(b.pick(f"And the {other} one?", f"What about {other}?",
                      f"Same for my {other} account please."), kind="anaphora")
        out2 = b.call("get_balance", {"session_token": token, "account_id": acc2["account_id"]})
        b.say(f"Your {other} account {acc2['account_id']} holds {out2['balance']:.2f} EUR.")
    if b.chance(0.4):
        b.user(b.pick("Show me the latest 4 transactions there.",
                      "What were the last 4 payments on it?"), kind="anaphora")
        last = b.memory.get("_last_account", acc["account_id"])
        b.call("list_transactions", {"session_token": token, "account_id": last, "limit": 4})
        b.say(f"Those are the 4 most recent transactions of {last}.")


def transactions(b: Builder) -> None:
    kind = b.pick("checking", "savings")
    n = b.pick(3, 5, 8)
    token = _open(b, b.pick(f"Show me the last {n} transactions on my {kind} account.",
                            f"What were my {n} most recent {kind} transactions?",
                            f"List {n} latest payments from {kind}, please."))
    accs = _accounts(b, token)
    acc = next(a for a in accs if a["type"] == kind)
    out = b.call("list_transactions", {"session_token": token, "account_id": acc["account_id"],
                                       "limit": n})
    top = out["transactions"][0]
    b.say(f"Here are your last {n} {kind} transactions; the newest is {top['amount']} EUR "
          f"with {top['counterparty']} on {top['date']}.")
    if b.chance(0.5):
        other = next(a for a in accs if a["type"] != kind)
        b.user(b.pick(f"Do the same for my {other['type']} account.",
                      f"And for {other['type']}?"), kind="anaphora")
        b.call("list_transactions", {"session_token": token, "account_id": other["account_id"],
                                     "limit": n}, derived={"limit": "same as before"})
        b.say(f"Done: those are the last {n} transactions of {other['account_id']}.")


def pay_payee(b: Builder) -> None:
    payees = b.backend.s["payees"]
    p = b.pick(*payees)
    amount = b.pick(45, 120, 250, 75.5, 310, 18.9)
    ref = b.pick("March rent", "concert tickets", "dinner", "birthday gift", "invoice 2291")
    token = _open(b, b.pick(
        f"Please send {amount} euros to {p['name']} for {ref}.",
        f"Transfer {amount} EUR to {p['name']}, reference '{ref}'.",
        f"I owe {p['name']} {amount} euros ({ref}), can you pay that from checking?",
    ))
    out = b.call("list_payees", {"session_token": token}, reuse=True)
    iban = next(x["iban"] for x in out["payees"] if x["name"] == p["name"])
    accs = _accounts(b, token)
    acc = next(a for a in accs if a["type"] == "checking")
    b.ask(f"I'll send {amount} EUR from {acc['account_id']} to {p['name']} ({iban}) with the "
          f"reference '{ref}'. Shall I go ahead?")
    args = {"session_token": token, "from_account": acc["account_id"], "to_iban": iban,
            "amount": amount, "currency": "EUR", "reference": ref}
    if b.chance(0.35):
        new_amount = amount + b.pick(10, 25, 50)
        b.user(b.pick(f"No, make it {new_amount} and then go ahead.",
                      f"Actually {new_amount} euros please. Then yes."), kind="correction")
        args["amount"] = new_amount
    else:
        b.user(b.pick("Yes, that's correct.", "Yes please.", "Go ahead.", "Correct, send it."),
               kind="confirm")
    res = b.call("send_money", args, derived={"from_account": "checking account, listed",
                                                  "currency": "euros"})
    b.say(f"Done. Transfer {res['transfer_id']} was executed; new balance "
          f"{res['new_balance']:.2f} EUR.")


def pay_new_person(b: Builder) -> None:
    first, last = person(b.rng.randrange(1000))
    name = f"{first} {last}"
    iban = _iban(b.rng, b.pick("DE", "AT", "NL"))
    amount = b.pick(60, 95, 140, 200, 35)
    token = _open(b, b.pick(
        f"I need to pay {name} {amount} euros, they're not in my payees yet.",
        f"Send {amount} EUR to {name} please.",
    ))
    b.call("list_payees", {"session_token": token}, reuse=True)
    b.say(f"{name} is not among your saved payees. What is {first}'s IBAN?")
    spaced = " ".join(iban[i:i + 4] for i in range(0, len(iban), 4))
    said = b.pick(iban, spaced)
    b.user(b.pick(f"It's {said}", f"IBAN: {said}", f"{said}, thanks"), kind="answer")
    how = None if said == iban else "IBAN with the spaces removed"
    b.call("add_payee", {"session_token": token, "payee_name": name, "iban": iban},
           derived={"iban": how})
    accs = _accounts(b, token)
    acc = next(a for a in accs if a["type"] == "checking")
    res = b.call("send_money", {"session_token": token, "from_account": acc["account_id"],
                                    "to_iban": iban, "amount": amount},
                 derived={"to_iban": how, "from_account": "checking account, listed"})
    b.say(f"Saved {name} as a payee and sent {amount} EUR (transfer {res['transfer_id']}).")


def vague_transfer(b: Builder) -> None:
    rel = b.pick("sister", "brother", "flatmate", "landlord")
    b.user(b.pick(f"I want to send some money to my {rel}.",
                  f"Could you send my {rel} some money?",
                  f"Pay my {rel} back please."),
           kind="vague_request", label="ask_user", missing=["amount", "to_iban"])
    b.ask(f"Of course. How much should I send, and what is your {rel}'s name and IBAN?")
    first, last = person(b.rng.randrange(1000))
    iban = _iban(b.rng)
    amount = b.pick(50, 80, 150, 400)
    token = _open(b, b.pick(
        f"{amount} euros. {first} {last}, the IBAN is {iban}.",
        f"{first} {last}, IBAN {iban}, amount {amount} EUR.",
    ), kind="answer")
    accs = _accounts(b, token)
    acc = next(a for a in accs if a["type"] == "checking")
    res = b.call("send_money", {"session_token": token, "from_account": acc["account_id"],
                                    "to_iban": iban, "amount": amount},
                 derived={"from_account": "checking account, listed"})
    b.say(f"Sent {amount} EUR to {first} {last} (transfer {res['transfer_id']}).")


def lost_card(b: Builder) -> None:
    reason = b.pick("lost", "stolen", "damaged")
    token = _open(b, {
        "lost": b.pick("I lost my card, please block it.", "Can't find my bank card anywhere, "
                       "block it please."),
        "stolen": b.pick("Someone stole my bank card! Block it now.", "My card was stolen "
                         "on the tram, please block it."),
        "damaged": b.pick("My card is damaged, can you block it?", "The chip on my card is "
                          "broken, block it so I get a new one."),
    }[reason])
    cards = b.call("list_cards", {"session_token": token}, reuse=True)["cards"]
    b.ask(f"You have two cards: the {cards[0]['type']} ending {cards[0]['last_four']} and the "
          f"{cards[1]['type']} ending {cards[1]['last_four']}. Which one should I block?")
    idx = b.pick(0, 1)
    first = ["the first one", "The debit card.", f"the one ending {cards[0]['last_four']}"]
    second = ["the second one", "The credit card.", f"the one ending {cards[1]['last_four']}"]
    said = b.pick(*(first if idx == 0 else second))
    b.user(said, kind="select")
    how = None if cards[idx]["last_four"] in said else f"option {idx + 1} of the list"
    res = b.call("block_card", {"session_token": token, "card_last_four": cards[idx]["last_four"],
                                "reason": reason}, derived={"card_last_four": how})
    b.say(f"The card ending {res['card']} is blocked; {res['replacement']}.")


def fx(b: Builder) -> None:
    code = b.pick("GBP", "CHF", "USD", "NOK", "SEK", "PLN", "JPY", "DKK")
    amount = b.pick(250, 1200, 80, 3000, 42.5)
    name = b.pick(*_CURRENCY_NAMES[code])
    b.user(b.pick(f"How much is {amount} euros in {name}?",
                  f"Convert {amount} EUR to {code} for me.",
                  f"What would I get for {amount} euros in {name} today?"))
    how = None if code in b.last_user else f"ISO code of {name}"
    out = b.call("convert_currency", {"amount": amount, "from_currency": "EUR",
                                      "to_currency": code},
                 derived={"to_currency": how, "from_currency": "ISO code of euros"})
    b.say(f"{amount} EUR is {out['converted']} {code} at today's rate of {out['rate']}.")
    if b.chance(0.6):
        code2 = b.pick(*[c for c in _CURRENCY_NAMES if c not in (code, "EUR")])
        name2 = _CURRENCY_NAMES[code2][0]
        b.user(b.pick(f"And in {name2}?", f"Do the same for {name2}.",
                      f"What about {code2}?"), kind="anaphora")
        how2 = None if code2 in b.last_user else f"ISO code of {name2}"
        out2 = b.call("convert_currency", {"amount": amount, "from_currency": "EUR",
                                           "to_currency": code2},
                      derived={"to_currency": how2, "from_currency": "ISO code of euros"})
        b.say(f"That is {out2['converted']} {code2}.")


def _profile(b: Builder) -> str:
    return "The customer is not signed in yet."


DOMAIN = Domain(
    name="banking",
    service="Lanternbank online banking",
    tools=TOOLS,
    backend=BankBackend,
    scenarios={"balance": balance, "transactions": transactions, "pay_payee": pay_payee,
               "pay_new_person": pay_new_person, "vague_transfer": vague_transfer,
               "lost_card": lost_card, "fx": fx},
    infeasible=(
        Infeasible(("Can you raise my overdraft limit to 2000 euros?",
                    "I'd like a bigger overdraft, please increase it.",
                    "Please increase my credit limit."),
                   "I'm sorry, I can't change overdraft or credit limits; please contact your "
                   "branch for that."),
        Infeasible(("Open a new savings account for my daughter.",
                    "I want to open another account.",),
                   "Opening new accounts isn't something I can do here; it needs a branch "
                   "appointment."),
        Infeasible(("What's the mortgage rate you'd offer me for a flat in town?",
                    "Could you apply for a home loan for me?"),
                   "I have no tools for loans or mortgages, sorry."),
        Infeasible(("Order me a new chequebook.", "Can you print my bank statement and post "
                                                  "it to me?"),
                   "I can't order printed items; you can request them from your branch."),
    ),
    profile=_profile,
)

__all__ = ["DOMAIN", "TOOLS", "BankBackend"]
