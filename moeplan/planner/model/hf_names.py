"""Hugging Face checkpoint tensor names -> GGUF tensor names (pure).

The map follows convert_hf_to_gguf.py's (gguf-py tensor_mapping.py, conversion/*.py) for the
architectures moeplan bundles, with two differences that keep the checkpoint's own structure:
per-expert matrices are summed into the GGUF expert tensor of their layer, and a checkpoint
tensor the converter splits or fuses keeps one name (MLA kv_b_proj -> attn_kv_b, fused
gate_up_proj experts -> ffn_gate_up_exps, Qwen3-Next in_proj_qkvz -> attn_qkv). Quantization
side tensors (FP8 block scales, MXFP4 scales) belong to the weight they scale.
"""
from __future__ import annotations

import re

# checkpoint side-tensors that belong to a weight: suffix -> the weight's suffix
SCALE_SUFFIXES = (
    (".weight_scale_inv", ".weight"),  # DeepSeek-style FP8 block scales
    (".weight_scale", ".weight"),
    (".input_scale", ".weight"),
    (".scale", ".weight"),  # DeepSeek V4 (FP8 and FP4 experts)
    ("_scales", "_blocks"),  # gpt-oss MXFP4
)

_PREFIXES = ("model.language_model.", "language_model.model.", "language_model.", "model.")

# root tensors
_ROOT = {
    "embed_tokens.weight": "token_embd.weight", "embed.weight": "token_embd.weight",
    "norm.weight": "output_norm.weight", "lm_head.weight": "output.weight", "head.weight": "output.weight",
    "hc_head_fn": "output_hc_fn.weight", "hc_head_base": "output_hc_base.weight",
    "hc_head_scale": "output_hc_scale.weight",
}

