"""The ``toolguard`` command line (typer).

Commands: ``demo``, ``eval ...``, ``bench ...``, ``relign ...``, ``verifier train`` and
``serve``; each command's help says what it runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, cast

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
eval_app = typer.Typer(no_args_is_help=True, help="Reproducible evaluations.")
bench_app = typer.Typer(no_args_is_help=True, help="Speed benchmarks (print numbers).")
app.add_typer(eval_app, name="eval")
app.add_typer(bench_app, name="bench")
# the relign sub-app imports nothing heavy at module level (torch etc. inside its commands)
from toolguard_evals.relign.cli import relign_app  # noqa: E402

app.add_typer(relign_app, name="relign")
from toolguard_evals.verifier.cli import verifier_app  # noqa: E402

app.add_typer(verifier_app, name="verifier")


@contextmanager
def _model_run(command: str) -> Iterator[None]:
    """Exit 1 with the reason when a command that runs a model has nothing to report.

    ``EvalRunError`` (every case failed, or more than the allowed share) and
    ``LocalModelError`` (the embedded server did not start, crashed, or died) are printed
    to stderr with their first error and log tail, never as a table of zeros with exit 0.
    """
    from toolguard_evals.local_model import LocalModelError
    from toolguard_evals.runner import EvalRunError

    try:
        yield
    except (EvalRunError, LocalModelError) as exc:
        typer.echo(f"toolguard {command}: failed: {exc}", err=True)
        raise typer.Exit(1) from exc


@app.command("demo")
def demo(
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    trace: Annotated[
        Path | None, typer.Option(help="Write every run (metrics and calls) as JSONL here.")
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(help="An OpenAI-compatible endpoint (e.g. vLLM); default: start the "
                          "embedded llama.cpp server."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="A bundled model (qwen2.5-coder-1.5b, the default; "
                          "qwen2.5-coder-0.5b, smollm2, gemma3-270m) or a GGUF path; with "
                          "--base-url the model id there."),
    ] = None,
    modes: Annotated[
        str, typer.Option(help="Comma-separated modes, the first the baseline: unguarded, "
                               "guarded (the README's stack), guard, loop_guard, retry, "
                               "precheck, guarded_precheck (the stack after the "
                               "pre-check), guard_llm, guarded_sv (LLM judges: the agent's "
                               "own model); or 'all'.")
    ] = "unguarded,guarded",
    tasks: Annotated[
        str | None,
        typer.Option(help="Tasks per category, e.g. 'simple_python=20,irrelevance=10' "
                          "(default: the built-in mix of 54), or 'ids:ID,ID,...'."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Task sampling seed (and the model's seed).")] = 0,
    protocol: Annotated[
        str, typer.Option(help="single (BFCL's: the turn ends once calls ran) or loop "
                               "(tool results go back to the model).")
    ] = "single",
    max_steps: Annotated[int, typer.Option(help="Model calls per task at most.")] = 6,
    cache: Annotated[
        Path | None,
        typer.Option(help="JSONL response cache: a rerun resumes from it (default: in "
                          "memory, shared by the modes of this run)."),
    ] = None,
    concurrency: Annotated[int, typer.Option(help="Runs in flight (server slots).")] = 1,
    threads: Annotated[
        int | None,
        typer.Option(help="CPU threads of the embedded server (default: every CPU; on a "
                          "busy 2-core machine 1 decodes faster)."),
    ] = None,
    request_timeout: Annotated[float, typer.Option(help="Seconds per model request.")] = 120.0,
    suite: Annotated[
        str, typer.Option(help="bfcl (the default: single-turn tasks judged by BFCL's "
                               "checker) or multi-turn (BFCL's executable multi-turn "
                               "episodes, judged by the final state).")
    ] = "bfcl",
    episodes: Annotated[int, typer.Option(help="multi-turn: episodes per mode.")] = 3,
    faults: Annotated[
        bool, typer.Option(help="multi-turn: inject timeouts, 429s and 403s into writes.")
    ] = False,
) -> None:
    """Run a real model as an agent on BFCL v4 tasks, unguarded vs guarded, judged by gold."""
    from toolguard_evals.local_model import DEFAULT_AGENT_MODEL, LocalModelServer, chat_model_for
    from toolguard_evals.runner import JsonlLLMCache

    if suite not in ("bfcl", "multi-turn"):
        raise typer.BadParameter("suite must be bfcl or multi-turn")
    if protocol not in ("single", "loop"):
        raise typer.BadParameter("protocol must be single or loop")
    if concurrency < 1 or max_steps < 1:
        raise typer.BadParameter("concurrency and max-steps must be >= 1")
    llm_cache = JsonlLLMCache(cache)
    with _model_run("demo"):
        if base_url:
            chat = chat_model_for(base_url, model, timeout=request_timeout, cache=llm_cache,
                                  seed=seed, request_timeout=request_timeout, max_retries=1)
            result = _demo(chat, suite, json_path, trace, modes, tasks, seed, protocol,
                           max_steps, concurrency, episodes, faults)
        else:
            with LocalModelServer(model or DEFAULT_AGENT_MODEL, n_parallel=concurrency,
                                  n_threads=threads) as server:
                chat = server.chat_model(timeout=request_timeout, cache=llm_cache, seed=seed)
                result = _demo(chat, suite, json_path, trace, modes, tasks, seed, protocol,
                               max_steps, concurrency, episodes, faults)
        if suite == "bfcl":
            typer.echo(f"response cache: {llm_cache.hits} hits, {llm_cache.misses} misses")
        del result


def _parse_tasks(spec: str | None) -> tuple[dict[str, int] | None, list[str] | None]:
    if spec is None:
        return None, None
    if spec.startswith("ids:"):
        return None, [i for i in spec[4:].split(",") if i]
    mix: dict[str, int] = {}
    for part in spec.split(","):
        name, _, count = part.partition("=")
        try:
            mix[name.strip()] = int(count)
        except ValueError as exc:
            raise typer.BadParameter(f"--tasks: {part!r} is not CATEGORY=COUNT") from exc
    return mix, None


def _demo(chat: object, suite: str, json_path: Path | None, trace: Path | None, modes: str,
          tasks: str | None, seed: int, protocol: str, max_steps: int, concurrency: int,
          episodes: int, faults: bool) -> dict[str, object]:
    from toolguard_evals.runner import write_json

    if suite == "multi-turn":
        from toolguard_evals.demo import check_demo, print_report, run_demo

        result = run_demo(chat, episodes=episodes, seed=seed,  # type: ignore[arg-type]
                          trace_path=trace, faults=faults, max_steps=max_steps)
        print_report(result)
        write_json(str(json_path) if json_path else None, result)
        check_demo(result)
        return result
    from toolguard_evals.demo.agent import AGENT_MODES
    from toolguard_evals.demo.agent_demo import (
        check_agent_demo,
        print_agent_report,
        run_agent_demo,
    )
    from toolguard_evals.demo.tasks import tasks_by_id

    chosen = list(AGENT_MODES) if modes == "all" else [m.strip() for m in modes.split(",")]
    mix, ids = _parse_tasks(tasks)
    try:
        result = run_agent_demo(
            chat, tasks=tasks_by_id(ids) if ids else None,  # type: ignore[arg-type]
            mix=mix, seed=seed, modes=chosen, protocol=protocol,  # type: ignore[arg-type]
            max_steps=max_steps, concurrency=concurrency, trace_path=trace)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    print_agent_report(result)
    write_json(str(json_path) if json_path else None, result)
    check_agent_demo(result)
    return result


@app.command("serve")
def serve_command(
    model: Annotated[str, typer.Option(help="Hugging Face model id or local model folder.")],
    lora: Annotated[
        Path | None, typer.Option(help="A LoRA adapter folder (PEFT), served under its name.")
    ] = None,
    port: Annotated[int, typer.Option(help="TCP port of the OpenAI-compatible server.")] = 8000,
    host: Annotated[str | None, typer.Option(help="Interface to bind (vLLM's default).")] = None,
    tool_parser: Annotated[
        str | None,
        typer.Option(help="vLLM --tool-call-parser (default: from the model family, e.g. "
                          "hermes for Qwen2.5, llama3_json for Llama 3.x, mistral)."),
    ] = None,
    served_model_name: Annotated[
        str | None, typer.Option(help="Model id clients send (--served-model-name).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the vllm command and exit.")
    ] = False,
) -> None:
    """Launch `vllm serve` with tool calling enabled (auto tool choice + the family's parser)."""
    import shlex

    from toolguard_evals.serve import VLLMNotFoundError, build_command, vllm_launcher

    options: dict[str, object] = {"lora": lora, "port": port, "host": host,
                                  "tool_parser": tool_parser,
                                  "served_model_name": served_model_name}
    try:
        if dry_run:
            try:
                launcher = vllm_launcher()
            except VLLMNotFoundError:
                launcher = ["vllm"]
            typer.echo(shlex.join(build_command(model, launcher=launcher, **options)))  # type: ignore[arg-type]
            return
        cmd = build_command(model, launcher=vllm_launcher(), **options)  # type: ignore[arg-type]
    except (VLLMNotFoundError, ValueError) as exc:
        typer.echo(f"toolguard serve: {exc}", err=True)
        raise typer.Exit(1) from exc
    import subprocess

    typer.echo(f"running: {shlex.join(cmd)}", err=True)
    raise typer.Exit(subprocess.run(cmd, check=False).returncode)


@eval_app.command("detectors")
def eval_detectors(
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    seed: Annotated[int, typer.Option(help="Seed for the perturbations.")] = 0,
    limit: Annotated[
        int | None, typer.Option(help="Records per BFCL category (default: the suite's own).")
    ] = None,
    mode: Annotated[
        list[str] | None,
        typer.Option(help="Guard mode(s): deterministic, deterministic-norelevance, "
                          "embedding, learned (relevance='learned': needs --verifier)."),
    ] = None,
    suite_b: Annotated[
        bool, typer.Option("--suite-b/--no-suite-b",
                           help="Also run suite B (dialogues, ToolBench, CRITICTOOL docs).")
    ] = True,
    verifier: Annotated[
        Path | None, typer.Option(help="Mode learned: a `toolguard verifier train` folder "
                                       "(default: $TOOLGUARD_VERIFIER).")
    ] = None,
) -> None:
    """Run Guard.check on the labelled suites: BFCL v4 gold calls (DATA.md §2b) and suite B.

    The JSON has both side by side under ``by_suite``.
    """
    import os

    from toolguard.verifier import ENV_VAR
    from toolguard_evals.detector_suite import main

    if verifier is not None:
        os.environ[ENV_VAR] = str(verifier)

    kwargs: dict[str, object] = {"seed": seed, "suite_b": suite_b}
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
    from toolguard_evals.faults import main

    main(str(json_path) if json_path else None, seed=seed, limit=limit)


@eval_app.command("injection")
def eval_injection(
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    benign_limit: Annotated[
        int | None, typer.Option(help="Benign flows to run (default: all of the corpus's).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Dialogue corpus seed.")] = 0,
    agentdojo: Annotated[
        bool, typer.Option("--agentdojo", help="Replay AgentDojo's suites instead of our "
                                               "cases (agentdojo extra).")
    ] = False,
    suite: Annotated[
        list[str] | None, typer.Option("--suite", help="AgentDojo suite, repeatable "
                                                       "(default: banking and slack).")
    ] = None,
    attack: Annotated[
        list[str] | None, typer.Option("--attack", help="AgentDojo attack, repeatable (default: "
                                                        "important_instructions, tool_knowledge, "
                                                        "ignore_previous).")
    ] = None,
    mode: Annotated[
        list[str] | None, typer.Option("--mode", help="as_given (effects unknown) or "
                                                      "reads_declared, repeatable (default: "
                                                      "both).")
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="AgentDojo tool output format: yaml or json.")
    ] = "yaml",
    user_task: Annotated[
        list[str] | None, typer.Option("--user-task", help="Only these AgentDojo user task "
                                                           "ids, repeatable.")
    ] = None,
    held_out: Annotated[
        bool, typer.Option("--held-out", help="Allow AgentDojo's workspace and travel suites "
                                              "(kept aside to measure from outside; without "
                                              "--suite: runs them).")
    ] = False,
) -> None:
    """Prompt injection through tool output: injected-and-executed, false confirmations."""
    if not agentdojo:
        if suite or attack or mode or user_task or held_out or fmt != "yaml":
            raise typer.BadParameter("--suite, --attack, --mode, --format, --user-task and "
                                     "--held-out need --agentdojo")
        from toolguard_evals.injection import main

        main(str(json_path) if json_path else None, benign_limit=benign_limit, seed=seed)
        return
    from toolguard_evals import agentdojo as ad

    chosen = list(suite or (ad.HELD_OUT_SUITES if held_out else ad.DEFAULT_SUITES))
    try:  # a held-out suite without --held-out, an unknown suite, attack, mode or format
        ad.validate_options(chosen, attack or ad.DEFAULT_ATTACKS, mode or ad.MODES, fmt,
                            held_out=held_out)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    held = [s for s in chosen if s in ad.HELD_OUT_SUITES]
    if held:
        typer.echo(f"WARNING: running held-out AgentDojo suites ({', '.join(held)}): for "
                   "measurement from outside only; never tune toolguard on these numbers.",
                   err=True)
    with _model_run("eval injection --agentdojo"):
        ad.main(str(json_path) if json_path else None, suites=chosen, attacks=attack,
                modes=cast("list[ad.Mode] | None", mode), fmt=cast("ad.Format", fmt),
                held_out=held_out, user_tasks=user_task)


