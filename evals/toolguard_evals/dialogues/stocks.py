"""Brokerage: company lookup, quotes, portfolio, orders with a trading PIN, price alerts."""

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

_ACCOUNT = text("Brokerage account number, e.g. 4410-2287.", "identifier")
_PIN = text("The customer's 4-6 digit trading PIN.", "password")
TOOLS = (
    tool("lookup_symbol", "Find the stock code of a listed company by name.", "read", "market",
         ["company_name"], company_name=text("Company name or part of it.", "keyword")),
    tool("get_quote", "Latest price and day change of a stock.", "read", "market",
         ["stock_code"], stock_code=text("Stock code, e.g. MRDN.", "code")),
    tool("get_portfolio", "Holdings and cash of a brokerage account.", "read", "portfolio",
         ["account_number", "pin"], account_number=_ACCOUNT, pin=_PIN),
    tool("place_order", "Buy or sell shares.", "write", "orders",
         ["account_number", "pin", "stock_code", "side", "shares", "order_type"],
         account_number=_ACCOUNT, pin=_PIN,
         stock_code=text("Stock code.", "code"),
         side=choice("Buy or sell.", "buy", "sell"),
         shares=integer("Number of shares.", minimum=1, maximum=100000),
         order_type=choice("Market or limit order.", "market", "limit"),
         limit_price=number("Limit price per share (limit orders).", minimum=0.01)),
    tool("get_order_status", "Status of an order.", "read", "orders", ["order_id"],
         order_id=text("Order id from place_order.", "identifier")),
    tool("cancel_order", "Cancel an order that has not been filled.", "write", "orders",
         ["order_id", "pin"], order_id=text("Order id.", "identifier"), pin=_PIN),
    tool("set_price_alert", "Notify the customer when a stock crosses a price.", "write",
         "alerts", ["stock_code", "price", "direction"],
         stock_code=text("Stock code.", "code"),
         price=number("Threshold price.", minimum=0.01),
         direction=choice("Crossing direction.", "above", "below")),
)

_COMPANIES = (
    ("Meridian Robotics", "MRDN"), ("Halcyon Foods", "HLCF"), ("Quarrystone Mining", "QRSM"),
    ("Brightwater Utilities", "BWTU"), ("Vantor Biotech", "VNTB"), ("Ostara Telecom", "OSTL"),
    ("Pellucid Software", "PLCD"), ("Northstream Shipping", "NSSH"), ("Corvane Motors", "CRVM"),
    ("Emberlight Energy", "EMBL"),
)


class StocksBackend(Backend):
    """One account with a PIN, four holdings and seeded prices."""

    def setup(self) -> None:
        r = self.rng
        prices = {code: round(r.uniform(8, 420), 2) for _, code in _COMPANIES}
        held = r.sample([c for _, c in _COMPANIES], 4)
        self.s = {
            "account": f"{r.randrange(1000, 9999)}-{r.randrange(1000, 9999)}",
            "pin": f"{r.randrange(1000, 999999)}",
            "cash": round(r.uniform(2000, 20000), 2),
            "holdings": {c: r.randrange(2, 60) * 5 for c in held},
            "prices": prices, "orders": {}, "alerts": [],
        }

    def _auth(self, account_number: str, pin: str) -> None:
        if account_number != self.s["account"] or pin != self.s["pin"]:
            raise ToolError("account number and PIN do not match")

    def _code(self, code: str) -> float:
        if code not in self.s["prices"]:
            raise ToolError(f"unknown stock code {code}")
        return float(self.s["prices"][code])

    def do_lookup_symbol(self, company_name: str) -> dict[str, Any]:
        q = company_name.casefold()
        return {"matches": [{"company": n, "stock_code": c} for n, c in _COMPANIES
                            if q in n.casefold()]}

    def do_get_quote(self, stock_code: str) -> dict[str, Any]:
        price = self._code(stock_code)
        change = (sum(map(ord, stock_code)) * 37 % 700 - 350) / 100
        return {"stock_code": stock_code, "price": price, "currency": "EUR",
                "day_change_pct": round(change, 2)}

    def do_get_portfolio(self, account_number: str, pin: str) -> dict[str, Any]:
        self._auth(account_number, pin)
        return {"account_number": account_number, "cash_eur": self.s["cash"],
                "holdings": [{"stock_code": c, "shares": n, "price": self.s["prices"][c]}
                             for c, n in self.s["holdings"].items()]}

    def do_place_order(self, account_number: str, pin: str, stock_code: str, side: str,
                       shares: int, order_type: str,
                       limit_price: float | None = None) -> dict[str, Any]:
        self._auth(account_number, pin)
        price = self._code(stock_code)
        if order_type == "limit" and limit_price is None:
            raise ToolError("a limit order needs limit_price")
        if side == "sell" and self.s["holdings"].get(stock_code, 0) < shares:
            raise ToolError("not enough shares")
        oid = self.new_id("OR", 6)
        filled = order_type == "market"
        if filled:
            delta = shares if side == "buy" else -shares
            self.s["holdings"][stock_code] = self.s["holdings"].get(stock_code, 0) + delta
            self.s["cash"] = round(self.s["cash"] - delta * price, 2)
        self.s["orders"][oid] = {"status": "filled" if filled else "open", "code": stock_code,
                                 "side": side, "shares": shares}
        return {"order_id": oid, "status": self.s["orders"][oid]["status"],
                "price": price if filled else limit_price}

    def do_get_order_status(self, order_id: str) -> dict[str, Any]:
        o = self.s["orders"].get(order_id)
        if o is None:
            raise ToolError(f"no order {order_id}")
        return {"order_id": order_id, **o}

    def do_cancel_order(self, order_id: str, pin: str) -> dict[str, Any]:
        if pin != self.s["pin"]:
            raise ToolError("wrong PIN")
        o = self.s["orders"].get(order_id)
        if o is None or o["status"] != "open":
            raise ToolError("only open orders can be cancelled")
        o["status"] = "cancelled"
        return {"order_id": order_id, "status": "cancelled"}

    def do_set_price_alert(self, stock_code: str, price: float,
                           direction: str) -> dict[str, Any]:
        self._code(stock_code)
        aid = f"AL-{self.rng.randrange(1000, 9999)}"
        self.s["alerts"].append({"id": aid, "code": stock_code, "price": price,
                                 "direction": direction})
        return {"alert_id": aid, "stock_code": stock_code, "price": price,
                "direction": direction}


