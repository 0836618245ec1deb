"""The work of a token, independent of the path that runs it: weights and their batch-1 dot
cost by type, attention FLOPs, CPU attention as ggml-cpu / iqk run it, the -ngl split of
whole blocks onto the CPU, and how a decode thread's reads and dot products overlap.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from moeplan.planner import backends
from moeplan.planner.cost import attention, graph, kernels, machine
from moeplan.planner.cost.priors import BackendPriors
from moeplan.planner.cost.resolve import REF_CLOCK_HZ, Factors, _mm_eff_prior, cpu_isa_class, physical_cores
from moeplan.planner.hardware.profile import HardwareProfile
from moeplan.planner.memory.cache import memo
from moeplan.planner.memory.devices import layer_split
from moeplan.planner.model.spec import LayerSpec, ModelSpec
from moeplan.planner.options import LLAMA_BUILD_KEY
from moeplan.planner.placement import Placement
from moeplan.planner.plan import Term


def _cpu_block_barriers(model: ModelSpec, pr: BackendPriors, layers: tuple[LayerSpec, ...]) -> int:
    """Barriers of one decode step through `layers` run wholly on the CPU."""
    if pr.barriers == "ggml-graph":
        return graph.block_barriers(model, layers, pr.name)
    return len(layers) * 2 * pr.n_cpu_ops_per_layer


def distinct_experts(n_experts: int, k: int, n_tokens: int) -> float:
    """U(n) = N (1 - (1 - k/N)^n): expected distinct experts a layer uses over n tokens."""
    if n_experts <= 0:
        return 0.0
    return n_experts * (1.0 - (1.0 - k / n_experts) ** max(0, n_tokens))


def cache_hit_rate(cached_per_layer: float, n_experts: int, zipf_s: float) -> float:
    """Share of expert uses served by the c most popular experts of a layer (Zipf s prior)."""
    if cached_per_layer <= 0 or n_experts <= 0:
        return 0.0
    frac = min(1.0, cached_per_layer / n_experts)
    return min(1.0, frac ** (1.0 - min(max(zipf_s, 0.0), 0.95)))


def dot_elements(layer: LayerSpec, type_cost: dict[str, float]) -> float:
    """Q8_0-equivalent weights of a layer's experts (elements x relative vec_dot cost of the
    backend's kernel for each type, cost/kernels.py type_cost_of)."""
    return sum(t.n_elements * kernels.type_cost_of(t.ggml_type, type_cost)
               for t in layer.tensors if t.group == "experts")


def layer_dot_elements(model: ModelSpec, type_cost: dict[str, float]) -> dict[int, float]:
    """dot_elements of every MoE layer by index, cached per model and kernel costs (the search
    sums them over the CPU layers of every placement it estimates)."""
    cache = memo(model)
    key = ("layer_dot_elements", tuple(sorted(type_cost.items())))
    got = cache.get(key)
    if got is None:
        got = cache[key] = {layer.index: dot_elements(layer, type_cost) for layer in model.moe_layers}
    return got


def _matmul_tensor(t) -> bool:
    return t.group not in ("experts", "expert_aux", "norm") and len(t.shape) >= 2


def dense_weights_by_type(model: ModelSpec, blocks: frozenset[int] | None = None,
                          output: bool = True) -> dict[str, float]:
    """{ggml type: weights} that non_expert_params counts, by type (each token meets them all)."""
    cache = memo(model)  # the search asks for the same blocks for every placement it estimates
    key = ("dense_weights_by_type", blocks, output)
    if key not in cache:
        cache[key] = _dense_weights_by_type(model, blocks, output)
    return dict(cache[key])


def _dense_weights_by_type(model: ModelSpec, blocks: frozenset[int] | None, output: bool) -> dict[str, float]:
    out: dict[str, float] = {}
    if output:
        for t in model.globals:
            if t.group == "output":
                out[t.ggml_type] = out.get(t.ggml_type, 0.0) + t.n_elements
    for layer in model.trunk_layers:
        if blocks is not None and layer.index not in blocks:
            continue
        for t in layer.tensors:
            if _matmul_tensor(t):
                out[t.ggml_type] = out.get(t.ggml_type, 0.0) + t.n_elements
    return out


