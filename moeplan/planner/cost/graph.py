"""Thread barriers of one decode step on the CPU, counted from llama.cpp's graphs.

ggml-cpu runs a graph node by node and ends every node that computes something with a barrier
over the whole thread pool (ggml-cpu.c ggml_graph_compute_thread: view, reshape, permute and
transpose nodes are skipped, an RMS_NORM followed by its MUL is fused into one node by
ggml_cpu_try_fuse_ops). A barrier costs a few cache-line hand-overs per thread
(machine.barrier_handoff_s), so a block whose graph has many small nodes - a gated delta-net
layer, DeepSeek-V4's compressed attention and hyper-connections - costs more per token than
its bytes say, and more the more threads wait at each barrier.

BLOCK_BARRIERS are the barriers of one decode block (n_tokens = 1) of llama.cpp 0c1e570, counted
on the tests' fixtures (tests/llama_fixtures.py, the real models' builders at toy sizes):
`GGML_SCHED_DEBUG=2 llama-completion -m FIXTURE -v -n 2 -fa on` prints every non-view node of
the decode graph; RMS_NORM+MUL pairs are counted once (scripts/count_graph_barriers.py
re-counts them). The rows not counted (that build's CPU scheduler asserts on the MLA
fixtures) are read from the builders' source, op by op. A block's count is the fixture's plus
one ADD per routed expert beyond the fixture's n_expert_used: llama.cpp sums the experts'
outputs with a chain of n_expert_used - 1 ADD nodes (llama-graph.cpp build_moe_ffn).

With the routed experts on the CPU and the rest on the GPU (-ot exps=CPU, --n-cpu-moe), the
CPU's split of a MoE block holds only the expert matmuls and the activation between them:
ggml-backend's scheduler gives the weighting MUL and the expert-sum ADDs to the GPU (its
"expand gpu up" pass runs before the CPU's expansions, ggml-backend.cpp
ggml_backend_sched_split_graph pass 2) - gate, up, activation, down: 4 barriers, 7 with
gpt-oss's three ADD_ID bias nodes.

ik_llama.cpp fuses more: -fmoe (on by default) makes gate+up+activation one op and its
MULTI_ADD sums the experts in one node, so a block has n_expert_used fewer barriers than
mainline's (-2 for the fused op, n_expert_used - 2 for the sum), and its CPU expert split has
4 (fused up-gate, down, weights, sum).
"""
from __future__ import annotations

from moeplan.planner import backends
from moeplan.planner.model import registry
from moeplan.planner.model.spec import LayerSpec, ModelSpec

__all__ = ["BLOCK_BARRIERS", "block_barriers", "expert_split_barriers"]

