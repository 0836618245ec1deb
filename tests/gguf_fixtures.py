"""Tiny GGUF files written with gguf.GGUFWriter, for tests (no downloads).

Each writer returns the path and the list of (name, ggml shape, type) it wrote, so tests can
assert byte totals against an independent sum over what was written.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES, ExpertGatingFuncType, GGMLQuantizationType

Q = GGMLQuantizationType


def nbytes(shape: tuple[int, ...], qtype: GGMLQuantizationType) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    n = int(np.prod(shape))
    return n // block * size


def _add(w: GGUFWriter, written: list, name: str, shape: tuple[int, ...], qtype=Q.F32) -> None:
    """Add a tensor of ggml shape `shape` (ne0 first) filled with zeros of the right bytes."""
    if qtype == Q.F32:
        arr = np.zeros(tuple(reversed(shape)), dtype=np.float32)
        w.add_tensor(name, arr)
    elif qtype == Q.F16:
        arr = np.zeros(tuple(reversed(shape)), dtype=np.float16)
        w.add_tensor(name, arr)
    else:
        block, size = GGML_QUANT_SIZES[qtype]
        rshape = list(reversed(shape))
        rshape[-1] = rshape[-1] // block * size
        arr = np.zeros(rshape, dtype=np.uint8)
        w.add_tensor(name, arr, raw_dtype=qtype)
    written.append((name, shape, qtype))


def _tokenizer(w: GGUFWriter, n_vocab: int) -> None:
    w.add_tokenizer_model("llama")
    w.add_token_list([f"t{i}" for i in range(n_vocab)])
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_types([1] * n_vocab)


def write_qwen3moe(path: Path, *, n_layer=4, n_embd=64, n_head=4, n_head_kv=2, head_dim=16,
                   n_expert=8, n_used=2, n_ff_exp=32, n_vocab=96, ctx=4096, expert_type=Q.Q8_0):
    """A qwen3moe-like GQA model: every block MoE, no shared expert."""
    w = GGUFWriter(str(path), "qwen3moe")
    written: list = []
    w.add_name("tiny-qwen3moe")
    w.add_block_count(n_layer)
    w.add_context_length(ctx)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff_exp * 4)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_used)
    w.add_expert_feed_forward_length(n_ff_exp)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(7)
    _tokenizer(w, n_vocab)
    _add(w, written, "token_embd.weight", (n_embd, n_vocab), Q.Q8_0)
    _add(w, written, "output_norm.weight", (n_embd,))
    _add(w, written, "output.weight", (n_embd, n_vocab), Q.Q8_0)
    for i in range(n_layer):
        b = f"blk.{i}."
        _add(w, written, b + "attn_norm.weight", (n_embd,))
        _add(w, written, b + "attn_q.weight", (n_embd, n_head * head_dim), Q.Q8_0)
        _add(w, written, b + "attn_k.weight", (n_embd, n_head_kv * head_dim), Q.Q8_0)
        _add(w, written, b + "attn_v.weight", (n_embd, n_head_kv * head_dim), Q.Q8_0)
        _add(w, written, b + "attn_output.weight", (n_head * head_dim, n_embd), Q.Q8_0)
        _add(w, written, b + "attn_q_norm.weight", (head_dim,))
        _add(w, written, b + "attn_k_norm.weight", (head_dim,))
        _add(w, written, b + "ffn_norm.weight", (n_embd,))
        _add(w, written, b + "ffn_gate_inp.weight", (n_embd, n_expert))
        _add(w, written, b + "ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), expert_type)
        _add(w, written, b + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), expert_type)
        _add(w, written, b + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), expert_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, written


def write_deepseek2(path: Path, *, n_layer=4, n_dense=1, n_embd=256, n_head=4, kv_lora=32, q_lora=64,
                    rope=32, nope=32, v_dim=32, n_expert=8, n_used=2, n_ff=512, n_ff_exp=256, n_vocab=96,
                    ctx=8192, nextn=0, expert_type=Q.Q4_K, weights_scale=None):
    """A deepseek2-like MLA model: leading dense blocks, a shared expert, K-only latent cache."""
    w = GGUFWriter(str(path), "deepseek2")
    written: list = []
    w.add_name("tiny-deepseek2")
    w.add_block_count(n_layer + nextn)
    w.add_context_length(ctx)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(1)
    w.add_key_length(kv_lora + rope)
    w.add_value_length(kv_lora)
    w.add_key_length_mla(nope + rope)
    w.add_value_length_mla(v_dim)
    w.add_q_lora_rank(q_lora)
    w.add_kv_lora_rank(kv_lora)
    w.add_rope_dimension_count(rope)
    w.add_leading_dense_block_count(n_dense)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_used)
    w.add_expert_shared_count(1)
    w.add_expert_feed_forward_length(n_ff_exp)
    if nextn:
        w.add_uint32("deepseek2.nextn_predict_layers", nextn)
    if weights_scale is not None:  # DeepSeek-V3's routing keys, which ik_llama.cpp requires
        w.add_expert_weights_scale(weights_scale)
        w.add_expert_weights_norm(True)
        w.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(15)
    _tokenizer(w, n_vocab)
    _add(w, written, "token_embd.weight", (n_embd, n_vocab), Q.Q4_K if n_embd % 256 == 0 else Q.Q8_0)
    _add(w, written, "output_norm.weight", (n_embd,))
    _add(w, written, "output.weight", (n_embd, n_vocab), Q.Q6_K if n_embd % 256 == 0 else Q.Q8_0)
    for i in range(n_layer + nextn):
        b = f"blk.{i}."
        _add(w, written, b + "attn_norm.weight", (n_embd,))
        _add(w, written, b + "attn_q_a_norm.weight", (q_lora,))
        _add(w, written, b + "attn_kv_a_norm.weight", (kv_lora,))
        _add(w, written, b + "attn_q_a.weight", (n_embd, q_lora), Q.Q8_0)
        _add(w, written, b + "attn_q_b.weight", (q_lora, n_head * (nope + rope)), Q.Q8_0)
        _add(w, written, b + "attn_kv_a_mqa.weight", (n_embd, kv_lora + rope), Q.Q8_0)
        _add(w, written, b + "attn_k_b.weight", (nope, kv_lora, n_head), Q.Q8_0)
        _add(w, written, b + "attn_v_b.weight", (kv_lora, v_dim, n_head), Q.Q8_0)
        _add(w, written, b + "attn_output.weight", (n_head * v_dim, n_embd), Q.Q8_0)
        _add(w, written, b + "ffn_norm.weight", (n_embd,))
        if i < n_dense:
            _add(w, written, b + "ffn_gate.weight", (n_embd, n_ff), Q.Q8_0)
            _add(w, written, b + "ffn_up.weight", (n_embd, n_ff), Q.Q8_0)
            _add(w, written, b + "ffn_down.weight", (n_ff, n_embd), Q.Q8_0)
        else:
            _add(w, written, b + "ffn_gate_inp.weight", (n_embd, n_expert))
            _add(w, written, b + "exp_probs_b.bias", (n_expert,))
            _add(w, written, b + "ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), expert_type)
            _add(w, written, b + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), expert_type)
            _add(w, written, b + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), expert_type)
            _add(w, written, b + "ffn_gate_shexp.weight", (n_embd, n_ff_exp), Q.Q8_0)
            _add(w, written, b + "ffn_up_shexp.weight", (n_embd, n_ff_exp), Q.Q8_0)
            _add(w, written, b + "ffn_down_shexp.weight", (n_ff_exp, n_embd), Q.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, written


def write_gptoss(path: Path, *, n_layer=4, n_embd=64, n_head=8, n_head_kv=2, head_dim=16, n_expert=8,
                 n_used=2, n_ff_exp=64, n_vocab=96, ctx=8192, window=128):
    """A gpt-oss-like model: alternating SWA/full layers, attention sinks, expert biases, MXFP4."""
    w = GGUFWriter(str(path), "gpt-oss")
    written: list = []
    w.add_name("tiny-gpt-oss")
    w.add_block_count(n_layer)
    w.add_context_length(ctx)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff_exp)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_sliding_window(window)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_used)
    w.add_expert_feed_forward_length(n_ff_exp)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(38)
    _tokenizer(w, n_vocab)
    _add(w, written, "token_embd.weight", (n_embd, n_vocab), Q.F16)
    _add(w, written, "output_norm.weight", (n_embd,))
    _add(w, written, "output.weight", (n_embd, n_vocab), Q.F16)
    for i in range(n_layer):
        b = f"blk.{i}."
        _add(w, written, b + "attn_norm.weight", (n_embd,))
        _add(w, written, b + "post_attention_norm.weight", (n_embd,))
        _add(w, written, b + "attn_q.weight", (n_embd, n_head * head_dim), Q.F16)
        _add(w, written, b + "attn_q.bias", (n_head * head_dim,))
        _add(w, written, b + "attn_k.weight", (n_embd, n_head_kv * head_dim), Q.F16)
        _add(w, written, b + "attn_k.bias", (n_head_kv * head_dim,))
        _add(w, written, b + "attn_v.weight", (n_embd, n_head_kv * head_dim), Q.F16)
        _add(w, written, b + "attn_v.bias", (n_head_kv * head_dim,))
        _add(w, written, b + "attn_output.weight", (n_head * head_dim, n_embd), Q.F16)
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
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, written


def split_gguf(src_writer, folder: Path, n_shards: int = 3, **kw):
    """Write a model with `src_writer` and split its tensors across n_shards files named like
    llama-gguf-split does (`-00001-of-00003.gguf`, metadata only in the first)."""
    import gguf

    full, written = src_writer(folder / "full.gguf", **kw)
    reader = gguf.GGUFReader(str(full))
    arch = str(reader.fields["general.architecture"].contents())
    tensors = list(reader.tensors)
    per = -(-len(tensors) // n_shards)
    paths = []
    for s in range(n_shards):
        p = folder / f"tiny-{s + 1:05d}-of-{n_shards:05d}.gguf"
        w = GGUFWriter(str(p), arch)
        if s == 0:
            for name, field in reader.fields.items():
                if name.startswith("GGUF.") or name == "general.architecture":
                    continue
                vtype = field.types[0]
                value = field.contents()
                if vtype == gguf.GGUFValueType.ARRAY:
                    w.add_key_value(name, value, vtype, sub_type=field.types[-1])
                else:
                    w.add_key_value(name, value, vtype)
        w.add_uint16("split.no", s)
        w.add_uint16("split.count", n_shards)
        w.add_int32("split.tensors.count", len(tensors))
        for t in tensors[s * per:(s + 1) * per]:
            w.add_tensor(t.name, np.asarray(t.data), raw_shape=None if t.tensor_type in (Q.F32, Q.F16) else None,
                         raw_dtype=None if t.tensor_type in (Q.F32, Q.F16) else t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        paths.append(p)
    full.unlink()
    return paths, written
