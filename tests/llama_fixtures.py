"""Small but real MoE GGUFs that llama.cpp loads and runs (gguf.GGUFWriter, zero weights).

Unlike gguf_fixtures.py (header-only shapes for reader tests), these files carry a working
SentencePiece ('llama') vocabulary - control tokens, the 256 byte-fallback pieces and word
pieces with scores - and every tensor and hyper-parameter the llama.cpp architecture asks
for, so `llama-completion` and `llama-bench` load them and run a decode. Weights are zero:
memory does not depend on values, and zeros write fast.

Shapes keep the ratios of the real models named in each writer (head_dim, GQA groups, expert
FFN width to n_embd, k of n experts, dense lead blocks), scaled down so each file is 100-250 MiB
and every buffer llama.cpp reserves is large enough to measure (the launch and tuner helpers
can reuse them). `LLAMA_FIXTURES` maps a fixture name to its writer; `write_fixture` writes one.
Each writer returns the path and the list of (name, ggml shape, type) it wrote.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES, ExpertGatingFuncType, GGMLQuantizationType

from gguf_fixtures import _add as _add_any

Q = GGMLQuantizationType


def _add(w: GGUFWriter, written: list, name: str, shape: tuple[int, ...], qtype=Q.F32) -> None:
    """gguf_fixtures._add, refusing rows that are not whole blocks of `qtype` (llama.cpp would
    reject the file: a Q4_K row must be a multiple of 256 elements)."""
    block = GGML_QUANT_SIZES[qtype][0]
    if shape[0] % block:
        raise ValueError(f"{name}: row of {shape[0]} is not a multiple of the {qtype.name} block {block}")
    _add_any(w, written, name, shape, qtype)

# SentencePiece token types (gguf-py constants.TokenType)
_NORMAL, _UNKNOWN, _CONTROL, _BYTE = 1, 2, 3, 6


def spm_vocab(w: GGUFWriter, n_vocab: int) -> None:
    """A loadable SentencePiece vocabulary of exactly n_vocab pieces.

    <unk>, <s>, </s>, then the 256 byte-fallback pieces `<0x00>`..`<0xFF>` (llama.cpp's SPM
    tokenizer falls back to them for any character it has no piece for, and looks up <0x0A>
    as the newline token), then '▁' and word pieces with decreasing scores.
    """
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [_UNKNOWN, _CONTROL, _CONTROL] + [_BYTE] * 256
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["\u2581"] + [f"\u2581{c}" for c in letters] + list(letters)
    i = 0
    while len(tokens) + len(words) < n_vocab:
        words.append(f"\u2581w{i}")
        i += 1
    tokens += words[: n_vocab - len(tokens)]
    types += [_NORMAL] * (n_vocab - len(types))
    scores = [0.0] * 259 + [-float(j) for j in range(n_vocab - 259)]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


def _finish(w: GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _common(w: GGUFWriter, name: str, n_layer: int, n_embd: int, n_head: int, n_head_kv: int,
            ctx: int, file_type: int) -> None:
    w.add_name(name)
    w.add_block_count(n_layer)
    w.add_context_length(ctx)
    w.add_embedding_length(n_embd)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_file_type(file_type)


def _experts_vocab_globals(w: GGUFWriter, written: list, *, n_embd: int, n_vocab: int, n_expert: int,
                           n_used: int, n_ff_exp: int, output_type=Q.Q6_K) -> None:
    """The routed-expert keys, the vocabulary, and token_embd / output_norm / output."""
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_used)
    w.add_expert_feed_forward_length(n_ff_exp)
    spm_vocab(w, n_vocab)
    _add(w, written, "token_embd.weight", (n_embd, n_vocab), Q.Q8_0)
    _add(w, written, "output_norm.weight", (n_embd,))
    _add(w, written, "output.weight", (n_embd, n_vocab), output_type)


def write_qwen3moe_llama(path: Path, *, n_layer=6, n_embd=1024, n_head=16, n_head_kv=2, head_dim=128,
                         n_expert=32, n_used=4, n_ff_exp=512, n_vocab=32000, ctx=32768,
                         expert_type=Q.Q4_K, dense_type=Q.Q8_0):
    """Qwen3-30B-A3B in ratio: GQA 8:1 with head_dim 128 and q width 2 x n_embd, q/k norms,
    every block MoE with n_ff_exp = n_embd / 2 and no shared expert. Q4_K experts (what a
    Q4_K_M file carries), Q8_0 attention, Q6_K output."""
    w = GGUFWriter(str(path), "qwen3moe")
    written: list = []
    _common(w, "moeplan-qwen3moe", n_layer, n_embd, n_head, n_head_kv, ctx, 15)
    w.add_feed_forward_length(n_ff_exp * 8)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    _experts_vocab_globals(w, written, n_embd=n_embd, n_vocab=n_vocab, n_expert=n_expert, n_used=n_used,
                           n_ff_exp=n_ff_exp)
    for i in range(n_layer):
        b = f"blk.{i}."
        _add(w, written, b + "attn_norm.weight", (n_embd,))
        _add(w, written, b + "attn_q.weight", (n_embd, n_head * head_dim), dense_type)
        _add(w, written, b + "attn_k.weight", (n_embd, n_head_kv * head_dim), dense_type)
        _add(w, written, b + "attn_v.weight", (n_embd, n_head_kv * head_dim), dense_type)
        _add(w, written, b + "attn_output.weight", (n_head * head_dim, n_embd), dense_type)
        _add(w, written, b + "attn_q_norm.weight", (head_dim,))
        _add(w, written, b + "attn_k_norm.weight", (head_dim,))
        _add(w, written, b + "ffn_norm.weight", (n_embd,))
        _add(w, written, b + "ffn_gate_inp.weight", (n_embd, n_expert))
        _add(w, written, b + "ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), expert_type)
        _add(w, written, b + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), expert_type)
        _add(w, written, b + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), expert_type)
    _finish(w)
    return path, written


def write_deepseek2_llama(path: Path, *, n_layer=6, n_dense=1, n_embd=1024, n_head=16, q_lora=384,
                          kv_lora=256, rope=32, nope=64, v_dim=64, n_expert=32, n_used=4, n_shared=1,
                          n_ff=2816, n_ff_exp=352, n_vocab=32000, ctx=32768, expert_type=Q.Q8_0,
                          dense_type=Q.Q8_0):
    """DeepSeek-V2-Lite / V3 in ratio: MLA with q_lora, a latent of kv_lora + rope cached as
    K only (key_length_mla / value_length_mla set, attn_k_b / attn_v_b split), one leading
    dense block, a shared expert, sigmoid gating with the selection bias exp_probs_b, normalised
    and scaled expert weights. Q8_0 experts (a type the x86 CPU backend does not repack)."""
    w = GGUFWriter(str(path), "deepseek2")
    written: list = []
    _common(w, "moeplan-deepseek2", n_layer, n_embd, n_head, 1, ctx, 7)
    w.add_feed_forward_length(n_ff)
    w.add_key_length(kv_lora + rope)
    w.add_value_length(kv_lora)
    w.add_key_length_mla(nope + rope)
    w.add_value_length_mla(v_dim)
    w.add_q_lora_rank(q_lora)
    w.add_kv_lora_rank(kv_lora)
    w.add_rope_dimension_count(rope)
    w.add_leading_dense_block_count(n_dense)
    w.add_expert_shared_count(n_shared)
    w.add_expert_weights_scale(2.5)
    w.add_expert_weights_norm(True)
    w.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)  # DeepSeek V3
    _experts_vocab_globals(w, written, n_embd=n_embd, n_vocab=n_vocab, n_expert=n_expert, n_used=n_used,
                           n_ff_exp=n_ff_exp)
    for i in range(n_layer):
        b = f"blk.{i}."
        _add(w, written, b + "attn_norm.weight", (n_embd,))
        _add(w, written, b + "attn_q_a_norm.weight", (q_lora,))
        _add(w, written, b + "attn_kv_a_norm.weight", (kv_lora,))
        _add(w, written, b + "attn_q_a.weight", (n_embd, q_lora), dense_type)
        _add(w, written, b + "attn_q_b.weight", (q_lora, n_head * (nope + rope)), dense_type)
        _add(w, written, b + "attn_kv_a_mqa.weight", (n_embd, kv_lora + rope), dense_type)
        _add(w, written, b + "attn_k_b.weight", (nope, kv_lora, n_head), dense_type)
        _add(w, written, b + "attn_v_b.weight", (kv_lora, v_dim, n_head), dense_type)
        _add(w, written, b + "attn_output.weight", (n_head * v_dim, n_embd), dense_type)
        _add(w, written, b + "ffn_norm.weight", (n_embd,))
        if i < n_dense:
            _add(w, written, b + "ffn_gate.weight", (n_embd, n_ff), dense_type)
            _add(w, written, b + "ffn_up.weight", (n_embd, n_ff), dense_type)
            _add(w, written, b + "ffn_down.weight", (n_ff, n_embd), dense_type)
            continue
        _add(w, written, b + "ffn_gate_inp.weight", (n_embd, n_expert))
        _add(w, written, b + "exp_probs_b.bias", (n_expert,))
        _add(w, written, b + "ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), expert_type)
        _add(w, written, b + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), expert_type)
        _add(w, written, b + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), expert_type)
        sh = n_ff_exp * n_shared
        _add(w, written, b + "ffn_gate_shexp.weight", (n_embd, sh), dense_type)
        _add(w, written, b + "ffn_up_shexp.weight", (n_embd, sh), dense_type)
        _add(w, written, b + "ffn_down_shexp.weight", (sh, n_embd), dense_type)
    _finish(w)
    return path, written


def write_gptoss_llama(path: Path, *, n_layer=6, n_embd=1024, n_head=16, n_head_kv=2, head_dim=64,
                       n_expert=32, n_used=4, n_ff_exp=512, n_vocab=32000, ctx=32768, window=128):
    """gpt-oss-20b in ratio: 64-dim heads, GQA 8:1, sliding window 128 on every other block
    (even blocks), attention sinks, q/k/v/o biases, router bias, per-expert gate/up/down
    biases, MXFP4 experts, BF16-like F16 attention."""
    w = GGUFWriter(str(path), "gpt-oss")
    written: list = []
    _common(w, "moeplan-gpt-oss", n_layer, n_embd, n_head, n_head_kv, ctx, 38)
    w.add_feed_forward_length(n_ff_exp)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_sliding_window(window)
    _experts_vocab_globals(w, written, n_embd=n_embd, n_vocab=n_vocab, n_expert=n_expert, n_used=n_used,
                           n_ff_exp=n_ff_exp, output_type=Q.Q8_0)
    qd, kd = n_head * head_dim, n_head_kv * head_dim
    for i in range(n_layer):
        b = f"blk.{i}."
        _add(w, written, b + "attn_norm.weight", (n_embd,))
        _add(w, written, b + "post_attention_norm.weight", (n_embd,))
        _add(w, written, b + "attn_q.weight", (n_embd, qd), Q.F16)
        _add(w, written, b + "attn_q.bias", (qd,))
        _add(w, written, b + "attn_k.weight", (n_embd, kd), Q.F16)
        _add(w, written, b + "attn_k.bias", (kd,))
        _add(w, written, b + "attn_v.weight", (n_embd, kd), Q.F16)
        _add(w, written, b + "attn_v.bias", (kd,))
        _add(w, written, b + "attn_output.weight", (qd, n_embd), Q.F16)
        _add(w, written, b + "attn_output.bias", (n_embd,))
        _add(w, written, b + "attn_sinks.weight", (n_head,))
        _add(w, written, b + "ffn_gate_inp.weight", (n_embd, n_expert))
        _add(w, written, b + "ffn_gate_inp.bias", (n_expert,))
        _add(w, written, b + "ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), Q.MXFP4)
        _add(w, written, b + "ffn_gate_exps.bias", (n_ff_exp, n_expert))
        _add(w, written, b + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), Q.MXFP4)
        _add(w, written, b + "ffn_up_exps.bias", (n_ff_exp, n_expert))
        _add(w, written, b + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), Q.MXFP4)
        _add(w, written, b + "ffn_down_exps.bias", (n_embd, n_expert))
    _finish(w)
    return path, written


def write_qwen3next_llama(path: Path, *, n_layer=8, n_embd=1024, n_head=8, n_head_kv=1, head_dim=128,
                          n_expert=32, n_used=4, n_ff_exp=256, n_ff_shexp=256, n_vocab=32000,
                          ctx=32768, d_state=64, n_k_heads=4, n_v_heads=8, d_conv=4, interval=4,
                          expert_type=Q.Q4_K, dense_type=Q.Q8_0):
    """Qwen3-Next-80B-A3B in ratio: 3 gated-delta-net (linear attention) blocks per full
    attention block, a gated full attention (q carries its gate: 2 x n_head x head_dim) with
    GQA and q/k norms, 16 v-heads over 8 k-heads of 128 dims scaled to 8 over 4 of 64,
    routed experts plus a gated shared expert in every block."""
    w = GGUFWriter(str(path), "qwen3next")
    written: list = []
    _common(w, "moeplan-qwen3next", n_layer, n_embd, n_head, n_head_kv, ctx, 15)
    w.add_feed_forward_length(n_ff_exp * 8)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim // 4)
    w.add_expert_shared_feed_forward_length(n_ff_shexp)
    key_dim, value_dim = d_state * n_k_heads, d_state * n_v_heads
    w.add_ssm_conv_kernel(d_conv)
    w.add_ssm_inner_size(value_dim)
    w.add_ssm_state_size(d_state)
    w.add_ssm_time_step_rank(n_v_heads)
    w.add_ssm_group_count(n_k_heads)
    w.add_full_attention_interval(interval)
    _experts_vocab_globals(w, written, n_embd=n_embd, n_vocab=n_vocab, n_expert=n_expert, n_used=n_used,
                           n_ff_exp=n_ff_exp)
    conv_dim = key_dim * 2 + value_dim
    for i in range(n_layer):
        b = f"blk.{i}."
        _add(w, written, b + "attn_norm.weight", (n_embd,))
        _add(w, written, b + "post_attention_norm.weight", (n_embd,))
        if (i + 1) % interval == 0:  # full attention block
            _add(w, written, b + "attn_q.weight", (n_embd, n_head * head_dim * 2), dense_type)
            _add(w, written, b + "attn_k.weight", (n_embd, n_head_kv * head_dim), dense_type)
            _add(w, written, b + "attn_v.weight", (n_embd, n_head_kv * head_dim), dense_type)
            _add(w, written, b + "attn_output.weight", (n_head * head_dim, n_embd), dense_type)
            _add(w, written, b + "attn_q_norm.weight", (head_dim,))
            _add(w, written, b + "attn_k_norm.weight", (head_dim,))
        else:  # gated delta net block
            _add(w, written, b + "attn_qkv.weight", (n_embd, conv_dim), dense_type)
            _add(w, written, b + "attn_gate.weight", (n_embd, value_dim), dense_type)
            _add(w, written, b + "ssm_conv1d.weight", (d_conv, conv_dim))
            _add(w, written, b + "ssm_dt.bias", (n_v_heads,))
            _add(w, written, b + "ssm_a", (n_v_heads,))
            _add(w, written, b + "ssm_ba.weight", (n_embd, n_v_heads * 2), dense_type)
            _add(w, written, b + "ssm_norm.weight", (d_state,))
            _add(w, written, b + "ssm_out.weight", (value_dim, n_embd), dense_type)
        _add(w, written, b + "ffn_gate_inp.weight", (n_embd, n_expert))
        _add(w, written, b + "ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), expert_type)
        _add(w, written, b + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), expert_type)
        _add(w, written, b + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), expert_type)
        _add(w, written, b + "ffn_gate_inp_shexp.weight", (n_embd,))
        _add(w, written, b + "ffn_gate_shexp.weight", (n_embd, n_ff_shexp), dense_type)
        _add(w, written, b + "ffn_up_shexp.weight", (n_embd, n_ff_shexp), dense_type)
        _add(w, written, b + "ffn_down_shexp.weight", (n_ff_shexp, n_embd), dense_type)
    _finish(w)
    return path, written


LLAMA_FIXTURES: dict[str, Callable] = {
    "qwen3moe": write_qwen3moe_llama,
    "deepseek2": write_deepseek2_llama,
    "gpt-oss": write_gptoss_llama,
    "qwen3next": write_qwen3next_llama,
}


def write_fixture(name: str, folder: Path) -> Path:
    """Write fixture `name` (a key of LLAMA_FIXTURES) as folder/<name>.gguf with its defaults."""
    path, _ = LLAMA_FIXTURES[name](Path(folder) / f"{name}.gguf")
    return path
