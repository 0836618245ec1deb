"""Decode and prefill time of a placement, as a sum of named terms.

Let C / G be the MoE layers whose routed experts are in host RAM / on the GPU, N experts per
layer, k used per token, E_l the expert bytes of layer l and W_l its expert weights
(elements), so one expert is S_exp = E_l / N bytes and P_exp = W_l / N weights.

Decode, seconds per token (docs/design.md §5):
  t_tok = t_gpu_weights + t_kv + t_launch + t_cpu_read + t_cpu_compute_excess + t_sync
          + t_nvme + t_token
  t_gpu_weights = (R_dense + sum_G k/N * E_l) / BW_g          BW_g = eta_gpu * BW_gpu
  t_kv          = KV_read(depth) / BW_g
  t_launch      = n_layers * s_layer_gpu
  t_cpu_read    = sum_C k/N * E_l * (1 - h) / BW_c            (memory time of CPU experts)
  t_cpu_compute_excess = (t_cpu_read^p + t_dot^p)^(1/p) - t_cpu_read,
                  t_dot = sum_C k/N * W_l * c_type * (1 - h) / (T * r_dot)
                  (a thread's loads and its dot products overlap imperfectly: p = DECODE_OVERLAP_P
                  = 2 from published TG-vs-threads sweeps; p -> infinity would be the roofline max)
  t_sync        = |C| * (s_sync + B_split * T * L_handoff * x_sockets)   (B_split: barriers of the
                  CPU's split of a MoE block, cost/graph.py; L_handoff: machine.barrier_handoff_s)
  t_nvme        = m * sum_C k/N * E_l / BW_nvme    (m: share of CPU expert pages not resident)
  BW_c = min(T * b_core, eta_cpu * sum_{memory nodes} BW_node), then the remote share f
         (NUMA policy) gives 1/BW_c' = (1-f)/BW_c + f/(rho * BW_c); on Windows every policy
         but a bind (`start /NODE`) is the OS default, pages spread over n nodes: f = 1 - 1/n
  h = GPU expert-cache hit rate = (c/N)^(1 - s) for c cached experts per CPU layer (Zipf s)

Speculative decoding with n drafted tokens and acceptance a: one verification step reads
  the experts of n+1 tokens, U(n+1) = N (1 - (1 - k/N)^(n+1)) per layer instead of k, and
  yields (1 - a^(n+1)) / (1 - a) tokens.

Prefill, per ubatch of u tokens (U(u) distinct experts per layer):
  op-offload active (mainline: u >= 32; ik_llama.cpp: u*k >= 32*N):
      t_h2d = sum_C U(u)/N * E_l / (pi * B_h2d)       (used experts copied, not overlapped)
  otherwise the CPU computes its experts:
      t_cpu = sum_C max(u * 2 * k * P_exp_l / F_cpu, U(u)/N * E_l / BW_c)
  t_gpu = max(2 * u * P_active_gpu + attention flops) / (mfu * F_gpu),
              (R_dense + sum_G U(u)/N * E_l) / BW_g)
  t_ubatch = t_gpu + t_h2d + t_cpu + |C| * s_sync ; prefill tok/s = prompt / sum t_ubatch

A plain layer split (-ngl N, Placement.n_gpu_layers) leaves the first blocks wholly on the
CPU: their routed experts join C above; their dense weights R_dense_cpu and KV are read at BW_c
(cpu_blocks_read, cpu_blocks_compute_excess, cpu_blocks_attention, cpu_blocks_barriers) and
the hidden state crosses PCIe at the split (split_hop); in prefill with op-offload their dense
weights are copied to the GPU every ubatch (h2d_cpu_blocks), else the CPU multiplies them
(cpu_blocks_matmul). Formulas at SplitLayers and the _cpu_block_*_terms functions.

Each factor carries a source (calibrated > measured > spec-sheet > prior) and a relative
uncertainty; the range of a prediction combines them over the terms they feed.
"""
from __future__ import annotations

