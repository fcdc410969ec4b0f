"""Value pools of the dialogue corpus (names, places, words), written for this corpus."""

from __future__ import annotations

from typing import Final

FIRST_NAMES: Final = (
    "Amara", "Bastian", "Celeste", "Dorian", "Elif", "Fabian", "Greta", "Hamid", "Isolde",
    "Jonas", "Kalani", "Lorenzo", "Mireille", "Nikolai", "Odette", "Pavel", "Rosalind",
    "Soren", "Tamsin", "Ulrich", "Valentina", "Wendell", "Ximena", "Yusuf", "Zelda",
    "Anouk", "Benedikt", "Cosima", "Emeric", "Filippa", "Gideon", "Hester", "Ignatius",
    "Juno", "Leopold", "Marguerite", "Niamh", "Oskar", "Philippa", "Rafferty",
)
LAST_NAMES: Final = (
    "Abernathy", "Bellweather", "Castellanos", "Drummond", "Eriksen", "Falkenrath",
    "Gallagher", "Hargreaves", "Iwasaki", "Jankowski", "Kowalczyk", "Lindgren", "Marchetti",
    "Nakamura", "Okafor", "Pennington", "Quintero", "Rasmussen", "Szabo", "Tennyson",
    "Underhill", "Vasquez", "Whitcombe", "Yamamoto", "Zielinski", "Aldana", "Brodeur",
    "Cavendish", "Delgado", "Esterhazy", "Fairbanks", "Grimaldi", "Holloway", "Ibarra",
)
RELATIONS: Final = (
    ("sister", "her"), ("brother", "him"), ("mother", "her"), ("father", "him"),
    ("colleague", "them"), ("landlord", "him"), ("flatmate", "her"), ("cousin", "him"),
)
CITIES: Final = (
    # (city, airport code, country)
    ("Lisbon", "LIS", "Portugal"), ("Vienna", "VIE", "Austria"), ("Copenhagen", "CPH", "Denmark"),
    ("Edinburgh", "EDI", "United Kingdom"), ("Seville", "SVQ", "Spain"),
    ("Krakow", "KRK", "Poland"), ("Helsinki", "HEL", "Finland"), ("Porto", "OPO", "Portugal"),
    ("Munich", "MUC", "Germany"), ("Dublin", "DUB", "Ireland"), ("Zurich", "ZRH", "Switzerland"),
    ("Athens", "ATH", "Greece"), ("Budapest", "BUD", "Hungary"), ("Oslo", "OSL", "Norway"),
    ("Milan", "MXP", "Italy"), ("Prague", "PRG", "Czechia"), ("Valencia", "VLC", "Spain"),
    ("Riga", "RIX", "Latvia"), ("Bordeaux", "BOD", "France"), ("Gothenburg", "GOT", "Sweden"),
)
STREETS: Final = (
    "Larkspur Lane", "Quarry Road", "Tanner Street", "Willow Bend", "Copperfield Avenue",
    "Harbour Row", "Elm Terrace", "Mill Race Drive", "Orchard Close", "Falcon Way",
    "Juniper Court", "Beacon Hill Road", "Saltmarsh Street", "Kestrel Gardens",
)
TOWNS: Final = (
    ("Fernhill", "FH2 8QT"), ("Ashbourne Vale", "AV7 3LP"), ("Kingsmere", "KM4 1RD"),
    ("Brackenridge", "BR9 6WE"), ("Thornbury Cross", "TC3 5NA"), ("Millbrook", "MB6 2JX"),
)
EMAIL_DOMAINS: Final = ("postbox.example", "mailnest.example", "inbox-plus.example",
                        "letterkite.example")
COMPANY: Final = "Halvorsen & Pike"
COMPANY_DOMAIN: Final = "halvorsenpike.example"
USER_WORDS: Final = (
    "otter", "maple", "comet", "pixel", "harbor", "falcon", "cedar", "quartz", "ember",
    "willow", "nimbus", "juniper", "marble", "saffron", "tundra", "kestrel",
)
PASSWORD_WORDS: Final = (
    "Blue", "Tiger", "River", "Stone", "Lemon", "Cloud", "Amber", "Frost", "Cobalt", "Velvet",
)
SUBJECT_TOPICS: Final = (
    "quarterly budget review", "onboarding checklist", "office move", "supplier contract",
    "team offsite", "website relaunch", "audit preparation", "hiring plan",
    "customer workshop", "product roadmap",
)


def person(i: int) -> tuple[str, str]:
    """The ``i``-th (first, last) name pair (deterministic, all distinct for i < 1000)."""
    return FIRST_NAMES[i % len(FIRST_NAMES)], LAST_NAMES[(i * 7 + i // 40) % len(LAST_NAMES)]


__all__ = ["CITIES", "COMPANY", "COMPANY_DOMAIN", "EMAIL_DOMAINS", "FIRST_NAMES", "LAST_NAMES",
           "PASSWORD_WORDS", "RELATIONS", "STREETS", "SUBJECT_TOPICS", "TOWNS", "USER_WORDS",
           "person"]