# per-block suffix -> GGUF suffix; '{post}' is ffn_norm or post_attention_norm by arch
_BLOCK = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "{post}.weight",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
    "self_attn.sinks": "attn_sinks.weight",
    "self_attn.q_a_proj": "attn_q_a", "self_attn.q_a_layernorm": "attn_q_a_norm",
    "self_attn.q_b_proj": "attn_q_b", "self_attn.kv_a_proj_with_mqa": "attn_kv_a_mqa",
    "self_attn.kv_a_layernorm": "attn_kv_a_norm", "self_attn.kv_b_proj": "attn_kv_b",
    "self_attn.indexer.wq_b": "indexer.attn_q_b", "self_attn.indexer.wk": "indexer.attn_k",
    "self_attn.indexer.weights_proj": "indexer.proj", "self_attn.indexer.k_norm": "indexer.k_norm",
    # Qwen3-Next / Qwen3.5 gated delta net
    "linear_attn.in_proj_qkvz": "attn_qkv", "linear_attn.in_proj_qkv": "attn_qkv",
    "linear_attn.in_proj_z": "attn_gate", "linear_attn.in_proj_ba": "ssm_ba",
    "linear_attn.in_proj_a": "ssm_alpha", "linear_attn.in_proj_b": "ssm_beta",
    "linear_attn.conv1d": "ssm_conv1d", "linear_attn.dt_bias": "ssm_dt.bias", "linear_attn.A_log": "ssm_a",
    "linear_attn.norm": "ssm_norm", "linear_attn.out_proj": "ssm_out",
    # routers
    "mlp.gate": "ffn_gate_inp", "mlp.router": "ffn_gate_inp", "block_sparse_moe.gate": "ffn_gate_inp",
    "feed_forward.router": "ffn_gate_inp", "ffn.gate": "ffn_gate_inp",
    "mlp.gate.e_score_correction_bias": "exp_probs_b.bias",
    "block_sparse_moe.e_score_correction_bias": "exp_probs_b.bias",
    "ffn.gate.bias": "exp_probs_b.bias", "ffn.gate.tid2eid": "ffn_gate_tid2eid.weight",
    "mlp.shared_expert_gate": "ffn_gate_inp_shexp",
    # dense FFN
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
    "feed_forward.gate_proj": "ffn_gate", "feed_forward.up_proj": "ffn_up", "feed_forward.down_proj": "ffn_down",
    # shared experts
    "mlp.shared_experts.gate_proj": "ffn_gate_shexp", "mlp.shared_experts.up_proj": "ffn_up_shexp",
    "mlp.shared_experts.down_proj": "ffn_down_shexp", "mlp.shared_expert.gate_proj": "ffn_gate_shexp",
    "mlp.shared_expert.up_proj": "ffn_up_shexp", "mlp.shared_expert.down_proj": "ffn_down_shexp",
    "feed_forward.shared_expert.gate_proj": "ffn_gate_shexp", "feed_forward.shared_expert.up_proj": "ffn_up_shexp",
    "feed_forward.shared_expert.down_proj": "ffn_down_shexp",
    "ffn.shared_experts.w1": "ffn_gate_shexp", "ffn.shared_experts.w3": "ffn_up_shexp",
    "ffn.shared_experts.w2": "ffn_down_shexp",
    # routed experts (the expert index is removed before the lookup)
    "mlp.experts.gate_proj": "ffn_gate_exps", "mlp.experts.up_proj": "ffn_up_exps",
    "mlp.experts.down_proj": "ffn_down_exps", "mlp.experts.gate_up_proj": "ffn_gate_up_exps",
    "mlp.experts.gate_up_proj_blocks": "ffn_gate_up_exps.weight", "mlp.experts.down_proj_blocks": "ffn_down_exps.weight",
    "mlp.experts.gate_up_proj_bias": "ffn_gate_up_exps.bias", "mlp.experts.down_proj_bias": "ffn_down_exps.bias",
    "block_sparse_moe.experts.w1": "ffn_gate_exps", "block_sparse_moe.experts.w3": "ffn_up_exps",
    "block_sparse_moe.experts.w2": "ffn_down_exps",
    "feed_forward.experts.gate_up_proj": "ffn_gate_up_exps.weight",
    "feed_forward.experts.down_proj": "ffn_down_exps.weight",
    "ffn.experts.w1": "ffn_gate_exps", "ffn.experts.w3": "ffn_up_exps", "ffn.experts.w2": "ffn_down_exps",
    # DeepSeek V4
    "attn_norm.weight": "attn_norm.weight", "ffn_norm.weight": "ffn_norm.weight",
    "attn.wq_a": "attn_q_a", "attn.q_norm": "attn_q_a_norm", "attn.wq_b": "attn_q_b", "attn.wkv": "attn_kv",
    "attn.kv_norm": "attn_kv_a_norm", "attn.wo_a": "attn_output_a", "attn.wo_b": "attn_output_b",
    "attn.attn_sink": "attn_sinks.weight",
    "attn.compressor.wkv": "attn_compressor_kv", "attn.compressor.wgate": "attn_compressor_gate",
    "attn.compressor.ape": "attn_compressor_ape.weight", "attn.compressor.norm": "attn_compressor_norm",
    "attn.indexer.wq_b": "indexer.attn_q_b", "attn.indexer.weights_proj": "indexer.proj",
    "attn.indexer.compressor.wkv": "indexer_compressor_kv", "attn.indexer.compressor.wgate": "indexer_compressor_gate",
    "attn.indexer.compressor.ape": "indexer_compressor_ape.weight",
    "attn.indexer.compressor.norm": "indexer_compressor_norm",
    "hc_attn_fn": "hc_attn_fn.weight", "hc_attn_base": "hc_attn_base.weight", "hc_attn_scale": "hc_attn_scale.weight",
    "hc_ffn_fn": "hc_ffn_fn.weight", "hc_ffn_base": "hc_ffn_base.weight", "hc_ffn_scale": "hc_ffn_scale.weight",
    # NextN / MTP wiring (DeepSeek, GLM: model.layers.<n_layer>.*; DeepSeek V4: mtp.<k>.*)
    "eh_proj": "nextn.eh_proj", "e_proj": "nextn.eh_proj", "h_proj": "nextn.eh_proj",
    "enorm": "nextn.enorm", "hnorm": "nextn.hnorm", "embed_tokens": "nextn.embed_tokens",
    "shared_head.norm": "nextn.shared_head_norm", "shared_head.head": "nextn.shared_head_head",
    "norm": "nextn.shared_head_norm",
    "hc_head_fn": "nextn.hc_head_fn.weight", "hc_head_base": "nextn.hc_head_base.weight",
    "hc_head_scale": "nextn.hc_head_scale.weight",
}
# Qwen3-Next / Qwen3.5 MTP wiring outside mtp.layers.<k>
_QWEN_MTP = {"fc": "nextn.eh_proj", "pre_fc_norm_embedding": "nextn.enorm",
             "pre_fc_norm_hidden": "nextn.hnorm", "norm": "nextn.shared_head_norm"}

