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

from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

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


_SPARSE = False


@contextmanager
def sparse_files():
    """Within this block the writers leave the (all-zero) tensor data as a hole in the file
    (truncate) instead of writing it: the same bytes when read, written in milliseconds, so
    fixtures of a real model's widths (several GB) cost no time or disk."""
    global _SPARSE
    _SPARSE = True
    try:
        yield
    finally:
        _SPARSE = False


def _finish(w: GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    if not _SPARSE:
        w.write_tensors_to_file()
        w.close()
        return
    w.write_ti_data_to_file()
    assert w.fout is not None and len(w.fout) == 1
    fout = w.fout[0]
    w.write_padding(fout, fout.tell())
    # write_tensors_to_file pads every tensor, the last too, to the data alignment
    end = fout.tell() + sum(GGUFWriter.ggml_pad(ti.nbytes, w.data_alignment) for ti in w.tensors[0].values())
    fout.truncate(end)
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


def _mla_keys(w: GGUFWriter, *, q_lora: int, kv_lora: int, rope: int, nope: int, v_dim: int) -> None:
    """The MLA keys DeepseekV2Model writes: a (kv_lora + rope)-wide key, the kv_lora-wide value
    of the absorbed form, and the per-head MLA sizes."""
    w.add_key_length(kv_lora + rope)
    w.add_value_length(kv_lora)
    w.add_key_length_mla(nope + rope)
    w.add_value_length_mla(v_dim)
    w.add_q_lora_rank(q_lora)
    w.add_kv_lora_rank(kv_lora)
    w.add_rope_dimension_count(rope)


def _mla_attention(w: GGUFWriter, written: list, b: str, *, n_embd: int, n_head: int, q_lora: int, kv_lora: int,
                   rope: int, nope: int, v_dim: int, dense_type) -> None:
    """An MLA block's norms and attention (q_lora, the latent and rope key, k_b / v_b split) and
    its ffn_norm, in the converter's order."""
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


def _experts_and_shared(w: GGUFWriter, written: list, b: str, *, n_embd: int, n_ff_exp: int, n_expert: int,
                        n_ff_shexp: int, expert_type, dense_type) -> None:
    """Routed experts (gate, up, down) and one shared expert of block prefix `b`."""
    _add(w, written, b + "ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), expert_type)
    _add(w, written, b + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), expert_type)
    _add(w, written, b + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), expert_type)
    _add(w, written, b + "ffn_gate_shexp.weight", (n_embd, n_ff_shexp), dense_type)
    _add(w, written, b + "ffn_up_shexp.weight", (n_embd, n_ff_shexp), dense_type)
    _add(w, written, b + "ffn_down_shexp.weight", (n_ff_shexp, n_embd), dense_type)


def _gqa_projections(w: GGUFWriter, written: list, b: str, *, n_embd: int, n_head: int, n_head_kv: int,
                     head_dim: int, dense_type) -> None:
    """The q, k, v and output projections of a GQA block of prefix `b`."""
    _add(w, written, b + "attn_q.weight", (n_embd, n_head * head_dim), dense_type)
    _add(w, written, b + "attn_k.weight", (n_embd, n_head_kv * head_dim), dense_type)
    _add(w, written, b + "attn_v.weight", (n_embd, n_head_kv * head_dim), dense_type)
    _add(w, written, b + "attn_output.weight", (n_head * head_dim, n_embd), dense_type)


def _nextn_projections(w: GGUFWriter, written: list, b: str, n_embd: int, dense_type) -> None:
    """The NextN/MTP block's own tensors (the embedding and head are shared with the trunk)."""
    _add(w, written, b + "nextn.eh_proj.weight", (2 * n_embd, n_embd), dense_type)
    _add(w, written, b + "nextn.enorm.weight", (n_embd,))
    _add(w, written, b + "nextn.hnorm.weight", (n_embd,))
    _add(w, written, b + "nextn.shared_head_norm.weight", (n_embd,))


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
        _gqa_projections(w, written, b, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
                         dense_type=dense_type)
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
    _mla_keys(w, q_lora=q_lora, kv_lora=kv_lora, rope=rope, nope=nope, v_dim=v_dim)
    w.add_leading_dense_block_count(n_dense)
    w.add_expert_shared_count(n_shared)
    w.add_expert_weights_scale(2.5)
    w.add_expert_weights_norm(True)
    w.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)  # DeepSeek V3
    _experts_vocab_globals(w, written, n_embd=n_embd, n_vocab=n_vocab, n_expert=n_expert, n_used=n_used,
                           n_ff_exp=n_ff_exp)
    for i in range(n_layer):
        b = f"blk.{i}."
        _mla_attention(w, written, b, n_embd=n_embd, n_head=n_head, q_lora=q_lora, kv_lora=kv_lora, rope=rope,
                       nope=nope, v_dim=v_dim, dense_type=dense_type)
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


