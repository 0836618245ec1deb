"""The cost model's rates: a hardware profile's figures, calibrations and a backend's priors
turned into the bandwidths, FLOP rates and fixed costs the terms divide by (Factors).

Each rate carries a source (calibrated > measured > spec-sheet > prior) and a 1-sigma relative
uncertainty (the range of a prediction combines them over the terms they feed). The factor
table (which factors exist, their bounds and levels) is cost/factors.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from moeplan.errors import InputError
from moeplan.planner import backends
from moeplan.planner.cost import factors as F
from moeplan.planner.cost import gpu_kernels, machine
from moeplan.planner.cost.priors import BackendPriors
from moeplan.planner.hardware.profile import Figure, HardwareProfile, NumaNode, pcie_bytes_per_s
from moeplan.planner.hardware.windows import GROUP_SIZE as WINDOWS_GROUP_SIZE
from moeplan.planner.placement import Placement
from moeplan.planner.plan import FactorFigure, FactorsUsed

# nominal clock of the machine the batch-1 dot-product anchor was measured on (docs/design.md §4:
# Q8_0 experts at 18.7 GB/s with 2 threads, a Sapphire Rapids-class VM reporting 2100 MHz);
# also the clock assumed when a profile gives none
REF_CLOCK_HZ = 2.1e9


# a read-only stream reaches ~90% of an Infinity Fabric link (profiles/parts/efficiency.toml
# [fabric]) and ~70% of a QPI/UPI link's data rate (snoop and protocol traffic share it)
FABRIC_READ = 0.90


LINK_READ = 0.70


# 1-sigma relative uncertainty of a profile figure by where it came from. Assumed figures, not
# fitted: a measured or calibrated rate repeats within a few percent (benchmarks/probe_accuracy.py
# compares the probe with a C/OpenMP reference), a spec sheet's or a user's number is a nominal
# rate some parts miss by 10-20%, a prior is a class average. The ranges that ship are the
# held-out residuals' (cost/ranges.py); these only order the terms' uncertainties.
_SOURCE_ERR = {"measured": 0.07, "calibrated": 0.05, "nvml": 0.1, "sysfs": 0.1, "user": 0.15,
               "spec-sheet": 0.15, "prior": 0.3}


# the resolved factors: one FactorFigure (value, source, 1-sigma rel_err) per rate, as Estimate
# carries them (planner/plan.py)
Rate = FactorFigure


Factors = FactorsUsed


RHO_SUB_NUMA = 0.85
# Figures used where the profile lacks one (each marked "prior" in the rate's source):
# FLOP per byte of memory bandwidth of a GPU with no FP16 figure: its dense FP16 tensor rate
# (FP32 accumulate) over its bandwidth is 76 on an RTX 3090 (71 TFLOP/s / 936 GB/s), 164 on an
# RTX 4090 (165 / 1008), 200 on an A100 (312 / 1555), 295 on an H100 SXM (989 / 3350), from
# NVIDIA's spec sheets; 100 is the consumer end (rel. error 0.5)
GPU_FLOP_PER_BYTE_PRIOR = 100
# pinned host-to-device copies reach ~80% of the PCIe link rate (profiles/parts/efficiency.toml
# [pcie_h2d], with its measured sources)
PCIE_PAYLOAD = 0.8
# a profile with channels and MT/s but no per-node read figure: read rate / (channels x MT/s x
# 8 B). An assumed figure, below efficiency.toml [dram_read]'s 0.75-0.85 STREAM ratios (which
# `moeplan hardware` applies itself; this path is a hand-written profile), rel. error 0.25
SPEC_DRAM_READ = 0.7
# a CPU with no per-core FLOP figure: 2 FMA units x 16 (AVX-512) or 8 (AVX2) FP32 lanes x 2
# FLOP per cycle at FMA_PEAK_CLOCK_X of the all-core clock; 0.85 is an assumed AVX clock
# offset (Intel lowers the clock under wide FMA work; not measured in this repository)
FMA_PEAK_CLOCK_X = 0.85
# a machine with no disk figure: sequential reads of a PCIe 3.0 / 4.0 NVMe drive (3.5-7 GB/s
# on spec sheets) through mmap page faults, assumed ~2 GB/s (rel. error 0.5)
NVME_PRIOR_BYTES_PER_S = 2e9


def _one_socket(nodes: tuple[NumaNode, ...]) -> bool:
    """The nodes are sub-NUMA clusters of one socket: SLIT distances between them all < 20
    (sockets are 20+ apart, SNC / NPS sub-nodes 11-12)."""
    ids = {n.id for n in nodes}
    pairs = [d for n in nodes for j, d in enumerate(n.distances) if j in ids and j != n.id]
    return bool(pairs) and len(pairs) == len(nodes) * (len(nodes) - 1) and all(d < 20 for d in pairs)


def factors_used(f: Factors) -> FactorsUsed:
    """The factors as an estimate reports them (uncertainties rounded to 4 places: stable JSON)."""
    changes: dict[str, Any] = {name: replace(v, rel_err=round(v.rel_err, 4))
                               for name, v in vars(f).items() if isinstance(v, FactorFigure)}
    return replace(f, **changes)


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
            # assumed: half the prior's uncertainty plus 0.1 for the other runner's kernels
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
        return peak * SPEC_DRAM_READ, "spec-sheet", 0.25
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
    if not backends.behaviour(backend).spinning_worker_pools:
        return cores
    return max(1, min(cores, logical_cpus(hw, used_nodes(hw, p)) - machine.KT_HELPER_THREADS))


def _gpu_rates(hw: HardwareProfile, pr: BackendPriors, cpu_only: bool) -> tuple[Rate, Rate, Rate]:
    """The first GPU's achievable memory bandwidth, FP16 matmul rate and host-to-GPU copy rate."""
    gpu = hw.gpus[0] if hw.gpus else None
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
    if gpu and mfu_src == "prior":
        # the prior is NVIDIA's; another family's kernels reach a measured share of that
        # (cost/gpu_kernels.py). A calibration measured this GPU: it stands as it is
        k, k_err, k_how = gpu_kernels.kernel_efficiency(gpu.vendor, gpu.gfx_target)
        if k_how:
            mfu, mfu_src, mfu_err = mfu * k, f"prior x {k_how}", math.hypot(mfu_err, k_err)
    gf = _fig(gpu.fp16_flop_per_s) if gpu else None
    if gf:
        f_gpu = Rate(gf[0] * mfu, f"{gf[1]} x {mfu_src} mfu={mfu:.2f}", math.hypot(gf[2], mfu_err))
    elif gpu and g:
        f_gpu = Rate(g[0] * GPU_FLOP_PER_BYTE_PRIOR * mfu, "prior (100 FLOP/B of bandwidth)", 0.5)
    else:
        f_gpu = Rate(0.0, "none", 0.0)
    pi, pi_src, pi_err = _factor(F.PI_H2D, pr.pi_h2d, pr, hw)
    h = _fig(gpu.h2d_bytes_per_s) if gpu else None
    if h:
        h2d = Rate(h[0] * pi, f"{h[1]} x {pi_src} pi={pi:.2f}", math.hypot(h[2], pi_err))
    elif gpu and gpu.pcie_gen and gpu.pcie_width:
        peak = pcie_bytes_per_s(gpu.pcie_gen, gpu.pcie_width) or pcie_bytes_per_s(3, gpu.pcie_width) or 0.0
        h2d = Rate(peak * PCIE_PAYLOAD * pi, f"spec-sheet PCIe {gpu.pcie_gen}x{gpu.pcie_width} x prior",
                   math.hypot(0.15, pi_err))
    elif gpu and not cpu_only:
        # a GPU known by its VRAM alone: the link of most cards of the last generations, PCIe 4.0
        # x16, with the spread from a 3.0 x16 slot to a 5.0 x16 one
        h2d = Rate((pcie_bytes_per_s(4, 16) or 0.0) * PCIE_PAYLOAD * pi, "prior: PCIe 4.0 x16 assumed (link not given)",
                   math.hypot(0.5, pi_err), "link not given: pass --pcie GENxLANES")
    else:
        h2d = Rate(0.0, "none", 0.0)
    return bw_g, f_gpu, h2d


