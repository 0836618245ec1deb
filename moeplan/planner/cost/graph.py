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
# how the figure was obtained): each architecture's record says its own (registry.py `barriers`)
BLOCK_BARRIERS: dict[tuple[str, str], tuple[int, int, str]] = {
    (a.name, label): (n, used, how) for a in registry.ARCHS.values() for label, n, used, how in a.barriers}
DENSE_BLOCK = 22
# leading dense blocks counted where they differ from DENSE_BLOCK: (arch, attention label) ->
# barriers (the records' dense_lead_barriers)
DENSE_LEAD_BARRIERS: dict[tuple[str, str], int] = {
    (a.name, label): n for a in registry.ARCHS.values() for label, n in a.dense_lead_barriers}
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
# architecture's expert FFN has more nodes than gate, up, activation and down (4): the records'
# expert_split_barriers (gpt-oss's three ADD_ID bias nodes, Gemma 4's down scale, Kimi-K3's situ)
EXPERT_SPLIT_BARRIERS: dict[str, int] = {
    a.name: a.expert_split_barriers for a in registry.ARCHS.values() if a.expert_split_barriers != 4}


def expert_split_barriers(model: ModelSpec, backend: str) -> int:
    """Barriers of the CPU's split of one MoE block whose routed experts run on the CPU."""
    if backends.behaviour(backend).cpu_kernels == "iqk":
        return 4
    return EXPERT_SPLIT_BARRIERS.get(model.arch, 4)
