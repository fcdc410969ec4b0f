"""A tuned model back into the base's GGUF, so llama.cpp serves it like the base.

Relign trains on the base GGUF dequantised to float (:mod:`.models`) and, with LoRA,
changes only the linear layers of the top decoder layers.  :func:`patch_gguf` writes a
copy of the *base* GGUF in which exactly the tensors the training changed hold the merged
weights (``F16`` by default, or ``F32``); every other tensor keeps its original
quantisation and bytes, and every metadata field (tokenizer, chat template, architecture)
is copied.  The result is served by :class:`toolguard_evals.local_model.LocalModelServer`
(``llama-server --jinja``) exactly as the base is, and every evaluation then runs on it with
``--model PATH.gguf``.

Why not llama.cpp's ``convert_hf_to_gguf.py``: it ships in llama.cpp's source tree, not in
an installable package, and it would re-quantise (or widen) every tensor; a patch keeps
the 90 % of the model LoRA did not touch bit for bit.  Reading and writing use the
``gguf`` package (llama.cpp's own).

Tensor names map with ``gguf``'s :func:`gguf.get_tensor_name_map` for the file's
architecture.  For ``llama`` files the converter permuted the query and key projections
(rotary layout); :func:`patch_gguf` applies the same permutation to merged weights and
compares in that layout.  A tensor counts as changed when its largest absolute difference
from the dequantised base exceeds ``atol``.  A merged ``lm_head`` over a GGUF without an
output tensor (tied embeddings) must equal the embedding.

Needs numpy, ``gguf``, ``safetensors`` (the ``relign`` extra).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

ATOL = 0.0
"""Largest absolute difference from the dequantised base that still counts as unchanged.

Transformers dequantises with the same ``gguf`` routines, so an untouched tensor differs
by exactly 0 (measured on SmolLM2 and Qwen2.5-Coder-0.5B), and any update, however small
(one LoRA step), is written."""


class GGUFExportError(RuntimeError):
    """The merged model does not fit the base GGUF (other shapes, unknown names)."""


def _merged_tensors(merged_dir: Path) -> Iterator[tuple[str, Any]]:
    """``(name, float32 array)`` for every tensor of the merged folder's safetensors."""
    import numpy as np
    from safetensors import safe_open

    files = sorted(merged_dir.glob("*.safetensors"))
    if not files:
        raise GGUFExportError(f"no *.safetensors in {merged_dir}")
    for file in files:
        with safe_open(str(file), framework="pt") as fh:  # bfloat16 needs torch
            for name in fh.keys():  # noqa: SIM118 (safe_open is no Mapping)
                yield name, fh.get_tensor(name).float().numpy().astype(np.float32, copy=False)


