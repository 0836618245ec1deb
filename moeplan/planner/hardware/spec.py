"""Spec-only hardware profiles: a machine described by its parts and numbers (pure).

`moeplan hardware` resolves part names in the catalog (profiles/catalog.py) and calls
`build_spec_profile`, which turns spec-sheet peaks into Figures that carry the achievable
fraction (moeplan/profiles/parts/efficiency.toml), so the planner never mistakes a peak for a
measurement. Numbers given on the command line win over the catalog and are marked 'user'.

Formulas (all one direction, decimal bytes):
  DRAM read peak per node  = channels_per_node x MT/s x 1e6 x 8 B
  PCIe peak                = lanes x per-lane rate (gen 4: 16 GT/s x 128/130 / 8 = 1.97 GB/s)
  CPU FP32 peak per core   = base clock x FLOP/cycle of the family (2 FMA x SIMD lanes x 2)
  Ryzen fabric cap         = CCDs x 32 B x FCLK (one Infinity Fabric link per CCD)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from moeplan.errors import InputError
from moeplan.planner.hardware.profile import (
    OS_FAMILIES,
    Cpu,
    Figure,
    Gpu,
    HardwareProfile,
    NumaNode,
    Storage,
    System,
    format_cpulist,
    pcie_bytes_per_s,
    profile_warnings,
)
from moeplan.planner.hardware.vendors import default_unified_budget_bytes, gtt_setting, unified_notes
from moeplan.planner.serde import to_jsonable
from moeplan.units import GIB


@dataclass(frozen=True)
class GpuPart:
    """A GPU model of the parts tables: VRAM, bandwidth, PCIe link and throughput."""

    name: str
    vram_bytes: int
    mem_bw_bytes_per_s: float
    pcie_gen: int
    pcie_width: int
    fp16_flop_per_s: float
    compute_capability: str = ""
    aliases: tuple[str, ...] = ()
    # optional catalog facts (parts.toml): where the figures come from, laptop part
    source: str = ""
    mobile: bool = False
    vendor: str = "nvidia"  # nvidia / amd
    # an APU's iGPU: no memory of its own (vram_bytes 0), the host's DRAM at the CPU's bandwidth
    unified: bool = False
    gfx_target: str = ""  # AMD LLVM target (gfx1100, gfx1151, gfx942)
    host_cpu: str = ""  # an iGPU's APU (the CPU it ships in), the stand-in when no CPU is named


# GpuPart.source of a catalog part given with more VRAM than it has (profiles/catalog.find_gpu)
VRAM_AS_NAMED = "VRAM as named"


@dataclass(frozen=True)
class CpuPart:
    """A CPU model of the parts tables: per-socket cores and threads, clocks and memory."""

    name: str
    vendor: str  # amd / intel
    family: str
    cores: int  # per socket
    threads: int  # per socket
    base_hz: float
    l3_bytes: int  # per socket
    channels: int  # per socket
    ram_type: str
    ram_speed_mts: int
    max_sockets: int
    segment: str  # desktop / server
    isa: tuple[str, ...]
    fp32_flop_per_cycle: int
    fabric_read_bytes_per_s: float | None = None  # per socket, Ryzen desktop only
    aliases: tuple[str, ...] = ()
    # optional topology and provenance from the catalog (None / empty = not stated)
    boost_hz: float | None = None
    ccds: int | None = None  # core dies per socket (AMD CCDs)
    cores_per_ccd: int | None = None
    ram_speeds_mts: tuple[tuple[str, int], ...] = ()  # (ddr4 / ddr5 / mrdimm / lpddr5x, fastest rated MT/s)
    snc_default: int = 1  # NUMA nodes per socket in the firmware's default mode (Xeon 6900P: SNC3)
    # desktop sockets: (CPU PCIe generation, CPU lanes wired to the graphics slots, chipset slots'
    # generation); () = the slots are not the limit (servers, workstations, laptops)
    slot_pcie: tuple[int, int, int] | tuple[()] = ()
    mobile: bool = False
    source: str = ""

    def rated_mts(self, ram_type: str) -> int | None:
        """The part's fastest rated MT/s for a memory type (None where it has no rating)."""
        return dict(self.ram_speeds_mts).get(ram_type) or (self.ram_speed_mts if ram_type == self.ram_type else None)


