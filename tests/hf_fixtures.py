"""Tiny Hugging Face model folders written in tmp_path with the safetensors package.

Each builder returns {hf_name: (dtype, hf_shape)} in the checkpoint's own layout (row-major
[out, in] matrices, per-expert tensors, FP8 weight_scale_inv, MXFP4 blocks/scales), so tests
can assert what moeplan reads against an independent sum over what was written.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file

DTYPES = {
    "BF16": torch.bfloat16, "F32": torch.float32, "F16": torch.float16, "F8_E4M3": torch.float8_e4m3fn,
    "U8": torch.uint8, "I8": torch.int8, "I64": torch.int64, "F8_E8M0": torch.float8_e8m0fnu,
}
ITEM = {"BF16": 2, "F32": 4, "F16": 2, "F8_E4M3": 1, "U8": 1, "I8": 1, "I64": 8, "F8_E8M0": 1}


def nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    return math.prod(shape) * ITEM[dtype]


def write_hf_folder(path: Path, config: dict, tensors: dict[str, tuple[str, tuple[int, ...]]],
                    n_shards: int = 2, index: bool = True) -> Path:
    """config.json + tensors spread over n_shards safetensors files (+ the index)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    names = list(tensors)
    weight_map = {}
    for s in range(n_shards):
        part = names[s::n_shards]
        fname = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        data = {n: torch.zeros(tensors[n][1], dtype=DTYPES[tensors[n][0]]) for n in part}
        save_file(data, str(path / fname))
        weight_map.update({n: fname for n in part})
    if index:
        total = sum(nbytes(*tensors[n]) for n in names)
        (path / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    return path


def _fp8(out: dict, name: str, rows: int, cols: int) -> None:
    """An FP8 e4m3 Linear with DeepSeek-style float32 128x128 block scales."""
    out[name + ".weight"] = ("F8_E4M3", (rows, cols))
    out[name + ".weight_scale_inv"] = ("F32", (math.ceil(rows / 128), math.ceil(cols / 128)))


DEEPSEEK_TINY = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "num_hidden_layers": 3,
    "first_k_dense_replace": 1, "hidden_size": 256, "intermediate_size": 384, "moe_intermediate_size": 128,
    "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1, "num_attention_heads": 4,
    "num_key_value_heads": 4, "q_lora_rank": 192, "kv_lora_rank": 128, "qk_rope_head_dim": 32,
    "qk_nope_head_dim": 64, "v_head_dim": 64, "vocab_size": 320, "num_nextn_predict_layers": 1,
    "topk_method": "noaux_tc", "max_position_embeddings": 4096, "tie_word_embeddings": False,
}


