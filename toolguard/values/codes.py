"""What a short code may stand for: ISO 3166 places and ISO 4217 currencies (``pycountry``)."""

from __future__ import annotations

from functools import lru_cache

from toolguard.values.kinds import CODE
from toolguard.values.tokens import tokens_of

__all__ = ["code_names", "known_place", "place_codes"]

_SUBDIVISION_COUNTRIES = ("US", "CA", "AU", "GB", "IN", "DE", "CN")
"""Countries whose subdivision codes a two- or three-letter code may be (``CA``: California)."""
_PLACE_COUNTRIES = ("US", "CA", "AU", "GB")
"""Countries whose subdivision names count as well-known places (``"Berkeley, CA"``)."""


@lru_cache(maxsize=8192)
def code_names(code: str) -> tuple[tuple[str, ...], ...]:
    """Token lists of what an ISO code may stand for.

    Countries (alpha-2/3), currencies (ISO 4217, the name's last word: "euro", "rand") and
    subdivisions (``CA`` -> California).
    """
    import pycountry

    names: list[str] = []
    up = code.upper()
    try:
        c = pycountry.countries.get(alpha_2=up) if len(up) == 2 else (
            pycountry.countries.get(alpha_3=up) if len(up) == 3 else None)
        if c is not None:
            names += [c.name, getattr(c, "common_name", ""), getattr(c, "official_name", "")]
        cur = pycountry.currencies.get(alpha_3=up) if len(up) == 3 else None
        if cur is not None:
            names += [cur.name, cur.name.split()[-1]]
        if len(up) in (2, 3):
            for country in _SUBDIVISION_COUNTRIES:
                sub = pycountry.subdivisions.get(  # type: ignore[no-untyped-call]
                    code=f"{country}-{up}")
                if sub is not None:
                    names.append(sub.name)
    except (KeyError, LookupError):
        pass
    return tuple(tuple(tokens_of(n)) for n in names if n)


@lru_cache(maxsize=8192)
def known_place(part: str) -> bool:
    """A country or subdivision name or code (``"USA"``, ``"California"``, ``"CA"``)."""
    import pycountry

    p = part.strip()
    if CODE.match(p):
        return bool(code_names(p))
    try:
        pycountry.countries.lookup(p)
        return True
    except LookupError:
        pass
    return any(s.name.casefold() == p.casefold() for s in pycountry.subdivisions
               if s.country_code in _PLACE_COUNTRIES)


@lru_cache(maxsize=8192)
def place_codes(name: str) -> tuple[str, ...]:
    """Folded ISO codes of a country or subdivision name ("California" -> ``ca``)."""
    import pycountry

    out: list[str] = []
    try:
        c = pycountry.countries.lookup(name)
        out += [c.alpha_2.casefold(), c.alpha_3.casefold()]
    except LookupError:
        pass
    for s in pycountry.subdivisions:
        if s.name.casefold() == name.casefold():
            out.append(s.code.split("-")[-1].casefold())
    return tuple(out)
