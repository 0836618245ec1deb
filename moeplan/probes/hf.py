"""A Hugging Face model folder -> ModelSpec, from config.json and the safetensors headers.

Reads config.json (a VL container's text_config merged over it, as the converter does), then
the 8-byte length and the JSON header of every safetensors shard (never tensor data): each
tensor's dtype, shape and exact byte span. Checkpoint tensors are mapped to GGUF names
(planner/model/hf_names.py): per-expert matrices summed into their layer's expert tensor, FP8 block
scales and MXFP4 scales counted with the weight they scale, MTP modules as NextN blocks, and
tensors llama.cpp does not use (vision towers) kept as model-level 'other' tensors under their
own names, so the spec's tensor bytes equal the sum over the safetensors headers.
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moeplan.errors import ModelFormatError
from moeplan.planner.limits import check_hf_config
from moeplan.planner.model import registry
from moeplan.planner.model.build import build_model_spec
from moeplan.planner.model.hf_names import gguf_name, mtp_blocks, scale_owner
from moeplan.planner.model.spec import ModelSpec, make_tensor
from moeplan.planner.model.synth import gguf_hparams, merged_config

# a safetensors header is JSON; anything this large is a corrupt length field
MAX_HEADER_BYTES = 256 * 1024 * 1024
PACKED_FP4 = ("U8", "I8")  # 2 FP4 values per byte when a per-32 scale tensor sits beside it


@dataclass(frozen=True)
class StTensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    n_bytes: int
    file: str


def read_safetensors_header(path: Path) -> list[StTensor]:
    """Tensor entries of one .safetensors file (8-byte little-endian length + JSON)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ModelFormatError(f"{path}: truncated safetensors file ({size} bytes)",
                                   "the download is incomplete; download this shard again")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER_BYTES or 8 + n > size:
            raise ModelFormatError(f"{path}: corrupt safetensors header (length {n}, file {size} bytes)",
                                   "the file is damaged or not a safetensors file; download it again")
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFormatError(f"{path}: unreadable safetensors header ({exc})", "download this shard again") from None
    out = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = entry["data_offsets"]
            out.append(StTensor(name, str(entry["dtype"]), tuple(int(d) for d in entry["shape"]),
                                int(end) - int(start), path.name))
        except (KeyError, TypeError, ValueError):
            raise ModelFormatError(f"{path}: bad header entry for tensor {name!r}", "download this shard again") from None
        if 8 + n + int(end) > size:
            raise ModelFormatError(f"{path}: tensor {name!r} ends past the end of the file (truncated)",
                                   "the download is incomplete; download this shard again")
    return out


def _weight_files(folder: Path) -> list[Path]:
    """Shards named by model.safetensors.index.json, else every *.safetensors of the folder."""
    index = folder / "model.safetensors.index.json"
    if index.exists():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ModelFormatError(f"{index}: unreadable index ({exc})", "download the index file again") from None
        files = sorted(set(weight_map.values()))
        missing = [f for f in files if not (folder / f).exists()]
        if missing:
            raise ModelFormatError(f"{folder}: {len(missing)} of {len(files)} shards named by the index are missing "
                                   f"(first: {missing[0]})",
                                   "download every *.safetensors shard, or plan with a bundled profile name instead")
        return [folder / f for f in files]
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelFormatError(f"{folder}: no *.safetensors weights (and no model.safetensors.index.json)",
                               "download the weights too, or give a bundled profile name (moeplan models)")
    return files


def read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.exists():
        raise ModelFormatError(f"{folder}: no config.json", "give a Hugging Face model folder, a .gguf file or a profile name")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelFormatError(f"{path}: not valid JSON ({exc})", "download config.json again") from None
    if not isinstance(cfg, dict):
        raise ModelFormatError(f"{path}: not a config object", "download config.json again")
    return cfg


def _logical_shape(t: StTensor, scale: StTensor | None) -> tuple[int, ...]:
    """ggml-order shape in elements; packed FP4 (2 per byte, scale per 32) is unpacked."""
    shape = list(t.shape)
    if t.name.endswith("_blocks") and len(shape) >= 2:  # gpt-oss [.., out, in/32, 16]
        shape = shape[:-2] + [shape[-2] * 32]
    elif t.dtype in PACKED_FP4 and scale is not None and scale.shape and shape:
        if scale.shape[-1] * 16 == shape[-1]:
            shape[-1] *= 2
    return tuple(reversed(shape))


