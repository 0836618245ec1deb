"""Hugging Face config.json -> GGUF hyper-parameters, one function per architecture (pure).

Each `_hp_<arch>` mirrors its converter's set_gguf_parameters (llama.cpp 2026-10
conversion/{base,deepseek,glm,qwen,gpt_oss,llama,minimax,gemma,nemotron,granite,kimi_k3,step3,
hunyuan,dots1,ernie}.py) for what is not one of the MoE facts: the expert count, experts per
token, expert widths, shared experts and leading dense blocks are read through the
architecture's `HfKeys` (its record in registry.py), the one place each model's own names for
them live, so a Hugging Face folder, a bundled profile, the synthesis and the input limits all
read them alike. This module imports nothing else of moeplan.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# each MoE fact -> the GGUF key llama.cpp reads it from (llama-arch.cpp LLM_KV_*)
FACT_GGUF_KEYS: dict[str, str] = {
    "expert_count": "expert_count",
    "expert_used_count": "expert_used_count",
    "expert_ff": "expert_feed_forward_length",
    "expert_shared_ff": "expert_shared_feed_forward_length",
    "expert_shared_count": "expert_shared_count",
    "leading_dense": "leading_dense_block_count",
}


@dataclass(frozen=True)
class HfKeys:
    """The config.json keys one architecture's converter reads each MoE fact from, in its
    lookup order (find_hparam: the first key present wins, a null value counts as present).
    Defaults are conversion/base.py TextModel's. `per_layer`: keys the config gives as one
    value per layer, which the converter requires uniform and writes once."""

    expert_count: tuple[str, ...] = ("num_local_experts", "num_experts", "n_routed_experts")
    expert_used_count: tuple[str, ...] = ("num_experts_per_tok", "num_experts_per_token", "top_k_experts")
    expert_ff: tuple[str, ...] = ()
    expert_shared_ff: tuple[str, ...] = ()
    expert_shared_count: tuple[str, ...] = ()
    leading_dense: tuple[str, ...] = ()
    per_layer: tuple[str, ...] = ()

    def names(self, fact: str) -> tuple[str, ...]:
        return tuple(getattr(self, fact))

    def all_names(self) -> tuple[str, ...]:
        return tuple(k for fact in FACT_GGUF_KEYS for k in self.names(fact))

    def key_of(self, cfg: dict[str, Any], fact: str) -> str | None:
        """The config key `fact` is read from (the first present), or None."""
        return next((k for k in self.names(fact) if k in cfg), None)

    def value(self, cfg: dict[str, Any], fact: str) -> Any:
        """The config's value of `fact` (a per-layer list: its one value), or None.
        Raises ValueError for a per-layer list whose entries differ (the converter's refusal)."""
        key = self.key_of(cfg, fact)
        if key is None:
            return None
        v = cfg[key]
        if isinstance(v, (list, tuple)) and key in self.per_layer:
            if len(set(v)) != 1:
                raise ValueError(f"{key}: the converter requires one value for every layer, got {sorted(set(v))}")
            v = v[0]
        return v

    def write(self, cfg: dict[str, Any], hp: dict[str, Any]) -> None:
        """Every fact the config sets, as its GGUF key."""
        for fact, gguf_key in FACT_GGUF_KEYS.items():
            v = self.value(cfg, fact)
            if v is not None:
                hp[gguf_key] = v


def first_of(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    """convert_hf_to_gguf.py find_hparam: the first key present (None values count as present)."""
    for k in keys:
        if k in cfg:
            return cfg[k]
    return default


# containers whose top-level class the converter routes on, not text_config's architectures
# (conversion/base.py get_model_architecture: Kimi-K3's text_config says KimiLinearForCausalLM,

# containers whose top-level class the converter routes on, not text_config's architectures
# (conversion/base.py get_model_architecture: Kimi-K3's text_config says KimiLinearForCausalLM,
# the older Kimi-Linear-48B architecture, which cannot load K3)
ROOT_ROUTED = ("KimiK3ForConditionalGeneration",)


def merged_config(config: dict[str, Any]) -> dict[str, Any]:
    """TextModel.__init__: a VL container's text_config is merged over the root."""
    if isinstance(config.get("text_config"), dict):
        merged = {**config, **config["text_config"]}
        root = config.get("architectures") or []
        if root and root[0] in ROOT_ROUTED:
            merged["architectures"] = list(root)
        return merged
    return dict(config)



def _hp_deepseek2(cfg: dict[str, Any], hp: dict[str, Any]) -> None:
    """DeepseekV2Model.set_gguf_parameters: MLA becomes MQA with a 576-wide key."""
    hp["attention.head_count_kv"] = 1
    # leading_dense_block_count, when the config has no first_k_dense_replace: none with
    # routed experts, every block without
    hp.setdefault("leading_dense_block_count", 0 if hp.get("expert_count") is not None else cfg["num_hidden_layers"])
    kv_lora = cfg.get("kv_lora_rank", 512)
    hp["vocab_size"] = cfg["vocab_size"]
    if cfg.get("q_lora_rank") is not None:
        hp["attention.q_lora_rank"] = cfg["q_lora_rank"]
    hp["attention.kv_lora_rank"] = kv_lora
    hp["attention.key_length"] = kv_lora + cfg["qk_rope_head_dim"]
    hp["attention.value_length"] = kv_lora
    hp["attention.key_length_mla"] = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    hp["attention.value_length_mla"] = cfg["v_head_dim"]
    hp.setdefault("expert_shared_count", 0)
    hp["rope.dimension_count"] = cfg["qk_rope_head_dim"]


def _hp_dsa(cfg: dict[str, Any], hp: dict[str, Any]) -> None:
    """GlmMoeDsaModel / DeepseekV32Model: deepseek2 keys plus the DSA indexer."""
    _hp_deepseek2(cfg, hp)
    hp["attention.indexer.head_count"] = cfg["index_n_heads"]
    hp["attention.indexer.key_length"] = cfg["index_head_dim"]
    hp["attention.indexer.top_k"] = cfg["index_topk"]
    if cfg.get("indexer_types") is not None:
        hp["attention.indexer.types"] = [t == "full" for t in cfg["indexer_types"]]


def _hp_deepseek4(cfg: dict[str, Any], hp: dict[str, Any]) -> None:
    """DeepseekV4Model.set_gguf_parameters (conversion/deepseek.py)."""
    hp["rope.dimension_count"] = cfg["qk_rope_head_dim"]
    hp["attention.q_lora_rank"] = cfg["q_lora_rank"]
    hp["attention.sliding_window"] = cfg["sliding_window"]
    hp["attention.indexer.head_count"] = cfg["index_n_heads"]
    hp["attention.indexer.key_length"] = cfg["index_head_dim"]
    hp["attention.indexer.top_k"] = cfg["index_topk"]
    hp["attention.output_group_count"] = cfg["o_groups"]
    hp["attention.output_lora_rank"] = cfg["o_lora_rank"]
    hp["attention.compress_ratios"] = list(cfg["compress_ratios"])
    hp["hyper_connection.count"] = cfg["hc_mult"]
    hp["hash_layer_count"] = cfg["num_hash_layers"]
    hp["embedding_length_out"] = cfg["hidden_size"] * cfg["hc_mult"]


def _hp_glm4moe(cfg: dict[str, Any], hp: dict[str, Any]) -> None:
    """Glm4MoeModel.set_gguf_parameters."""
    rope_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    prf = cfg.get("partial_rotary_factor", (cfg.get("rope_parameters") or {}).get("partial_rotary_factor", 0.5))
    hp["rope.dimension_count"] = int(rope_dim * prf)


def _hp_qwen_moe(cfg: dict[str, Any], hp: dict[str, Any]) -> None:
    """Qwen2MoeModel.set_gguf_parameters (qwen2moe, qwen3moe, qwen3next, qwen35moe): the expert
    widths only (QWEN_KEYS)."""


def _hp_qwen_hybrid(cfg: dict[str, Any], hp: dict[str, Any]) -> None:
    """Qwen3NextModel.set_gguf_parameters (also Qwen3.5 MoE): gated delta net state sizes."""
    _hp_qwen_moe(cfg, hp)
    hp["ssm.conv_kernel"] = cfg["linear_conv_kernel_dim"]
    hp["ssm.state_size"] = cfg["linear_key_head_dim"]
    hp["ssm.group_count"] = cfg["linear_num_key_heads"]
    hp["ssm.time_step_rank"] = cfg["linear_num_value_heads"]
    hp["ssm.inner_size"] = cfg["linear_value_head_dim"] * cfg["linear_num_value_heads"]
    n_trunk = cfg["num_hidden_layers"]
    if cfg.get("layer_types") is not None:
        rec = [t == "linear_attention" for t in cfg["layer_types"]]
        hp["attention.recurrent_layers"] = rec + [False] * (hp["block_count"] - n_trunk)
    hp["full_attention_interval"] = cfg.get("full_attention_interval", 4)


def _hp_nemotron_h(cfg: dict[str, Any], hp: dict[str, Any]) -> None:
    """NemotronHModel.set_gguf_parameters (conversion/nemotron.py, over GraniteHybridModel in
    conversion/granite.py) for the MoE variant (nemotron_h_moe: the config has num_experts_per_tok).

    hybrid_override_pattern gives one letter per block: M a Mamba-2 mixer, * attention, E a
    MoE FFN (every block is one of the three, with its own residual). The converter writes
    that pattern as two per-block arrays - head_count_kv (num_key_value_heads on attention
    blocks, 0 elsewhere) and feed_forward_length (moe_intermediate_size on E blocks, 0
    elsewhere) - from which llama.cpp's nemotron-h.cpp load_arch_hparams derives the recurrent
    blocks (n_head_kv == 0 and n_ff == 0). The MTP block appended past the trunk counts as both
    an attention and a MoE block. Mamba sizes: d_inner = mamba_num_heads x mamba_head_dim
    (find_hparam(["num_heads"]) x d_model, d_model being mamba_head_dim), dt_rank =
    mamba_num_heads. No rope on a hybrid: context_length is written as 2**20."""
    pattern = cfg.get("hybrid_override_pattern") or cfg.get("layers_block_type") or ""
    n_blocks = int(hp["block_count"])
    n_trunk = n_blocks - int(hp.get("nextn_predict_layers", 0) or 0)
    if isinstance(pattern, str):
        attn = [c == "*" for c in pattern]
        mlp = [c == "E" for c in pattern]
    else:
        attn = [t in ("attention", "full_attention") for t in pattern]
        mlp = [t == "moe" for t in pattern]
    if len(attn) != n_trunk:
        raise ValueError(f"hybrid_override_pattern has {len(attn)} blocks, num_hidden_layers {n_trunk}")
    attn += [True] * (n_blocks - n_trunk)  # the folded MTP block: attention and MoE sub-layers
    mlp += [True] * (n_blocks - n_trunk)
    n_ff_exp = hp["expert_feed_forward_length"]
    hp["context_length"] = 2 ** 20
    hp["attention.key_length"] = cfg["head_dim"]
    hp["attention.value_length"] = cfg["head_dim"]
    hp["attention.head_count_kv"] = [cfg["num_key_value_heads"] if a else 0 for a in attn]
    hp["feed_forward_length"] = [n_ff_exp if m else 0 for m in mlp]
    hp["expert_weights_norm"] = bool(cfg["norm_topk_prob"])
    hp["expert_weights_scale"] = cfg["routed_scaling_factor"]
    hp["expert_group_count"] = cfg["n_group"]
    if cfg.get("moe_latent_size") is not None:
        hp["moe_latent_size"] = cfg["moe_latent_size"]
    n_heads = first_of(cfg, "num_heads", "mamba_num_heads")
    hp["ssm.conv_kernel"] = first_of(cfg, "conv_kernel", "d_conv")
    hp["ssm.state_size"] = first_of(cfg, "state_size", "d_state", "state_dim", "ssm_state_size")
    hp["ssm.group_count"] = first_of(cfg, "n_groups", "num_groups")
    hp["ssm.inner_size"] = n_heads * first_of(cfg, "mamba_head_dim", "hidden_size", "d_model")
    hp["ssm.time_step_rank"] = first_of(cfg, "n_heads", "num_heads", "mamba_n_heads", "mamba_num_heads")


def _hp_kimi_k3(cfg: dict[str, Any], hp: dict[str, Any]) -> None:
    """KimiK3Model.set_gguf_parameters (conversion/kimi_k3.py) on the merged text_config.

    Hybrid: linear_attn_config.full_attn_layers (1-indexed) are MLA blocks, served as MQA with
    one head of kv_lora_rank + qk_rope_head_dim (num_key_value_heads forced to 1), every other
    block is KDA (Kimi Delta Attention) and written with head_count_kv 0, which kimi-k3.cpp
    load_arch_hparams reads as recurrent. KDA: short-conv kernel and head_dim (d_inner =
    num_attention_heads x head_dim). MoE: sigmoid router, routed experts in a latent space of
    routed_expert_hidden_size (expert_latent_length), shared width moe_intermediate_size x
    num_shared_experts (kimi-k3.cpp), first_k_dense_replace dense lead blocks; the situ
    activation and the cross-layer attention residual (attn_res.block_size) keys."""
    la = cfg["linear_attn_config"]
    full = set(int(x) for x in la["full_attn_layers"])
    n_trunk = int(cfg["num_hidden_layers"])
    kv_lora, rope = int(cfg["kv_lora_rank"]), int(cfg["qk_rope_head_dim"])
    hp["vocab_size"] = cfg["vocab_size"]
    hp["attention.head_count_kv"] = [1 if (il + 1) in full else 0 for il in range(n_trunk)]
    hp["ssm.conv_kernel"] = la["short_conv_kernel_size"]
    hp["kda.head_dim"] = la["head_dim"]
    if la.get("gate_lower_bound") is not None:
        hp["kda.gate_lower_bound"] = la["gate_lower_bound"]
    if cfg.get("q_lora_rank") is not None:
        hp["attention.q_lora_rank"] = cfg["q_lora_rank"]
    hp["attention.kv_lora_rank"] = kv_lora
    hp["rope.dimension_count"] = rope
    hp["attention.key_length"] = kv_lora + rope
    hp["attention.value_length"] = kv_lora
    hp["attention.key_length_mla"] = cfg["qk_nope_head_dim"] + rope
    hp["attention.value_length_mla"] = cfg["v_head_dim"]
    hp["expert_weights_scale"] = cfg["routed_scaling_factor"]
    hp["expert_weights_norm"] = bool(cfg["moe_renormalize"])
    hp["expert_gating_func"] = 2  # LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID (asserted by the converter)
    if cfg.get("routed_expert_hidden_size") is not None:
        hp["expert_latent_length"] = cfg["routed_expert_hidden_size"]
    hp["activation.situ_beta"] = cfg["activation_situ_beta"]
    hp["activation.situ_linear_beta"] = cfg["activation_situ_linear_beta"]
    hp["attn_res.block_size"] = cfg["attn_res_block_size"]


def _hp_gpt_oss(cfg: dict[str, Any], hp: dict[str, Any]) -> None:
    hp["attention.sliding_window"] = cfg["sliding_window"]


def _hp_llama4(cfg: dict[str, Any], hp: dict[str, Any]) -> None:
    """Llama4Model: intermediate_size is the expert width, intermediate_size_mlp the dense one."""
    hp["feed_forward_length"] = cfg["intermediate_size_mlp"]
    hp["interleave_moe_layer_step"] = cfg["interleave_moe_layer_step"]
    if "layer_types" in cfg and all(t == "full_attention" for t in cfg["layer_types"]):
        hp["attention.sliding_window"] = 0


def _hp_minimax_m2(cfg: dict[str, Any], hp: dict[str, Any]) -> None:
    hp["rope.dimension_count"] = cfg["rotary_dim"]


def _hp_gemma4(cfg: dict[str, Any], hp: dict[str, Any]) -> None:
    """Gemma3Model + Gemma4Model.set_gguf_parameters (conversion/gemma.py): a per-layer SWA
    array from layer_types, the global layers' head size (global_head_dim) as key_length and
    the sliding layers' (head_dim) as key_length_swa, a per-layer KV head count when the
    global layers have their own (num_global_key_value_heads), the dense MLP as
    feed_forward_length (doubled on KV-shared layers with use_double_wide_mlp) and the experts
    as expert_feed_forward_length."""
    hp["context_length"] = cfg.get("max_position_embeddings", 131072)
    hp["attention.head_count"] = cfg.get("num_attention_heads", 8)
    hp["attention.head_count_kv"] = cfg.get("num_key_value_heads", 4)
    if cfg.get("final_logit_softcapping"):
        hp["final_logit_softcapping"] = cfg["final_logit_softcapping"]
    if cfg.get("sliding_window_pattern") != 1:
        hp["attention.sliding_window"] = cfg["sliding_window"]
    n_shared_kv = int(cfg.get("num_kv_shared_layers") or 0)
    hp["attention.shared_kv_layers"] = n_shared_kv
    hp["embedding_length_per_layer_input"] = cfg.get("hidden_size_per_layer_input") or 0
    swa = [t == "sliding_attention" for t in cfg["layer_types"]]
    hp["attention.sliding_window_pattern"] = swa
    def full_layer(key: str) -> Any:
        """per_layer_config's value of the first full-attention layer that says it."""
        return next((lc[key] for il, lc in (cfg.get("per_layer_config") or {}).items()
                     if int(il) < len(swa) and not swa[int(il)] and key in lc), None)

    head_full = cfg.get("global_head_dim")
    if head_full is None:
        head_full = full_layer("head_dim")
    hp["attention.key_length"] = hp["attention.value_length"] = head_full
    hp["attention.key_length_swa"] = hp["attention.value_length_swa"] = cfg["head_dim"]
    if cfg.get("use_double_wide_mlp"):
        n_ff, first_shared = cfg["intermediate_size"], hp["block_count"] - n_shared_kv
        hp["feed_forward_length"] = [n_ff if il < first_shared else 2 * n_ff for il in range(hp["block_count"])]
    kv_full = cfg.get("num_global_key_value_heads")
    if kv_full is None:
        kv_full = full_layer("num_key_value_heads")
    kv_swa = cfg.get("num_key_value_heads")
    if kv_full is not None and kv_swa is not None:
        hp["attention.head_count_kv"] = [kv_swa if s else kv_full for s in swa]
    prf_swa = (cfg.get("rope_parameters") or {}).get("sliding_attention", {}).get("partial_rotary_factor", 1.0)
    hp["rope.dimension_count"] = int(head_full)
    hp["rope.dimension_count_swa"] = int(cfg["head_dim"] * prf_swa)


def _hp_step35(cfg: dict[str, Any], hp: dict[str, Any]) -> None:
    """Step35Model.set_gguf_parameters (conversion/step3.py): layer_types padded to the block
    count with full_attention (the MTP blocks past num_hidden_layers keep their own entries
    where the config lists them) gives the per-block SWA array and per-block head counts -
    sliding blocks take attention_other_setting's num_attention_heads / num_attention_groups,
    full blocks num_attention_heads / num_attention_groups; value_length = head_dim; the
    experts (moe_num_experts, moe_top_k, moe_intermediate_size), the shared expert
    (share_expert_dim), the router scale and normalisation; leading_dense_block_count = the
    first index of moe_layers_enum."""
    n_blocks = int(hp["block_count"])
    types = list(cfg.get("layer_types") or [])
    types = (types + ["full_attention"] * (n_blocks - len(types)))[:n_blocks]
    other = cfg.get("attention_other_setting") or {}
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_attention_groups"]
    n_head_swa = other.get("num_attention_heads", n_head)
    n_kv_swa = other.get("num_attention_groups", n_kv)
    swa = [t == "sliding_attention" for t in types]
    hp["attention.head_count"] = [n_head_swa if s else n_head for s in swa]
    hp["attention.head_count_kv"] = [n_kv_swa if s else n_kv for s in swa]
    hp["attention.sliding_window"] = cfg["sliding_window"]
    hp["attention.sliding_window_pattern"] = swa
    hp["attention.value_length"] = cfg["head_dim"]
    if cfg.get("moe_router_scaling_factor") is not None:
        hp["expert_weights_scale"] = cfg["moe_router_scaling_factor"]
    if cfg.get("norm_expert_weight") is not None:
        hp["expert_weights_norm"] = bool(cfg["norm_expert_weight"])
    leading = 0
    enum = cfg.get("moe_layers_enum")
    if isinstance(enum, str) and enum.strip():
        leading = max(0, min(int(i) for i in enum.strip().split(",")))
    hp["leading_dense_block_count"] = leading
    hp["moe_every_n_layers"] = int(cfg.get("moe_every_n_layer", 1))


def _hp_hunyuan_moe(cfg: dict[str, Any], hp: dict[str, Any]) -> None:
    """HunYuanMoEModel.set_gguf_parameters (conversion/hunyuan.py): the shared expert's width is
    intermediate_size; moe_intermediate_size, moe_topk and num_shared_expert are per-layer
    lists the converter requires uniform and writes once (their first entry); with the
    'dynamic' (NTK-alpha) rope scaling it writes context_length 262144 (256K: the config's
    max_position_embeddings says 32768) and scales the rope base by alpha^(d/(d-2))."""
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if str(rope.get("rope_type", rope.get("type", ""))) == "dynamic":
        alpha = float(rope.get("alpha", 1000))
        base = float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
        dim = cfg["hidden_size"] // cfg["num_attention_heads"]
        hp["rope.freq_base"] = base * alpha ** (dim / (dim - 2))
        hp["context_length"] = 256 * 1024


def _hp_dots1(cfg: dict[str, Any], hp: dict[str, Any]) -> None:
    """Dots1Model.set_gguf_parameters (conversion/dots1.py, over Qwen2MoeModel): the expert
    width (moe_intermediate_size), first_k_dense_replace dense lead blocks, n_shared_experts
    shared experts of that width, routed_scaling_factor and norm_topk_prob; expert_count from
    n_routed_experts (the converter copies it to num_experts). The gating key: dots1.cpp
    load_arch_hparams reads expert_gating_func without a default and build_moe_ffn aborts on
    NONE (llama-graph.cpp), so every dots1 GGUF that runs carries 2 (sigmoid): the router is
    DeepSeek-V3's (sigmoid scores, e_score_correction_bias for selection; transformers
    modular_dots1.py Dots1TopkRouter). The converter llama.cpp 0c1e570 vendors maps
    scoring_func through base.py, which rejects the published config's "noaux_tc"; the one of
    llama.cpp PR #14118 (which made the published GGUFs) wrote SIGMOID for it."""
    hp["expert_weights_scale"] = cfg["routed_scaling_factor"]
    hp["expert_weights_norm"] = bool(cfg["norm_topk_prob"])
    hp["expert_gating_func"] = 2  # LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID


def _hp_ernie4_5_moe(cfg: dict[str, Any], hp: dict[str, Any]) -> None:
    """Ernie4_5MoeModel.set_gguf_parameters (conversion/ernie.py): the experts (moe_num_experts,
    moe_k, moe_intermediate_size), interleave_moe_layer_step = moe_layer_interval,
    leading_dense_block_count = moe_layer_start_index, expert_shared_count =
    moe_num_shared_experts and, where it is above 0, expert_shared_feed_forward_length =
    intermediate_size // num_key_value_heads (the converter's own formula: 12288 // 4 = 3072 =
    2 shared experts of 1536 for the 21B). The MTP block is dropped (filter_tensors)."""
    hp["interleave_moe_layer_step"] = cfg["moe_layer_interval"]
    shared = hp.get("expert_shared_count")
    if shared is not None:
        if shared > 0 and cfg.get("intermediate_size") is not None and cfg.get("num_key_value_heads") is not None:
            hp["expert_shared_feed_forward_length"] = cfg["intermediate_size"] // cfg["num_key_value_heads"]