# ============================================================================ scenarios
def _creds(b: Builder) -> tuple[str, str]:
    return str(b.backend.s["account"]), str(b.backend.s["pin"])


def _authorised(b: Builder, request: str, *, kind: Any = "request") -> tuple[str, str]:
    """Open the turn; ask for the account number and PIN unless known or given."""
    acc, pin = _creds(b)
    if b.memory.get("creds"):
        b.user(request, kind=kind)
        return acc, pin
    b.memory["creds"] = True
    if b.chance(0.3):
        b.user(b.pick(f"{request} Account {acc}, PIN {pin}.",
                      f"Account number {acc}, PIN is {pin}. {request}"), kind=kind)
        return acc, pin
    b.user(request, kind=kind, label="ask_user", missing=["account_number", "pin"])
    b.ask("For that I need your brokerage account number and your trading PIN.")
    b.user(b.pick(f"Account {acc}, PIN {pin}.", f"It's {acc} and the PIN is {pin}",
                  f"{acc} / {pin}"), kind="credentials")
    return acc, pin


def quote(b: Builder) -> None:
    (n1, _), (n2, _) = b.sample(_COMPANIES, 2)
    b.user(b.pick(f"What's {n1} trading at?", f"Give me the share price of {n1}.",
                  f"How is {n1} stock doing today?"))
    hits = b.call("lookup_symbol", {"company_name": n1}, reuse=True)
    code = hits["matches"][0]["stock_code"]
    q = b.call("get_quote", {"stock_code": code})
    b.say(f"{n1} ({code}) is at {q['price']} EUR.")
    if b.chance(0.6):
        b.user(b.pick(f"And {n2}?", f"Same for {n2}.", f"What about {n2}?"), kind="anaphora")
        hits2 = b.call("lookup_symbol", {"company_name": n2}, reuse=True)
        code2 = hits2["matches"][0]["stock_code"]
        q2 = b.call("get_quote", {"stock_code": code2})
        b.say(f"{n2} ({code2}) is at {q2['price']} EUR.")


def buy(b: Builder) -> None:
    name, code = b.pick(*_COMPANIES)
    shares = b.pick(5, 10, 25, 40)
    limit = b.chance(0.4)
    price = round(b.backend.s["prices"][code] * 0.97, 2)
    said_code = b.chance(0.5)
    what = code if said_code else name
    req = (f"Buy {shares} shares of {what} with a limit of {price} euros." if limit else
           b.pick(f"Buy {shares} {what} shares at market.", f"Get me {shares} shares of {what} "
                  "at the market price."))
    acc, pin = _authorised(b, req)
    if not said_code:
        hits = b.call("lookup_symbol", {"company_name": name}, reuse=True)
        code = hits["matches"][0]["stock_code"]
    args: dict[str, Any] = {"account_number": acc, "pin": pin, "stock_code": code,
                            "side": "buy", "shares": shares,
                            "order_type": "limit" if limit else "market"}
    if limit:
        args["limit_price"] = price
    out = b.call("place_order", args)
    b.memory["order"] = out["order_id"]
    b.say(f"Order {out['order_id']} is {out['status']}.")
    if limit and b.chance(0.6):
        b.user(b.pick("Actually, cancel that order.", "Cancel it, I changed my mind."),
               kind="anaphora")
        b.call("cancel_order", {"order_id": out["order_id"], "pin": pin})
        b.say(f"Order {out['order_id']} is cancelled.")


