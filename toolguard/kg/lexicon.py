"""Lexicons of the deterministic resolver: kinship phrases and relation-word synonyms.

Nothing here names a person or a KG of a dataset: kinship phrases map onto *relation
names* (``mom`` -> ``mother``; ``grandma`` -> ``grandmother`` or a ``mother``/``father``
then ``mother`` chain), and attribute synonyms map everyday words onto the *words* that
relation names are built from (``prefer_dining_location`` is made of ``dining`` and
``location``), so a KG with new relations is matched through the words of its relation
names first and the synonyms second.
"""

from __future__ import annotations

Hop = tuple[str, ...]
"""Relation names accepted for one hop, in order of preference."""

_PARENT: Hop = ("mother", "father", "parent")
_CHILD: Hop = ("son", "daughter", "child", "kid")
_SPOUSE: Hop = ("husband", "wife", "spouse", "partner")
_SIBLING: Hop = ("brother", "sister", "sibling")

KINSHIP: dict[str, tuple[tuple[Hop, ...], ...]] = {
    # phrase (space-separated lower-case words) -> alternative hop chains, tried in order
    **{p: ((("mother",),),) for p in ("mother", "mom", "mum", "mommy", "mummy", "mama",
                                      "mamma", "momma", "ma", "mam")},
    **{p: ((("father",),),) for p in ("father", "dad", "daddy", "papa", "pa", "pop", "pops")},
    **{p: ((("mother", "father", "parent"),),) for p in ("parent", "parents", "folks")},
    "son": ((("son", "child", "kid"),),),
    "boy": ((("son", "child", "kid"),),),
    "daughter": ((("daughter", "child", "kid"),),),
    "girl": ((("daughter", "child", "kid"),),),
    **{p: ((_CHILD,),) for p in ("child", "children", "kid", "kids", "little one",
                                 "offspring", "baby")},
    **{p: ((("husband", "spouse", "partner"),),) for p in ("husband", "hubby")},
    **{p: ((("wife", "spouse", "partner"),),) for p in ("wife", "wifey")},
    **{p: ((_SPOUSE,),) for p in ("spouse", "partner", "better half")},
    **{p: ((("brother", "sibling"),),) for p in ("brother", "bro")},
    **{p: ((("sister", "sibling"),),) for p in ("sister", "sis")},
    **{p: ((_SIBLING,),) for p in ("sibling", "siblings")},
    **{p: ((("grandmother",),), (_PARENT, ("mother",))) for p in (
        "grandmother", "grandma", "granny", "nana", "gran", "grandmom")},
    **{p: ((("grandfather",),), (_PARENT, ("father",))) for p in (
        "grandfather", "grandpa", "granddad", "grandad", "gramps")},
    **{p: ((("grandparent", "grandmother", "grandfather"),), (_PARENT, _PARENT)) for p in (
        "grandparent", "grandparents")},
    "grandson": ((("grandson",),), (_CHILD, ("son",))),
    "granddaughter": ((("granddaughter",),), (_CHILD, ("daughter",))),
    **{p: ((("grandchild", "grandson", "granddaughter"),), (_CHILD, _CHILD)) for p in (
        "grandchild", "grandchildren", "grandkid", "grandkids")},
    "mother in law": ((("mother_in_law",),), (_SPOUSE, ("mother",))),
    "father in law": ((("father_in_law",),), (_SPOUSE, ("father",))),
    "son in law": ((("son_in_law",),), (("daughter", "child"), ("husband", "spouse"))),
    "daughter in law": ((("daughter_in_law",),), (("son", "child"), ("wife", "spouse"))),
    "brother in law": ((("brother_in_law",),), (_SPOUSE, ("brother",)),
                       (("sister",), ("husband", "spouse"))),
    "sister in law": ((("sister_in_law",),), (_SPOUSE, ("sister",)),
                      (("brother",), ("wife", "spouse"))),
    "uncle": ((("uncle",),), (_PARENT, ("brother",))),
    "aunt": ((("aunt",),), (_PARENT, ("sister",))),
    "auntie": ((("aunt",),), (_PARENT, ("sister",))),
    "nephew": ((("nephew",),), (_SIBLING, ("son",))),
    "niece": ((("niece",),), (_SIBLING, ("daughter",))),
    "cousin": ((("cousin",),), (_PARENT, _SIBLING, _CHILD)),
    "stepmother": ((("stepmother",),), (("father",), ("wife", "spouse"))),
    "stepfather": ((("stepfather",),), (("mother",), ("husband", "spouse"))),
    "girlfriend": ((("girlfriend", "partner"),),),
    "boyfriend": ((("boyfriend", "partner"),),),
    "fiance": ((("fiance", "fiancee", "partner"),),),
    "fiancee": ((("fiancee", "fiance", "partner"),),),
}
"""Kinship phrase -> alternative relation chains.  Relations of a KG whose tails are
people are also matched by their own words (``best_friend`` by "best friend")."""

