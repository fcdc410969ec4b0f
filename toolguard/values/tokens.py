"""The one normaliser and tokeniser of values and texts.

Compatibility forms, case and accents folded (Unicode NFKD, UAX #15; full case folding,
Unicode section 3.13), then runs of letters and digits.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["TOKEN", "fold", "tokens_of"]

TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
"""A token: a run of letters and digits (separators, punctuation and ``_`` split)."""


def fold(text: str) -> str:
    """``text`` with compatibility forms, case and accents folded.

    NFKD (``ﬁ`` -> ``fi``, full-width digits -> ASCII digits, ``é`` -> ``e`` + accent), the
    combining marks dropped, then casefolded (``Straße`` -> ``strasse``).
    """
    if text.isascii():
        return text.casefold()
    text = unicodedata.normalize("NFKD", text)
    return "".join(c for c in text if not unicodedata.combining(c)).casefold()


def tokens_of(text: str) -> list[str]:
    """The folded alphanumeric tokens of ``text`` (``"Jane-Smith"`` -> ``["jane", "smith"]``)."""
    return TOKEN.findall(fold(text))
