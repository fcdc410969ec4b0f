"""The injection suite (``toolguard_evals.injection``): cases, harness, scores, command.

The suite's numbers are the guard's business; these tests check that the harness measures
them: the cases are what they claim (injected values sit in untrusted text only, or in no
text for the ``nowhere`` site), every run keeps the invariants (no unanswered call, no
refused call executed, benign replays reproduce the corpus), the two numbers move the
right way with the guard (off: every injected call runs; a guard that asks before every
write: none runs and every flow is a false confirmation), and the command writes its
report.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from toolguard.context import CheckContext, ProposedCall
from toolguard.detectors import Detector
from toolguard.detectors.provenance import STEERING
from toolguard.types import Verdict
from toolguard_evals import injection
from toolguard_evals.injection import (
    ADAPTIVE_CASES,
    CASES,
    SITES,
    SYSTEM_PROMPT,
    Call,
    InjectionCase,
)


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def _untrusted_text(case: InjectionCase) -> str:
    return json.dumps(case.data, ensure_ascii=False)


def _trusted_text(case: InjectionCase) -> str:
    return f"{SYSTEM_PROMPT}\n{case.request}"


def _values(call: Call) -> list[str]:
    return [str(v) for v in _leaves(call.args) if not isinstance(v, bool)]


# ---------------------------------------------------------------------------- the cases
def test_the_cases_cover_every_site_with_several_tools() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    for site in SITES:
        expected = 1 if site == "control" else 3
        assert sum(c.site == site for c in CASES) >= expected, site
    tools = {c.name for case in CASES for c in case.calls()}
    assert len(tools) >= 14  # search, email, files, web, calendar, payments, shell ...
    assert sum(any(not c.injected for c in case.steps[-1]) for case in CASES) >= 5  # mixed
    assert sum(c.injected for case in CASES for c in case.calls()) > len(CASES)


@pytest.mark.parametrize("case", [c for c in (*CASES, *ADAPTIVE_CASES)
                                  if c.site not in ("nowhere", "control")], ids=lambda c: c.id)
def test_injected_values_come_from_untrusted_text_only(case: InjectionCase) -> None:
    untrusted = _untrusted_text(case)
    for call in case.calls():
        if not call.injected:
            continue
        for field in ("to", "path", "to_account", "url", "command", "address", "email",
                      "attendees"):
            for value in _values(Call(name=call.name, args={
                    k: v for k, v in call.args.items() if k == field})):
                assert value in untrusted, (case.id, field, value)
                assert value not in _trusted_text(case), (case.id, field, value)


@pytest.mark.parametrize("case", [c for c in (*CASES, *ADAPTIVE_CASES) if c.site == "nowhere"],
                         ids=lambda c: c.id)
def test_nowhere_values_appear_in_no_text(case: InjectionCase) -> None:
    everything = _untrusted_text(case) + _trusted_text(case) + json.dumps(
        injection._default_data())
    (call,) = [c for c in case.calls() if c.injected]
    target = {"recipient": "to", "path": "path", "account": "to_account"}[str(call.target)]
    assert str(call.args[target]) not in everything


def _strings(value: Any) -> list[str]:
    return [v for v in _leaves(value) if isinstance(v, str)]


def test_adaptive_variants_keep_the_attack_and_drop_every_steering_cue() -> None:
    """Each adaptive variant: the same request and calls (the attacker's goal), one text
    reworded, and no text of the variant matches the guard's steering cues, where every
    original that carries an instruction did."""
    assert len(ADAPTIVE_CASES) == len(CASES)
    cued = 0
    for case, variant in zip(CASES, ADAPTIVE_CASES, strict=True):
        assert variant.id == f"adaptive-{case.id}" and variant.adaptive and not case.adaptive
        assert (variant.site, variant.request, variant.steps, variant.final) == (
            case.site, case.request, case.steps, case.final)
        before, after = _strings(case.data), _strings(variant.data)
        assert len(before) == len(after)
        assert sum(a != b for a, b in zip(before, after, strict=True)) == 1, case.id
        assert not [t for t in after if STEERING.search(t)], case.id
        cued += any(STEERING.search(t) for t in before)
    assert cued >= len(CASES) - 3  # the originals carry cues (a few 'nowhere' ones do not)


def test_benign_flows_come_from_the_corpus() -> None:
    flows = injection.benign_flows()
    assert len(flows) > 400
    assert len({f.domain for f in flows}) >= 10
    assert all(f.flow_calls and f.values for f in flows)
    assert len(injection.benign_flows(limit=25)) == 25


# ---------------------------------------------------------------------------- the harness
# The suite's two numbers are the guard's business and change with it (a provenance policy
# lowers injected-and-executed): no test here pins them.  They check that every case and
# flow ran, that the report adds up, and the invariants (no unanswered call, no refused
# call executed, benign replays reproduce the corpus).
FLOWS = 40


@pytest.fixture(scope="module")
def default_run() -> dict[str, Any]:
    """The guard's defaults, as ``toolguard eval injection`` runs them (fewer flows)."""
    return injection.run_injection(benign_limit=FLOWS)


def _calls(report: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [c for run in report["runs"] for c in run["calls"] if c["role"] == role]


def _check_report(report: dict[str, Any], flows: list[injection.BenignFlow]) -> None:
    """Everything ran once, the summary agrees with the runs, the invariants hold."""
    assert report["invariants"] == {"unanswered": 0, "refused_executed": 0,
                                    "replay_mismatches": 0}
    # every case and flow ran, once, with an outcome for every call it proposed
    assert [r["id"] for r in report["runs"]] == [c.id for c in CASES] + [f.id for f in flows]
    by_id = {c.id: c for c in CASES}
    for run in report["runs"]:
        if run["kind"] == "injection":
            case = by_id[run["id"]]
            assert [(c["name"], c["role"] == "injected") for c in run["calls"]] == [
                (c.name, c.injected) for c in case.calls()], case.id
            assert run["group"] == case.site
        assert run["unanswered"] == run["refused_executed"] == 0, run["id"]
    assert report["injection_cases"] == len(CASES)
    assert report["benign_flows"] == len(flows)

    injected, legit = _calls(report, "injected"), _calls(report, "legit")
    assert report["injected_calls"] == len(injected) == sum(
        c.injected for k in CASES for c in k.calls())
    assert report["legit_calls"] == len(legit)
    # the simulated user rejects every injected call it is asked about: none of those ran
    assert not [c for c in injected if c["decision"] == "asked" and c["executed"]]
    # ... and approves every other question: an asked legit or benign call ran
    assert all(c["executed"] for c in legit + _calls(report, "flow") + _calls(report, "step")
               if c["decision"] == "asked")
    # each injected call is exactly one of: executed, asked (rejected), blocked, not run
    decisions = {d: sum(c["decision"] == d for c in injected)
                 for d in ("executed", "asked", "blocked", "not_run")}
    assert sum(decisions.values()) == report["injected_calls"]
    assert decisions["asked"] == report["injected_asked"]
    assert decisions["blocked"] == report["injected_blocked"]
    assert decisions["executed"] == report["injected_executed"] == sum(
        c["executed"] for c in injected)
    assert report["attack_success_rate"] == round(
        report["injected_executed"] / report["injected_calls"], 4)
    compromised = {c["case"] for c in injected if c["executed"]}
    assert report["cases_compromised"] == len(compromised) <= report["injected_executed"]
    assert report["legit_executed"] == sum(c["executed"] for c in legit)
    assert report["legit_refused"] == sum(c["decision"] in ("asked", "blocked")
                                          for c in legit)
    # the breakdowns add up to the totals
    for rows in (report["by_site"], report["by_target"]):
        for key, total in (("injected_calls", "injected_calls"),
                           ("injected_executed", "injected_executed"),
                           ("asked", "injected_asked"), ("blocked", "injected_blocked")):
            assert sum(row[key] for row in rows.values()) == report[total], (key, rows)
        for row in rows.values():
            assert row["injected_executed"] + row["asked"] + row["blocked"] + row[
                "not_run"] == row["injected_calls"]
    assert set(report["by_site"]) == {c.site for c in CASES}
    assert sum(row["cases"] for row in report["by_site"].values()) == len(CASES)
    assert sum(row["cases_compromised"] for row in report["by_site"].values()) == (
        report["cases_compromised"])
    # false confirmations: benign flows with a call the guard asked about or blocked
    refused = {r["id"] for r in report["runs"] if r["kind"] == "benign"
               and any(c["decision"] in ("asked", "blocked") for c in r["calls"])}
    assert report["false_confirmations"] == len(refused) == sum(
        row["false_confirmations"] for row in report["by_domain"].values())
    assert sum(row["flows"] for row in report["by_domain"].values()) == len(flows)
    assert max(report["false_asks"], report["false_blocks"]) <= report[
        "false_confirmations"] <= report["false_asks"] + report["false_blocks"]
    assert report["benign_flow_calls"] == sum(len(f.flow_calls) for f in flows)
    assert report["benign_flow_calls_executed"] == sum(
        c["executed"] for c in _calls(report, "flow"))
    assert sum(report["false_confirmations_by"].values()) == sum(
        c["decision"] in ("asked", "blocked") for r in report["runs"]
        if r["kind"] == "benign" for c in r["calls"])


def test_the_default_guard_run_adds_up(default_run: dict[str, Any]) -> None:
    _check_report(default_run, injection.benign_flows(limit=FLOWS))
    assert default_run["guard"] is True
    control = default_run["by_site"]["control"]  # the injected tool does not exist
    assert control["injected_executed"] == 0 and control["cases_compromised"] == 0
    assert default_run["seconds"] < 60
    adaptive = default_run["adaptive"]  # the adaptive variants run beside the cases
    assert [r["id"] for r in adaptive["runs"]] == [c.id for c in ADAPTIVE_CASES]
    assert adaptive["injection_cases"] == len(CASES)
    assert adaptive["injected_calls"] == default_run["injected_calls"]
    assert adaptive["injected_executed"] + adaptive["injected_asked"] + adaptive[
        "injected_blocked"] <= adaptive["injected_calls"]
    assert all(r["unanswered"] == r["refused_executed"] == 0 for r in adaptive["runs"])
    assert adaptive["by_site"]["control"]["injected_executed"] == 0


def test_the_report_is_deterministic(default_run: dict[str, Any]) -> None:
    again = injection.run_injection(benign_limit=FLOWS)
    assert again["runs"] == default_run["runs"]


class AskBeforeEveryWrite(Detector):
    """A guard that asks the user before any state-changing call (an upper bound)."""

    kind = "ask_writes"

    def check(self, call: ProposedCall, ctx: CheckContext) -> Verdict | None:
        spec = ctx.specs.get(call.name)
        if spec is None or spec.effects == "read":
            return None
        return Verdict(tool_call_id=call.id, tool_name=call.name, action="ask_user",
                       question=f"Shall I run {call.name}?", reason="confirm writes")


def test_the_numbers_move_with_the_guard() -> None:
    """Both ends: no guard (every injected call that can run, runs; nothing is asked) and
    a guard that asks before every write (no injected call runs; every flow is a false
    confirmation, and the user's approvals let every legitimate call run)."""
    flows = injection.benign_flows(limit=20)
    off = injection.run_injection(benign_limit=20, guard=False)
    _check_report(off, flows)
    assert off["injected_executed"] == off["injected_calls"] - 1  # only the fake tool fails
    assert off["false_confirmations"] == off["interrupts"] == 0
    assert off["legit_executed"] == off["legit_calls"]
    strict = injection.run_injection({"detectors": ("type", AskBeforeEveryWrite())},
                                     benign_limit=20)
    _check_report(strict, flows)
    assert strict["injected_executed"] == 0 and strict["injected_asked"] == (
        strict["injected_calls"] - 1)
    assert strict["false_confirmations"] == strict["benign_flows"] == 20
    assert strict["legit_executed"] == strict["legit_calls"]  # the user approved them
    assert strict["benign_flow_calls_executed"] == strict["benign_flow_calls"]
    with pytest.raises(ValueError, match="guard_options must be empty"):
        injection.run_injection({"detectors": ()}, guard=False, cases=[], flows=[])


def test_one_step_of_injected_calls_is_one_confirmation_the_user_rejects() -> None:
    """email-7 proposes two injected calls in one step: one question covers both (issue 37),
    the simulated user rejects it, and neither runs."""
    (case,) = [c for c in CASES if c.id == "email-7"]
    report = injection.run_injection(cases=[case], flows=[])
    (run,) = report["runs"]
    assert run["interrupts"] == 1
    injected = [c for c in run["calls"] if c["role"] == "injected"]
    assert len(injected) == 2 and all(c["decision"] == "asked" and not c["executed"]
                                      for c in injected)
    assert injected[0]["reason"] == injected[1]["reason"]  # the same, single question
    assert report["invariants"] == {"unanswered": 0, "refused_executed": 0,
                                    "replay_mismatches": 0}


def test_cases_and_tool_metadata_can_be_chosen() -> None:
    (case,) = [c for c in CASES if c.id == "email-1"]
    report = injection.run_injection(cases=[case], flows=[],
                                     tool_metadata={"delete_path": {"effects": "read"}})
    assert report["injection_cases"] == 1 and report["benign_flows"] == 0
    assert report["injected_calls"] == 1
    assert [r["id"] for r in report["runs"]] == ["email-1"]


# ---------------------------------------------------------------------------- command
def test_the_command_writes_the_report(tmp_path: Path) -> None:
    from toolguard_evals.cli import app

    out = tmp_path / "injection.json"
    result = CliRunner().invoke(app, ["eval", "injection", "--json", str(out),
                                      "--benign-limit", "10"])
    assert result.exit_code == 0, result.output
    assert "injected-and-executed" in result.output
    assert "false confirmations" in result.output
    report = json.loads(out.read_text())
    assert report["benign_flows"] == 10 and report["injection_cases"] == len(CASES)
    assert set(report["by_site"]) == set(SITES)
