"""Docstring examples are executed, so they cannot go stale."""

import doctest

import pytest

import toolguard.guard
import toolguard.middleware


@pytest.mark.parametrize("module", [toolguard.guard, toolguard.middleware])
def test_docstring_examples_run(module: object) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)  # type: ignore[arg-type]
    assert result.failed == 0
    if module is toolguard.guard:
        assert result.attempted >= 3


def test_example_script_runs(capsys: pytest.CaptureFixture[str]) -> None:
    import runpy
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "guarded_agent.py"
    runpy.run_path(str(path), run_name="__main__")
    out = capsys.readouterr().out
    assert "plain    tool executions: ['Paris', 'Paris', 'Berlin']" in out
    assert "guarded  tool executions: ['Paris']" in out
