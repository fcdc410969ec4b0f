"""``toolguard verifier distill-fit``: a trained verifier with a tool-fit encoder of fewer layers.

Each relevance check with a new goal, and each pre-check decision, encodes the goal once
with the tool-fit bi-encoder (MiniLM-L6: 6 layers); fewer layers encode it faster, for
some quality (both measured in the CHANGELOG).  This command writes a second trained
folder whose ``fit/`` keeps some of the teacher's layers (:data:`DEFAULT_LAYERS`), trained
in two stages on the teacher's training split (its ``data_card.json`` gives the size and
seed; dev pairs only calibrate, evaluation-only sources are never read):

1. **layer-reduction distillation** (sentence-transformers' "Model Distillation" recipe;
   the mean-squared-error objective of Reimers & Gurevych, "Making Monolingual Sentence
   Embeddings Multilingual using Knowledge Distillation", EMNLP 2020, arXiv 2004.09813):
   the student starts from the kept layers and learns the teacher's embeddings of the
   training goals and tool documents (mean squared error; :class:`DistillConfig`);
2. **the teacher's own fine-tuning**: CoSENT on the tool-fit labels
   (:func:`~toolguard_evals.verifier.train.fine_tune_fit`).

The goal centre, the tool-fit threshold and the relevance operating point are calibrated
again with the teacher's rules, on dev and on the tools never trained on
(:func:`~toolguard_evals.verifier.train.calibrate`,
:func:`~toolguard_evals.verifier.train.calibrate_relevance`); ``slot/`` and its threshold
are copied.  The output loads like any trained folder (``LearnedVerifier(OUT)``) and can
be exported (``toolguard verifier export-onnx OUT [--int8]``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Final

from toolguard.errors import ConfigurationError
from toolguard.verifier import (
    CALIBRATION_FILE,
    FIT_FOLDER,
    GOAL_CENTER_FILE,
    SLOT_FOLDER,
    read_goal_center,
)

__all__ = ["DEFAULT_LAYERS", "DistillConfig", "distill_fit"]

DEFAULT_LAYERS: Final = (0, 2, 4)
"""Teacher layers the student keeps: every other one of MiniLM-L6's six."""


@dataclass(frozen=True, slots=True)
class DistillConfig:
    """Settings of the distillation stage (the fine-tuning stage uses the teacher's size).

    Attributes:
        layers: Teacher layer indexes the student keeps, increasing, fewer than all.
        epochs: Passes over the training texts.
        learning_rate: AdamW's peak rate (linear warm-up and decay).
        batch_size: Texts per step.
    """

    layers: tuple[int, ...] = DEFAULT_LAYERS
    epochs: int = 10
    learning_rate: float = 1e-4
    batch_size: int = 64

    def __post_init__(self) -> None:
        """Raises ValueError: ``epochs`` or ``batch_size`` < 1, ``learning_rate`` <= 0."""
        if self.epochs < 1 or self.batch_size < 1 or not self.learning_rate > 0:
            raise ValueError(f"epochs and batch_size must be >= 1 and learning_rate > 0, got "
                             f"{self.epochs}, {self.batch_size}, {self.learning_rate}")


