"""Helpers for the executor tests (no tests here): tiny GGUFs with random values, and running
the executor and its dense reference on the same tokens."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from gguf import GGUFWriter
from gguf.constants import GGMLQuantizationType
from gguf.quants import quantize

from moeplan.executor.attention import CacheGeometry
from moeplan.executor.build import ExecOptions
from moeplan.executor.reference import DenseReference
from moeplan.executor.routing import parse_routing
from moeplan.executor.run import build_executor
from moeplan.executor.weights import DTYPES, SyntheticWeights

Q = GGMLQuantizationType
FREE = (8 << 30, 8 << 30)  # (host, device) free bytes the tests pretend to have


def _rand(w: GGUFWriter, rng: np.random.Generator, name: str, shape: tuple[int, ...], qtype=Q.F32, scale=None) -> None:
    """A tensor of ggml shape `shape` with random values (norm weights near 1)."""
    arr_shape = tuple(reversed(shape))
    if name.endswith("norm.weight"):
        arr = rng.uniform(0.9, 1.1, arr_shape).astype(np.float32)
    else:
        a = scale if scale is not None else np.sqrt(3.0 / shape[0])
        arr = rng.uniform(-a, a, arr_shape).astype(np.float32)
    if qtype == Q.F32:
        w.add_tensor(name, arr)
    elif qtype == Q.F16:
        w.add_tensor(name, arr.astype(np.float16))
    else:
        w.add_tensor(name, quantize(arr, qtype), raw_dtype=qtype)


def _header(path: Path, arch: str, name: str, *, n_layer, n_embd, n_head, n_head_kv, head_dim, n_expert, n_used,
            n_ff_exp, n_ff, n_vocab) -> GGUFWriter:
    """A writer with the keys every fixture here shares (F32 file, a llama tokenizer)."""
    w = GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_block_count(n_layer)
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_used)
    w.add_expert_feed_forward_length(n_ff_exp)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(0)
    w.add_tokenizer_model("llama")
    w.add_token_list([f"t{i}" for i in range(n_vocab)])
    return w


def write_random_qwen3moe(path: Path, *, n_layer=3, n_embd=64, n_head=4, n_head_kv=2, head_dim=16, n_expert=8,
                          n_used=2, n_ff_exp=32, n_vocab=64, expert_type=Q.F32, seed=0) -> Path:
    """qwen3moe with random values in every tensor (experts in `expert_type`)."""
    rng = np.random.default_rng(seed)
    w = _header(path, "qwen3moe", "rand-qwen3moe", n_layer=n_layer, n_embd=n_embd, n_head=n_head,
                n_head_kv=n_head_kv, head_dim=head_dim, n_expert=n_expert, n_used=n_used, n_ff_exp=n_ff_exp,
                n_ff=n_ff_exp * 4, n_vocab=n_vocab)
    _rand(w, rng, "token_embd.weight", (n_embd, n_vocab), scale=1.0)
    _rand(w, rng, "output_norm.weight", (n_embd,))
    _rand(w, rng, "output.weight", (n_embd, n_vocab))
    for i in range(n_layer):
        b = f"blk.{i}."
        _rand(w, rng, b + "attn_norm.weight", (n_embd,))
        _rand(w, rng, b + "attn_q.weight", (n_embd, n_head * head_dim))
        _rand(w, rng, b + "attn_k.weight", (n_embd, n_head_kv * head_dim))
        _rand(w, rng, b + "attn_v.weight", (n_embd, n_head_kv * head_dim))
        _rand(w, rng, b + "attn_output.weight", (n_head * head_dim, n_embd))
        _rand(w, rng, b + "attn_q_norm.weight", (head_dim,))
        _rand(w, rng, b + "attn_k_norm.weight", (head_dim,))
        _rand(w, rng, b + "ffn_norm.weight", (n_embd,))
        _rand(w, rng, b + "ffn_gate_inp.weight", (n_embd, n_expert))
        _rand(w, rng, b + "ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), expert_type)
        _rand(w, rng, b + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), expert_type)
        _rand(w, rng, b + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), expert_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_qwen3next(path: Path, *, n_layer=4, n_embd=64, n_head=4, n_head_kv=2, head_dim=16, n_expert=8, n_used=2,
                    n_ff_exp=32, n_vocab=64, d_inner=64, d_state=16, n_group=2, d_conv=4) -> Path:
    """A Qwen3-Next-like hybrid: 3 linear-attention (recurrent) blocks then 1 gated full-attention
    block, fused gate_up experts, a sigmoid-gated shared expert. Values are zeros (synthetic
    weights are used)."""
    arch = "qwen3next"
    w = _header(path, arch, "tiny-qwen3next", n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv,
                head_dim=head_dim, n_expert=n_expert, n_used=n_used, n_ff_exp=n_ff_exp, n_ff=n_ff_exp,
                n_vocab=n_vocab)
    w.add_uint32(f"{arch}.expert_shared_feed_forward_length", n_ff_exp)
    w.add_uint32(f"{arch}.full_attention_interval", 4)
    w.add_uint32(f"{arch}.ssm.conv_kernel", d_conv)
    w.add_uint32(f"{arch}.ssm.inner_size", d_inner)
    w.add_uint32(f"{arch}.ssm.state_size", d_state)
    w.add_uint32(f"{arch}.ssm.group_count", n_group)

    def z(name, shape):
        w.add_tensor(name, np.zeros(tuple(reversed(shape)), dtype=np.float32))

    z("token_embd.weight", (n_embd, n_vocab))
    z("output_norm.weight", (n_embd,))
    z("output.weight", (n_embd, n_vocab))
    for i in range(n_layer):
        b = f"blk.{i}."
        z(b + "attn_norm.weight", (n_embd,))
        z(b + "post_attention_norm.weight", (n_embd,))
        if (i + 1) % 4:
            conv_dim = d_inner + 2 * n_group * d_state
            z(b + "attn_qkv.weight", (n_embd, conv_dim))
            z(b + "attn_gate.weight", (n_embd, d_inner))
            z(b + "ssm_conv1d.weight", (d_conv, conv_dim))
            z(b + "ssm_ba.weight", (n_embd, 2 * n_group))
            z(b + "ssm_a", (n_group,))
            z(b + "ssm_dt.bias", (n_group,))
            z(b + "ssm_norm.weight", (d_state,))
            z(b + "ssm_out.weight", (d_inner, n_embd))
        else:
            z(b + "attn_q.weight", (n_embd, 2 * n_head * head_dim))
            z(b + "attn_k.weight", (n_embd, n_head_kv * head_dim))
            z(b + "attn_v.weight", (n_embd, n_head_kv * head_dim))
            z(b + "attn_output.weight", (n_head * head_dim, n_embd))
            z(b + "attn_q_norm.weight", (head_dim,))
            z(b + "attn_k_norm.weight", (head_dim,))
        z(b + "ffn_gate_inp.weight", (n_embd, n_expert))
        z(b + "ffn_gate_up_exps.weight", (n_embd, 2 * n_ff_exp, n_expert))
        z(b + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert))
        z(b + "ffn_gate_inp_shexp.weight", (n_embd,))
        z(b + "ffn_gate_shexp.weight", (n_embd, n_ff_exp))
        z(b + "ffn_up_shexp.weight", (n_embd, n_ff_exp))
        z(b + "ffn_down_shexp.weight", (n_ff_exp, n_embd))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def exec_logits(model, placement, opt: ExecOptions, routing: str, tokens: list[int], n_prompt: int):
    """Prefill tokens[:n_prompt] in the placement's ubatches, then decode the rest one by one
    (teacher-forced); returns (built executor, logits of every position)."""
    built = build_executor(model, placement, opt, len(tokens), parse_routing(routing), free_bytes=FREE)
    built.meter.phase = "decode"
    try:
        out = []
        u = placement.n_ubatch
        for s in range(0, n_prompt, u):
            out.append(built.model.forward(tokens[s:min(s + u, n_prompt)], s, decode=False, all_logits=True))
        for p in range(n_prompt, len(tokens)):
            out.append(built.model.forward([tokens[p]], p, decode=True))
        logits = torch.cat(out)
    finally:
        built.close()
    return built, logits


def reference_logits(built, placement, opt: ExecOptions, tokens: list[int], source=None, expert_values=None):
    dtype = DTYPES[opt.dtype]
    src = source or SyntheticWeights(opt.seed, dtype)
    geo = CacheGeometry(placement.n_ctx, placement.n_ubatch)
    ref = DenseReference(built.layout, built.plan.layers, src, dtype, built.routing, built.plan.pool, geo,
                         expert_values)
    return ref.forward(tokens)


def tier_bytes(built) -> dict[str, int]:
    out: dict[str, int] = {}
    for (_, _, tier), v in built.meter.bytes_exec.items():
        out[tier] = out.get(tier, 0) + v
    return out