def write_deepseek4_llama(path: Path, *, n_layer=8, n_embd=1024, n_head=16, head_dim=512, n_rot=64,
                          q_lora=256, o_groups=8, o_lora=256, hc=4, n_idx_head=16, idx_dim=128, top_k=512,
                          window=128, ratios=(0, 0, 4, 128, 4, 128, 4, 0), n_hash=3, n_expert=32, n_used=6,
                          n_ff_exp=512, n_vocab=32000, ctx=1048576, expert_type=Q.MXFP4, dense_type=Q.Q8_0,
                          aux_type=Q.F16, mtp=False):
    """DeepSeek-V4-Flash in ratio: one KV head of head_dim 512 (64 rope dims) and 8 x n_embd of
    query width (n_head * head_dim), q_lora and o_lora n_embd / 4 with the output projection in
    8 groups, 4 hyper-connection streams (F32 hc_* tensors), sliding window 128, compress ratios
    0, 0, then 4 / 128 alternating and 0 last (as the real 43 blocks), each ratio-4 block with
    its compressor, lightning indexer (as many heads as attention, 128 dims, top-k 512) and
    indexer compressor, hash routing (I32 token -> expert table) on the first 3 blocks,
    sqrt-softplus gating with the selection bias elsewhere, one shared expert. MXFP4 experts,
    Q8_0 attention and shared experts (the converter's FP8 -> Q8_0), F16 for the BF16 compressor
    and indexer matrices, no MTP block (the converter drops it). The window, top-k and ratios are
    cell counts, kept as in the real model. `mtp`: one more block, the MTP/NextN block that
    `convert_hf_to_gguf.py --mtp` keeps (compress ratio 0, nextn.* projections)."""
    if len(ratios) != n_layer:
        raise ValueError("one compress ratio per block")
    arch = "deepseek4"
    w = GGUFWriter(str(path), arch)
    written: list = []
    if mtp:
        ratios = (*ratios, 0)
        w.add_uint32(f"{arch}.nextn_predict_layers", 1)
    n_blocks = len(ratios)
    _common(w, "moeplan-deepseek4", n_blocks, n_embd, n_head, 1, ctx, 38)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(n_rot)
    w.add_q_lora_rank(q_lora)
    w.add_uint32(f"{arch}.attention.sliding_window", window)
    w.add_expert_shared_count(1)
    w.add_expert_weights_scale(1.5)
    w.add_expert_weights_norm(True)
    w.add_uint32(f"{arch}.expert_gating_func", 4)  # sqrt-softplus, the only scoring deepseek4.cpp loads
    w.add_array(f"{arch}.swiglu_clamp_exp", [10.0] * n_blocks)
    w.add_array(f"{arch}.swiglu_clamp_shexp", [10.0] * n_blocks)
    w.add_uint32(f"{arch}.attention.indexer.head_count", n_idx_head)
    w.add_uint32(f"{arch}.attention.indexer.key_length", idx_dim)
    w.add_uint32(f"{arch}.attention.indexer.top_k", top_k)
    w.add_uint32(f"{arch}.attention.output_group_count", o_groups)
    w.add_uint32(f"{arch}.attention.output_lora_rank", o_lora)
    w.add_array(f"{arch}.attention.compress_ratios", list(ratios))
    w.add_float32(f"{arch}.attention.compress_rope_freq_base", 160000.0)
    w.add_uint32(f"{arch}.hyper_connection.count", hc)
    w.add_uint32(f"{arch}.hyper_connection.sinkhorn_iterations", 20)
    w.add_float32(f"{arch}.hyper_connection.epsilon", 1e-6)
    w.add_uint32(f"{arch}.hash_layer_count", n_hash)
    w.add_uint32(f"{arch}.embedding_length_out", n_embd * hc)
    _experts_vocab_globals(w, written, n_embd=n_embd, n_vocab=n_vocab, n_expert=n_expert, n_used=n_used,
                           n_ff_exp=n_ff_exp, output_type=Q.Q8_0)
    hc_dim, hc_mix = hc * n_embd, (2 + hc) * hc
    _add(w, written, "output_hc_fn.weight", (hc_dim, hc))
    _add(w, written, "output_hc_base.weight", (hc,))
    _add(w, written, "output_hc_scale.weight", (1,))
    for i, ratio in enumerate(ratios):
        b = f"blk.{i}."
        _add(w, written, b + "attn_norm.weight", (n_embd,))
        _add(w, written, b + "attn_sinks.weight", (n_head,))
        _add(w, written, b + "attn_q_a.weight", (n_embd, q_lora), dense_type)
        _add(w, written, b + "attn_q_a_norm.weight", (q_lora,))
        _add(w, written, b + "attn_q_b.weight", (q_lora, n_head * head_dim), dense_type)
        _add(w, written, b + "attn_kv.weight", (n_embd, head_dim), dense_type)
        _add(w, written, b + "attn_kv_a_norm.weight", (head_dim,))
        _add(w, written, b + "attn_output_a.weight", (n_head * head_dim // o_groups, o_lora * o_groups), dense_type)
        _add(w, written, b + "attn_output_b.weight", (o_groups * o_lora, n_embd), dense_type)
        for part in ("attn", "ffn"):
            _add(w, written, b + f"hc_{part}_fn.weight", (hc_dim, hc_mix))
            _add(w, written, b + f"hc_{part}_base.weight", (hc_mix,))
            _add(w, written, b + f"hc_{part}_scale.weight", (3,))
        if ratio:
            coff = 2 if ratio == 4 else 1
            _add(w, written, b + "attn_compressor_kv.weight", (n_embd, coff * head_dim), aux_type)
            _add(w, written, b + "attn_compressor_gate.weight", (n_embd, coff * head_dim), aux_type)
            _add(w, written, b + "attn_compressor_ape.weight", (coff * head_dim, ratio))
            _add(w, written, b + "attn_compressor_norm.weight", (head_dim,))
            if ratio == 4:
                _add(w, written, b + "indexer.proj.weight", (n_embd, n_idx_head), aux_type)
                _add(w, written, b + "indexer.attn_q_b.weight", (q_lora, n_idx_head * idx_dim), aux_type)
                _add(w, written, b + "indexer_compressor_kv.weight", (n_embd, 2 * idx_dim), aux_type)
                _add(w, written, b + "indexer_compressor_gate.weight", (n_embd, 2 * idx_dim), aux_type)
                _add(w, written, b + "indexer_compressor_ape.weight", (2 * idx_dim, ratio))
                _add(w, written, b + "indexer_compressor_norm.weight", (idx_dim,))
        _add(w, written, b + "ffn_gate_inp.weight", (n_embd, n_expert))
        if i < n_hash:
            _add(w, written, b + "ffn_gate_tid2eid.weight", (n_used, n_vocab), Q.I32)
        else:
            _add(w, written, b + "exp_probs_b.bias", (n_expert,))
        _add(w, written, b + "ffn_norm.weight", (n_embd,))
        _experts_and_shared(w, written, b, n_embd=n_embd, n_ff_exp=n_ff_exp, n_expert=n_expert,
                            n_ff_shexp=n_ff_exp, expert_type=expert_type, dense_type=dense_type)
        if i >= n_layer:
            _nextn_projections(w, written, b, n_embd, dense_type)
    _finish(w)
    return path, written


def write_deepseek4_mtp_llama(path: Path, **kw):
    """write_deepseek4_llama with the MTP block (`--mtp` conversion): its raw SWA cache is
    part of the main context's caches."""
    return write_deepseek4_llama(path, mtp=True, **kw)


def write_glm_dsa_llama(path: Path, *, n_layer=6, n_dense=1, n_embd=1536, n_head=16, q_lora=512, kv_lora=512,
                        rope=64, nope=192, v_dim=256, n_idx_head=8, idx_dim=128, top_k=2048,
                        indexer_types=(True, True, True, False, False, False), n_expert=32, n_used=8, n_ff=3072,
                        n_ff_exp=512, n_vocab=38720, ctx=1048576, expert_type=Q.Q4_K, dense_type=Q.Q8_0):
    """GLM-5.2 in ratio: MLA (a 576-wide latent cached as K only: kv_lora 512 + 64 rope dims,
    as the real model), q_lora n_embd / 3, k head 192 + 64 and v head 256, the DSA lightning
    indexer (n_head / 2 heads of 128 dims, top-k 2048) on the blocks that attention.indexer.types
    marks 'full' (GLM-5.2's layout: the first three, then one in four; 'shared' blocks reuse the
    previous top-k and have no indexer tensors and no indexer cache), one leading dense block,
    sigmoid gating with the selection bias, a shared expert, and the NextN/MTP block the
    converter keeps (loaded with TENSOR_SKIP: in the file, not in memory). Q4_K experts (which
    the x86 CPU backend repacks), Q8_0 attention."""
    arch = "glm-dsa"
    w = GGUFWriter(str(path), arch)
    written: list = []
    n_blocks = n_layer + 1
    _common(w, "moeplan-glm-dsa", n_blocks, n_embd, n_head, 1, ctx, 15)
    w.add_uint32(f"{arch}.nextn_predict_layers", 1)
    w.add_feed_forward_length(n_ff)
    _mla_keys(w, q_lora=q_lora, kv_lora=kv_lora, rope=rope, nope=nope, v_dim=v_dim)
    w.add_leading_dense_block_count(n_dense)
    w.add_expert_shared_count(1)
    w.add_expert_weights_scale(2.5)
    w.add_expert_weights_norm(True)
    w.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)
    w.add_uint32(f"{arch}.attention.indexer.head_count", n_idx_head)
    w.add_uint32(f"{arch}.attention.indexer.key_length", idx_dim)
    w.add_uint32(f"{arch}.attention.indexer.top_k", top_k)
    w.add_array(f"{arch}.attention.indexer.types", [bool(t) for t in indexer_types])
    _experts_vocab_globals(w, written, n_embd=n_embd, n_vocab=n_vocab, n_expert=n_expert, n_used=n_used,
                           n_ff_exp=n_ff_exp)
    for i in range(n_blocks):
        b = f"blk.{i}."
        _mla_attention(w, written, b, n_embd=n_embd, n_head=n_head, q_lora=q_lora, kv_lora=kv_lora, rope=rope,
                       nope=nope, v_dim=v_dim, dense_type=dense_type)
        if i >= n_layer or indexer_types[i]:
            _add(w, written, b + "indexer.k_norm.weight", (idx_dim,))
            _add(w, written, b + "indexer.k_norm.bias", (idx_dim,))
            _add(w, written, b + "indexer.proj.weight", (n_embd, n_idx_head))
            _add(w, written, b + "indexer.attn_k.weight", (n_embd, idx_dim), dense_type)
            _add(w, written, b + "indexer.attn_q_b.weight", (q_lora, n_idx_head * idx_dim), dense_type)
        if i < n_dense:
            _add(w, written, b + "ffn_gate.weight", (n_embd, n_ff), dense_type)
            _add(w, written, b + "ffn_up.weight", (n_embd, n_ff), dense_type)
            _add(w, written, b + "ffn_down.weight", (n_ff, n_embd), dense_type)
            continue
        _add(w, written, b + "ffn_gate_inp.weight", (n_embd, n_expert))
        _add(w, written, b + "exp_probs_b.bias", (n_expert,))
        _experts_and_shared(w, written, b, n_embd=n_embd, n_ff_exp=n_ff_exp, n_expert=n_expert,
                            n_ff_shexp=n_ff_exp, expert_type=expert_type, dense_type=dense_type)
        if i >= n_layer:
            _nextn_projections(w, written, b, n_embd, dense_type)
    _finish(w)
    return path, written


def write_gemma4_llama(path: Path, *, n_layer=7, n_embd=1024, n_head=8, n_head_kv=4, n_head_kv_full=1,
                       head_dim=128, head_dim_full=256, n_ff=768, n_expert=32, n_used=4, n_ff_exp=256,
                       n_vocab=32000, ctx=32768, window=128, expert_type=Q.Q4_K, dense_type=Q.Q8_0):
    """Gemma 4 26B-A4B in ratio: sliding-window blocks (head_dim 256, 8 KV heads) and every
    sixth block global (head_dim 512, 2 KV heads, K = V: no attn_v, attention_k_eq_v), scaled
    to 128 / 256 dims and 4 / 1 heads; q/k norms, the post-attention, post-FFN norms and the
    per-block output scale; a dense GELU MLP beside the routed experts in every block (its own
    pre/post norms), the router's input scale and fused gate+up experts with a per-expert
    down scale (the converter's layout); tied embeddings (no output.weight) and the
    proportional-rope frequency factors of the global blocks. Pattern: every sixth block global
    (blocks 0-4 and 6 sliding, 5 global: a global block that is not the last, whose graph
    carries no output-head nodes). Keys as conversion/gemma.py Gemma4Model writes them."""
    arch = "gemma4"
    w = GGUFWriter(str(path), arch)
    written: list = []
    swa = [(i + 1) % 6 != 0 for i in range(n_layer)]
    w.add_name("moeplan-gemma4")
    w.add_block_count(n_layer)
    w.add_context_length(ctx)
    w.add_embedding_length(n_embd)
    w.add_head_count(n_head)
    w.add_array(f"{arch}.attention.head_count_kv", [n_head_kv if s else n_head_kv_full for s in swa])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_file_type(15)
    w.add_feed_forward_length(n_ff)
    w.add_key_length(head_dim_full)
    w.add_value_length(head_dim_full)
    w.add_uint32(f"{arch}.attention.key_length_swa", head_dim)
    w.add_uint32(f"{arch}.attention.value_length_swa", head_dim)
    w.add_uint32(f"{arch}.rope.dimension_count", head_dim_full)
    w.add_uint32(f"{arch}.rope.dimension_count_swa", head_dim)
    w.add_uint32(f"{arch}.attention.sliding_window", window)
    w.add_array(f"{arch}.attention.sliding_window_pattern", swa)
    w.add_uint32(f"{arch}.attention.shared_kv_layers", 0)
    w.add_uint32(f"{arch}.embedding_length_per_layer_input", 0)
    w.add_float32(f"{arch}.final_logit_softcapping", 30.0)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_used)
    w.add_expert_feed_forward_length(n_ff_exp)
    spm_vocab(w, n_vocab)
    _add(w, written, "token_embd.weight", (n_embd, n_vocab), Q.Q6_K)  # tied: quantized as the output
    _add(w, written, "output_norm.weight", (n_embd,))
    _add(w, written, "rope_freqs.weight", (head_dim_full // 2,))
    for i in range(n_layer):
        b = f"blk.{i}."
        hd, kv = (head_dim, n_head_kv) if swa[i] else (head_dim_full, n_head_kv_full)
        _add(w, written, b + "attn_norm.weight", (n_embd,))
        _add(w, written, b + "attn_q.weight", (n_embd, n_head * hd), dense_type)
        _add(w, written, b + "attn_k.weight", (n_embd, kv * hd), dense_type)
        if swa[i]:
            _add(w, written, b + "attn_v.weight", (n_embd, kv * hd), dense_type)
        _add(w, written, b + "attn_output.weight", (n_head * hd, n_embd), dense_type)
        _add(w, written, b + "attn_q_norm.weight", (hd,))
        _add(w, written, b + "attn_k_norm.weight", (hd,))
        _add(w, written, b + "post_attention_norm.weight", (n_embd,))
        _add(w, written, b + "layer_output_scale.weight", (1,))
        _add(w, written, b + "ffn_norm.weight", (n_embd,))
        _add(w, written, b + "ffn_gate.weight", (n_embd, n_ff), dense_type)
        _add(w, written, b + "ffn_up.weight", (n_embd, n_ff), dense_type)
        _add(w, written, b + "ffn_down.weight", (n_ff, n_embd), dense_type)
        _add(w, written, b + "post_ffw_norm.weight", (n_embd,))
        _add(w, written, b + "ffn_gate_inp.weight", (n_embd, n_expert))
        _add(w, written, b + "ffn_gate_inp.scale", (n_embd,))
        _add(w, written, b + "pre_ffw_norm_2.weight", (n_embd,))
        _add(w, written, b + "post_ffw_norm_1.weight", (n_embd,))
        _add(w, written, b + "post_ffw_norm_2.weight", (n_embd,))
        _add(w, written, b + "ffn_gate_up_exps.weight", (n_embd, 2 * n_ff_exp, n_expert), expert_type)
        _add(w, written, b + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), expert_type)
        _add(w, written, b + "ffn_down_exps.scale", (n_expert,))
    _finish(w)
    return path, written


def write_nemotron_h_moe_llama(path: Path, *, pattern="MEM*EM*E", n_embd=1024, n_head=8, n_head_kv=2,
                               head_dim=128, n_expert=32, n_used=6, n_ff_exp=256, n_ff_shexp=512,
                               n_vocab=32000, ctx=32768, d_state=64, n_ssm_head=32, ssm_head_dim=64,
                               n_group=8, d_conv=4, expert_type=Q.Q4_K, dense_type=Q.Q8_0):
    """Nemotron-3-Nano-30B-A3B in ratio (nemotron_h_moe): each block is one of a Mamba-2 mixer
    (M), a GQA attention without rope (*) or a MoE FFN (E: relu^2 experts without a gate
    matrix, a sigmoid router with a selection bias, one shared expert), as the converter
    writes hybrid_override_pattern: per-block head_count_kv and feed_forward_length arrays.
    Nano's 64 Mamba heads of 64 over 8 groups with a 128-wide state are scaled to 32 heads
    and a 64-wide state; 6 of the routed experts per token as in Nano."""
    w = GGUFWriter(str(path), "nemotron_h_moe")
    written: list = []
    n_layer = len(pattern)
    w.add_name("moeplan-nemotron-h-moe")
    w.add_block_count(n_layer)
    w.add_context_length(ctx)
    w.add_embedding_length(n_embd)
    w.add_head_count(n_head)
    w.add_head_count_kv([n_head_kv if c == "*" else 0 for c in pattern])
    w.add_feed_forward_length([n_ff_exp if c == "E" else 0 for c in pattern])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_layer_norm_eps(1e-5)
    w.add_file_type(15)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    d_inner = n_ssm_head * ssm_head_dim
    w.add_ssm_conv_kernel(d_conv)
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_state_size(d_state)
    w.add_ssm_time_step_rank(n_ssm_head)
    w.add_ssm_group_count(n_group)
    w.add_expert_shared_feed_forward_length(n_ff_shexp)
    w.add_expert_shared_count(1)
    w.add_expert_weights_norm(True)
    w.add_expert_weights_scale(2.5)
    w.add_expert_group_count(1)
    _experts_vocab_globals(w, written, n_embd=n_embd, n_vocab=n_vocab, n_expert=n_expert, n_used=n_used,
                           n_ff_exp=n_ff_exp)
    conv_dim = d_inner + 2 * n_group * d_state
    for i, kind in enumerate(pattern):
        b = f"blk.{i}."
        _add(w, written, b + "attn_norm.weight", (n_embd,))
        if kind == "M":
            _add(w, written, b + "ssm_in.weight", (n_embd, 2 * d_inner + 2 * n_group * d_state + n_ssm_head), dense_type)
            _add(w, written, b + "ssm_conv1d.weight", (d_conv, conv_dim))
            _add(w, written, b + "ssm_conv1d.bias", (conv_dim,))
            _add(w, written, b + "ssm_dt.bias", (n_ssm_head,))
            _add(w, written, b + "ssm_a", (1, n_ssm_head))
            _add(w, written, b + "ssm_d", (1, n_ssm_head))
            _add(w, written, b + "ssm_norm.weight", (d_inner // n_group, n_group))
            _add(w, written, b + "ssm_out.weight", (d_inner, n_embd), dense_type)
        elif kind == "*":
            _gqa_projections(w, written, b, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
                             dense_type=dense_type)
        else:
            _add(w, written, b + "ffn_gate_inp.weight", (n_embd, n_expert))
            _add(w, written, b + "exp_probs_b.bias", (n_expert,))
            _add(w, written, b + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), expert_type)
            _add(w, written, b + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), expert_type)
            _add(w, written, b + "ffn_down_shexp.weight", (n_ff_shexp, n_embd), dense_type)
            _add(w, written, b + "ffn_up_shexp.weight", (n_embd, n_ff_shexp), dense_type)
    _finish(w)
    return path, written


def write_kimi_k3_llama(path: Path, *, n_layer=8, full_attn=(4, 8), n_dense=1, n_embd=1024, n_head=8,
                        kda_head_dim=128, d_conv=4, q_lora=256, kv_lora=512, rope=64, nope=128, v_dim=128,
                        n_expert=32, n_used=16, n_shared=2, latent=512, n_ff_exp=256, n_ff=2048,
                        n_vocab=32000, ctx=32768, res_block=4, expert_type=Q.MXFP4, dense_type=Q.Q8_0):
    """Kimi-K3 in ratio (kimi-k3): KDA blocks (head_count_kv 0) with MLA blocks (one latent head of
    kv_lora + rope, no rope applied, a sigmoid output gate attn_gate) on the 1-indexed blocks of
    `full_attn` (K3: every fourth and the last), the cross-layer residual every `res_block`
    blocks (K3: 12 of 93), one dense lead block, then routed experts in a latent space half
    n_embd wide (K3: 3584 of 7168) between ffn_routed_down / ffn_routed_up, with 16 of the
    experts per token as K3 and two shared experts of n_ff_exp. MXFP4 experts as the published
    checkpoint's, Q8_0 elsewhere (the MXFP4_MOE recipe). KDA keeps K3's head_dim of 128."""
    arch = "kimi-k3"
    w = GGUFWriter(str(path), arch)
    written: list = []
    kv_heads = [1 if (il + 1) in full_attn else 0 for il in range(n_layer)]
    _common(w, "moeplan-kimi-k3", n_layer, n_embd, n_head, kv_heads, ctx, 38)  # 38: MXFP4_MOE
    w.add_feed_forward_length(n_ff)
    _mla_keys(w, q_lora=q_lora, kv_lora=kv_lora, rope=rope, nope=nope, v_dim=v_dim)
    w.add_ssm_conv_kernel(d_conv)
    w.add_kda_head_dim(kda_head_dim)
    w.add_float32(f"{arch}.kda.gate_lower_bound", -5.0)
    w.add_leading_dense_block_count(n_dense)
    w.add_expert_shared_count(n_shared)
    w.add_expert_weights_scale(1.0)
    w.add_expert_weights_norm(True)
    w.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)
    w.add_uint32(f"{arch}.expert_latent_length", latent)
    w.add_uint32(f"{arch}.attn_res.block_size", res_block)
    w.add_float32(f"{arch}.activation.situ_beta", 4.0)
    w.add_float32(f"{arch}.activation.situ_linear_beta", 25.0)
    _experts_vocab_globals(w, written, n_embd=n_embd, n_vocab=n_vocab, n_expert=n_expert, n_used=n_used,
                           n_ff_exp=n_ff_exp)
    _add(w, written, "output_res_score.weight", (n_embd,))
    d_inner = n_head * kda_head_dim
    for i in range(n_layer):
        b = f"blk.{i}."
        _add(w, written, b + "attn_norm.weight", (n_embd,))
        _add(w, written, b + "ffn_norm.weight", (n_embd,))
        _add(w, written, b + "attn_res_score.weight", (n_embd,))
        _add(w, written, b + "ffn_res_score.weight", (n_embd,))
        if kv_heads[i] == 0:
            for qkv in ("q", "k", "v"):
                _add(w, written, b + f"ssm_conv1d_{qkv}.weight", (d_conv, 1, d_inner, 1))
                _add(w, written, b + f"attn_{qkv}.weight", (n_embd, d_inner), dense_type)
            _add(w, written, b + "ssm_f_a.weight", (n_embd, kda_head_dim), dense_type)
            _add(w, written, b + "ssm_f_b.weight", (kda_head_dim, d_inner), dense_type)
            _add(w, written, b + "ssm_beta.weight", (n_embd, n_head))
            _add(w, written, b + "ssm_a", (n_head,))
            _add(w, written, b + "ssm_dt.bias", (d_inner,))
            _add(w, written, b + "ssm_g.weight", (n_embd, d_inner), dense_type)
            _add(w, written, b + "ssm_norm.weight", (kda_head_dim,))
            _add(w, written, b + "attn_output.weight", (d_inner, n_embd), dense_type)
        else:
            _add(w, written, b + "attn_q_a_norm.weight", (q_lora,))
            _add(w, written, b + "attn_kv_a_norm.weight", (kv_lora,))
            _add(w, written, b + "attn_q_a.weight", (n_embd, q_lora), dense_type)
            _add(w, written, b + "attn_q_b.weight", (q_lora, n_head * (nope + rope)), dense_type)
            _add(w, written, b + "attn_kv_a_mqa.weight", (n_embd, kv_lora + rope), dense_type)
            _add(w, written, b + "attn_k_b.weight", (nope, kv_lora, n_head), dense_type)
            _add(w, written, b + "attn_v_b.weight", (kv_lora, v_dim, n_head), dense_type)
            _add(w, written, b + "attn_gate.weight", (n_embd, n_head * v_dim), dense_type)
            _add(w, written, b + "attn_output.weight", (n_head * v_dim, n_embd), dense_type)
        if i < n_dense:
            _add(w, written, b + "ffn_gate.weight", (n_embd, n_ff), dense_type)
            _add(w, written, b + "ffn_up.weight", (n_embd, n_ff), dense_type)
            _add(w, written, b + "ffn_down.weight", (n_ff, n_embd), dense_type)
            continue
        _add(w, written, b + "ffn_gate_inp.weight", (n_embd, n_expert))
        _add(w, written, b + "exp_probs_b.bias", (n_expert,))
        _add(w, written, b + "ffn_gate_exps.weight", (latent, n_ff_exp, n_expert), expert_type)
        _add(w, written, b + "ffn_up_exps.weight", (latent, n_ff_exp, n_expert), expert_type)
        _add(w, written, b + "ffn_down_exps.weight", (n_ff_exp, latent, n_expert), expert_type)
        _add(w, written, b + "ffn_routed_down.weight", (n_embd, latent), dense_type)
        _add(w, written, b + "ffn_routed_up.weight", (latent, n_embd), dense_type)
        _add(w, written, b + "ffn_routed_norm.weight", (latent,))
        sh = n_ff_exp * n_shared
        _add(w, written, b + "ffn_gate_shexp.weight", (n_embd, sh), dense_type)
        _add(w, written, b + "ffn_up_shexp.weight", (n_embd, sh), dense_type)
        _add(w, written, b + "ffn_down_shexp.weight", (sh, n_embd), dense_type)
    _finish(w)
    return path, written


