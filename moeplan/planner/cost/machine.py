"""The machine model behind the CPU terms: memory topology, read rate as a function of the
threads used, socket links, clocks and ISA (pure; docs/cost-model.md "Machine model").

Each function is one mechanism with its source. The cost model (cost/resolve.py) calls them while
resolving its factors; a profile's measured figure (`moeplan probe`) always wins over these
priors, and `moeplan calibrate` over both.

Symbols: T threads, C physical cores, L logical CPUs of the nodes the threads run on, n NUMA
nodes used, line = 64 B.

  core read rate      b_core = measured one-core stream, else
                      lines_in_flight x 64 B / loaded latency                  (Little's law)
  CCD read cap        BW_ccd = min(ccds, T_socket) x links x bytes/clk x FCLK   (AMD GMI)
  thread read rate    BW_T   = min(T_cores, C) x b_core                          (SMT adds none)
  CPU read rate       BW     = min(BW_T, BW_ccd x sockets, eta x sum BW_node)
  remote reads        BW_rem = min(rho x BW, socket links x link rate / mean hops)
  all-core clock      f      = base + 0.75 x (boost - base)
  dot rate            r      = r_anchor x isa_scale(backend, ISA) x f x min(T, C)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from moeplan.planner import backends
from moeplan.planner.hardware.profile import HardwareProfile

LINE_BYTES = 64


@dataclass(frozen=True)
class MemorySystem:
    """What one core and its die can pull from DRAM, per microarchitecture family.

    lines_in_flight: L2 misses (demand + L2 prefetch) one core keeps outstanding; latency_ns:
    loaded DRAM latency of the platform class; ccd_bytes_per_clk: read width of one GMI link
    from a CCD to the IO die (AMD; None = monolithic die / mesh); fclk_ghz: fabric clock of the
    family with its rated memory; wide_gmi_max_ccds: parts with at most this many CCDs connect
    each CCD with two GMI links (GMI-Wide); socket_link_bytes_per_s and socket_links: one
    inter-socket link's rate per direction and links per socket (QPI/UPI/xGMI)."""

    lines_in_flight: int
    latency_ns: float
    ccd_bytes_per_clk: int | None = None
    fclk_ghz: float | None = None
    wide_gmi_max_ccds: int = 0
    socket_link_bytes_per_s: float = 0.0
    socket_links: int = 0
    socket_links_mp: int = 0  # links per socket on the family's 4/8-socket parts (0 = same)
    source: str = ""
    # the share of a CCD link's 32 B/clk a read-only stream reaches (None: FABRIC_READ in
    # cost/resolve.py, 0.90, the desktop figure of efficiency.toml [fabric]); and whether the
    # fabric clock follows the memory clock 1:1 up to fclk_ghz (Zen 2 / Zen 3 server parts)
    ccd_read_fraction: float | None = None
    fclk_follows_memclk: bool = False
    # measured, where a public measurement of a part of the family exists
    # (profiles/parts/memory_measurements.toml, checked by tests/test_memory_measurements.py):
    # the read-only stream one core pulls from DRAM by itself (b_core instead of Little's law),
    # and the rate one socket's cores read the other socket's memory at, over the rate they read
    # their own (rho instead of the runtime's prior); with the part and source they come from
    core_read_bytes_per_s: float | None = None
    remote_read_ratio: float | None = None
    measured_on: str = ""
    # the same between two sub-NUMA nodes (SNC / NPS) of one socket, where measured
    sub_numa_read_ratio: float | None = None


# Sources:
#  lines in flight: Intel 64 and IA-32 Architectures Optimization Reference Manual (Haswell /
#   Broadwell / Skylake: 16-entry L2 superqueue; Ice Lake / Sunny Cove: 32 L2 misses; Golden
#   Cove and later: 48 L2 misses), AMD Software Optimization Guides (Zen 2/3: 32 L2 misses to
#   L3/memory in flight per core; Zen 4/5: 64, with the L2 prefetchers sharing them);
#  latency: loaded DRAM latency of the platform class (client ring ~85 ns, chiplet desktop
#   ~85 ns, server mesh / IO die 110-140 ns, Haswell-EX behind scalable memory buffers ~150 ns);
#  GMI: 32 B/clk read per CCD link (AMD EPYC 7002/9004 architecture white papers); GMI3-Wide on
#   4-CCD EPYC 9004 parts (4th Gen EPYC architecture white paper: two links per CCD); FCLK with
#   the rated memory: Rome 1.467 GHz (DDR4-2933 1:1), Milan 1.6 GHz (DDR4-3200 1:1), Genoa /
#   Turin ~2.0 GHz (EPYC 9004/9005 BIOS & workload tuning guides);
#  socket links: QPI 9.6 GT/s x 2 B = 19.2 GB/s (E5 v3/v4: 2 links, E7 v3/v4: 3 links), UPI
#   10.4 GT/s = 20.8 GB/s (Skylake/Cascade Lake-SP: 2-3 links), UPI 11.2 GT/s = 22.4 GB/s
#   (Ice Lake-SP: 3), UPI 2.0 16 GT/s = 32 GB/s (Sapphire/Emerald Rapids: 4), UPI 2.0 24 GT/s
#   = 48 GB/s (Granite Rapids: 6), xGMI 16 lanes x 18 Gb/s = 36 GB/s (Rome/Milan: 4), xGMI3
#   16 x 32 Gb/s = 64 GB/s (Genoa/Turin: 4; Lenovo LP1852: "four xGMI links ... 512 GB/s
#   between sockets", both directions); one direction each.
# GMI2 (Zen 2 Rome / Castle Peak, Zen 3 Milan / Chagall): a server CCD reads far less than its
# link's 32 B per FCLK. Measured: 2 x EPYC 7452 (4 CCDs of 8 cores per socket, 8 x DDR4-2666, so
# FCLK = MEMCLK = 1.333 GHz) read 113.4 GB/s on one node with its 32 cores, 226.2 GB/s on both
# (AVX2 read-only stream; ktransformers PR 2175, profiles/parts/memory_measurements.toml):
# 113.4 / (4 x 32 B x 1.333 GHz) = 0.66 of the links, where the DIMMs (170.6 GB/s peak) were not
# the limit. Zen 3 server parts keep the GMI2 links and the 12 nm IO die of Zen 2 (AMD EPYC 7003
# architecture white paper), so they get the same fraction (not measured on a Zen 3 part here).
GMI2_SERVER_READ_FRACTION = 113.4e9 / (4 * 32 * 1.333e9)