def expert_weights_by_type(layers, per_tok: float) -> dict[str, float]:
    """{ggml type: routed-expert weights each token meets} over `layers` (k/N of each layer's)."""
    out: dict[str, float] = {}
    for layer in layers:
        for t in layer.tensors:
            if t.group == "experts":
                out[t.ggml_type] = out.get(t.ggml_type, 0.0) + t.n_elements * per_tok
    return out


def dense_dot_elements(model: ModelSpec, type_cost: dict[str, float], blocks: frozenset[int] | None = None,
                       output: bool = True) -> float:
    """Q8_0-equivalent weights of the non-expert matrices (non_expert_params x each type's
    batch-1 dot cost); F32 router and BF16/F16 matrices at their own cost."""
    return sum(n * kernels.type_cost_of(t, type_cost)
               for t, n in dense_weights_by_type(model, blocks, output).items())


def cpu_rates(hw: HardwareProfile, pr: BackendPriors, f: Factors) -> kernels.CpuRates:
    """The prefill threads' rates per kernel path (cost/kernels.py): the FP32 GEMM rate
    cpu_flop_per_s, the FP32 peak behind it (a calibration of cpu_mm_eff scales every GEMM
    path alike) and the batch-1 dot rate over the prefill threads."""
    isa = cpu_isa_class(hw)
    eff = _mm_eff_prior(pr, isa)
    fp = f.cpu_flop_per_s.value
    int_x, _ = machine.quant_gemm_x(hw, pr.name)
    return kernels.CpuRates(fp, fp / eff if eff else fp, f.cpu_dot_elem_per_s.value * f.cpu_dot_batch_x, isa,
                            pr.name, pr.gemm_peak_x, pr.kernel_x, pr.gemm_native_frac, pr.type_cost, int_x=int_x)


def non_expert_params(model: ModelSpec, blocks: frozenset[int] | None = None, output: bool = True) -> float:
    """Weights multiplied per token outside the routed experts (embedding lookup excluded);
    of `blocks` only when given, the output matrix when `output`."""
    return float(sum(dense_weights_by_type(model, blocks, output).values()))