@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions and priors from efficiency.toml (see the comments there)."""

    dram_read: dict[str, float]
    fabric_read: float
    pcie_pinned: float
    gpu_mem: float
    gpu_fp16: float
    cpu_sgemm: float
    core_read_prior_bytes_per_s: dict[str, float]
    remote_distance: dict[str, int]
    disks: dict[str, tuple[float, float]] = field(default_factory=dict)  # class -> (bytes/s, achievable)
    # priors for numbers-only profiles, derived from the parts catalog (catalog.efficiency):
    # segment -> median base clock of the catalog's x86 parts of that segment
    cpu_clock_prior_hz: dict[str, float] = field(default_factory=dict)
    # VRAM classes of the catalog's GPUs: (vram_gib, median, min, max bandwidth in bytes/s, n parts)
    gpu_bw_by_vram: tuple[tuple[float, float, float, float, int], ...] = ()


@dataclass(frozen=True)
class SpecRequest:
    """What `moeplan hardware` was asked for. Per-socket and per-GPU as spec sheets give them:
    `cores`, `threads`, `channels` per socket (`sockets` multiplies), `gpu_vram_bytes` per GPU
    (`gpu_count` multiplies). `dram_bw_bytes_per_s` (per node) and `h2d_bytes_per_s` are taken
    as achievable rates; the other numbers are peaks like the catalog's."""

    name: str = ""
    gpu: str | None = None
    gpu_count: int | None = None
    gpu_vram_bytes: int | None = None
    gpu_bw_bytes_per_s: float | None = None
    gpu_fp16_flop_per_s: float | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    h2d_bytes_per_s: float | None = None
    gpu_node: int = 0
    cpu: str | None = None
    sockets: int | None = None
    cores: int | None = None
    threads: int | None = None
    channels: int | None = None
    ram_type: str | None = None
    ram_speed_mts: int | None = None
    ram_bytes: int | None = None
    numa_nodes: int | None = None
    dram_bw_bytes_per_s: float | None = None
    cpu_ghz: float | None = None
    isa: tuple[str, ...] | None = None
    disk: str | None = None
    disk_read_bytes_per_s: float | None = None
    os: str = "linux"  # linux | windows: the OS the machine will run (NUMA binding, WDDM, launch files)
    # mixed cards: the parts of GPUs 1, 2, ... when they differ from `gpu` (GPU 0), and
    # per-GPU links 'GENxWIDTH' ('' = the part's own or --pcie); empty for identical GPUs
    more_gpus: tuple[str, ...] = ()
    gpu_links: tuple[str, ...] = ()


def _src(overridden: bool) -> str:
    return "user" if overridden else "spec-sheet"


def spec_inputs_of(req: SpecRequest) -> dict:
    """The request as JSON, without the mixed-card fields when unused (so profiles of
    identical GPUs keep the inputs they had before those fields existed)."""
    d = to_jsonable(req)
    for k in ("more_gpus", "gpu_links"):
        if not d.get(k):
            d.pop(k, None)
    return d


