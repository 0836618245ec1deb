"""GGUF hyper-parameters -> the tensor list llama.cpp's load_arch_tensors creates (ggml shapes).

One builder per architecture, written from src/models/<arch>.cpp (llama.cpp 2026-10). Shapes
are ne0 first; names are the GGUF names the converter writes. The NextN/MTP block (blocks past
n_layer) gets the trunk block of its kind plus the nextn.* extras the checkpoint carries.
"""
from __future__ import annotations

from typing import Any

from moeplan.planner.model.spec import TensorSpec, hp_at, kv_head_dims


class Index:
    """Collects TensorSpecs in creation order."""

    def __init__(self) -> None:
        self.out: list[TensorSpec] = []

    def g(self, name: str, shape: tuple[int, ...], role: str) -> None:
        self.out.append(TensorSpec(name, tuple(int(d) for d in shape), role, None))

    def b(self, il: int, name: str, shape: tuple[int, ...], role: str) -> None:
        self.out.append(TensorSpec(f"blk.{il}.{name}", tuple(int(d) for d in shape), role, il))


def _i(hp: dict[str, Any], key: str, default: int = 0) -> int:
    v = hp.get(key, default)
    if isinstance(v, (list, tuple)):
        v = v[0]
    return int(v if v is not None else default)


def dims(hp: dict[str, Any]) -> dict[str, int]:
    n_embd = _i(hp, "embedding_length")
    n_head = _i(hp, "attention.head_count")
    n_head_kv = _i(hp, "attention.head_count_kv", n_head)
    d_k, d_v = kv_head_dims(hp, n_head)
    return {
        "n_embd": n_embd, "n_head": n_head, "n_head_kv": n_head_kv, "d_k": d_k, "d_v": d_v,
        "n_ff": _i(hp, "feed_forward_length"), "n_ff_exp": _i(hp, "expert_feed_forward_length"),
        "n_expert": _i(hp, "expert_count"), "n_used": _i(hp, "expert_used_count"),
        "n_shared": _i(hp, "expert_shared_count"), "n_blocks": _i(hp, "block_count"),
        "n_layer": _i(hp, "block_count") - _i(hp, "nextn_predict_layers"),
    }


def _globals(ix: Index, n_embd: int, n_vocab: int, output: bool = True) -> None:
    ix.g("token_embd.weight", (n_embd, n_vocab), "embed")
    ix.g("output_norm.weight", (n_embd,), "vector")
    if output:
        ix.g("output.weight", (n_embd, n_vocab), "output")


def _experts(ix: Index, il: int, n_embd: int, n_ff: int, n_expert: int) -> None:
    ix.b(il, "ffn_gate_exps.weight", (n_embd, n_ff, n_expert), "experts")
    ix.b(il, "ffn_down_exps.weight", (n_ff, n_embd, n_expert), "experts")
    ix.b(il, "ffn_up_exps.weight", (n_embd, n_ff, n_expert), "experts")


def _shexp(ix: Index, il: int, n_embd: int, n_ff: int) -> None:
    ix.b(il, "ffn_gate_shexp.weight", (n_embd, n_ff), "shexp")
    ix.b(il, "ffn_down_shexp.weight", (n_ff, n_embd), "shexp")
    ix.b(il, "ffn_up_shexp.weight", (n_embd, n_ff), "shexp")


def _dense_ffn(ix: Index, il: int, n_embd: int, n_ff: int) -> None:
    ix.b(il, "ffn_gate.weight", (n_embd, n_ff), "ffn")
    ix.b(il, "ffn_down.weight", (n_ff, n_embd), "ffn")
    ix.b(il, "ffn_up.weight", (n_embd, n_ff), "ffn")


def _qkv(ix: Index, il: int, n_embd: int, n_q: int, n_k: int, n_v: int, bias: bool = False) -> None:
    """create_tensor_qkv without fusion: the converter writes separate q, k, v (and biases)."""
    ix.b(il, "attn_q.weight", (n_embd, n_q), "attn")
    ix.b(il, "attn_k.weight", (n_embd, n_k), "attn")
    ix.b(il, "attn_v.weight", (n_embd, n_v), "attn")
    if bias:
        ix.b(il, "attn_q.bias", (n_q,), "vector")
        ix.b(il, "attn_k.bias", (n_k,), "vector")
        ix.b(il, "attn_v.bias", (n_v,), "vector")


def _gqa(ix: Index, il: int, d: dict[str, int], q_mult: int = 1, bias: bool = False) -> None:
    """q, k, v (create_tensor_qkv) and the output projection of a GQA block; q_mult 2 for the
    gated queries of qwen3next / qwen35moe."""
    n_embd, d_k = d["n_embd"], d["d_k"]
    _qkv(ix, il, n_embd, d_k * d["n_head"] * q_mult, d_k * d["n_head_kv"], d["d_v"] * d["n_head_kv"], bias)
    ix.b(il, "attn_output.weight", (d_k * d["n_head"], n_embd), "attn")


def _nextn(ix: Index, il: int, n_embd: int, n_vocab: int, extras: tuple[str, ...]) -> None:
    """NextN/MTP wiring around the extra decoder block (eh_proj, enorm, hnorm, optional head)."""
    if "eh_proj" in extras:
        ix.b(il, "nextn.eh_proj.weight", (2 * n_embd, n_embd), "nextn_proj")
    if "enorm" in extras:
        ix.b(il, "nextn.enorm.weight", (n_embd,), "vector")
    if "hnorm" in extras:
        ix.b(il, "nextn.hnorm.weight", (n_embd,), "vector")
    if "embed_tokens" in extras:
        ix.b(il, "nextn.embed_tokens.weight", (n_embd, n_vocab), "nextn_embed")
    if "shared_head_head" in extras:
        ix.b(il, "nextn.shared_head_head.weight", (n_embd, n_vocab), "nextn_head")
    if "shared_head_norm" in extras:
        ix.b(il, "nextn.shared_head_norm.weight", (n_embd,), "vector")