from moeplan.planner import backends
from moeplan.planner.cost import attention, graph, machine
from moeplan.planner.cost.decode import estimate_decode_terms
from moeplan.planner.cost.prefill import kt_chunk_tokens
from moeplan.planner.cost.prefill_path import estimate_prefill_terms, kt_prefill_crossover_tokens, kt_prefill_threshold
from moeplan.planner.cost.priors import BackendPriors
from moeplan.planner.cost.ranges import (
    BOTTLENECK_TEXT,
    STAND_IN_CPU_LOG_SPREAD,
    _bottleneck,
    _stand_in_extra,
    _terms_range,
    dominant_group,
    fitted_term_scales,
    held_out_range,
    range_key,
    range_tier_note,
)
from moeplan.planner.cost.report import (
    _resident_share,
    memory_report,
    node_ram_split,
    page_cache_short_bytes,
    paging_decode_tok_s,
)
from moeplan.planner.cost.resolve import (
    LINK_READ,
    REF_CLOCK_HZ,
    RHO_SUB_NUMA,
    cpu_isa_class,
    cpu_nodes,
    default_threads,
    factors_used,
    physical_cores,
    resolve_factors,
    used_nodes,
)
from moeplan.planner.cost.work import (
    DECODE_OVERLAP_P,
    _pre_split_kv_build,
    cache_hit_rate,
    compute_excess,
    cpu_attention_decode,
    distinct_experts,
    dot_elements,
)
from moeplan.planner.hardware.profile import OS_RESERVE_BYTES, HardwareProfile
from moeplan.planner.memory.accounting import MemoryConstants, estimate_memory
from moeplan.planner.memory.cache import plan_cache
from moeplan.planner.memory.devices import layer_split
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement
from moeplan.planner.plan import Estimate, Term

# names the rest of the package and the tests import from here (the estimate's entry module);
# each lives in the module of its concern
__all__ = ["BOTTLENECK_TEXT", "DECODE_OVERLAP_P", "LINK_READ", "REF_CLOCK_HZ", "RHO_SUB_NUMA", "STAND_IN_CPU_LOG_SPREAD",
           "cache_hit_rate", "compute_excess", "cpu_attention_decode", "cpu_isa_class", "cpu_nodes", "default_threads",
           "distinct_experts", "dominant_group", "dot_elements", "estimate", "estimate_prefill_terms",
           "fitted_term_scales", "held_out_range", "kt_plan_threshold", "kt_prefill_crossover_tokens",
           "physical_cores", "resolve_factors", "used_nodes"]


def kt_plan_threshold(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors,
                      consts: MemoryConstants | None = None) -> int:
    """The --kt-gpu-prefill-token-threshold the planner writes into a KTransformers plan."""
    with plan_cache():
        p, mem, f = _memory_and_factors(model, p, hw, pr, consts)
        return kt_prefill_crossover_tokens(model, p, hw, pr, f, mem.devices if not f.cpu_only else ())


def _memory_and_factors(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors,
                        consts: MemoryConstants | None, repack_types: tuple[str, ...] = ()):
    """(the placement as the hardware allows it, its memory, the resolved factors)."""
    if not hw.gpus and p.n_gpus:
        p = p.with_(n_gpus=0)
    if consts is None:
        from moeplan.planner.memory.constants import memory_constants

        consts = memory_constants(hw, pr.name)
    mem = estimate_memory(model, p, consts, repack_types=repack_types)
    f = resolve_factors(hw, pr, p, host_bytes=mem.ram_bytes, expert_barriers=graph.expert_split_barriers(model, pr.name))
    return p, mem, f


def estimate(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors, *, depth: int = 0,
             n_prompt: int = 4096, consts: MemoryConstants | None = None,
             repack_types: tuple[str, ...] = (), prompt_depth: int = 0) -> Estimate:
    """Memory, decode and prefill speed of placement `p` on `hw` with backend priors `pr`
    (within the caller's memo, e.g. the search's, else one of its own); the prompt follows
    prompt_depth cached tokens."""
    with plan_cache():
        return _estimate(model, p, hw, pr, depth, n_prompt, consts, repack_types, prompt_depth)


