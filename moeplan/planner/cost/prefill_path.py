"""Which prefill path a plan takes: a backend with a layer-wise GPU prefill (KTransformers'
--kt-gpu-prefill-token-threshold) uploads every CPU layer's experts per chunk for prompts of at
least the threshold; the planner picks the threshold where that path gets faster.
"""
from __future__ import annotations

from moeplan.planner import backends
from moeplan.planner.cost import machine
from moeplan.planner.cost.prefill import kt_chunk_tokens, layerwise_possible, prefill_terms
from moeplan.planner.cost.priors import BackendPriors
from moeplan.planner.cost.resolve import Factors
from moeplan.planner.hardware.profile import HardwareProfile
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement
from moeplan.planner.plan import Term


def kt_prefill_threshold(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors,
                         f: Factors, devices: tuple = ()) -> int:
    """The --kt-gpu-prefill-token-threshold a KTransformers plan runs with: the plan's own
    (Placement.options), else the crossover the planner picks (kt_prefill_crossover_tokens)."""
    own = p.options.kt_gpu_prefill_token_threshold
    if own is not None:
        return own
    return kt_prefill_crossover_tokens(model, p, hw, pr, f, devices)


def kt_prefill_crossover_tokens(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors,
                                f: Factors, devices: tuple = ()) -> int:
    """Shortest prompt for which KTransformers' layer-wise GPU prefill (every CPU layer's experts
    uploaded per chunk + GPU compute) takes less time than the CPU experts; 0 (off) when even a
    full chunk (kt_chunk_tokens) is faster on the CPU (longer prompts only repeat
    chunks, so the layer-wise path never wins). The upload is a fixed cost per chunk and the
    CPU path grows with the prompt, so the difference changes sign once: bisection."""
    if not backends.behaviour(pr.name).layerwise_gpu_prefill or f.cpu_only or not p.cpu_moe_layers or not p.op_offload:
        return 0

    def faster_on_gpu(n: int) -> bool:
        t_lw = sum(t.seconds for t in estimate_prefill_terms(model, p, hw, pr, f, n, devices, layerwise=True)[0])
        t_cpu = sum(t.seconds for t in estimate_prefill_terms(model, p, hw, pr, f, n, devices, layerwise=False)[0])
        return t_lw < t_cpu

    hi = kt_chunk_tokens(p)
    if not faster_on_gpu(hi):
        return 0
    lo = 1
    while lo < hi:
        mid = (lo + hi) // 2
        if faster_on_gpu(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def estimate_prefill_terms(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors,
                           f: Factors, n_prompt: int, devices: tuple = (), prompt_depth: int = 0, *,
                           layerwise: bool | None = None) -> tuple[list[Term], dict[str, float]]:
    """Terms of processing an n_prompt-token prompt on the path the plan takes (cost/prefill.py
    prefill_terms); `layerwise` forces KTransformers' prefill path (None: the plan's threshold
    decides)."""
    if layerwise is None:
        kt_gpu = layerwise_possible(p, pr, f)
        layerwise = kt_gpu and machine.kt_layerwise_prefill(pr.name, max(1, n_prompt), True,
                                                            kt_prefill_threshold(model, p, hw, pr, f, devices))
    return prefill_terms(model, p, hw, pr, f, n_prompt, devices, prompt_depth, layerwise=layerwise)