# (llama.cpp arch, attention label) -> (barriers per decode block, the fixture's n_expert_used,
# how the figure was obtained)
BLOCK_BARRIERS: dict[tuple[str, str], tuple[int, int, str]] = {
    ("qwen3moe", "full"): (30, 4, "counted"),
    ("gpt-oss", "full"): (33, 4, "counted"),
    ("gpt-oss", "swa"): (33, 4, "counted"),
    ("qwen3next", "full"): (41, 4, "counted"),
    ("qwen3next", "recurrent"): (60, 4, "counted"),
    # qwen35moe.cpp builds the same gated delta-net and gated attention blocks as qwen3next.cpp
    ("qwen35moe", "full"): (41, 4, "as qwen3next"),
    ("qwen35moe", "recurrent"): (60, 4, "as qwen3next"),
    # nemotron-h.cpp: a block is one sub-layer. Mamba-2 (mamba-base.cpp build_mamba2_layer: in
    # projection, conv state concat/ssm_conv/bias/silu, dt bias/softplus, ssm_scan and its state
    # write-back, D skip, the grouped gate norm, out projection), GQA attention without rope,
    # or the MoE FFN (sigmoid router with a selection bias, relu^2 experts without a gate, one
    # shared expert); every block has its attn_norm and residual ADD
    ("nemotron_h_moe", "recurrent"): (25, 6, "counted"),
    ("nemotron_h_moe", "full"): (9, 6, "counted"),
    ("nemotron_h_moe", "none"): (26, 6, "counted"),
    ("deepseek4", "swa-only"): (66, 6, "counted"),
    ("deepseek4", "csa"): (144, 6, "counted"),
    ("deepseek4", "hca"): (90, 6, "counted"),
    # deepseek2.cpp decode with the absorbed MLA: attn norm, q_a, q_a norm, q_b, kv_a, kv norm,
    # two ropes, k_b, two concats, set_rows, flash attention, v_b, output, residual = 16; MoE
    # with sigmoid scoring, the selection bias and group-limited routing (build_moe_ffn: logits,
    # sigmoid, bias, group top-2 and sum, group top-k, get_rows, fill, set_rows, top-k,
    # weights get_rows, sum/clamp/div, scale = 15), the experts (gate, up, swiglu, down, MUL
    # = 5), the expert sum, the shared expert (4), two residual ADDs, the ffn norm
    ("deepseek2", "mla"): (16 + 15 + 5 + 3 + 4 + 2 + 1, 4, "from deepseek2.cpp"),
    # glm-dsa.cpp: the MLA block plus the DSA indexer (q/k projections, k norm, two ropes, its
    # cache set_rows, scores matmul, relu and head weights, top-k, mask fill/set) = +12
    ("glm-dsa", "mla"): (46, 4, "from deepseek2.cpp"),
    ("glm-dsa", "mla+dsa"): (58, 4, "from glm-dsa.cpp"),
    # glm4-moe.cpp: GQA with q/k/v biases (3 ADDs) and partial rope, sigmoid + bias routing
    # without groups, one shared expert
    ("glm4moe", "full"): (16 + 10 + 5 + 3 + 4 + 2 + 1, 4, "from glm4-moe.cpp"),
    # minimax-m2.cpp: q/k norms over all heads, sigmoid + bias routing, no shared expert
    ("minimax-m2", "full"): (13 + 10 + 5 + 3 + 1 + 1, 4, "from minimax-m2.cpp"),
    # gemma4.cpp: q/k/v norms, post-attention, post-FFN and layer-output scaling, a dense GELU
    # MLP beside the experts (its own norms), router logits from the scaled attention output,
    # fused gate+up experts with a per-expert down scale (REPEAT, GET_ROWS, MUL); a global
    # block has no V projection (K = V), one node fewer
    ("gemma4", "swa"): (47, 4, "counted"),
    ("gemma4", "full"): (46, 4, "counted"),
    # kimi-k3.cpp: every block mixes the cross-layer residual twice (res_mix: rms_norm, score
    # MUL, sum_rows, concat, soft_max, two cont, dsv4_hc_pre, MUL, ADD) and banks it every
    # attn_res.block_size blocks (a concat in place of the prefix ADD). KDA: q/k/v projections
    # with their conv state (concat, state copy, ssm_conv, silu) and l2 norms, the decay gate
    # (f_a, f_b, dt bias, MUL, sigmoid, two scales), beta, the delta-rule scan, the full-rank
    # output gate and its norm, out projection. MLA: absorbed, no rope, with a sigmoid output
    # gate. MoE: router on the full-width input, sigmoid + selection bias, experts in the
    # latent space with the 9-node situ activation, the latent norm and up projection, two
    # shared experts (situ again); the fixture routes 16 experts as K3
    ("kimi-k3", "recurrent"): (123, 16, "counted"),
    ("kimi-k3", "mla"): (94, 16, "counted"),
    # step35.cpp: q/k norms of one head, per-block rope dims, a head-wise attention gate
    # (matmul, sigmoid, MUL), sigmoid + bias routing with normalised, scaled weights, one
    # shared expert beside the experts; sliding and full blocks build the same nodes (their
    # head counts differ, not their ops). The fixture's GGUF has no swiglu clamp keys: the
    # published model's clamped layers add their CLAMP nodes on top (not counted)
    ("step35", "swa"): (40, 4, "counted"),
    ("step35", "full"): (40, 4, "counted"),
    # hunyuan-moe.cpp: q/k norms of one head after rope, softmax routing with the top-k weights
    # normalised (SUM_ROWS, CLAMP, DIV), the experts beside one shared expert (gate, up, swiglu, down
    # and the ADD joining the two branches)
    ("hunyuan-moe", "full"): (35, 4, "counted"),
    # dots1.cpp: MHA with q/k norms of one head, sigmoid + bias routing with normalised, scaled
    # weights, the shared experts as one FFN beside the routed ones; the fixture routes 6 as
    # dots.llm1
    ("dots1", "full"): (39, 6, "counted"),
    # ernie4-5-moe.cpp: plain GQA (no q/k norms, no biases), softmax routing with the
    # selection bias and normalised weights, the shared experts as one FFN beside the experts
    ("ernie4_5-moe", "full"): (34, 4, "counted"),
}
DENSE_BLOCK = 22
# leading dense blocks counted where they differ from DENSE_BLOCK: (arch, attention label) ->
# barriers (kimi-k3: a KDA block with the situ dense FFN, counted on the fixture's block 0)
DENSE_LEAD_BARRIERS: dict[tuple[str, str], int] = {("kimi-k3", "recurrent"): 76,
                                                    ("dots1", "full"): 19,  # dots1: fixture block 0
                                                    ("ernie4_5-moe", "full"): 17}  # ernie4_5-moe: fixture block 0
