"""One record per llama.cpp architecture: every per-architecture fact moeplan uses (pure).

The rules themselves live where their mechanism is (the converter's hyper-parameters in
synth.py, the tensor list in synth_tensors.py, the caches in archs.py, the compute graph in
memory/); this table says which rule each architecture takes, so adding an architecture is
one `Arch(...)` entry here plus its hparams/tensor functions and their tests (README: "Adding
an architecture"). Sources: llama.cpp 0c1e570 src/models/<arch>.cpp and convert_hf_to_gguf.py.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from moeplan.planner.model import hf_config as hc
from moeplan.planner.model import synth_tensors as st
from moeplan.planner.model.hf_config import HfKeys

# (index, hparams, dims, n_vocab, NextN extras, layout options) -> appends to the index
TensorBuilder = Callable[[Any, dict, dict, int, tuple, dict], None]


@dataclass(frozen=True)
class Arch:
    name: str                                   # general.architecture in the GGUF
    hf_classes: tuple[tuple[str, str], ...]     # (HF architectures[0], converter variant)
    model_types: tuple[tuple[str, str], ...]    # (HF model_type, HF class) when architectures is missing
    hparams: Callable[[dict, dict], None] | None  # config -> arch GGUF keys (set_gguf_parameters); None: common keys only
    tensors: TensorBuilder | None                 # GGUF keys -> tensor list (load_arch_tensors); None: GGUF files only
    mla: bool = False                           # MLA latent cache when the GGUF has the *_mla keys
    recurrent_hybrid: bool = False              # recurrent layers keep a fixed state per sequence
    recurrent_rule: str = "interval"            # which: "interval" (attention.recurrent_layers or every
                                                # full_attention_interval-th block attends), "mixer" (blocks
                                                # with neither KV heads nor FFN: nemotron-h.cpp), "no_kv"
                                                # (blocks with no KV head: kimi-k3.cpp)
    swa_pattern: int | None = None              # load_swa_pattern(ml, n) default, where the arch sets one
    converter_keeps_mtp: bool = False           # convert_hf_to_gguf.py writes the MTP/NextN block by default
    post_attention_norm: bool = False           # HF post_attention_layernorm -> GGUF post_attention_norm
    nextn_hidden_rows: str = ""                 # t_h_nextn kept alive: "all" tokens, "output" rows, "" none
    nextn_probs_bias_loaded: bool = False       # NextN exp_probs_b created without TENSOR_SKIP
    gated_q: bool = False                       # q projection carries the attention output gate (x2 rows)
    graph: str = ""                             # compute buffer from a mirrored graph: "dsv4", "glm-dsa"
    gating: tuple[str, bool] = ("softmax", False)  # build_moe_ffn default (gating func, normalise weights)
    activation: str = "silu"                    # expert FFN activation (LLM_FFN_*)
    router_on_logits: bool = False              # llama4: select on logits, weight before the FFN
    hf: HfKeys = HfKeys()                       # config.json names of the MoE facts (expert count, top-k, ...)


# the MoE facts under each family's config.json names (hf_config.HfKeys; defaults: TextModel's)
DEEPSEEK_KEYS = HfKeys(expert_count=("n_routed_experts",), expert_ff=("moe_intermediate_size", "intermediate_size"),
                       expert_shared_count=("n_shared_experts",), leading_dense=("first_k_dense_replace",))
QWEN_KEYS = HfKeys(expert_ff=("moe_intermediate_size",), expert_shared_ff=("shared_expert_intermediate_size",))
DENSE_WIDTH_KEYS = HfKeys(expert_ff=("intermediate_size",))  # the experts' width is intermediate_size


def _deepseek2(ix, hp, d, v, e, o):
    st._build_deepseek2(ix, hp, d, v, e, probs_bias=o.get("probs_bias", True))


def _dsa(ix, hp, d, v, e, o):
    st._build_deepseek2(ix, hp, d, v, e, indexer=True)


def _glm4moe(ix, hp, d, v, e, o):
    st._build_glm4moe(ix, hp, d, v, e, qk_norm=o.get("qk_norm", True))


def _llama4(ix, hp, d, v, e, o):
    st._build_llama4(ix, {**hp, "__rope_freqs": o.get("rope_freqs", False)}, d, v, e)


def _gemma4(ix, hp, d, v, e, o):
    st._build_gemma4(ix, hp, d, v, e, tied=o.get("tied", True), k_eq_v=o.get("k_eq_v", False))


def _step35(ix, hp, d, v, e, o):
    st._build_step35(ix, hp, d, v, e, rope_freqs=o.get("rope_freqs", False))


def _hunyuan_moe(ix, hp, d, v, e, o):
    st._build_hunyuan_moe(ix, hp, d, v, e, tied=o.get("tied", False))


def _ernie4_5_moe(ix, hp, d, v, e, o):
    st._build_ernie4_5_moe(ix, hp, d, v, e, tied=o.get("tied", False), probs_bias=o.get("probs_bias", True))


def _plain(builder: Callable[..., None], **kw: Any) -> TensorBuilder:
    return lambda ix, hp, d, v, e, o: builder(ix, hp, d, v, e, **kw)


ARCHS: dict[str, Arch] = {a.name: a for a in (
    Arch("deepseek2", (("DeepseekV2ForCausalLM", "deepseek"), ("DeepseekV3ForCausalLM", "deepseek"),
                       ("KimiK25ForConditionalGeneration", "deepseek"), ("Glm4MoeLiteForCausalLM", "glm-lite")),
         (("deepseek_v2", "DeepseekV2ForCausalLM"), ("deepseek_v3", "DeepseekV3ForCausalLM"),
          ("kimi_k2", "DeepseekV3ForCausalLM"), ("glm4_moe_lite", "Glm4MoeLiteForCausalLM")),
         hc._hp_deepseek2, _deepseek2, mla=True, nextn_hidden_rows="output",
         gating=("softmax", False), hf=DEEPSEEK_KEYS),  # V2 files; V3 files carry expert_gating_func = 2 (sigmoid)
    Arch("deepseek4", (("DeepseekV4ForCausalLM", ""),), (("deepseek_v4", "DeepseekV4ForCausalLM"),),
         hc._hp_deepseek4, _plain(st._build_deepseek4), graph="dsv4", gating=("sqrt_softplus", True),
         hf=HfKeys(expert_ff=("moe_intermediate_size",), expert_shared_count=("n_shared_experts",))),
    Arch("glm-dsa", (("GlmMoeDsaForCausalLM", ""),), (("glm_moe_dsa", "GlmMoeDsaForCausalLM"),),
         hc._hp_dsa, _dsa, mla=True, converter_keeps_mtp=True, nextn_hidden_rows="output",
         nextn_probs_bias_loaded=True, graph="glm-dsa", gating=("sigmoid", True), hf=DEEPSEEK_KEYS),
    Arch("deepseek32", (("DeepseekV32ForCausalLM", ""),), (("deepseek_v32", "DeepseekV32ForCausalLM"),),
         hc._hp_dsa, _dsa, mla=True, converter_keeps_mtp=True, nextn_hidden_rows="output",
         nextn_probs_bias_loaded=True, gating=("sigmoid", True), hf=DEEPSEEK_KEYS),
    Arch("qwen3moe", (("Qwen3MoeForCausalLM", ""),), (("qwen3_moe", "Qwen3MoeForCausalLM"),),
         hc._hp_qwen_moe, _plain(st._build_qwen3moe), gating=("softmax", True), hf=QWEN_KEYS),
    Arch("qwen2moe", (("Qwen2MoeForCausalLM", ""),), (("qwen2_moe", "Qwen2MoeForCausalLM"),),
         hc._hp_qwen_moe, None, gating=("softmax", False), hf=QWEN_KEYS),  # read from GGUF files; no profile synthesis
    Arch("qwen3next", (("Qwen3NextForCausalLM", ""),), (("qwen3_next", "Qwen3NextForCausalLM"),),
         hc._hp_qwen_hybrid, _plain(st._build_qwen_hybrid, split_ba=False), recurrent_hybrid=True,
         converter_keeps_mtp=True, post_attention_norm=True, nextn_hidden_rows="all", gated_q=True,
         gating=("softmax", True), hf=QWEN_KEYS),
    Arch("qwen35moe", (("Qwen3_5MoeForConditionalGeneration", ""), ("Qwen3_5MoeForCausalLM", "")),
         (("qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration"), ("qwen3_5_moe_text", "Qwen3_5MoeForCausalLM")),
         hc._hp_qwen_hybrid, _plain(st._build_qwen_hybrid, split_ba=True), recurrent_hybrid=True,
         converter_keeps_mtp=True, post_attention_norm=True, nextn_hidden_rows="all", gated_q=True,
         gating=("softmax", True), hf=QWEN_KEYS),
    Arch("gpt-oss", (("GptOssForCausalLM", ""),), (("gpt_oss", "GptOssForCausalLM"),),
         hc._hp_gpt_oss, _plain(st._build_gpt_oss), swa_pattern=2, post_attention_norm=True,
         nextn_hidden_rows="all", gating=("softmax_weight", False), activation="swiglu_oai", hf=DENSE_WIDTH_KEYS),
    Arch("glm4moe", (("Glm4MoeForCausalLM", ""), ("Glm4vMoeForConditionalGeneration", "")),
         (("glm4_moe", "Glm4MoeForCausalLM"),),
         hc._hp_glm4moe, _glm4moe, converter_keeps_mtp=True, post_attention_norm=True,
         nextn_hidden_rows="output", gating=("sigmoid", True),
         hf=HfKeys(expert_count=("n_routed_experts",), expert_ff=("moe_intermediate_size",),
                   expert_shared_count=("n_shared_experts",), leading_dense=("first_k_dense_replace",))),
    Arch("llama4", (("Llama4ForConditionalGeneration", ""), ("Llama4ForCausalLM", "")),
         (("llama4", "Llama4ForConditionalGeneration"), ("llama4_text", "Llama4ForCausalLM")),
         hc._hp_llama4, _llama4, swa_pattern=4, gating=("sigmoid", False), router_on_logits=True, hf=DENSE_WIDTH_KEYS),
    Arch("llama", (("MixtralForCausalLM", ""),), (("mixtral", "MixtralForCausalLM"),),
         None, _plain(st._build_llama),
         gating=("softmax", True)),
    Arch("nemotron_h_moe", (("NemotronHForCausalLM", ""),), (("nemotron_h", "NemotronHForCausalLM"),),
         hc._hp_nemotron_h, _plain(st._build_nemotron_h), recurrent_hybrid=True, recurrent_rule="mixer",
         converter_keeps_mtp=True, nextn_hidden_rows="all", gating=("sigmoid", True), activation="relu_sqr",
         hf=HfKeys(expert_count=("n_routed_experts",), expert_used_count=("num_experts_per_tok",),
                   expert_ff=("moe_intermediate_size",), expert_shared_ff=("moe_shared_expert_intermediate_size",),
                   expert_shared_count=("n_shared_experts",))),
    Arch("minimax-m2", (("MiniMaxM2ForCausalLM", ""),), (("minimax_m2", "MiniMaxM2ForCausalLM"),),
         hc._hp_minimax_m2, _plain(st._build_minimax_m2), gating=("sigmoid", True), hf=DENSE_WIDTH_KEYS),
    # kimi-k3.cpp: KDA (Kimi Delta Attention) blocks where head_count_kv is 0, MLA blocks (one
    # 576-wide latent head, no rope) on the others; sigmoid routing with weights normalised
    # (moe_renormalize), the situ activation; MXFP4 experts kept by the converter
    Arch("kimi-k3", (("KimiK3ForConditionalGeneration", ""),), (("kimi_k3", "KimiK3ForConditionalGeneration"),),
         hc._hp_kimi_k3, _plain(st._build_kimi_k3), mla=True, recurrent_hybrid=True, recurrent_rule="no_kv",
         gating=("sigmoid", True), activation="situ",
         hf=HfKeys(expert_ff=("moe_intermediate_size",), expert_shared_count=("num_shared_experts",),
                   leading_dense=("first_k_dense_replace",))),
    # gemma4.cpp: SWA per the GGUF's sliding_window_pattern array (no default pattern); the
    # final hidden state is t_h_nextn before the output rows are selected (all tokens); the
    # MoE runs beside a dense GELU MLP with softmax routing over logits computed from the
    # scaled attention output, weights normalised (build_moe_ffn norm_w = true)
    Arch("gemma4", (("Gemma4ForConditionalGeneration", ""), ("Gemma4ForCausalLM", "")),
         (("gemma4", "Gemma4ForConditionalGeneration"), ("gemma4_text", "Gemma4ForCausalLM")),
         hc._hp_gemma4, _gemma4, nextn_hidden_rows="all", gating=("softmax", True), activation="gelu",
         hf=HfKeys(expert_ff=("expert_intermediate_size", "moe_intermediate_size"))),
    # step35.cpp: SWA per the GGUF's sliding_window_pattern array, per-block head counts; the
    # converter keeps the MTP blocks (Step35Model.supports_mtp_export, block_count += n_nextn);
    # t_h_nextn is every token's final hidden state (embeddings_nextn_masked is false by
    # default); sigmoid routing with a selection bias (the loader's default when the GGUF has
    # no gating key), weights normalised by norm_expert_weight (expert_weights_norm)
    Arch("step35", (("Step3p5ForCausalLM", ""),), (("step3p5", "Step3p5ForCausalLM"),),
         hc._hp_step35, _step35, converter_keeps_mtp=True, nextn_hidden_rows="all",
         gating=("sigmoid", True),
         hf=HfKeys(expert_count=("moe_num_experts",), expert_used_count=("moe_top_k",),
                   expert_ff=("moe_intermediate_size",), expert_shared_ff=("share_expert_dim",))),
    # hunyuan-moe.cpp: plain GQA (q/k norms after rope), every block MoE beside a shared
    # expert; softmax routing with the top-k weights normalised (build_moe_ffn norm_w = true,
    # LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX)
    Arch("hunyuan-moe", (("HunYuanMoEV1ForCausalLM", ""),), (("hunyuan_v1_moe", "HunYuanMoEV1ForCausalLM"),),
         hc._hp_hunyuan_moe, _hunyuan_moe, gating=("softmax", True),
         hf=HfKeys(expert_used_count=("moe_topk",), expert_ff=("moe_intermediate_size",),
                   expert_shared_ff=("intermediate_size",), expert_shared_count=("num_shared_expert",),
                   per_layer=("moe_intermediate_size", "moe_topk", "num_shared_expert"))),
    # dots1.cpp: MHA with q/k norms (Qwen3 attention), DeepSeek-V3 routing (sigmoid scores, a
    # selection bias, weights normalised by norm_topk_prob and scaled), shared experts beside
    # the routed ones, first_k_dense_replace dense lead blocks; no MTP block
    Arch("dots1", (("Dots1ForCausalLM", ""),), (("dots1", "Dots1ForCausalLM"),),
         hc._hp_dots1, _plain(st._build_dots1), gating=("sigmoid", True),
         hf=HfKeys(expert_count=("n_routed_experts",), expert_ff=("moe_intermediate_size",),
                   expert_shared_count=("n_shared_experts",), leading_dense=("first_k_dense_replace",))),
    # ernie4-5-moe.cpp: plain GQA with full attention; build_moe_ffn with softmax gating, the
    # selection bias and normalised weights (norm_w = true); a block is MoE when
    # il >= n_layer_dense_lead and (il + 1) % n_moe_layer_step == 0; the converter drops MTP
    Arch("ernie4_5-moe", (("Ernie4_5_MoeForCausalLM", ""),), (("ernie4_5_moe", "Ernie4_5_MoeForCausalLM"),),
         hc._hp_ernie4_5_moe, _ernie4_5_moe, gating=("softmax", True),
         hf=HfKeys(expert_count=("moe_num_experts",), expert_used_count=("moe_k",),
                   expert_ff=("moe_intermediate_size",), expert_shared_count=("moe_num_shared_experts",),
                   leading_dense=("moe_layer_start_index",))),
)}


def get(arch: str) -> Arch:
    """The record of a supported architecture. Raises KeyError for any other."""
    return ARCHS[arch]


def supported() -> tuple[str, ...]:
    return tuple(ARCHS)


def by_hf_class() -> dict[str, tuple[str, str]]:
    """HF architectures[0] -> (llama.cpp arch, converter variant)."""
    return {cls: (a.name, variant) for a in ARCHS.values() for cls, variant in a.hf_classes}


def by_model_type() -> dict[str, str]:
    """HF model_type -> HF architecture class (the converter's fallback when architectures is missing)."""
    return {mt: cls for a in ARCHS.values() for mt, cls in a.model_types}


def of_config(cfg: dict[str, Any]) -> tuple[Arch, str] | None:
    """(record, converter variant) of a merged config.json, as the converter routes it: on
    architectures[0], else on model_type; None for an architecture not covered."""
    classes = by_hf_class()
    names = cfg.get("architectures") or []
    name = names[0] if names and names[0] in classes else by_model_type().get(str(cfg.get("model_type", "")))
    if name is None:
        return None
    arch, variant = classes[name]
    return ARCHS[arch], variant


def names_with(flag: str) -> frozenset[str]:
    """Architectures whose record sets `flag` (for tests and messages)."""
    return frozenset(a.name for a in ARCHS.values() if getattr(a, flag))
