"""Online shop: product search, cart, promo codes, checkout, order tracking, returns."""

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
from toolguard_evals.dialogues.pools import STREETS, TOWNS

TOOLS = (
    tool("search_products", "Search the catalogue by keyword.", "read", "catalogue",
         ["keyword"], keyword=text("What to look for.", "keyword"),
         max_price=number("Highest price in EUR.", minimum=0),
         sort=choice("Order of results.", "relevance", "price_low", "rating", default="relevance")),
    tool("get_product", "Details, stock and delivery time of one product.", "read", "catalogue",
         ["product_id"], product_id=text("Product id from search_products.", "identifier")),
    tool("add_to_cart", "Put a product in the cart.", "write", "cart",
         ["product_id", "quantity"], product_id=text("Product id.", "identifier"),
         quantity=integer("How many.", minimum=1, maximum=20)),
    tool("view_cart", "Items in the cart and the total.", "read", "cart", []),
    tool("apply_promo_code", "Apply a discount code to the cart.", "write", "cart", ["code"],
         code=text("The promo code as printed.", "code")),
    tool("checkout", "Place the order for everything in the cart.", "write", "orders",
         ["shipping_address", "payment_method"],
         shipping_address=text("Street, number, town and postcode.", "address"),
         payment_method=choice("How to pay.", "card_on_file", "invoice", "paypal")),
    tool("track_order", "Shipping status of an order.", "read", "orders", ["order_id"],
         order_id=text("Order number, e.g. ORD-482913.", "identifier")),
    tool("request_return", "Start a return for an order; a label is emailed.", "write",
         "returns", ["order_id", "reason"], order_id=text("Order number.", "identifier"),
         reason=choice("Why it goes back.", "damaged", "wrong_item", "not_needed",
                       "too_small", "too_large")),
)

_CATALOGUE = (
    ("electric kettle", ("Brushed steel", "Glass", "Compact travel")),
    ("desk lamp", ("LED arm", "Clamp-on", "Dimmable")),
    ("rain jacket", ("Packable", "Insulated", "Trail")),
    ("coffee grinder", ("Burr", "Hand-crank", "Blade")),
    ("yoga mat", ("Cork", "Extra-thick", "Travel")),
    ("backpack", ("Commuter", "Roll-top", "Hiking 30L")),
    ("bluetooth speaker", ("Waterproof", "Bookshelf", "Mini")),
    ("cast iron pan", ("24 cm", "28 cm", "Grill")),
)


class ShopBackend(Backend):
    """A seeded catalogue, an empty cart and two past orders."""

    def setup(self) -> None:
        r = self.rng
        products = {}
        for noun, variants in _CATALOGUE:
            for v in variants:
                pid = self.unique(lambda: f"P{r.randrange(100000, 999999)}")
                products[pid] = {"product_id": pid, "name": f"{v} {noun}", "noun": noun,
                                 "price": round(r.uniform(12, 140), 2),
                                 "rating": round(r.uniform(3.1, 4.9), 1),
                                 "in_stock": r.randrange(0, 30) > 2}
        orders = {}
        for _ in range(2):
            oid = self.new_id("ORD", 6)
            orders[oid] = {"status": r.choice(("shipped", "in transit", "delivered")),
                           "items": [r.choice(list(products))], "returned": False}
        self.s = {"products": products, "cart": {}, "promo": None, "orders": orders}

    def do_search_products(self, keyword: str, max_price: float | None = None,
                           sort: str = "relevance") -> dict[str, Any]:
        k = keyword.casefold()
        hits = [p for p in self.s["products"].values() if k in p["name"].casefold()
                and (max_price is None or p["price"] <= max_price)]
        if sort == "price_low":
            hits.sort(key=lambda p: p["price"])
        elif sort == "rating":
            hits.sort(key=lambda p: -p["rating"])
        return {"results": [{k2: p[k2] for k2 in ("product_id", "name", "price", "rating")}
                            for p in hits]}

    def _product(self, pid: str) -> dict[str, Any]:
        p = self.s["products"].get(pid)
        if p is None:
            raise ToolError(f"no product {pid}")
        return dict(p)

    def do_get_product(self, product_id: str) -> dict[str, Any]:
        p = self._product(product_id)
        return {**{k: p[k] for k in ("product_id", "name", "price", "rating", "in_stock")},
                "delivery_days": 2 if p["in_stock"] else 9}

    def do_add_to_cart(self, product_id: str, quantity: int) -> dict[str, Any]:
        self._product(product_id)
        self.s["cart"][product_id] = self.s["cart"].get(product_id, 0) + quantity
        return {"cart_items": sum(self.s["cart"].values())}

    def _total(self) -> float:
        total = sum(self.s["products"][p]["price"] * q for p, q in self.s["cart"].items())
        return round(float(total) * (0.85 if self.s["promo"] else 1.0), 2)

    def do_view_cart(self) -> dict[str, Any]:
        return {"items": [{"product_id": p, "name": self.s["products"][p]["name"], "quantity": q}
                          for p, q in self.s["cart"].items()], "total_eur": self._total()}

    def do_apply_promo_code(self, code: str) -> dict[str, Any]:
        if not self.s["cart"]:
            raise ToolError("the cart is empty")
        self.s["promo"] = code
        return {"code": code, "discount": "15%", "total_eur": self._total()}

    def do_checkout(self, shipping_address: str, payment_method: str) -> dict[str, Any]:
        if not self.s["cart"]:
            raise ToolError("the cart is empty")
        oid = self.new_id("ORD", 6)
        total = self._total()
        self.s["orders"][oid] = {"status": "processing", "items": list(self.s["cart"]),
                                 "returned": False, "address": shipping_address}
        self.s["cart"], self.s["promo"] = {}, None
        return {"order_id": oid, "total_eur": total, "ships_to": shipping_address}

    def _order(self, oid: str) -> dict[str, Any]:
        o: dict[str, Any] | None = self.s["orders"].get(oid)
        if o is None:
            raise ToolError(f"no order {oid}")
        return o

    def do_track_order(self, order_id: str) -> dict[str, Any]:
        o = self._order(order_id)
        return {"order_id": order_id, "status": o["status"],
                "items": [self.s["products"][p]["name"] for p in o["items"]]}

    def do_request_return(self, order_id: str, reason: str) -> dict[str, Any]:
        o = self._order(order_id)
        if o["returned"]:
            raise ToolError("a return is already open")
        o["returned"] = True
        return {"order_id": order_id, "return_id": f"RET-{self.rng.randrange(10000, 99999)}",
                "label": "emailed"}


