"""Files of an architecture at its published size, with no weights: a GGUF whose header the
`gguf` package writes and a Hugging Face folder of safetensors headers.

Both are sparse: the header is real (every key, every tensor's name, shape, type and byte
span), the data is a hole of the right length (file.truncate), so a 1.5 TB model takes a few
kilobytes of disk and the readers, which read headers only, see the file as published.
"""
from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter

from moeplan.planner.model.spec import ModelSpec


def _gguf_value(v: Any) -> tuple[Any, GGUFValueType, GGUFValueType | None]:
    """(value, type, array item type) as llama.cpp's converter writes a hyper-parameter."""
    def scalar(x: Any) -> GGUFValueType:
        if isinstance(x, bool):
            return GGUFValueType.BOOL
        if isinstance(x, int):
            return GGUFValueType.INT32 if x < 0 else GGUFValueType.UINT32
        if isinstance(x, float):
            return GGUFValueType.FLOAT32
        return GGUFValueType.STRING

    if isinstance(v, (list, tuple)):
        sub = scalar(v[0])
        if sub == GGUFValueType.UINT32 and any(isinstance(x, int) and x < 0 for x in v):
            sub = GGUFValueType.INT32
        return list(v), GGUFValueType.ARRAY, sub
    return v, scalar(v), None


def write_sparse_gguf(path: Path, model: ModelSpec, hp: dict[str, Any]) -> Path:
    """A GGUF of `model` (its tensors, types and bytes) and hyper-parameters `hp` (GGUF keys
    without the `{arch}.` prefix), tensor data left as a hole."""
    w = GGUFWriter(str(path), model.arch)
    w.add_name(model.name)
    for key, value in hp.items():
        if isinstance(value, (list, tuple)) and not value:
            continue
        v, vtype, sub = _gguf_value(value)
        w.add_key_value(f"{model.arch}.{key}", v, vtype, sub_type=sub)
    for t in model.tensors:
        qtype = GGMLQuantizationType[t.ggml_type]
        w.add_tensor_info(t.name, tuple(reversed(t.shape)), np.dtype(np.float32), t.n_bytes, raw_dtype=qtype)
    w.write_header_to_file(path)
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    assert w.fout is not None
    f = w.fout[0]
    start = GGUFWriter.ggml_pad(f.tell(), w.data_alignment)
    end = start + sum(GGUFWriter.ggml_pad(t.n_bytes, w.data_alignment) for t in model.tensors)
    w.close()
    with open(path, "r+b") as out:
        out.truncate(end)
    return path


# GGUF expert tensor -> the fused Hugging Face name hf_names.py maps back to it
_HF_EXPERTS = {"ffn_gate_exps": "gate_proj", "ffn_up_exps": "up_proj", "ffn_down_exps": "down_proj",
               "ffn_gate_up_exps": "gate_up_proj"}
_HF_SHARED = {"ffn_gate_shexp": "gate_proj", "ffn_up_shexp": "up_proj", "ffn_down_shexp": "down_proj"}


def write_sparse_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...], int]]) -> int:
    """One .safetensors file of {name: (dtype, shape, n_bytes)}; returns the data bytes."""
    header: dict[str, Any] = {}
    at = 0
    for name, (dtype, shape, n) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + n]}
        at += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        f.truncate(8 + len(raw) + at)
    return at


def write_sparse_hf_folder(folder: Path, config: dict[str, Any], model: ModelSpec) -> int:
    """config.json verbatim and one shard with the routed experts of `model`'s MoE blocks
    (bf16, per block one fused tensor per projection, HF row-major shapes), their shared
    experts and the embedding; returns the routed-expert bytes written."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    tensors: dict[str, tuple[str, tuple[int, ...], int]] = {}
    experts = 0
    for layer in model.moe_layers:
        for t in layer.tensors:
            stem = t.name.split(".")[2]
            if t.group == "experts" and stem in _HF_EXPERTS:
                shape = tuple(reversed(t.shape))
                n = math.prod(shape) * 2
                tensors[f"model.layers.{layer.index}.mlp.experts.{_HF_EXPERTS[stem]}"] = ("BF16", shape, n)
                experts += n
            elif t.group == "shared" and stem in _HF_SHARED and t.name.endswith(".weight"):
                shape = tuple(reversed(t.shape))
                tensors[f"model.layers.{layer.index}.mlp.shared_expert.{_HF_SHARED[stem]}.weight"] = (
                    "BF16", shape, math.prod(shape) * 2)
    embd = next(t for t in model.globals if t.name == "token_embd.weight")
    tensors["model.embed_tokens.weight"] = ("BF16", tuple(reversed(embd.shape)), math.prod(embd.shape) * 2)
    write_sparse_safetensors(folder / "model.safetensors", tensors)
    return experts
