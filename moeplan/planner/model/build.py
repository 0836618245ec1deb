"""Tensors + hyper-parameters -> ModelSpec: the one assembly step every model reader ends in (pure).

A GGUF header (probes/gguf_model.py), a Hugging Face folder (probes/hf.py) and a bundled
profile (probes via profiles/model_profiles.py) all reach `build_model_spec` with the GGUF
hyper-parameters of the architecture and the tensor index, so the three agree by construction.
"""
from __future__ import annotations

from typing import Any

from moeplan.errors import ModelFormatError
from moeplan.planner.limits import check_hparams
from moeplan.planner.model import archs, registry
from moeplan.planner.model.spec import LayerSpec, ModelSpec, Tensor, group_tensors


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
    nextn_loaded = 0
    if registry.get(arch).nextn_probs_bias_loaded:
        nextn_loaded = sum(t.n_bytes for layer in layers if layer.kind == "nextn"
                           for t in layer.tensors if t.name.endswith(".exp_probs_b.bias"))
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
        nextn_loaded_bytes=nextn_loaded,
    )
