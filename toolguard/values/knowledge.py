"""Word tables the value rules read: data only, each table with where its words come from.

Parameters whose numbers are settings (RelyToolBench's content rule 3), calendar and amount
parameters, fillers, country and currency aliases (ISO 3166, ISO 4217 common names).
"""

from __future__ import annotations

import re

__all__ = [
    "ALIASES",
    "AMOUNT_PARAMETERS",
    "FILLERS",
    "GENERIC_NAME_WORDS",
    "INFERABLE_NUMBER_PARAMETERS",
    "TIME_NUMBER_PARAMETERS",
    "UNCODED_CAPITALS",
    "parameter_pattern",
]


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


INFERABLE_NUMBER_PARAMETERS: tuple[str, ...] = _words(
    # settings and counts the model may choose (RelyToolBench's content rule 3: "page
    # numbers, limits")
    "n k limit top top_k page outcomes sides cards temperature volume threshold constant "
    "factor precision decimal decimals round max_results per_page offset timeout retries "
    "seed verbosity page_size num_results "
    # physical constants of BFCL's physics functions (a benchmark's tools, not a rule)
    "permittivity permeability")
"""Parameter names (last word, plural ``s`` allowed) whose numbers are settings or common
knowledge, not facts the user gives."""

TIME_NUMBER_PARAMETERS: tuple[str, ...] = _words(
    "year years month months day days hour hours minute minutes second seconds duration "
    "timeframe time_frame timespan time_span period periods interval ahead")
"""Parameter names of time spans and calendar numbers: inferable when the user speaks in
relative time ("next week" -> ``days=7``, "monthly" -> ``periods=12``)."""

AMOUNT_PARAMETERS: tuple[str, ...] = _words(
    "amount price total sum value quantity qty shares units payment fee budget limit")
"""Parameter names whose numbers decide how much an action moves (AgentDojo's banking and
travel tools: amounts, prices)."""

GENERIC_NAME_WORDS = frozenset(_words(
    "united republic kingdom states state federal democratic people islands island north "
    "south east west new great"))
"""Words of ISO 3166 / ISO 4217 names too common to identify a country or currency alone."""

ALIASES: dict[str, tuple[str, ...]] = {
    "gb": ("uk", "britain", "british", "england", "english", "london"),
    "gbp": ("uk", "british", "sterling", "pound", "pounds", "quid"),
    "us": ("usa", "america", "american"), "usa": ("us", "america", "american"),
    "usd": ("dollar", "dollars", "usd", "bucks"), "eur": ("euro", "euros"),
}
"""Everyday names of codes that ISO's names miss (folded code -> folded words)."""

FILLERS = frozenset(_words(
    "hi hello dear best regards thanks thank kind cheers sincerely yours mr mrs ms dr re fwd "
    "fw please note ok okay yes no sure"))
"""Greetings, sign-offs, titles and replies: capitalised in a message, never a fact."""

UNCODED_CAPITALS: tuple[str, ...] = _words("I OK AM PM ID USA UK EU US TV PDF FAQ")
"""Capitalised words that are not codes a lookup returned (a text with other 3-5 capital
words deals in codes: tickers, airports)."""


def parameter_pattern(words: tuple[str, ...], *, plural: bool = True) -> re.Pattern[str]:
    """A pattern matching a snake_case parameter name whose last part is one of ``words``.

    With ``plural``, a trailing ``s`` is allowed too (``limits``); case-insensitive.
    """
    alternatives = "|".join(sorted(words, key=len, reverse=True))
    return re.compile(rf"(^|_)({alternatives}){'s?' if plural else ''}$", re.I)
