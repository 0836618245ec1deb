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

import math
from dataclasses import dataclass, replace

from moeplan.errors import InputError
from moeplan.planner import backends
from moeplan.planner.cost import attention, graph, kernels, machine
from moeplan.planner.cost import factors as F
from moeplan.planner.cost.priors import BackendPriors
from moeplan.planner.hardware.profile import OS_RESERVE_BYTES, Figure, HardwareProfile, NumaNode, pcie_bytes_per_s
from moeplan.planner.hardware.windows import GROUP_SIZE as WINDOWS_GROUP_SIZE
from moeplan.planner.memory.accounting import MemoryConstants, estimate_memory, kv_read_bytes
from moeplan.planner.memory.cache import memo, plan_cache
from moeplan.planner.memory.devices import layer_split
from moeplan.planner.model.spec import LayerSpec, ModelSpec
from moeplan.planner.placement import Placement
from moeplan.planner.plan import Estimate, FactorFigure, FactorsUsed, GpuMemory, MemoryLine, MemoryReport, Term

# nominal clock of the machine the batch-1 dot-product anchor was measured on (docs/design.md §4:
# Q8_0 experts at 18.7 GB/s with 2 threads, a Sapphire Rapids-class VM reporting 2100 MHz);
# also the clock assumed when a profile gives none
REF_CLOCK_HZ = 2.1e9
# 1.28 sigma: the reported range is about an 80% interval
RANGE_SIGMA = 1.28
# a read-only stream reaches ~90% of an Infinity Fabric link (profiles/parts/efficiency.toml
# [fabric]) and ~70% of a QPI/UPI link's data rate (snoop and protocol traffic share it)
FABRIC_READ = 0.90
LINK_READ = 0.70
_SOURCE_ERR = {"measured": 0.07, "calibrated": 0.05, "nvml": 0.1, "sysfs": 0.1, "user": 0.15,
               "spec-sheet": 0.15, "prior": 0.3}


# the resolved factors: one FactorFigure (value, source, 1-sigma rel_err) per rate, as Estimate
# carries them (planner/plan.py)
Rate = FactorFigure
Factors = FactorsUsed


RHO_SUB_NUMA = 0.85


def _one_socket(nodes: tuple[NumaNode, ...]) -> bool:
    """The nodes are sub-NUMA clusters of one socket: SLIT distances between them all < 20
    (sockets are 20+ apart, SNC / NPS sub-nodes 11-12)."""
    ids = {n.id for n in nodes}
    pairs = [d for n in nodes for j, d in enumerate(n.distances) if j in ids and j != n.id]
    return bool(pairs) and len(pairs) == len(nodes) * (len(nodes) - 1) and all(d < 20 for d in pairs)


def factors_used(f: Factors) -> FactorsUsed:
    """The factors as an estimate reports them (uncertainties rounded to 4 places: stable JSON)."""
    return replace(f, **{name: replace(v, rel_err=round(v.rel_err, 4))
                         for name, v in vars(f).items() if isinstance(v, FactorFigure)})


# ---- resolving factors ---------------------------------------------------------------------

def _fig(fig: Figure | None) -> tuple[float, str, float] | None:
    if fig is None or not fig.value:
        return None
    err = _SOURCE_ERR.get(fig.source, 0.2)
    if fig.source in ("measured", "prior") and fig.spread:
        err = max(err, fig.spread / 2)
    return fig.effective, fig.source, err


# factors that describe the machine more than the runtime's kernels (the table's "machine"
# level): a calibration made with one runner (the bundled executor) carries over to other
# backends only for these
MACHINE_FACTORS = F.MACHINE_FACTORS


def _factor(spec: F.FactorSpec, prior: float, pr: BackendPriors, hw: HardwareProfile) -> tuple[float, str, float]:
    """A factor's value, source and 1-sigma relative error.

    A calibration of this backend wins. A calibration made with another runner (e.g. the
    bundled executor) says how this machine deviates from that runner's prior; the same
    ratio is applied to this backend's prior, with more uncertainty. Otherwise the prior.
    """
    name, err_key = spec.name, spec.error_key
    own = hw.calibration_for(pr.name)
    if own and name in own.factors:
        return own.factors[name], "calibrated", max(0.03, own.rel_err.get(name, 0.08))
    for c in hw.calibration:
        if name in MACHINE_FACTORS and c.backend != pr.name and name in c.factors and c.priors.get(name):
            ratio = c.factors[name] / c.priors[name]
            return prior * ratio, f"calibrated via {c.backend}", pr.err(err_key) * 0.5 + 0.1
    return prior, "prior", pr.err(err_key)


def cpu_isa_class(hw: HardwareProfile) -> str:
    isa = set(hw.cpu.isa)
    return ("amx" if "amx_tile" in isa else "avx512_vnni" if "avx512_vnni" in isa else
            "avx512f" if "avx512f" in isa else "avx2" if "avx2" in isa else "neon")


def _mm_eff_prior(pr: BackendPriors, isa_class: str) -> float:
    """The backend's batched-matmul efficiency prior for an ISA class (its best one if unlisted)."""
    return pr.cpu_mm_eff.get(isa_class) or max(pr.cpu_mm_eff.values(), default=0.0)


def cpu_nodes(hw: HardwareProfile) -> tuple[NumaNode, ...]:
    """NUMA nodes that have CPUs (memory-only nodes excluded); one synthetic node if none."""
    nodes = hw.cpu_nodes
    if nodes:
        return nodes
    return (NumaNode(id=0, cpus=tuple(range(hw.cpu.n_threads)), n_physical_cores=hw.cpu.n_cores,
                     mem_total_bytes=hw.system.ram_total_bytes),)


def _node_bw(n: NumaNode, hw: HardwareProfile, n_nodes: int) -> tuple[float, str, float]:
    f = _fig(n.dram_read_bytes_per_s)
    if f:
        return f
    # no per-node figure: split the machine's channels evenly over the nodes
    c = hw.cpu
    if c.memory_channels and c.ram_speed_mts:
        peak = c.memory_channels * c.ram_speed_mts * 1e6 * 8 / max(1, n_nodes)
        return peak * 0.7, "spec-sheet", 0.25
    return 20e9, "prior", 0.5  # one DDR4 channel pair; says "no figure" in the note


def used_nodes(hw: HardwareProfile, p: Placement) -> tuple[NumaNode, ...]:
    nodes = cpu_nodes(hw)
    if p.numa_nodes:
        chosen = tuple(n for n in nodes if n.id in p.numa_nodes)
        if chosen:
            return chosen
    if p.numa == "bind":
        gpu_node = hw.gpus[0].numa_node if hw.gpus else None
        for n in nodes:
            if n.id == gpu_node:
                return (n,)
        return nodes[:1]
    return nodes


def physical_cores(hw: HardwareProfile, p: Placement) -> int:
    """Physical cores of the nodes placement p runs on: llama.cpp's sensible thread count
    (hyperthreads add no memory bandwidth)."""
    return max(1, sum(n.n_physical_cores for n in used_nodes(hw, p)) or hw.cpu.n_cores)


def logical_cpus(hw: HardwareProfile, nodes) -> int:
    """Logical CPUs of these NUMA nodes (the profile's count where the nodes list none)."""
    return sum(len(n.cpus) for n in nodes) or hw.cpu.n_threads


def default_threads(hw: HardwareProfile, p: Placement, backend: str) -> int:
    """The threads a plan runs when none are given: the physical cores of its nodes; under
    KTransformers at most the logical CPUs less the thread that waits on the GPU
    (machine.KT_HELPER_THREADS), so that --cpu_infer does not oversubscribe a CPU without SMT
    (Xeon 6 E-cores, Lunar / Arrow Lake, SMT off in the BIOS)."""
    cores = physical_cores(hw, p)
    if backend != "ktransformers":
        return cores
    return max(1, min(cores, logical_cpus(hw, used_nodes(hw, p)) - machine.KT_HELPER_THREADS))