def deepseek_fp8_tensors(cfg: dict = DEEPSEEK_TINY) -> dict[str, tuple[str, tuple[int, ...]]]:
    """DeepSeek V3 checkpoint layout: FP8 linears, bf16 embed/head/router/norms, f32 bias, MTP."""
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    heads, ql, kvl = cfg["num_attention_heads"], cfg["q_lora_rank"], cfg["kv_lora_rank"]
    rope, nope, vd = cfg["qk_rope_head_dim"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    t: dict[str, tuple[str, tuple[int, ...]]] = {
        "model.embed_tokens.weight": ("BF16", (v, h)), "model.norm.weight": ("BF16", (h,)),
        "lm_head.weight": ("BF16", (v, h)),
    }
    n_trunk = cfg["num_hidden_layers"]
    for il in range(n_trunk + cfg["num_nextn_predict_layers"]):
        p = f"model.layers.{il}."
        t[p + "input_layernorm.weight"] = ("BF16", (h,))
        t[p + "post_attention_layernorm.weight"] = ("BF16", (h,))
        t[p + "self_attn.q_a_layernorm.weight"] = ("BF16", (ql,))
        t[p + "self_attn.kv_a_layernorm.weight"] = ("BF16", (kvl,))
        _fp8(t, p + "self_attn.q_a_proj", ql, h)
        _fp8(t, p + "self_attn.q_b_proj", heads * (nope + rope), ql)
        _fp8(t, p + "self_attn.kv_a_proj_with_mqa", kvl + rope, h)
        _fp8(t, p + "self_attn.kv_b_proj", heads * (nope + vd), kvl)
        _fp8(t, p + "self_attn.o_proj", h, heads * vd)
        if il < cfg["first_k_dense_replace"]:
            ff = cfg["intermediate_size"]
            _fp8(t, p + "mlp.gate_proj", ff, h)
            _fp8(t, p + "mlp.up_proj", ff, h)
            _fp8(t, p + "mlp.down_proj", h, ff)
        else:
            ff, n_e = cfg["moe_intermediate_size"], cfg["n_routed_experts"]
            t[p + "mlp.gate.weight"] = ("BF16", (n_e, h))
            t[p + "mlp.gate.e_score_correction_bias"] = ("F32", (n_e,))
            for e in range(n_e):
                _fp8(t, p + f"mlp.experts.{e}.gate_proj", ff, h)
                _fp8(t, p + f"mlp.experts.{e}.up_proj", ff, h)
                _fp8(t, p + f"mlp.experts.{e}.down_proj", h, ff)
            sh = ff * cfg["n_shared_experts"]
            _fp8(t, p + "mlp.shared_experts.gate_proj", sh, h)
            _fp8(t, p + "mlp.shared_experts.up_proj", sh, h)
            _fp8(t, p + "mlp.shared_experts.down_proj", h, sh)
        if il >= n_trunk:  # the MTP module: own embedding and head copies
            _fp8(t, p + "eh_proj", h, 2 * h)
            t[p + "enorm.weight"] = ("BF16", (h,))
            t[p + "hnorm.weight"] = ("BF16", (h,))
            t[p + "embed_tokens.weight"] = ("BF16", (v, h))
            t[p + "shared_head.norm.weight"] = ("BF16", (h,))
            t[p + "shared_head.head.weight"] = ("BF16", (v, h))
    return t


GPT_OSS_TINY = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 2,
    "hidden_size": 128, "intermediate_size": 64, "num_local_experts": 4, "num_experts_per_tok": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "sliding_window": 128,
    "vocab_size": 256, "max_position_embeddings": 4096, "tie_word_embeddings": False,
    "quantization_config": {"quant_method": "mxfp4"},
}