KINSHIP_RELATIONS = frozenset(r for alts in KINSHIP.values() for chain in alts
                              for hop in chain for r in hop)
"""Relation names the lexicon knows as person-to-person links."""

SELF_WORDS = frozenset({"i", "my", "mine", "myself", "we", "our", "ours", "ourselves"})
"""Words naming the speaker."""

POSSESSIVE_SELF = frozenset({"my", "our"})
PRONOUNS = frozenset({"he", "him", "his", "she", "her", "hers", "they", "them", "their",
                      "theirs", "himself", "herself", "themselves"})
"""Third-person pronouns: they refer back to the last person mentioned."""
POSSESSIVE_PRONOUNS = frozenset({"his", "her", "their"})

REQUEST_OPENERS = frozenset({
    "can", "could", "would", "should", "will", "shall", "may", "might", "do", "did",
    "so", "and", "but", "then", "please", "hi", "hey", "hello", "now", "also", "if",
    "because", "as", "since", "think", "guess", "hope", "wish", "yes", "ok", "okay", "that",
})
"""Words after which "I"/"we" opens a request ("Can I book...") rather than a relative
clause naming a preference ("the city I love")."""

ATTRIBUTE_SYNONYMS: dict[str, tuple[str, ...]] = {
    # relation-name word -> everyday words that name it
    "dinner": ("dinner", "dine", "dining", "supper", "meal", "meals", "eat", "eats"),
    "dining": ("dining", "dine", "dinner", "eat", "eats", "eating", "meal", "meals",
               "supper", "culinary", "restaurant", "restaurants", "food"),
    "time": ("time", "when", "hour", "o'clock", "schedule", "timing"),
    "location": ("location", "place", "spot", "spots", "area", "where", "venue", "region",
                 "locale", "site", "hub", "section", "vicinity", "city", "town"),
    "pickup": ("pickup", "pick", "picked", "visit", "visiting", "going", "go", "goes",
               "spot", "hang"),
    "city": ("city", "cities", "town", "area", "metropolis"),
    "travel": ("travel", "travelling", "traveling", "trip", "trips", "journey", "visit",
               "visiting", "tour"),
    "hotel": ("hotel", "hotels", "stay", "staying", "accommodation", "lodging", "vacation",
              "resort"),
    "appointment": ("appointment", "appointments", "meet", "meeting", "booking"),
    "event": ("event", "events", "screening", "happening"),
    "events": ("event", "events", "screening", "happening", "venue"),
    "sports": ("sport", "sports", "game", "games", "gym", "workout", "match", "athletic"),
    "theater": ("theater", "theatre", "cinema", "movies", "film"),
    "movie": ("movie", "film", "flick", "watch"),
    "movies": ("movie", "movies", "film", "films"),
    "directed": ("director", "directed", "filmmaker"),
    "show": ("show", "shows", "series", "programme", "program"),
    "genre": ("genre", "music", "style", "kind"),
    "song": ("song", "tune", "melody", "track", "songs"),
    "playlist": ("playlist", "playlists", "mix", "listen"),
    "account": ("account", "bank", "balance", "wallet", "card"),
    "phone": ("phone", "cell", "mobile", "telephone", "call"),
    "birthday": ("birthday", "born", "birth"),
    "bedroom": ("bedroom", "bedrooms"),
    "room": ("room", "rooms"),
    "apartment": ("apartment", "flat", "apartments"),
    "restaurant": ("restaurant", "eatery", "bistro", "diner"),
    "performance": ("performance", "performances", "concert", "show", "gig"),
    "concerts": ("concert", "concerts", "gig", "gigs", "live music"),
    "payment": ("payment", "pay", "paying", "card"),
    "seating": ("seat", "seats", "seating"),
    "class": ("class", "cabin"),
    "transport": ("transport", "transportation", "commute", "ride"),
    "mode": ("mode", "way", "means"),
    "train": ("train", "trains", "rail", "railway"),
    "airline": ("airline", "airlines", "flight", "flights", "fly", "flying", "carrier"),
    "rental": ("rental", "rent", "renting", "hire"),
    "car": ("car", "vehicle", "suv", "sedan", "coupe"),
    "license": ("license", "licence", "plate"),
    "plate": ("plate", "plates", "registration"),
    "topping": ("topping", "toppings"),
    "pizza": ("pizza", "pizzas"),
    "crust": ("crust", "base", "dough"),
    "cuisine": ("cuisine", "culinary", "cuisines", "food"),
    "food": ("food", "culinary", "cuisine", "dish", "dishes"),
    "coffee": ("coffee", "latte", "espresso", "cappuccino", "americano", "mocha", "brew"),
    "alarm": ("alarm", "alarms", "wake", "wakeup"),
    "recurrence": ("recurrence", "repeat", "repeating", "recurring"),
    "doctor": ("doctor", "physician", "gp", "clinic", "doc"),
    "dentist": ("dentist", "dental", "teeth", "orthodontist"),
    "therapist": ("therapist", "therapy", "counselor", "counsellor", "psychologist"),
    "stylist": ("stylist", "styling", "style"),
    "hair": ("hair", "haircut", "barber", "hairdresser", "salon"),
    "book": ("book", "books", "novel", "novels", "reading", "read", "author"),
    "property": ("property", "properties", "real estate", "listing"),
    "departure": ("departure", "depart", "departing", "leave", "leaving", "start"),
    "immediate": ("immediate", "instant", "quick", "fast"),
    "scheduled": ("scheduled", "recurring", "regular"),
    "transfers": ("transfer", "transfers", "payments", "payment"),
    "stars": ("star", "stars", "rating", "taste"),
    "home": ("home", "house", "address", "residence"),
    "address": ("address", "home", "house"),
    "residence": ("residence", "live", "lives", "living", "reside", "resides", "hometown"),
    "destination": ("destination", "destinations"),
    "email": ("email", "mail", "e-mail"),
    "birthplace": ("born", "birthplace", "hometown"),
    "museum": ("museum", "gallery", "exhibition"),
    "park": ("park", "garden"),
    "gym": ("gym", "fitness", "workout"),
    "school": ("school", "college", "class"),
    "work": ("work", "office", "job", "workplace"),
    "hospital": ("hospital", "clinic"),
    "bar": ("bar", "pub", "drinks"),
    "color": ("color", "colour"),
    "pet": ("pet", "dog", "cat"),
}
"""Word of a relation name -> everyday words naming it (matched on word stems)."""