# ============================================================================ scenarios
def _address(b: Builder) -> str:
    town, pc = b.pick(*TOWNS)
    return f"{b.rng.randrange(2, 180)} {b.pick(*STREETS)}, {town} {pc}"


def _pick_noun(b: Builder) -> str:
    return str(b.pick(*_CATALOGUE)[0])


def _checkout(b: Builder, *, ask_address: bool) -> None:
    addr = _address(b)
    pay, said = b.pick(("card_on_file", "with my saved card"), ("paypal", "with PayPal"),
                       ("invoice", "on invoice"))
    if ask_address:
        b.user(b.pick("Great, check out please.", "OK, place the order.",
                      "Let's check out."), kind="request", label="ask_user",
               missing=["shipping_address", "payment_method"])
        b.ask("Where should it be shipped, and how would you like to pay (saved card, PayPal "
              "or invoice)?")
        b.user(b.pick(f"Send it to {addr}, pay {said}.",
                      f"{addr}. Paying {said}."), kind="answer")
    else:
        b.user(b.pick(f"Check out and ship to {addr}, paying {said}.",
                      f"Order it to {addr}; pay {said}."), kind="request")
    out = b.call("checkout", {"shipping_address": addr, "payment_method": pay},
                 derived={"payment_method": said})
    b.say(f"Order {out['order_id']} placed, {out['total_eur']} EUR, shipping to {addr}.")


def buy(b: Builder) -> None:
    noun = _pick_noun(b)
    budget = b.pick(None, 50, 80)
    art = "an" if noun[0] in "aeiou" else "a"
    b.user(b.pick(f"I'm looking for {art} {noun}" + (f" under {budget} euros." if budget else "."),
                  f"Find me {art} {noun}" + (f", max {budget} EUR." if budget else "."),
                  f"Show me {noun}s" + (f" below {budget} euros" if budget else "") + "."))
    args: dict[str, Any] = {"keyword": noun}
    if budget:
        args["max_price"] = budget
    out = b.call("search_products", args)
    res = out["results"]
    if not res:
        out = b.call("search_products", {"keyword": noun})
        res = out["results"]
        b.say(f"Nothing under {budget} EUR; without the limit I found "
              + ", ".join(f"{p['name']} ({p['price']} EUR)" for p in res) + ".")
    else:
        b.say("I found " + "; ".join(f"{i + 1}) {p['name']} at {p['price']} EUR"
                                     for i, p in enumerate(res)) + ".")
    idx = b.pick(*range(len(res)))
    p = res[idx]
    b.user(b.pick(f"Tell me more about the {p['name'].lower()}.",
                  f"More details on number {idx + 1}?",
                  f"Is the {('first', 'second', 'third')[idx]} one in stock?"), kind="select")
    info = b.call("get_product", {"product_id": p["product_id"]})
    b.say(f"{info['name']}: {'in stock' if info['in_stock'] else 'back-ordered'}, delivery in "
          f"{info['delivery_days']} days, rated {info['rating']}.")
    qty, said = b.pick((1, "one"), (2, "two"), (2, "2"), (3, "3"))
    b.user(b.pick(f"Add {said} to my cart.", f"OK, put {said} of them in the cart."),
           kind="anaphora")
    b.call("add_to_cart", {"product_id": p["product_id"], "quantity": qty},
           derived={"quantity": None if said.isdigit() else f"{said!r}"})
    b.say(f"Added {qty} x {p['name']} to your cart.")
    if b.chance(0.4):
        code = f"{b.pick('SPRING', 'WELCOME', 'FRIENDS', 'AUTUMN')}{b.rng.randrange(10, 40)}"
        b.user(b.pick(f"I have a promo code: {code}.", f"Apply code {code} please."))
        out2 = b.call("apply_promo_code", {"code": code})
        b.say(f"Code applied: {out2['discount']} off, total {out2['total_eur']} EUR.")
    _checkout(b, ask_address=b.chance(0.5))


