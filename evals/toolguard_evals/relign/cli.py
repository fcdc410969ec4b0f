"""``toolguard relign``: synthesize, SFT, sample pairs, DPO, export and evaluate (Relign).

Needs the ``relign`` extra (``pip install 'toolguard-agents[relign]'``: torch's CPU wheel,
transformers, trl, peft, accelerate).  Nothing heavy is imported here at module level, so
``toolguard --help`` works without it.  Multi-GPU: ``accelerate launch -m
toolguard_evals.relign.cli run ...`` (the trainers read accelerate's environment).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

relign_app = typer.Typer(no_args_is_help=True, help=__doc__)

BaseOpt = Annotated[str, typer.Option(
    help="Base model: qwen2.5-coder-0.5b / qwen2.5-coder-1.5b / smollm2 / gemma3-270m "
         "(bundled GGUF), a .gguf path, or a Hugging Face "
         "folder or id (e.g. Qwen/Qwen2.5-7B-Instruct on a GPU).")]
OutOpt = Annotated[Path, typer.Option(help="Output folder (stages resume from it).")]
SizeOpt = Annotated[str, typer.Option(help="ci | cpu | paper (see toolguard_evals.relign.config).")]
JsonOpt = Annotated[Path | None, typer.Option("--json", help="Write the report here.")]
ForceOpt = Annotated[bool, typer.Option(
    "--force", help="Replace finished stages whose settings or inputs changed (without it "
    "they are an error); unchanged stages are kept (delete a stage's folder to rerun it).")]
SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", help="Override one setting of the preset, FIELD=VALUE (repeatable; VALUE is read "
    "as JSON when it parses, e.g. --set dpo_lr=1e-4 --set eval_groups='[\"G2_category\"]'; "
    "fields: toolguard_evals.relign.config.RelignConfig).")]
ToolbenchOpt = Annotated[list[Path] | None, typer.Option(
    "--toolbench", help="ToolBench-format training file (repeatable).")]
ProgressOpt = Annotated[bool, typer.Option(help="Progress bars.")]


def passive_omp_wait() -> None:
    """Let OpenMP threads sleep, not spin, while they wait (before torch is imported).

    torch's CPU kernels run on OpenMP threads that busy-wait between parallel regions by
    default.  When another process keeps the cores busy, the spinning threads steal each
    other's time slices: measured here on 2 cores beside one other heavy job, a 1000-token
    SmolLM2-135M forward took 10 s instead of 3.7 s and a decoding step 0.74 s instead of
    0.05 s.  With ``OMP_WAIT_POLICY=PASSIVE`` two threads ran as fast as one thread there
    (on an idle machine sleeping threads cost a wake-up per parallel region; not measured
    here).  A value the user set is kept; once torch is imported the setting has no effect.
    """
    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def parse_sets(items: list[str] | None) -> dict[str, Any]:
    """``["dpo_lr=1e-4", ...]`` as ``{"dpo_lr": 0.0001, ...}`` (values read as JSON if they parse).

    Raises:
        typer.BadParameter: An item without ``=``, or a field RelignConfig does not have.
    """
    import json

    from toolguard_evals.relign.config import RelignConfig

    out: dict[str, Any] = {}
    for item in items or ():
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise typer.BadParameter(f"--set takes FIELD=VALUE, got {item!r}")
        if name == "size" or name not in RelignConfig.model_fields:
            fields = ", ".join(f for f in RelignConfig.model_fields if f != "size")
            raise typer.BadParameter(f"--set: no setting {name!r}; settings: {fields}")
        try:
            out[name] = json.loads(raw)
        except json.JSONDecodeError:
            out[name] = raw
    return out


def _run(stages: tuple[str, ...], *, base: str, out: Path, size: str, json_path: Path | None,
         force: bool, toolbench: list[Path] | None, progress: bool,
         serve_check: bool = False, data_dir: Path | None = None,
         sets: list[str] | None = None) -> dict[str, Any]:
    passive_omp_wait()
    try:
        import peft  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
        import trl  # noqa: F401
    except ImportError as exc:
        typer.echo(f"toolguard relign needs the relign extra ({exc}); install it with "
                   "`pip install 'toolguard-agents[relign]'`", err=True)
        raise typer.Exit(2) from exc
    from toolguard_evals.relign.config import SIZES, preset
    from toolguard_evals.relign.run import Runner, StageMismatchError
    from toolguard_evals.runner import write_json

    if size not in SIZES:
        raise typer.BadParameter(f"--size must be one of {SIZES}")
    overrides = parse_sets(sets)
    if toolbench:
        overrides["toolbench_files"] = tuple(str(p) for p in toolbench)
    try:
        cfg = preset(size, **overrides)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        typer.echo(f"toolguard relign: bad settings: {exc}", err=True)
        raise typer.Exit(2) from exc
    runner = Runner(cfg, base=base, out=out, force=force, progress=progress,
                    serve_check=serve_check, data_dir=data_dir)
    try:
        report = runner.run(stages)  # type: ignore[arg-type]
    except (StageMismatchError, FileNotFoundError, ValueError) as exc:
        typer.echo(f"toolguard relign: {exc}", err=True)
        raise typer.Exit(1) from exc
    print_report(report)
    write_json(json_path, report)
    return report


def print_report(report: dict[str, Any]) -> None:
    """Stage timings and the base / SFT / DPO table (unguarded, guarded in brackets)."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    stages = Table(title=f"Relign stages ({report['size']})")
    for col in ("stage", "examples", "steps", "seconds", "loss start", "loss end"):
        stages.add_column(col)
    for name, s in report["stages"].items():
        stages.add_row(name, str(s["examples"]), str(s["steps"]), str(s["seconds"]),
                       _fmt(s["loss_start"]), _fmt(s["loss_end"]))
    console.print(stages)
    if not report["eval"]:
        return
    models = list(report["eval"])
    subsets = list(report["eval"][models[0]])
    table = Table(title="Relign eval: unguarded (guarded)")
    table.add_column("subset · metric")
    for m in models:
        table.add_column(m)
    for sub in subsets:
        for key in ("tool_call_rate", "indecisive_rate", "change_tools_rate",
                    "talk_to_user_rate", "tool_hallucination_rate", "bcu", "accuracy"):
            cells = [f"{_fmt(report['eval'][m][sub][key])} "
                     f"({_fmt(report['eval_guarded'][m][sub][key])})" for m in models]
            table.add_row(f"{sub} · {key}", *cells)
    console.print(table)
    console.print(f"total {report['total_seconds']} s")


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{float(value):.1f}" if isinstance(value, int | float) \
        else str(value)