# a block of an architecture not listed: qwen3moe's block
DEFAULT_BLOCK = BLOCK_BARRIERS[("qwen3moe", "full")]


def _mainline_block(model: ModelSpec, layer: LayerSpec) -> int:
    row = BLOCK_BARRIERS.get((model.arch, layer.attention))
    if layer.kind != "moe":
        # a block without routed experts: counted where its architecture's blocks hold one
        # sub-layer (registry recurrent_rule "mixer", nemotron-h: a Mamba-2 mixer or an attention alone); else a leading dense
        # block: ~16 attention nodes, the ffn norm, gate, up, activation, down and the residual ADD
        if row is not None and model.arch in registry.ARCHS and registry.get(model.arch).recurrent_rule == "mixer":
            return row[0]
        return DENSE_LEAD_BARRIERS.get((model.arch, layer.attention), DENSE_BLOCK)
    n, fixture_used, _ = row or DEFAULT_BLOCK
    return n + max(0, model.n_experts_used - fixture_used)


def block_barriers(model: ModelSpec, layers: tuple[LayerSpec, ...], backend: str) -> int:
    """Barriers of one decode step through `layers` run wholly on the CPU."""
    total = 0
    for layer in layers:
        n = _mainline_block(model, layer)
        if backends.behaviour(backend).cpu_kernels == "iqk" and layer.kind == "moe":
            n -= model.n_experts_used
        total += n
    return total


# barriers of the CPU's split of a MoE block whose routed experts run on the CPU, where an
# architecture's expert FFN has more nodes than gate, up, activation and down (4)
EXPERT_SPLIT_BARRIERS = {
    "gpt-oss": 7,
    # fused gate+up, GEGLU, down, and the per-expert down scale (ffn_down_exps.scale, which the
    # exps=CPU pattern also puts on the CPU): REPEAT, GET_ROWS, MUL (gemma4.cpp decode graph,
    # counted on the fixture; the split itself read from ggml-backend's rules)
    "gemma4": 6,
    # gate, up, the situ activation's 9 elementwise nodes (scale, tanh, scale, sigmoid, MUL on the
    # gate, scale, tanh, scale on the up branch, MUL: llama-graph.cpp build_moe_ffn LLM_FFN_SITU),
    # down; read from the source, not counted on a GPU run
    "kimi-k3": 12,
}


def expert_split_barriers(model: ModelSpec, backend: str) -> int:
    """Barriers of the CPU's split of one MoE block whose routed experts run on the CPU."""
    if backends.behaviour(backend).cpu_kernels == "iqk":
        return 4
    return EXPERT_SPLIT_BARRIERS.get(model.arch, 4)