def write_step35_llama(path: Path, *, n_layer=8, n_mtp=1, n_dense=1, n_embd=1024, n_head=8, n_head_swa=12,
                       n_head_kv=1, head_dim=128, n_ff=1024, n_expert=32, n_used=4, n_ff_exp=256,
                       n_ff_shexp=256, n_vocab=32000, ctx=32768, window=128, expert_type=Q.Q4_K,
                       dense_type=Q.Q8_0):
    """Step-3.5-Flash in ratio (step35): every fourth block full attention (64 query heads in
    the model, 8 here) and the others sliding-window (96 heads, 12 here), one KV head per 8
    full-attention query heads, head_dim 128 everywhere; q/k norms of one head, a head-wise
    attention gate (attn_gate: n_embd x n_head of the block); a dense lead block, then the
    sigmoid router with its selection bias, the routed experts and one shared expert; the
    rope frequency factors the converter writes for llama3 rope scaling; one MTP block past
    the trunk (sliding, dense FFN, eh_proj / enorm / hnorm / shared head) as the converter
    keeps it. Keys as conversion/step3.py Step35Model writes them."""
    arch = "step35"
    w = GGUFWriter(str(path), arch)
    written: list = []
    n_blocks = n_layer + n_mtp
    swa = [i % 4 != 0 for i in range(n_layer)] + [True] * n_mtp
    w.add_name("moeplan-step35")
    w.add_block_count(n_blocks)
    w.add_context_length(ctx)
    w.add_embedding_length(n_embd)
    w.add_head_count([n_head_swa if s else n_head for s in swa])
    w.add_head_count_kv([n_head_kv] * n_blocks)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(5e6)
    w.add_float32(f"{arch}.rope.freq_base_swa", 1e4)
    w.add_file_type(15)
    w.add_feed_forward_length(n_ff)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_uint32(f"{arch}.attention.sliding_window", window)
    w.add_array(f"{arch}.attention.sliding_window_pattern", swa)
    w.add_expert_shared_feed_forward_length(n_ff_shexp)
    w.add_expert_weights_scale(3.0)
    w.add_expert_weights_norm(True)
    w.add_leading_dense_block_count(n_dense)
    w.add_uint32(f"{arch}.moe_every_n_layers", 1)
    if n_mtp:
        w.add_uint32(f"{arch}.nextn_predict_layers", n_mtp)
    _experts_vocab_globals(w, written, n_embd=n_embd, n_vocab=n_vocab, n_expert=n_expert, n_used=n_used,
                           n_ff_exp=n_ff_exp)
    _add(w, written, "rope_freqs.weight", (head_dim // 2,))
    for i in range(n_blocks):
        b = f"blk.{i}."
        h = n_head_swa if swa[i] else n_head
        _add(w, written, b + "attn_norm.weight", (n_embd,))
        _add(w, written, b + "attn_q_norm.weight", (head_dim,))
        _add(w, written, b + "attn_k_norm.weight", (head_dim,))
        _add(w, written, b + "attn_q.weight", (n_embd, h * head_dim), dense_type)
        _add(w, written, b + "attn_k.weight", (n_embd, n_head_kv * head_dim), dense_type)
        _add(w, written, b + "attn_v.weight", (n_embd, n_head_kv * head_dim), dense_type)
        _add(w, written, b + "attn_output.weight", (h * head_dim, n_embd), dense_type)
        _add(w, written, b + "attn_gate.weight", (n_embd, h))
        _add(w, written, b + "ffn_norm.weight", (n_embd,))
        if n_dense <= i < n_layer:
            _add(w, written, b + "ffn_gate_inp.weight", (n_embd, n_expert))
            _add(w, written, b + "exp_probs_b.bias", (n_expert,))
            _experts_and_shared(w, written, b, n_embd=n_embd, n_ff_exp=n_ff_exp, n_expert=n_expert,
                                n_ff_shexp=n_ff_shexp, expert_type=expert_type, dense_type=dense_type)
        else:
            _add(w, written, b + "ffn_gate.weight", (n_embd, n_ff), dense_type)
            _add(w, written, b + "ffn_up.weight", (n_embd, n_ff), dense_type)
            _add(w, written, b + "ffn_down.weight", (n_ff, n_embd), dense_type)
        if i >= n_layer:
            _nextn_projections(w, written, b, n_embd, dense_type)
            _add(w, written, b + "nextn.shared_head_head.weight", (n_embd, n_vocab), Q.Q6_K)
    _finish(w)
    return path, written


def write_hunyuan_moe_llama(path: Path, *, n_layer=6, n_embd=1024, n_head=8, n_head_kv=2, head_dim=128,
                            n_expert=32, n_used=4, n_ff=768, n_vocab=32000, ctx=32768, expert_type=Q.Q4_K,
                            dense_type=Q.Q8_0, tied=True):
    """Hunyuan-A13B in ratio (hunyuan-moe): GQA 4:1 with head_dim 128 and q/k norms, every block
    MoE (the experts n_ff = feed_forward_length wide, as hunyuan-moe.cpp creates them, 3/4 of
    n_embd as 3072 of 4096) beside one shared expert of expert_shared_feed_forward_length (the
    converter's intermediate_size, the same width); tied embeddings: no output.weight. Keys as
    conversion/hunyuan.py HunYuanMoEModel writes them."""
    w = GGUFWriter(str(path), "hunyuan-moe")
    written: list = []
    _common(w, "moeplan-hunyuan-moe", n_layer, n_embd, n_head, n_head_kv, ctx, 15)
    w.add_feed_forward_length(n_ff)
    w.add_expert_shared_feed_forward_length(n_ff)
    w.add_expert_shared_count(1)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_used)
    w.add_expert_feed_forward_length(n_ff)
    spm_vocab(w, n_vocab)
    _add(w, written, "token_embd.weight", (n_embd, n_vocab), Q.Q6_K)
    _add(w, written, "output_norm.weight", (n_embd,))
    if not tied:
        _add(w, written, "output.weight", (n_embd, n_vocab), Q.Q6_K)
    for i in range(n_layer):
        b = f"blk.{i}."
        _add(w, written, b + "attn_norm.weight", (n_embd,))
        _gqa_projections(w, written, b, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
                         dense_type=dense_type)
        _add(w, written, b + "attn_k_norm.weight", (head_dim,))
        _add(w, written, b + "attn_q_norm.weight", (head_dim,))
        _add(w, written, b + "ffn_norm.weight", (n_embd,))
        _add(w, written, b + "ffn_gate_inp.weight", (n_embd, n_expert))
        _experts_and_shared(w, written, b, n_embd=n_embd, n_ff_exp=n_ff, n_expert=n_expert, n_ff_shexp=n_ff,
                            expert_type=expert_type, dense_type=dense_type)
    _finish(w)
    return path, written



def write_dots1_llama(path: Path, *, n_layer=6, n_dense=1, n_embd=1024, n_head=8, head_dim=128, n_ff=2048,
                      n_expert=32, n_used=6, n_shared=2, n_ff_exp=256, n_vocab=32000, ctx=32768,
                      expert_type=Q.Q4_K, dense_type=Q.Q8_0):
    """dots.llm1 in ratio (dots1): multi-head attention (as many KV heads as query heads, head_dim
    128) with q/k norms, one dense lead block, then the router with its selection bias, the
    routed experts (6 per token as dots.llm1) and two shared experts fused into one FFN of
    n_ff_exp x 2 (dots1.cpp); sigmoid gating, normalised and scaled weights. Keys as
    conversion/dots1.py writes them, plus expert_gating_func 2 which dots1.cpp needs."""
    arch = "dots1"
    w = GGUFWriter(str(path), arch)
    written: list = []
    _common(w, "moeplan-dots1", n_layer, n_embd, n_head, n_head, ctx, 15)
    w.add_feed_forward_length(n_ff)
    w.add_leading_dense_block_count(n_dense)
    w.add_expert_shared_count(n_shared)
    w.add_expert_weights_scale(2.5)
    w.add_expert_weights_norm(True)
    w.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)
    _experts_vocab_globals(w, written, n_embd=n_embd, n_vocab=n_vocab, n_expert=n_expert, n_used=n_used,
                           n_ff_exp=n_ff_exp)
    for i in range(n_layer):
        b = f"blk.{i}."
        _add(w, written, b + "attn_norm.weight", (n_embd,))
        _gqa_projections(w, written, b, n_embd=n_embd, n_head=n_head, n_head_kv=n_head, head_dim=head_dim,
                         dense_type=dense_type)
        _add(w, written, b + "attn_k_norm.weight", (head_dim,))
        _add(w, written, b + "attn_q_norm.weight", (head_dim,))
        _add(w, written, b + "ffn_norm.weight", (n_embd,))
        if i < n_dense:
            _add(w, written, b + "ffn_gate.weight", (n_embd, n_ff), dense_type)
            _add(w, written, b + "ffn_down.weight", (n_ff, n_embd), dense_type)
            _add(w, written, b + "ffn_up.weight", (n_embd, n_ff), dense_type)
        else:
            _add(w, written, b + "ffn_gate_inp.weight", (n_embd, n_expert))
            _add(w, written, b + "exp_probs_b.bias", (n_expert,))
            _experts_and_shared(w, written, b, n_embd=n_embd, n_ff_exp=n_ff_exp, n_expert=n_expert,
                                n_ff_shexp=n_ff_exp * n_shared, expert_type=expert_type, dense_type=dense_type)
    _finish(w)
    return path, written

