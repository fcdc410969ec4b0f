"""Text normalisation shared by the relevance judge and the content detector.

Pure functions, cached where they sit on the hot path.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from functools import lru_cache
from typing import Any

import snowballstemmer

_LOCAL = threading.local()


def stemmer() -> Any:
    """This thread's English Snowball stemmer.

    A stemmer keeps state while it stems: threads sharing one can fail with ``IndexError``.
    """
    found = getattr(_LOCAL, "stemmer", None)
    if found is None:
        found = _LOCAL.stemmer = snowballstemmer.stemmer("english")
    return found


_WORD = re.compile(r"[A-Za-z]+|\d+(?:\.\d+)?|[^\W\d_]+", re.UNICODE)
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")

STOPWORDS = frozenset(
    """
    a an the and or but if of to in on at by for with from into onto about as is are was
    were be been being do does did doing have has had having i me my we our you your he
    she it its they them their this that these those what which who whom whose when
    where why how can could would should will shall may might must please want need like
    get got let make show tell give find also any some all each every more most other
    such no not only own same so than too very just there here then now up down out over
    under again further once using use used given based provide provided specified
    specific particular certain one two function method api tool return returns returned
    value values parameter parameters default optional required type string integer
    number list dict object array boolean true false null none e g eg ie etc times
    """.split()
)
"""Function words and words every tool doc uses; "times" is arithmetic ("394 times 213").
"""


def split_identifier(name: str) -> str:
    """``getWeather_forecast.v2`` -> ``get Weather forecast v2``."""
    return _CAMEL.sub(" ", re.sub(r"[_.\-/:]+", " ", name))


@lru_cache(maxsize=4096)
def content_stems(text: str) -> frozenset[str]:
    """Stemmed content words of ``text`` (stopwords and 1-letter tokens removed)."""
    words = [
        w for w in (t.casefold() for t in _WORD.findall(split_identifier(text)))
        if len(w) > 1 and w not in STOPWORDS and not w.isdigit()
    ]
    return frozenset(stemmer().stemWords(words))


_HIDDEN = re.compile(
    "[\u00ad\u061c\u180e\u200b\u200c\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069"
    "\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]"
    "|(?<=[\\w@./\\\\:-])\u200d|\u200d(?=[\\w@./\\\\:-])")
"""Invisible and bidirectional control characters (Unicode general category ``Cf``): zero-width
spaces and joiners, bidi embeddings, overrides and isolates, tag characters.  A zero-width
joiner counts only beside a letter, digit or separator (between emoji it joins a sequence)."""


def has_hidden_characters(text: str, *, strict: bool = False) -> bool:
    """Whether ``text`` carries invisible or bidirectional control characters.

    Such a value does not read as what it is (``mallory\u200b@evil.example``, a path
    reversed by U+202E): it is never taken as stated by the user (Unicode TR #9 and TR #36,
    "Unicode Security Considerations").

    Args:
        text: Any string.
        strict: Count every ``Cf`` character, zero-width joiners between emoji included
            (for short values such as an email, a path or an identifier).
    """
    if text.isascii():
        return False
    if strict:
        return any(unicodedata.category(c) == "Cf" for c in text)
    return _HIDDEN.search(text) is not None
