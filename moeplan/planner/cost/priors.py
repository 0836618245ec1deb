"""Per-backend efficiency priors (the data lives in profiles/backends.toml, read by probes).

A prior is what the cost model assumes before anything was measured on this machine. The
order of trust is: calibrated factor (HardwareProfile.calibration) > measured figure of the
profile > these priors. Every prior carries a relative uncertainty that feeds the range.
The factors themselves (unit, bounds, error key, machine- or backend-level) are listed once,
in factors.py; read_priors checks the bundled values against that table.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BackendPriors:
    """Efficiency factors of one runtime. Symbols as in cost.py's docstring.

    eta_gpu: fraction of the GPU's effective memory bandwidth that decode kernels reach.
    eta_cpu: fraction of a NUMA node's effective DRAM read bandwidth reached when the CPU
        streams routed experts in decode.
    rho_remote: remote/local read-bandwidth ratio when the profile has no measured matrix.
    core_read_share: one core's read rate as a multiple of (node bandwidth / node cores):
        b_core = core_read_share * BW_node / n_cores_node (STREAM saturates a node with about
        1/core_read_share of its cores).
    cpu_dot_weights_per_cycle: decode (batch 1) dot-product rate of one core in Q8_0 weights
        per clock cycle (at the profile's base clock); other types scale by `type_cost`.
    type_cost: relative cost per weight of a type's batch-1 dot product against Q8_0 (>1 =
        slower), the backend's own kernels (backends.toml [type_cost] + [<backend>.type_cost]).
    s_sync_s: fixed cost per CPU-expert layer per token (two backend switches, copies of the
        activations, kernel launches).
    barriers: how the CPU threads wait for each other in decode: 'ggml-graph' = a barrier after
        every node of the CPU's graph, each T x the core-to-core hand-over (cost/graph.py,
        machine.barrier_handoff_s); 'jobs' = n_cpu_ops_per_layer jobs per CPU layer, each
        ending in a wait of s_barrier_s_per_thread x T (doubled across sockets).
    s_layer_gpu_s: fixed GPU cost per layer per token (kernel launches not hidden by graphs).
    t_token_s: fixed per-token cost (sampling, graph build, host sync).
    s_layer_host_s: fixed host cost per block per token wherever the block runs, for a runtime
        whose host launches every op one by one (the bundled executor's Python and torch
        dispatch); 0 where a graph is built once per token (in t_token_s).
    s_expert_op_s: fixed cost per routed expert per MoE layer per token, for a runtime that
        launches each chosen expert's FFN as its own ops (the bundled executor's run_experts
        loop); 0 where one fused op (ggml's MUL_MAT_ID) covers all of a layer's experts.
    pi_h2d: fraction of the host-to-GPU copy rate that expert uploads reach in prefill.
    gpu_mfu: fraction of the GPU's dense FP16 tensor rate reached by prefill matmuls.
    cpu_mm_eff: batched (prefill) matmul rate of one core as a fraction of its FP32 FMA peak
        (the profile's cpu.core_flop_per_s), by ISA class (AMX can exceed 1).
    gemm_peak_x: {kernel path: {ISA class: rate}} of the quantized prefill GEMM paths
        (cost/kernels.py: mainline 'repack' / 'sgemm' / 'amx', ik_llama.cpp 'iqk_repack') as
        multiples of the FP32 FMA peak of the anchor core (on another core, times
        machine.quant_gemm_x: its integer SIMD width); a path absent here runs at cpu_mm_eff.
    gemm_native_frac: {ggml type: rate of the type's own iqk GEMM / the repacked path's} at
        full 8-column passes (ik_llama.cpp's published PP-512 tables).
    kernel_x: multipliers of the batch-1 dot rate in prefill: 'vec_dot_batch' (the same kernels
        on cache-resident weights / the decode prior), 'repack_gemv' (mainline's interleaved
        gemv for repacked experts / vec_dot).
    numa_aware: per-node thread pools reading node-local copies of the experts (KTransformers).
    op_offload: 'mainline' (copy used experts when ubatch >= 32), 'ik' (when ubatch*k >=
        32*n_experts), 'never' (CPU computes its experts in prefill too), 'weights' (vLLM's
        --cpu-offload-gb: offloaded weights cross PCIe in every forward pass, decode too).
    zipf_s: skew of expert popularity used for cache hit rates (0 = uniform).
    rel_err: relative uncertainty of each prior (1 sigma), by name.
    term_scale: {'decode'|'prefill': {group: x}} time scales of the term groups (cpu, gpu, pcie,
        fixed) fitted on the public measurement set (profiles/fit.json, docs/cost-model.md);
        empty = the mechanism priors alone.
    term_range_log: {'decode'|'prefill': {group|'all': w}} log half-width of the range: the 80th
        percentile of the held-out |log(predicted/measured) - centre| of rows that group dominates.
    term_range_center: {'decode'|'prefill': {group|'all': c}} the median held-out
        log(predicted/measured) of those rows: the range is value x exp(-c -/+ w).
    """

    name: str
    eta_gpu: float = 0.8
    eta_cpu: float = 0.65
    rho_remote: float = 0.3
    core_read_share: float = 2.5
    cpu_dot_weights_per_cycle: float = 4.2
    type_cost: dict[str, float] = field(default_factory=dict)
    s_sync_s: float = 100e-6
    barriers: str = "jobs"
    s_barrier_s_per_thread: float = 0.3e-6
    n_cpu_ops_per_layer: int = 4
    s_layer_gpu_s: float = 60e-6
    t_token_s: float = 1e-3
    s_layer_host_s: float = 0.0
    s_expert_op_s: float = 0.0
    pi_h2d: float = 0.8
    gpu_mfu: float = 0.35
    cpu_mm_eff: dict[str, float] = field(default_factory=dict)
    gemm_peak_x: dict[str, dict[str, float]] = field(default_factory=dict)
    gemm_native_frac: dict[str, float] = field(default_factory=dict)
    kernel_x: dict[str, float] = field(default_factory=dict)
    numa_aware: bool = False
    op_offload: str = "mainline"
    zipf_s: float = 0.5
    rel_err: dict[str, float] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    term_scale: dict[str, dict[str, float]] = field(default_factory=dict)
    term_range_log: dict[str, dict[str, float]] = field(default_factory=dict)
    term_range_center: dict[str, dict[str, float]] = field(default_factory=dict)

    def err(self, name: str, default: float = 0.3) -> float:
        return self.rel_err.get(name, default)