def write_ernie4_5_moe_llama(path: Path, *, n_layer=6, n_dense=1, n_embd=1024, n_head=8, n_head_kv=2, head_dim=128,
                             n_ff=4096, n_expert=32, n_used=4, n_ff_exp=512, n_shared=2, n_vocab=32000, ctx=32768,
                             tied=True, expert_type=Q.Q4_K, dense_type=Q.Q8_0):
    """ERNIE-4.5-21B-A3B in ratio (ernie4_5-moe): GQA 4:1 (20/4 in the model) with head_dim 128
    and no q/k norms; one dense lead block (moe_layer_start_index 1) with a wide SwiGLU MLP,
    then MoE blocks: softmax router with its selection bias (exp_probs_b), the routed experts
    and the shared experts as one FFN of n_shared x n_ff_exp (the converter's
    intermediate_size // num_key_value_heads); tied embeddings (no output.weight). Keys as
    conversion/ernie.py Ernie4_5MoeModel writes them."""
    arch = "ernie4_5-moe"
    w = GGUFWriter(str(path), arch)
    written: list = []
    _common(w, "moeplan-ernie4_5-moe", n_layer, n_embd, n_head, n_head_kv, ctx, 15)
    w.add_feed_forward_length(n_ff)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_used)
    w.add_interleave_moe_layer_step(1)
    w.add_leading_dense_block_count(n_dense)
    w.add_expert_feed_forward_length(n_ff_exp)
    w.add_expert_shared_count(n_shared)
    w.add_expert_shared_feed_forward_length(n_shared * n_ff_exp)
    spm_vocab(w, n_vocab)
    _add(w, written, "token_embd.weight", (n_embd, n_vocab), Q.Q8_0)
    _add(w, written, "output_norm.weight", (n_embd,))
    if not tied:
        _add(w, written, "output.weight", (n_embd, n_vocab), Q.Q6_K)
    for i in range(n_layer):
        b = f"blk.{i}."
        _add(w, written, b + "attn_norm.weight", (n_embd,))
        _gqa_projections(w, written, b, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
                         dense_type=dense_type)
        _add(w, written, b + "ffn_norm.weight", (n_embd,))
        if i >= n_dense:
            _add(w, written, b + "ffn_gate_inp.weight", (n_embd, n_expert))
            _add(w, written, b + "exp_probs_b.bias", (n_expert,))
            _experts_and_shared(w, written, b, n_embd=n_embd, n_ff_exp=n_ff_exp, n_expert=n_expert,
                                n_ff_shexp=n_shared * n_ff_exp, expert_type=expert_type, dense_type=dense_type)
        else:
            _add(w, written, b + "ffn_gate.weight", (n_embd, n_ff), dense_type)
            _add(w, written, b + "ffn_up.weight", (n_embd, n_ff), dense_type)
            _add(w, written, b + "ffn_down.weight", (n_ff, n_embd), dense_type)
    _finish(w)
    return path, written