@eval_app.command("agentdojo-agent")
def eval_agentdojo_agent(
    agent_base_url: Annotated[
        str, typer.Option(help="OpenAI-compatible endpoint of the agent model, e.g. "
                               "http://127.0.0.1:8515/v1 (llama-server --jinja).")
    ],
    agent_model: Annotated[
        str | None, typer.Option(help="Model id at --agent-base-url (default: the first).")
    ] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    cache: Annotated[
        Path | None, typer.Option(help="JSONL response cache: a rerun resumes from it.")
    ] = None,
    suite: Annotated[
        list[str] | None, typer.Option("--suite", help="banking or slack, repeatable "
                                                       "(default: both; no held-out suite).")
    ] = None,
    mode: Annotated[
        list[str] | None, typer.Option("--mode", help="unguarded, guarded or guarded_reads, "
                                                      "repeatable (default: unguarded, "
                                                      "guarded).")
    ] = None,
    attack: Annotated[
        list[str] | None, typer.Option("--attack", help="AgentDojo attack, repeatable "
                                                        "(default: important_instructions).")
    ] = None,
    no_attack: Annotated[bool, typer.Option("--no-attack", help="Benign episodes only.")] = False,
    limit: Annotated[
        int | None, typer.Option("--limit", help="Benign user tasks per suite (the first; "
                                                 "default 8; 0: none).")
    ] = 8,
    pairs: Annotated[
        int | None, typer.Option(help="(user task, injection task) pairs per suite, seeded "
                                      "sample (default 6; 0: none).")
    ] = 6,
    seed: Annotated[int, typer.Option(help="Pair sampling seed.")] = 0,
    user_task: Annotated[
        list[str] | None, typer.Option("--user-task", help="Only these user task ids.")
    ] = None,
    injection_task: Annotated[
        list[str] | None, typer.Option("--injection-task", help="Only these injection task "
                                                                "ids.")
    ] = None,
    max_model_calls: Annotated[int, typer.Option(help="Model replies per episode at most.")] = 8,
    max_tokens: Annotated[int, typer.Option(help="Tokens per completion at most.")] = 384,
    concurrency: Annotated[int, typer.Option(help="Episodes in flight (server slots).")] = 2,
    request_timeout: Annotated[float, typer.Option(help="Seconds per model request.")] = 300.0,
) -> None:
    """AgentDojo (banking, slack) with a real model as the agent, unguarded and guarded."""
    from toolguard_evals import agentdojo_agent as aa
    from toolguard_evals.agentdojo import DEFAULT_SUITES
    from toolguard_evals.local_model import chat_model_for

    suites = list(suite or DEFAULT_SUITES)
    modes = list(mode or aa.DEFAULT_AGENT_MODES)
    attacks = [] if no_attack else list(attack or ["important_instructions"])
    try:
        aa.build_cases(suites, cast("list[aa.AgentMode]", modes), attacks, benign_limit=0,
                       pairs=0)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if concurrency < 1 or max_model_calls < 1 or max_tokens < 1:
        raise typer.BadParameter("concurrency, max-model-calls and max-tokens must be >= 1")
    llm_cache = aa.EpisodeCache(cache)
    with _model_run("eval agentdojo-agent"):
        chat = chat_model_for(agent_base_url, agent_model, cache=llm_cache, max_tokens=max_tokens,
                              request_timeout=request_timeout, max_retries=1)
        assert chat is not None
        aa.main(chat, str(json_path) if json_path else None, model_name=chat.model_name,
                suites=suites, modes=cast("list[aa.AgentMode]", modes), attacks=attacks,
                benign_limit=limit, pairs=pairs, seed=seed, user_tasks=user_task,
                injection_tasks=injection_task,
                max_model_calls=max_model_calls, concurrency=concurrency,
                settings={"temperature": 0.0, "max_tokens": max_tokens})
    typer.echo(f"response cache: {llm_cache.hits} hits, {llm_cache.misses} misses")