def _read_card(folder: Path) -> dict[str, Any]:
    try:
        card: dict[str, Any] = json.loads((folder / "data_card.json").read_text(encoding="utf-8"))
        card["size"], card["seed"] = str(card["size"]), int(card["seed"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigurationError(f"distill-fit trains on {folder}'s training split, rebuilt "
                                 f"from its data_card.json: {exc!r}") from exc
    return card


def _check_layers(layers: Sequence[int], available: int) -> tuple[int, ...]:
    kept = tuple(layers)
    if not kept or list(kept) != sorted(set(kept)) or kept[0] < 0 or kept[-1] >= available:
        raise ValueError(f"layers must be increasing indexes in [0, {available - 1}], got "
                         f"{list(kept)}")
    if len(kept) == available:
        raise ValueError(f"layers keeps all {available} of the teacher's layers: nothing to "
                         "distil")
    return kept


def distill_fit(folder: str | Path, out: str | Path, *, config: DistillConfig = DistillConfig(),
                data_dir: str | Path | None = None, threads: int | None = None,
                log: Callable[[str], None] = print) -> dict[str, Any]:
    """Write ``out``: ``folder``'s verifier with its tool-fit encoder distilled (module docstring).

    Args:
        folder: A ``toolguard verifier train`` output (``fit/``, ``slot/``,
            ``calibration.json``, ``data_card.json``).
        out: The new folder; must not exist.
        config: The distillation stage's settings.
        data_dir: The data root the training split is rebuilt from (default
            ``$TOOLGUARD_DATA_DIR``, see :mod:`toolguard_evals.datadir`).
        threads: torch threads (default: the teacher's size's, 2).
        log: Progress lines.

    Returns:
        The new folder's data card (``out/data_card.json``): the teacher's, its tool-fit
        threshold replaced, with ``fit_distillation`` (teacher, layers, settings, text and
        pair counts, dev ROC-AUC of teacher and student, wall seconds).

    Raises:
        toolguard.errors.ConfigurationError: ``folder`` is not a trained folder or has no
            readable data card or calibration; ``out`` exists.
        ValueError: ``config.layers`` are not increasing teacher layer indexes or keep all
            of them; ``threads`` < 1.
        FileNotFoundError: A dataset of the training split is missing.
        ImportError: sentence-transformers, torch or scikit-learn is missing.
    """
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer
    from sklearn.metrics import roc_auc_score

    from toolguard_evals.verifier import train as tr
    from toolguard_evals.verifier.data import SIZES, neither_examples, training_examples

    started = time.monotonic()
    root, target = Path(folder), Path(out)
    if not (root / FIT_FOLDER / "config.json").is_file() or not (root / SLOT_FOLDER).is_dir():
        raise ConfigurationError(f"{root} is not a trained verifier folder (fit/ and slot/); "
                                 "train one with `toolguard verifier train`")
    if target.exists():
        raise ConfigurationError(f"{target} exists; distill-fit writes a new folder")
    card = _read_card(root)
    try:
        calibration = json.loads((root / CALIBRATION_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"{root}/{CALIBRATION_FILE} cannot be read: {exc!r}") from exc
    if not isinstance(calibration, dict) or "threshold" not in (calibration.get("slot") or {}):
        raise ConfigurationError(f"{root}/{CALIBRATION_FILE} has no slot threshold to keep")
    if threads is not None and threads < 1:
        raise ValueError("threads must be >= 1")
    try:
        encoder_config = json.loads((root / FIT_FOLDER / "config.json").read_text("utf-8"))
        available = int(encoder_config["num_hidden_layers"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigurationError(f"{root}/{FIT_FOLDER}/config.json names no layer count: "
                                 f"{exc!r}") from exc
    layers = _check_layers(config.layers, available)
    size, seed = card["size"], card["seed"]
    if size not in tr.CONFIGS:
        raise ConfigurationError(f"{root}'s data card names an unknown size {size!r}")
    fit_config = tr.CONFIGS[size] if threads is None else replace(tr.CONFIGS[size],
                                                                  threads=threads)
    examples = tr.cap_per_source(
        [e for e in training_examples(size, data_dir=data_dir, seed=seed) if e.kind == "tool_fit"],
        fit_config.fit_per_source, seed)
    train_fit = [(e.pair(), e.label) for e in examples if e.split == "train"]
    dev = [e for e in examples if e.split == "dev"]
    texts = sorted({tr.goal_of(q) for (q, _), _ in train_fit} | {d for (_, d), _ in train_fit})
    log(f"{len(texts)} training texts, {len(train_fit)} tool-fit training and {len(dev)} dev "
        f"pairs ({size}, seed {seed})")

    tr.set_seed(seed, fit_config.threads)
    teacher = SentenceTransformer(str(root / FIT_FOLDER), device="cpu").eval()
    embeddings = teacher.encode(texts, batch_size=config.batch_size, convert_to_numpy=True,
                                show_progress_bar=False)
    wanted = dict(zip(texts, embeddings, strict=True))
    student = SentenceTransformer(str(root / FIT_FOLDER), device="cpu")
    encoder = student[0].auto_model
    encoder.encoder.layer = torch.nn.ModuleList([encoder.encoder.layer[i] for i in layers])
    encoder.config.num_hidden_layers = len(layers)

    def mse(batch: Sequence[tuple[tuple[str, str], int]]) -> Any:
        batch_texts = [text for (text, _), _ in batch]
        found = student(student.preprocess(batch_texts))["sentence_embedding"]
        return torch.nn.functional.mse_loss(
            found, torch.from_numpy(np.stack([wanted[t] for t in batch_texts])))

    stage = replace(fit_config, epochs=config.epochs)
    tr.optimise(student, [((t, t), 0) for t in texts], mse, config.batch_size,
                config.learning_rate, stage, seed=seed, log=log, name="distil")

    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as tmp:
        staged = Path(tmp) / "verifier"
        student.save(str(staged / "distilled"))
        model = tr.fine_tune_fit(train_fit, fit_config, seed=seed, log=log,
                                 base=staged / "distilled")
        shutil.rmtree(staged / "distilled")
        model.save(str(staged / FIT_FOLDER))
        center = tr.goal_center(model, train_fit, seed=seed)
        (staged / FIT_FOLDER / GOAL_CENTER_FILE).write_text(json.dumps(center), encoding="utf-8")
        shutil.copytree(root / SLOT_FOLDER, staged / SLOT_FOLDER)

        pairs = [e.pair() for e in dev]
        scores = tr.fit_scores(model, pairs, center=read_goal_center(staged / FIT_FOLDER))
        teacher_scores = tr.fit_scores(teacher, pairs,
                                       center=read_goal_center(root / FIT_FOLDER))
        unseen = [e for e in neither_examples(data_dir=data_dir, seed=seed,
                                              limit=SIZES[size].rtb_records)
                  if e.kind == "tool_fit"]
        unseen_scores = tr.fit_scores(model, [e.pair() for e in unseen],
                                      center=read_goal_center(staged / FIT_FOLDER))
        fit = tr.calibrate(dev, scores, max_false_abstain=fit_config.max_false_abstain,
                           fit_max_false_abstain=fit_config.fit_max_false_abstain,
                           neither=(unseen, unseen_scores))
        labels = [e.label for e in dev]
        auc = ({"student": round(float(roc_auc_score(labels, scores)), 4),
                "teacher": round(float(roc_auc_score(labels, teacher_scores)), 4)}
               if len(set(labels)) == 2 else None)
        distilled = {"teacher": str(root), "layers": list(layers),
                     "teacher_layers": available, "settings": asdict(config),
                     "fine_tuning": asdict(fit_config), "n_texts": len(texts),
                     "n_train_pairs": len(train_fit), "n_dev_pairs": len(dev),
                     "dev_roc_auc": auc}
        calibration.update({"tool_fit": fit["tool_fit"], "relevance": fit["relevance"],
                            "fit_max_false_abstain": fit["fit_max_false_abstain"],
                            "fit_distillation": {"teacher": str(root), "layers": list(layers)}})
        (staged / CALIBRATION_FILE).write_text(json.dumps(calibration, indent=1),
                                               encoding="utf-8")
        distilled["wall_seconds"] = round(time.monotonic() - started, 1)
        card = {**card, "thresholds": {**card.get("thresholds", {}),
                                       "tool_fit": fit["tool_fit"]["threshold"]},
                "fit_distillation": distilled}
        (staged / "data_card.json").write_text(json.dumps(card, indent=1), encoding="utf-8")
        markdown = tr.data_card_markdown(card) + (
            f"\n## Tool-fit encoder distilled\n\n- teacher: {root} ({available} layers); "
            f"kept layers {list(layers)}\n- distillation: {json.dumps(asdict(config))}\n"
            f"- {len(texts)} training texts; dev ROC-AUC {auc}\n")
        (staged / "data_card.md").write_text(markdown, encoding="utf-8")
        shutil.move(str(staged), str(target))
    log(f"wrote {target}: tool fit {fit['tool_fit']['threshold']}, relevance "
        f"{fit['relevance']}, dev ROC-AUC {auc}, {distilled['wall_seconds']} s")
    return card
