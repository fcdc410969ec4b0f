"""Word lists the perturbations draw from: verb and key synonyms, invented names and places.

Fixed lists, so a seed gives the same suite everywhere.  Invented values are checked
against the record (they must occur nowhere in it) where they are used.
"""

from __future__ import annotations

from typing import Final

VERB_SYNONYMS: Final[dict[str, tuple[str, ...]]] = {
    "get": ("fetch", "retrieve", "lookup"),
    "fetch": ("get", "retrieve"),
    "find": ("search", "locate", "lookup"),
    "search": ("find", "query", "lookup"),
    "calculate": ("compute", "estimate"),
    "calc": ("compute",),
    "compute": ("calculate",),
    "create": ("make", "add", "new"),
    "add": ("create", "insert"),
    "update": ("modify", "edit", "change"),
    "delete": ("remove", "erase"),
    "remove": ("delete",),
    "list": ("get_all", "show"),
    "send": ("post", "dispatch"),
    "book": ("reserve",),
    "set": ("configure", "update"),
    "check": ("verify", "validate"),
    "convert": ("transform",),
    "predict": ("forecast",),
    "analyze": ("evaluate", "inspect"),
    "generate": ("create", "produce"),
    "play": ("start",),
    "order": ("purchase", "buy"),
    "lookup": ("search", "find"),
}
NAME_SUFFIXES: Final = ("_v2", "_advanced", "_details", "_info", "_data", "_by_name", "_lookup")
GENERIC_TOOLS: Final = (
    "search_web",
    "lookup_information",
    "query_database",
    "get_details",
    "fetch_data",
    "run_query",
    "api_request",
    "knowledge_base.lookup",
    "web.search",
    "get_info",
)
KEY_SYNONYMS: Final[dict[str, str]] = {
    "location": "place",
    "city": "town",
    "name": "title",
    "date": "day",
    "query": "search_term",
    "number": "num",
    "id": "identifier",
    "amount": "value",
    "type": "kind",
    "category": "group",
    "limit": "max_results",
    "language": "lang",
    "count": "num_items",
    "unit": "units",
    "units": "unit_type",
    "time": "timestamp",
    "price": "cost",
    "text": "content",
    "message": "msg",
    "user": "username",
    "email": "email_address",
    "year": "yr",
    "country": "nation",
    "address": "addr",
    "description": "desc",
    "length": "size",
    "start": "begin",
    "end": "finish",
    "from": "source",
    "to": "target",
    "value": "val",
    "values": "vals",
    "data": "payload",
    "url": "link",
    "path": "filepath",
    "mode": "method",
    "format": "fmt",
    "size": "dimension",
    "rate": "ratio",
    "duration": "period",
    "age": "years_old",
}
KEY_SUFFIXES: Final = ("_value", "_name", "_id", "_str", "_param")
CITY_STATE: Final = (
    "Tucson, AZ", "Boise, ID", "Duluth, MN", "Macon, GA", "Provo, UT", "Fresno, CA",
    "Spokane, WA", "Tulsa, OK", "Akron, OH", "Dayton, OH", "Reno, NV", "Mobile, AL",
    "Eugene, OR", "Laredo, TX", "Lansing, MI", "Peoria, IL",
)
CITIES: Final = (
    "Tucson", "Boise", "Duluth", "Macon", "Provo", "Fresno", "Spokane", "Tulsa", "Akron",
    "Bruges", "Porto", "Lyon", "Graz", "Utrecht", "Gdansk", "Tampere", "Aarhus", "Bilbao",
    "Cork", "Trieste", "Kraków", "Leipzig", "Valparaíso", "Mendoza", "Hobart", "Nagoya",
)
FIRST_NAMES: Final = (
    "Marisol", "Tobias", "Ingrid", "Desmond", "Priya", "Anselm", "Leonora", "Casimir",
    "Yolanda", "Fergus", "Odalys", "Bartholomew", "Saoirse", "Ezequiel", "Henrike", "Quentin",
)
LAST_NAMES: Final = (
    "Okonkwo", "Lindqvist", "Haverford", "Castellano", "Pemberton", "Vasquez-Ortiz", "Brannigan",
    "Thorsen", "Achterberg", "Delacroix", "Fairweather", "Novakovic", "Quimby", "Ravensworth",
)
PROPER_NOUNS: Final = (
    "Crimson Harbor", "Bluewater", "Silverline", "Northgate", "Oakridge", "Maple Crest",
    "Stonebridge", "Amberfield", "Ironwood", "Harborview", "Redstone", "Willowbrook",
)
COMMON_NOUNS: Final = (
    "umbrella", "lantern", "saddle", "compass", "furnace", "trombone", "pelican", "ledger",
    "turnip", "anchor", "quilt", "marble", "gazebo", "thimble", "walrus", "kettle",
)
PERSON_TOKENS: Final = frozenset({
    "person", "user", "username", "author", "artist", "player", "actor", "director",
    "contact", "recipient", "customer", "owner", "patient", "employee", "receiver", "sender",
    "singer", "composer", "writer", "friend", "manager", "doctor", "celebrity", "athlete",
    "student", "teacher", "guest", "passenger", "member", "individual", "who",
})
LOCATION_TOKENS: Final = frozenset({
    "city", "location", "place", "destination", "origin", "country", "state", "region",
    "address", "area", "venue", "town", "departure", "arrival", "airport", "where", "from",
    "to", "province", "county", "capital", "locale", "loc", "addr", "street", "zip",
})
SETTING_TOKENS: Final = frozenset({
    "unit", "units", "format", "mode", "sort", "order", "style", "version", "precision",
})
"""Key tokens of settings chosen from a closed set the doc does not enumerate (``temp_unit``):
inventing one is not a fact only the user could give, so ``invented_value`` leaves them."""
SMALL_WORDS: Final = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen",
)
TENS_WORDS: Final = (
    "", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
)