def _dtype_label(t: StTensor, scale: StTensor | None) -> str:
    if t.name.endswith("_blocks") or (t.dtype in PACKED_FP4 and scale is not None):
        return "MXFP4"
    return {"F8_E4M3": "F8_E4M3", "F8_E5M2": "F8_E5M2"}.get(t.dtype, t.dtype)


def read_hf_model(folder: str | os.PathLike) -> ModelSpec:
    """ModelSpec of a Hugging Face folder: exact bytes from the safetensors headers."""
    folder = Path(folder)
    config = read_config(folder)
    cfg = merged_config(config)
    check_hf_config(cfg, f"{folder}/config.json")
    found = registry.of_config(cfg)
    if found is None:
        name = (cfg.get("architectures") or [cfg.get("model_type")])[0]
        raise ModelFormatError(
            f"{folder}: model type {name!r} is not supported",
            "supported: " + ", ".join(sorted({cls for a in registry.ARCHS.values() for cls, _ in a.hf_classes}))
            + "; or pick a bundled profile (moeplan models)")
    n_experts = found[0].hf.value(cfg, "expert_count")  # the architecture's own name for it
    if not n_experts:
        raise ModelFormatError(f"{folder}: {cfg.get('model_type', 'this model')} is a dense model (no routed experts)",
                               "moeplan plans expert offload for MoE models; for a dense model use llama.cpp's -ngl / --fit")
    files = _weight_files(folder)
    entries = [t for f in files for t in read_safetensors_header(f)]
    names = {t.name for t in entries}
    if len(names) != len(entries):
        raise ModelFormatError(f"{folder}: a tensor appears in two shards", "the folder mixes two downloads")
    try:
        n_trunk = int(cfg["num_hidden_layers"])
        n_mtp = mtp_blocks([t.name for t in entries], n_trunk)
        arch, hp = gguf_hparams(config, keep_mtp=True, n_mtp=n_mtp)
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFormatError(f"{folder}/config.json: missing or bad key {exc}",
                               "the config does not describe a complete model; download config.json again") from None
    hp["block_count"] = n_trunk + n_mtp
    if n_mtp:
        hp["nextn_predict_layers"] = n_mtp
    else:
        hp.pop("nextn_predict_layers", None)

    scales: dict[str, StTensor] = {}
    for t in entries:
        owner = scale_owner(t.name, names)
        if owner is not None:
            scales[owner] = t
    groups: dict[str, dict[str, Any]] = {}
    for t in entries:
        if scale_owner(t.name, names) is not None:
            continue
        scale = scales.get(t.name)
        gname = gguf_name(t.name, arch, n_trunk) or t.name
        g = groups.setdefault(gname, {"bytes": 0, "parts": 0, "shape": None, "dtypes": set()})
        g["bytes"] += t.n_bytes + (scale.n_bytes if scale else 0)
        g["parts"] += 1
        g["dtypes"].add(_dtype_label(t, scale))
        shape = _logical_shape(t, scale)
        if g["shape"] is None:
            g["shape"] = shape
        elif ".nextn.eh_proj" in gname:  # DeepSeek V4's e_proj and h_proj, concatenated on ne0
            g["shape"] = (g["shape"][0] + shape[0],) + g["shape"][1:]
    tensors = []
    for gname, g in groups.items():
        shape = g["shape"]
        if g["parts"] > 1 and "_exps." in gname and len(shape) == 2:
            shape = shape + (g["parts"],)  # per-expert matrices -> one {in, out, n_expert} tensor
        dtype = "+".join(sorted(g["dtypes"]))
        tensors.append(make_tensor(gname, shape, dtype, g["bytes"]))
    dtypes = sorted({t.ggml_type for t in tensors if len(t.shape) > 1 and t.group != "other"})
    return build_model_spec(
        arch, hp, tensors, name=str(cfg.get("_name_or_path") or folder.name), source="hf",
        quant="native (" + ", ".join(dtypes) + ")", n_vocab=int(cfg.get("vocab_size", 0) or 0),
        file_bytes=sum(f.stat().st_size for f in files), path=str(folder.resolve()),
        shards=tuple(str(f.resolve()) for f in files),
        notes=("bytes from the safetensors headers (tensor data not read); FP8 block scales and MXFP4 scales "
               "counted with their weights, per-expert tensors summed per layer",),
    )