def gpt_oss_tensors(cfg: dict = GPT_OSS_TINY) -> dict[str, tuple[str, tuple[int, ...]]]:
    """gpt-oss layout: fused gate_up MXFP4 blocks/scales (uint8) + bf16 biases and attention."""
    h, v, ff, n_e = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"], cfg["num_local_experts"]
    hd, nh, nkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    t = {"model.embed_tokens.weight": ("BF16", (v, h)), "model.norm.weight": ("BF16", (h,)),
         "lm_head.weight": ("BF16", (v, h))}
    for il in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{il}."
        t[p + "input_layernorm.weight"] = ("BF16", (h,))
        t[p + "post_attention_layernorm.weight"] = ("BF16", (h,))
        for proj, rows in (("q_proj", nh * hd), ("k_proj", nkv * hd), ("v_proj", nkv * hd)):
            t[p + f"self_attn.{proj}.weight"] = ("BF16", (rows, h))
            t[p + f"self_attn.{proj}.bias"] = ("BF16", (rows,))
        t[p + "self_attn.o_proj.weight"] = ("BF16", (h, nh * hd))
        t[p + "self_attn.o_proj.bias"] = ("BF16", (h,))
        t[p + "self_attn.sinks"] = ("BF16", (nh,))
        t[p + "mlp.router.weight"] = ("BF16", (n_e, h))
        t[p + "mlp.router.bias"] = ("BF16", (n_e,))
        t[p + "mlp.experts.gate_up_proj_blocks"] = ("U8", (n_e, 2 * ff, h // 32, 16))
        t[p + "mlp.experts.gate_up_proj_scales"] = ("U8", (n_e, 2 * ff, h // 32))
        t[p + "mlp.experts.gate_up_proj_bias"] = ("BF16", (n_e, 2 * ff))
        t[p + "mlp.experts.down_proj_blocks"] = ("U8", (n_e, h, ff // 32, 16))
        t[p + "mlp.experts.down_proj_scales"] = ("U8", (n_e, h, ff // 32))
        t[p + "mlp.experts.down_proj_bias"] = ("BF16", (n_e, h))
    return t


QWEN35_TINY = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
    "text_config": {
        "model_type": "qwen3_5_moe_text", "num_hidden_layers": 4, "hidden_size": 128,
        "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "num_experts": 8,
        "num_experts_per_tok": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"], "full_attention_interval": 4,
        "linear_num_key_heads": 2, "linear_key_head_dim": 16, "linear_num_value_heads": 4,
        "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "vocab_size": 256,
        "mtp_num_hidden_layers": 1, "max_position_embeddings": 8192,
    },
    "vision_config": {"depth": 1, "hidden_size": 32},
    "tie_word_embeddings": False,
}


def qwen35_tensors(cfg: dict = QWEN35_TINY) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Qwen3.5 MoE container: language_model.* layers (delta-net + attention), mtp.*, visual.*."""
    c = cfg["text_config"]
    h, v, ff, n_e = c["hidden_size"], c["vocab_size"], c["moe_intermediate_size"], c["num_experts"]
    hd, nh, nkv = c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    kd, nk, vd, nv = c["linear_key_head_dim"], c["linear_num_key_heads"], c["linear_value_head_dim"], c["linear_num_value_heads"]
    t = {"model.language_model.embed_tokens.weight": ("BF16", (v, h)),
         "model.language_model.norm.weight": ("BF16", (h,)), "lm_head.weight": ("BF16", (v, h)),
         "model.visual.blocks.0.attn.qkv.weight": ("BF16", (96, 32)),
         "mtp.fc.weight": ("BF16", (h, 2 * h)), "mtp.pre_fc_norm_embedding.weight": ("BF16", (h,)),
         "mtp.pre_fc_norm_hidden.weight": ("BF16", (h,)), "mtp.norm.weight": ("BF16", (h,))}

    def block(p: str, recurrent: bool) -> None:
        t[p + "input_layernorm.weight"] = ("BF16", (h,))
        t[p + "post_attention_layernorm.weight"] = ("BF16", (h,))
        if recurrent:
            t[p + "linear_attn.in_proj_qkv.weight"] = ("BF16", (2 * nk * kd + nv * vd, h))
            t[p + "linear_attn.in_proj_z.weight"] = ("BF16", (nv * vd, h))
            t[p + "linear_attn.in_proj_a.weight"] = ("BF16", (nv, h))
            t[p + "linear_attn.in_proj_b.weight"] = ("BF16", (nv, h))
            t[p + "linear_attn.conv1d.weight"] = ("BF16", (2 * nk * kd + nv * vd, 1, c["linear_conv_kernel_dim"]))
            t[p + "linear_attn.dt_bias"] = ("BF16", (nv,))
            t[p + "linear_attn.A_log"] = ("F32", (nv,))
            t[p + "linear_attn.norm.weight"] = ("F32", (vd,))
            t[p + "linear_attn.out_proj.weight"] = ("BF16", (h, nv * vd))
        else:
            t[p + "self_attn.q_proj.weight"] = ("BF16", (2 * nh * hd, h))
            t[p + "self_attn.k_proj.weight"] = ("BF16", (nkv * hd, h))
            t[p + "self_attn.v_proj.weight"] = ("BF16", (nkv * hd, h))
            t[p + "self_attn.o_proj.weight"] = ("BF16", (h, nh * hd))
            t[p + "self_attn.q_norm.weight"] = ("BF16", (hd,))
            t[p + "self_attn.k_norm.weight"] = ("BF16", (hd,))
        t[p + "mlp.gate.weight"] = ("BF16", (n_e, h))
        t[p + "mlp.experts.gate_up_proj"] = ("BF16", (n_e, 2 * ff, h))
        t[p + "mlp.experts.down_proj"] = ("BF16", (n_e, h, ff))
        t[p + "mlp.shared_expert.gate_proj.weight"] = ("BF16", (ff, h))
        t[p + "mlp.shared_expert.up_proj.weight"] = ("BF16", (ff, h))
        t[p + "mlp.shared_expert.down_proj.weight"] = ("BF16", (h, ff))
        t[p + "mlp.shared_expert_gate.weight"] = ("BF16", (1, h))

    for il, kind in enumerate(c["layer_types"]):
        block(f"model.language_model.layers.{il}.", kind == "linear_attention")
    block("mtp.layers.0.", False)
    return t