def _notes(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors, f, mem, devices: tuple,
           res_share: float, short: int, paging: float, dterms: list[Term], per_step: float) -> list[str]:
    """What an estimate tells beside its figures: NUMA pools, the prefill path, memory pressure,
    the build, a stand-in CPU, speculation and the -ngl split."""
    notes: list[str] = []
    pools = machine.kt_pool_count(p.numa, len(used_nodes(hw, p))) if pr.numa_aware and p.cpu_moe_layers else 1
    if pools > 1:
        notes.append(f"{pools} kt-kernel pools split every CPU expert between the nodes (RAM counted once); "
                     "KTransformers 0.2/0.3 built with USE_NUMA=1 copies them to every node instead "
                     f"({pools}x the {mem.get('weights_experts_cpu') / 2**30:.1f} GiB of CPU experts)")
    elif pr.numa_aware and p.cpu_moe_layers and len(cpu_nodes(hw)) > 1 and p.numa == "none":
        notes.append("one KTransformers thread pool on a multi-node machine: most expert reads cross the socket "
                     "links; per-node pools (--numa distribute: kt-kernel --kt-threadpool-count, or a USE_NUMA=1 "
                     "build of 0.2/0.3) read node-local memory")
    if backends.behaviour(pr.name).layerwise_gpu_prefill and p.op_offload and p.cpu_moe_layers and not f.cpu_only:
        thr = kt_prefill_threshold(model, p, hw, pr, f, devices)
        own = p.options.kt_gpu_prefill_token_threshold is not None
        notes.append(f"prefill: layer-wise on the GPU (every CPU layer's experts uploaded per "
                     f"{kt_chunk_tokens(p)}-token chunk, --chunked-prefill-size) for prompts of {thr} tokens or more, the CPU "
                     f"experts below (--kt-gpu-prefill-token-threshold {thr}, "
                     + ("the plan's)" if own else "where the layer-wise path gets faster)")
                     if thr else "prefill: the CPU experts for every prompt length (the layer-wise GPU path "
                     "is never faster here, or the plan's threshold is 0)")
    if res_share < 1.0:
        notes.append(f"only {res_share:.0%} of the CPU experts fit in RAM: the rest is read from NVMe")
    if paging:
        notes.append(f"page cache: the {model.file_bytes / 1e9:.1f} GB file, {mem.ram_anon_bytes / 2**30:.1f} GiB of "
                     f"buffers and {OS_RESERVE_BYTES / 2**30:.0f} GiB for the OS exceed the {hw.ram_bytes / 2**30:.1f} GiB "
                     f"of RAM by {short / 2**30:.1f} GiB; "
                     "with mmap the kernel may keep the pages of the tensors copied to the GPU and evict CPU expert "
                     f"pages, then decode falls towards {paging:.1f} tok/s (experts read from the disk, the range's "
                     "low end): --no-mmap keeps the CPU weights in RAM")
    build = _pre_split_kv_build(p, pr)
    if build is not None and any(t.name in ("cpu_attention", "cpu_blocks_attention") for t in dterms):
        notes.append(f"llama.cpp build {build}: CPU flash attention in decode runs one thread per q head over the "
                     f"whole cache (split over the KV cells from b{attention.FA_SPLIT_KV_FROM_BUILD}, PR #19209)")
    if hw.cpu.source == "prior":
        notes.append(f"CPU not named: costed as {hw.cpu.model}, a stand-in {hw.cpu.segment or 'CPU'} (the range is wider); "
                     "describe the machine with `moeplan hardware --cpu NAME` for its own figures")
    if p.n_draft:
        notes.append(f"speculative: {p.n_draft} drafted, acceptance {p.draft_accept:.0%} -> "
                     f"{per_step:.2f} tokens per step")
    if f.cpu_only:
        notes.append("no GPU layers: everything runs on the CPU")
    elif p.n_gpu_layers is not None:
        blocks, out_gpu = layer_split(model, p)
        if blocks or not out_gpu:
            notes.append(f"-ngl {p.n_gpu_layers}: {len(blocks)} of {len(model.layers)} blocks"
                         + ("" if out_gpu else " and the output layer") + " run on the CPU with their KV cache")
    return notes


