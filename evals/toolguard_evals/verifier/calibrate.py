"""``toolguard verifier calibrate DIR``: choose a trained folder's operating points again.

A folder's thresholds (``calibration.json``) are chosen by
:func:`~toolguard_evals.verifier.train.calibrate`: each "when unsure, proceed" bound must
hold on the dev split and on the ``none`` sources, tools and domains no model trains on
(:func:`~toolguard_evals.verifier.data.neither_examples`).  This command applies that rule
to a folder written before the rule, or whose slot model was replaced (the slot scorer's
MIL head, ``toolguard_evals.verifier.slot_mil``), without training again:

1. the dev split is rebuilt from ``data_card.json`` (size and seed, capped per source as
   ``verifier train`` caps it) and the ``none`` examples are built;
2. the folder scores both through :class:`toolguard.verifier.LearnedVerifier` (torch), so
   the scores are the library's own;
3. the tool-fit and slot thresholds and the relevance operating point are written to
   ``calibration.json``; its other keys stay.  A slot scorer's thresholds are tried on
   :func:`~toolguard_evals.verifier.slot_mil.slot_threshold_grid` (its scores sit near 0).

An ONNX export with int8 encoders (``onnx/export.json``) has its int8 thresholds moved again
from the new ones (:func:`~toolguard_evals.verifier.export_onnx.calibrate_int8`).
Evaluation-only sources are never read.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolguard.errors import ConfigurationError
from toolguard.verifier import CALIBRATION_FILE, FIT_FOLDER, SLOT_FOLDER, release_models

ONNX_CONFIG = Path("onnx") / "export.json"
"""The export's settings, where the int8 thresholds live (``toolguard.onnx_backend``)."""


def _write_json(path: Path, value: Any) -> None:
    """Write ``value`` to ``path`` through a temporary file (never half a file)."""
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, delete=False,
                                     prefix=f".{path.name}.") as tmp:
        json.dump(value, tmp, indent=1)
    os.replace(tmp.name, path)


def recalibrate(folder: str | Path, *, data_dir: str | Path | None = None,
                log: Callable[[str], None] = print) -> dict[str, Any]:
    """Choose ``folder``'s thresholds again on dev and the ``none`` sources (module docstring).

    Args:
        folder: A ``toolguard verifier train`` output folder.
        data_dir: The data root (default ``$TOOLGUARD_DATA_DIR``, see
            :mod:`toolguard_evals.datadir`).
        log: Progress lines.

    Returns:
        The new ``calibration.json``.

    Raises:
        toolguard.errors.ConfigurationError: ``folder`` is not a trained folder, or its data
            card names no size and seed.
        FileNotFoundError: A dataset of the dev split or of the ``none`` sources is missing.
        ImportError: torch or sentence-transformers is missing.
    """
    from toolguard.slot_scorer import is_slot_scorer_folder
    from toolguard.verifier import LearnedVerifier
    from toolguard_evals.verifier import train as tr
    from toolguard_evals.verifier.data import SIZES, neither_examples, training_examples
    from toolguard_evals.verifier.slot_mil import slot_threshold_grid

    started = time.monotonic()
    root = Path(folder)
    if not (root / FIT_FOLDER / "config.json").is_file() or not (root / SLOT_FOLDER).is_dir():
        raise ConfigurationError(f"{root} is not a trained verifier folder (fit/ and slot/); "
                                 "train one with `toolguard verifier train`")
    try:
        card = json.loads((root / "data_card.json").read_text(encoding="utf-8"))
        size, seed = card["size"], int(card["seed"])
        config = tr.CONFIGS[size]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigurationError(f"calibrate rebuilds {root}'s dev split from its "
                                 f"data_card.json (size and seed): {exc!r}") from exc
    try:
        raw = (root / CALIBRATION_FILE).read_bytes()
        kept: bytes | None = raw
        old = json.loads(raw)
    except FileNotFoundError:
        kept, old = None, {}
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"{root}/{CALIBRATION_FILE} cannot be read: {exc!r}") from exc
    capped = tr.capped_examples(training_examples(size, data_dir=data_dir, seed=seed), config,
                                seed)
    dev = [e for e in capped if e.split == "dev"]
    unseen = neither_examples(data_dir=data_dir, seed=seed, limit=SIZES[size].rtb_records)
    log(f"dev split rebuilt ({size}, seed {seed}): {len(dev)} pairs; {len(unseen)} pairs of "
        "tools and domains never trained on")
    release_models(root)  # score with the files as they are now
    verifier = LearnedVerifier(root, backend="torch")
    dev_scores = verifier.score([e.pair() for e in dev])
    unseen_scores = verifier.score([e.pair() for e in unseen])
    grid = slot_threshold_grid() if is_slot_scorer_folder(root / SLOT_FOLDER) else None
    fresh = tr.calibrate(dev, dev_scores, max_false_abstain=config.max_false_abstain,
                         fit_max_false_abstain=config.fit_max_false_abstain,
                         neither=(unseen, unseen_scores), slot_grid=grid)
    calibration = {**(old if isinstance(old, dict) else {}), **fresh,
                   "calibrated": {"on": ["dev", "none"], "size": size, "seed": seed,
                                  "n_dev": len(dev), "n_none": len(unseen),
                                  "wall_seconds": round(time.monotonic() - started, 1)}}
    export = root / ONNX_CONFIG
    try:
        settings = json.loads(export.read_text(encoding="utf-8")) if export.is_file() else {}
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"{export} cannot be read: {exc!r}") from exc
    _write_json(root / CALIBRATION_FILE, calibration)
    release_models(root)
    summary = {kind: {key: calibration[kind].get(key) for key in
                      ("threshold", "threshold_dev", "threshold_none", "false_abstain_dev",
                       "false_abstain_none")} for kind in ("tool_fit", "slot")}
    log(f"thresholds {json.dumps(summary)}; relevance {json.dumps(calibration['relevance'])}")
    if "int8" in settings:
        from toolguard_evals.verifier.export_onnx import calibrate_int8

        try:  # the int8 points are moved from the new float32 ones
            settings["int8"] = calibrate_int8(root, root, data_dir=data_dir, log=log)
        except BaseException:
            if kept is None:  # never leave float32 and int8 points of two calibrations
                (root / CALIBRATION_FILE).unlink()
            else:
                (root / CALIBRATION_FILE).write_bytes(kept)
            release_models(root)
            raise
        _write_json(export, settings)
        release_models(root)
    return calibration


__all__ = ["recalibrate"]