# One core's read-only stream from DRAM, measured (likwid-bench `load`, one thread pinned to
# one core, kerncraft machine files of RRZE's test machines; profiles/parts/memory_measurements
# .toml has each figure with its source): where the family has such a measurement it replaces
# Little's law, whose 16-entry superqueue under-states Skylake-SP / Cascade Lake cores (their L2
# streamer fills the LLC beyond the demand misses: 14.3 and 13.0 GB/s measured, 9.3 by the law)
# and whose 48 misses over-state a Sapphire Rapids core (14.5 measured, 23.6 by the law).
# Broadwell-EP (E5-2630 v4) 7.98, Skylake-SP (Gold 6148) 14.32, Cascade Lake (Gold 6248) 12.96,
# Ice Lake-SP (Platinum 8360Y) 15.37, Sapphire Rapids (Platinum 8470) 14.49, Zen 2 (EPYC 7452)
# 21.77 GB/s.
# Remote over local read rate, measured: Intel MLC --bandwidth_matrix on 2 x Xeon Gold 6140
# (Skylake-SP, 6 x DDR4-2666 per socket; KU Leuven Genius nodes): node 0's cores read node 0 at
# 104.4 GB/s and node 1 at 34.3 GB/s, 0.33 of local over the UPI links.
KERNCRAFT = "kerncraft machine files (github.com/RRZE-HPC/kerncraft examples/machine-files)"
SKYLAKE_REMOTE_RATIO = 34290.6 / 104362.2
# and on 2 x Xeon 6980P with SNC disabled (one node per socket, 12 x DDR5 each; ubergarm, Intel MLC
# 3.11b in ik_llama.cpp discussion 201): 554.8 GB/s local, 247.8 GB/s from the other socket
GNR_REMOTE_RATIO = 247793.1 / 554843.5
# and with SNC3 (three nodes per socket, one per compute die): node 0's threads read node 1's memory
# on the same socket at 188.6 GB/s against 187.9 GB/s from their own (ratio 1.0, capped at 1)
GNR_SUB_NUMA_RATIO = min(1.0, 188622.8 / 187911.4)

FAMILIES: dict[str, MemorySystem] = {
    "haswell": MemorySystem(16, 120.0, socket_link_bytes_per_s=19.2e9, socket_links=2, socket_links_mp=3,
                            source="Haswell/Broadwell-EP/EX: 16-entry superqueue",
                            core_read_bytes_per_s=7.98e9, measured_on=f"Xeon E5-2630 v4, {KERNCRAFT}"),
    "skylake-sp": MemorySystem(16, 110.0, socket_link_bytes_per_s=20.8e9, socket_links=3,
                               source="Skylake-SP: 16-entry superqueue, UPI 10.4 GT/s",
                               core_read_bytes_per_s=14.32e9, remote_read_ratio=SKYLAKE_REMOTE_RATIO,
                               measured_on=f"Xeon Gold 6148, {KERNCRAFT}; remote: Xeon Gold 6140, Intel MLC "
                               "(KU Leuven VscDocumentation)"),
    "cascade-lake": MemorySystem(16, 110.0, socket_link_bytes_per_s=20.8e9, socket_links=3,
                                 source="Cascade Lake-SP: 16-entry superqueue, UPI 10.4 GT/s",
                                 core_read_bytes_per_s=12.96e9, measured_on=f"Xeon Gold 6248, {KERNCRAFT}"),
    "icelake-sp": MemorySystem(32, 120.0, socket_link_bytes_per_s=22.4e9, socket_links=3,
                               source="Ice Lake-SP: 32 L2 misses, UPI 11.2 GT/s",
                               core_read_bytes_per_s=15.37e9, measured_on=f"Xeon Platinum 8360Y, {KERNCRAFT}"),
    "sapphire-rapids": MemorySystem(48, 130.0, socket_link_bytes_per_s=32e9, socket_links=4,
                                    source="Golden Cove server core: 48 L2 misses, UPI 2.0 16 GT/s",
                                    core_read_bytes_per_s=14.49e9, measured_on=f"Xeon Platinum 8470, {KERNCRAFT}"),
    "granite-rapids": MemorySystem(48, 140.0, socket_link_bytes_per_s=48e9, socket_links=6,
                                   source="Redwood Cove: 48 L2 misses, UPI 2.0 24 GT/s",
                                   remote_read_ratio=GNR_REMOTE_RATIO, sub_numa_read_ratio=GNR_SUB_NUMA_RATIO,
                                   measured_on="remote: 2 x Xeon 6980P SNC off / SNC3, Intel MLC (ik_llama.cpp discussion 201)"),
    "sierra-forest": MemorySystem(32, 140.0, socket_link_bytes_per_s=48e9, socket_links=6,
                                  source="Crestmont: 32 L2 misses per module share"),
    "comet-lake": MemorySystem(16, 85.0, source="Skylake client: 16-entry superqueue"),
    "rocket-lake": MemorySystem(32, 85.0, source="Cypress Cove: 32 L2 misses"),
    "alder-lake": MemorySystem(48, 85.0, source="Golden/Raptor Cove client: 48 L2 misses"),
    "zen2": MemorySystem(32, 110.0, ccd_bytes_per_clk=32, fclk_ghz=1.467, socket_link_bytes_per_s=36e9,
                         socket_links=4, ccd_read_fraction=GMI2_SERVER_READ_FRACTION, fclk_follows_memclk=True,
                         source="Zen 2: 32 L2 misses; GMI2 32 B/clk at up to 1.467 GHz",
                         core_read_bytes_per_s=21.77e9, measured_on=f"EPYC 7452, {KERNCRAFT}"),
    "zen3": MemorySystem(32, 110.0, ccd_bytes_per_clk=32, fclk_ghz=1.6, socket_link_bytes_per_s=36e9,
                         socket_links=4, ccd_read_fraction=GMI2_SERVER_READ_FRACTION, fclk_follows_memclk=True,
                         source="Zen 3: 32 L2 misses; GMI2 32 B/clk at up to 1.6 GHz"),
    "zen4": MemorySystem(64, 115.0, ccd_bytes_per_clk=32, fclk_ghz=2.0, wide_gmi_max_ccds=4,
                         socket_link_bytes_per_s=64e9, socket_links=4,
                         source="Zen 4: 64 L2 misses; GMI3 32 B/clk at 2.0 GHz, GMI3-Wide on 4-CCD parts"),
    "zen5": MemorySystem(64, 115.0, ccd_bytes_per_clk=32, fclk_ghz=2.0, wide_gmi_max_ccds=4,
                         socket_link_bytes_per_s=64e9, socket_links=4,
                         source="Zen 5: 64 L2 misses; GMI3 32 B/clk at 2.0 GHz, GMI3-Wide on 4-CCD parts"),
    "zen5-mobile": MemorySystem(64, 100.0, source="Zen 5 mobile (monolithic)"),
}
# desktop parts of a server family reach DRAM with a shorter path (no mesh / big IO die)
DESKTOP_LATENCY_NS = 85.0