def _remote_ratio(hw: HardwareProfile, pr: BackendPriors, nodes: tuple[NumaNode, ...]) -> tuple[float, str, float]:
    """Remote/local read-bandwidth ratio: the profile's measured matrix, sub-NUMA nodes of one
    socket, else the prior (or its calibration)."""
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
        sub = machine.sub_numa_read_ratio(hw)
        if sub:
            rho, rho_src = sub
    elif len(nodes) > 1 and rho_src == "prior" and not hw.numa_bw_matrix:
        # nodes on several sockets: the family's measured remote/local ratio where a public
        # measurement gives one (machine.remote_read_ratio), a stream figure like the nodes' DRAM
        fam = machine.remote_read_ratio(hw)
        if fam:
            rho, rho_src, rho_err = fam[0], fam[1], 0.15
    return rho, rho_src, rho_err


@dataclass(frozen=True)
class _Layout:
    """Where a plan's pages and threads sit under its NUMA policy."""

    mem_nodes_bw: float  # DRAM read rate of the nodes holding the pages
    f_remote: float  # share of reads from a remote node
    note: str
    thread_nodes: tuple[NumaNode, ...]  # the nodes whose cores run the threads
    pages_k: int = 0  # 'none' with pages on k of the nodes: threads near them and far from them differ


