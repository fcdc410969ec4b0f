"""The verdict snapshot's diff: a verdict change, a rewording and a lost case are told apart."""

from __future__ import annotations

from toolguard_evals.snapshot import diff


def _row(case: str, action: str, reason: str = "why") -> dict[str, object]:
    return {"id": case, "verdicts": [{"action": action, "kind": None, "evidence": [],
                                      "wording": [reason, None]}]}


def test_diff_separates_verdict_changes_rewordings_and_missing_cases() -> None:
    old = {"a": _row("a", "allow"), "b": _row("b", "block"), "c": _row("c", "ask_user"),
           "gone": _row("gone", "allow")}
    new = {"a": _row("a", "allow"), "b": _row("b", "allow"), "c": _row("c", "ask_user", "new"),
           "added": _row("added", "block")}
    d = diff(old, new)
    assert [r["id"] for r in d["verdicts"]] == ["b"]
    assert d["verdicts"][0]["old"][0]["action"] == "block"
    assert d["wording"] == ["c"]
    assert d["only_old"] == ["gone"] and d["only_new"] == ["added"]


def test_identical_snapshots_have_no_difference() -> None:
    rows = {"a": _row("a", "allow")}
    assert diff(rows, dict(rows)) == {"only_old": [], "only_new": [], "verdicts": [],
                                      "wording": []}