def _open_order(b: Builder) -> str:
    return str(b.pick(*[k for k, o in b.backend.s["orders"].items() if not o["returned"]]))


def track(b: Builder) -> None:
    oid = _open_order(b)
    b.user(b.pick(f"Where is my order {oid}?", f"Has {oid} shipped yet?",
                  f"Track order {oid} for me."))
    out = b.call("track_order", {"order_id": oid})
    b.say(f"Order {oid} ({', '.join(out['items'])}) is {out['status']}.")
    if b.chance(0.6):
        reason, said = b.pick(("damaged", "it arrived broken"), ("wrong_item", "it's the wrong "
                                                                  "item"),
                              ("too_small", "it's too small"), ("not_needed", "I don't need it "
                                                                "anymore"))
        b.user(b.pick(f"I want to send it back, {said}.", f"Return it please - {said}."),
               kind="anaphora")
        ret = b.call("request_return", {"order_id": oid, "reason": reason},
                     derived={"reason": said})
        b.say(f"Return {ret['return_id']} is open; the label was emailed.")


def vague_return(b: Builder) -> None:
    b.user(b.pick("I want to return something I bought.", "How do I send back my order?",
                  "Please start a return for my last order."),
           kind="vague_request", label="ask_user", missing=["order_id", "reason"])
    b.ask("I can start that. What is the order number, and why are you returning it?")
    oid = _open_order(b)
    reason, said = b.pick(("too_large", "it's too big"), ("damaged", "it came damaged"),
                          ("wrong_item", "they sent the wrong thing"))
    b.user(b.pick(f"It's {oid}, {said}.", f"Order {oid} - {said}."), kind="answer")
    ret = b.call("request_return", {"order_id": oid, "reason": reason}, derived={"reason": said})
    b.say(f"Return {ret['return_id']} started for {oid}.")


def cart_review(b: Builder) -> None:
    noun = _pick_noun(b)
    b.user(b.pick(f"Put the cheapest {noun} in my cart.",
                  f"Add the lowest-priced {noun} to my basket."))
    out = b.call("search_products", {"keyword": noun, "sort": "price_low"})
    p = out["results"][0]
    b.call("add_to_cart", {"product_id": p["product_id"], "quantity": 1},
           derived={"quantity": "a single item"})
    b.say(f"Added {p['name']} ({p['price']} EUR).")
    b.user(b.pick("What's in my cart now?", "Show me the cart total."))
    cart = b.call("view_cart", {})
    b.say(f"{len(cart['items'])} item(s), total {cart['total_eur']} EUR.")
    _checkout(b, ask_address=b.chance(0.6))


DOMAIN = Domain(
    name="shop",
    service="Brightcart online shop",
    tools=TOOLS,
    backend=ShopBackend,
    scenarios={"buy": buy, "track": track, "vague_return": vague_return,
               "cart_review": cart_review},
    infeasible=(
        Infeasible(("Can you price-match what another shop charges?",
                    "Another store sells it cheaper, match their price."),
                   "I can't adjust prices, sorry."),
        Infeasible(("Gift-wrap the order and add a card.", "Please wrap it as a present."),
                   "Gift wrapping isn't available through my tools."),
        Infeasible(("Change the delivery to next-day express.",
                    "Can it arrive by courier tomorrow morning?"),
                   "I can't change the shipping speed; standard delivery is all I can book."),
        Infeasible(("Leave a five-star review for the kettle.",
                    "Write a review of my last purchase."),
                   "I have no tool to post reviews."),
    ),
)

__all__ = ["DOMAIN", "TOOLS", "ShopBackend"]
