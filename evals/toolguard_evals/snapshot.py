"""Every verdict of the deterministic guards on the repository's suites, to diff two versions.

``python -m toolguard_evals.snapshot write DIR`` writes one JSONL file per suite (a line per
case: its id and the verdicts on its calls, or the pre-check's decision), and
``python -m toolguard_evals.snapshot compare OLD NEW`` lists every case whose verdicts
differ.  Suites: the BFCL detector suite and suite B (``Guard.check``), the abstain task on
every dataset (``Precheck.decide``) and the injection suite (``create_agent`` +
``GuardMiddleware``).  A refactor that must keep behaviour compares before and after; the
differences it means to make are listed with their cause.

A verdict is compared by its action, hallucination kind and evidence codes and parameters;
its wording (``reason``, ``question``) is compared separately, so a reworded message shows
as a wording change, not a verdict change.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

Row = dict[str, Any]

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


def _verdict(v: Any) -> Row:
    return {"action": v.action, "kind": v.hallucination,
            "evidence": sorted({f"{e.detector}:{e.code}:{e.parameter}" for e in v.evidence
                                if e.code != "detector_error"}),
            "wording": [v.reason, v.question]}


def detector_rows(suite: str) -> Iterator[Row]:
    """``Guard.check`` on each case of the BFCL detector suite (``bfcl``) or suite B (``b``)."""
    from toolguard import Guard

    if suite == "bfcl":
        from toolguard_evals.detector_suite import build_suite

        cases = build_suite().cases
    else:
        from toolguard_evals.suite_b import build_suite_b

        cases = build_suite_b()
    guards: dict[str, Guard] = {}
    for case in cases:
        guard = guards.get(case.tools_key) or guards.setdefault(case.tools_key,
                                                                Guard(list(case.tools)))
        yield {"id": case.id, "verdicts": [_verdict(v) for v in guard.check(case.messages)]}


def abstain_rows(dataset: str) -> Iterator[Row]:
    """The deterministic pre-check's decision on each case of ``dataset``."""
    from toolguard import Precheck
    from toolguard_evals.abstain import load_cases

    for case in load_cases(dataset):  # type: ignore[arg-type]
        d = Precheck(case.tools).decide(case.messages)
        yield {"id": case.id, "verdicts": [{"action": d.decision, "kind": d.tool,
                                            "evidence": sorted(d.missing),
                                            "wording": [d.reason, d.message]}]}


def injection_rows() -> Iterator[Row]:
    """Each call of the injection cases and benign flows: decision, executed, verdict kind."""
    from toolguard_evals.injection import run_injection

    for run in run_injection()["runs"]:
        yield {"id": run["id"], "verdicts": [
            {"action": c["decision"], "kind": c["verdict"],
             "evidence": [c["name"], f"executed={c['executed']}"], "wording": [c["reason"]]}
            for c in run["calls"]]}


SUITES: dict[str, Callable[[], Iterable[Row]]] = {
    "detectors_bfcl": lambda: detector_rows("bfcl"),
    "detectors_suite_b": lambda: detector_rows("b"),
    "abstain_relytoolbench": lambda: abstain_rows("relytoolbench"),
    "abstain_bfcl": lambda: abstain_rows("bfcl"),
    "abstain_dialogues": lambda: abstain_rows("dialogues"),
    "injection": injection_rows,
}
"""Suite name -> its rows (one per case)."""


@app.command("write")
def write(out: Annotated[Path, typer.Argument(help="Folder for one JSONL file per suite.")],
          suite: Annotated[list[str] | None, typer.Option(help="Only these suites.")] = None,
          ) -> None:
    """Write every suite's verdicts to OUT/{suite}.jsonl."""
    out.mkdir(parents=True, exist_ok=True)
    for name in suite or list(SUITES):
        if name not in SUITES:
            raise typer.BadParameter(f"unknown suite {name!r}; expected some of {list(SUITES)}")
        with (out / f"{name}.jsonl").open("w", encoding="utf-8") as f:
            n = 0
            for row in SUITES[name]():
                f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
                n += 1
        typer.echo(f"{name}: {n} cases")


def _read(path: Path) -> dict[str, Row]:
    rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines())
    return {r["id"]: r for r in rows}


def diff(old: Mapping[str, Row], new: Mapping[str, Row]) -> dict[str, list[Any]]:
    """Cases only in one side, cases whose verdicts differ, cases whose wording differs."""
    def core(row: Row) -> list[Any]:
        return [{k: v for k, v in verdict.items() if k != "wording"}
                for verdict in row["verdicts"]]

    common = sorted(set(old) & set(new))
    return {
        "only_old": sorted(set(old) - set(new)),
        "only_new": sorted(set(new) - set(old)),
        "verdicts": [{"id": i, "old": core(old[i]), "new": core(new[i])} for i in common
                     if core(old[i]) != core(new[i])],
        "wording": [i for i in common if core(old[i]) == core(new[i])
                    and old[i]["verdicts"] != new[i]["verdicts"]],
    }


@app.command("compare")
def compare(old: Annotated[Path, typer.Argument(help="Folder written by `write` before.")],
            new: Annotated[Path, typer.Argument(help="Folder written by `write` after.")],
            show: Annotated[int, typer.Option(help="Differing cases shown per suite.")] = 10,
            ) -> None:
    """Print, per suite, the cases whose verdicts differ; exit 1 if any does."""
    changed = False
    for path in sorted(old.glob("*.jsonl")):
        other = new / path.name
        if not other.is_file():
            typer.echo(f"{path.stem}: missing in {new}")
            changed = True
            continue
        d = diff(_read(path), _read(other))
        n = sum(len(d[k]) for k in ("only_old", "only_new", "verdicts"))
        changed |= n > 0
        typer.echo(f"{path.stem}: {len(d['verdicts'])} verdicts differ, "
                   f"{len(d['only_old'])} / {len(d['only_new'])} cases only old / new, "
                   f"{len(d['wording'])} reworded")
        for row in _first(d["verdicts"], show):
            typer.echo(f"  {row['id']}: {json.dumps(row['old'])} -> {json.dumps(row['new'])}")
    raise typer.Exit(1 if changed else 0)


def _first(items: Sequence[Any], n: int) -> Sequence[Any]:
    return items[:n]


if __name__ == "__main__":  # pragma: no cover
    app()