def build_spec_profile(req: SpecRequest, gpu: GpuPart | None, cpu: CpuPart | None,
                       eff: Efficiency, more_gpus: tuple[GpuPart, ...] = ()) -> HardwareProfile:
    """The HardwareProfile of a machine described by parts and numbers. Raises InputError
    when something needed is missing (RAM size, CPU cores) or inconsistent."""
    if not req.ram_bytes or req.ram_bytes <= 0:
        raise InputError("--ram is required: the installed system memory",
                         "for example --ram 512G (binary) or --ram 96G")
    notes: list[str] = ["spec-sheet profile: peaks from the parts catalog (or your numbers) times the "
                        "achievable fractions in profiles/parts/efficiency.toml; measure the real "
                        "machine with `moeplan probe`"]
    if req.os not in OS_FAMILIES:
        raise InputError(f"unknown --os {req.os!r}", "use one of " + ", ".join(OS_FAMILIES))
    sockets = req.sockets or 1
    if cpu is not None and sockets > cpu.max_sockets:
        raise InputError(f"{cpu.name} runs in at most {cpu.max_sockets} socket(s), not {sockets}",
                         "drop --sockets or pick a server part")
    cores_ps = req.cores or (cpu.cores if cpu else None)
    if not cores_ps:
        raise InputError("the CPU is unknown: give --cpu NAME or --cores N (per socket)",
                         "for example --cpu 'EPYC 9355' or --cores 32 --channels 8 --ram-type ddr5 --ram-speed 5200")
    threads_ps = req.threads or (cpu.threads if cpu and not req.cores else None)
    if threads_ps is None:
        threads_ps = cores_ps
        notes.append("SMT unknown: logical CPUs counted as physical cores (pass --threads to change)")
    if threads_ps < cores_ps:
        raise InputError(f"--threads {threads_ps} is less than --cores {cores_ps}", "threads per socket >= cores per socket")
    n_nodes = req.numa_nodes or sockets * (cpu.snc_default if cpu else 1)
    if not req.numa_nodes and cpu is not None and cpu.snc_default > 1:
        notes.append(f"{cpu.name}: sub-NUMA clustering SNC{cpu.snc_default} (the firmware default) makes each "
                     f"socket {cpu.snc_default} NUMA nodes; pass --numa-nodes {sockets} for HEX / SNC off")
    n_cores = cores_ps * sockets
    if n_nodes < 1 or (n_cores % n_nodes and req.numa_nodes):
        raise InputError(f"{n_cores} cores do not split evenly into {n_nodes} NUMA nodes",
                         "--numa-nodes is the total over all sockets (2 sockets in NPS1/SNC off: 2)")
    if req.gpu_node < 0 or req.gpu_node >= n_nodes:
        raise InputError(f"--gpu-node {req.gpu_node} does not exist ({n_nodes} NUMA nodes)",
                         f"pick 0..{n_nodes - 1}")
    if cpu is not None and cpu.source.startswith("not in the catalog"):
        notes.append(f"CPU {cpu.name}: {cpu.source}")
    spec_cpu, core_notes = _spec_cpu(req, cpu, eff, sockets, cores_ps, threads_ps)
    notes += core_notes
    nodes, node_notes = _spec_nodes(req, cpu, eff, spec_cpu, n_nodes)
    notes += node_notes
    gpus, gpu_notes = _spec_gpus(req, gpu, eff, nodes, more_gpus, cpu)
    notes += gpu_notes
    storage = _spec_storage(req, eff)
    profile = HardwareProfile(
        name=req.name or _default_name(req, gpu, cpu, sockets, len(gpus)),
        origin="spec",
        gpus=gpus,
        cpu=spec_cpu,
        numa_nodes=nodes,
        system=System(ram_total_bytes=req.ram_bytes),
        storage=storage,
        notes=tuple(notes),
        spec_inputs=spec_inputs_of(req),
        os=req.os,
    )
    return replace(profile, warnings=profile_warnings(profile))


def _default_name(req: SpecRequest, gpu: GpuPart | None, cpu: CpuPart | None, sockets: int, n_gpus: int) -> str:
    parts = []
    if n_gpus:
        label = gpu.name.replace("NVIDIA ", "").replace("GeForce ", "") if gpu else \
            f"{(req.gpu_vram_bytes or 0) / GIB:.0f} GiB GPU"
        if req.more_gpus:
            names = [label] + [n.replace("NVIDIA ", "").replace("GeForce ", "") for n in req.more_gpus]
            counts: dict[str, int] = {}
            for n in names:
                counts[n] = counts.get(n, 0) + 1
            parts.append(" + ".join(f"{c}x {n}" if c > 1 else n for n, c in counts.items()))
        else:
            parts.append(f"{n_gpus}x {label}" if n_gpus > 1 else label)
    cname = cpu.name if cpu else f"{req.cores}-core CPU"
    parts.append(f"{sockets}x {cname}" if sockets > 1 else cname)
    parts.append(f"{(req.ram_bytes or 0) / GIB:.0f} GiB RAM")
    return " + ".join(parts)


X86_ISA_PRIOR = ("avx", "avx2", "fma", "f16c")


def _isa_flop_per_cycle(isa: tuple[str, ...]) -> tuple[int, str]:
    if "avx512f" in isa:
        return 64, "2 x 512-bit FMA assumed for AVX-512 (Zen 4 and client cores have half)"
    if "avx2" in isa or "fma" in isa:
        return 32, "2 x 256-bit FMA assumed for AVX2"
    return 16, "SSE-class: 2 x 128-bit FP ops assumed"