RELATION_PHRASES: dict[str, tuple[str, ...]] = {
    # whole relation stem (prefix removed) -> phrases naming it
    "travel_to": ("destination", "travel to", "go to", "heading to", "trip to"),
    "city_of_residence": ("city i live", "live city", "lives in", "live in", "where i live",
                          "hometown", "residence", "my city", "home city", "my home"),
    "dinnertime": ("dinner time", "dining time", "dine", "mealtime", "meal time"),
    "appointment_time": ("appointment time", "time", "schedule"),
    "hotel_location": ("stay", "staying", "vacation spot"),
    "home": ("my place", "my house", "my home"),
    "alarm_setting": ("alarm i use", "usual alarm", "alarm setting"),
    "show_type": ("type of movie", "type of show", "kind of movie", "movie type"),
    "living_apartment": ("apartment",),
    "bedroom_room": ("bedroom",),
}
"""Whole relation stem -> multi-word or idiomatic phrases naming it."""

GENERIC_WORDS = frozenset({
    "time", "location", "type", "name", "number", "class", "method", "mode", "category",
    "setting", "room", "in", "with", "to", "of", "by", "for", "at", "on", "place", "info",
})
"""Relation-name words too vague to decide a relation alone."""

PLACE_WORDS = frozenset({
    "where", "place", "spot", "spots", "location", "area", "region", "venue", "near",
    "nearby", "around", "vicinity", "hub", "section", "site", "city", "town",
})
TIME_WORDS = frozenset({"when", "time", "hour", "schedule", "o'clock", "timing"})
PLACE_RELATION_WORDS = frozenset({
    "location", "city", "place", "spot", "home", "address", "residence", "in", "to",
    "destination", "area", "departure", "theater", "hotel", "restaurant", "venue",
})
TIME_RELATION_WORDS = frozenset({"time", "dinnertime", "birthday", "date", "schedule"})

RELATION_PREFIXES = ("prefer_", "preferred_", "favourite_", "favorite_", "fav_", "likes_")
"""Prefixes of preference relations, removed before matching words."""

PREFERENCE_WORDS = frozenset({
    "prefer", "prefers", "preferred", "preference", "favorite", "favourite", "favor",
    "favors", "favour", "favours", "favored", "like", "likes", "liked", "love", "loves",
    "loved", "enjoy", "enjoys", "enjoyed", "usual", "usually", "often", "always",
    "regularly", "go-to", "choice", "chosen", "pick", "picks", "fond", "frequently",
    "normally", "preferences", "use", "uses", "goes", "visits", "frequents", "wants",
    "live", "lives", "resides", "stays", "taste", "tastes", "top-choice", "best", "interested",
})
"""Words marking a preference ("the city my mother prefers")."""
