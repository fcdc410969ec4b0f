"""Unit conversions a number may go through between the user's words and a tool's argument.

``90`` minutes for "an hour and a half" is stated; ``5000`` for "500 EUR" is not.  A stated
number grounds another one through a conversion only where both units of that conversion are
named: one in the conversation or the parameter, the other too (``duration_minutes`` for
"2 hours": hours in the request, minutes in the parameter's name).  The table is data:
:data:`CONVERSIONS`, one row per pair of units (SI and customary definitions; NIST SP 811).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["CONVERSIONS", "SI_PREFIXES", "SI_QUANTITY", "Conversion", "factors_named",
           "si_values"]


@dataclass(frozen=True, slots=True)
class Conversion:
    """``1 large == factor * small``, with the words that name each unit.

    Attributes:
        factor: How many ``small`` units make one ``large`` unit.
        small: Folded words naming the smaller unit (no one-letter abbreviations: ``s``,
            ``m`` and ``in`` are words of their own).
        large: Folded words naming the larger unit.
    """

    factor: float
    small: frozenset[str]
    large: frozenset[str]


def _w(words: str) -> frozenset[str]:
    return frozenset(words.split())


_SECONDS = _w("second seconds sec secs")
_MINUTES = _w("minute minutes min mins")
_HOURS = _w("hour hours hr hrs hourly")
_DAYS = _w("day days daily")
_WEEKS = _w("week weeks weekly")
_MONTHS = _w("month months monthly")
_YEARS = _w("year years yearly annual annually")
_METRES = _w("meter meters metre metres")
_CENTIMETRES = _w("centimeter centimeters centimetre centimetres cm")
_GRAMS = _w("gram grams")
_KILOGRAMS = _w("kilogram kilograms kg kgs kilo kilos")
_LITRES = _w("liter liters litre litres")
_BYTES_K = _w("kb kib kilobyte kilobytes")
_BYTES_M = _w("mb mib megabyte megabytes")
_BYTES_G = _w("gb gib gigabyte gigabytes")

CONVERSIONS: tuple[Conversion, ...] = (
    Conversion(60.0, _SECONDS, _MINUTES),
    Conversion(60.0, _MINUTES, _HOURS),
    Conversion(3600.0, _SECONDS, _HOURS),
    Conversion(24.0, _HOURS, _DAYS),
    Conversion(7.0, _DAYS, _WEEKS),
    Conversion(12.0, _MONTHS, _YEARS),
    Conversion(1000.0, _w("millisecond milliseconds ms"), _SECONDS),
    Conversion(1000.0, _METRES, _w("kilometer kilometers kilometre kilometres km")),
    Conversion(1000.0, _GRAMS, _KILOGRAMS),
    Conversion(1000.0, _w("milliliter milliliters millilitre millilitres ml"), _LITRES),
    Conversion(1024.0, _BYTES_K, _BYTES_M),
    Conversion(1024.0, _BYTES_M, _BYTES_G),
    Conversion(2.54, _CENTIMETRES, _w("inch inches")),
    Conversion(0.3048, _METRES, _w("foot feet ft")),
    Conversion(1.609344, _w("kilometer kilometers kilometre kilometres km"),
               _w("mile miles mi")),
    Conversion(0.45359237, _KILOGRAMS, _w("pound pounds lb lbs")),
    Conversion(3.785411784, _LITRES, _w("gallon gallons gal")),
    Conversion(100.0, _w("cent cents"), _w("dollar dollars usd euro euros eur")),
)
"""Every conversion a number may go through (:func:`factors_named`)."""


def factors_named(named: Callable[[str], bool]) -> tuple[float, ...]:
    """Factors of the :data:`CONVERSIONS` whose two units are both named.

    Args:
        named: Whether a folded word is named (in the conversation or the parameter).

    Returns:
        Each factor once, in table order: a value ``x`` is grounded by a stated ``x * f`` or
        ``x / f``.
    """
    out: list[float] = []
    for c in CONVERSIONS:
        if c.factor not in out and any(map(named, c.small)) and any(map(named, c.large)):
            out.append(c.factor)
    return tuple(out)


SI_PREFIXES: dict[str, float] = {"p": 1e-12, "n": 1e-9, "\u00b5": 1e-6, "\u03bc": 1e-6,
                                 "u": 1e-6, "m": 1e-3, "c": 1e-2, "k": 1e3, "M": 1e6,
                                 "G": 1e9}
"""SI prefixes by symbol (BIPM, *The International System of Units*, 9th ed., table 7)."""

SI_QUANTITY = re.compile(
    r"(?<![\w.])(\d+(?:\.\d+)?)\s?(p|n|\u00b5|\u03bc|u|m|c|k|M|G)"
    r"(Hz|H|F|A|V|W|J|N|Pa|T|C|g|m|s|L|l|\u03a9)(?![A-Za-z])")
"""A quantity written with a prefixed SI unit symbol: ``100\u00b5F``, ``50mH``, ``3 km``."""


def si_values(text: str) -> set[float]:
    """The values, in base units, of the prefixed SI quantities of ``text`` (case kept).

    ``"100\u00b5F and 50mH"`` gives ``{0.0001, 0.05}``; the numbers as written are not included.
    """
    out: set[float] = set()
    for m in SI_QUANTITY.finditer(text):
        out.add(round(float(m.group(1)) * SI_PREFIXES[m.group(2)], 12))
    return out
