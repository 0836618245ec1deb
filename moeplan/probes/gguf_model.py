"""GGUF header(s) -> ModelSpec."""
from __future__ import annotations

import os
from typing import Any

from gguf.constants import LlamaFileType

from moeplan.errors import ModelFormatError
from moeplan.planner.limits import check_hparams
from moeplan.planner.model import archs
from moeplan.planner.model.spec import LayerSpec, ModelSpec, Tensor, group_tensors, make_tensor
from moeplan.probes.gguf_file import ArrayInfo, GGUFHeader, read_gguf_set


def arch_hparams(meta: dict[str, Any], arch: str) -> dict[str, Any]:
    """The `{arch}.*` keys without their prefix."""
    pre = arch + "."
    return {k[len(pre):]: v for k, v in meta.items() if k.startswith(pre)}


def file_type_label(meta: dict[str, Any]) -> str:
    ft = meta.get("general.file_type")
    if ft is None:
        return "unknown"
    try:
        name = LlamaFileType(int(ft)).name
    except (ValueError, TypeError, OverflowError):
        return f"ftype{ft}"
    for pre in ("MOSTLY_", "ALL_"):
        if name.startswith(pre):
            name = name[len(pre):]
    return name


def vocab_size(meta: dict[str, Any], hp: dict[str, Any], tensors: list[Tensor]) -> int:
    if hp.get("vocab_size"):
        return int(hp["vocab_size"])
    toks = meta.get("tokenizer.ggml.tokens")
    if isinstance(toks, (list, ArrayInfo)) and len(toks):
        return len(toks)
    for t in tensors:
        if t.name == "token_embd.weight" and len(t.shape) >= 2:
            return int(t.shape[1])
    return 0


def build_model_spec(arch: str, hp: dict[str, Any], tensors: list[Tensor], *, name: str, source: str,
                     quant: str, n_vocab: int, file_bytes: int, path: str = "",
                     shards: tuple[str, ...] = (), notes: tuple[str, ...] = ()) -> ModelSpec:
    """Group tensors into layers, apply the architecture's rules. Shared by every reader."""
    where = path or name
    if arch not in archs.SUPPORTED_ARCHS:
        raise ModelFormatError(
            f"{where}: architecture {arch!r} is not supported",
            "supported: " + ", ".join(archs.SUPPORTED_ARCHS) + "; or pick a bundled profile (moeplan models)",
        )
    if "block_count" not in hp or "embedding_length" not in hp:
        raise ModelFormatError(f"{where}: {arch}.block_count / {arch}.embedding_length missing from the header",
                               "the file was not written by llama.cpp's converter; re-convert it")
    # before anything loops over layers or experts (a block_count of 10^9 must not hang)
    check_hparams(hp, where, prefix="" if source == "hf" else f"{arch}.")
    globals_, per_layer = group_tensors(tensors)
    n_blocks = int(hp["block_count"])
    trunk = archs.n_trunk(hp)
    layers: list[LayerSpec] = []
    for il in range(n_blocks):
        lt = tuple(sorted(per_layer.get(il, ()), key=lambda t: t.name))
        if il >= trunk:
            layers.append(LayerSpec(il, "nextn", "skipped", archs.nextn_layer_kv(arch, hp, il), lt))
            continue
        kind = "moe" if any(t.group == "experts" for t in lt) else "dense"
        label, kv = archs.layer_kv(arch, hp, il)
        layers.append(LayerSpec(il, kind, label, kv, lt))
    stray = sorted(set(per_layer) - set(range(n_blocks)))
    if stray:
        raise ModelFormatError(f"{where}: tensors for block {stray[0]} but block_count is {n_blocks}",
                               "the header is inconsistent; re-convert the model")
    n_experts = int(hp.get("expert_count", 0) or 0)
    moe = [layer for layer in layers if layer.kind == "moe"]
    if not moe or n_experts == 0:
        raise ModelFormatError(
            f"{where}: {name} is a dense model (no routed-expert tensors)",
            "moeplan plans expert offload for MoE models; for a dense model use llama.cpp's -ngl / --fit",
        )
    n_ff_exp = int(archs.hp_at(hp, "expert_feed_forward_length", moe[0].index, 0) or 0)
    if not n_ff_exp:
        for t in moe[0].tensors:
            if t.group == "experts" and "down" in t.name:
                n_ff_exp = int(t.shape[0])
            elif t.group == "experts" and "gate_up" in t.name:
                n_ff_exp = int(t.shape[1]) // 2
    n_shared = int(hp.get("expert_shared_count", 0) or 0)
    if not n_shared and any(t.group == "shared" and "down" in t.name for layer in moe for t in layer.tensors):
        n_shared = 1
    labels = [layer.attention for layer in layers if layer.kind != "nextn"]
    return ModelSpec(
        name=name, arch=arch, source=source, quant=quant,
        n_embd=int(hp["embedding_length"]), n_vocab=n_vocab,
        n_ctx_train=int(hp.get("context_length", 0) or 0),
        n_head=int(archs.hp_at(hp, "attention.head_count", 0, 0) or 0),
        n_experts=n_experts, n_experts_used=int(hp.get("expert_used_count", 0) or 0),
        n_experts_shared=n_shared, n_ff_exp=n_ff_exp,
        layers=tuple(layers), globals=tuple(sorted(globals_, key=lambda t: t.name)),
        file_bytes=file_bytes, path=path, shards=shards, notes=notes,
        attention_kind=archs.attention_kind(arch, hp, labels),
        mla=any(lbl.startswith("mla") for lbl in labels),
        extra=tuple(sorted((k, v) for k, v in hp.items() if isinstance(v, (int, float, str)))),
    )


def model_from_headers(headers: list[GGUFHeader]) -> ModelSpec:
    meta = headers[0].metadata
    path = headers[0].path
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise ModelFormatError(f"{path}: general.architecture missing from the header",
                               "the file was not written by llama.cpp's converter; re-convert it")
    hp = arch_hparams(meta, arch)
    check_hparams(hp, path, prefix=f"{arch}.")
    tensors = [make_tensor(t.name, t.shape, t.type_name, t.n_bytes) for h in headers for t in h.tensors]
    names = [t.name for t in tensors]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ModelFormatError(f"{path}: tensor {dup!r} appears twice", "the split set mixes two downloads")
    name = str(meta.get("general.name") or os.path.basename(path))
    n_vocab = vocab_size(meta, hp, tensors)
    return build_model_spec(
        arch, hp, tensors, name=name, source="gguf", quant=file_type_label(meta), n_vocab=n_vocab,
        file_bytes=sum(h.file_bytes for h in headers), path=os.path.abspath(path),
        shards=tuple(os.path.abspath(h.path) for h in headers),
    )


def read_gguf_model(path: str | os.PathLike) -> ModelSpec:
    """ModelSpec of a GGUF file (any shard of a split set: all shards are read and summed)."""
    return model_from_headers(read_gguf_set(path))