def _numa_layout(hw: HardwareProfile, p: Placement, nodes: tuple[NumaNode, ...], n_nodes: int,
                 bws: list[tuple[float, str, float]], pools: int, host_bytes: float) -> _Layout:
    sockets_all = max(1, hw.cpu.n_sockets)
    every = sum(b[0] for b in bws)
    if hw.cpu_nodes and n_nodes < sockets_all and pools == 1:
        # one NUMA node over several sockets (AMD NPS0, node interleaving on Intel): the memory
        # controllers interleave every page over all sockets' channels, so whatever the policy a
        # share 1 - 1/sockets of each thread's reads crosses the socket links
        f_remote = 1 - n_nodes / sockets_all
        return _Layout(every, f_remote, f"{n_nodes} NUMA node over {sockets_all} sockets (NPS0 / node interleaving): "
                       f"pages interleaved over every socket's channels, {f_remote:.0%} of reads remote", nodes)
    if pools > 1 or len(nodes) == 1:
        return _Layout(every, 0.0, f"{pools} per-node pools (kt-kernel --kt-threadpool-count {pools}): each node's "
                       "threads read their node's share of every expert" if pools > 1 else f"node {nodes[0].id}", nodes)
    if hw.os == "windows":
        return _windows_layout(hw, nodes, bws)
    if p.numa == "interleave":
        return _Layout(every, 1 - 1 / len(nodes), f"pages interleaved over nodes {[n.id for n in nodes]}", nodes)
    if p.numa == "distribute":
        # --numa distribute: no MAP_POPULATE and MADV_RANDOM (src/llama-mmap.cpp, `if (numa)`), so
        # after the page cache is dropped (the plan says so) each page is faulted in by the first
        # thread that reads it; ggml_is_numa() turns dynamic chunking off (ggml-cpu.c
        # mul_mat / mul_mat_id: `disable_chunking`), thread i always takes chunk i of a matrix,
        # and thread i runs on node i % n (set_numa_thread_affinity): every later read is local
        return _Layout(every, 0.0, "threads pinned round-robin over nodes, each page first touched by the thread "
                       "that reads it (page cache dropped): reads node-local", nodes)
    # none: threads spread by the OS, pages on the loader's node until it is full, then on the
    # next: a tensor's pages sit on one node, so while a layer is read one node's DRAM serves
    # it, whichever node that is, and the threads of the other nodes read it over the socket
    # links (1 - 1/n of the threads). Spilling over k nodes does not make reads local: only
    # --numa distribute's first touch by the reading thread does.
    k = machine.pages_nodes(host_bytes, [n.mem_total_bytes for n in nodes])
    return _Layout(sum(b[0] for b in bws[:k]) / k, 1 - 1 / len(nodes),
                   f"no NUMA policy: pages on {'one node' if k == 1 else f'{k} nodes, filled one after another'} "
                   f"(MAP_POPULATE from the loading thread), each layer on one node, threads on all {len(nodes)}; "
                   "dynamic chunking lets the threads near the pages take more of the work", nodes, 1)


