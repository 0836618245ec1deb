"""Compute buffers of the architectures whose graph moeplan mirrors op by op (pure).

DeepSeek V4 (graph_dsv4) and GLM-5.x DSA (graph_glm_dsa) reserve buffers that a few live
tensors do not describe: several [n_kv, n_tokens] masks and indexer scores and the holes
ggml-alloc leaves between them decide the peak. For them compute_buffer asks this module,
which maps a ModelSpec and a Placement to the mirrored graph's dimensions and reserved
shape, replays ggml-alloc (ggml_graph.plan_allocation + replay) and reports the peak as
named terms:

  graph_inputs   graph inputs alive at the peak (masks, ids, constants)
  activations    op results alive at the peak
  staging        the GPU copy of a host-resident expert tensor alive at the peak (op-offload)
  alloc_holes    free ranges below the peak that no later tensor fitted (peak - live)

On a GPU the same graph runs with the GPU buffer's alignment (128 B); each MUL_MAT_ID of a
CPU-resident expert tensor gets a full-size copy of that tensor for the duration of the op
(op-offload, T >= GGML_OP_OFFLOAD_MIN_BATCH). The CPU buffer of such a run holds the graph
inputs (ggml_backend_sched keeps every graph input on the CPU backend) and the token-embedding
rows.

The search asks for hundreds of contexts and several ubatches. Only the reserved tokens and
outputs and the cache cells change between them, and every tensor's bytes are a polynomial
in those, so each model's graph is built once per cache type, flash attention and stream
count with them as ggml_graph.Sym variables ("compiled"); every further ubatch and context
only evaluates the polynomials and replays the plan. The few decisions the build takes on
those sizes (min, equal shapes for in-place reuse, divisions by the compressors' ratios) are
guards: where one answers differently (a ubatch below 128 tokens for DeepSeek V4) the graph
is compiled again there. tests/test_graph_programs.py checks the programs against plain
builds (the search does not: a second build per point).
"""
from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from moeplan.planner.memory.cache import memo
from moeplan.planner.memory.ggml_graph import (
    CPU_ALIGNMENT,
    CUDA_ALIGNMENT,
    AllocPlan,
    AllocResult,
    Graph,
    Sym,
    Trace,
    block_bytes,
    plan_allocation,
    replay,
    trace,
)
from moeplan.planner.model import registry
from moeplan.planner.model.ggml import canonical_type
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement

if TYPE_CHECKING:  # the builders are imported where a graph model needs them (issue 31)
    from moeplan.planner.memory.graph_dsv4 import Dsv4Dims
    from moeplan.planner.memory.graph_glm_dsa import GlmDsaDims

GRAPH_ARCHS = registry.names_with("graph")  # architectures whose compute buffer is a mirrored graph
F32 = 4