def cpu_family(hw: HardwareProfile) -> str:
    """The profile's microarchitecture family: the catalog's when the profile carries it, else
    inferred from vendor and ISA (probed machines; '' when nothing says)."""
    c = hw.cpu
    if c.family:
        return c.family
    isa = set(c.isa)
    vendor = c.vendor or ("amd" if "amd" in c.model.lower() else "intel" if "intel" in c.model.lower() else "")
    if not vendor:
        return ""
    if vendor == "amd":
        if "avx512f" in isa:
            return "zen4"
        return "zen3" if isa else ""
    if "amx_tile" in isa:
        return "sapphire-rapids"
    if "avx512_vnni" in isa:
        return "cascade-lake" if c.n_sockets > 1 or (c.n_cores or 0) > 16 else "rocket-lake"
    if "avx512f" in isa:
        return "skylake-sp"
    if "avx_vnni" in isa:
        return "alder-lake"
    if "avx2" in isa:
        return "haswell" if c.n_sockets > 1 else "comet-lake"
    return ""


def memory_system(hw: HardwareProfile) -> MemorySystem | None:
    return FAMILIES.get(cpu_family(hw))


def core_read_prior(hw: HardwareProfile) -> tuple[float, str] | None:
    """b_core: a server part's measured one-core stream where its family has one, else Little's law
    for the family: lines in flight x 64 B / loaded latency."""
    ms = memory_system(hw)
    if ms is None:
        return None
    desktop = hw.cpu.segment == "desktop"
    if ms.core_read_bytes_per_s and not desktop:
        # a server part of a family with a measured one-core stream: the measurement
        rate = ms.core_read_bytes_per_s
        return rate, f"{rate / 1e9:.1f} GB/s per core, measured one-core read-only stream ({ms.measured_on})"
    lat = ms.latency_ns
    if desktop and not hw.cpu.family.startswith("zen5-mobile"):
        lat = min(lat, DESKTOP_LATENCY_NS)
    rate = ms.lines_in_flight * LINE_BYTES / (lat * 1e-9)
    return rate, f"{ms.lines_in_flight} lines x 64 B / {lat:.0f} ns = {rate / 1e9:.1f} GB/s per core ({ms.source})"


def ccd_read_cap(hw: HardwareProfile, threads_per_socket: int,
                 ccds_available: int | None = None) -> tuple[float, str] | None:
    """Per socket: the CCDs the threads run on times their GMI read rate (AMD chiplet server and
    workstation parts). Linux spreads runnable threads over idle last-level-cache domains first
    (the scheduler's LLC-aware load balancing), so T threads occupy min(ccds, T) CCDs; threads
    bound to NPS2/NPS4 nodes reach only those nodes' CCDs (`ccds_available`: an NPS4 node of an
    EPYC 7452 is one CCD of 8 cores, measured at 34.7 GB/s where its two channels give 43.5).
    Desktop parts are already capped in their spec profile (profiles/parts/cpus.toml [fabric])."""
    ms = memory_system(hw)
    c = hw.cpu
    ccds = c.ccds_per_socket
    if ms is None or not ms.ccd_bytes_per_clk or not ccds or c.segment == "desktop":
        return None
    links = 2 if ccds <= ms.wide_gmi_max_ccds else 1
    used = max(1, min(ccds, ccds_available or ccds, threads_per_socket))
    fclk = fabric_clock_ghz(hw, ms)
    cap = used * links * ms.ccd_bytes_per_clk * fclk * 1e9
    wide = " (GMI-Wide: 2 links)" if links == 2 else ""
    return cap, (f"{used} of {ccds} CCDs x {links * ms.ccd_bytes_per_clk} B x {fclk:.2f} GHz FCLK"
                 f"{wide} = {cap / 1e9:.0f} GB/s per socket")


def fabric_clock_ghz(hw: HardwareProfile, ms: MemorySystem) -> float:
    """The fabric clock: the family's with its rated memory; on Zen 2 / Zen 3 server parts FCLK
    runs 1:1 with the memory clock (MT/s / 2) up to that (AMD EPYC 7002/7003 BIOS tuning guides:
    FCLK synchronous with MEMCLK), so slower DIMMs slow the CCD links too."""
    f = ms.fclk_ghz or 0.0
    speed = hw.cpu.ram_speed_mts
    if ms.fclk_follows_memclk and speed:
        f = min(f, speed / 2 / 1000)
    return f


def ccd_read_fraction(hw: HardwareProfile, default: float) -> float:
    """The share of the CCD links' rate a read-only stream reaches on this family (`default`
    where no measurement gives it)."""
    ms = memory_system(hw)
    return ms.ccd_read_fraction if ms and ms.ccd_read_fraction else default


def remote_read_ratio(hw: HardwareProfile) -> tuple[float, str] | None:
    """The measured remote/local read ratio of the family's two-socket parts (None: no
    measurement; the runtime's prior rho_remote stands)."""
    ms = memory_system(hw)
    if ms is None or not ms.remote_read_ratio:
        return None
    return ms.remote_read_ratio, f"measured remote/local read ratio {ms.remote_read_ratio:.2f} ({ms.measured_on})"


def sub_numa_read_ratio(hw: HardwareProfile) -> tuple[float, str] | None:
    """The measured ratio between sub-NUMA nodes of one socket (None: no measurement)."""
    ms = memory_system(hw)
    if ms is None or not ms.sub_numa_read_ratio:
        return None
    return ms.sub_numa_read_ratio, (f"measured ratio {ms.sub_numa_read_ratio:.2f} between nodes of one socket "
                                    f"({ms.measured_on})")