@eval_app.command("abstain")
def eval_abstain(
    dataset: Annotated[
        str, typer.Option(help="relytoolbench, bfcl or dialogues (our multi-turn corpus).")
    ] = "relytoolbench",
    mode: Annotated[
        str, typer.Option(help="deterministic, structured_verification, cot, zero_shot, "
                               "implicit (the agent model with the tools; a call = proceed), "
                               "learned (a trained verifier: --verifier), guarded (the "
                               "model as an agent with the README's stack: a call that "
                               "runs = proceed, the guard's question = ask_user) or "
                               "guarded_precheck (that stack after the pre-check: "
                               "deterministic, or learned with --verifier).")
    ] = "deterministic",
    part: Annotated[
        list[str] | None,
        typer.Option(help="Only this part (repeatable): a RelyToolBench group (G2_category), "
                          "a BFCL category (multi_turn_miss_param, irrelevance, ...) or a "
                          "dialogue domain (or held-back: the domains the learned verifier "
                          "never trains on)."),
    ] = None,
    cache: Annotated[
        Path | None,
        typer.Option(help="JSONL cache of the model's responses: a rerun resumes from it, "
                          "and modes share the requests they have in common."),
    ] = None,
    max_tokens: Annotated[
        int, typer.Option(help="Tokens per model completion at most (with --base-url; the "
                               "embedded server always caps at 256).")
    ] = 256,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="RelyToolBench folder (default: $TOOLGUARD_DATA_DIR/relytoolbench, "
                          "else ../shared/data/relytoolbench)."),
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Records/episodes per file/category.")] = None,
    base_url: Annotated[
        str | None,
        typer.Option(help="OpenAI-compatible endpoint for the LLM modes (e.g. vLLM); default: "
                          "start the embedded llama.cpp server with Qwen2.5-Coder-1.5B."),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Model name at --base-url, or a GGUF path/alias locally.")
    ] = None,
    relevance: Annotated[
        str, typer.Option(help="Deterministic tool relevance: lexical or embedding "
                               "(embed extra).")
    ] = "lexical",
    missing_info: Annotated[
        str, typer.Option(help="Deterministic ask_user policy: vague (precision) or unstated "
                               "(recall).")
    ] = "vague",
    request_timeout: Annotated[float, typer.Option(help="Seconds per model request.")] = 60.0,
    verifier: Annotated[
        Path | None,
        typer.Option(help="learned: a `toolguard verifier train` output folder (its "
                          "calibration.json gives the thresholds) or a model folder; "
                          "default $TOOLGUARD_VERIFIER. guarded_precheck: the agent's "
                          "pre-check is then the learned one."),
    ] = None,
    fit_threshold: Annotated[
        float | None, typer.Option(help="learned: tool-fit threshold (default: calibrated).")
    ] = None,
    slot_threshold: Annotated[
        float | None, typer.Option(help="learned: slot threshold (default: calibrated).")
    ] = None,
    backend: Annotated[
        str, typer.Option(help="learned: torch, onnx or onnx-int8 (the folder's export "
                               "from `toolguard verifier export-onnx [--int8]`).")
    ] = "torch",
    finish_tool: Annotated[
        bool, typer.Option(help="implicit / guarded modes with a Relign-tuned model "
                                "(`toolguard relign run`): offer it RelyToolBench's Finish; "
                                "its TalkToUser / ChangeTools read as ask_user / "
                                "no_suitable_tool (IndecisiveActionsMiddleware).")
    ] = False,
    look_up_first: Annotated[
        bool, typer.Option(help="guarded / guarded_precheck: the guard sends a call with "
                                "ungiven values back to the model once before asking the "
                                "user (GuardMiddleware(look_up_first=True)).")
    ] = False,
) -> None:
    """Abstain (ICT) eval: accuracy/F1 per subset (abstain = positive class), three-way.

    The three-way scores (per-label precision/recall, macro-F1, false abstains) come for
    all cases and per split of the learned verifier's data (eval = evaluation-only).
    """
    from toolguard_evals.abstain import EVAL_MODES, main

    if dataset not in ("relytoolbench", "bfcl", "dialogues"):
        raise typer.BadParameter("dataset must be relytoolbench, bfcl or dialogues")
    if mode not in EVAL_MODES:
        raise typer.BadParameter(f"mode must be one of {', '.join(EVAL_MODES)}")
    if relevance not in ("lexical", "embedding"):
        raise typer.BadParameter("relevance must be lexical or embedding")
    if missing_info not in ("vague", "unstated"):
        raise typer.BadParameter("missing-info must be vague or unstated")
    from toolguard.verifier import BACKENDS

    if backend not in BACKENDS:
        raise typer.BadParameter(f"backend must be one of {', '.join(BACKENDS)}")
    from toolguard_evals.abstain import AGENT_MODES

    if finish_tool and mode not in AGENT_MODES:
        raise typer.BadParameter(f"--finish-tool is for --mode {', '.join(AGENT_MODES)}")
    from toolguard_evals.abstain import GUARDED_MODES

    if look_up_first and mode not in GUARDED_MODES:
        raise typer.BadParameter(f"--look-up-first is for --mode {' or '.join(GUARDED_MODES)}")
    kwargs: dict[str, object] = {"mode": mode, "data_dir": data_dir, "json_path": json_path,
                                 "limit": limit, "relevance": relevance,
                                 "missing_info": missing_info, "parts": part,
                                 "finish_tool": finish_tool, "look_up_first": look_up_first}
    given = {"fit_threshold": fit_threshold, "slot_threshold": slot_threshold}
    learned = {"verifier": verifier, "backend": backend,
               "thresholds": {k: v for k, v in given.items() if v is not None}}
    if mode == "learned":
        main(dataset, **learned, **kwargs)  # type: ignore[arg-type]
        return
    if verifier is None and (learned["thresholds"] or backend != "torch"):
        raise typer.BadParameter("--backend and the thresholds are for --mode learned, or "
                                 "guarded_precheck with --verifier (the learned pre-check)")
    if verifier is not None:
        if mode != "guarded_precheck":
            raise typer.BadParameter("--verifier, --backend and the thresholds are for "
                                     "--mode learned or guarded_precheck")
        kwargs.update(learned)
    if mode == "deterministic":
        main(dataset, **kwargs)  # type: ignore[arg-type]
        return
    from toolguard_evals.local_model import (
        DEFAULT_AGENT_MODEL,
        LocalModelServer,
        chat_model_for,
    )
    from toolguard_evals.runner import JsonlLLMCache

    llm_cache = JsonlLLMCache(cache) if cache is not None else None
    with _model_run("eval abstain"):
        if base_url:
            chat = chat_model_for(base_url, model, timeout=request_timeout, max_retries=1,
                                  max_tokens=max_tokens, cache=llm_cache)
            main(dataset, model=chat, **kwargs)  # type: ignore[arg-type]
            return
        with LocalModelServer(model or DEFAULT_AGENT_MODEL) as server:
            chat = server.chat_model(timeout=request_timeout, max_tokens=256, cache=llm_cache)
            main(dataset, model=chat, **kwargs)  # type: ignore[arg-type]