@relign_app.command("run")
def run_command(base: BaseOpt = "smollm2", out: OutOpt = Path("out/relign"),
                size: SizeOpt = "cpu", json_path: JsonOpt = None, force: ForceOpt = False,
                toolbench: ToolbenchOpt = None, progress: ProgressOpt = True,
                serve_check: Annotated[bool, typer.Option(
                    help="In export, start `transformers serve` once and ask it a call.")]
                = False, sets: SetOpt = None) -> None:
    """Every stage in order (finished stages are skipped), then the report."""
    from toolguard_evals.relign.run import STAGES

    _run(STAGES, base=base, out=out, size=size, json_path=json_path, force=force,
         toolbench=toolbench, progress=progress, serve_check=serve_check, sets=sets)


def _stage(name: str, doc: str) -> None:
    def command(base: BaseOpt = "smollm2", out: OutOpt = Path("out/relign"),
                size: SizeOpt = "cpu", json_path: JsonOpt = None, force: ForceOpt = False,
                toolbench: ToolbenchOpt = None, progress: ProgressOpt = True,
                sets: SetOpt = None) -> None:
        stages = ("base", name) if name in ("synth", "sft") else (name,)
        _run(stages, base=base, out=out, size=size, json_path=json_path, force=force,
             toolbench=toolbench, progress=progress, sets=sets)

    command.__doc__ = doc
    relign_app.command(name)(command)


_stage("synth", "Synthesize the SFT records and DPO prompts (4 : 3 : 3).")
_stage("sft", "Supervised fine-tuning with TRL (LoRA or full).")
_stage("sample", "Sample K responses per DPO prompt and build preference pairs.")
_stage("dpo", "DPO with TRL from the SFT model.")
_stage("export", "Write the adapter / merged paths and the serve commands.")
_stage("eval", "Evaluate base, SFT and DPO (RelyToolBench slice, BFCL irrelevance, BFCL "
                "live_simple accuracy).")


if __name__ == "__main__":
    relign_app()