def socket_link_cap(hw: HardwareProfile, n_nodes_used: int, n_sockets_used: int) -> tuple[float, str] | None:
    """Remote reads over the inter-socket links: every socket receives on its links, a remote
    page more than one hop away crosses links twice. Sockets with k links reach k others
    directly (glueless topologies); the rest are two hops away."""
    ms = memory_system(hw)
    if ms is None or n_sockets_used < 2 or not ms.socket_links:
        return None
    links = (ms.socket_links_mp or ms.socket_links) if n_sockets_used > 2 else ms.socket_links
    others = n_sockets_used - 1
    direct = min(others, links)
    hops = (direct + 2 * (others - direct)) / others
    cap = n_sockets_used * links * ms.socket_link_bytes_per_s / hops
    if n_sockets_used == 2:  # two sockets: all links between the same pair
        cap = 2 * links * ms.socket_link_bytes_per_s
    return cap, (f"{n_sockets_used} sockets x {links} links x {ms.socket_link_bytes_per_s / 1e9:.1f} GB/s"
                 f" / {hops:.2f} mean hops = {cap / 1e9:.0f} GB/s of remote reads")


@dataclass(frozen=True)
class ThreadUse:
    """How T threads sit on the cores of the nodes they run on."""

    threads: int
    cores: int  # physical cores of those nodes
    logical: int  # logical CPUs of those nodes
    on_cores: int  # threads that have a core to themselves: min(T, cores)
    smt_threads: int  # threads sharing a core with another (T - cores, up to logical - cores)
    oversubscribed: int  # threads beyond the logical CPUs (time-sliced by the OS)


# What a thread on a core's second hardware thread (an SMT sibling) adds to the batch-1 dot
# rate, in cores: the dequantise-and-dot loops are bound by the vector ALU ports the two
# threads share (see VECTOR_ALU_PIPES), so the sibling adds little. An assumed figure, not
# measured in benchmarks/ (a thread sweep past the physical cores would measure it).
SMT_SIBLING_X = 0.1


def thread_use(threads: int, cores: int, logical: int) -> ThreadUse:
    cores, logical = max(1, cores), max(cores, logical)
    t = max(1, threads)
    return ThreadUse(t, cores, logical, min(t, cores), max(0, min(t, logical) - cores), max(0, t - logical))


# A thread waiting at a barrier for a thread the OS has descheduled waits for that thread's
# next time slice: CFS's minimum granularity, 0.75 ms x (1 + log2(min(ncpus, 8))) = 3 ms on
# machines with 8+ CPUs (kernel/sched/fair.c, sysctl_sched_min_granularity / base_slice);
# with spinning worker threads (ggml's threadpool, KTransformers' CPUInfer) the waiting
# threads keep their CPUs, so an oversubscribed thread gets one slice per other thread's
# slice on its CPU: every barrier costs about one slice x the oversubscription share.
SCHED_SLICE_S = 3e-3


# A ggml barrier (ggml-cpu.c ggml_barrier) is one atomic counter every thread increments and
# one "passed" word they all spin on: the counter's cache line travels from core to core once
# per thread, so a barrier costs about T x the core-to-core hand-over latency. Published
# core-to-core latencies (Chips and Cheese / AnandTech core-to-core latency matrices):
# Intel's server mesh (Skylake-SP .. Granite Rapids) ~55 ns between any two cores, its client
# ring ~35 ns; AMD ~20 ns inside a core complex (a Zen 2 CCX of 4 cores, a Zen 3-5 CCD of 8)
# and ~100 ns between complexes through the IO die (~80 ns on desktop Zen 3/4, ~110 ns on
# Zen 2's Rome / Threadripper). The OS spreads a pool's threads over the complexes, so
# consecutive arrivals come from different complexes with probability 1 - 1/complexes used.
HANDOFF_NS = {"intel-server": 55.0, "intel-client": 35.0}
AMD_IN_COMPLEX_NS = 20.0
AMD_CROSS_COMPLEX_NS = {"zen2": 110.0, "zen3": 100.0, "zen4": 100.0, "zen5": 100.0}
AMD_DESKTOP_CROSS_NS = {"zen3": 80.0, "zen4": 80.0}
INTEL_CLIENT_FAMILIES = {"alder-lake", "comet-lake", "rocket-lake", "raptor-lake", "arrow-lake", "lunar-lake"}
# Xeon 6 with three compute dies (the 6900P parts: 432-504 MB of L3 per socket; the 6700P parts
# have one or two dies and at most 336 MB). Measured with Intel MLC --c2c_latency on 2 x Xeon
# 6980P (ik_llama.cpp discussion 201, profiles/parts/memory_measurements.toml [[core_to_core]]):
# in SNC3 a line moves to a core of the same node in 80.5 ns ("Local Socket L2->L2 HIT") and to a
# core of another node of the socket in 99-131 ns (mean 111); with SNC disabled (HEX: one NUMA
# node per socket, each line's caching agent hashed over all three dies) in 179.7 ns.
GNR_3DIE_MIN_L3_BYTES = 400 * 2**20
GNR_SNC3_IN_NODE_NS = 80.5
GNR_SNC3_CROSS_NODE_NS = (99.3 + 124.9 + 108.8 + 100.9 + 131.0 + 103.8) / 6
GNR_HEX_NS = 179.7