def alert(b: Builder) -> None:
    _, code = b.pick(*_COMPANIES)
    price = round(b.backend.s["prices"][code] * b.pick(0.9, 1.1), 2)
    direction = "below" if price < b.backend.s["prices"][code] else "above"
    verb = "drops below" if direction == "below" else "goes above"
    b.user(b.pick(f"Alert me when {code} {verb} {price}.",
                  f"Set a price alert on {code}: {direction} {price} euros."))
    out = b.call("set_price_alert", {"stock_code": code, "price": price,
                                     "direction": direction},
                 derived={"direction": verb})
    b.say(f"Alert {out['alert_id']} set: {code} {direction} {price} EUR.")
    if b.chance(0.5):
        other = b.pick(*[c for _, c in _COMPANIES if c != code])
        p2 = round(b.backend.s["prices"][other] * 0.9, 2)
        b.user(b.pick(f"Do the same for {other} at {p2}.", f"And one for {other}, {p2}."),
               kind="anaphora")
        b.call("set_price_alert", {"stock_code": other, "price": p2, "direction": "below"},
               derived={"direction": "same as before" if direction == "below" else
                        "below the current price"})
        b.say(f"Also alerting on {other} at {p2} EUR.")


def portfolio(b: Builder) -> None:
    acc, pin = _authorised(b, b.pick("Show me my portfolio.", "What do I own right now?",
                                     "How are my holdings looking?"))
    out = b.call("get_portfolio", {"account_number": acc, "pin": pin})
    h = b.pick(*out["holdings"])
    b.say("You hold " + ", ".join(f"{x['shares']} {x['stock_code']}" for x in out["holdings"])
          + f" and {out['cash_eur']} EUR cash.")
    half = h["shares"] // 2
    b.user(b.pick(f"Sell half of my {h['stock_code']} position at market.",
                  f"Sell {half} {h['stock_code']} at market."), kind="anaphora")
    res = b.call("place_order", {"account_number": acc, "pin": pin,
                                 "stock_code": h["stock_code"], "side": "sell",
                                 "shares": half, "order_type": "market"},
                 derived={"shares": f"half of {h['shares']}"})
    b.say(f"Sold {half} {h['stock_code']} (order {res['order_id']}).")


def vague_buy(b: Builder) -> None:
    name, code = b.pick(*_COMPANIES)
    b.user(b.pick(f"Buy some {name} shares.", f"I want to invest in {name}.",
                  f"Get me a few {code} shares."),
           kind="vague_request", label="ask_user", missing=["shares"])
    said_code = code in b.last_user
    b.ask("How many shares, and at market or with a limit price?")
    shares = b.pick(3, 12, 20)
    acc, pin = _authorised(b, b.pick(f"{shares} shares, at market.",
                                     f"Let's do {shares}, market order."), kind="answer")
    if not said_code:
        hits = b.call("lookup_symbol", {"company_name": name}, reuse=True)
        code = hits["matches"][0]["stock_code"]
    out = b.call("place_order", {"account_number": acc, "pin": pin, "stock_code": code,
                                 "side": "buy", "shares": shares, "order_type": "market"})
    b.say(f"Bought {shares} {code}; order {out['order_id']}.")


DOMAIN = Domain(
    name="stocks",
    service="Ridgeline Brokerage",
    tools=TOOLS,
    backend=StocksBackend,
    scenarios={"quote": quote, "buy": buy, "alert": alert, "portfolio": portfolio,
               "vague_buy": vague_buy},
    infeasible=(
        Infeasible(("Should I buy Meridian Robotics? Give me your advice.",
                    "Which stock will go up next week?"),
                   "I can't give investment advice or predictions."),
        Infeasible(("Transfer 500 euros from my bank to the brokerage account.",
                    "Withdraw my cash to my bank account."),
                   "Cash transfers aren't possible with my tools; use the payments page."),
        Infeasible(("Buy me some bitcoin.", "Can I trade crypto here?"),
                   "Only listed shares can be traded here."),
        Infeasible(("Send me my annual tax statement.", "Download the tax report for last "
                                                        "year."),
                   "Tax documents aren't available through my tools."),
    ),
)

__all__ = ["DOMAIN", "TOOLS", "StocksBackend"]
