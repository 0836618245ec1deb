"""One record per llama.cpp architecture: every per-architecture fact moeplan uses (pure).

A record (`Arch`) owns, for its architecture:
  - the Hugging Face classes and model types it converts from, and its config.json names for
    the MoE facts (`hf`: expert count, experts per token, expert and shared-expert widths,
    shared experts, leading dense blocks, per-layer lists): probes/hf.py (a folder),
    profiles/model_profiles.py (`moeplan models`), synth.py (synthesis) and limits.py (input
    checks) all read them here;
  - its GGUF keys: `hparams` (hf_config.py), the converter's set_gguf_parameters for the rest;
  - its tensor builder (`tensors`, synth_tensors.py): the tensors load_arch_tensors creates;
  - its cache rules (mla, recurrent_rule, swa_pattern, ...: applied by archs.py);
  - its graph's CPU barriers (`barriers`, `dense_lead_barriers`, `expert_split_barriers`:
    applied by planner/cost/graph.py) and routing (`gating`, `activation`).
Adding an architecture is one `Arch(...)` entry here plus its hparams and tensor functions,
a bundled profile and its conformance case (README: "Adding an architecture"). Sources:
llama.cpp 0c1e570 src/models/<arch>.cpp and convert_hf_to_gguf.py / conversion/*.py.
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
    """One GGUF architecture: how its Hugging Face config and tensors map to moeplan's model description."""

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
    keeps_mtp_variants: tuple[str, ...] = ()    # converter variants that keep it where the rest drop it
    chunked_window: int = 0                     # SWA layers are chunked attention of this window (llama4)
    indexer_cache: bool = False                 # DSA lightning indexer keeps its own key cache
    indexer_types: bool = False                 # ... on the blocks attention.indexer.types (or GLM's default) says
    kv_layout: str = "standard"                 # "dsv4": DeepSeek V4's raw + compressed caches (archs_dsv4.py)
    post_attention_norm: bool = False           # HF post_attention_layernorm -> GGUF post_attention_norm
    nextn_hidden_rows: str = ""                 # t_h_nextn kept alive: "all" tokens, "output" rows, "" none
    nextn_probs_bias_loaded: bool = False       # NextN exp_probs_b created without TENSOR_SKIP
    gated_q: bool = False                       # q projection carries the attention output gate (x2 rows)
    graph: str = ""                             # compute buffer from a mirrored graph: "dsv4", "glm-dsa"
    gating: tuple[str, bool] = ("softmax", False)  # build_moe_ffn default (gating func, normalise weights)
    activation: str = "silu"                    # expert FFN activation (LLM_FFN_*)
    router_on_logits: bool = False              # llama4: select on logits, weight before the FFN
    hf: HfKeys = HfKeys()                       # config.json names of the MoE facts (expert count, top-k, ...)
    # CPU thread barriers of one decode block, counted on a fixture's decode graph or read from
    # <arch>.cpp (planner/cost/graph.py says how): (attention label, barriers, the fixture's
    # n_expert_used, how obtained); a leading dense block's where it differs from graph.DENSE_BLOCK;
    # the CPU split of a MoE block whose experts run on the CPU (gate, up, activation, down: 4)
    barriers: tuple[tuple[str, int, int, str], ...] = ()
    dense_lead_barriers: tuple[tuple[str, int], ...] = ()
    expert_split_barriers: int = 4


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
         keeps_mtp_variants=("glm-lite",),  # DeepseekV2Model.skip_mtp; Glm4MoeLiteModel keeps it
         gating=("softmax", False),  # V2 files; V3 files carry expert_gating_func = 2 (sigmoid)
         hf=DEEPSEEK_KEYS,
         # deepseek2.cpp decode with the absorbed MLA: attn norm, q_a, q_a norm, q_b, kv_a, kv norm,
         # two ropes, k_b, two concats, set_rows, flash attention, v_b, output, residual = 16; MoE
         # with sigmoid scoring, the selection bias and group-limited routing (build_moe_ffn: logits,
         # sigmoid, bias, group top-2 and sum, group top-k, get_rows, fill, set_rows, top-k,
         # weights get_rows, sum/clamp/div, scale = 15), the experts (gate, up, swiglu, down, MUL
         # = 5), the expert sum, the shared expert (4), two residual ADDs, the ffn norm
         barriers=(("mla", 16 + 15 + 5 + 3 + 4 + 2 + 1, 4, "from deepseek2.cpp"),)),
    Arch("deepseek4", (("DeepseekV4ForCausalLM", ""),), (("deepseek_v4", "DeepseekV4ForCausalLM"),),
         hc._hp_deepseek4, _plain(st._build_deepseek4), graph="dsv4", gating=("sqrt_softplus", True),
         kv_layout="dsv4",
         hf=HfKeys(expert_ff=("moe_intermediate_size",), expert_shared_count=("n_shared_experts",)),
         barriers=(("swa-only", 66, 6, "counted"), ("csa", 144, 6, "counted"), ("hca", 90, 6, "counted"))),
    Arch("glm-dsa", (("GlmMoeDsaForCausalLM", ""),), (("glm_moe_dsa", "GlmMoeDsaForCausalLM"),),
         hc._hp_dsa, _dsa, mla=True, converter_keeps_mtp=True, nextn_hidden_rows="output",
         nextn_probs_bias_loaded=True, graph="glm-dsa", gating=("sigmoid", True),
         indexer_cache=True, indexer_types=True, hf=DEEPSEEK_KEYS,
         # glm-dsa.cpp: the MLA block plus the DSA indexer (q/k projections, k norm, two ropes, its
         # cache set_rows, scores matmul, relu and head weights, top-k, mask fill/set) = +12
         barriers=(("mla", 46, 4, "from deepseek2.cpp"), ("mla+dsa", 58, 4, "from glm-dsa.cpp"))),
    Arch("deepseek32", (("DeepseekV32ForCausalLM", ""),), (("deepseek_v32", "DeepseekV32ForCausalLM"),),
         hc._hp_dsa, _dsa, mla=True, converter_keeps_mtp=True, nextn_hidden_rows="output",
         nextn_probs_bias_loaded=True, gating=("sigmoid", True), indexer_cache=True, hf=DEEPSEEK_KEYS),
    Arch("qwen3moe", (("Qwen3MoeForCausalLM", ""),), (("qwen3_moe", "Qwen3MoeForCausalLM"),),
         hc._hp_qwen_moe, _plain(st._build_qwen3moe), gating=("softmax", True), hf=QWEN_KEYS,
         barriers=(("full", 30, 4, "counted"),)),
    Arch("qwen2moe", (("Qwen2MoeForCausalLM", ""),), (("qwen2_moe", "Qwen2MoeForCausalLM"),),
         hc._hp_qwen_moe, None, gating=("softmax", False), hf=QWEN_KEYS),  # read from GGUF files; no profile synthesis
    Arch("qwen3next", (("Qwen3NextForCausalLM", ""),), (("qwen3_next", "Qwen3NextForCausalLM"),),
         hc._hp_qwen_hybrid, _plain(st._build_qwen_hybrid, split_ba=False), recurrent_hybrid=True,
         converter_keeps_mtp=True, post_attention_norm=True, nextn_hidden_rows="all", gated_q=True,
         gating=("softmax", True), hf=QWEN_KEYS,
         barriers=(("full", 41, 4, "counted"), ("recurrent", 60, 4, "counted"))),
    Arch("qwen35moe", (("Qwen3_5MoeForConditionalGeneration", ""), ("Qwen3_5MoeForCausalLM", "")),
         (("qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration"), ("qwen3_5_moe_text", "Qwen3_5MoeForCausalLM")),
         hc._hp_qwen_hybrid, _plain(st._build_qwen_hybrid, split_ba=True), recurrent_hybrid=True,
         converter_keeps_mtp=True, post_attention_norm=True, nextn_hidden_rows="all", gated_q=True,
         gating=("softmax", True), hf=QWEN_KEYS,
         # qwen35moe.cpp builds the same gated delta-net and gated attention blocks as qwen3next.cpp
         barriers=(("full", 41, 4, "as qwen3next"), ("recurrent", 60, 4, "as qwen3next"))),
    Arch("gpt-oss", (("GptOssForCausalLM", ""),), (("gpt_oss", "GptOssForCausalLM"),),
         hc._hp_gpt_oss, _plain(st._build_gpt_oss), swa_pattern=2, post_attention_norm=True,
         nextn_hidden_rows="all", gating=("softmax_weight", False), activation="swiglu_oai", hf=DENSE_WIDTH_KEYS,
         barriers=(("full", 33, 4, "counted"), ("swa", 33, 4, "counted")), expert_split_barriers=7),
    Arch("glm4moe", (("Glm4MoeForCausalLM", ""), ("Glm4vMoeForConditionalGeneration", "")),
         (("glm4_moe", "Glm4MoeForCausalLM"),),
         hc._hp_glm4moe, _glm4moe, converter_keeps_mtp=True, post_attention_norm=True,
         nextn_hidden_rows="output", gating=("sigmoid", True),
         hf=HfKeys(expert_count=("n_routed_experts",), expert_ff=("moe_intermediate_size",),
                   expert_shared_count=("n_shared_experts",), leading_dense=("first_k_dense_replace",)),
         # glm4-moe.cpp: GQA with q/k/v biases (3 ADDs) and partial rope, sigmoid + bias routing
         # without groups, one shared expert
         barriers=(("full", 16 + 10 + 5 + 3 + 4 + 2 + 1, 4, "from glm4-moe.cpp"),)),
    Arch("llama4", (("Llama4ForConditionalGeneration", ""), ("Llama4ForCausalLM", "")),
         (("llama4", "Llama4ForConditionalGeneration"), ("llama4_text", "Llama4ForCausalLM")),
         hc._hp_llama4, _llama4, swa_pattern=4, chunked_window=8192, gating=("sigmoid", False), router_on_logits=True,
         hf=DENSE_WIDTH_KEYS),
    Arch("llama", (("MixtralForCausalLM", ""),), (("mixtral", "MixtralForCausalLM"),),
         None, _plain(st._build_llama),
         gating=("softmax", True)),
    Arch("nemotron_h_moe", (("NemotronHForCausalLM", ""),), (("nemotron_h", "NemotronHForCausalLM"),),
         hc._hp_nemotron_h, _plain(st._build_nemotron_h), recurrent_hybrid=True, recurrent_rule="mixer",
         converter_keeps_mtp=True, nextn_hidden_rows="all", gating=("sigmoid", True), activation="relu_sqr",
         hf=HfKeys(expert_count=("n_routed_experts",), expert_used_count=("num_experts_per_tok",),
                   expert_ff=("moe_intermediate_size",), expert_shared_ff=("moe_shared_expert_intermediate_size",),
                   expert_shared_count=("n_shared_experts",)),
         # nemotron-h.cpp: a block is one sub-layer. Mamba-2 (mamba-base.cpp build_mamba2_layer: in
         # projection, conv state concat/ssm_conv/bias/silu, dt bias/softplus, ssm_scan and its state
         # write-back, D skip, the grouped gate norm, out projection), GQA attention without rope,
         # or the MoE FFN (sigmoid router with a selection bias, relu^2 experts without a gate, one
         # shared expert); every block has its attn_norm and residual ADD
         barriers=(("recurrent", 25, 6, "counted"), ("full", 9, 6, "counted"), ("none", 26, 6, "counted"))),
    Arch("minimax-m2", (("MiniMaxM2ForCausalLM", ""),), (("minimax_m2", "MiniMaxM2ForCausalLM"),),
         hc._hp_minimax_m2, _plain(st._build_minimax_m2), gating=("sigmoid", True), hf=DENSE_WIDTH_KEYS,
         # minimax-m2.cpp: q/k norms over all heads, sigmoid + bias routing, no shared expert
         barriers=(("full", 13 + 10 + 5 + 3 + 1 + 1, 4, "from minimax-m2.cpp"),)),
    # kimi-k3.cpp: KDA (Kimi Delta Attention) blocks where head_count_kv is 0, MLA blocks (one
    # 576-wide latent head, no rope) on the others; sigmoid routing with weights normalised
    # (moe_renormalize), the situ activation; MXFP4 experts kept by the converter
    Arch("kimi-k3", (("KimiK3ForConditionalGeneration", ""),), (("kimi_k3", "KimiK3ForConditionalGeneration"),),
         hc._hp_kimi_k3, _plain(st._build_kimi_k3), mla=True, recurrent_hybrid=True, recurrent_rule="no_kv",
         gating=("sigmoid", True), activation="situ",
         hf=HfKeys(expert_ff=("moe_intermediate_size",), expert_shared_count=("num_shared_experts",),
                   leading_dense=("first_k_dense_replace",)),
         # kimi-k3.cpp: every block mixes the cross-layer residual twice (res_mix: rms_norm, score
         # MUL, sum_rows, concat, soft_max, two cont, dsv4_hc_pre, MUL, ADD) and banks it every
         # attn_res.block_size blocks (a concat in place of the prefix ADD). KDA: q/k/v projections
         # with their conv state (concat, state copy, ssm_conv, silu) and l2 norms, the decay gate
         # (f_a, f_b, dt bias, MUL, sigmoid, two scales), beta, the delta-rule scan, the full-rank
         # output gate and its norm, out projection. MLA: absorbed, no rope, with a sigmoid output
         # gate. MoE: router on the full-width input, sigmoid + selection bias, experts in the
         # latent space with the 9-node situ activation, the latent norm and up projection, two
         # shared experts (situ again); the fixture routes 16 experts as K3. The dense lead block:
         # a KDA block with the situ dense FFN, counted on the fixture's block 0
         barriers=(("recurrent", 123, 16, "counted"), ("mla", 94, 16, "counted")),
         dense_lead_barriers=(("recurrent", 76),),
         # CPU expert split: gate, up, the situ activation's 9 elementwise nodes (scale, tanh, scale,
         # sigmoid, MUL on the gate, scale, tanh, scale on the up branch, MUL: llama-graph.cpp
         # build_moe_ffn LLM_FFN_SITU), down; read from the source, not counted on a GPU run
         expert_split_barriers=12),
    # gemma4.cpp: SWA per the GGUF's sliding_window_pattern array (no default pattern); the
    # final hidden state is t_h_nextn before the output rows are selected (all tokens); the
    # MoE runs beside a dense GELU MLP with softmax routing over logits computed from the
    # scaled attention output, weights normalised (build_moe_ffn norm_w = true)
    Arch("gemma4", (("Gemma4ForConditionalGeneration", ""), ("Gemma4ForCausalLM", "")),
         (("gemma4", "Gemma4ForConditionalGeneration"), ("gemma4_text", "Gemma4ForCausalLM")),
         hc._hp_gemma4, _gemma4, nextn_hidden_rows="all", gating=("softmax", True), activation="gelu",
         hf=HfKeys(expert_ff=("expert_intermediate_size", "moe_intermediate_size")),
         # gemma4.cpp: q/k/v norms, post-attention, post-FFN and layer-output scaling, a dense GELU
         # MLP beside the experts (its own norms), router logits from the scaled attention output,
         # fused gate+up experts with a per-expert down scale (REPEAT, GET_ROWS, MUL); a global
         # block has no V projection (K = V), one node fewer
         barriers=(("swa", 47, 4, "counted"), ("full", 46, 4, "counted")),
         # CPU expert split: fused gate+up, GEGLU, down, and the per-expert down scale
         # (ffn_down_exps.scale, which the exps=CPU pattern also puts on the CPU): REPEAT, GET_ROWS,
         # MUL (gemma4.cpp decode graph, counted on the fixture; the split itself read from
         # ggml-backend's rules)
         expert_split_barriers=6),
    # step35.cpp: SWA per the GGUF's sliding_window_pattern array, per-block head counts; the
    # converter keeps the MTP blocks (Step35Model.supports_mtp_export, block_count += n_nextn);
    # t_h_nextn is every token's final hidden state (embeddings_nextn_masked is false by
    # default); sigmoid routing with a selection bias (the loader's default when the GGUF has
    # no gating key), weights normalised by norm_expert_weight (expert_weights_norm)
    Arch("step35", (("Step3p5ForCausalLM", ""),), (("step3p5", "Step3p5ForCausalLM"),),
         hc._hp_step35, _step35, converter_keeps_mtp=True, nextn_hidden_rows="all",
         gating=("sigmoid", True),
         hf=HfKeys(expert_count=("moe_num_experts",), expert_used_count=("moe_top_k",),
                   expert_ff=("moe_intermediate_size",), expert_shared_ff=("share_expert_dim",)),
         # step35.cpp: q/k norms of one head, per-block rope dims, a head-wise attention gate
         # (matmul, sigmoid, MUL), sigmoid + bias routing with normalised, scaled weights, one
         # shared expert beside the experts; sliding and full blocks build the same nodes (their
         # head counts differ, not their ops). The fixture's GGUF has no swiglu clamp keys: the
         # published model's clamped layers add their CLAMP nodes on top (not counted)
         barriers=(("swa", 40, 4, "counted"), ("full", 40, 4, "counted"))),
    # hunyuan-moe.cpp: plain GQA (q/k norms after rope), every block MoE beside a shared
    # expert; softmax routing with the top-k weights normalised (build_moe_ffn norm_w = true,
    # LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX)
    Arch("hunyuan-moe", (("HunYuanMoEV1ForCausalLM", ""),), (("hunyuan_v1_moe", "HunYuanMoEV1ForCausalLM"),),
         hc._hp_hunyuan_moe, _hunyuan_moe, gating=("softmax", True),
         hf=HfKeys(expert_used_count=("moe_topk",), expert_ff=("moe_intermediate_size",),
                   expert_shared_ff=("intermediate_size",), expert_shared_count=("num_shared_expert",),
                   per_layer=("moe_intermediate_size", "moe_topk", "num_shared_expert")),
         # hunyuan-moe.cpp: q/k norms of one head after rope, softmax routing with the top-k weights
         # normalised (SUM_ROWS, CLAMP, DIV), the experts beside one shared expert (gate, up, swiglu,
         # down and the ADD joining the two branches)
         barriers=(("full", 35, 4, "counted"),)),
    # dots1.cpp: MHA with q/k norms (Qwen3 attention), DeepSeek-V3 routing (sigmoid scores, a
    # selection bias, weights normalised by norm_topk_prob and scaled), shared experts beside
    # the routed ones, first_k_dense_replace dense lead blocks; no MTP block
    Arch("dots1", (("Dots1ForCausalLM", ""),), (("dots1", "Dots1ForCausalLM"),),
         hc._hp_dots1, _plain(st._build_dots1), gating=("sigmoid", True),
         hf=HfKeys(expert_count=("n_routed_experts",), expert_ff=("moe_intermediate_size",),
                   expert_shared_count=("n_shared_experts",), leading_dense=("first_k_dense_replace",)),
         # dots1.cpp: MHA with q/k norms of one head, sigmoid + bias routing with normalised, scaled
         # weights, the shared experts as one FFN beside the routed ones; the fixture routes 6 as
         # dots.llm1; its dense lead block counted on the fixture's block 0
         barriers=(("full", 39, 6, "counted"),), dense_lead_barriers=(("full", 19),)),
    # ernie4-5-moe.cpp: plain GQA with full attention; build_moe_ffn with softmax gating, the
    # selection bias and normalised weights (norm_w = true); a block is MoE when
    # il >= n_layer_dense_lead and (il + 1) % n_moe_layer_step == 0; the converter drops MTP
    Arch("ernie4_5-moe", (("Ernie4_5_MoeForCausalLM", ""),), (("ernie4_5_moe", "Ernie4_5_MoeForCausalLM"),),
         hc._hp_ernie4_5_moe, _ernie4_5_moe, gating=("softmax", True),
         hf=HfKeys(expert_count=("moe_num_experts",), expert_used_count=("moe_k",),
                   expert_ff=("moe_intermediate_size",), expert_shared_count=("moe_num_shared_experts",),
                   leading_dense=("moe_layer_start_index",)),
         # ernie4-5-moe.cpp: plain GQA (no q/k norms, no biases), softmax routing with the
         # selection bias and normalised weights, the shared experts as one FFN beside the experts;
         # its dense lead block counted on the fixture's block 0
         barriers=(("full", 34, 4, "counted"),), dense_lead_barriers=(("full", 17),)),
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