def _spec_cpu(req: SpecRequest, cpu: CpuPart | None, eff: Efficiency, sockets: int, cores_ps: int,
              threads_ps: int) -> tuple[Cpu, list[str]]:
    notes = []
    isa = tuple(req.isa) if req.isa is not None else (cpu.isa if cpu else ())
    segment = cpu.segment if cpu else ("desktop" if (req.channels or 0) <= 2 else "server")
    if cpu is None and req.isa is None:
        # a CPU given by numbers: `moeplan hardware` describes x86 machines (DDR channels,
        # PCIe GPUs); every x86-64 part of the last decade has AVX2/FMA (Haswell, Zen 1 on)
        isa = X86_ISA_PRIOR
        notes.append("ISA not given: x86 with AVX2/FMA assumed, no AVX-512/AMX (pass --isa to change)")
    elif not isa:
        notes.append("ISA unknown (pass --isa avx2,avx512f,...): kernel choice cannot be predicted")
    ghz_hz = req.cpu_ghz * 1e9 if req.cpu_ghz else (cpu.base_hz if cpu else None)
    clock_prior = False
    if ghz_hz is None and eff.cpu_clock_prior_hz.get(segment):
        ghz_hz, clock_prior = eff.cpu_clock_prior_hz[segment], True
        notes.append(f"CPU clock not given: {ghz_hz / 1e9:.2f} GHz assumed, the median base clock of the "
                     f"catalog's {segment} x86 parts (pass --cpu-ghz)")
    if cpu is not None and req.isa is None:
        fpc, why = cpu.fp32_flop_per_cycle, f"{cpu.family} family"
    else:
        fpc, why = _isa_flop_per_cycle(isa)
    core_flop = None
    if ghz_hz:
        core_flop = Figure(value=ghz_hz * fpc,
                           source="prior" if clock_prior else
                           _src(req.cpu_ghz is not None or cpu is None or req.isa is not None),
                           method=f"FP32 FMA peak per core: {ghz_hz / 1e9:.2f} GHz "
                                  f"{'(prior) ' if clock_prior else 'base '}x {fpc} FLOP/cycle ({why})",
                           achievable=eff.cpu_sgemm)
    else:
        notes.append("CPU clock unknown (pass --cpu-ghz): no CPU compute figure")
    prior = eff.core_read_prior_bytes_per_s.get(segment)
    core_read = None
    if prior:
        core_read = Figure(value=prior, source="prior",
                           method=f"typical {segment} core (Little's law, efficiency.toml); not on any spec "
                                  "sheet: measure with `moeplan probe`")
    channels_ps = req.channels or (cpu.channels if cpu else None)
    ram_type = (req.ram_type or (cpu.ram_type if cpu else "")).lower()
    # a part's rated speed for the memory type asked for (LGA1700 runs DDR4 at 3200, not its
    # DDR5 5600); a type the part has no rating for needs --ram-speed
    rated = cpu.rated_mts(ram_type) if cpu else None
    speed = req.ram_speed_mts or rated
    mem_user = any(x is not None for x in (req.channels, req.ram_type, req.ram_speed_mts)) or cpu is None
    if cpu is not None and cpu.segment == "server":
        # a server part's memory controller has its channels and runs each memory type at most
        # at its rated speed (no XMP/EXPO on server boards): more DIMMs share the channels
        if channels_ps and channels_ps > cpu.channels:
            notes.append(f"{cpu.name} has {cpu.channels} memory channels per socket: {channels_ps} DIMMs share "
                         f"them, the bandwidth counts {cpu.channels}")
            channels_ps = cpu.channels
        # (DDR4 only: DDR5 platforms were re-rated after launch, EPYC 9005 from 6000 to 6400
        # MT/s, so a stated DDR5 speed is kept)
        if speed and rated and speed > rated and ram_type == "ddr4":
            notes.append(f"{cpu.name} runs {ram_type.upper()} at most at {rated} MT/s: {speed} MT/s DIMMs run at {rated}")
            speed = rated
    return Cpu(
        model=cpu.name if cpu else (req.cpu or "CPU from numbers"),
        vendor=cpu.vendor if cpu else "",
        n_sockets=sockets,
        n_cores=cores_ps * sockets,
        n_threads=threads_ps * sockets,
        isa=isa,
        l3_bytes=cpu.l3_bytes * sockets if cpu and cpu.l3_bytes else None,
        base_clock_hz=ghz_hz,
        max_clock_hz=cpu.boost_hz if cpu and req.cpu_ghz is None else None,
        core_read_bytes_per_s=core_read,
        core_flop_per_s=core_flop,
        memory_channels=channels_ps * sockets if channels_ps else None,
        ram_type=ram_type,
        ram_speed_mts=speed,
        source=_src(cpu is None or req.cores is not None),
        memory_source=("user" if mem_user else "spec-sheet") if (channels_ps or ram_type or speed) else "",
        family=cpu.family if cpu else "",
        segment=segment,
        ccds_per_socket=cpu.ccds if cpu else None,
        cores_per_ccd=cpu.cores_per_ccd if cpu else None,
    ), notes