def _windows_layout(hw: HardwareProfile, nodes: tuple[NumaNode, ...], bws: list[tuple[float, str, float]]) -> _Layout:
    # no numactl and a no-op --numa on Windows (planner/hardware/windows.py): any policy but
    # a `start /NODE` bind leaves the pages spread over the nodes
    f_remote = 1 - 1 / len(nodes)
    if logical_cpus(hw, nodes) > WINDOWS_GROUP_SIZE:
        # more logical CPUs than one processor group: ggml-cpu's Windows threads are not
        # group-aware (ggml_thread_apply_affinity sets a single 64-bit mask), and Windows 10 /
        # Server 2019 keep a process's threads in its primary group, one node here (Windows 11
        # and Server 2022 spread them over the groups: then this is pessimistic)
        return _Layout(bws[0][0], f_remote,
                       f"Windows: threads in one processor group (node {nodes[0].id}, <= {WINDOWS_GROUP_SIZE} logical "
                       f"CPUs), pages spread over nodes {[n.id for n in nodes]}, {f_remote:.0%} of reads remote "
                       "(Windows 11 / Server 2022 spread threads over the groups)", nodes[:1])
    return _Layout(sum(b[0] for b in bws), f_remote,
                   f"Windows default: threads on all nodes, pages spread over nodes {[n.id for n in nodes]}, "
                   f"{f_remote:.0%} of reads remote", nodes)


def _core_read(hw: HardwareProfile, pr: BackendPriors, bws: list[tuple[float, str, float]],
               cores_per_node: int) -> tuple[float, str, float]:
    """One core's read rate (bytes/s), how it was found, and the share factor's uncertainty."""
    core_fig = _fig(hw.cpu.core_read_bytes_per_s)
    share, share_src, share_err = _factor(F.CORE_READ_SHARE, pr.core_read_share, pr, hw)
    fam_core = machine.core_read_prior(hw)
    if share_src != "prior":
        return share * (sum(b[0] for b in bws) / len(bws)) / cores_per_node, share_src, share_err
    if core_fig and core_fig[1] in ("measured", "calibrated", "user"):
        return core_fig[0], core_fig[1], share_err
    if fam_core:
        return fam_core[0], "Little's law prior", share_err
    if core_fig:
        return core_fig[0], core_fig[1], share_err
    return share * (sum(b[0] for b in bws) / len(bws)) / cores_per_node, share_src, share_err