@eval_app.command("familytool")
def eval_familytool(
    data_dir: Annotated[
        Path, typer.Option(help="Folder with familytool-X.jsonl and familykg-X.txt "
                                "(flat, or in datasets/ and KG/).")
    ],
    subset: Annotated[str, typer.Option(help="b (base), e (extended) or another name.")] = "b",
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    extraction: Annotated[str, typer.Option(help="Path extraction: exact, gs or rr.")] = "exact",
    generator: Annotated[
        str, typer.Option(help="deterministic, llm (KGETool prompt), or golden (oracle).")
    ] = "deterministic",
    base_url: Annotated[
        str | None, typer.Option(help="OpenAI-compatible endpoint; default: the embedded "
                                      "llama.cpp server (only when a model is needed).")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model id at --base-url.")] = None,
    tool_use: Annotated[
        bool, typer.Option(help="Also score KG-augmented tool use (needs a model).")
    ] = False,
    limit: Annotated[int | None, typer.Option(help="Only the first N records.")] = None,
    top_k: Annotated[
        int, typer.Option(help="Deterministic generator: programs for the top-k relations.")
    ] = 1,
    cache: Annotated[
        Path | None, typer.Option(help="JSONL response cache (a rerun resumes from it).")
    ] = None,
) -> None:
    """KG-extraction metrics on FamilyTool; with a model, tool-use metrics too."""
    from toolguard_evals.familytool import main

    if not subset.isidentifier() or extraction not in ("exact", "gs", "rr") or generator not in (
            "deterministic", "golden", "llm"):
        raise typer.BadParameter(
            "subset: b|e|NAME, extraction: exact|gs|rr, generator: deterministic|llm|golden")
    if (limit is not None and limit < 1) or top_k < 1:
        raise typer.BadParameter("--limit and --top-k must be >= 1")
    with _model_run("eval familytool"):
        main(data_dir, subset, str(json_path) if json_path else None,
             extraction=extraction, generator=generator,  # type: ignore[arg-type]
             base_url=base_url, model_name=model, tool_use=tool_use, limit=limit, top_k=top_k,
             cache=cache)


@bench_app.command("kg")
def bench_kg(
    queries: Annotated[int, typer.Option(help="Queries to time.")] = 2000,
    triples: Annotated[int, typer.Option(help="KG size (triples).")] = 500,
    data_dir: Annotated[
        Path | None, typer.Option(help="FamilyTool folder (familykg-b.txt seeds the KG).")
    ] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the numbers here.")
    ] = None,
    store: Annotated[
        bool, typer.Option("--store", help="Per turn through a LangGraph store instead, at "
                                           "500 / 5,000 / 50,000 triples (cold and warm).")
    ] = False,
    turns: Annotated[int, typer.Option(help="With --store: turns to time per size.")] = 200,
) -> None:
    """Print the deterministic KG resolver's p50/p99 per query (ms) on an N-triple KG.

    With ``--store``: the KG middleware's per-turn cost, the user's graph read from a
    LangGraph ``InMemoryStore``, at 500 / 5,000 / 50,000 triples.
    """
    if store:
        if turns < 1:
            raise typer.BadParameter("--turns must be >= 1")
        from toolguard_evals.bench_kg import main_store

        main_store(str(json_path) if json_path else None, turns=turns,
                   data_dir=str(data_dir) if data_dir else None)
        return
    from toolguard_evals.bench_kg import main

    main(queries=queries, triples=triples, data_dir=str(data_dir) if data_dir else None,
         json_path=str(json_path) if json_path else None)