def _estimate(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors, depth: int,
              n_prompt: int, consts: MemoryConstants | None, repack_types: tuple[str, ...],
              prompt_depth: int = 0) -> Estimate:
    p, mem, f = _memory_and_factors(model, p, hw, pr, consts, repack_types)
    hw = hw.with_gpu_use(mem.vram_bytes)  # an iGPU's unused GTT stays host RAM (hardware/profile.py)
    other_host = mem.ram_bytes - mem.get("weights_experts_cpu")
    res_share = _resident_share(model, p, hw, other_host)
    devices = mem.devices if not f.cpu_only else ()
    dterms, derrs, per_step = estimate_decode_terms(model, p, hw, pr, f, depth, res_share, devices)
    dterms = fitted_term_scales(dterms, pr.term_scale.get("decode", {}))
    t_step = sum(t.seconds for t in dterms)
    decode = per_step / t_step if t_step > 0 else 0.0
    dr = _terms_range(dterms, derrs)
    pterms, perrs = estimate_prefill_terms(model, p, hw, pr, f, n_prompt, devices, prompt_depth)
    pterms = fitted_term_scales(pterms, pr.term_scale.get("prefill", {}))
    t_pp = sum(t.seconds for t in pterms)
    prefill = 1.0 / t_pp if t_pp > 0 else 0.0
    prr = _terms_range(pterms, perrs)
    host = mem.ram_bytes
    short = page_cache_short_bytes(model, p, hw, pr, mem.ram_anon_bytes)
    paging = paging_decode_tok_s(dterms, f, per_step) if short else 0.0
    notes = _notes(model, p, hw, pr, f, mem, devices, res_share, short, paging, dterms, per_step)
    d_range = (held_out_range(decode, dterms, pr.term_range_log.get("decode", {}), _stand_in_extra(hw, dterms),
                              pr.term_range_center.get("decode"))
               or (decode / (1 + dr), decode / max(0.1, 1 - dr)))
    if paging:
        d_range = (min(d_range[0], paging), d_range[1])
    p_range = held_out_range(prefill, pterms, pr.term_range_log.get("prefill", {}), _stand_in_extra(hw, pterms),
                             pr.term_range_center.get("prefill"))
    tiers = {m: range_key(t, pr.term_range_log.get(m, {})) for m, t in (("decode", dterms), ("prefill", pterms))}
    notes += [n for m, t in (("decode", dterms), ("prefill", pterms))
              if (n := range_tier_note(m, tiers[m], t, pr.term_range_log.get(m, {})))]
    return Estimate(
        decode_tok_s=decode,
        decode_tok_s_range=d_range,
        prefill_tok_s=prefill,
        prefill_tok_s_range=p_range or (prefill / (1 + prr), prefill / max(0.1, 1 - prr)),
        decode_terms=tuple(t if p.n_draft == 0 else Term(t.name, t.seconds / per_step, t.resource, t.formula)
                           for t in dterms),
        prefill_terms=tuple(pterms),
        bottleneck=_bottleneck(dterms),
        prefill_bottleneck=_bottleneck(pterms),
        vram_bytes=0 if f.cpu_only else mem.vram_bytes,
        vram_required_bytes=0 if f.cpu_only else mem.vram_required_bytes,
        ram_bytes=host,
        memory=memory_report(mem, hw),
        ram_bytes_per_node=node_ram_split(model, p, hw, pr, host, int(mem.get("weights_experts_cpu"))),
        depth=depth,
        factors=factors_used(f),
        notes=tuple(notes),
        decode_tok_s_paging=paging,
        decode_range_tier=tiers["decode"] or "",
        prefill_range_tier=tiers["prefill"] or "",
    )