def _pad(n: int, to: int = 256) -> int:
    return -(-n // to) * to


INDEXER_KEYS = ("attention.indexer.head_count", "attention.indexer.key_length", "attention.indexer.top_k")


def _lacks(x: dict[str, Any], *keys: str) -> bool:
    """Whether a hyper-parameter the mirrored graph needs is missing (the phase model is used then)."""
    return any(not x.get(k) for k in keys)


def _weights_scaled(extra: dict[str, Any]) -> bool:
    """build_moe_ffn scales the router weights unless expert_weights_scale is 0 or 1; a profile
    without the key keeps the DeepSeek/GLM convention of a scale (its node is k*T*4 bytes)."""
    scale = extra.get("expert_weights_scale")
    return scale is None or float(scale) not in (0.0, 1.0)


def dsv4_dims(model: ModelSpec, n_used: int) -> Dsv4Dims | None:
    """The deepseek4 graph's dimensions, or None when the model lacks a key the graph needs."""
    from moeplan.planner.memory.graph_dsv4 import Dsv4Dims

    x: dict[str, Any] = dict(model.extra)
    if _lacks(x, "attention.key_length", "attention.q_lora_rank", "attention.output_group_count",
              "attention.output_lora_rank", "hyper_connection.count", *INDEXER_KEYS):
        return None
    ratio = {"csa": 4, "hca": 128}
    return Dsv4Dims(
        n_embd=model.n_embd, n_head=model.n_head, head_dim=int(x["attention.key_length"]),
        q_lora=int(x["attention.q_lora_rank"]), o_groups=int(x["attention.output_group_count"]),
        o_lora=int(x["attention.output_lora_rank"]), hc=int(x["hyper_connection.count"]),
        n_idx_head=int(x["attention.indexer.head_count"]), idx_dim=int(x["attention.indexer.key_length"]),
        top_k=int(x["attention.indexer.top_k"]),
        ratios=tuple(ratio.get(layer.attention, 0) for layer in model.trunk_layers),
        n_hash=int(x.get("hash_layer_count", 0) or 0), n_expert=model.n_experts, n_used=n_used,
        n_ff_exp=model.n_ff_exp, n_ff_shexp=model.n_ff_exp * max(1, model.n_experts_shared),
        n_vocab=model.n_vocab, weights_norm=bool(x.get("expert_weights_norm", True)),
        weights_scale=_weights_scaled(x))


def glm_dsa_dims(model: ModelSpec, n_used: int) -> GlmDsaDims | None:
    from moeplan.planner.memory.graph_glm_dsa import GlmDsaDims

    x: dict[str, Any] = dict(model.extra)
    if _lacks(x, "attention.q_lora_rank", "attention.kv_lora_rank", "rope.dimension_count",
              "attention.key_length_mla", "attention.value_length_mla", *INDEXER_KEYS):
        return None
    trunk = model.trunk_layers
    rope = int(x["rope.dimension_count"])
    n_dense = next((i for i, layer in enumerate(trunk) if layer.kind != "dense"), len(trunk))
    return GlmDsaDims(
        n_embd=model.n_embd, n_head=model.n_head, q_lora=int(x["attention.q_lora_rank"]),
        kv_lora=int(x["attention.kv_lora_rank"]), rope=rope, nope=int(x["attention.key_length_mla"]) - rope,
        v_dim=int(x["attention.value_length_mla"]), n_idx_head=int(x["attention.indexer.head_count"]),
        idx_dim=int(x["attention.indexer.key_length"]), top_k=int(x["attention.indexer.top_k"]),
        indexer_full=tuple(layer.attention == "mla+dsa" for layer in trunk), n_dense=n_dense,
        n_ff=int(x.get("feed_forward_length", 0) or 0), n_expert=model.n_experts, n_used=n_used,
        n_ff_exp=model.n_ff_exp, n_ff_shexp=model.n_ff_exp * max(1, model.n_experts_shared),
        n_vocab=model.n_vocab, weights_norm=bool(x.get("expert_weights_norm", True)),
        weights_scale=_weights_scaled(x))


def _staged_layers(model: ModelSpec, p: Placement) -> dict[int, tuple[int, int, int]]:
    """(gate, up, down) bytes of the expert tensors of each CPU-resident MoE layer."""
    out = {}
    cpu = set(p.cpu_moe_layers)
    for layer in model.moe_layers:
        if layer.index not in cpu:
            continue
        by = {t.name.split(".")[2]: t.n_bytes for t in layer.tensors if t.group == "experts"}
        out[layer.index] = (by.get("ffn_gate_exps", 0), by.get("ffn_up_exps", 0), by.get("ffn_down_exps", 0))
    return out


Point = tuple[int, ...]
Build = Callable[[Point], tuple[Graph, dict[int, tuple[int, int]]]]


def _builder(model: ModelSpec, p: Placement, n_tokens: int, n_outputs: int, n_ctx_seq: int, n_ubatch: int
             ) -> tuple[Build, Point, tuple] | None:
    """(build(x), x, key) for the mirrored graph of the reserved ubatch.

    `x` are the sizes the search varies: the reserved tokens T (rounded up to whole
    sequences) and outputs O, and the cache cells of one stream (DeepSeek V4: the SWA window's
    raw cells, CSA and HCA cells; GLM: the cache cells); every other size is fixed for a given
    `key` (the model's dimensions, the streams, flash attention, the K type). build(x) takes
    ints or Syms (ggml_graph.Sym). None for a model the graph does not cover."""
    n_used = p.n_experts_used or model.n_experts_used
    n_seq = max(1, p.n_seq)
    t = -(-n_tokens // n_seq) * n_seq  # graph_reserve rounds the tokens up to whole sequences
    type_k = canonical_type(p.cache_type_k)
    graph = registry.get(model.arch).graph
    if graph == "dsv4":
        d = dsv4_dims(model, n_used)
        if d is None:
            return None
        n_swa = int(dict[str, Any](model.extra).get("attention.sliding_window", 0) or 0)
        top_k = d.top_k
        from moeplan.planner.memory.graph_dsv4 import Dsv4Shape, build_dsv4_graph

        def build_dsv4(x: Point) -> tuple[Graph, dict[int, tuple[int, int]]]:
            # llama-kv-cache-dsv4.cpp: every cache has one stream per sequence, whatever -kvu says
            shape = Dsv4Shape(n_tokens=x[0], n_outputs=x[1], n_stream=n_seq, n_raw=x[2], n_csa=x[3],
                              n_hca=x[4], n_top_k=top_k if x[3] >= top_k else x[3], flash_attn=p.flash_attn, type_k=type_k)
            return build_dsv4_graph(d, shape)

        x = (t, n_outputs, _pad(min(n_ctx_seq, n_swa + n_ubatch)), _pad(max(1, -(-n_ctx_seq // 4))),
             _pad(max(1, -(-n_ctx_seq // 128))))
        return build_dsv4, x, ("dsv4", d, n_seq, p.flash_attn, type_k)
    if graph == "glm-dsa":
        dg = glm_dsa_dims(model, n_used)
        if dg is None:
            return None
        n_stream = 1 if p.kv_unified else n_seq
        top_k = dg.top_k
        from moeplan.planner.memory.graph_glm_dsa import GlmDsaShape, build_glm_dsa_graph

        def build_glm(x: Point) -> tuple[Graph, dict[int, tuple[int, int]]]:
            shape = GlmDsaShape(n_tokens=x[0], n_outputs=x[1], n_stream=n_stream, n_kv=x[2],
                                n_top_k=top_k if x[2] >= top_k else x[2], flash_attn=p.flash_attn, type_k=type_k)
            return build_glm_dsa_graph(dg, shape)

        return build_glm, (t, n_outputs, n_ctx_seq), ("glm-dsa", dg, n_stream, p.flash_attn, type_k)
    return None


@dataclass(frozen=True)
class _Program:
    """A replay plan whose block sizes are polynomials in the point x (ggml_graph.Sym), valid
    wherever `trace`'s guards hold: bytes[b] = sizes of exprs[index[b]] at x."""

    plan: AllocPlan
    trace: Trace
    exprs: tuple[Sym | int, ...]  # the distinct size expressions
    index: tuple[int, ...]  # per block: its expression
    inputs: tuple[int, ...]  # the blocks that are graph inputs (ggml_set_input)

    def sizes(self, x: Point) -> list[int]:
        vals = [e if isinstance(e, int) else e.at(x) for e in self.exprs]
        return [vals[i] for i in self.index]


def _plan_of(graph: Graph, tags: dict[int, tuple[int, int]]) -> tuple[AllocPlan, list, tuple[int, ...]]:
    plan = plan_allocation(graph, tags)
    n_leafs = len(graph.leafs)
    inputs = tuple(b for b, slot in enumerate(plan.slots) if 0 <= slot < n_leafs and graph.leafs[slot].input)
    return plan, block_bytes(plan, graph), inputs


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Python's cyclic collector paused (and resumed as it was). A compile allocates tens of
    thousands of tensors, Syms and dicts that form no reference cycles and stay alive until
    the graph is dropped (then freed by reference counting): the collections they trigger
    (about 160 in a DeepSeek V4 Pro `tune`) only scanned them, about 0.03 s of CPU."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _compile(build: Build, x: Point, check: bool = False) -> _Program | None:
    """Build the graph and its allocation plan with the point's sizes as Sym variables, traced
    at x: every block's bytes a polynomial in them, valid where the trace's guards hold; None
    when the build needs a size as a plain int (that key is then always built afresh). With
    `check`, also build the plain graph at x and return None when its plan or sizes differ
    from the program's. The search does not check (a second build of ten thousand nodes was
    a third of a plan's time): tests/test_graph_programs.py checks every bundled graph
    model's programs against plain builds instead."""
    with _gc_paused():
        return _compile_traced(build, x, check)


def _compile_traced(build: Build, x: Point, check: bool) -> _Program | None:
    """The body of _compile, which pauses the collector around it."""
    try:
        with trace() as tr:
            graph, tags = build(tuple(Sym.var(i, v) for i, v in enumerate(x)))  # type: ignore[misc]
            plan, exprs, inputs = _plan_of(graph, tags)
    except (ArithmeticError, TypeError):
        return None
    distinct: dict[object, int] = {}
    uniq: list[Sym | int] = []
    index = []
    for e in exprs:
        k = e if isinstance(e, int) else (tuple(sorted(e.p.items())), e.den)
        i = distinct.get(k)
        if i is None:
            i = distinct[k] = len(uniq)
            uniq.append(e)
        index.append(i)
    prog = _Program(plan, tr, tuple(uniq), tuple(index), inputs)
    if check:
        numeric, numeric_tags = build(x)
        if plan_allocation(numeric, numeric_tags) != plan or block_bytes(plan, numeric) != prog.sizes(x):
            return None
    return prog


def _evaluate(model: ModelSpec, p: Placement, n_tokens: int, n_outputs: int, n_ctx_seq: int, n_ubatch: int,
              staged: bool) -> tuple[AllocPlan, list[int], tuple[int, ...]] | None:
    """(plan, block bytes, input blocks) for this placement. A key's graph is compiled once
    (sizes as polynomials in the ubatch and the cache cells) and each further ubatch and
    context only evaluates them, where the compiled program's guards hold; elsewhere it is
    compiled again at that point (kept beside the first). `staged`: op-offload copies the
    expert tensors of p.cpu_moe_layers for their ops (the other staging blocks stay 0)."""
    made = _builder(model, p, n_tokens, n_outputs, n_ctx_seq, n_ubatch)
    if made is None:
        return None
    build, x, key = made
    cache = memo(model)
    progs = cache.setdefault(("graph_programs", key), [])
    prog = next((q for q in progs if q is not None and q.trace.holds(x)), None)
    if prog is None and None not in progs:
        prog = _compile(build, x)
        progs.append(prog)
    if prog is not None:
        plan, sizes, inputs = prog.plan, prog.sizes(x), prog.inputs
    else:
        plan, sizes, inputs = _plan_of(*build(x))
    if staged:
        cpu = _staged_layers(model, p)
        for b, tag in enumerate(plan.tags):
            if tag is not None and tag[0] in cpu:
                sizes[b] = cpu[tag[0]][tag[1]]
    return plan, sizes, inputs


def build_graph(model: ModelSpec, p: Placement, n_tokens: int, n_outputs: int, n_ctx_seq: int,
                n_ubatch: int) -> tuple[Graph, dict[int, tuple[int, int]]] | None:
    """The mirrored main graph for the reserved ubatch (n_tokens, n_outputs; n_ctx_seq cells
    per KV stream) and its staging tags, or None for an architecture or model it does not cover."""
    made = _builder(model, p, n_tokens, n_outputs, n_ctx_seq, n_ubatch)
    return None if made is None else made[0](made[1])


def peak_terms(result: AllocResult) -> dict[str, int]:
    """The replayed peak as graph_inputs + activations + staging + alloc_holes (they sum to it)."""
    return {"graph_inputs": result.input_bytes,
            "activations": result.live_bytes - result.input_bytes - result.staging_bytes,
            "staging": result.staging_bytes, "alloc_holes": result.peak_bytes - result.live_bytes}


def graph_buffer_terms(model: ModelSpec, p: Placement, n_tokens: int, n_outputs: int, n_ctx_seq: int,
                       n_ubatch: int, gpu: bool, staged: bool) -> dict[str, int] | None:
    """The device compute buffer of the mirrored graph as named terms (module docstring)."""
    got = _evaluate(model, p, n_tokens, n_outputs, n_ctx_seq, n_ubatch, staged)
    if got is None:
        return None
    plan, sizes, _ = got
    return peak_terms(replay(plan, sizes, CUDA_ALIGNMENT if gpu else CPU_ALIGNMENT))


def graph_cpu_side_terms(model: ModelSpec, p: Placement, n_tokens: int, n_outputs: int, n_ctx_seq: int,
                         n_ubatch: int) -> dict[str, int] | None:
    """The CPU buffer of a GPU run: every graph input of the mirrored graph (not the constants,
    which live where their consumers run) and the token-embedding rows (4 * E * T)."""
    got = _evaluate(model, p, n_tokens, n_outputs, n_ctx_seq, n_ubatch, staged=False)
    if got is None:
        return None
    _, sizes, inputs = got
    total = sum(-(-sizes[b] // CPU_ALIGNMENT) * CPU_ALIGNMENT for b in inputs)
    return {"graph_inputs": total, "embd_rows": F32 * model.n_embd * n_tokens}