@bench_app.command("tools")
def bench_tools(
    reps: Annotated[int, typer.Option(help="Timed runs per measure.")] = 30,
    forms: Annotated[
        str, typer.Option(help="Tool forms, comma-separated: dict, tool (LangChain), spec.")
    ] = "dict,tool",
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the numbers here.")
    ] = None,
) -> None:
    """Print Guard/Precheck construction and first-step cost at 5 / 50 / 500 / 2,000 tools."""
    chosen = [f.strip() for f in forms.split(",") if f.strip()]
    if reps < 1 or not chosen or any(f not in ("dict", "tool", "spec") for f in chosen):
        raise typer.BadParameter("--reps must be >= 1; --forms: dict, tool and/or spec")
    from toolguard_evals.bench_tools import main

    main(str(json_path) if json_path else None, reps=reps,
         forms=chosen)  # type: ignore[arg-type]


@eval_app.command("critictool")
def eval_critictool(
    data_dir: Annotated[
        Path | None,
        typer.Option(help="The official CriticTool-Dataset folder (or its parent); default: "
                          "the CRITICTOOL-style set built from BFCL v4 multi_turn_base."),
    ] = None,
    level: Annotated[str, typer.Option(help="Official data: base or evol.")] = "base",
    cot: Annotated[bool, typer.Option(help="Official data: the *_w_cot files.")] = False,
    limit: Annotated[int | None, typer.Option(help="Records per split (internal, external).")]
    = None,
    seed: Annotated[int, typer.Option(help="Seed of the built set.")] = 0,
    max_tools: Annotated[
        int, typer.Option(help="Built set: tools per system prompt (gold tools always listed).")
    ] = 12,
    base_url: Annotated[
        str | None,
        typer.Option(help="OpenAI-compatible endpoint (e.g. vLLM); default: the embedded "
                          "llama.cpp server with Qwen2.5-Coder-1.5B."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model id at --base-url.")] = None,
    concurrency: Annotated[int, typer.Option(help="Requests in flight.")] = 4,
    max_tokens: Annotated[int | None, typer.Option(help="Tokens per reply at most.")] = 512,
    request_timeout: Annotated[float, typer.Option(help="Seconds per request.")] = 120.0,
    cache: Annotated[
        Path | None, typer.Option(help="Generations JSONL (resumable; reruns skip done cases).")
    ] = None,
    similarity: Annotated[
        str, typer.Option(help="Argument similarity: auto, mpnet (CriticTool's), minilm, "
                               "rapidfuzz.")
    ] = "auto",
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write the bar chart here (PNG).")] = None,
) -> None:
    """CRITICTOOL self-critique scores, unguarded vs guarded, side by side."""
    from toolguard_evals.critictool.run import main
    from toolguard_evals.runner import Endpoint

    if level not in ("base", "evol") or similarity not in ("auto", "mpnet", "minilm",
                                                             "rapidfuzz"):
        raise typer.BadParameter("level: base|evol; similarity: auto|mpnet|minilm|rapidfuzz")
    endpoint = Endpoint(base_url=base_url, model=model, max_tokens=max_tokens,
                        timeout=request_timeout)
    with _model_run("eval critictool"):
        main(endpoint=endpoint, data_dir=data_dir, level=level,  # type: ignore[arg-type]
             cot=cot, limit=limit, seed=seed, concurrency=concurrency, cache=cache,
             json_path=json_path, plot=plot, similarity=similarity,  # type: ignore[arg-type]
             max_tools=max_tools)


@eval_app.command("relytoolbench")
def eval_relytoolbench(
    base_url: Annotated[
        str | None,
        typer.Option(help="OpenAI-compatible endpoint (vLLM, a router); default: start the "
                          "embedded llama.cpp server (Qwen2.5-Coder-1.5B)."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model id at --base-url.")] = None,
    concurrency: Annotated[int, typer.Option(help="Episodes in flight.")] = 1,
    limit: Annotated[int | None, typer.Option(help="Records per file (9 files).")] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="react (paper's Appendix F text) or native.")
    ] = "react",
    max_steps: Annotated[int, typer.Option(help="Model turns per episode.")] = 6,
    cache: Annotated[
        Path | None, typer.Option(help="JSONL cache of episodes, API answers and judgments.")
    ] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write the bar chart here.")] = None,
    judge_base_url: Annotated[
        str | None, typer.Option(help="Separate judge endpoint (default: the agent's).")
    ] = None,
    judge_model: Annotated[str | None, typer.Option(help="Model id at --judge-base-url.")] = None,
    score_only: Annotated[
        bool, typer.Option(help="Rescore the cached episodes offline (no generation).")
    ] = False,
    group: Annotated[
        list[str] | None,
        typer.Option(help="G1_instruction, G2_category, G3_instruction (default all)."),
    ] = None,
    case_id: Annotated[
        list[str] | None,
        typer.Option("--id", help="Only these case ids, e.g. G1_instruction:86143."),
    ] = None,
    request_timeout: Annotated[float, typer.Option(help="Seconds per model request.")] = 120.0,
    max_tokens: Annotated[int, typer.Option(help="Tokens per completion at most.")] = 256,
) -> None:
    """RelyToolBench: pass rate, hallucination rates, RePR, BCU; unguarded vs guarded."""
    from toolguard_evals.relytoolbench.data import GROUPS
    from toolguard_evals.relytoolbench.run import main

    if fmt not in ("react", "native"):
        raise typer.BadParameter("--format must be react or native")
    groups = tuple(group) if group else GROUPS
    if any(g not in GROUPS for g in groups):
        raise typer.BadParameter(f"--group must be one of {GROUPS}")
    with _model_run("eval relytoolbench"):
        main(base_url=base_url, model=model, judge_base_url=judge_base_url,
             judge_model=judge_model, concurrency=concurrency, limit=limit,
             fmt=fmt, max_steps=max_steps, cache=cache,  # type: ignore[arg-type]
             json_path=json_path, plot_path=plot, score_only=score_only,
             groups=groups, ids=case_id, timeout=request_timeout,  # type: ignore[arg-type]
             max_tokens=max_tokens)


@bench_app.command("throughput")
def bench_throughput(
    base_url: Annotated[
        str | None, typer.Option(help="Endpoint; default the embedded llama.cpp server.")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model id at --base-url.")] = None,
    level: Annotated[
        list[int] | None, typer.Option(help="Concurrency levels (default 1, 2, 4).")
    ] = None,
    per_subset: Annotated[
        int, typer.Option(help="Cases per subset (shortest G1 prompts).")
    ] = 1,
    max_steps: Annotated[int, typer.Option(help="Model turns per episode.")] = 2,
    max_tokens: Annotated[int, typer.Option(help="Tokens per completion at most.")] = 64,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the numbers here.")
    ] = None,
) -> None:
    """Print RelyToolBench cases per second against concurrency."""
    from toolguard_evals.bench_throughput import main

    with _model_run("bench throughput"):
        main(base_url=base_url, model=model, levels=tuple(level) if level else (1, 2, 4),
             per_subset=per_subset, max_steps=max_steps, max_tokens=max_tokens,
             json_path=json_path)


@bench_app.command("overhead")
def bench_overhead(
    calls: Annotated[int, typer.Option(help="Guarded calls to time.")] = 2000,
    steps: Annotated[int, typer.Option(help="Graph steps to time per variant.")] = 300,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the numbers here.")
    ] = None,
    sweeps: Annotated[
        bool, typer.Option("--sweeps/--no-sweeps",
                           help="Also the scale sweeps (history, tools, kg; ~1-2 minutes).")
    ] = False,
    tool_reps: Annotated[
        int, typer.Option(help="With --sweeps: timed runs per measure of the tools sweep.")
    ] = 20,
    kg_turns: Annotated[
        int, typer.Option(help="With --sweeps: turns timed per KG size of the kg sweep.")
    ] = 100,
) -> None:
    """Print the guard's p50/p99 per call (ms) and the guarded/plain step ratios.

    Two pairs, each timed interleaved: a ToolNode step with and without GuardNode, and a
    create_agent step (model -> tool -> model) with and without GuardMiddleware.

    With --sweeps, also (JSON keys): history (Guard.check warm p50/p99, cold time and
    tracemalloc memory peak per check at 10 / 100 / 1,000 / 10,000 messages with ~1 KB
    JSON tool results; the guarded/plain create_agent step ratio around turns 10, 100 and
    400 of one long conversation), tools (Guard/Precheck cost at 5 / 50 / 500 / 2,000
    tools) and kg (per turn through a LangGraph store at 500 / 5,000 / 50,000 triples);
    step_ratio gathers the ratios.  Without it the run takes seconds.
    """
    if calls < 1 or steps < 1 or tool_reps < 1 or kg_turns < 1:
        raise typer.BadParameter("--calls, --steps, --tool-reps and --kg-turns must be >= 1")
    from toolguard_evals.bench_overhead import BenchConfig, main

    main(calls=calls, steps=steps, json_path=str(json_path) if json_path else None,
         sweeps=sweeps, config=BenchConfig(tool_reps=tool_reps, kg_turns=kg_turns))


@bench_app.command("precheck")
def bench_precheck(
    dataset: Annotated[
        list[str] | None, typer.Option(help="relytoolbench and/or bfcl (default both).")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Records/episodes per file/category.")] = None,
    repeats: Annotated[int, typer.Option(help="Timed runs per case.")] = 3,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the numbers here.")
    ] = None,
    verifier: Annotated[
        Path | None, typer.Option(help="A `toolguard verifier train` folder: time the learned "
                                       "pre-check and relevance judge at 5 / 20 / 100 tools "
                                       "(--limit: requests per size, default 40).")
    ] = None,
    backend: Annotated[
        str, typer.Option(help="With --verifier: torch, onnx or onnx-int8 (the folder's "
                               "export from `toolguard verifier export-onnx [--int8]`).")
    ] = "torch",
) -> None:
    """Print the pre-check's p50/p99 per case (ms) over real cases (deterministic, or learned)."""
    from toolguard_evals.bench_precheck import main

    datasets = tuple(dataset or ("relytoolbench", "bfcl"))
    if not set(datasets) <= {"relytoolbench", "bfcl"} or repeats < 1:
        raise typer.BadParameter("dataset: relytoolbench|bfcl; repeats >= 1")
    from toolguard.verifier import BACKENDS

    if backend not in BACKENDS:
        raise typer.BadParameter(f"--backend must be one of {', '.join(BACKENDS)}")
    main(datasets=datasets, limit=limit, repeats=repeats,
         json_path=str(json_path) if json_path else None, verifier=verifier,
         backend=backend)


def main() -> None:
    """The ``toolguard`` command: :data:`app`, with a missing dataset reported in one line.

    A :class:`~toolguard_evals.datadir.DataNotFoundError` exits 2 with where the harness
    looked and what to set, instead of a traceback.
    """
    from toolguard_evals.datadir import DataNotFoundError

    try:
        app()
    except DataNotFoundError as exc:
        typer.echo(f"toolguard: {exc}", err=True)
        raise SystemExit(2) from exc


if __name__ == "__main__":  # pragma: no cover
    main()