# architectures whose post_attention_layernorm becomes post_attention_norm (not ffn_norm)

_EXPERT_RE = re.compile(r"\.experts\.\d+\.")
_BLOCK_RE = re.compile(r"^layers\.(\d+)\.(.+)$")
_MTP_LAYER_RE = re.compile(r"^mtp\.layers\.(\d+)\.(.+)$")
_MTP_DSV4_RE = re.compile(r"^mtp\.(\d+)\.(.+)$")
_MTP_QWEN_RE = re.compile(r"^mtp\.([a-z_]+)\.(weight|bias)$")


def scale_owner(name: str, names: set[str]) -> str | None:
    """The weight a quantization side tensor belongs to, if `name` is one."""
    for suffix, weight_suffix in SCALE_SUFFIXES:
        if name.endswith(suffix):
            owner = name[: -len(suffix)] + weight_suffix
            if owner in names and owner != name:
                return owner
    return None


def _strip(name: str) -> str:
    for pre in _PREFIXES:
        if name.startswith(pre):
            return name[len(pre):]
    return name


def _suffix(rest: str, arch: str) -> str | None:
    """GGUF suffix of a per-block tensor name (expert index already removed).

    The whole name is looked up first (tensors without a .weight/.bias suffix, and names
    like ffn.gate.bias that map elsewhere than their stem), then the stem with its suffix."""
    from moeplan.planner.model import registry

    post = "post_attention_norm" if registry.get(arch).post_attention_norm else "ffn_norm"
    for kind in ("", ".weight", ".bias"):
        if kind and not rest.endswith(kind):
            continue
        mapped = _BLOCK.get(rest[: -len(kind)] if kind else rest)
        if mapped is None:
            continue
        mapped = mapped.replace("{post}", post)
        if mapped.endswith((".weight", ".bias")) or mapped == "ssm_a":
            return mapped
        return mapped + (kind or ".weight")
    return None


def gguf_name(hf_name: str, arch: str, n_trunk: int) -> str | None:
    """GGUF tensor name of a checkpoint tensor, or None when the converter has no use for it
    (vision towers, rotary caches, unknown extras)."""
    name = _EXPERT_RE.sub(".experts.", hf_name) if ".experts." in hf_name else hf_name
    if name.startswith("mtp."):
        m = _MTP_LAYER_RE.match(name) or _MTP_DSV4_RE.match(name)
        if m:
            il, rest = n_trunk + int(m.group(1)), m.group(2)
            suffix = _suffix(rest, arch)
            return f"blk.{il}.{suffix}" if suffix else None
        q = _MTP_QWEN_RE.match(name)
        if q and q.group(1) in _QWEN_MTP:
            return f"blk.{n_trunk}.{_QWEN_MTP[q.group(1)]}.{q.group(2)}"
        return None
    name = _strip(name)
    if name in _ROOT:
        return _ROOT[name]
    m = _BLOCK_RE.match(name)
    if not m:
        return None
    suffix = _suffix(m.group(2), arch)
    return f"blk.{int(m.group(1))}.{suffix}" if suffix else None


def mtp_blocks(hf_names: list[str], n_trunk: int) -> int:
    """MTP/NextN blocks present in a checkpoint (layers past n_trunk, or mtp.* modules)."""
    seen: set[int] = set()
    for n in hf_names:
        m = _BLOCK_RE.match(_strip(n))
        if m and int(m.group(1)) >= n_trunk:
            seen.add(int(m.group(1)) - n_trunk)
        mm = _MTP_LAYER_RE.match(n) or _MTP_DSV4_RE.match(n)
        if mm:
            seen.add(int(mm.group(1)))
        elif _MTP_QWEN_RE.match(n):
            seen.add(0)
    return len(seen)
