"""Hugging Face config -> GGUF hyper-parameters -> tensor index, as llama.cpp builds them.

Two pure steps, so a bundled profile, a Hugging Face folder and a GGUF file all reach
`build_model_spec` through the same code:

1. `gguf_hparams(config)` maps a config.json (with a VL container's `text_config` merged to
   the root, as convert_hf_to_gguf.py does) to the keys convert_hf_to_gguf.py / conversion/*.py
   write, without the `{arch}.` prefix ('block_count', 'attention.head_count_kv', ...).
2. `tensor_specs(arch, hp)` lists the tensors of such a GGUF with their ggml shapes (ne0 first)
   as llama.cpp's src/models/<arch>.cpp `load_arch_tensors` creates them, in the layout the
   converter writes (separate q/k/v and gate/up, MLA kv_b split into k_b and v_b).

Each TensorSpec carries a `role` that the quant recipes (quants.py) and the checkpoint-format
rules key on. What differs per architecture is its record's (registry.py): the config names of
the MoE facts (`hf`), the converter's other keys (`hparams`, hf_config.py, from llama.cpp's
conversion/*.py) and the tensor builder (`tensors`, synth_tensors.py, from src/models/<arch>.cpp).
"""
from __future__ import annotations

from typing import Any

from moeplan.planner.model import registry
from moeplan.planner.model.hf_config import first_of, merged_config
from moeplan.planner.model.spec import ROLES, TensorSpec
from moeplan.planner.model.synth_tensors import Index, dims

__all__ = ["ROLES", "TensorSpec", "gguf_hparams", "tensor_specs", "arch_of_config", "keeps_mtp", "merged_config"]


def arch_of_config(cfg: dict[str, Any]) -> tuple[str, str]:
    """(llama.cpp arch, converter variant). Raises KeyError for an architecture not covered."""
    found = registry.of_config(cfg)
    if found is None:
        raise KeyError(str((cfg.get("architectures") or [cfg.get("model_type")])[0]))
    return found[0].name, found[1]


def keeps_mtp(arch: str, variant: str) -> bool:
    """Whether convert_hf_to_gguf.py writes the MTP/NextN block (by default, no --no-mtp)."""
    rec = registry.get(arch)
    return rec.converter_keeps_mtp or variant in rec.keeps_mtp_variants


def n_mtp_layers(cfg: dict[str, Any], n_mtp: int | None) -> int:
    """MTP blocks of the checkpoint: num_nextn_predict_layers or mtp_num_hidden_layers."""
    v = first_of(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers")
    if v is None:
        v = n_mtp or 0
    return int(v)


# ---- step 1: config.json -> GGUF hyper-parameters --------------------------------------------

def _common(cfg: dict[str, Any], n_blocks: int) -> dict[str, Any]:
    """TextModel.set_gguf_parameters (conversion/base.py), the MoE facts aside (HfKeys.write)."""
    hp: dict[str, Any] = {"block_count": n_blocks}
    for key, names in (
        ("context_length", ("max_position_embeddings", "n_ctx", "n_positions", "max_length",
                            "max_sequence_length", "model_max_length")),
        ("embedding_length", ("hidden_size", "n_embd", "dim")),
        ("feed_forward_length", ("prefix_dense_intermediate_size", "dense_intermediate_size",
                                 "intermediate_size", "n_inner", "hidden_dim")),
        ("attention.head_count", ("num_attention_heads", "n_head", "n_heads")),
        ("attention.head_count_kv", ("num_key_value_heads", "n_kv_heads")),
    ):
        v = first_of(cfg, *names)
        if v is not None:
            hp[key] = v
    if cfg.get("head_dim") is not None:
        hp["attention.key_length"] = cfg["head_dim"]
        hp["attention.value_length"] = cfg["head_dim"]
    return hp


def gguf_hparams(config: dict[str, Any], *, keep_mtp: bool | None = None,
                 n_mtp: int | None = None) -> tuple[str, dict[str, Any]]:
    """(llama.cpp architecture, GGUF hyper-parameters) the converter writes for `config`.

    keep_mtp: None follows the converter (deepseek2 and deepseek4 drop the MTP block, glm4moe,
    glm-dsa, deepseek32, GLM-4.7-Flash, qwen3next and qwen35moe keep it); True keeps it (the
    layout of the published checkpoint). n_mtp: MTP block count when the config does not say
    (Qwen3-Next: the converter counts the mtp.* tensors of the checkpoint).
    """
    cfg = merged_config(config)
    arch, variant = arch_of_config(cfg)
    keep = keeps_mtp(arch, variant) if keep_mtp is None else keep_mtp
    n_trunk = int(first_of(cfg, "n_layers", "num_hidden_layers", "n_layer", "num_layers"))
    mtp = n_mtp_layers(cfg, n_mtp) if keep else 0
    hp = _common(cfg, n_trunk + mtp)
    if mtp:
        hp["nextn_predict_layers"] = mtp
    rec = registry.get(arch)
    rec.hf.write(cfg, hp)  # the MoE facts under the architecture's own config names
    builder = rec.hparams
    if builder is not None:
        builder(cfg, hp)
    return arch, hp


# ---- step 2: hyper-parameters -> tensor index -----------------------------------------------

def layout_options(config: dict[str, Any]) -> dict[str, bool]:
    """Tensor-presence switches a config decides but no GGUF key records.

    probs_bias: exp_probs_b (e_score_correction_bias) exists for noaux_tc routing (DeepSeek V3,
      Kimi K2, GLM), not for DeepSeek V2's greedy / group-limited routing.
    qk_norm: GLM-4.5 has q/k norms, GLM-4.5-Air (use_qk_norm false) has none.
    rope_freqs: llama3-type rope scaling makes the converter write rope_freqs.weight.
    tied: no lm_head (tie_word_embeddings): llama.cpp uses token_embd as the output (Gemma's
      default is tied).
    k_eq_v: Gemma 4's attention_k_eq_v: the full-attention layers have no v_proj (V = K).
    """
    cfg = merged_config(config)
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    rope_type = str(rope.get("rope_type", rope.get("type", "")) or "").lower()
    return {
        "probs_bias": cfg.get("topk_method", "noaux_tc") == "noaux_tc",
        "qk_norm": bool(cfg.get("use_qk_norm", True)),
        "rope_freqs": rope_type == "llama3",
        "tied": bool(cfg.get("tie_word_embeddings", str(cfg.get("model_type", "")).startswith("gemma"))),
        "k_eq_v": bool(cfg.get("attention_k_eq_v", False)),
    }


def tensor_specs(arch: str, hp: dict[str, Any], *, n_vocab: int,
                 mtp_tensors: tuple[str, ...] = ("eh_proj", "enorm", "hnorm", "shared_head_norm"),
                 options: dict[str, bool] | None = None) -> list[TensorSpec]:
    """Every tensor of the GGUF `gguf_hparams` describes, as load_arch_tensors creates it.

    mtp_tensors: which NextN extras the checkpoint carries (llama.cpp marks embed_tokens,
    shared_head_head and shared_head_norm optional; DeepSeek V3 carries all four, GLM 4.6+
    not the first two). options: see layout_options.
    """
    builder = registry.ARCHS[arch].tensors if arch in registry.ARCHS else None
    if builder is None:
        raise KeyError(arch)
    ix = Index()
    builder(ix, hp, dims(hp), n_vocab, mtp_tensors, options or {})
    return ix.out