LLAMA_FIXTURES: dict[str, Callable] = {
    "qwen3moe": write_qwen3moe_llama,
    "deepseek2": write_deepseek2_llama,
    "gpt-oss": write_gptoss_llama,
    "qwen3next": write_qwen3next_llama,
    "deepseek4": write_deepseek4_llama,
    "deepseek4-mtp": write_deepseek4_mtp_llama,
    "glm-dsa": write_glm_dsa_llama,
    "nemotron_h_moe": write_nemotron_h_moe_llama,
}
# fixtures measured outside the tests/data/llama_memory matrix: gemma4 was recorded with
# --no-repack (tests/data/gemma4_llama_memory.json says why) and is checked by test_gemma4.py
OTHER_FIXTURES: dict[str, Callable] = {
    "gemma4": write_gemma4_llama,
    "kimi-k3": write_kimi_k3_llama,
    "step35": write_step35_llama,
    "hunyuan-moe": write_hunyuan_moe_llama,
    "dots1": write_dots1_llama,
    "ernie4_5-moe": write_ernie4_5_moe_llama,
}


def write_fixture(name: str, folder: Path) -> Path:
    """Write fixture `name` (a key of LLAMA_FIXTURES or OTHER_FIXTURES) as folder/<name>.gguf
    with its defaults."""
    path, _ = {**LLAMA_FIXTURES, **OTHER_FIXTURES}[name](Path(folder) / f"{name}.gguf")
    return path