def _cpu_bandwidth(hw: HardwareProfile, pr: BackendPriors, nodes: tuple[NumaNode, ...], n_nodes: int,
                   bws: list[tuple[float, str, float]], lay: _Layout, tu: machine.ThreadUse) -> Rate:
    """The CPU experts' read rate: threads x a core's rate, the CCD links, eta_cpu x the page
    nodes' DRAM, and the remote share's penalty (formula in cost/estimate.py's docstring)."""
    eta_c, etac_src, etac_err = _factor(F.ETA_CPU, pr.eta_cpu, pr, hw)
    rho, rho_src, rho_err = _remote_ratio(hw, pr, nodes)
    thread_nodes, f_remote, note = lay.thread_nodes, lay.f_remote, lay.note
    n_cores = sum(n.n_physical_cores or len(n.cpus) for n in thread_nodes) or hw.cpu.n_cores
    sockets_n = max(1, round(len(thread_nodes) * max(1, hw.cpu.n_sockets) / max(1, n_nodes)))
    cores_per_node = max(1, n_cores // len(thread_nodes))
    b_core, b_how, share_err = _core_read(hw, pr, bws, cores_per_node)
    thread_bw = tu.on_cores * b_core
    # threads bound to sub-NUMA nodes of one socket (NPS2/NPS4) reach only those nodes' CCDs
    socket_share = len(thread_nodes) * max(1, hw.cpu.n_sockets) / max(1, n_nodes)
    ccds_avail = (math.ceil(hw.cpu.ccds_per_socket * socket_share)
                  if hw.cpu.ccds_per_socket and socket_share < 1 else None)
    ccd = machine.ccd_read_cap(hw, math.ceil(tu.on_cores / sockets_n), ccds_avail)
    # the CCD links' stream rate (FABRIC_READ, or the family's measured fraction) is a stream
    # benchmark's figure like the nodes' DRAM rate: the runtime reaches eta_cpu of either
    ccd_x = machine.ccd_read_fraction(hw, FABRIC_READ)
    ccd_bw = ccd[0] * ccd_x * sockets_n * eta_c if ccd else math.inf
    dram_bw = eta_c * lay.mem_nodes_bw
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
    if f_remote and lay.pages_k:
        # no --numa: ggml_is_numa() is false, so mul_mat(_id) hands out chunks dynamically
        # (ggml_threadpool_chunk_add): the threads on the k page nodes and the remote ones read
        # side by side, each at its own rate, together bounded by the page nodes' DRAM
        n_u = len(nodes)
        near = min(thread_bw, ccd_bw) * lay.pages_k / n_u
        far = min(rho * min(thread_bw, ccd_bw) * (n_u - lay.pages_k) / n_u,
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
        how = f"CCD links: {ccd[1]} x {ccd_x:.2f} x {etac_src} eta_cpu={eta_c:.2f}" if ccd else ""
    else:
        how = f"{'/'.join(srcs)} x {etac_src} eta_cpu={eta_c:.2f}"
    if link and f_remote:
        note += f"; remote reads {rem_bw / 1e9:.0f} GB/s ({link[1]})"
    return Rate(bw_val, how, err, note)


@dataclass(frozen=True)
class _CpuCompute:
    """The CPU's dot and matmul rates for the decode and prefill threads."""

    dot: Rate  # batch-1 dot rate of the decode threads
    flop: Rate  # batched matmul rate of the prefill threads
    dot_batch_x: float  # the prefill threads' dot rate / the decode threads'
    kt: machine.KtThreads | None  # KTransformers' threads, None for other backends


def _cpu_compute(hw: HardwareProfile, pr: BackendPriors, p: Placement, lay: _Layout, tu: machine.ThreadUse,
                 n_cores: int, n_logical: int, pools: int) -> _CpuCompute:
    T = max(1, p.n_threads)
    clock, clock_how = machine.all_core_clock_hz(hw, REF_CLOCK_HZ)
    r_dot, rdot_src, rdot_err = _factor(F.CPU_DOT, pr.cpu_dot_weights_per_cycle, pr, hw)
    if not hw.cpu.base_clock_hz or (hw.cpu.core_flop_per_s is not None
                                    and hw.cpu.core_flop_per_s.source == "prior"):
        rdot_err = math.hypot(rdot_err, 0.3)
    isa_x, isa_how = machine.isa_dot_scale(hw, pr.name) if rdot_src == "prior" else (1.0, "calibrated")
    # a thread on an SMT sibling shares its core's vector units; an oversubscribed one waits
    dot_threads = tu.on_cores + machine.SMT_SIBLING_X * tu.smt_threads
    kt = None
    if backends.behaviour(pr.name).spinning_worker_pools:
        # --cpu_infer threads plus the spinning hand-over threads (machine.kt_threads)
        node_logical = min((len(n.cpus) for n in lay.thread_nodes), default=0)
        kt = machine.kt_threads(T, n_cores, n_logical, pools, node_logical, hw.system.kernel)
        dot_threads = round(kt.dot_threads, 1)
    dot = Rate(r_dot * isa_x * clock * dot_threads,
               f"{rdot_src} ({r_dot:.1f} weights/cycle x {isa_how} x {clock_how} x {dot_threads:g} threads)", rdot_err)
    isa_class = cpu_isa_class(hw)
    core_peak = _fig(hw.cpu.core_flop_per_s)
    clock_x = clock / (hw.cpu.base_clock_hz or clock)
    # no FLOP figure: 2 FMA units x 16 (AVX-512) or 8 (AVX2) FP32 lanes x 2 FLOP per cycle, at
    # FMA_PEAK_CLOCK_X of the all-core clock (wide vectors lower the clock)
    peak = (core_peak[0] * clock_x if core_peak
            else clock * (64 if "avx512f" in hw.cpu.isa else 32) * FMA_PEAK_CLOCK_X)
    eff, eff_src, eff_err = _factor(F.CPU_MM_EFF, _mm_eff_prior(pr, isa_class), pr, hw)
    tb = machine.thread_use(p.threads_batch, n_cores, n_logical)
    # the batch-1 dot product over the prefill threads (mainline's vec_dot path, iqk's own kernels)
    dot_batch_x = (tb.on_cores + machine.SMT_SIBLING_X * tb.smt_threads) / max(1e-9, dot_threads)
    cpu_flop = Rate(eff * peak * (tb.on_cores + machine.SMT_SIBLING_X * tb.smt_threads),
                    f"{eff_src} ({isa_class}, {eff:.2f} of FP32 peak at {clock / 1e9:.2f} GHz)",
                    math.hypot(eff_err, core_peak[2] if core_peak else 0.3))
    return _CpuCompute(dot, cpu_flop, dot_batch_x, kt)


def _sync_rate(hw: HardwareProfile, pr: BackendPriors, T: int, xs: float, tu: machine.ThreadUse,
               kt: machine.KtThreads | None, expert_barriers: int) -> tuple[Rate, float, float]:
    """(fixed cost per CPU-expert layer, the oversubscription wait per barrier, one barrier)."""
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
    return sync, oversub, per_barrier


def resolve_factors(hw: HardwareProfile, pr: BackendPriors, p: Placement, host_bytes: float = 0.0,
                    expert_barriers: int = 4) -> Factors:
    """Turn the profile's figures, calibration and backend priors into the model's rates.
    `expert_barriers`: barriers of the CPU's split of a MoE block (graph.expert_split_barriers)."""
    cpu_only = not hw.gpus or p.n_gpus == 0
    bw_g, f_gpu, h2d = _gpu_rates(hw, pr, cpu_only)
    # CPU: threads, nodes, NUMA policy, the machine model (machine.py)
    nodes = used_nodes(hw, p)
    n_nodes = len(cpu_nodes(hw))
    T = max(1, p.n_threads)
    bws = [_node_bw(n, hw, n_nodes) for n in nodes]
    # per-node worker pools only under a 'distribute' / multi-node 'bind' plan
    # (machine.kt_pool_count); one pool on several nodes reads like llama.cpp without a policy
    pools = machine.kt_pool_count(p.numa, len(nodes)) if pr.numa_aware else 1
    lay = _numa_layout(hw, p, nodes, n_nodes, bws, pools, host_bytes)
    # threads on cores: SMT siblings and threads beyond the logical CPUs add no read rate
    n_cores = sum(n.n_physical_cores or len(n.cpus) for n in lay.thread_nodes) or hw.cpu.n_cores
    n_logical = logical_cpus(hw, lay.thread_nodes)
    tu = machine.thread_use(T, n_cores, n_logical)
    bw_c = _cpu_bandwidth(hw, pr, nodes, n_nodes, bws, lay, tu)
    cc = _cpu_compute(hw, pr, p, lay, tu, n_cores, n_logical, pools)
    sockets_n = max(1, round(len(lay.thread_nodes) * max(1, hw.cpu.n_sockets) / max(1, n_nodes)))
    sockets_used = len(lay.thread_nodes) > 1 and hw.cpu.n_sockets > 1
    # a barrier's counter line crosses the socket links: one hop more per doubling of sockets
    xs = 1.0 + math.log2(sockets_n) if sockets_used else 1.0
    sync, oversub, per_barrier = _sync_rate(hw, pr, T, xs, tu, cc.kt, expert_barriers)
    sl, sl_src, sl_err = _factor(F.S_LAYER_GPU_S, pr.s_layer_gpu_s, pr, hw)
    tt, tt_src, tt_err = _factor(F.T_TOKEN_S, pr.t_token_s, pr, hw)
    st = hw.storage[0].seq_read_bytes_per_s if hw.storage else None
    nv = _fig(st)
    nvme = Rate(nv[0], nv[1], nv[2]) if nv else Rate(NVME_PRIOR_BYTES_PER_S, "prior (a PCIe 3/4 NVMe)", 0.5)
    return Factors(bw_gpu_bytes_per_s=bw_g, gpu_flop_per_s=f_gpu, h2d_bytes_per_s=h2d, bw_cpu_bytes_per_s=bw_c,
                   cpu_dot_elem_per_s=cc.dot, cpu_flop_per_s=cc.flop, s_sync_s=sync,
                   s_layer_gpu_s=Rate(sl, sl_src, sl_err), t_token_s=Rate(tt, tt_src, tt_err),
                   nvme_bytes_per_s=nvme, remote_share=lay.f_remote, cross_socket=sockets_used,
                   cpu_only=cpu_only, numa_note=bw_c.note, barrier_x=xs, oversub_s_per_barrier=oversub,
                   barrier_s=per_barrier,
                   cpu_dot_batch_x=cc.dot_batch_x)