# ---- per architecture ------------------------------------------------------------------------

def _qk_norm_gqa(ix: Index, il: int, d: dict[str, int]) -> None:
    """GQA with q/k norms of one head between the block's two norms (qwen3moe.cpp,
    hunyuan-moe.cpp)."""
    ix.b(il, "attn_norm.weight", (d["n_embd"],), "vector")
    _gqa(ix, il, d)
    ix.b(il, "attn_k_norm.weight", (d["d_k"],), "vector")
    ix.b(il, "attn_q_norm.weight", (d["d_k"],), "vector")
    ix.b(il, "ffn_norm.weight", (d["n_embd"],), "vector")


def _mla_attention(ix: Index, il: int, hp: dict[str, Any], d: dict[str, int]) -> None:
    """deepseek2.cpp / glm-dsa.cpp attention (MLA with the k_b / v_b split the converter writes)."""
    ix.b(il, "attn_norm.weight", (d["n_embd"],), "vector")
    _mla_projections(ix, il, hp, d)
    ix.b(il, "ffn_norm.weight", (d["n_embd"],), "vector")


def _mla_projections(ix: Index, il: int, hp: dict[str, Any], d: dict[str, int], gate: bool = False) -> None:
    """MLA's projections in converter order; `gate`: Kimi-K3's sigmoid output gate before the
    output projection (kimi-k3.cpp)."""
    n_embd, n_head = d["n_embd"], d["n_head"]
    q_lora = _i(hp, "attention.q_lora_rank")
    kv_lora = _i(hp, "attention.kv_lora_rank")
    d_k_mla = _i(hp, "attention.key_length_mla")
    d_v_mla = _i(hp, "attention.value_length_mla")
    n_rot = _i(hp, "rope.dimension_count")
    nope = d_k_mla - n_rot
    if q_lora:
        ix.b(il, "attn_q_a_norm.weight", (q_lora,), "vector")
    ix.b(il, "attn_kv_a_norm.weight", (kv_lora,), "vector")
    if q_lora:
        ix.b(il, "attn_q_a.weight", (n_embd, q_lora), "attn")
        ix.b(il, "attn_q_b.weight", (q_lora, n_head * d_k_mla), "attn")
    else:
        ix.b(il, "attn_q.weight", (n_embd, n_head * d_k_mla), "attn")
    ix.b(il, "attn_kv_a_mqa.weight", (n_embd, kv_lora + n_rot), "attn")
    ix.b(il, "attn_k_b.weight", (nope, kv_lora, n_head), "attn")
    ix.b(il, "attn_v_b.weight", (kv_lora, d_v_mla, n_head), "attn")
    if gate:
        ix.b(il, "attn_gate.weight", (n_embd, n_head * d_v_mla), "attn")
    ix.b(il, "attn_output.weight", (n_head * d_v_mla, n_embd), "attn")


def _mla_ffn(ix: Index, il: int, hp: dict[str, Any], d: dict[str, int], probs_bias: bool) -> None:
    n_embd = d["n_embd"]
    if il < _i(hp, "leading_dense_block_count"):
        _dense_ffn(ix, il, n_embd, d["n_ff"])
        return
    ix.b(il, "ffn_gate_inp.weight", (n_embd, d["n_expert"]), "router")
    if probs_bias:
        ix.b(il, "exp_probs_b.bias", (d["n_expert"],), "vector")
    _experts(ix, il, n_embd, d["n_ff_exp"], d["n_expert"])
    _shexp(ix, il, n_embd, d["n_ff_exp"] * d["n_shared"])


def _build_deepseek2(ix: Index, hp: dict[str, Any], d: dict[str, int], n_vocab: int,
                     extras: tuple[str, ...], probs_bias: bool = True, indexer: bool = False) -> None:
    """deepseek2.cpp; with `indexer` the DSA lightning-indexer tensors of glm-dsa/deepseek32.

    exp_probs_b (e_score_correction_bias) exists for the noaux_tc models (DeepSeek V3, Kimi K2,
    GLM); DeepSeek V2 has none."""
    _globals(ix, d["n_embd"], n_vocab)
    idx_dim = _i(hp, "attention.indexer.key_length")
    idx_heads = _i(hp, "attention.indexer.head_count")
    q_lora = _i(hp, "attention.q_lora_rank")
    types = hp.get("attention.indexer.types")
    for il in range(d["n_blocks"]):
        _mla_attention(ix, il, hp, d)
        # glm-dsa.cpp loads the indexer tensors as optional: GLM-5.2's 'shared' blocks have none
        full = types is None or il >= len(types) or bool(types[il])
        if indexer and full:
            ix.b(il, "indexer.k_norm.weight", (idx_dim,), "vector")
            ix.b(il, "indexer.k_norm.bias", (idx_dim,), "vector")
            ix.b(il, "indexer.proj.weight", (d["n_embd"], idx_heads), "indexer_proj")
            ix.b(il, "indexer.attn_k.weight", (d["n_embd"], idx_dim), "indexer")
            ix.b(il, "indexer.attn_q_b.weight", (q_lora, idx_heads * idx_dim), "indexer")
        _mla_ffn(ix, il, hp, d, probs_bias)
        if il >= d["n_layer"]:
            _nextn(ix, il, d["n_embd"], n_vocab, extras)