def _gnr_3die_handoff_ns(hw: HardwareProfile, threads: int) -> tuple[float, str] | None:
    """The measured hand-over latency of a three-die Xeon 6 in its NUMA mode (None: not one)."""
    c = hw.cpu
    sockets = max(1, c.n_sockets)
    if cpu_family(hw) != "granite-rapids" or (c.l3_bytes or 0) // sockets < GNR_3DIE_MIN_L3_BYTES:
        return None
    nodes = len(hw.cpu_nodes) or sockets
    per_socket = max(1, nodes // sockets)
    if per_socket == 1:
        return GNR_HEX_NS, f"{GNR_HEX_NS:.0f} ns core-to-core hand-over (Xeon 6900P, SNC off / HEX: MLC measured)"
    cores_per_node = max(1, c.n_cores // nodes)
    used = max(1, min(per_socket, math.ceil(math.ceil(threads / sockets) / cores_per_node)))
    ns = GNR_SNC3_IN_NODE_NS / used + GNR_SNC3_CROSS_NODE_NS * (1 - 1 / used)
    return ns, f"{ns:.0f} ns core-to-core hand-over (Xeon 6900P SNC{per_socket}, {used} node(s): MLC measured)"


def barrier_handoff_s(hw: HardwareProfile, threads: int) -> tuple[float, str]:
    """Seconds one thread adds to a thread-pool barrier (x T per barrier), and how."""
    fam = cpu_family(hw)
    c = hw.cpu
    if c.vendor == "amd" or fam.startswith("zen"):
        base = fam.split("-")[0] if fam else "zen4"
        per_complex = 4 if base == "zen2" else 8
        # a part whose profile gives its CCD count but not their size (the desktop Ryzens): the
        # socket's cores over its CCDs (a 12-core Ryzen 9 is two CCDs of 6)
        per_socket = c.n_cores // max(1, c.n_sockets)
        cores_per_ccd = c.cores_per_ccd or (per_socket // c.ccds_per_socket if c.ccds_per_socket else per_complex)
        complexes = max(1, c.n_cores // max(1, min(per_complex, cores_per_ccd)))
        if complexes <= 2:  # a desktop Ryzen's one or two CCDs
            cross = AMD_DESKTOP_CROSS_NS.get(base, AMD_CROSS_COMPLEX_NS.get(base, 100.0))
        else:
            cross = AMD_CROSS_COMPLEX_NS.get(base, 100.0)
        used = max(1, min(complexes, threads))
        ns = AMD_IN_COMPLEX_NS / used + cross * (1 - 1 / used)
        return ns * 1e-9, f"{ns:.0f} ns core-to-core hand-over ({used} core complexes)"
    gnr = _gnr_3die_handoff_ns(hw, threads)
    if gnr:
        return gnr[0] * 1e-9, gnr[1]
    kind = "intel-client" if fam in INTEL_CLIENT_FAMILIES or (c.segment or "") == "desktop" else "intel-server"
    ns = HANDOFF_NS[kind]
    return ns * 1e-9, f"{ns:.0f} ns core-to-core hand-over ({kind.replace('intel-', 'Intel ')})"


def oversubscription_s_per_barrier(tu: ThreadUse) -> float:
    return SCHED_SLICE_S * tu.oversubscribed / tu.logical if tu.oversubscribed else 0.0


ALL_CORE_FRACTION = 0.75
ALL_CORE_FRACTION_XEON = 0.55


def all_core_clock_hz(hw: HardwareProfile, ref_hz: float) -> tuple[float, str]:
    """Clock of every core under a sustained vector load: between base and single-core boost.
    The vendors' all-core turbo figures put it 75-90% of the way from base to max boost on
    desktops and AMD servers (Core i9-14900K P-cores 5.7 of 3.2-6.0 GHz; EPYC 9654 3.55 of
    2.4-3.7 GHz and EPYC 9965 3.35 of 2.25-3.7 GHz all-core boost): 0.75 of the way is used. Intel's
    Xeons stop about halfway (Platinum 8480+ 3.0 of 2.0-3.8 GHz, 8592+ 2.9 of 1.9-3.9, Xeon 6980P
    3.2 of 2.0-3.9 all-core turbo): ALL_CORE_FRACTION_XEON. Without a boost figure the base clock
    stands (probed profiles measure it)."""
    c = hw.cpu
    base = c.base_clock_hz or ref_hz
    if c.max_clock_hz and c.max_clock_hz > base:
        frac = ALL_CORE_FRACTION_XEON if "xeon" in c.model.lower() else ALL_CORE_FRACTION
        f = base + frac * (c.max_clock_hz - base)
        return f, (f"{f / 1e9:.2f} GHz all-core (base {base / 1e9:.2f} + {frac:.2f} x "
                   f"(boost {c.max_clock_hz / 1e9:.2f} - base))")
    return base, f"{base / 1e9:.2f} GHz"


# Batch-1 dot-product throughput of the backend's CPU kernels by ISA class, relative to the
# anchor (mainline llama.cpp on an AVX-512 VNNI server core, docs/design.md §4):
#  mainline ggml-cpu (ggml/src/ggml-cpu/arch/x86/quants.c): the K-quant and Q8_0 vec_dot loops
#   are 256-bit AVX2 code on every x86 part; mul_sum_us8_pairs_float uses VPDPBUSD when
#   __AVX512VNNI__&&__AVX512VL__ or __AVXVNNI__ is defined, else the two-instruction
#   VPMADDUBSW + VPMADDWD pair -> AVX2 without VNNI ~0.75 of the anchor;
#  ik_llama.cpp (ggml/src/iqk/iqk_mul_mat.cpp): HAVE_FANCY_SIMD (AVX512F+VNNI+VL+BW+DQ) runs
#   512-bit kernels (x1.3 the AVX2 path on full-width AVX-512 cores, x1.1 on Zen 4's
#   double-pumped 256-bit units), AVX2 elsewhere with its own repacked layouts;
#  KTransformers (kt-kernel / llamafile sgemm): AVX-512 kernels on AVX-512 parts, AVX2 kernels
#   otherwise (kt-kernel README: AMX for Intel, AVX512/AVX2 backends); its K-quant decode
#   kernels are ik's iqk_mul_mat, whose 512-bit path needs VNNI (third_party/llamafile/
#   iqk_mul_mat_x86.inc:1071: HAVE_FANCY_SIMD = AVX512F+VNNI+VL+BW+DQ), so an AVX-512 part
#   without VNNI (Skylake-SP) runs the AVX2 kernels.
# Each backend's table is its record's isa_dot_scale (planner/runtimes/); a runner without one
# (the executor) has mainline's.
# Zen 4 executes a 512-bit op as two 256-bit halves (cpus.toml families.zen4): the 512-bit
# kernels gain only their lower instruction count
HALF_WIDTH_AVX512_FAMILIES = {"zen4", "zen5-mobile", "rocket-lake"}


def dot_isa_class(hw: HardwareProfile) -> str:
    isa = set(hw.cpu.isa)
    if "amx_tile" in isa:
        return "amx"
    if "avx512_vnni" in isa:
        return "avx512_vnni"
    if "avx512f" in isa:
        return "avx512f"
    if "avx_vnni" in isa:
        return "avx_vnni"
    if "avx2" in isa:
        return "avx2"
    return "neon" if isa else "avx2"


# The dequantise-and-dot loops are integer SIMD (shuffles, madds, adds) bound by the vector ALU
# ports, not the FMA units: Intel's big cores since Skylake issue vector ALU work on 3 ports (p0,
# p1, p5; Intel Optimization Reference Manual, Golden Cove / Skylake port maps), AMD Zen 2 to Zen 5
# on 4 pipes (FP0-FP3; AMD Software Optimization Guides for families 17h/19h/1Ah). The dot anchor
# was measured on a Sapphire Rapids core (3 ports): AMD cores get 4/3 of it per clock.
VECTOR_ALU_PIPES = {"zen2": 4, "zen3": 4, "zen4": 4, "zen5": 4, "zen5-mobile": 4}
ANCHOR_VECTOR_ALU_PIPES = 3


def isa_dot_scale(hw: HardwareProfile, backend: str) -> tuple[float, str]:
    cls = dot_isa_class(hw)
    table = backends.behaviour(backend).isa_dot_scale
    x = table.get(cls, 1.0)
    if x > 1.0 and cpu_family(hw) in HALF_WIDTH_AVX512_FAMILIES:
        x = 1.0 + (x - 1.0) / 3
    pipes = VECTOR_ALU_PIPES.get(cpu_family(hw), ANCHOR_VECTOR_ALU_PIPES)
    if pipes != ANCHOR_VECTOR_ALU_PIPES:
        return x * pipes / ANCHOR_VECTOR_ALU_PIPES, (f"{backend} {cls} kernels x{x:.2f} x {pipes}/"
                                                     f"{ANCHOR_VECTOR_ALU_PIPES} vector ALU pipes")
    return x, f"{backend} {cls} kernels x{x:.2f}"


# The quantized prefill GEMMs (cost/kernels.py: mainline 'repack' / 'sgemm' (not 'amx': tiles), ik_llama.cpp
# 'iqk_repack' and the 8-column passes of its own 'iqk' kernels) unpack blocks and multiply int8
# values: integer SIMD bound by the vector ALU ports (VECTOR_ALU_PIPES), not by the FP32 FMA units
# their prior is written against (backends.toml gemm_peak_x: a multiple of the FP32 peak of the
# Ryzen-7950X anchor). Bits of integer SIMD a core issues per cycle with the kernels' vector width:
#   Intel big cores: a 512-bit op runs on port 0 (ports 0 and 1 fused) and, on parts with a second
#     FMA unit, port 5; a 256-bit op on ports 0, 1 and 5 (Intel 64 and IA-32 Architectures
#     Optimization Reference Manual, Skylake Server microarchitecture: "port 0 and port 1 fuse"
#     for 512-bit uops) -> 512 x FMA units, or 3 x 256;
#   AMD Zen 2-4 and Zen 5 mobile: 4 pipes of 256 bits, a 512-bit op taking two (Zen 4 "double
#     pumped": cpus.toml families.zen4); Zen 5 desktop/server: 4 pipes of 512 bits (AMD Software
#     Optimization Guide for family 1Ah); Zen 1: 4 x 128.
# The FP32 peak per cycle is 2 FMA units x lanes x 2 (cpus.toml fp32_flop_per_cycle). On the anchor
# (Zen 4: 1024 bits, 32 FLOP) the two agree; a Xeon with two 512-bit FMA units has twice the anchor's
# FP32 peak per cycle but the same 1024 bits of integer SIMD, so its quantized GEMM gets half of
# what gemm_peak_x x its FP32 peak says. The published same-kernel prefill rows agree per core and
# clock (docs/cost-model.md, Quantized prefill GEMM width).
INT_SIMD_ANCHOR_BITS = 1024
INT_SIMD_ANCHOR_FP32_PER_CYCLE = 32
_AMD_PIPE_BITS = {"zen1": 128, "zen2": 256, "zen3": 256, "zen4": 256, "zen5-mobile": 256, "zen5": 512}
_INTEL_BIG_CORES = {"haswell", "skylake-sp", "cascade-lake", "icelake-sp", "sapphire-rapids", "granite-rapids",
                    "comet-lake", "skylake-client", "rocket-lake", "alder-lake"}


def fp32_flop_per_cycle(hw: HardwareProfile) -> float:
    """FP32 FLOP per cycle behind the profile's per-core FLOP figure (the one the prefill peak is
    built from): that figure over the base clock, else 2 FMA units x 16 (AVX-512) or 8 lanes x 2."""
    c = hw.cpu
    if c.core_flop_per_s is not None and c.base_clock_hz:
        return c.core_flop_per_s.value / c.base_clock_hz
    return 64.0 if "avx512f" in c.isa else 32.0


def intel_fma_units(hw: HardwareProfile) -> int:
    """512-bit FMA units of an Intel AVX-512 core: from the catalog's FP32 peak per cycle (64: two,
    32: one, Xeon Gold 5000 / Silver); a measured figure (`moeplan probe`'s numpy matmul) is an
    achieved rate, not the peak, and the server parts' two is taken."""
    f = hw.cpu.core_flop_per_s
    if f is not None and f.source == "measured":
        return 2
    return 2 if fp32_flop_per_cycle(hw) >= 48 else 1


def int_simd_bits_per_cycle(hw: HardwareProfile, kernel_bits: int) -> int | None:
    """Integer SIMD bits a core issues per cycle running kernels of `kernel_bits`-bit vectors
    (256 or 512); None for a core this table does not describe (Apple, E-cores, unknown)."""
    fam = cpu_family(hw)
    if fam in _AMD_PIPE_BITS:
        return 4 * min(kernel_bits, _AMD_PIPE_BITS[fam])
    if fam in _INTEL_BIG_CORES:
        if kernel_bits >= 512 and "avx512f" in hw.cpu.isa:
            return 512 * intel_fma_units(hw)
        return 3 * 256
    return None


def quant_gemm_kernel_bits(hw: HardwareProfile, backend: str) -> int:
    """Vector width of the backend's quantized GEMM kernels on this CPU: ik_llama.cpp's 512-bit
    kernels need HAVE_FANCY_SIMD (AVX512F+VNNI+VL+BW+DQ, iqk_config.h), else its AVX2 ones;
    mainline's repack/tinyBLAS kernels have __AVX512F__ variants."""
    isa = set(hw.cpu.isa)
    if backends.behaviour(backend).cpu_kernels == "iqk":
        return 512 if {"avx512f", "avx512_vnni"} <= isa else 256
    return 512 if "avx512f" in isa else 256


def quant_gemm_x(hw: HardwareProfile, backend: str) -> tuple[float, str]:
    """The quantized GEMM paths' rate on this core relative to gemm_peak_x x its FP32 peak: its
    integer SIMD bits per cycle against the anchor's, over its FP32 FLOP per cycle against the
    anchor's (1.0 where the table has no figure)."""
    bits = int_simd_bits_per_cycle(hw, quant_gemm_kernel_bits(hw, backend))
    fpc = fp32_flop_per_cycle(hw)
    if not bits or fpc <= 0:
        return 1.0, "integer SIMD width unknown: the FP32 peak's multiple"
    x = (bits / INT_SIMD_ANCHOR_BITS) / (fpc / INT_SIMD_ANCHOR_FP32_PER_CYCLE)
    return x, (f"{bits} integer SIMD bits/cycle vs the anchor's {INT_SIMD_ANCHOR_BITS}, "
               f"{fpc:g} FP32 FLOP/cycle vs {INT_SIMD_ANCHOR_FP32_PER_CYCLE}")


def pages_nodes(host_bytes: float, node_mem_bytes: list[int]) -> int:
    """Nodes the pages of a file read without a NUMA policy end up on: the loader's node first,
    the next nodes by distance once it is full (the page allocator's zonelist fallback; llama.cpp
    maps with MAP_POPULATE from one thread when no --numa is given, llama-mmap.cpp)."""
    if not node_mem_bytes or host_bytes <= 0:
        return 1
    per = max(1, min(node_mem_bytes))
    return max(1, min(len(node_mem_bytes), math.ceil(host_bytes / (per * 0.9))))


# ---- KTransformers (kt-kernel) ----------------------------------------------------------------
#
# NUMA. kt-kernel runs one CPUInfer worker pool per --kt-threadpool-count (SGLang's KTConfig
# .threadpool_count): kt-kernel/python/experts_base.py _get_cpu_infer maps pool i to NUMA node i
# (subpool_numa_map = range(count)) and gives it cpuinfer // count threads. Each pool's threads
# are pinned to cores of its node and bind their memory to it (cpu_backend/worker_pool.cpp
# InNumaPool::InNumaPool: hwloc_set_thread_cpubind on the node's cores; worker_thread ->
# set_memory_to_numa, HWLOC_MEMBIND_BIND | STRICT). The MoE operator is split, not copied, over
# the pools: operators/moe-tp.hpp TP_MOE_Common gives every pool intermediate_size / count of
# every expert (tp_config.intermediate_size /= tp_count), each part allocated and loaded by its
# node's threads, and sums the pools' partial outputs (merge_results). So with N pools every
# expert read is node-local and the experts take their bytes once, 1/N on each node.
# One pool (count 1) is pool 0 on node 0: threads on node 0's cores, pages on node 0.
# KTransformers 0.2/0.3 differ: built with USE_NUMA=1 the llamafile MoE copies every expert to
# every configured node (csrc/ktransformers_ext/operators/llamafile/moe.cpp: numa_alloc_onnode +
# memcpy per node) and binds thread i to node i * nodes / threads (cpu_backend/backend.cpp);
# built without it there is one pool of unpinned threads reading the copy the loading thread
# first-touched (numa 'none' in the cost model).
KT_POOL_POLICIES = ("bind", "distribute")  # a plan's numa under which KT runs one pool per node


def kt_pool_count(numa: str, n_nodes_used: int) -> int:
    """Worker pools KTransformers runs for a plan: one per NUMA node the plan uses under a
    'distribute' (per-node pools) or a multi-node 'bind', else one."""
    return n_nodes_used if numa in KT_POOL_POLICIES and n_nodes_used > 1 else 1


# Prefill. KTransformers >= 0.4 (kt-kernel + SGLang): a prompt of at least
# --kt-gpu-prefill-token-threshold tokens is prefilled on the GPU layer by layer, each MoE layer's
# CPU experts written by the CPU pools into a pinned buffer and copied to a shared full-GPU layer
# first (kt-kernel operators/amx/bf16-moe.hpp write_weight_scale_to_buffer -> every TP part's
# write_weights_to_buffer, a memcpy from its node; SGLang kt_ep_wrapper.py KTConfig
# .gpu_prefill_token_threshold, default 0 = off; "> threshold: layerwise GPU prefill ... requires
# one MoE layer extra VRAM", kt-kernel README). Published recipes set it from 400 to 4096
# (doc/en/kt-kernel/AVX2-Tutorial.md 400, Kimi-K2-Thinking-Native.md 400, MiniMax-M3 500,
# GLM-5 1024, Qwen3-Coder-Next 2048, kt-kernel README 4096; `kt run` defaults to 4096,
# kt-kernel/python/cli/commands/run.py resolve(..., 4096)). Prefill is chunked by SGLang's
# --chunked-prefill-size (the plan's n_batch, estimate.kt_chunk_tokens), so every chunk uploads
# every CPU layer's experts once: a longer chunk uploads them fewer times per prompt. `kt run`
# passes 4096 given its parameters (run.py resolve(..., 4096)); asked for them in a terminal it
# proposes 32768 and a threshold of 500 (kt-kernel/python/cli/utils/run_interactive.py:617-618);
# published recipes set 2048 to 65536. Shorter prompts than the threshold run the CPU experts
# on the CPU pools. KTransformers 0.2/0.3 prefill on the CPU.
# The planner sets the threshold to the prompt length where the layer-wise path gets faster
# (cost/prefill_path.py kt_prefill_crossover_tokens); a plan carries it among its options
# (Placement.options.kt_gpu_prefill_token_threshold).


def default_batch(backend: str) -> int:
    """The logical batch a plan runs without -b: llama.cpp's 2048; for KTransformers SGLang's
    --chunked-prefill-size as `kt run` passes it (the backend record's default_batch)."""
    return backends.behaviour(backend).default_batch


def kt_layerwise_prefill(backend: str, n_prompt: int, has_cpu_experts_and_gpu: bool, threshold: int) -> bool:
    """KTransformers' layer-wise GPU prefill runs for prompts of at least `threshold` tokens
    (0 = never)."""
    return (backends.behaviour(backend).layerwise_gpu_prefill and has_cpu_experts_and_gpu and threshold > 0
            and n_prompt >= threshold)


# ---- KTransformers worker threads (--cpu_infer / --kt-cpuinfer) -------------------------------
#
# Who is busy while a MoE layer runs on the CPU. KTransformers 0.2/0.3 (local_chat):
# CPUInfer(cpu_infer) builds Backend(cpu_infer - 1) (csrc/ktransformers_ext/cpu_backend/
# cpuinfer.h:39): cpu_infer - 2 worker threads plus the TaskQueue thread, which runs each job as
# thread 0 (task_queue.cpp processTasks -> backend.cpp do_work_stealing_job -> process_tasks(0)).
# Two more threads spin meanwhile: the CUDA host-callback thread runs sync_with_cuda_stream's
# host function, a busy loop on sync_flag (cpuinfer.h:85-91, task_queue.cpp:40-43, no pause),
# and the Python thread waits in torch.cuda.synchronize after graph.replay()
# (ktransformers/util/cuda_graph_runner.py:78-79), which spins under cudaDeviceScheduleAuto
# (one context <= logical CPUs). So cpu_infer + 1 threads want a CPU, cpu_infer - 1 of them
# compute. kt-kernel (>= 0.4) has --kt-cpuinfer workers pinned one per core of their node
# (cpu_backend/worker_pool.cpp: hwloc_set_thread_cpubind on core i) and the serving process's
# thread in the CUDA sync: again threads + 1.
KT_HELPER_THREADS = 1  # busy threads beyond --cpu_infer

# The workers never sleep between jobs: a WAITING worker spins and only sleeps after 50 ms
# without work (0.2: backend.cpp worker_thread:141-149; kt-kernel: worker_pool.cpp
# InNumaPool::worker_thread, cv.wait after 50 ms). A job ends when every thread has left
# WORKING (backend.cpp do_work_stealing_job:81-85): a task can be stolen from a descheduled
# thread's range, but the thread itself must run once more to mark itself WAITING, and a task it
# was running when preempted cannot be stolen. With more busy threads than logical CPUs some CPU
# holds two spinners that never block, so the scheduler switches between them only when a slice
# ends; every job then waits for the descheduled thread's turn:
#   CFS (Linux < 6.6): slices share sysctl_sched_latency = 6 ms x (1 + log2(min(ncpus, 8))) =
#     24 ms among the k runnable tasks of a CPU (kernel/sched/fair.c sched_slice), so a
#     descheduled thread waits up to 24 ms x (1 - 1/k);
#   EEVDF (Linux >= 6.6): each runs sysctl_sched_base_slice = 0.75 ms x 4 = 3 ms, a descheduled
#     thread waits up to (k - 1) x 3 ms.
# A job starts at a random point of the running thread's slice; the last of o descheduled
# threads comes back after o / (o + 1) of the longest wait (the largest of o uniform waits).
# The cost is a floor: a spinner preempted in the middle of its task holds the job a whole
# slice (KTransformers #726: --cpu_infer 30 on a 10-core CPU decoded below 0.1 tok/s).
CFS_LATENCY_S = 24e-3
EEVDF_SLICE_S = 3e-3
# decode jobs per MoE layer: MOE::forward_one runs gate+up and then down as two
# do_work_stealing_job calls (csrc/ktransformers_ext/operators/llamafile/moe.cpp:172, :217)
KT_DECODE_JOBS_PER_LAYER = 2


def kernel_is_eevdf(kernel: str) -> bool:
    """Linux 6.6 replaced CFS's slices with EEVDF ('' or unparsable: CFS, the kernel of the
    distributions KTransformers' guides use, Ubuntu 22.04 / CentOS 7)."""
    parts = kernel.strip().split(".")
    try:
        major, minor = int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return False
    return (major, minor) >= (6, 6)


@dataclass(frozen=True)
class KtThreads:
    """KTransformers' CPU threads on the nodes they run on (see above)."""

    busy: int  # threads that want a CPU while a MoE layer runs: --cpu_infer + helpers
    oversubscribed: int  # busy threads beyond the logical CPUs (whole machine or one pool's node)
    dot_threads: float  # core-equivalents the compute threads get
    wait_s_per_job: float  # scheduler wait added to every job when oversubscribed
    note: str


def kt_threads(threads: int, cores: int, logical: int, pools: int = 1, node_logical: int = 0,
               kernel: str = "") -> KtThreads:
    """KTransformers' --cpu_infer threads on `cores` physical / `logical` CPUs; with `pools`
    per-node pools each node (node_logical CPUs) runs ceil(threads / pools) of them (0.2
    USE_NUMA=1: thread i on node i x nodes / threads, backend.cpp:92; kt-kernel: cpuinfer //
    count per pool, experts_base.py _get_cpu_infer)."""
    t = max(1, threads)
    cores, logical = max(1, cores), max(cores, logical)
    busy = t + KT_HELPER_THREADS
    over = max(0, busy - logical)
    if pools > 1 and node_logical:
        over = max(over, pools * max(0, math.ceil(t / pools) - node_logical))
    # the helpers spin on cores too: the scheduler spreads busy threads over idle cores first,
    # SMT siblings next; a core's second thread adds ~0.1 of a core (as thread_use)
    tu = thread_use(busy, cores, logical)
    dot = min(float(t), (tu.on_cores + SMT_SIBLING_X * tu.smt_threads) * t / busy)
    wait, how = 0.0, ""
    if over:
        k = math.ceil(busy / logical) if busy > logical else 2  # runnable per loaded CPU
        if kernel_is_eevdf(kernel):
            longest, sched = EEVDF_SLICE_S * (k - 1), f"EEVDF {EEVDF_SLICE_S * 1e3:.0f} ms slices"
        else:
            longest, sched = CFS_LATENCY_S * (1 - 1 / k), f"CFS {CFS_LATENCY_S * 1e3:.0f} ms latency"
        o = min(over, logical)
        wait = longest * o / (o + 1)
        how = (f"{busy} spinning threads (--cpu_infer {t} + {KT_HELPER_THREADS}) on {logical} logical CPUs: "
               f"{over} descheduled, each job waits {wait * 1e3:.1f} ms for them ({sched})")
    return KtThreads(busy, over, dot, wait, how)
