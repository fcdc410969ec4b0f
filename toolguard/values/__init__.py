"""Values as types: what kind of fact an argument value states, and where it was stated.

:class:`ValueKind` and :func:`classify` read a value's kind from its shape; the pure
extractors (:mod:`~toolguard.values.numbers`, :mod:`~toolguard.values.dates`,
:mod:`~toolguard.values.times`) read the values a text states; :mod:`~toolguard.values.match`
holds one matcher per kind over a :class:`~toolguard.grounding.GroundingView`; the word tables
are data in :mod:`~toolguard.values.knowledge`.
"""

from toolguard.values.kinds import (
    ValueKind,
    classify,
    iter_leaves,
    parameter_leaf,
    parameter_words,
    shape_of,
    text_facts,
)
from toolguard.values.tokens import fold, tokens_of

__all__ = [
    "ValueKind",
    "classify",
    "fold",
    "iter_leaves",
    "parameter_leaf",
    "parameter_words",
    "shape_of",
    "text_facts",
    "tokens_of",
]