def _node_cores(k: int, n_nodes: int, n_cores: int) -> tuple[int, int]:
    """(first core, cores) of node k: an even split, the first nodes one core more when the
    cores do not divide (a 128-core Xeon 6980P in SNC3: 43 + 43 + 42)."""
    per, extra = divmod(n_cores, n_nodes)
    return k * per + min(k, extra), per + (1 if k < extra else 0)


def _node_cpus(k: int, n_nodes: int, n_cores: int, n_threads: int) -> tuple[int, ...]:
    """Logical CPUs of node k numbered as Linux usually does on x86: first thread of every
    core, node by node, then the SMT siblings in the same order."""
    first, count = _node_cores(k, n_nodes, n_cores)
    smt = max(1, n_threads // n_cores)
    return tuple(s * n_cores + first + i for s in range(smt) for i in range(count))


def _dram_figure(req: SpecRequest, cpu: CpuPart | None, eff: Efficiency, c: Cpu, n_nodes: int) -> tuple[Figure | None, str]:
    if req.dram_bw_bytes_per_s:
        return Figure(value=req.dram_bw_bytes_per_s, source="user", method="--dram-bw per NUMA node, used as given"), ""
    if not c.memory_channels or not c.ram_speed_mts:
        return None, "DRAM bandwidth unknown: pass --channels and --ram-speed (or --dram-bw)"
    ch = c.memory_channels / n_nodes
    peak = ch * c.ram_speed_mts * 1e6 * 8
    ach = eff.dram_read.get(c.ram_type or "unknown", eff.dram_read.get("unknown", 0.75))
    method = (f"{ch:g} channels x {c.ram_type.upper() or 'DDR'}-{c.ram_speed_mts} x 8 B = {peak / 1e9:.1f} GB/s "
              f"peak per node; achievable {ach:.2f} (STREAM-like read efficiency of {c.ram_type or 'unknown'} "
              "memory)")
    if cpu is not None and cpu.fabric_read_bytes_per_s:
        cap = cpu.fabric_read_bytes_per_s * c.n_sockets / n_nodes
        if cap * eff.fabric_read < peak * ach:
            ach = cap * eff.fabric_read / peak
            method += (f"; capped by the Infinity Fabric: {cap / 1e9:.1f} GB/s x {eff.fabric_read:.2f} -> "
                       f"achievable {ach:.2f}")
    src = "spec-sheet" if c.memory_source == "spec-sheet" else "user"
    return Figure(value=peak, source=src, method=method, achievable=ach), ""


SUB_NUMA_DISTANCE = 12


def _spec_nodes(req: SpecRequest, cpu: CpuPart | None, eff: Efficiency, c: Cpu,
                n_nodes: int) -> tuple[tuple[NumaNode, ...], list[str]]:
    fig, note = _dram_figure(req, cpu, eff, c, n_nodes)
    remote = eff.remote_distance.get(c.vendor or "other", eff.remote_distance.get("other", 20))
    mem = (req.ram_bytes or 0) // n_nodes
    per_socket = max(1, n_nodes // max(1, c.n_sockets))

    def distance(a: int, b: int) -> int:
        # sub-NUMA nodes of one socket: the SLIT distance Linux reports for SNC / NPS (12)
        return 10 if a == b else SUB_NUMA_DISTANCE if a // per_socket == b // per_socket else remote

    nodes = tuple(
        NumaNode(id=k, cpus=_node_cpus(k, n_nodes, c.n_cores, c.n_threads),
                 n_physical_cores=_node_cores(k, n_nodes, c.n_cores)[1],
                 mem_total_bytes=mem, distances=tuple(distance(k, j) for j in range(n_nodes)),
                 dram_read_bytes_per_s=fig, source="spec-sheet")
        for k in range(n_nodes))
    notes = [note] if note else []
    if n_nodes > 1:
        notes.append("CPU numbers and SLIT distances follow the usual Linux/firmware layout; the real "
                     "machine may number them differently")
    return nodes, notes


def slot_links(platform: tuple[int, int, int], cards: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
    """(gen, width, where) of each card's link on a desktop socket: the CPU's graphics lanes
    (platform[1]) split evenly into x16 or x8 slots as far as they go (one card x16, two x8/x8:
    Intel ark's "1x16+4, 2x8+4", AM5's x16 or x8/x8), further cards in x4 chipset slots. A link
    runs at the lower generation and width of the card (cards: (gen, width), 0 = unknown) and the
    slot; a card of unknown generation keeps an unknown link (gen 0): the slot bounds it, no more."""
    gen, lanes, chipset = platform
    width = 16 if len(cards) * 16 <= lanes else 8
    on_cpu = min(len(cards), lanes // width)
    out = []
    for i, (g, w) in enumerate(cards):
        slot_gen, slot_width, where = (gen, width, "CPU") if i < on_cpu else (chipset, 4, "chipset")
        out.append((min(g, slot_gen) if g else 0, min(w or slot_width, slot_width), where))
    return out


def _spec_gpus(req: SpecRequest, part: GpuPart | None, eff: Efficiency,
               nodes: tuple[NumaNode, ...], more: tuple[GpuPart, ...] = (),
               cpu: CpuPart | None = None) -> tuple[tuple[Gpu, ...], list[str]]:
    given = part is not None or req.gpu_vram_bytes is not None
    count = req.gpu_count if req.gpu_count is not None else (1 if given else 0)
    if more:
        if req.gpu_count is not None and req.gpu_count != 1 + len(more):
            raise InputError(f"--gpu-count {req.gpu_count} does not match the {1 + len(more)} GPUs named",
                             "give --gpu once per card (or NAME:COUNT) and drop --gpu-count")
        count = 1 + len(more)
    if count <= 0:
        return (), ["no GPU in this profile: CPU-only planning"]
    if not given:
        raise InputError("--gpu-count needs a GPU: give --gpu NAME or --gpu-vram SIZE",
                         "for example --gpu 'RTX 4090' or --gpu-vram 24G --gpu-bw 1008GB/s --pcie 4x16")
    links = tuple(req.gpu_links) + ("",) * (count - len(req.gpu_links))
    parts = (part,) + tuple(more) if more else (part,) * count
    notes: list[str] = []
    # a desktop socket's slot for each card without a link of its own, where it changes the
    # card's link (one card x16 at its own generation is not mentioned)
    slots: list[tuple[int, int, str] | None] = [None] * len(parts)
    if cpu is not None and cpu.slot_pcie and req.pcie_gen is None and not req.h2d_bytes_per_s:
        fit = slot_links(cpu.slot_pcie, [(pt.pcie_gen, pt.pcie_width) if pt else (0, 0) for pt in parts])
        slots = [sl if sl[0] and not links[i] and (pt is None or sl[:2] != (pt.pcie_gen, pt.pcie_width)) else None
                 for i, (sl, pt) in enumerate(zip(fit, parts))]
        told = [f"GPU {i} {sl[0]}x{sl[1]} ({sl[2]})" for i, sl in enumerate(slots) if sl and parts[i]]
        if told:
            notes.append(f"{cpu.name}'s desktop socket: {cpu.slot_pcie[1]} CPU lanes for the graphics slots (PCIe "
                         f"{cpu.slot_pcie[0]}.0), chipset slots x4 PCIe {cpu.slot_pcie[2]}.0: " + ", ".join(told)
                         + "; give a card's real slot as --gpu NAME@GENxWIDTH")
    gpus = []
    for i, pt in enumerate(parts):
        gen, width = (int(links[i].split("x")[0]), int(links[i].split("x")[1])) if links[i] else (None, None)
        one, n = _spec_gpu(req, pt, eff, nodes, i, gen, width, slots[i])
        gpus.append(one)
        notes += [x for x in n if x not in notes]
    return tuple(gpus), notes


def _spec_gpu(req: SpecRequest, part: GpuPart | None, eff: Efficiency, nodes: tuple[NumaNode, ...], index: int,
              link_gen: int | None, link_width: int | None,
              slot: tuple[int, int, str] | None = None) -> tuple[Gpu, list[str]]:
    """GPU `index` of a spec profile: its part's figures (or the numbers given), its link."""
    notes: list[str] = []
    if part is not None and part.unified:
        return _spec_igpu(req, part, eff, nodes, index)
    if part is not None and part.source.startswith(VRAM_AS_NAMED):
        notes.append(f"GPU {part.name}: {part.source}")
    vram = req.gpu_vram_bytes or part.vram_bytes  # type: ignore[union-attr]
    bw = _peak(req.gpu_bw_bytes_per_s, part.mem_bw_bytes_per_s if part else None, "--gpu-bw", part,
               "GPU memory bandwidth", "device-memory bandwidth peak; achievable: copy/STREAM-like kernels",
               eff.gpu_mem, notes, quiet=True)
    if bw is None:
        bw = gpu_bw_class_prior(vram, eff, notes)
    fp16 = _peak(req.gpu_fp16_flop_per_s, part.fp16_flop_per_s if part else None, "--gpu-tflops", part,
                 "GPU FP16 rate", "dense FP16 tensor peak (FP16 accumulate); achievable: large cuBLAS GEMMs",
                 eff.gpu_fp16, notes)
    gen = link_gen or req.pcie_gen or (slot[0] if slot else None) or (part.pcie_gen if part else None)
    width = link_width or req.pcie_width or (slot[1] if slot else None) or (part.pcie_width if part else None)
    h2d = None
    if req.h2d_bytes_per_s and not link_gen:
        h2d = Figure(value=req.h2d_bytes_per_s, source="user", method="--h2d, used as given")
    elif pcie_bytes_per_s(gen, width):
        where = f" ({slot[2]} slot of a desktop socket)" if slot else ""
        h2d = Figure(value=pcie_bytes_per_s(gen, width) or 0.0, source=_src(req.pcie_gen is not None or bool(link_gen)),
                     method=f"PCIe gen {gen} x{width} peak{where}, one direction; achievable: pinned cudaMemcpy",
                     achievable=eff.pcie_pinned)
    else:
        notes.append("PCIe link unknown (pass --pcie 4x16): no host-to-GPU figure")
    home = nodes[req.gpu_node]
    gpu = Gpu(index=index, name=part.name if part else "GPU from numbers", vram_bytes=vram,
              compute_capability=part.compute_capability if part else "", mem_bw_bytes_per_s=bw,
              fp16_flop_per_s=fp16, pcie_gen=gen, pcie_width=width, pcie_gen_max=gen,
              pcie_width_max=width, h2d_bytes_per_s=h2d,
              d2h_bytes_per_s=replace(h2d, method=h2d.method + " (assumed equal to host-to-GPU)")
              if h2d else None,
              numa_node=home.id, local_cpus=format_cpulist(home.cpus), source=_src(part is None),
              vendor="amd" if part is not None and part.vendor == "amd" else "",
              gfx_target=part.gfx_target if part else "")
    return gpu, notes


def _spec_igpu(req: SpecRequest, part: GpuPart, eff: Efficiency, nodes: tuple[NumaNode, ...],
               index: int) -> tuple[Gpu, list[str]]:
    """An APU's iGPU: its budget is what the driver lets it map of the RAM (--gpu-vram, else the
    RAM less what the host keeps: vendors.default_unified_budget_bytes), its bandwidth the DRAM's
    (the CPU's figure when the CPU is named, else the part's), and host buffers are read where
    they lie: the host-to-GPU rate is the DRAM's, there is no PCIe copy."""
    if index > 0:
        raise InputError(f"{part.name} is the iGPU of an APU: a machine has one",
                         "drop --gpu-count, or name a card beside it with a second --gpu")
    ram = req.ram_bytes or 0
    budget = req.gpu_vram_bytes or default_unified_budget_bytes(ram)
    if budget > ram:
        raise InputError(f"--gpu-vram {budget / GIB:.0f} GiB is more than the {ram / GIB:.0f} GiB of RAM the "
                         f"{part.name} shares", "an iGPU maps part of the RAM: --gpu-vram at most --ram")
    notes = []
    if not req.gpu_vram_bytes:
        notes.append(f"{part.name}: unified memory; the GPU budget is taken as {budget / GIB:.0f} GiB of the "
                     f"{ram / GIB:.0f} GiB RAM (the host keeps {(ram - budget) / GIB:.0f} GiB), which needs the GTT "
                     f"raised from Linux's default of half the RAM: {gtt_setting(budget)}; pass --gpu-vram for "
                     "the budget your machine has (amdgpu's mem_info_gtt_total plus the BIOS carve-out)")
    dram = nodes[0].dram_read_bytes_per_s if nodes else None
    if req.gpu_bw_bytes_per_s:
        bw = Figure(value=req.gpu_bw_bytes_per_s, source="user", method="--gpu-bw: the DRAM's bandwidth",
                    achievable=eff.gpu_mem)
    elif dram is not None and dram.source != "user":
        bw = Figure(value=dram.value, source=dram.source, achievable=eff.gpu_mem,
                    method=f"unified memory: the DRAM's peak ({dram.method.split(';')[0]}); achievable: a GPU "
                           "copy kernel")
    else:
        bw = Figure(value=part.mem_bw_bytes_per_s, source="spec-sheet", achievable=eff.gpu_mem,
                    method=f"{part.name}: the fastest memory its APU takes; achievable: a GPU copy kernel")
    h2d = replace(bw, method="no PCIe link: the GPU reads host buffers in the same DRAM, at its rate")
    fp16 = _peak(req.gpu_fp16_flop_per_s, part.fp16_flop_per_s, "--gpu-tflops", part, "GPU FP16 rate",
                 "dense FP16 matrix peak (CUs x FLOP/clock x boost clock)", eff.gpu_fp16, notes)
    home = nodes[req.gpu_node]
    gpu = Gpu(index=index, name=part.name, vram_bytes=budget, mem_bw_bytes_per_s=bw, fp16_flop_per_s=fp16,
              h2d_bytes_per_s=h2d, d2h_bytes_per_s=h2d, numa_node=home.id, local_cpus=format_cpulist(home.cpus),
              source="spec-sheet", vendor=part.vendor, unified_memory=True, host_shared_bytes=budget,
              gfx_target=part.gfx_target)
    return gpu, notes + unified_notes(gpu, ram)[:1]


def gpu_bw_class_prior(vram_bytes: int, eff: Efficiency, notes: list[str]) -> Figure | None:
    """A GPU given without bandwidth: the median bandwidth of the catalog's GPUs with the same
    VRAM (the nearest VRAM class when none has it), source 'prior', its spread = (max - min) /
    median of that class so that the estimate's range widens with it."""
    if not eff.gpu_bw_by_vram or vram_bytes <= 0:
        notes.append("GPU memory bandwidth unknown (pass --gpu-bw)")
        return None
    gib = vram_bytes / GIB
    cls = min(eff.gpu_bw_by_vram, key=lambda c: (abs(math.log(c[0] / gib)), -c[4]))
    vram_c, med, lo, hi, n = cls
    notes.append(f"GPU memory bandwidth not given: {med / 1e9:.0f} GB/s assumed, the median of the catalog's "
                 f"{n} GPU(s) with {vram_c:g} GiB (they range {lo / 1e9:.0f}-{hi / 1e9:.0f} GB/s; pass --gpu-bw)")
    return Figure(value=med, source="prior", spread=(hi - lo) / med if med else 0.0,
                  method=f"VRAM-class prior: median device-memory bandwidth of {n} catalog GPU(s) with "
                         f"{vram_c:g} GiB ({lo / 1e9:.0f}-{hi / 1e9:.0f} GB/s)", achievable=eff.gpu_mem)


def _peak(given: float | None, catalog_value: float | None, option: str, part: GpuPart | None, label: str,
          what: str, achievable: float, notes: list[str], quiet: bool = False) -> Figure | None:
    """A GPU peak from the command line (`user`) or the catalog (`spec-sheet`), or a note."""
    if given:
        return Figure(value=given, source="user", method=f"{option}: {what}", achievable=achievable)
    if part is not None and catalog_value:
        return Figure(value=catalog_value, source="spec-sheet", method=f"{part.name} spec sheet: {what}",
                      achievable=achievable)
    if not quiet:
        notes.append(f"{label} unknown (pass {option})")
    return None


def _spec_storage(req: SpecRequest, eff: Efficiency) -> tuple[Storage, ...]:
    if req.disk_read_bytes_per_s:
        return (Storage(device=req.disk or "disk", seq_read_bytes_per_s=Figure(
            value=req.disk_read_bytes_per_s, source="user", method="--disk-read, used as given")),)
    if req.disk:
        if req.disk not in eff.disks:
            raise InputError(f"unknown disk class {req.disk!r}", "use one of " + ", ".join(sorted(eff.disks))
                             + ", or --disk-read 7GB/s")
        rate, ach = eff.disks[req.disk]
        return (Storage(device=req.disk, rotational=req.disk == "hdd", seq_read_bytes_per_s=Figure(
            value=rate, source="spec-sheet", method=f"typical {req.disk} sequential read (efficiency.toml); "
            "achievable: 4 MiB queue-depth-1 O_DIRECT reads", achievable=ach)),)
    return ()