def attention_flops_per_token(model: ModelSpec, depth: int, blocks: frozenset[int] | None = None,
                              mla_ubatch: int = 0) -> float:
    """Score and value products of one token at context depth `depth`:
    4 * cells attended * n_head * d_k per attention layer (d_k = GGUF attention.key_length;
    for MLA that is the absorbed latent width, which is what llama.cpp multiplies).
    `mla_ubatch` > 0 (ik_mla_prompt_ubatch): ik_llama.cpp's MLA prompt path on batches of that
    many tokens (expanded heads, the expansion shared by the batch)."""
    if mla_ubatch:
        layers = attention.attention_layers(model, depth, mla_ubatch, blocks, mla_expanded=True)
        return attention.attention_flops(layers, mla_ubatch) / mla_ubatch
    extra = dict(model.extra)
    d_k = int(cast(int, extra.get("attention.key_length") or (model.n_embd // max(1, model.n_head))))
    flops = 0.0
    for layer in model.trunk_layers:
        if blocks is not None and layer.index not in blocks:
            continue
        for c in layer.kv:
            if c.name != "k":
                continue
            cells = depth if c.cells == "ctx" else min(depth, c.window) if c.cells == "swa" else 0
            flops += 4.0 * cells * max(1, model.n_head) * d_k
    return flops


def _attention_machine(hw: HardwareProfile, p: Placement, f: Factors, threads: int) -> attention.CpuMachine:
    return attention.cpu_machine(hw, threads, physical_cores(hw, p), f.bw_cpu_bytes_per_s.value,
                                 f.cpu_flop_per_s.value, f.cpu_flop_per_s.rel_err, REF_CLOCK_HZ)


def cpu_attention_decode(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors, f: Factors,
                         depth: int, n_step: int = 1, blocks: frozenset[int] | None = None) -> attention.CpuAttention:
    """One decode step's attention on the CPU at `depth` cells (docs/cost-model.md, CPU attention);
    `blocks`: only those blocks' (a -ngl split's CPU blocks)."""
    layers = attention.attention_layers(model, depth + n_step - 1, p.n_ubatch, blocks)
    return attention.decode_attention(layers, _attention_machine(hw, p, f, p.n_threads), pr.name,
                                      p.cache_type_k, p.cache_type_v, p.flash_attn, n_step,
                                      split_kv=_pre_split_kv_build(p, pr) is None)


def _pre_split_kv_build(p: Placement, pr: BackendPriors) -> int | None:
    """The plan's llama.cpp build when it predates the split-KV decode attention (PR #19209),
    else None (no build named: a current one)."""
    build = p.options.llama_build if backends.behaviour(pr.name).takes(LLAMA_BUILD_KEY) else None
    return build if build is not None and build < attention.FA_SPLIT_KV_FROM_BUILD else None


def ik_mla_prompt_ubatch(model: ModelSpec, p: Placement, pr: BackendPriors, u: int) -> int:
    """u when ik_llama.cpp takes its expanded-heads MLA path for batches of u tokens (-mla 2/3
    with flash attention, attention.IK_MLA_PP_MIN_TOKENS) on a model whose GGUF gives the heads'
    sizes, else 0."""
    ok = (backends.behaviour(pr.name).mla_expanded_prompt and p.flash_attn and u >= attention.IK_MLA_PP_MIN_TOKENS
          and attention.mla_prompt_dims(model) is not None)
    return u if ok else 0


def cpu_attention_prefill(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors, f: Factors,
                          mean_depth: int, u: int, blocks: frozenset[int] | None = None) -> attention.CpuAttention:
    """One ubatch of u tokens' attention on the CPU, its cells at the prompt's mean depth."""
    layers = attention.attention_layers(model, mean_depth, p.n_ubatch, blocks,
                                        mla_expanded=bool(ik_mla_prompt_ubatch(model, p, pr, u)))
    return attention.prefill_attention(layers, _attention_machine(hw, p, f, p.threads_batch), pr.name,
                                       p.cache_type_k, p.cache_type_v, u, p.flash_attn)


@dataclass(frozen=True)
class SplitLayers:
    """llama.cpp -ngl N with blocks wholly on the CPU (Placement.n_gpu_layers; the rule is
    planner/memory/devices.py assign_blocks): which blocks, and what of the per-token work
    moves with them. Empty for every other placement.

    blocks       the CPU blocks (weights, KV cache and their ops: src/llama-model.cpp
                 load_tensors dev_layer; src/llama-kv-cache.cpp puts layer il's K/V on
                 dev_layer(il))
    out_gpu      the output layer's device is a GPU (N = n_layer_all + 1), else the CPU
    dense_bytes  resident (non-expert) bytes of the CPU blocks, + output when out_gpu is False
    params       the matching multiplied weights (norm vectors excluded)
    moe_on_cpu   the CPU blocks' MoE layers: their routed experts are host-resident like
                 --cpu-moe-layers' and are costed by the same terms"""

    blocks: frozenset[int] = frozenset()
    out_gpu: bool = True
    n_trunk: int = 0
    dense_bytes: int = 0
    params: float = 0.0
    moe_on_cpu: frozenset[int] = frozenset()

    def attention_flops(self, model: ModelSpec, depth: int, mla_ubatch: int = 0) -> float:
        return attention_flops_per_token(model, depth, self.blocks, mla_ubatch) if self.blocks else 0.0


def ngl_split(model: ModelSpec, p: Placement, f: Factors) -> SplitLayers:
    if f.cpu_only or p.n_gpu_layers is None or not p.n_gpus:
        return SplitLayers()
    blocks, out_gpu = layer_split(model, p)
    if not blocks and out_gpu:
        return SplitLayers()
    out_b = sum(t.n_bytes for t in model.globals if t.group != "embed")
    dense = sum(layer.resident_bytes for layer in model.trunk_layers if layer.index in blocks)
    return SplitLayers(blocks=blocks, out_gpu=out_gpu,
                       n_trunk=sum(1 for layer in model.trunk_layers if layer.index in blocks),
                       dense_bytes=dense + (0 if out_gpu else out_b),
                       params=non_expert_params(model, blocks, output=not out_gpu),
                       moe_on_cpu=frozenset(i for i in model.moe_layer_indices if i in blocks))


def _split_hops(split: SplitLayers, model: ModelSpec) -> int:
    """Host<->GPU hand-overs of the hidden state per forward pass at the -ngl split: into the
    first GPU layer (a block, or the output layer, which llama.cpp counts as the first of the
    N GPU layers), and back out if blocks were on a GPU but the output were not."""
    has_gpu_blocks = split.n_trunk < len(model.trunk_layers)
    return (1 if has_gpu_blocks or split.out_gpu else 0) + (1 if has_gpu_blocks and not split.out_gpu else 0)


def _matmul_err(mm: kernels.MatmulTime, f: Factors) -> float:
    """Uncertainty of a CPU matmul time: the dot rate's for the share run by dot-product
    kernels (vec_dot, iqk's own), the GEMM rate's for the rest."""
    dot_share = sum(mm.shares.get(k, 0.0) for k in ("vec_dot", "repack_gemv", "iqk"))
    return dot_share * f.cpu_dot_elem_per_s.rel_err + (1.0 - dot_share) * f.cpu_flop_per_s.rel_err


# How a decode thread's weight reads and its dequantise-and-dot overlap: the CPU time of a batch
# of weights is (read^p + compute^p)^(1/p), not max(read, compute) (p -> infinity) -- a core
# waits on loads it has not prefetched far enough while its SIMD pipes are busy, and the pipes
# idle while it waits. p from published TG-vs-threads sweeps on one CPU, the train split's only
# (benchmarks/split.py; benchmarks/overlap_fit.py: 32 sweeps on a 7950X, a 5975WX and an M2 Max):
# best 1.75, bootstrap over ceiling groups 1.5-2.0 (all 58 sweeps, test ones included: 2.0).
DECODE_OVERLAP_P = 1.75


def compute_excess(t_dot: float, t_read: float) -> float:
    """Seconds the dot products add to a read of t_read seconds (DECODE_OVERLAP_P)."""
    if t_dot <= 0 or t_read <= 0:
        return max(0.0, t_dot - t_read)
    q = DECODE_OVERLAP_P
    return t_read * ((1.0 + (t_dot / t_read) ** q) ** (1.0 / q) - 1.0)


def _overlap_text(read: str, dot: str) -> str:
    q = DECODE_OVERLAP_P
    return f"({read}^{q:g} + {dot}^{q:g})^(1/{q:g}) - {read}"


def excess_term(name: str, dot_weights: float, rate: float, t_read: float) -> Term:
    """The CPU's dequantise-and-dot time beyond the read of the same weights."""
    t_dot = dot_weights / max(1.0, rate)
    return Term(name, compute_excess(t_dot, t_read), "cpu-compute",
                _overlap_text("read", "dot") + f", dot = {dot_weights / 1e9:.2f} G weights / {rate / 1e9:.0f} G/s = "
                f"{t_dot * 1e3:.2f} ms")


# one hop of the pipeline between two GPUs, per step: ggml_backend_sched_compute_splits
# (ggml/src/ggml-backend.cpp) waits for the previous split's event and copies the hidden
# state into the next device (ggml_backend_tensor_copy_async: cudaMemcpyPeerAsync, staged
# through host memory when the GPUs have no P2P). A prior: one small copy's latency plus the
# event round trip, ~ two PCIe transactions and a driver call; rel. error 0.5.
S_HOP_S = 20e-6


S_HOP_REL_ERR = 0.5