def _permute(w: Any, n_head: int) -> Any:
    """llama.cpp's rotary permutation of a ``llama`` query/key weight (its converter's)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def _field(reader: Any, key: str) -> Any:
    field = reader.get_field(key)
    return field.contents() if field is not None else None


def patch_gguf(base_gguf: str | Path, merged_dir: str | Path, out: str | Path, *,
               dtype: Literal["f16", "f32"] = "f16", atol: float = ATOL,
               chat_template: str | None = None) -> dict[str, Any]:
    """Write ``out``: ``base_gguf`` with the tensors ``merged_dir`` changed replaced.

    Args:
        base_gguf: The GGUF the run started from (its architecture, tokenizer, template).
        merged_dir: A merged Hugging Face folder (``*.safetensors``) trained from it.
        out: The new ``.gguf`` file (overwritten; written to ``out.tmp`` first, which is
            removed when writing fails).
        dtype: Storage of the changed tensors: ``f16`` (half the bytes) or ``f32``.
        atol: See :data:`ATOL`.
        chat_template: Write this Jinja text as ``tokenizer.chat_template`` in place of the
            base's (the template the model was trained in, so ``llama-server --jinja``
            serves the file in the form it calls in); ``None`` keeps the base's.

    Returns:
        ``{"gguf", "base", "changed": [GGUF tensor names], "kept": n, "bytes", "dtype",
        "max_abs_delta", "seconds"}``.

    Raises:
        FileNotFoundError: ``base_gguf`` or ``merged_dir`` is missing.
        GGUFExportError: A merged tensor maps to no base tensor or has another shape, a
            tied output layer differs from the embedding, or
            not a single base tensor matched its merged counterpart within ``atol`` (a
            merged folder from another base, or a layout this module does not know).
    """
    import gguf
    import numpy as np

    started = time.perf_counter()
    base_path, merged_path, out_path = Path(base_gguf), Path(merged_dir), Path(out)
    if not base_path.is_file():
        raise FileNotFoundError(f"base GGUF not found: {base_path}")
    if not merged_path.is_dir():
        raise FileNotFoundError(f"merged model folder not found: {merged_path}")
    reader = gguf.GGUFReader(str(base_path))
    arch_name = str(_field(reader, gguf.Keys.General.ARCHITECTURE))
    arch = next((a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch_name), None)
    if arch is None:
        raise GGUFExportError(f"unknown GGUF architecture {arch_name!r} in {base_path}")
    n_blocks = int(_field(reader, f"{arch_name}.block_count"))
    n_head = int(_field(reader, f"{arch_name}.attention.head_count") or 0)
    n_head_kv = int(_field(reader, f"{arch_name}.attention.head_count_kv") or n_head)
    name_map = gguf.get_tensor_name_map(arch, n_blocks)
    base_tensors = {t.name: t for t in reader.tensors}

    replaced: dict[str, Any] = {}
    matched = 0
    max_delta = 0.0
    for hf_name, weight in _merged_tensors(merged_path):
        name = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise GGUFExportError(f"merged tensor {hf_name!r} has no {arch_name} GGUF name")
        tensor = base_tensors.get(name)
        tied = tensor is None and name == "output.weight" and "token_embd.weight" in base_tensors
        if tied:  # a tied output layer: the GGUF reads the embedding, which must agree
            tensor = base_tensors["token_embd.weight"]
        if tensor is None:
            raise GGUFExportError(f"merged tensor {hf_name!r} ({name}) is not in {base_path}")
        if arch_name == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
            weight = _permute(weight, n_head if name.endswith("attn_q.weight") else n_head_kv)
        original = np.asarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type),
                              dtype=np.float32)
        if original.size != weight.size:
            raise GGUFExportError(
                f"{hf_name} has shape {tuple(weight.shape)}, the base's {name} "
                f"{tuple(int(x) for x in reversed(tensor.shape))}")
        original = original.reshape(weight.shape)
        delta = float(np.max(np.abs(weight - original))) if weight.size else 0.0
        if tied:
            if delta > atol:
                raise GGUFExportError(
                    f"{hf_name} differs from the embedding it is tied to in {base_path}; "
                    "a tied GGUF cannot hold an output layer of its own")
            continue
        if delta > atol:
            replaced[name] = weight.astype(np.float16 if dtype == "f16" else np.float32)
            max_delta = max(max_delta, delta)
        else:
            matched += 1
    if not matched:
        raise GGUFExportError(
            f"no tensor of {merged_path} equals its counterpart in {base_path}: not trained "
            "from this base, or a tensor layout this exporter does not know")

    tmp = out_path.with_name(out_path.name + ".tmp")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        _write(gguf, reader, replaced, tmp, chat_template)
    except BaseException:
        tmp.unlink(missing_ok=True)  # never a half-written file
        raise
    tmp.replace(out_path)
    return {"gguf": str(out_path), "base": str(base_path), "changed": sorted(replaced),
            "kept": len(reader.tensors) - len(replaced), "bytes": out_path.stat().st_size,
            "dtype": dtype, "max_abs_delta": round(max_delta, 6),
            "seconds": round(time.perf_counter() - started, 1)}


def _write(gguf: Any, reader: Any, replaced: dict[str, Any], path: Path,
           chat_template: str | None = None) -> None:
    """Write ``reader``'s metadata and tensors to ``path``, ``replaced`` ones swapped in."""
    template_key = gguf.Keys.Tokenizer.CHAT_TEMPLATE
    writer = gguf.GGUFWriter(str(path), arch=str(_field(reader, gguf.Keys.General.ARCHITECTURE)),
                             endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by GGUFWriter itself
        if field.name == template_key and chat_template is not None:
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    if chat_template is not None:
        writer.add_key_value(template_key, chat_template, gguf.GGUFValueType.STRING)
    for tensor in reader.tensors:
        new = replaced.get(tensor.name)
        if new is None:
            writer.add_tensor_info(tensor.name, tensor.data.shape, tensor.data.dtype,
                                   tensor.data.nbytes, tensor.tensor_type)
        else:
            writer.add_tensor_info(tensor.name, new.shape, new.dtype, new.nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in reader.tensors:
        new = replaced.get(tensor.name)
        writer.write_tensor_data(tensor.data if new is None else new,
                                 tensor_endianess=reader.endianess)
    writer.close()


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - thin wrapper
    """``python -m toolguard_evals.relign.gguf_export BASE.gguf MERGED_DIR OUT.gguf``."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print(main.__doc__, file=sys.stderr)
        return 2
    print(json.dumps(patch_gguf(*args), indent=2))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