def _build_deepseek4(ix: Index, hp: dict[str, Any], d: dict[str, int], n_vocab: int,
                     extras: tuple[str, ...]) -> None:
    """deepseek4.cpp. attn_output_a is stored 2-D in the file ({n_head*d/o_groups,
    o_lora*o_groups}); llama.cpp views it as 3-D (TENSOR_ALLOW_RESHAPE), same bytes."""
    n_embd, n_head, d_head = d["n_embd"], d["n_head"], d["d_k"]
    q_lora = _i(hp, "attention.q_lora_rank")
    o_groups = _i(hp, "attention.output_group_count")
    o_lora = _i(hp, "attention.output_lora_rank")
    hc = _i(hp, "hyper_connection.count")
    hc_dim, hc_mix = hc * n_embd, (2 + hc) * hc
    idx_dim = _i(hp, "attention.indexer.key_length")
    idx_heads = _i(hp, "attention.indexer.head_count")
    ratios = hp["attention.compress_ratios"]
    n_hash = _i(hp, "hash_layer_count")
    n_ff, n_expert = d["n_ff_exp"], d["n_expert"]
    _globals(ix, n_embd, n_vocab)
    ix.g("output_hc_fn.weight", (hc_dim, hc), "hc")
    ix.g("output_hc_base.weight", (hc,), "vector")
    ix.g("output_hc_scale.weight", (1,), "vector")
    for il in range(d["n_blocks"]):
        ix.b(il, "attn_norm.weight", (n_embd,), "vector")
        ix.b(il, "attn_sinks.weight", (n_head,), "vector")
        ix.b(il, "attn_q_a.weight", (n_embd, q_lora), "attn")
        ix.b(il, "attn_q_a_norm.weight", (q_lora,), "vector")
        ix.b(il, "attn_q_b.weight", (q_lora, n_head * d_head), "attn")
        ix.b(il, "attn_kv.weight", (n_embd, d_head), "attn")
        ix.b(il, "attn_kv_a_norm.weight", (d_head,), "vector")
        ix.b(il, "attn_output_a.weight", (n_head * d_head // o_groups, o_lora * o_groups), "attn")
        ix.b(il, "attn_output_b.weight", (o_groups * o_lora, n_embd), "attn")
        for part in ("attn", "ffn"):
            ix.b(il, f"hc_{part}_fn.weight", (hc_dim, hc_mix), "hc")
            ix.b(il, f"hc_{part}_base.weight", (hc_mix,), "vector")
            ix.b(il, f"hc_{part}_scale.weight", (3,), "vector")
        ratio = int(ratios[il]) if il < len(ratios) else 0
        if ratio:
            coff = 2 if ratio == 4 else 1
            ix.b(il, "attn_compressor_kv.weight", (n_embd, coff * d_head), "compressor")
            ix.b(il, "attn_compressor_gate.weight", (n_embd, coff * d_head), "compressor")
            ix.b(il, "attn_compressor_ape.weight", (coff * d_head, ratio), "compressor")
            ix.b(il, "attn_compressor_norm.weight", (d_head,), "vector")
            if ratio == 4:
                ix.b(il, "indexer.proj.weight", (n_embd, idx_heads), "indexer")
                ix.b(il, "indexer.attn_q_b.weight", (q_lora, idx_heads * idx_dim), "indexer")
                ix.b(il, "indexer_compressor_kv.weight", (n_embd, 2 * idx_dim), "indexer")
                ix.b(il, "indexer_compressor_gate.weight", (n_embd, 2 * idx_dim), "indexer")
                ix.b(il, "indexer_compressor_ape.weight", (2 * idx_dim, ratio), "indexer")
                ix.b(il, "indexer_compressor_norm.weight", (idx_dim,), "vector")
        ix.b(il, "ffn_gate_inp.weight", (n_embd, n_expert), "router")
        if il < n_hash:
            ix.b(il, "ffn_gate_tid2eid.weight", (d["n_used"], n_vocab), "tid2eid")
        else:
            ix.b(il, "exp_probs_b.bias", (n_expert,), "vector")
        ix.b(il, "ffn_norm.weight", (n_embd,), "vector")
        _experts(ix, il, n_embd, n_ff, n_expert)
        _shexp(ix, il, n_embd, n_ff * d["n_shared"])
        if il >= d["n_layer"]:
            _nextn(ix, il, n_embd, n_vocab, extras)
            if "hc_head" in extras:  # the checkpoint's MTP module has its own hc head
                ix.b(il, "nextn.hc_head_fn.weight", (hc_dim, hc), "hc")
                ix.b(il, "nextn.hc_head_base.weight", (hc,), "vector")
                ix.b(il, "nextn.hc_head_scale.weight", (1,), "vector")


def _build_glm4moe(ix: Index, hp: dict[str, Any], d: dict[str, int], n_vocab: int,
                   extras: tuple[str, ...], qk_norm: bool = True) -> None:
    """glm4-moe.cpp: GQA with q/k/v biases, optional q/k norms, post-attention norm."""
    n_embd, d_k = d["n_embd"], d["d_k"]
    _globals(ix, n_embd, n_vocab)
    for il in range(d["n_blocks"]):
        ix.b(il, "attn_norm.weight", (n_embd,), "vector")
        _gqa(ix, il, d, bias=True)
        if qk_norm:
            ix.b(il, "attn_q_norm.weight", (d_k,), "vector")
            ix.b(il, "attn_k_norm.weight", (d_k,), "vector")
        ix.b(il, "post_attention_norm.weight", (n_embd,), "vector")
        if il >= _i(hp, "leading_dense_block_count"):
            ix.b(il, "ffn_gate_inp.weight", (n_embd, d["n_expert"]), "router")
            ix.b(il, "exp_probs_b.bias", (d["n_expert"],), "vector")
            _experts(ix, il, n_embd, d["n_ff_exp"], d["n_expert"])
            if d["n_shared"]:
                _shexp(ix, il, n_embd, d["n_ff_exp"] * d["n_shared"])
        else:
            _dense_ffn(ix, il, n_embd, d["n_ff"])
        if il >= d["n_layer"]:
            _nextn(ix, il, n_embd, n_vocab, extras)


def _build_qwen3moe(ix: Index, hp: dict[str, Any], d: dict[str, int], n_vocab: int,
                    extras: tuple[str, ...]) -> None:
    """qwen3moe.cpp: GQA with q/k norms, every block MoE, no shared expert."""
    n_embd = d["n_embd"]
    n_ff = d["n_ff_exp"] or d["n_ff"] // max(1, d["n_used"])
    _globals(ix, n_embd, n_vocab)
    for il in range(d["n_blocks"]):
        _qk_norm_gqa(ix, il, d)
        ix.b(il, "ffn_gate_inp.weight", (n_embd, d["n_expert"]), "router")
        _experts(ix, il, n_embd, n_ff, d["n_expert"])


def _is_recurrent(hp: dict[str, Any], il: int, n_layer: int) -> bool:
    arr = hp.get("attention.recurrent_layers")
    if isinstance(arr, (list, tuple)):
        return bool(arr[il]) if il < len(arr) else False
    interval = _i(hp, "full_attention_interval", 4) or 4
    return il < n_layer and (il + 1) % interval != 0


def _build_qwen_hybrid(ix: Index, hp: dict[str, Any], d: dict[str, int], n_vocab: int,
                       extras: tuple[str, ...], split_ba: bool) -> None:
    """qwen3next.cpp (split_ba False: one ssm_ba) and qwen35moe.cpp (ssm_beta + ssm_alpha).

    Attention blocks have a gated query (2 x n_head x d); recurrent blocks the gated delta net
    (the converter writes attn_qkv + attn_gate, never ssm_in). The MTP block is an attention
    block."""
    n_embd, d_k = d["n_embd"], d["d_k"]
    head_k, n_k_heads = _i(hp, "ssm.state_size"), _i(hp, "ssm.group_count")
    n_v_heads, d_conv = _i(hp, "ssm.time_step_rank"), _i(hp, "ssm.conv_kernel")
    key_dim, value_dim = head_k * n_k_heads, head_k * n_v_heads
    n_ff = d["n_ff_exp"] or d["n_ff"] // max(1, d["n_used"])
    n_ff_sh = _i(hp, "expert_shared_feed_forward_length") or d["n_ff"]
    _globals(ix, n_embd, n_vocab)
    for il in range(d["n_blocks"]):
        ix.b(il, "attn_norm.weight", (n_embd,), "vector")
        ix.b(il, "post_attention_norm.weight", (n_embd,), "vector")
        if not _is_recurrent(hp, il, d["n_layer"]):
            _gqa(ix, il, d, q_mult=2)
            ix.b(il, "attn_q_norm.weight", (d_k,), "vector")
            ix.b(il, "attn_k_norm.weight", (d_k,), "vector")
        else:
            ix.b(il, "attn_qkv.weight", (n_embd, key_dim * 2 + value_dim), "ssm")
            ix.b(il, "attn_gate.weight", (n_embd, value_dim), "ssm")
            ix.b(il, "ssm_conv1d.weight", (d_conv, key_dim * 2 + value_dim), "ssm_conv")
            ix.b(il, "ssm_dt.bias", (n_v_heads,), "vector")
            ix.b(il, "ssm_a", (n_v_heads,), "vector")
            if split_ba:
                ix.b(il, "ssm_beta.weight", (n_embd, n_v_heads), "ssm")
                ix.b(il, "ssm_alpha.weight", (n_embd, n_v_heads), "ssm")
            else:
                ix.b(il, "ssm_ba.weight", (n_embd, 2 * n_v_heads), "ssm")
            ix.b(il, "ssm_norm.weight", (head_k,), "vector")
            ix.b(il, "ssm_out.weight", (value_dim, n_embd), "ssm")
        ix.b(il, "ffn_gate_inp.weight", (n_embd, d["n_expert"]), "router")
        _experts(ix, il, n_embd, n_ff, d["n_expert"])
        ix.b(il, "ffn_gate_inp_shexp.weight", (n_embd,), "vector")
        _shexp(ix, il, n_embd, n_ff_sh)
        if il >= d["n_layer"]:
            _nextn(ix, il, n_embd, n_vocab, extras)


def _build_nemotron_h(ix: Index, hp: dict[str, Any], d: dict[str, int], n_vocab: int,
                      extras: tuple[str, ...]) -> None:
    """nemotron-h.cpp load_arch_tensors (nemotron_h_moe): every block has an attn_norm and one
    of a Mamba-2 mixer (n_head_kv == 0 and n_ff == 0), an attention (n_ff == 0) or a MoE FFN
    (relu^2 experts without a gate matrix, a sigmoid router with its selection bias, one
    shared expert, and with moe_latent_size the experts run in a latent width between
    ffn_latent_down / ffn_latent_up). The conv1d bias is written (use_conv_bias in the
    released configs); ssm_norm is grouped (d_inner / n_group, n_group). The MTP block folds
    an attention and a MoE sub-layer with the nextn extras and a post-attention norm."""
    n_embd, d_k = d["n_embd"], d["d_k"]
    d_conv, d_inner = _i(hp, "ssm.conv_kernel"), _i(hp, "ssm.inner_size")
    d_state, n_ssm_head, n_group = _i(hp, "ssm.state_size"), _i(hp, "ssm.time_step_rank"), _i(hp, "ssm.group_count")
    conv_dim = d_inner + 2 * n_group * d_state
    latent = _i(hp, "moe_latent_size")
    moe_embd = latent or n_embd
    n_ff_sh, n_expert = _i(hp, "expert_shared_feed_forward_length"), d["n_expert"]
    _globals(ix, n_embd, n_vocab)

    def moe(il: int) -> None:
        n_ff = int(hp_at(hp, "expert_feed_forward_length", il, 0) or 0) or \
            int(hp_at(hp, "feed_forward_length", il, 0) or 0) // max(1, d["n_used"])
        ix.b(il, "ffn_gate_inp.weight", (n_embd, n_expert), "router")
        ix.b(il, "exp_probs_b.bias", (n_expert,), "vector")
        if latent:
            ix.b(il, "ffn_latent_down.weight", (n_embd, moe_embd), "ffn")
            ix.b(il, "ffn_latent_up.weight", (moe_embd, n_embd), "ffn")
        ix.b(il, "ffn_down_exps.weight", (n_ff, moe_embd, n_expert), "experts")
        ix.b(il, "ffn_up_exps.weight", (moe_embd, n_ff, n_expert), "experts")
        ix.b(il, "ffn_down_shexp.weight", (n_ff_sh, n_embd), "shexp")
        ix.b(il, "ffn_up_shexp.weight", (n_embd, n_ff_sh), "shexp")

    def attention(il: int) -> None:
        n_head_kv = int(hp_at(hp, "attention.head_count_kv", il, 0) or 0)
        _qkv(ix, il, n_embd, d_k * d["n_head"], d_k * n_head_kv, d["d_v"] * n_head_kv)
        ix.b(il, "attn_output.weight", (d_k * d["n_head"], n_embd), "attn")

    for il in range(d["n_layer"]):
        ix.b(il, "attn_norm.weight", (n_embd,), "vector")
        n_head_kv = int(hp_at(hp, "attention.head_count_kv", il, 0) or 0)
        n_ff = int(hp_at(hp, "feed_forward_length", il, 0) or 0)
        if n_head_kv == 0 and n_ff == 0:
            ix.b(il, "ssm_in.weight", (n_embd, 2 * d_inner + 2 * n_group * d_state + n_ssm_head), "ssm")
            ix.b(il, "ssm_conv1d.weight", (d_conv, conv_dim), "ssm_conv")
            ix.b(il, "ssm_conv1d.bias", (conv_dim,), "vector")
            ix.b(il, "ssm_dt.bias", (n_ssm_head,), "vector")
            ix.b(il, "ssm_a", (1, n_ssm_head), "vector")
            ix.b(il, "ssm_d", (1, n_ssm_head), "vector")
            ix.b(il, "ssm_norm.weight", (d_inner // max(1, n_group), n_group), "vector")
            ix.b(il, "ssm_out.weight", (d_inner, n_embd), "ssm")
        elif n_ff == 0:
            attention(il)
        else:
            moe(il)
    for il in range(d["n_layer"], d["n_blocks"]):
        _nextn(ix, il, n_embd, n_vocab, extras)
        ix.b(il, "attn_norm.weight", (n_embd,), "vector")
        attention(il)
        ix.b(il, "post_attention_norm.weight", (n_embd,), "vector")
        moe(il)


def _build_kimi_k3(ix: Index, hp: dict[str, Any], d: dict[str, int], n_vocab: int,
                   extras: tuple[str, ...]) -> None:
    """kimi-k3.cpp load_arch_tensors: KDA blocks (head_count_kv 0) and MLA blocks without rope
    and with a sigmoid output gate (attn_gate); every block scores the cross-layer residual
    (attn_res_score, ffn_res_score: the converter fuses each res_norm x res_proj pair into one
    vector). The first leading_dense_block_count blocks have a dense FFN; the others route
    their experts in the latent space (expert_latent_length) between ffn_routed_down and
    ffn_routed_up, while the router and the shared experts (width n_ff_exp x
    expert_shared_count) read the full-width input. The converter writes the conv1d weights
    4-D ({d_conv, 1, d_inner, 1}) and splits MLA's kv_b into k_b / v_b."""
    n_embd, n_head = d["n_embd"], d["n_head"]
    head_dim, d_conv = _i(hp, "kda.head_dim"), _i(hp, "ssm.conv_kernel")
    d_inner = head_dim * n_head
    latent = _i(hp, "expert_latent_length") or n_embd
    n_ff_exp, n_expert = d["n_ff_exp"], d["n_expert"]
    res = _i(hp, "attn_res.block_size") > 0
    _globals(ix, n_embd, n_vocab)
    if res:
        ix.g("output_res_score.weight", (n_embd,), "vector")
    for il in range(d["n_layer"]):
        ix.b(il, "attn_norm.weight", (n_embd,), "vector")
        ix.b(il, "ffn_norm.weight", (n_embd,), "vector")
        if res:
            ix.b(il, "attn_res_score.weight", (n_embd,), "vector")
            ix.b(il, "ffn_res_score.weight", (n_embd,), "vector")
        if not int(hp_at(hp, "attention.head_count_kv", il, 0) or 0):
            for qkv in ("q", "k", "v"):
                ix.b(il, f"ssm_conv1d_{qkv}.weight", (d_conv, 1, d_inner, 1), "ssm_conv")
            _qkv(ix, il, n_embd, d_inner, d_inner, d_inner)
            ix.b(il, "ssm_f_a.weight", (n_embd, head_dim), "ssm")
            ix.b(il, "ssm_f_b.weight", (head_dim, d_inner), "ssm")
            ix.b(il, "ssm_beta.weight", (n_embd, n_head), "ssm")
            ix.b(il, "ssm_a", (n_head,), "vector")
            ix.b(il, "ssm_dt.bias", (d_inner,), "vector")
            ix.b(il, "ssm_g.weight", (n_embd, d_inner), "ssm")
            ix.b(il, "ssm_norm.weight", (head_dim,), "vector")
            ix.b(il, "attn_output.weight", (d_inner, n_embd), "attn")
        else:
            _mla_projections(ix, il, hp, d, gate=True)
        if il < _i(hp, "leading_dense_block_count"):
            _dense_ffn(ix, il, n_embd, d["n_ff"])
            continue
        ix.b(il, "ffn_gate_inp.weight", (n_embd, n_expert), "router")
        ix.b(il, "exp_probs_b.bias", (n_expert,), "vector")
        _experts(ix, il, latent, n_ff_exp, n_expert)
        if latent != n_embd:
            ix.b(il, "ffn_routed_down.weight", (n_embd, latent), "ffn")
            ix.b(il, "ffn_routed_up.weight", (latent, n_embd), "ffn")
            ix.b(il, "ffn_routed_norm.weight", (latent,), "vector")
        _shexp(ix, il, n_embd, n_ff_exp * max(1, d["n_shared"]))


def _build_gpt_oss(ix: Index, hp: dict[str, Any], d: dict[str, int], n_vocab: int,
                   extras: tuple[str, ...]) -> None:
    """openai-moe.cpp: n_rot = head_dim; biases on q/k/v/o, router and every expert matrix."""
    n_embd, n_rot, n_ff, n_expert = d["n_embd"], d["d_k"], d["n_ff_exp"], d["n_expert"]
    _globals(ix, n_embd, n_vocab)
    for il in range(d["n_blocks"]):
        ix.b(il, "attn_norm.weight", (n_embd,), "vector")
        ix.b(il, "post_attention_norm.weight", (n_embd,), "vector")
        _qkv(ix, il, n_embd, d["n_head"] * n_rot, d["n_head_kv"] * n_rot, d["n_head_kv"] * n_rot, bias=True)
        ix.b(il, "attn_output.weight", (d["n_head"] * n_rot, n_embd), "attn")
        ix.b(il, "attn_sinks.weight", (d["n_head"],), "vector")
        ix.b(il, "ffn_gate_inp.weight", (n_embd, n_expert), "router")
        _experts(ix, il, n_embd, n_ff, n_expert)
        ix.b(il, "attn_output.bias", (n_embd,), "vector")
        ix.b(il, "ffn_gate_inp.bias", (n_expert,), "vector")
        ix.b(il, "ffn_gate_exps.bias", (n_ff, n_expert), "expert_bias")
        ix.b(il, "ffn_down_exps.bias", (n_embd, n_expert), "expert_bias")
        ix.b(il, "ffn_up_exps.bias", (n_ff, n_expert), "expert_bias")


def _build_llama4(ix: Index, hp: dict[str, Any], d: dict[str, int], n_vocab: int,
                  extras: tuple[str, ...]) -> None:
    """llama4.cpp: MoE every `interleave_moe_layer_step`-th block, a shared expert as wide as
    a routed one; rope_freqs (llama3 rope scaling) is one global tensor of n_rot/2 floats."""
    n_embd, d_k = d["n_embd"], d["d_k"]
    step = _i(hp, "interleave_moe_layer_step")
    _globals(ix, n_embd, n_vocab)
    if hp.get("__rope_freqs"):
        ix.g("rope_freqs.weight", (d_k // 2,), "vector")
    for il in range(d["n_blocks"]):
        ix.b(il, "attn_norm.weight", (n_embd,), "vector")
        _gqa(ix, il, d)
        ix.b(il, "ffn_norm.weight", (n_embd,), "vector")
        if step > 0 and (il + 1) % step == 0:
            ix.b(il, "ffn_gate_inp.weight", (n_embd, d["n_expert"]), "router")
            _experts(ix, il, n_embd, d["n_ff_exp"], d["n_expert"])
            _shexp(ix, il, n_embd, d["n_ff_exp"])
        else:
            _dense_ffn(ix, il, n_embd, d["n_ff"])


def _build_llama(ix: Index, hp: dict[str, Any], d: dict[str, int], n_vocab: int,
                 extras: tuple[str, ...]) -> None:
    """llama.cpp with experts (Mixtral): the experts are n_ff wide."""
    n_embd = d["n_embd"]
    _globals(ix, n_embd, n_vocab)
    for il in range(d["n_blocks"]):
        ix.b(il, "attn_norm.weight", (n_embd,), "vector")
        _gqa(ix, il, d)
        ix.b(il, "ffn_norm.weight", (n_embd,), "vector")
        ix.b(il, "ffn_gate_inp.weight", (n_embd, d["n_expert"]), "router")
        _experts(ix, il, n_embd, d["n_ff"], d["n_expert"])


def _build_minimax_m2(ix: Index, hp: dict[str, Any], d: dict[str, int], n_vocab: int,
                      extras: tuple[str, ...]) -> None:
    """minimax-m2.cpp: q/k norms over all heads, sigmoid router with a bias, no shared expert."""
    n_embd, d_k = d["n_embd"], d["d_k"]
    n_ff = d["n_ff"]
    _globals(ix, n_embd, n_vocab)
    for il in range(d["n_blocks"]):
        _gqa(ix, il, d)
        ix.b(il, "attn_norm.weight", (n_embd,), "vector")
        ix.b(il, "attn_q_norm.weight", (d_k * d["n_head"],), "vector")
        ix.b(il, "attn_k_norm.weight", (d_k * d["n_head_kv"],), "vector")
        ix.b(il, "ffn_norm.weight", (n_embd,), "vector")
        ix.b(il, "ffn_gate_inp.weight", (n_embd, d["n_expert"]), "router")
        _experts(ix, il, n_embd, n_ff, d["n_expert"])
        ix.b(il, "exp_probs_b.bias", (d["n_expert"],), "vector")


def _build_gemma4(ix: Index, hp: dict[str, Any], d: dict[str, int], n_vocab: int,
                  extras: tuple[str, ...], tied: bool = True, k_eq_v: bool = False) -> None:
    """gemma4.cpp load_arch_tensors with the converter's layout (conversion/gemma.py): per-layer
    head size and KV heads (sliding layers key_length_swa, global layers key_length); q/k
    norms, post-attention and post-FFN norms, the layer output scale; a dense GELU MLP in
    every block (feed_forward_length) and, in MoE blocks, the router with its input scale, the
    experts' pre/post norms, fused gate+up experts (the checkpoint's experts.gate_up_proj maps
    to ffn_gate_up_exps) and a per-expert down scale (router.per_expert_scale); rope_freqs (the
    global layers' proportional rope, head/2 factors) once; tied embeddings write no
    output.weight; k_eq_v: global layers have no attn_v; per-layer embeddings when
    embedding_length_per_layer_input > 0."""
    n_embd, n_head, n_expert, n_ff_exp = d["n_embd"], d["n_head"], d["n_expert"], d["n_ff_exp"]
    n_layer = d["n_layer"]
    d_full = _i(hp, "attention.key_length")
    d_swa = _i(hp, "attention.key_length_swa", d_full)
    n_pl = _i(hp, "embedding_length_per_layer_input")
    _globals(ix, n_embd, n_vocab, output=not tied)
    ix.g("rope_freqs.weight", (d_full // 2,), "vector")
    if n_pl:
        ix.g("per_layer_token_embd.weight", (n_pl * n_layer, n_vocab), "embed")
        ix.g("per_layer_model_proj.weight", (n_embd, n_pl * n_layer), "attn")
        ix.g("per_layer_proj_norm.weight", (n_pl,), "vector")
    for il in range(d["n_blocks"]):
        is_swa = bool(hp_at(hp, "attention.sliding_window_pattern", il, False))
        hd = d_swa if is_swa else d_full
        n_kv = int(hp_at(hp, "attention.head_count_kv", il, n_head))
        ff = int(hp_at(hp, "feed_forward_length", il, 0) or 0)
        ix.b(il, "attn_norm.weight", (n_embd,), "vector")
        ix.b(il, "attn_q.weight", (n_embd, hd * n_head), "attn")
        ix.b(il, "attn_k.weight", (n_embd, hd * n_kv), "attn")
        if is_swa or not k_eq_v:
            ix.b(il, "attn_v.weight", (n_embd, hd * n_kv), "attn")
        ix.b(il, "attn_output.weight", (hd * n_head, n_embd), "attn")
        ix.b(il, "attn_q_norm.weight", (hd,), "vector")
        ix.b(il, "attn_k_norm.weight", (hd,), "vector")
        ix.b(il, "post_attention_norm.weight", (n_embd,), "vector")
        ix.b(il, "layer_output_scale.weight", (1,), "vector")
        ix.b(il, "ffn_norm.weight", (n_embd,), "vector")
        _dense_ffn(ix, il, n_embd, ff)
        ix.b(il, "post_ffw_norm.weight", (n_embd,), "vector")
        if n_expert:
            ix.b(il, "ffn_gate_inp.weight", (n_embd, n_expert), "router")
            ix.b(il, "ffn_gate_inp.scale", (n_embd,), "vector")
            ix.b(il, "pre_ffw_norm_2.weight", (n_embd,), "vector")
            ix.b(il, "post_ffw_norm_1.weight", (n_embd,), "vector")
            ix.b(il, "post_ffw_norm_2.weight", (n_embd,), "vector")
            ix.b(il, "ffn_gate_up_exps.weight", (n_embd, 2 * n_ff_exp, n_expert), "experts")
            ix.b(il, "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), "experts")
            ix.b(il, "ffn_down_exps.scale", (n_expert,), "vector")
        if n_pl:
            ix.b(il, "per_layer_inp_gate.weight", (n_embd, n_pl), "attn")
            ix.b(il, "per_layer_proj.weight", (n_pl, n_embd), "attn")
            ix.b(il, "per_layer_post_norm.weight", (n_embd,), "vector")


def _build_step35(ix: Index, hp: dict[str, Any], d: dict[str, int], n_vocab: int,
                  extras: tuple[str, ...], rope_freqs: bool = False) -> None:
    """step35.cpp load_arch_tensors with the converter's layout (conversion/step3.py): per-block
    head count and KV heads (sliding blocks 96 query heads in Step-3.5-Flash, full blocks 64),
    q/k norms of one head, separate q/k/v, a head-wise attention gate (self_attn.g_proj ->
    attn_gate, n_embd x n_head of the block); a dense SwiGLU MLP (feed_forward_length) on the
    leading_dense_block_count first blocks, then the router with its selection bias
    (moe.router_bias -> exp_probs_b), the routed experts and one shared expert
    (expert_shared_feed_forward_length) on every other trunk block; rope_freqs once (the
    converter writes it for llama3-type rope scaling, head_dim/2 factors). The MTP blocks past
    n_layer are dense (the checkpoint's moe_layers_enum stops at the last trunk block; the
    model card: 'a sliding-window attention mechanism and a dense FFN') with the nextn
    extras the checkpoint carries."""
    n_embd, n_expert, n_ff_exp = d["n_embd"], d["n_expert"], d["n_ff_exp"]
    d_k, d_v = d["d_k"], d["d_v"]
    n_ff = d["n_ff"]
    n_shexp = _i(hp, "expert_shared_feed_forward_length")
    leading = _i(hp, "leading_dense_block_count")
    _globals(ix, n_embd, n_vocab)
    if rope_freqs:
        ix.g("rope_freqs.weight", (d_k // 2,), "vector")
    for il in range(d["n_blocks"]):
        n_head = int(hp_at(hp, "attention.head_count", il))
        n_kv = int(hp_at(hp, "attention.head_count_kv", il, n_head))
        ix.b(il, "attn_norm.weight", (n_embd,), "vector")
        ix.b(il, "attn_q_norm.weight", (d_k,), "vector")
        ix.b(il, "attn_k_norm.weight", (d_k,), "vector")
        _qkv(ix, il, n_embd, d_k * n_head, d_k * n_kv, d_v * n_kv)
        ix.b(il, "attn_output.weight", (d_v * n_head, n_embd), "attn")
        ix.b(il, "attn_gate.weight", (n_embd, n_head), "attn")
        ix.b(il, "ffn_norm.weight", (n_embd,), "vector")
        if leading <= il < d["n_layer"]:
            ix.b(il, "ffn_gate_inp.weight", (n_embd, n_expert), "router")
            _experts(ix, il, n_embd, n_ff_exp, n_expert)
            ix.b(il, "exp_probs_b.bias", (n_expert,), "vector")
            _shexp(ix, il, n_embd, n_shexp)
        else:
            _dense_ffn(ix, il, n_embd, n_ff)
        if il >= d["n_layer"]:
            _nextn(ix, il, n_embd, n_vocab, extras)


def _build_hunyuan_moe(ix: Index, hp: dict[str, Any], d: dict[str, int], n_vocab: int,
                       extras: tuple[str, ...], tied: bool = False) -> None:
    """hunyuan-moe.cpp load_arch_tensors: GQA with q/k norms of one head; every block MoE (the
    routed experts are created n_ff = feed_forward_length wide) beside one shared expert of
    expert_shared_feed_forward_length (n_ff where that key is 0); tied embeddings
    (tie_word_embeddings, Hunyuan-A13B's) write no output.weight (llama.cpp duplicates
    token_embd)."""
    n_embd, n_expert = d["n_embd"], d["n_expert"]
    n_ff = d["n_ff"] or d["n_ff_exp"]
    n_shexp = _i(hp, "expert_shared_feed_forward_length") or n_ff
    _globals(ix, n_embd, n_vocab, output=not tied)
    for il in range(d["n_blocks"]):
        _qk_norm_gqa(ix, il, d)
        ix.b(il, "ffn_gate_inp.weight", (n_embd, n_expert), "router")
        _experts(ix, il, n_embd, n_ff, n_expert)
        ix.b(il, "ffn_gate_shexp.weight", (n_embd, n_shexp), "shexp")
        ix.b(il, "ffn_up_shexp.weight", (n_embd, n_shexp), "shexp")
        ix.b(il, "ffn_down_shexp.weight", (n_shexp, n_embd), "shexp")


def _build_dots1(ix: Index, hp: dict[str, Any], d: dict[str, int], n_vocab: int,
                 extras: tuple[str, ...]) -> None:
    """dots1.cpp load_arch_tensors: q, k and v each n_embd_head_k x n_head wide (the loader
    sizes k and v by n_head, dots.llm1 being MHA), the output projection, k/q norms of one
    head; a dense SwiGLU MLP (feed_forward_length) on the leading_dense_block_count first
    blocks, then the router, its selection bias (exp_probs_b, TENSOR_NOT_REQUIRED: the
    converter writes e_score_correction_bias), the routed experts and the shared experts fused
    into one FFN of n_ff_exp x expert_shared_count."""
    n_embd, d_k = d["n_embd"], d["d_k"]
    n_q = d_k * d["n_head"]
    n_shexp = d["n_ff_exp"] * d["n_shared"]
    leading = _i(hp, "leading_dense_block_count")
    _globals(ix, n_embd, n_vocab)
    for il in range(d["n_blocks"]):
        ix.b(il, "attn_norm.weight", (n_embd,), "vector")
        _qkv(ix, il, n_embd, n_q, n_q, n_q)
        ix.b(il, "attn_output.weight", (n_q, n_embd), "attn")
        ix.b(il, "attn_k_norm.weight", (d_k,), "vector")
        ix.b(il, "attn_q_norm.weight", (d_k,), "vector")
        ix.b(il, "ffn_norm.weight", (n_embd,), "vector")
        if il < leading:
            _dense_ffn(ix, il, n_embd, d["n_ff"])
        else:
            ix.b(il, "ffn_gate_inp.weight", (n_embd, d["n_expert"]), "router")
            ix.b(il, "exp_probs_b.bias", (d["n_expert"],), "vector")
            _experts(ix, il, n_embd, d["n_ff_exp"], d["n_expert"])
            _shexp(ix, il, n_embd, n_shexp)


def _build_ernie4_5_moe(ix: Index, hp: dict[str, Any], d: dict[str, int], n_vocab: int,
                        extras: tuple[str, ...], tied: bool = False, probs_bias: bool = True) -> None:
    """ernie4-5.cpp load_arch_tensors (ernie4_5-moe reuses it): GQA with separate q/k/v (the
    converter splits qkv_proj) and no q/k norms; a dense SwiGLU MLP (feed_forward_length) on
    the leading_dense_block_count first blocks, then on every other block the router, the
    selection bias (mlp.moe_statics.e_score_correction -> exp_probs_b, TENSOR_NOT_REQUIRED:
    written where the checkpoint has it, moe_use_aux_free), the routed experts and, where
    expert_shared_feed_forward_length > 0, one shared FFN of that width. No output.weight when
    the embeddings are tied (the loader duplicates token_embd)."""
    n_embd, n_expert, n_ff_exp = d["n_embd"], d["n_expert"], d["n_ff_exp"]
    n_shexp = _i(hp, "expert_shared_feed_forward_length")
    leading = _i(hp, "leading_dense_block_count")
    _globals(ix, n_embd, n_vocab, output=not tied)
    for il in range(d["n_layer"]):
        ix.b(il, "attn_norm.weight", (n_embd,), "vector")
        _gqa(ix, il, d)
        ix.b(il, "ffn_norm.weight", (n_embd,), "vector")
        if il >= leading:
            ix.b(il, "ffn_gate_inp.weight", (n_embd, n_expert), "router")
            if probs_bias:
                ix.b(il, "exp_probs_b.bias", (n_expert,), "vector")
            _experts(ix, il, n_embd, n_ff_exp, n_expert)
            if n_shexp > 0:
                _shexp(ix, il, n_embd, n_shexp)
        else:
            _dense_ffn(ix, il, n_embd, d["n_ff"])