def resolve_factors(hw: HardwareProfile, pr: BackendPriors, p: Placement, host_bytes: float = 0.0,
                    expert_barriers: int = 4) -> Factors:
    """Turn the profile's figures, calibration and backend priors into the model's rates.
    `expert_barriers`: barriers of the CPU's split of a MoE block (graph.expert_split_barriers)."""
    cpu_only = not hw.gpus or p.n_gpus == 0
    gpu = hw.gpus[0] if hw.gpus else None

    # GPU memory bandwidth and compute
    eta_g, eta_src, eta_err = _factor(F.ETA_GPU, pr.eta_gpu, pr, hw)
    g = _fig(gpu.mem_bw_bytes_per_s) if gpu else None
    if g:
        bw_g = Rate(g[0] * eta_g, f"{g[1]} x {eta_src} eta_gpu={eta_g:.2f}", math.hypot(g[2], eta_err))
    elif gpu and not cpu_only:
        raise InputError(f"GPU {gpu.index} ({gpu.name}) has no memory bandwidth figure in the hardware profile",
                         "rebuild it with `moeplan hardware ... --gpu-bw 448GB/s` or measure with `moeplan probe`")
    else:
        bw_g = Rate(0.0, "none", 0.0, "no GPU")
    mfu, mfu_src, mfu_err = _factor(F.GPU_MFU, pr.gpu_mfu, pr, hw)
    gf = _fig(gpu.fp16_flop_per_s) if gpu else None
    if gf:
        f_gpu = Rate(gf[0] * mfu, f"{gf[1]} x {mfu_src} mfu={mfu:.2f}", math.hypot(gf[2], mfu_err))
    elif gpu and g:
        # no FLOP figure: a modern GPU does ~ 100 FLOP per byte of its bandwidth in FP16
        f_gpu = Rate(g[0] * 100 * mfu, "prior (100 FLOP/B of bandwidth)", 0.5)
    else:
        f_gpu = Rate(0.0, "none", 0.0)
    pi, pi_src, pi_err = _factor(F.PI_H2D, pr.pi_h2d, pr, hw)
    h = _fig(gpu.h2d_bytes_per_s) if gpu else None
    if h:
        h2d = Rate(h[0] * pi, f"{h[1]} x {pi_src} pi={pi:.2f}", math.hypot(h[2], pi_err))
    elif gpu and gpu.pcie_gen and gpu.pcie_width:
        peak = pcie_bytes_per_s(gpu.pcie_gen, gpu.pcie_width) or pcie_bytes_per_s(3, gpu.pcie_width)
        h2d = Rate(peak * 0.8 * pi, f"spec-sheet PCIe {gpu.pcie_gen}x{gpu.pcie_width} x prior",
                   math.hypot(0.15, pi_err))
    elif gpu and not cpu_only:
        # a GPU known by its VRAM alone: the link of most cards of the last generations, PCIe 4.0
        # x16, with the spread from a 3.0 x16 slot to a 5.0 x16 one
        h2d = Rate(pcie_bytes_per_s(4, 16) * 0.8 * pi, "prior: PCIe 4.0 x16 assumed (link not given)",
                   math.hypot(0.5, pi_err), "link not given: pass --pcie GENxLANES")
    else:
        h2d = Rate(0.0, "none", 0.0)

    # CPU: threads, nodes, NUMA policy, the machine model (machine.py)
    nodes = used_nodes(hw, p)
    all_nodes = cpu_nodes(hw)
    n_nodes = len(all_nodes)
    T = max(1, p.n_threads)
    bws = [_node_bw(n, hw, n_nodes) for n in nodes]
    eta_c, etac_src, etac_err = _factor(F.ETA_CPU, pr.eta_cpu, pr, hw)
    rho, rho_src, rho_err = _factor(F.RHO_REMOTE, pr.rho_remote, pr, hw)
    if hw.numa_bw_matrix and len(nodes) > 1:
        m = hw.numa_bw_matrix
        try:
            local = sum(m[n.id][n.id] for n in nodes) / len(nodes)
            remote = [m[a.id][b.id] for a in nodes for b in nodes if a.id != b.id]
            rho, rho_err = (sum(remote) / len(remote)) / local, 0.1  # measured
        except (IndexError, ZeroDivisionError):
            pass
    if len(nodes) > 1 and rho_src == "prior" and not hw.numa_bw_matrix and _one_socket(nodes):
        # sub-NUMA nodes of one socket (SNC / NPS): a remote node's memory is across the die's
        # mesh or the package, not a socket link; Xeon 6980P runs memory-bound workloads within
        # ~10% in HEX mode (2/3 of reads off-die) and SNC3 (Phoronix, 2024-10-02)
        rho, rho_src = RHO_SUB_NUMA, "sub-NUMA nodes of one socket"
    pages_k = 0  # 'none' with pages on k of the nodes: threads near them and far from them differ
    thread_nodes = nodes  # the nodes whose cores run the threads
    # KTransformers: per-node worker pools only under a 'distribute' / multi-node 'bind' plan
    # (machine.kt_pool_count); one pool on several nodes reads like llama.cpp without a policy
    pools = machine.kt_pool_count(p.numa, len(nodes)) if pr.numa_aware else 1
    sockets_all = max(1, hw.cpu.n_sockets)
    if hw.cpu_nodes and n_nodes < sockets_all and pools == 1:
        # one NUMA node over several sockets (AMD NPS0, node interleaving on Intel): the memory
        # controllers interleave every page over all sockets' channels, so whatever the policy a
        # share 1 - 1/sockets of each thread's reads crosses the socket links
        mem_nodes_bw = sum(b[0] for b in bws)
        f_remote = 1 - n_nodes / sockets_all
        note = (f"{n_nodes} NUMA node over {sockets_all} sockets (NPS0 / node interleaving): pages interleaved over "
                f"every socket's channels, {f_remote:.0%} of reads remote")
    elif pools > 1 or len(nodes) == 1:
        mem_nodes_bw = sum(b[0] for b in bws)
        f_remote = 0.0
        note = (f"{pools} per-node pools (kt-kernel --kt-threadpool-count {pools}): each node's threads read "
                "their node's share of every expert" if pools > 1 else f"node {nodes[0].id}")
    elif hw.os == "windows":
        # no numactl and a no-op --numa on Windows (planner/hardware/windows.py): any policy but
        # a `start /NODE` bind leaves the pages spread over the nodes
        mem_nodes_bw = sum(b[0] for b in bws)
        f_remote = 1 - 1 / len(nodes)
        note = (f"Windows default: threads on all nodes, pages spread over nodes {[n.id for n in nodes]}, "
                f"{f_remote:.0%} of reads remote")
        if logical_cpus(hw, nodes) > WINDOWS_GROUP_SIZE:
            # more logical CPUs than one processor group: ggml-cpu's Windows threads are not
            # group-aware (ggml_thread_apply_affinity sets a single 64-bit mask), and Windows 10 /
            # Server 2019 keep a process's threads in its primary group, one node here (Windows 11
            # and Server 2022 spread them over the groups: then this is pessimistic)
            thread_nodes = nodes[:1]
            mem_nodes_bw = bws[0][0]
            note = (f"Windows: threads in one processor group (node {nodes[0].id}, <= {WINDOWS_GROUP_SIZE} logical "
                    f"CPUs), pages spread over nodes {[n.id for n in nodes]}, {f_remote:.0%} of reads remote "
                    "(Windows 11 / Server 2022 spread threads over the groups)")
    elif p.numa == "interleave":
        mem_nodes_bw = sum(b[0] for b in bws)
        f_remote = 1 - 1 / len(nodes)
        note = f"pages interleaved over nodes {[n.id for n in nodes]}"
    elif p.numa == "distribute":
        # --numa distribute: no MAP_POPULATE and MADV_RANDOM (src/llama-mmap.cpp, `if (numa)`), so
        # after the page cache is dropped (the plan says so) each page is faulted in by the first
        # thread that reads it; ggml_is_numa() turns dynamic chunking off (ggml-cpu.c
        # mul_mat / mul_mat_id: `disable_chunking`), thread i always takes chunk i of a matrix,
        # and thread i runs on node i % n (set_numa_thread_affinity): every later read is local
        mem_nodes_bw = sum(b[0] for b in bws)
        f_remote = 0.0
        note = ("threads pinned round-robin over nodes, each page first touched by the thread that reads it "
                "(page cache dropped): reads node-local")
    else:  # none: threads spread by the OS, pages on the loader's node until it is full
        k = machine.pages_nodes(host_bytes, [n.mem_total_bytes for n in nodes])
        mem_nodes_bw = sum(b[0] for b in bws[:k])
        f_remote = 1 - k / len(nodes)
        pages_k = k
        note = (f"no NUMA policy: pages on {'one node' if k == 1 else f'{k} nodes'} (MAP_POPULATE from the loading "
                f"thread), threads on all {len(nodes)}; dynamic chunking lets the threads near the pages take more "
                "of the work")
    # threads on cores: SMT siblings and threads beyond the logical CPUs add no read rate
    n_cores = sum(n.n_physical_cores or len(n.cpus) for n in thread_nodes) or hw.cpu.n_cores
    n_logical = logical_cpus(hw, thread_nodes)
    tu = machine.thread_use(T, n_cores, n_logical)
    sockets_n = max(1, round(len(thread_nodes) * max(1, hw.cpu.n_sockets) / max(1, n_nodes)))
    cores_per_node = max(1, n_cores // len(thread_nodes))
    core_fig = _fig(hw.cpu.core_read_bytes_per_s)
    share, share_src, share_err = _factor(F.CORE_READ_SHARE, pr.core_read_share, pr, hw)
    fam_core = machine.core_read_prior(hw)
    if share_src != "prior":
        b_core, b_how = share * (sum(b[0] for b in bws) / len(bws)) / cores_per_node, share_src
    elif core_fig and core_fig[1] in ("measured", "calibrated", "user"):
        b_core, b_how = core_fig[0], core_fig[1]
    elif fam_core:
        b_core, b_how = fam_core[0], "Little's law prior"
    elif core_fig:
        b_core, b_how = core_fig[0], core_fig[1]
    else:
        b_core, b_how = share * (sum(b[0] for b in bws) / len(bws)) / cores_per_node, share_src
    thread_bw = tu.on_cores * b_core
    ccd = machine.ccd_read_cap(hw, math.ceil(tu.on_cores / sockets_n))
    ccd_bw = ccd[0] * FABRIC_READ * sockets_n if ccd else math.inf
    dram_bw = eta_c * mem_nodes_bw
    bw_loc = min(thread_bw, ccd_bw, dram_bw)
    rem_bw = rho * bw_loc
    page_sockets = max(1, round(len(nodes) * max(1, hw.cpu.n_sockets) / max(1, n_nodes)))
    link = machine.socket_link_cap(hw, len(nodes), page_sockets) if f_remote else None
    if link and page_sockets > 2:
        # more than two sockets: remote reads spread over many links at once; the links,
        # not one pair's remote/local ratio, bound them
        rem_bw = min(bw_loc, link[0] * LINK_READ)
    elif link:
        rem_bw = min(rem_bw, link[0] * LINK_READ)
    if f_remote and pages_k:
        # no --numa: ggml_is_numa() is false, so mul_mat(_id) hands out chunks dynamically
        # (ggml_threadpool_chunk_add): the threads on the k page nodes and the remote ones read
        # side by side, each at its own rate, together bounded by the page nodes' DRAM
        n_u = len(nodes)
        near = min(thread_bw, ccd_bw) * pages_k / n_u
        far = min(rho * min(thread_bw, ccd_bw) * (n_u - pages_k) / n_u,
                  link[0] * LINK_READ if link else math.inf)
        bw_val = min(dram_bw, near + far)
    elif f_remote:
        # every thread reads the same mix (interleaved pages, Windows' spread): it waits for its
        # remote lines, so the rates combine harmonically
        bw_val = 1 / ((1 - f_remote) / max(bw_loc, 1.0) + f_remote / max(rem_bw, 1.0)) if bw_loc > 0 else 0.0
    else:
        bw_val = bw_loc
    src_err = max(b[2] for b in bws)
    bound = min((thread_bw, "threads"), (ccd_bw, "ccd"), (dram_bw, "dram"))[1]
    err = math.hypot(src_err, {"threads": share_err, "ccd": 0.15, "dram": etac_err}[bound], rho_err * f_remote)
    srcs = sorted({b[1] for b in bws})
    smt = f", {tu.smt_threads} on SMT siblings add none" if tu.smt_threads else ""
    if bound == "threads":
        how = f"{tu.on_cores} threads on cores x {b_core / 1e9:.1f} GB/s per core ({b_how}{smt})"
    elif bound == "ccd":
        how = f"CCD links: {ccd[1]} x {FABRIC_READ:.2f}" if ccd else ""
    else:
        how = f"{'/'.join(srcs)} x {etac_src} eta_cpu={eta_c:.2f}"
    if link and f_remote:
        note += f"; remote reads {rem_bw / 1e9:.0f} GB/s ({link[1]})"
    bw_c = Rate(bw_val, how, err, note)

    clock, clock_how = machine.all_core_clock_hz(hw, REF_CLOCK_HZ)
    r_dot, rdot_src, rdot_err = _factor(F.CPU_DOT, pr.cpu_dot_weights_per_cycle, pr, hw)
    if not hw.cpu.base_clock_hz or (hw.cpu.core_flop_per_s is not None
                                    and hw.cpu.core_flop_per_s.source == "prior"):
        rdot_err = math.hypot(rdot_err, 0.3)
    isa_x, isa_how = machine.isa_dot_scale(hw, pr.name) if rdot_src == "prior" else (1.0, "calibrated")
    # a thread on an SMT sibling shares its core's vector units; an oversubscribed one waits
    dot_threads = tu.on_cores + 0.1 * tu.smt_threads
    kt = None
    if pr.name == "ktransformers":
        # --cpu_infer threads plus the spinning hand-over threads (machine.kt_threads)
        node_logical = min((len(n.cpus) for n in thread_nodes), default=0)
        kt = machine.kt_threads(T, n_cores, n_logical, pools, node_logical, hw.system.kernel)
        dot_threads = round(kt.dot_threads, 1)
    dot = Rate(r_dot * isa_x * clock * dot_threads,
               f"{rdot_src} ({r_dot:.1f} weights/cycle x {isa_how} x {clock_how} x {dot_threads:g} threads)", rdot_err)
    isa_class = cpu_isa_class(hw)
    core_peak = _fig(hw.cpu.core_flop_per_s)
    clock_x = clock / (hw.cpu.base_clock_hz or clock)
    peak = core_peak[0] * clock_x if core_peak else clock * (64 if "avx512f" in hw.cpu.isa else 32) * 0.85
    eff, eff_src, eff_err = _factor(F.CPU_MM_EFF, _mm_eff_prior(pr, isa_class), pr, hw)
    tb = machine.thread_use(p.threads_batch, n_cores, n_logical)
    # the batch-1 dot product over the prefill threads (mainline's vec_dot path, iqk's own kernels)
    dot_batch_x = (tb.on_cores + 0.1 * tb.smt_threads) / max(1e-9, dot_threads)
    cpu_flop = Rate(eff * peak * (tb.on_cores + 0.1 * tb.smt_threads),
                    f"{eff_src} ({isa_class}, {eff:.2f} of FP32 peak at {clock / 1e9:.2f} GHz)",
                    math.hypot(eff_err, core_peak[2] if core_peak else 0.3))

    sockets_used = len(thread_nodes) > 1 and hw.cpu.n_sockets > 1
    # a barrier's counter line crosses the socket links: one hop more per doubling of sockets
    xs = 1.0 + math.log2(sockets_n) if sockets_used else 1.0
    s_sync, ss_src, ss_err = _factor(F.S_SYNC_S, pr.s_sync_s, pr, hw)
    oversub = machine.oversubscription_s_per_barrier(tu) if kt is None else kt.wait_s_per_job
    if pr.barriers == "ggml-graph":
        # every node of the CPU's split ends in a barrier (cost/graph.py)
        handoff, handoff_how = machine.barrier_handoff_s(hw, T)
        per_barrier = T * handoff * xs + oversub
        barrier = expert_barriers * per_barrier
        ss_src = f"{ss_src} + {expert_barriers} barriers x {T} threads x {handoff_how}"
    else:
        per_barrier = pr.s_barrier_s_per_thread * T * xs + oversub
        barrier = pr.n_cpu_ops_per_layer * per_barrier
    sync = Rate(s_sync + barrier, ss_src, ss_err)
    if kt is not None and kt.oversubscribed and s_sync + barrier > 0:
        # the wait is a scheduler slice, not a measured figure: about +-60% (CFS vs EEVDF,
        # where the preemption falls in a task)
        sync = Rate(s_sync + barrier, f"{ss_src}; {kt.note}",
                    math.hypot(ss_err * s_sync, 0.6 * barrier) / (s_sync + barrier), kt.note)
    sl, sl_src, sl_err = _factor(F.S_LAYER_GPU_S, pr.s_layer_gpu_s, pr, hw)
    tt, tt_src, tt_err = _factor(F.T_TOKEN_S, pr.t_token_s, pr, hw)
    st = hw.storage[0].seq_read_bytes_per_s if hw.storage else None
    nv = _fig(st)
    nvme = Rate(nv[0], nv[1], nv[2]) if nv else Rate(2e9, "prior (a PCIe 3/4 NVMe)", 0.5)
    return Factors(bw_gpu_bytes_per_s=bw_g, gpu_flop_per_s=f_gpu, h2d_bytes_per_s=h2d, bw_cpu_bytes_per_s=bw_c,
                   cpu_dot_elem_per_s=dot, cpu_flop_per_s=cpu_flop, s_sync_s=sync,
                   s_layer_gpu_s=Rate(sl, sl_src, sl_err), t_token_s=Rate(tt, tt_src, tt_err),
                   nvme_bytes_per_s=nvme, remote_share=f_remote, cross_socket=sockets_used,
                   cpu_only=cpu_only, numa_note=note, barrier_x=xs, oversub_s_per_barrier=oversub,
                   barrier_s=per_barrier,
                   cpu_dot_batch_x=dot_batch_x)


# ---- pieces of the model --------------------------------------------------------------------


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
    return kernels.CpuRates(fp, fp / eff if eff else fp, f.cpu_dot_elem_per_s.value * f.cpu_dot_batch_x, isa,
                            pr.name, pr.gemm_peak_x, pr.kernel_x, pr.gemm_native_frac, pr.type_cost)


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
    d_k = int(extra.get("attention.key_length") or (model.n_embd // max(1, model.n_head)))
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
    build = machine.llama_build_of(p.extra) if pr.name == "llama.cpp" else None
    return build if build is not None and build < attention.FA_SPLIT_KV_FROM_BUILD else None


def ik_mla_prompt_ubatch(model: ModelSpec, p: Placement, pr: BackendPriors, u: int) -> int:
    """u when ik_llama.cpp takes its expanded-heads MLA path for batches of u tokens (-mla 2/3
    with flash attention, attention.IK_MLA_PP_MIN_TOKENS) on a model whose GGUF gives the heads'
    sizes, else 0."""
    ok = (pr.name == "ik_llama.cpp" and p.flash_attn and u >= attention.IK_MLA_PP_MIN_TOKENS
          and attention.mla_prompt_dims(model) is not None)
    return u if ok else 0


def cpu_attention_prefill(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors, f: Factors,
                          mean_depth: int, u: int, blocks: frozenset[int] | None = None) -> attention.CpuAttention:
    """One ubatch of u tokens' attention on the CPU, its cells at the prompt's mean depth."""
    layers = attention.attention_layers(model, mean_depth, p.n_ubatch, blocks,
                                        mla_expanded=bool(ik_mla_prompt_ubatch(model, p, pr, u)))
    return attention.prefill_attention(layers, _attention_machine(hw, p, f, p.threads_batch), pr.name,
                                       p.cache_type_k, p.cache_type_v, u, p.flash_attn)


# ---- the estimate ---------------------------------------------------------------------------

def _terms_range(terms: list[Term], errs: dict[str, float]) -> float:
    total = sum(t.seconds for t in terms)
    if total <= 0:
        return 0.0
    var = sum((t.seconds * errs.get(t.name, 0.3)) ** 2 for t in terms)
    return min(0.9, RANGE_SIGMA * math.sqrt(var) / total)


def _resident_share(model: ModelSpec, p: Placement, hw: HardwareProfile, mem_host_other: int) -> float:
    """Share of CPU expert pages that page cache can keep (mmap); the rest comes from NVMe."""
    if p.load_mode != "mmap" or not hw.system.ram_total_bytes:
        return 1.0
    cpu_layers = set(p.cpu_moe_layers)
    if p.n_gpus and p.n_gpu_layers is not None:
        cpu_layers |= layer_split(model, p)[0]
    need = sum(layer.expert_bytes for layer in model.moe_layers if layer.index in cpu_layers)
    if need <= 0:
        return 1.0
    avail = hw.ram_bytes - mem_host_other - OS_RESERVE_BYTES
    return max(0.0, min(1.0, avail / need))


def page_cache_short_bytes(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors,
                           ram_anon_bytes: int) -> int:
    """Bytes by which the mapped file, the anonymous host memory and the OS reserve exceed RAM,
    when some of the file's tensors live on a GPU (0 otherwise).

    With mmap, llama.cpp maps the whole file with MAP_POPULATE (src/llama-mmap.cpp), so the
    load reads every byte into the page cache, then copies the GPU tensors out of the mapping
    (llama_model_loader::load_all_data): those pages were touched twice and sit on the kernel's
    active list, the CPU experts' pages once. When the file does not fit beside the rest, the
    kernel reclaims CPU expert pages while the dead GPU-tensor pages stay, and the cyclic sweep
    of decode over the layers is LRU's worst case: expert reads fault in from the disk. How far
    it goes depends on the kernel and what else runs (hardware-corner.net's EPYC 7343 + RTX 3090
    with 64 GB for the 63 GB gpt-oss-120b: 1.4-1.8 tok/s, the disk-bound figure), so it widens
    the range rather than moving the figure; --no-mmap holds the CPU weights in anonymous memory.
    """
    # only llama.cpp's loader (src/llama-model-loader.cpp) maps the file: the GGUF runners
    runs_gguf = pr.name in backends.BACKENDS and backends.get(pr.name).gguf_runner
    if not runs_gguf or p.load_mode != "mmap" or p.n_gpus == 0 or not hw.system.ram_total_bytes:
        return 0
    return max(0, model.file_bytes + ram_anon_bytes + OS_RESERVE_BYTES - hw.ram_bytes)


def paging_decode_tok_s(terms: list[Term], f: Factors, per_step: float) -> float:
    """Decode speed if every CPU expert byte a token reads comes from the disk (the range's low
    end under page-cache pressure): the CPU experts' DRAM read, compute excess and NVMe terms
    give way to their bytes over the NVMe read rate."""
    by = {t.name: t.seconds for t in terms}
    cpu_read = by.get("cpu_experts_read", 0.0)
    if cpu_read <= 0:
        return 0.0
    nbytes = cpu_read * f.bw_cpu_bytes_per_s.value
    t = (sum(by.values()) - cpu_read - by.get("cpu_compute_excess", 0.0) - by.get("nvme_read", 0.0)
         + nbytes / f.nvme_bytes_per_s.value)
    return per_step / t if t > 0 else 0.0


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


def _attention_beyond_kv(name: str, ca: attention.CpuAttention, kv_bytes: float, f: Factors, depth: int,
                         terms: list[Term], errs: dict[str, float]) -> None:
    """Decode attention at depth as ggml-cpu / iqk run it (cost/attention.py), charged beyond
    the KV's read from DRAM that another term already counts."""
    if not ca.seconds:
        return
    t_kv = kv_bytes / f.bw_cpu_bytes_per_s.value
    terms.append(Term(name, compute_excess(ca.seconds, t_kv), "cpu-compute",
                      _overlap_text(f"{t_kv * 1e3:.2f} ms KV read", f"{ca.seconds * 1e3:.2f} ms")
                      + f" at depth {depth}: " + ca.formula))
    errs[name] = ca.rel_err


def _cpu_block_decode_terms(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors, f: Factors, depth: int,
                            n_step: int, split: SplitLayers, kv_cpu: float, terms: list[Term],
                            errs: dict[str, float]) -> None:
    """Decode of the blocks -ngl leaves on the CPU (their routed experts are in
    cpu_experts_read / cpu_compute_excess with the other CPU experts):
      cpu_blocks_read    = (R_dense_cpu + KV_read_cpu(depth)) / BW_c
      cpu_blocks_compute_excess = compute_excess(P_dense_cpu * n_step / r_dot, cpu_blocks_read)
      cpu_blocks_attention = the CPU blocks' attention as cost/attention.py runs it, beyond
                             their KV read
      cpu_blocks_barriers  = graph-node barriers of the CPU blocks (cost/graph.py) x one
                             barrier of the decode pool (Factors.barrier_s), as a CPU-only run's
      split_hop          = hops x (s_hop + 4 E n_step / B_h2d), hops = 1 (+1 when the output
                           layer is on the CPU) - one hidden state over PCIe per hand-over"""
    b = split.dense_bytes + kv_cpu
    t_read = b / f.bw_cpu_bytes_per_s.value
    terms.append(Term("cpu_blocks_read", t_read, "cpu-mem",
                      f"({split.dense_bytes / 1e9:.2f} dense + {kv_cpu / 1e9:.3f} KV at depth {depth}) GB of "
                      f"{len(split.blocks)} CPU blocks / {f.bw_cpu_bytes_per_s.value / 1e9:.1f} GB/s"))
    errs["cpu_blocks_read"] = f.bw_cpu_bytes_per_s.rel_err
    dot = dense_dot_elements(model, pr.type_cost, split.blocks, output=not split.out_gpu) * n_step
    terms.append(excess_term("cpu_blocks_compute_excess", dot, f.cpu_dot_elem_per_s.value, t_read))
    errs["cpu_blocks_compute_excess"] = f.cpu_dot_elem_per_s.rel_err
    # as a CPU-only run's attention; the KV's read is in cpu_blocks_read
    _attention_beyond_kv("cpu_blocks_attention", cpu_attention_decode(model, p, hw, pr, f, depth, n_step, split.blocks),
                         kv_cpu, f, depth, terms, errs)
    n_bar = _cpu_block_barriers(model, pr, tuple(l for l in model.trunk_layers if l.index in split.blocks))
    terms.append(Term("cpu_blocks_barriers", n_bar * f.barrier_s, "sync",
                      f"{n_bar} graph-node barriers of {split.n_trunk} CPU blocks x {f.barrier_s * 1e6:.1f} us"))
    errs["cpu_blocks_barriers"] = 0.5
    hops = _split_hops(split, model)
    if hops:
        act = 4 * model.n_embd * n_step
        h2d = max(1.0, f.h2d_bytes_per_s.value)
        terms.append(Term("split_hop", hops * (S_HOP_S + act / h2d), "sync",
                          f"{hops} host<->GPU hop(s) x ({S_HOP_S * 1e6:.0f} us + {act / 1e3:.1f} kB / "
                          f"{h2d / 1e9:.1f} GB/s)"))
        errs["split_hop"] = S_HOP_REL_ERR


def _cpu_block_prefill_terms(model: ModelSpec, f: Factors, u: int, scale: float, split: SplitLayers,
                             dense_offload: bool, ca: attention.CpuAttention, terms: list[Term],
                             errs: dict[str, float], rates: kernels.CpuRates) -> None:
    """Prefill of the blocks -ngl leaves on the CPU, per ubatch of u tokens (x scale: per token):
      op-offload (u >= 32): every dense weight of those blocks is copied to the GPU for its op
        (ggml-backend.cpp ggml_backend_sched_split_graph: a host-buffer weight whose op the
        GPU's offload_op accepts is run there, the weight a split input copied each ubatch),
        h2d_cpu_blocks = R_dense_cpu / B_h2d, and their matmuls join gpu_matmul;
      otherwise cpu_blocks_matmul = max(their matmuls by kernel path (cost/kernels.py), R_dense_cpu / BW_c);
      cpu_blocks_attention = the CPU blocks' attention of a ubatch as cost/attention.py runs it
        (K/V are in a host buffer that is not a weight buffer, so the op is not offloaded);
      split_hop = hops x (s_hop + 4 E u / B_h2d)."""
    if dense_offload:
        b = split.dense_bytes
        terms.append(Term("h2d_cpu_blocks", b / max(1.0, f.h2d_bytes_per_s.value) * scale, "pcie",
                          f"{b / 1e9:.2f} GB dense weights of {len(split.blocks)} CPU blocks per ubatch of {u} / "
                          f"{f.h2d_bytes_per_s.value / 1e9:.1f} GB/s (op-offload)"))
        errs["h2d_cpu_blocks"] = f.h2d_bytes_per_s.rel_err
    else:
        mm = kernels.matmul_time(dense_weights_by_type(model, split.blocks, output=False), u, u, True, rates)
        t_c, how, c_err = mm.seconds, mm.how(), _matmul_err(mm, f)
        t_r = split.dense_bytes / max(1.0, f.bw_cpu_bytes_per_s.value)
        terms.append(Term("cpu_blocks_matmul", max(t_c, t_r) * scale, "cpu-compute" if t_c >= t_r else "cpu-mem",
                          f"max({how}, "
                          f"{split.dense_bytes / 1e9:.2f} GB / {f.bw_cpu_bytes_per_s.value / 1e9:.0f} GB/s) per ubatch"))
        errs["cpu_blocks_matmul"] = c_err if t_c >= t_r else f.bw_cpu_bytes_per_s.rel_err
    if ca.seconds:
        terms.append(Term("cpu_blocks_attention", ca.seconds * scale, "cpu-compute",
                          f"{ca.seconds * 1e3:.1f} ms per ubatch of the CPU blocks: {ca.formula}"))
        errs["cpu_blocks_attention"] = ca.rel_err
    hops = _split_hops(split, model)
    if hops:
        h2d = max(1.0, f.h2d_bytes_per_s.value)
        terms.append(Term("split_hop", hops * (S_HOP_S + 4 * model.n_embd * u / h2d) * scale, "pcie",
                          f"{hops} host<->GPU hop(s) of {u} hidden states per ubatch"))
        errs["split_hop"] = S_HOP_REL_ERR


def _matmul_err(mm: kernels.MatmulTime, f: Factors) -> float:
    """Uncertainty of a CPU matmul time: the dot rate's for the share run by dot-product
    kernels (vec_dot, iqk's own), the GEMM rate's for the rest."""
    dot_share = sum(mm.shares.get(k, 0.0) for k in ("vec_dot", "repack_gemv", "iqk"))
    return dot_share * f.cpu_dot_elem_per_s.rel_err + (1.0 - dot_share) * f.cpu_flop_per_s.rel_err


def estimate_decode_terms(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors,
                          f: Factors, depth: int, resident_share: float = 1.0,
                          devices: tuple = ()) -> tuple[list[Term], dict[str, float], float]:
    """Terms of one decode step (seconds), their errors, and tokens produced per step."""
    k, n = p.n_experts_used or model.n_experts_used, model.n_experts
    split = ngl_split(model, p, f)
    cpu = set(p.cpu_moe_layers) | split.moe_on_cpu
    n_step = 1 + max(0, p.n_draft)  # tokens verified per step
    touched = distinct_experts(n, k, n_step) / max(1, n) if n else 0.0  # share of a layer's experts read
    per_tok = k / n if n else 0.0
    # GPU expert cache over the CPU layers
    hit = 0.0
    if p.gpu_expert_cache_bytes and cpu and n:
        s_exp = sum(layer.expert_bytes for layer in model.moe_layers if layer.index in cpu) / len(cpu) / n
        per_layer = p.gpu_expert_cache_bytes / max(1.0, s_exp) / len(cpu)
        hit = cache_hit_rate(per_layer, n, pr.zipf_s)
    terms: list[Term] = []
    errs: dict[str, float] = {}
    r_dense = model.dense_bytes_read_per_token - split.dense_bytes
    kv_bytes = kv_read_bytes(model, depth + n_step - 1, p.cache_type_k, p.cache_type_v) if depth or n_step else 0
    kv_cpu = (kv_read_bytes(model, depth + n_step - 1, p.cache_type_k, p.cache_type_v, blocks=set(split.blocks))
              if split.blocks and kv_bytes else 0)
    kv_bytes -= kv_cpu
    gpu_exp = sum(layer.expert_bytes for layer in model.moe_layers if layer.index not in cpu) * touched
    cpu_exp = [layer for layer in model.moe_layers if layer.index in cpu]
    cpu_bytes = sum(layer.expert_bytes for layer in cpu_exp) * touched
    cpu_dot = sum(dot_elements(layer, pr.type_cost) for layer in cpu_exp) * per_tok * n_step

    if f.cpu_only:
        all_bytes = r_dense + sum(layer.expert_bytes for layer in model.moe_layers) * touched + kv_bytes
        all_dot = (dense_dot_elements(model, pr.type_cost) * n_step
                   + sum(dot_elements(layer, pr.type_cost) for layer in model.moe_layers) * per_tok * n_step)
        t_read = all_bytes / f.bw_cpu_bytes_per_s.value
        terms.append(Term("cpu_weights_read", t_read, "cpu-mem",
                          f"{all_bytes / 1e9:.2f} GB / {f.bw_cpu_bytes_per_s.value / 1e9:.1f} GB/s"))
        errs["cpu_weights_read"] = f.bw_cpu_bytes_per_s.rel_err
        terms.append(excess_term("cpu_compute_excess", all_dot, f.cpu_dot_elem_per_s.value, t_read))
        errs["cpu_compute_excess"] = f.cpu_dot_elem_per_s.rel_err
        # the KV's first read from DRAM is in cpu_weights_read
        _attention_beyond_kv("cpu_attention", cpu_attention_decode(model, p, hw, pr, f, depth, n_step),
                             kv_bytes, f, depth, terms, errs)
        n_bar = _cpu_block_barriers(model, pr, model.trunk_layers)
        terms.append(Term("barriers", n_bar * f.barrier_s, "sync",
                          f"{n_bar} graph-node barriers of {len(model.trunk_layers)} layers x "
                          f"{f.barrier_s * 1e6:.1f} us"))
    elif devices:
        _multi_gpu_decode_terms(model, p, hw, pr, f, depth, n_step, touched, devices, terms, errs)
    else:
        t_gw = (r_dense + gpu_exp + cpu_bytes * hit) / f.bw_gpu_bytes_per_s.value
        terms.append(Term("gpu_weights_read", t_gw, "gpu-mem",
                          f"({r_dense / 1e9:.2f} dense + {gpu_exp / 1e9:.2f} GPU experts"
                          + (f" + {cpu_bytes * hit / 1e9:.2f} cached" if hit else "")
                          + f") GB / {f.bw_gpu_bytes_per_s.value / 1e9:.0f} GB/s"))
        errs["gpu_weights_read"] = f.bw_gpu_bytes_per_s.rel_err
        # batch-1 matmuls on a GPU are memory-bound; the term only shows for a slow device
        # (the executor's CPU stand-in): 2 FLOP per weight read on the GPU side
        gpu_params = (non_expert_params(model) - split.params + sum(layer.expert_elements for layer in model.moe_layers
                                                    if layer.index not in cpu) * touched) * n_step
        t_gc = 2 * gpu_params / max(1.0, f.gpu_flop_per_s.value)
        if t_gc > t_gw:
            terms.append(Term("gpu_compute_excess", t_gc - t_gw, "gpu-compute",
                              f"max(0, {2 * gpu_params / 1e9:.1f} GFLOP / {f.gpu_flop_per_s.value / 1e9:.0f} GFLOP/s"
                              f" - read time)"))
            errs["gpu_compute_excess"] = f.gpu_flop_per_s.rel_err
        if kv_bytes:
            t_kv = kv_bytes / f.bw_gpu_bytes_per_s.value
            terms.append(Term("kv_read", t_kv, "gpu-mem", f"{kv_bytes / 1e9:.3f} GB of KV at depth {depth}"))
            errs["kv_read"] = f.bw_gpu_bytes_per_s.rel_err
            attn = (attention_flops_per_token(model, depth) - split.attention_flops(model, depth)) * n_step
            t_af = attn / max(1.0, f.gpu_flop_per_s.value)
            if t_af > t_kv:
                terms.append(Term("attention_compute_excess", t_af - t_kv, "gpu-compute",
                                  f"{attn / 1e9:.1f} GFLOP of attention at depth {depth} beyond the KV read"))
                errs["attention_compute_excess"] = f.gpu_flop_per_s.rel_err
    if not f.cpu_only:
        n_gpu_blocks = len(model.trunk_layers) - split.n_trunk
        terms.append(Term("gpu_launch", n_gpu_blocks * f.s_layer_gpu_s.value, "gpu-compute",
                          f"{n_gpu_blocks} layers x {f.s_layer_gpu_s.value * 1e6:.0f} us"))
        errs["gpu_launch"] = f.s_layer_gpu_s.rel_err
        if split.blocks:
            _cpu_block_decode_terms(model, p, hw, pr, f, depth, n_step, split, kv_cpu, terms, errs)
        if cpu_exp:
            if pr.op_offload == "weights":
                # vLLM/SGLang --cpu-offload-gb: the offloaded layers' weights cross PCIe every step
                full = sum(layer.expert_bytes for layer in cpu_exp)
                terms.append(Term("pcie_weights", full / max(1.0, f.h2d_bytes_per_s.value), "pcie",
                                  f"{full / 1e9:.2f} GB offloaded weights / {f.h2d_bytes_per_s.value / 1e9:.1f} GB/s"))
                errs["pcie_weights"] = f.h2d_bytes_per_s.rel_err
            else:
                miss = 1.0 - hit
                t_read = cpu_bytes * miss / f.bw_cpu_bytes_per_s.value
                terms.append(Term("cpu_experts_read", t_read, "cpu-mem",
                                  f"{cpu_bytes * miss / 1e9:.2f} GB / {f.bw_cpu_bytes_per_s.value / 1e9:.1f} GB/s "
                                  f"({f.numa_note})"))
                errs["cpu_experts_read"] = f.bw_cpu_bytes_per_s.rel_err
                terms.append(excess_term("cpu_compute_excess", cpu_dot * miss, f.cpu_dot_elem_per_s.value, t_read))
                errs["cpu_compute_excess"] = f.cpu_dot_elem_per_s.rel_err
                # a GPU block whose experts are on the CPU hands over twice per layer; a whole CPU
                # block does not (its barriers are in cpu_blocks_barriers); KTransformers' G GPU
                # experts of every layer leave CPU experts, and a hand-over, in every layer
                n_sync = sum(1 for layer in cpu_exp if layer.index not in split.blocks)
                if machine.kt_gpu_experts_of(p.extra) is not None:
                    n_sync = len(model.moe_layers)
                if n_sync or not split.blocks:
                    terms.append(Term("sync", n_sync * f.s_sync_s.value, "sync",
                                      f"{n_sync} CPU layers x {f.s_sync_s.value * 1e6:.0f} us"))
                    errs["sync"] = f.s_sync_s.rel_err
                if resident_share < 1.0:
                    miss_bytes = cpu_bytes * miss * (1.0 - resident_share)
                    terms.append(Term("nvme_read", miss_bytes / f.nvme_bytes_per_s.value, "nvme",
                                      f"{1 - resident_share:.0%} of CPU expert pages not in RAM: "
                                      f"{miss_bytes / 1e9:.2f} GB / {f.nvme_bytes_per_s.value / 1e9:.1f} GB/s"))
                    errs["nvme_read"] = f.nvme_bytes_per_s.rel_err
    terms.append(Term("per_token", f.t_token_s.value, "sync", "sampling, graph build, host sync"))
    errs["per_token"] = f.t_token_s.rel_err
    a = min(max(p.draft_accept, 0.0), 0.999)
    tokens_per_step = (1 - a ** n_step) / (1 - a) if p.n_draft else 1.0
    return terms, errs, tokens_per_step


# How a decode thread's weight reads and its dequantise-and-dot overlap: the CPU time of a batch
# of weights is (read^p + compute^p)^(1/p), not max(read, compute) (p -> infinity) -- a core
# waits on loads it has not prefetched far enough while its SIMD pipes are busy, and the pipes
# idle while it waits. p from published TG-vs-threads sweeps on one CPU (ik_llama.cpp discussion
# 63, PRs 13/124/129/132/154/185/187/212: 7950X, 5975WX, M2 Max; benchmarks/overlap_fit.py):
# the knee from compute-bound to bandwidth-bound is as round as p = 2-2.5 (DECODE_OVERLAP_P).
DECODE_OVERLAP_P = 2.0


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


def device_link_bytes_per_s(hw: HardwareProfile, f: Factors, index: int) -> float:
    """Host<->GPU copy rate of GPU `index` (its own PCIe link), else the first GPU's figure."""
    if index < len(hw.gpus):
        fig = _fig(hw.gpus[index].h2d_bytes_per_s)
        if fig:
            return fig[0] * (f.h2d_bytes_per_s.value / max(1.0, _fig(hw.gpus[0].h2d_bytes_per_s)[0])
                             if _fig(hw.gpus[0].h2d_bytes_per_s) else 0.8)
    return f.h2d_bytes_per_s.value


def device_bw_bytes_per_s(hw: HardwareProfile, f: Factors, index: int) -> float:
    """Achievable memory bandwidth of GPU `index`: its own figure times the same eta_gpu."""
    base = _fig(hw.gpus[0].mem_bw_bytes_per_s) if hw.gpus else None
    fig = _fig(hw.gpus[index].mem_bw_bytes_per_s) if index < len(hw.gpus) else None
    if fig and base:
        return f.bw_gpu_bytes_per_s.value * fig[0] / base[0]
    return f.bw_gpu_bytes_per_s.value


def _device_read_bytes(model: ModelSpec, dev, touched: float, depth: int, p: Placement) -> tuple[float, float]:
    """(weight bytes, KV bytes) GPU `dev` reads per decoded token."""
    blocks = set(dev.blocks)
    w = 0.0
    for layer in model.trunk_layers:
        if layer.index in blocks:
            w += layer.resident_bytes
            if layer.kind == "moe" and layer.index in dev.gpu_expert_blocks:
                w += layer.expert_bytes * touched
    if dev.output:
        w += sum(t.n_bytes for t in model.globals if t.group != "embed")
    kv = kv_read_bytes(model, depth, p.cache_type_k, p.cache_type_v, blocks=blocks) if depth else 0
    return w, kv


def _multi_gpu_decode_terms(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors, f: Factors,
                            depth: int, n_step: int, touched: float, devices: tuple, terms: list[Term],
                            errs: dict[str, float]) -> None:
    """Layer split: the devices run one after another (a pipeline with one token in flight),
    each reading its own blocks' weights and KV at its own bandwidth, plus one hop per
    boundary (S_HOP_S + the hidden state over the slower of the two links)."""
    parts, kv_parts = [], []
    t_w = t_kv = 0.0
    for d in devices:
        w, kv = _device_read_bytes(model, d, touched, depth + n_step - 1, p)
        bw = device_bw_bytes_per_s(hw, f, d.index)
        t_w += w / bw
        t_kv += kv / bw
        parts.append(f"GPU{d.index} {w / 1e9:.2f} GB / {bw / 1e9:.0f} GB/s")
        if kv:
            kv_parts.append(f"GPU{d.index} {kv / 1e9:.3f} GB")
    terms.append(Term("gpu_weights_read", t_w, "gpu-mem", "pipeline: " + " + ".join(parts)))
    errs["gpu_weights_read"] = f.bw_gpu_bytes_per_s.rel_err
    if t_kv:
        terms.append(Term("kv_read", t_kv, "gpu-mem", f"KV at depth {depth}: " + " + ".join(kv_parts)))
        errs["kv_read"] = f.bw_gpu_bytes_per_s.rel_err
    used = [d for d in devices if d.blocks or d.output]
    hops = max(0, len(used) - 1)
    if hops:
        act = 4 * model.n_embd * n_step
        t_h = 0.0
        for a, b in zip(used, used[1:]):
            link = min(device_link_bytes_per_s(hw, f, a.index), device_link_bytes_per_s(hw, f, b.index))
            t_h += S_HOP_S + act / max(1.0, link)
        terms.append(Term("device_hops", t_h, "sync",
                          f"{hops} hop(s) between GPUs x ({S_HOP_S * 1e6:.0f} us + {act / 1e3:.0f} kB hidden state "
                          "over the slower link)"))
        errs["device_hops"] = S_HOP_REL_ERR


def _multi_gpu_prefill(model: ModelSpec, p: Placement, hw: HardwareProfile, f: Factors, u: int, share: float,
                       per_tok: float, attn: float, offload_cpu_params: float, devices: tuple) -> tuple[float, str, float]:
    """Seconds per ubatch of the GPU side of a layer split: each device's matmuls (compute or
    weight reads, whichever is longer, at its own rate; the offloaded CPU experts on GPU0,
    where ggml-backend sends them) one after another, and the ubatch's hidden states crossing
    every boundary over the slower link."""
    n_attn = max(1, sum(1 for layer in model.trunk_layers if any(c.name == "k" for c in layer.kv)))
    total, parts = 0.0, []
    base_flop = _fig(hw.gpus[0].fp16_flop_per_s) if hw.gpus else None
    for d in devices:
        blocks = set(d.blocks)
        params = 0.0
        rd = 0.0
        n_a = 0
        for layer in model.trunk_layers:
            if layer.index not in blocks:
                continue
            params += sum(t.n_elements for t in layer.tensors
                          if t.group not in ("experts", "expert_aux", "norm") and len(t.shape) >= 2)
            rd += layer.resident_bytes
            n_a += any(c.name == "k" for c in layer.kv)
            if layer.index in d.gpu_expert_blocks:
                params += layer.expert_elements * per_tok
                rd += layer.expert_bytes * share
        if d.output:
            params += sum(t.n_elements for t in model.globals if t.group == "output")
        if d.index == 0:
            params += offload_cpu_params
        flops = u * (2 * params + attn * n_a / n_attn)
        fig = _fig(hw.gpus[d.index].fp16_flop_per_s) if d.index < len(hw.gpus) else None
        rate = f.gpu_flop_per_s.value * (fig[0] / base_flop[0] if fig and base_flop else 1.0)
        bw = device_bw_bytes_per_s(hw, f, d.index)
        t = max(flops / max(1.0, rate), rd / max(1.0, bw))
        total += t
        parts.append(f"GPU{d.index} {t * 1e3:.1f} ms")
    used = [d for d in devices if d.blocks or d.output]
    t_h = 0.0
    for a, b in zip(used, used[1:]):
        link = min(device_link_bytes_per_s(hw, f, a.index), device_link_bytes_per_s(hw, f, b.index))
        t_h += S_HOP_S + 4 * model.n_embd * u / max(1.0, link)
    return total, " + ".join(parts), t_h


def kt_prefill_threshold(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors,
                         f: Factors, devices: tuple = ()) -> int:
    """The --kt-gpu-prefill-token-threshold a KTransformers plan runs with: the plan's own
    (Placement.extra), else the crossover the planner picks (kt_prefill_crossover_tokens)."""
    own = machine.kt_threshold_of(p.extra)
    if own is not None:
        return own
    return kt_prefill_crossover_tokens(model, p, hw, pr, f, devices)


def kt_chunk_tokens(p: Placement) -> int:
    """The chunk KTransformers' layer-wise GPU prefill uploads every CPU layer's experts for:
    SGLang's --chunked-prefill-size, the plan's logical batch (launch/sglang.py emits it)."""
    return max(1, p.n_batch)


def kt_prefill_crossover_tokens(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors,
                                f: Factors, devices: tuple = ()) -> int:
    """Shortest prompt for which KTransformers' layer-wise GPU prefill (every CPU layer's experts
    uploaded per chunk + GPU compute) takes less time than the CPU experts; 0 (off) when even a
    full chunk (kt_chunk_tokens) is faster on the CPU (longer prompts only repeat
    chunks, so the layer-wise path never wins). The upload is a fixed cost per chunk and the
    CPU path grows with the prompt, so the difference changes sign once: bisection."""
    if pr.name != "ktransformers" or f.cpu_only or not p.cpu_moe_layers or not p.op_offload:
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
    """Terms of processing an n_prompt-token prompt, in seconds per prompt token; prompt_depth
    tokens are in the cache before it (llama-bench -d). `layerwise` forces KTransformers' prefill
    path (None: the plan's threshold decides)."""
    k, n = p.n_experts_used or model.n_experts_used, model.n_experts
    n_prompt = max(1, n_prompt)
    u = max(1, min(p.n_ubatch, n_prompt))
    cpu_layers = bool(set(p.cpu_moe_layers))
    kt_gpu = pr.name == "ktransformers" and p.op_offload and cpu_layers and not f.cpu_only
    if layerwise is None:
        layerwise = kt_gpu and machine.kt_layerwise_prefill(pr.name, n_prompt, True,
                                                            kt_prefill_threshold(model, p, hw, pr, f, devices))
    layerwise = bool(layerwise and kt_gpu)
    if layerwise:
        u = min(n_prompt, kt_chunk_tokens(p))
    n_ub = math.ceil(n_prompt / u)
    split = ngl_split(model, p, f)
    cpu = set(p.cpu_moe_layers) | split.moe_on_cpu
    share = distinct_experts(n, k, u) / max(1, n)
    depth_mid = max(0, prompt_depth) + n_prompt / 2
    moe_gpu = [layer for layer in model.moe_layers if layer.index not in cpu]
    moe_cpu = [layer for layer in model.moe_layers if layer.index in cpu]
    p_dense = non_expert_params(model)
    per_tok = k / n if n else 0.0
    exp_params = lambda layers: sum(layer.expert_elements for layer in layers) * per_tok  # noqa: E731
    mla_u = ik_mla_prompt_ubatch(model, p, pr, u)
    attn_all = attention_flops_per_token(model, int(depth_mid), mla_ubatch=mla_u)
    # attention of the CPU blocks stays on the CPU: its K/V are not weights (see SplitLayers)
    attn_cpu = split.attention_flops(model, int(depth_mid), mla_u)
    attn = attn_all - attn_cpu
    if pr.op_offload == "mainline":
        offload = p.op_offload and u >= 32
    elif pr.op_offload == "ik":
        offload = p.op_offload and u * k >= 32 * n
    else:
        offload = pr.op_offload == "weights"
    offload = offload or layerwise
    rates = cpu_rates(hw, pr, f)
    if pr.name == "ik_llama.cpp" and machine.rtr_of(p.extra):
        rates = replace(rates, repack=True)
    # ik_llama.cpp: experts of an interleaved type its CUDA backend does not multiply stay on the
    # CPU whatever the batch (kernels.IK_CUDA_INTERLEAVED); `stay` is their share of the weights
    stay_w: dict[str, float] = {}
    stay = 0.0
    if offload and not layerwise and pr.name == "ik_llama.cpp" and moe_cpu:
        w = rates.as_run(expert_weights_by_type(moe_cpu, per_tok))
        stay_w = {t: x for t, x in w.items() if not kernels.ik_cuda_multiplies(t)}
        stay = sum(stay_w.values()) / max(1e-9, sum(w.values()))
        if stay >= 1.0 - 1e-9:
            offload, stay, stay_w = False, 0.0, {}
    # whole CPU blocks (-ngl): their dense weights are MUL_MAT srcs in host buffers, offloaded
    # at u >= 32 (ggml-cuda.cu ggml_backend_cuda_device_offload_op: ne[1] >= 32; ik_llama.cpp
    # has the same rule for MUL_MAT, its u*k rule is for MUL_MAT_ID)
    dense_offload = bool(split.blocks) and p.op_offload and pr.op_offload in ("mainline", "ik") and u >= 32
    p_dense_gpu = p_dense - (0.0 if dense_offload else split.params)
    terms: list[Term] = []
    errs: dict[str, float] = {}
    scale = n_ub / n_prompt  # per-ubatch seconds -> seconds per prompt token
    # tokens each used expert's matrices multiply at once (iqk picks its kernel by this)
    ny_exp = u * k / max(1e-9, distinct_experts(n, k, u)) if n else float(u)
    # and how they spread: ik_llama.cpp picks each expert's kernel by its own count
    cols_exp = kernels.expert_columns(u, k, n) if n else ny_exp
    if f.cpu_only:
        # the output matrix multiplies the last token of the prompt only (llama_batch_get_one /
        # the server's prompt batches ask logits of the last token; llama-context.cpp selects the
        # output rows before the lm_head), so it is not in the per-ubatch work
        mm = kernels.add(kernels.matmul_time(dense_weights_by_type(model, output=False), u, u, True, rates),
                         kernels.matmul_time(expert_weights_by_type(model.moe_layers, per_tok), u, cols_exp, False,
                                             rates))
        # every weight a ubatch uses streams from DRAM once (all experts at large u x k / N)
        b = model.dense_bytes_read_per_token + sum(layer.expert_bytes for layer in model.moe_layers) * share
        t_r = b / max(1.0, f.bw_cpu_bytes_per_s.value)
        terms.append(Term("cpu_matmul", max(mm.seconds, t_r) * scale,
                          "cpu-compute" if mm.seconds >= t_r else "cpu-mem",
                          f"per ubatch of {u} ({ny_exp:.0f} tokens per used expert): max({mm.how()}, "
                          f"{b / 1e9:.1f} GB / {f.bw_cpu_bytes_per_s.value / 1e9:.0f} GB/s)"))
        errs["cpu_matmul"] = _matmul_err(mm, f) if mm.seconds >= t_r else f.bw_cpu_bytes_per_s.rel_err
        ca = cpu_attention_prefill(model, p, hw, pr, f, int(depth_mid), u)
        if ca.seconds:
            # the attention ops of a ubatch as ggml-cpu / iqk run them (cost/attention.py)
            terms.append(Term("cpu_attention", ca.seconds * scale, "cpu-compute",
                              f"{ca.seconds * 1e3:.1f} ms per ubatch at mean depth {int(depth_mid)}: {ca.formula}"))
            errs["cpu_attention"] = ca.rel_err
    elif devices:
        t_g, how, t_h = _multi_gpu_prefill(model, p, hw, f, u, share, per_tok, attn,
                                           (exp_params(moe_cpu) * (1 - stay) if offload else 0.0)
                                           + (split.params if dense_offload else 0.0), devices)
        if pr.name == "ktransformers":
            # SGLang --tp-size n (launch/ktransformers.py): every GPU computes its 1/n of every
            # layer at once, not the layers one device after another
            t_g, how, t_h = t_g / len(devices), f"tensor-parallel over {len(devices)} GPUs: ({how}) / {len(devices)}", 0.0
            terms.append(Term("gpu_matmul", t_g * scale, "gpu-compute", f"per ubatch of {u}, {how}"))
        else:
            terms.append(Term("gpu_matmul", t_g * scale, "gpu-compute",
                              f"per device, one after another, per ubatch of {u}: {how}"))
        errs["gpu_matmul"] = f.gpu_flop_per_s.rel_err
        if t_h:
            terms.append(Term("device_hops", t_h * scale, "pcie",
                              f"hidden states of {u} tokens crossing {len(devices) - 1} GPU boundaries"))
            errs["device_hops"] = S_HOP_REL_ERR
    if not f.cpu_only and not devices:
        gpu_params = p_dense_gpu + exp_params(moe_gpu) + (exp_params(moe_cpu) * (1 - stay) if offload else 0.0)
        flops = u * (2 * gpu_params + attn)
        t_c = flops / max(1.0, f.gpu_flop_per_s.value)
        r = model.dense_bytes_read_per_token - split.dense_bytes + sum(layer.expert_bytes for layer in moe_gpu) * share
        t_r = r / max(1.0, f.bw_gpu_bytes_per_s.value)
        terms.append(Term("gpu_matmul", max(t_c, t_r) * scale, "gpu-compute",
                          f"max({flops / 1e12:.2f} TFLOP / {f.gpu_flop_per_s.value / 1e12:.0f} TFLOP/s, "
                          f"{r / 1e9:.2f} GB / {f.bw_gpu_bytes_per_s.value / 1e9:.0f} GB/s) per ubatch of {u}"))
        errs["gpu_matmul"] = f.gpu_flop_per_s.rel_err
    if not f.cpu_only:
        if moe_cpu:
            if offload:
                full = 1.0 if pr.op_offload == "weights" or layerwise else share
                b = sum(layer.expert_bytes for layer in moe_cpu) * full * (1 - stay)
                what = ("all experts of the CPU layers uploaded layer by layer (KTransformers GPU prefill)"
                        if layerwise else "used experts")
                # one link's rate with several GPUs too: kt-kernel's pools write every expert's
                # shards for all the GPUs (write_weights_to_buffer, an expert at a time), and
                # KTransformers' Kimi-K2-Thinking table gains 1.6-2.5x, not 2-8x, on 2048-token
                # prompts (upload-bound) from 2-8 GPUs
                rate, rate_how, rate_err = f.h2d_bytes_per_s.value, "", f.h2d_bytes_per_s.rel_err
                if layerwise and f.bw_cpu_bytes_per_s.value / 2 < rate:
                    # kt-kernel's pools memcpy each expert into the pinned buffer first
                    # (write_weights_to_buffer): a read and a write of every byte
                    rate, rate_err = f.bw_cpu_bytes_per_s.value / 2, f.bw_cpu_bytes_per_s.rel_err
                    rate_how = " (CPU copy into the pinned buffer: CPU read rate / 2)"
                terms.append(Term("h2d_experts", b / max(1.0, rate) * scale, "pcie",
                                  f"{b / 1e9:.2f} GB of {what} per ubatch of {u} / "
                                  f"{rate / 1e9:.1f} GB/s{rate_how}"))
                errs["h2d_experts"] = rate_err
            # the experts multiplied on the CPU: all of them without offload, else those of types
            # ik_llama.cpp's CUDA backend does not take
            on_cpu, frac, why = ((expert_weights_by_type(moe_cpu, per_tok), 1.0, "") if not offload else
                                 (stay_w, stay, f"{stay:.0%} of the CPU experts ({', '.join(sorted(stay_w))}: "
                                                f"ik_llama.cpp's CUDA backend does not multiply them) on the CPU: "))
            if on_cpu:
                mm = kernels.matmul_time(on_cpu, u, cols_exp, False, rates)
                b = sum(layer.expert_bytes for layer in moe_cpu) * share * frac
                t_c = mm.seconds
                t_r = b / max(1.0, f.bw_cpu_bytes_per_s.value)
                terms.append(Term("cpu_experts", max(t_c, t_r) * scale, "cpu-compute" if t_c >= t_r else "cpu-mem",
                                  f"{why}max({mm.how()}, {b / 1e9:.2f} GB / {f.bw_cpu_bytes_per_s.value / 1e9:.0f} "
                                  f"GB/s) per ubatch of {u} ({ny_exp:.0f} tokens per used expert)"))
                errs["cpu_experts"] = _matmul_err(mm, f) if t_c >= t_r else f.bw_cpu_bytes_per_s.rel_err
            n_sync = sum(1 for layer in moe_cpu if layer.index not in split.blocks)
            if n_sync or not split.blocks:
                terms.append(Term("sync", n_sync * f.s_sync_s.value * scale, "sync",
                                  f"{n_sync} CPU layers x {f.s_sync_s.value * 1e6:.0f} us per ubatch"))
                errs["sync"] = f.s_sync_s.rel_err
        if split.blocks:
            ca = cpu_attention_prefill(model, p, hw, pr, f, int(depth_mid), u, split.blocks)
            _cpu_block_prefill_terms(model, f, u, scale, split, dense_offload, ca, terms, errs, rates)
    return terms, errs


# ---- fitted term-group scales and held-out ranges (docs/cost-model.md) -----------------------

# the resource a term charges -> the group whose time scale is fitted (benchmarks/accuracy.py)
TERM_GROUP = {"cpu-mem": "cpu", "cpu-compute": "cpu", "nvme": "cpu", "gpu-mem": "gpu", "gpu-compute": "gpu",
              "pcie": "pcie", "sync": "fixed"}


def fitted_term_scales(terms: list[Term], scales: dict[str, float]) -> list[Term]:
    """Each term times its group's fitted scale (1 where none was fitted)."""
    out = []
    for t in terms:
        x = scales.get(TERM_GROUP.get(t.resource, "fixed"), 1.0)
        out.append(t if x == 1.0 else Term(t.name, t.seconds * x, t.resource,
                                           f"{t.formula} x {x:.2f} (fitted {TERM_GROUP.get(t.resource, 'fixed')} scale)"))
    return out


def dominant_group(terms: list[Term]) -> str:
    by: dict[str, float] = {}
    for t in terms:
        g = TERM_GROUP.get(t.resource, "fixed")
        by[g] = by.get(g, 0.0) + t.seconds
    return max(sorted(by), key=lambda g: by[g]) if by else "all"


# A CPU the user did not name is costed as a stand-in (profiles/catalog.py STAND_IN_CPU): the
# catalog's desktop parts read DRAM at -0.46 .. +0.23 log of the desktop stand-in's rate, its
# single-socket server parts at -1.73 .. +0.22 of the server stand-in's (10th-90th percentile,
# tests/test_hardware_spec.py recomputes both), so the CPU's share of the time widens the range
# by that much more.
STAND_IN_CPU_LOG_SPREAD = {"desktop": 0.35, "server": 0.98}


def held_out_range(value: float, terms: list[Term], widths: dict[str, float],
                   extra_log: float = 0.0, centers: dict[str, float] | None = None) -> tuple[float, float] | None:
    """value x exp(-c -/+ w) for the group dominating the terms: w its held-out 80% log
    half-width (with an independent extra log half-width added in quadrature), c the median
    log(predicted/measured) of the public rows it dominates: the range is centred where
    measured runs fall against the model's figure."""
    g = dominant_group(terms)
    g = g if g in widths else "all"
    w = widths.get(g)
    if w is None:
        return None
    w = math.hypot(w, extra_log)
    c = (centers or {}).get(g, 0.0)
    return value * math.exp(-c - w), value * math.exp(w - c)


def _stand_in_extra(hw: HardwareProfile, terms: list[Term]) -> float:
    total = sum(t.seconds for t in terms)
    if hw.cpu.source != "prior" or total <= 0:
        return 0.0
    cpu = sum(t.seconds for t in terms if t.resource in ("cpu-mem", "cpu-compute"))
    spread = STAND_IN_CPU_LOG_SPREAD["desktop" if hw.cpu.segment == "desktop" else "server"]
    return spread * cpu / total


def _bottleneck(terms: list[Term]) -> str:
    if not terms:
        return "none"
    by_res: dict[str, float] = {}
    for t in terms:
        by_res[t.resource] = by_res.get(t.resource, 0.0) + t.seconds
    return max(sorted(by_res), key=lambda r: by_res[r])


BOTTLENECK_TEXT = {
    "cpu-mem": "CPU DRAM bandwidth (routed experts read from RAM)",
    "cpu-compute": "CPU compute (dequantising and multiplying experts)",
    "gpu-mem": "GPU memory bandwidth",
    "gpu-compute": "GPU compute / kernel launches",
    "pcie": "PCIe host-to-GPU copies",
    "sync": "per-layer synchronisation between CPU and GPU",
    "nvme": "NVMe reads (the CPU experts do not fit in RAM)",
}


def node_ram_split(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors,
                   host_bytes: int, cpu_expert_bytes: int = 0) -> tuple[tuple[int, int], ...]:
    """Host RAM per NUMA node: bound nodes hold it all, interleave spreads it (as Windows does
    without a bind), KTransformers' per-node pools hold 1/N of every CPU expert each (kt-kernel
    splits, machine.py "KTransformers"; the rest stays on the first node), no policy puts it on
    the first node."""
    nodes = used_nodes(hw, p)
    pools = machine.kt_pool_count(p.numa, len(nodes)) if pr.numa_aware else 1
    if pools > 1:
        share = cpu_expert_bytes // pools
        rest = host_bytes - share * pools
        return tuple((n.id, share + (rest if i == 0 else 0)) for i, n in enumerate(nodes))
    spread = p.numa in ("interleave", "distribute") or (hw.os == "windows" and p.numa != "bind")
    if spread and len(nodes) > 1:
        share = host_bytes // len(nodes)
        return tuple((n.id, share) for n in nodes)
    return ((nodes[0].id, host_bytes),)


def memory_report(mem, hw: HardwareProfile) -> MemoryReport:
    """The breakdown as an estimate carries it; with several GPUs each device also names the GPU
    and its budget (free memory, else total)."""
    d = mem.to_dict()
    per = []
    for g in d.get("per_gpu", ()):
        if g["device"] < len(hw.gpus):
            gpu = hw.gpus[g["device"]]
            g = {**g, "name": gpu.name,
                 "budget_bytes": gpu.vram_free_bytes if gpu.vram_free_bytes is not None else gpu.vram_bytes}
        per.append(GpuMemory(**g))
    lines = tuple(MemoryLine(**i) for i in d["items"])
    return MemoryReport(vram_bytes=d["vram_bytes"], vram_required_bytes=d["vram_required_bytes"],
                        ram_bytes=d["ram_bytes"], ram_anon_bytes=d["ram_anon_bytes"], margin_bytes=d["margin_bytes"],
                        items=lines, per_gpu=tuple(per))


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


def _estimate(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors, depth: int,
              n_prompt: int, consts: MemoryConstants | None, repack_types: tuple[str, ...],
              prompt_depth: int = 0) -> Estimate:
    p, mem, f = _memory_and_factors(model, p, hw, pr, consts, repack_types)
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
    notes = []
    pools = machine.kt_pool_count(p.numa, len(used_nodes(hw, p))) if pr.numa_aware and p.cpu_moe_layers else 1
    if pools > 1:
        notes.append(f"{pools} kt-kernel pools split every CPU expert between the nodes (RAM counted once); "
                     "KTransformers 0.2/0.3 built with USE_NUMA=1 copies them to every node instead "
                     f"({pools}x the {mem.get('weights_experts_cpu') / 2**30:.1f} GiB of CPU experts)")
    elif pr.numa_aware and p.cpu_moe_layers and len(cpu_nodes(hw)) > 1 and p.numa == "none":
        notes.append("one KTransformers thread pool on a multi-node machine: most expert reads cross the socket "
                     "links; per-node pools (--numa distribute: kt-kernel --kt-threadpool-count, or a USE_NUMA=1 "
                     "build of 0.2/0.3) read node-local memory")
    if pr.name == "ktransformers" and p.op_offload and p.cpu_moe_layers and not f.cpu_only:
        thr = kt_prefill_threshold(model, p, hw, pr, f, devices)
        own = machine.kt_threshold_of(p.extra) is not None
        notes.append(f"prefill: layer-wise on the GPU (every CPU layer's experts uploaded per "
                     f"{kt_chunk_tokens(p)}-token chunk, --chunked-prefill-size) for prompts of {thr} tokens or more, the CPU "
                     f"experts below (--kt-gpu-prefill-token-threshold {thr}, "
                     + ("the plan's)" if own else "where the layer-wise path gets faster)")
                     if thr else "prefill: the CPU experts for every prompt length (the layer-wise GPU path "
                     "is never faster here, or the plan's threshold is 0)")
    if res_share < 1.0:
        notes.append(f"only {res_share:.0%} of the CPU experts fit in RAM: the rest is read from NVMe")
    short = page_cache_short_bytes(model, p, hw, pr, mem.ram_anon_bytes)
    paging = paging_decode_tok_s(dterms, f, per_step) if short else 0.0
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
    d_range = (held_out_range(decode, dterms, pr.term_range_log.get("decode", {}), _stand_in_extra(hw, dterms),
                              pr.term_range_center.get("decode"))
               or (decode / (1 + dr), decode / max(0.1, 1 - dr)))
    if paging:
        d_range = (min(d_range[0], paging), d_range[1])
    p_range = held_out_range(prefill, pterms, pr.term_range_log.get("prefill", {}), _stand_in_extra(hw, pterms),
                             pr.term_range_center.get("prefill"))
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
    )
