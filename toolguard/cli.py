"""The ``toolguard`` command line (typer).

- ``toolguard demo``: a real model (the embedded SmolLM2 server, or ``--base-url``) as an
  agent on BFCL v4 multi-turn tasks, with the plain ToolNode loop and with the guard.
- ``toolguard eval detectors --json PATH``: the labelled BFCL detector suite.
- ``toolguard eval faults --json PATH``: the retry controller on BFCL gold replays with
  injected environment faults, next to LangChain's ``ToolRetryMiddleware``.
- ``toolguard eval abstain`` / ``toolguard eval familytool``: first cuts of the ICT-style
  abstain evaluation and the FamilyTool KG-extraction metrics (issues 5 and 4, in progress).
- ``toolguard bench overhead``: the guard's per-call overhead and the guarded/plain
  ToolNode step ratio.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
eval_app = typer.Typer(no_args_is_help=True, help="Reproducible evaluations.")
bench_app = typer.Typer(no_args_is_help=True, help="Speed benchmarks (print numbers).")
app.add_typer(eval_app, name="eval")
app.add_typer(bench_app, name="bench")


@app.command("demo")
def demo(
    episodes: Annotated[
        int, typer.Option(help="BFCL multi-turn episodes per mode (base, miss_param, "
                               "miss_func, base, ... in turn).")
    ] = 3,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    trace: Annotated[Path | None, typer.Option(help="Write every verdict as JSONL here.")] = None,
    faults: Annotated[
        bool, typer.Option(help="Inject timeouts, 429s and 403s into state-changing calls.")
    ] = False,
    base_url: Annotated[
        str | None,
        typer.Option(help="An OpenAI-compatible endpoint (e.g. vLLM); default: start the "
                          "embedded llama.cpp server with SmolLM2-135M."),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Model name at --base-url, or a GGUF path/alias locally.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Episode selection and fault seed.")] = 0,
    max_steps: Annotated[int, typer.Option(help="Model calls per user turn.")] = 4,
    request_timeout: Annotated[
        float, typer.Option(help="Seconds per model request (small models can run away).")
    ] = 30.0,
) -> None:
    """Run a real model as an agent on BFCL v4 multi-turn tasks, unguarded vs guarded."""
    import json

    from evals.demo import print_report, run_demo
    from toolguard.local_model import LocalModelServer, chat_model_for

    def run(chat: object) -> dict[str, object]:
        return run_demo(chat, episodes=episodes, seed=seed,  # type: ignore[arg-type]
                        trace_path=trace, faults=faults, max_steps=max_steps)

    if base_url:
        result = run(chat_model_for(base_url, model, timeout=request_timeout))
    else:
        with LocalModelServer(model or "smollm2") as server:
            result = run(server.chat_model(timeout=request_timeout))
    print_report(result)
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")


@eval_app.command("detectors")
def eval_detectors(
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    seed: Annotated[int, typer.Option(help="Seed for the perturbations.")] = 0,
    limit: Annotated[
        int | None, typer.Option(help="Records per BFCL category (default: the suite's own).")
    ] = None,
    mode: Annotated[
        list[str] | None,
        typer.Option(help="Guard mode(s): deterministic, deterministic-norelevance."),
    ] = None,
) -> None:
    """Run Guard.check on a labelled suite built from BFCL v4 gold calls (DATA.md §2b)."""
    from evals.detector_suite import main

    kwargs: dict[str, object] = {"seed": seed}
    if limit is not None:
        kwargs["limit_per_category"] = limit
    if mode:
        kwargs["modes"] = tuple(mode)
    main(str(json_path) if json_path else None, **kwargs)  # type: ignore[arg-type]


@eval_app.command("faults")
def eval_faults(
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    seed: Annotated[int, typer.Option(help="Seed for injection points and jitter.")] = 0,
    limit: Annotated[int | None, typer.Option(help="Episodes (default: all 200).")] = None,
) -> None:
    """Replay BFCL multi_turn_base with injected faults: toolguard vs ToolRetryMiddleware."""
    from evals.faults import main

    main(str(json_path) if json_path else None, seed=seed, limit=limit)


@eval_app.command("abstain")
def eval_abstain(
    dataset: Annotated[str, typer.Option(help="relytoolbench or bfcl.")] = "relytoolbench",
    mode: Annotated[str, typer.Option(help="Pre-check mode: deterministic.")] = "deterministic",
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="RelyToolBench folder (default ../shared/data/relytoolbench)."),
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Records per file/category.")] = None,
) -> None:
    """Abstain (ICT) eval: accuracy/F1 per subset, abstain = positive class (work in progress)."""
    from evals.abstain import main

    if dataset not in ("relytoolbench", "bfcl"):
        raise typer.BadParameter("dataset must be relytoolbench or bfcl")
    main(dataset, mode=mode, data_dir=data_dir, json_path=json_path,  # type: ignore[arg-type]
         limit=limit)


@eval_app.command("familytool")
def eval_familytool(
    data_dir: Annotated[
        Path, typer.Option(help="Folder with familytool-{b,e}.jsonl and familykg-{b,e}.txt.")
    ],
    subset: Annotated[str, typer.Option(help="b (base) or e (extended).")] = "b",
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    extraction: Annotated[str, typer.Option(help="Path extraction: exact, gs or rr.")] = "exact",
    generator: Annotated[
        str, typer.Option(help="deterministic, or golden (oracle paths).")
    ] = "deterministic",
) -> None:
    """KG-extraction metrics on FamilyTool (work in progress)."""
    from evals.familytool import main

    if subset not in ("b", "e") or extraction not in ("exact", "gs", "rr") or generator not in (
            "deterministic", "golden"):
        raise typer.BadParameter(
            "subset: b|e, extraction: exact|gs|rr, generator: deterministic|golden")
    main(data_dir, subset, str(json_path) if json_path else None,  # type: ignore[arg-type]
         extraction=extraction, generator=generator)  # type: ignore[arg-type]


@bench_app.command("overhead")
def bench_overhead(
    calls: Annotated[int, typer.Option(help="Guarded calls to time.")] = 2000,
    steps: Annotated[int, typer.Option(help="Graph steps to time per variant.")] = 300,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the numbers here.")
    ] = None,
) -> None:
    """Print the guard's p50/p99 per call (ms) and the guarded/plain ToolNode step ratio."""
    from evals.bench_overhead import main

    main(calls=calls, steps=steps, json_path=str(json_path) if json_path else None)


if __name__ == "__main__":  # pragma: no cover
    app()
