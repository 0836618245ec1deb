"""HardwareProfile: the machine as the planner sees it, every figure with its provenance.

Written by `moeplan probe` (measured), `moeplan hardware` (spec sheets and numbers) or a
bundled preset; read by every `--hw`. The JSON schema is versioned (SCHEMA_VERSION) and
documented in docs/hardware-profile.md.

Sources, weakest to strongest for the planner: 'prior' < 'spec-sheet' < 'user' <
'sysfs'/'nvml'/'procfs' < 'measured' < 'calibrated'. 'prior' is a documented typical value of a
part class (not of this part, not of this machine: e.g. the per-core DRAM read rate of a server
core), used only where no spec sheet gives the figure. A spec-sheet bandwidth carries the
fraction of it that is achievable in practice (`achievable`), so the planner never treats a
peak as a measurement.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from moeplan.errors import InputError
from moeplan.planner.serde import from_jsonable, to_jsonable

SCHEMA_VERSION = 1
OS_FAMILIES = ("linux", "windows")
SOURCES = ("prior", "spec-sheet", "user", "sysfs", "nvml", "procfs", "measured", "calibrated")
_RANK = {s: i for i, s in enumerate(SOURCES)}

# PCIe rate per lane and direction after line coding, bytes/s (gen 1-2: 8b/10b; gen 3-5:
# 128b/130b; gen 6: FLIT mode, 242 of 256 bytes carry data)
# RAM the OS and the rest of the system keep beside the model (the planner's host-RAM margin)
OS_RESERVE_BYTES = 2 * 1024**3
PCIE_LANE_BYTES_PER_S = {1: 0.25e9, 2: 0.5e9, 3: 8e9 * 128 / 130 / 8, 4: 16e9 * 128 / 130 / 8,
                         5: 32e9 * 128 / 130 / 8, 6: 64e9 * 242 / 256 / 8}


def format_cpulist(cpus: tuple[int, ...] | list[int]) -> str:
    """(0, 1, 2, 3, 8) -> '0-3,8' (the form sysfs and numactl print)."""
    cs = sorted(set(cpus))
    if not cs:
        return ""
    runs: list[str] = []
    start = prev = cs[0]
    for c in cs[1:] + [None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        runs.append(f"{start}-{prev}" if prev > start else f"{start}")
        if c is not None:
            start = prev = c
    return ",".join(runs)


def pcie_bytes_per_s(gen: int | None, width: int | None) -> float | None:
    """Theoretical one-direction PCIe rate (gen 4 x16: 31.5 GB/s), None when unknown."""
    if not gen or not width or gen not in PCIE_LANE_BYTES_PER_S:
        return None
    return PCIE_LANE_BYTES_PER_S[gen] * width


@dataclass(frozen=True)
class Figure:
    """A number with where it came from.

    value: in the unit its field name says (bytes_per_s, bytes, flop_per_s, ...).
    achievable: the fraction of `value` a real workload reaches (spec-sheet peaks only;
        1.0 for measured figures). `effective` = value * achievable.
    n_samples / spread: for measurements; spread is (max - min) / median of the samples.
    median: the median sample rate of a measurement (value is its best, STREAM's rule, or
        the overall rate of a storage read; the method says which). None when not measured.
    """

    value: float
    source: str = "spec-sheet"
    method: str = ""
    n_samples: int = 0
    spread: float = 0.0
    achievable: float = 1.0
    median: float | None = None

    @property
    def effective(self) -> float:
        return self.value * self.achievable

    def stronger_than(self, other: Figure | None) -> bool:
        return other is None or _RANK.get(self.source, 0) >= _RANK.get(other.source, 0)


def better(a: Figure | None, b: Figure | None) -> Figure | None:
    """The figure with the stronger source (measured beats spec-sheet, calibrated beats both)."""
    if a is None:
        return b
    if b is None:
        return a
    return a if a.stronger_than(b) else b


@dataclass(frozen=True)
class Gpu:
    """One GPU: its index, name, VRAM and identifiers."""

    index: int
    name: str
    vram_bytes: int
    vram_free_bytes: int | None = None
    uuid: str = ""
    pci_bus_id: str = ""
    compute_capability: str = ""
    mem_bw_bytes_per_s: Figure | None = None  # theoretical or measured device-memory bandwidth
    fp16_flop_per_s: Figure | None = None  # dense tensor-core FP16/BF16 rate
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_max: int | None = None
    h2d_bytes_per_s: Figure | None = None  # host-to-device copy, pinned memory
    h2d_pageable_bytes_per_s: Figure | None = None
    d2h_bytes_per_s: Figure | None = None
    numa_node: int | None = None  # None: unknown or not NUMA (sysfs numa_node = -1)
    local_cpus: str = ""  # sysfs local_cpulist
    source: str = "nvml"
    # link read while host-to-device copies were in flight (GPUs drop to gen 1 when idle)
    pcie_gen_loaded: int | None = None
    pcie_width_loaded: int | None = None
    # nvidia-smi topo -m level to every GPU by index: X, PIX, PXB, PHB, NODE, SYS, NV#
    topology: tuple[str, ...] = ()
    # Windows driver model (NVML nvmlDeviceGetDriverModel): 'wddm', 'tcc', 'mcdm'; '' = unknown
    # or not Windows. A WDDM GPU loses part of its VRAM to the OS (planner/hardware/windows.py)
    driver_model: str = ""
    # 'amd', or '' for NVIDIA (and profiles written before this field: NVML's GPUs); picks
    # llama.cpp's device names (CUDA0, ROCm0, Vulkan0: planner/hardware/vendors.py)
    vendor: str = field(default="", metadata={"omit_default": True})
    # the iGPU of an APU (Radeon 8060S / 890M / 780M): its "VRAM" is the host's DRAM. vram_bytes
    # is then what the driver lets the GPU map (BIOS carve-out + GTT), mem_bw the DRAM's, no
    # PCIe between them; host_shared_bytes is the part of vram_bytes that comes out of the RAM
    # the profile counts as the host's (system.ram_total_bytes): all of it on a spec profile
    # (the installed RAM), the GTT on a probed one (the carve-out is not in MemTotal)
    unified_memory: bool = field(default=False, metadata={"omit_default": True})
    host_shared_bytes: int = field(default=0, metadata={"omit_default": True})
    # AMD LLVM target (gfx1100, gfx1151, gfx942): what a ROCm build must be compiled for
    gfx_target: str = field(default="", metadata={"omit_default": True})


@dataclass(frozen=True)
class NumaNode:
    """One NUMA node: its CPUs, cores, memory and distances."""

    id: int
    cpus: tuple[int, ...] = ()
    n_physical_cores: int = 0
    mem_total_bytes: int = 0
    mem_free_bytes: int | None = None
    distances: tuple[int, ...] = ()
    dram_read_bytes_per_s: Figure | None = None  # all cores of the node reading local memory
    memory_only: bool = False
    source: str = "sysfs"  # 'spec-sheet': cpus numbered as Linux usually does, sizes from specs


@dataclass(frozen=True)
class Cpu:
    """The machine's CPUs: model, sockets, cores, threads and instruction sets."""

    model: str = ""
    vendor: str = ""
    n_sockets: int = 1
    n_cores: int = 1  # physical cores, all sockets
    n_threads: int = 1  # logical CPUs
    isa: tuple[str, ...] = ()  # avx2, avx512f, avx512_bf16, avx512_vnni, avx_vnni, amx_*
    l3_bytes: int | None = None
    base_clock_hz: float | None = None
    max_clock_hz: float | None = None
    # per-core bandwidth a single thread can pull from DRAM (b_core in the cost model)
    core_read_bytes_per_s: Figure | None = None
    # dense matmul rate of one core on dequantized weights (F_cpu / cores)
    core_flop_per_s: Figure | None = None
    memory_channels: int | None = None  # populated channels, all sockets
    ram_type: str = ""  # ddr4 / ddr5 / lpddr5x ...
    ram_speed_mts: int | None = None
    source: str = "procfs"  # of model, counts and ISA: procfs / sysfs / py-cpuinfo / win32 / spec-sheet / user
    # of memory_channels / ram_type / ram_speed_mts: dmi / spec-sheet / user; "" = unknown
    memory_source: str = ""
    n_dimms: int | None = None  # populated DIMMs (DMI type 17), when readable
    # topology for the machine model (planner/cost/machine.py), from the parts catalog;
    # ''/None = unknown (a probed CPU not in the catalog: inferred from vendor and ISA)
    family: str = ""  # microarchitecture family as in profiles/parts/cpus.toml (zen4, sapphire-rapids, ...)
    segment: str = ""  # desktop / server
    ccds_per_socket: int | None = None  # AMD core dies per socket
    cores_per_ccd: int | None = None


@dataclass(frozen=True)
class Storage:
    """A disk: its device, read speeds and file system."""

    path: str = ""
    device: str = ""
    seq_read_bytes_per_s: Figure | None = None
    rand4k_read_bytes_per_s: Figure | None = None
    rotational: bool | None = None
    fs_type: str = ""
    device_model: str = ""
    file_bytes: int | None = None  # size of the file that was read


@dataclass(frozen=True)
class System:
    """The operating system, the machine's RAM and its memory settings."""

    os: str = ""
    kernel: str = ""
    is_vm: bool = False
    ram_total_bytes: int = 0
    ram_available_bytes: int | None = None
    cgroup_limit_bytes: int | None = None
    swap_total_bytes: int = 0
    hugepages_total: int = 0
    hugepage_bytes: int = 0
    thp: str = ""  # always / madvise / never
    numa_balancing: int | None = None
    numactl: bool = False
    libnuma: bool = False
    hostname: str = ""  # a cached probe is reused only on the machine that made it
    vm_vendor: str = ""  # hypervisor or DMI vendor when is_vm
    hugepages_free: int = 0
    cgroup_version: int | None = None


@dataclass(frozen=True)
class Load:
    """How busy the machine was before and after a probe."""

    loadavg_1m_before: float | None = None
    loadavg_1m_after: float | None = None
    cpu_busy_before: float | None = None  # fraction of all CPUs busy over a short window
    cpu_busy_after: float | None = None


@dataclass(frozen=True)
class Calibration:
    """Efficiency factors fitted by `moeplan calibrate` (see cost.py for their meaning).

    factors: fitted values by name; priors: the backend priors they started from (their
    ratio is this machine's correction, which cost.py also applies, with more uncertainty,
    to other backends); rel_err: 1-sigma relative uncertainty of each fitted factor;
    residuals: relative error (predicted / measured - 1) of each run after the fit.
    """

    factors: dict[str, float] = field(default_factory=dict)
    priors: dict[str, float] = field(default_factory=dict)
    rel_err: dict[str, float] = field(default_factory=dict)
    backend: str = "llama.cpp"
    runs: tuple[str, ...] = ()
    residuals: dict[str, float] = field(default_factory=dict)
    median_abs_error_before: float | None = None
    median_abs_error_after: float | None = None
    method: str = ""
    created: str = ""


@dataclass(frozen=True)
class HardwareProfile:
    """A machine as probed, specified or preset: its GPUs, CPU, memory, storage and measurements."""

    name: str = "this machine"
    origin: str = "probe"  # probe / spec / preset
    schema_version: int = SCHEMA_VERSION
    moeplan_version: str = ""
    created: str = ""  # ISO time, stamped by the probe (the planner never reads a clock)
    gpus: tuple[Gpu, ...] = ()
    cpu: Cpu = field(default_factory=Cpu)
    numa_nodes: tuple[NumaNode, ...] = ()
    # cross-node read bandwidth matrix [reader node][memory node], bytes/s (measured)
    numa_bw_matrix: tuple[tuple[float, ...], ...] = ()
    system: System = field(default_factory=System)
    storage: tuple[Storage, ...] = ()
    load: Load = field(default_factory=Load)
    calibration: tuple[Calibration, ...] = ()
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    # `moeplan hardware` inputs a spec-built profile (or preset) was made from, so it can be
    # rebuilt and checked; empty for probed profiles
    spec_inputs: dict[str, Any] = field(default_factory=dict)
    probe_mode: str = ""  # quick / full for probed profiles
    probe_wall_s: float | None = None
    # the operating system family the plans are for: 'linux' or 'windows' (OS_FAMILIES). It
    # decides the NUMA policies a plan can use, the VRAM the OS keeps and the launch files;
    # system.os is the OS's name in words. Profiles written before this field are Linux.
    os: str = "linux"

    # ---- convenience views ---------------------------------------------------------------
    @property
    def gpu_vram_bytes(self) -> int:
        return sum(g.vram_bytes for g in self.gpus)

    @property
    def ram_bytes(self) -> int:
        """Host RAM the plan may fill: installed (or the cgroup's limit), less what a unified-memory
        GPU maps of it (its budget is counted as VRAM, so the two never count the same bytes)."""
        s = self.system
        total = min(s.ram_total_bytes, s.cgroup_limit_bytes) if s.cgroup_limit_bytes else s.ram_total_bytes
        shared = sum(g.host_shared_bytes for g in self.gpus if g.unified_memory)
        return max(0, total - shared) if shared else total

    @property
    def unified_memory(self) -> bool:
        """Every GPU of the profile is an APU's iGPU reading the host's DRAM."""
        return bool(self.gpus) and all(g.unified_memory for g in self.gpus)

    @property
    def cpu_nodes(self) -> tuple[NumaNode, ...]:
        """NUMA nodes with CPUs (memory-only nodes, CXL or HBM without cores, excluded)."""
        return tuple(n for n in self.numa_nodes if n.cpus and not n.memory_only)

    @property
    def dram_read_bytes_per_s(self) -> float:
        """Sum of per-node local read bandwidth (effective)."""
        return sum(n.dram_read_bytes_per_s.effective for n in self.numa_nodes
                   if n.dram_read_bytes_per_s is not None)

    def with_gpu_use(self, vram_used_bytes: int) -> HardwareProfile:
        """The profile as a plan that fills `vram_used_bytes` of its GPUs sees the host's RAM: a
        unified-memory GPU's GTT is a limit, not a reservation (the ROCm Strix Halo guide: "GTT
        allocations are dynamic"), so the RAM it does not use stays the host's. Other profiles
        are returned unchanged."""
        if not any(g.unified_memory for g in self.gpus):
            return self
        left, gpus = max(0, vram_used_bytes), []
        for g in self.gpus:
            use = min(left, g.vram_bytes)
            left -= use
            if g.unified_memory:
                carve_out = g.vram_bytes - g.host_shared_bytes
                g = replace(g, host_shared_bytes=min(g.host_shared_bytes, max(0, use - carve_out)))
            gpus.append(g)
        return replace(self, gpus=tuple(gpus))

    def calibration_for(self, backend: str) -> Calibration | None:
        for c in self.calibration:
            if c.backend == backend:
                return c
        return None

    def with_(self, **changes) -> HardwareProfile:
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return to_jsonable(self)

    @classmethod
    def from_dict(cls, data: dict) -> HardwareProfile:
        return from_jsonable(cls, data)


# ---- what-ifs and checks (pure) -------------------------------------------------------------

def apply_overrides(profile: HardwareProfile, vram_bytes: int | None = None,
                    ram_bytes: int | None = None) -> HardwareProfile:
    """The same machine with a different VRAM and/or host RAM (`tune --vram/--ram` what-ifs).

    vram_bytes: the VRAM budget of all GPUs together, split evenly over them (one GPU: its
        size); what other processes used on a GPU (total - free) stays used, so each GPU's
        free = max(0, share - used).
    ram_bytes: the new total host RAM; NUMA nodes with memory get it in proportion to their
        old size (evenly when sizes are unknown), the used part stays used, and a cgroup
        limit is dropped (a what-if machine has none).
    Measured bandwidths stay: only sizes change.
    """
    notes = list(profile.notes)
    out = profile
    if vram_bytes is not None:
        if vram_bytes <= 0:
            raise InputError(f"--vram must be positive, got {vram_bytes}", "for example --vram 24G")
        if not profile.gpus:
            raise InputError(
                f"--vram needs a GPU, and hardware profile {profile.name!r} has none",
                "plan for a machine with a GPU: --hw desktop-4090-ddr5, or build one with "
                "`moeplan hardware --gpu 'RTX 4090' --out hw.json`")
        share = vram_bytes // len(profile.gpus)
        gpus = []
        for g in profile.gpus:
            free = None
            if g.vram_free_bytes is not None:
                free = max(0, share - (g.vram_bytes - g.vram_free_bytes))
            # an iGPU's budget beyond its carve-out comes out of the host's RAM
            shared = max(0, share - (g.vram_bytes - g.host_shared_bytes)) if g.unified_memory else 0
            gpus.append(replace(g, vram_bytes=share, vram_free_bytes=free, host_shared_bytes=shared))
        notes.append(f"what-if: VRAM set to {vram_bytes} bytes over {len(gpus)} GPU(s) (was "
                     f"{profile.gpu_vram_bytes})")
        out = replace(out, gpus=tuple(gpus))
    if ram_bytes is not None:
        if ram_bytes <= 0:
            raise InputError(f"--ram must be positive, got {ram_bytes}", "for example --ram 512G")
        old_ram = out.system.ram_total_bytes
        out = replace(out, system=_resized_system(out.system, ram_bytes),
                      numa_nodes=_resized_nodes(out.numa_nodes, ram_bytes))
        notes.append(f"what-if: RAM set to {ram_bytes} bytes (was {profile.system.ram_total_bytes})")
        if vram_bytes is None and old_ram and any(g.unified_memory for g in out.gpus):
            # an iGPU maps a share of the RAM (the GTT is sized from it): the same share of the new RAM
            resized = tuple(replace(g, host_shared_bytes=int(g.host_shared_bytes * ram_bytes / old_ram),
                                    vram_bytes=g.vram_bytes - g.host_shared_bytes
                                    + int(g.host_shared_bytes * ram_bytes / old_ram))
                            if g.unified_memory else g for g in out.gpus)
            out = replace(out, gpus=resized)
            notes.append("what-if: the iGPU's budget keeps its share of the RAM")
    return replace(out, notes=tuple(notes))


def _resized_system(s: System, ram_bytes: int) -> System:
    avail = None
    if s.ram_available_bytes is not None:
        avail = max(0, ram_bytes - (s.ram_total_bytes - s.ram_available_bytes))
    return replace(s, ram_total_bytes=ram_bytes, ram_available_bytes=avail, cgroup_limit_bytes=None)


def _resized_nodes(nodes: tuple[NumaNode, ...], ram_bytes: int) -> tuple[NumaNode, ...]:
    with_mem = [n for n in nodes if n.mem_total_bytes > 0] or list(nodes)
    old_total = sum(n.mem_total_bytes for n in with_mem)
    out = []
    for n in nodes:
        if n not in with_mem:
            out.append(n)
            continue
        share = n.mem_total_bytes / old_total if old_total else 1 / len(with_mem)
        total = int(ram_bytes * share)
        free = None if n.mem_free_bytes is None else max(0, total - (n.mem_total_bytes - n.mem_free_bytes))
        out.append(replace(n, mem_total_bytes=total, mem_free_bytes=free))
    return tuple(out)


BUSY_CPU_FRACTION = 0.25  # above this share of all CPUs busy, measured rates are suspect
NOISY_SPREAD = 0.25  # (max - min) / median of a measurement's samples


def profile_warnings(p: HardwareProfile) -> tuple[str, ...]:
    """What about this machine (or this profile) can make expert offload slow or a figure wrong."""
    w: list[str] = []
    multi = len(p.cpu_nodes) >= 2
    for g in p.gpus:
        w.extend(_link_warnings(g))
        if multi and g.numa_node is None and p.os == "windows":
            w.append(f"GPU {g.index}: NUMA node unknown (Windows has no sysfs and NVML's CPU affinity is "
                     "Linux-only); plans bind the first node: find the socket of the GPU's slot in the "
                     "board manual")
        elif multi and g.numa_node is None:
            w.append(f"GPU {g.index}: NUMA node unknown (sysfs numa_node = -1); bind llama.cpp to the "
                     "node the GPU hangs off, check `nvidia-smi topo -m`")
        w.extend(_free_ram_warnings(p, g))
    if multi and p.system.numa_balancing:
        w.append("kernel.numa_balancing is on: it migrates model pages between nodes while decoding "
                 "(llama.cpp warns about it too); `sudo sysctl kernel.numa_balancing=0`")
    c = p.cpu
    if c.n_threads > c.n_cores and p.origin == "probe":
        w.append(f"{c.n_threads} logical CPUs are {c.n_cores} physical cores: hyperthreads add no "
                 f"memory bandwidth, use --threads {c.n_cores} (or fewer), not {c.n_threads}")
    if p.system.is_vm:
        vendor = f" ({p.system.vm_vendor})" if p.system.vm_vendor else ""
        w.append(f"running in a VM{vendor}: vCPUs may be host hyperthreads and NUMA/PCIe layout may be "
                 "hidden, so measured figures describe the VM, not the host")
    busy = _busy(p)
    if busy:
        w.append(busy)
    s = p.system
    if s.cgroup_limit_bytes and s.cgroup_limit_bytes < s.ram_total_bytes:
        w.append(f"memory is limited to {s.cgroup_limit_bytes / 2**30:.1f} GiB by a cgroup (of "
                 f"{s.ram_total_bytes / 2**30:.1f} GiB installed); plans use the limit")
    for name, fig in _measured_figures(p):
        if fig.n_samples >= 3 and fig.spread > NOISY_SPREAD:
            w.append(f"{name}: samples spread {fig.spread:.0%}; the figure is noisy, rerun with --full "
                     "on an idle machine")
    return tuple(w)


def _link_warnings(g: Gpu) -> list[str]:
    w = []
    if g.pcie_width is not None and g.pcie_width_max and g.pcie_width < g.pcie_width_max:
        w.append(f"GPU {g.index}: PCIe link x{g.pcie_width} of x{g.pcie_width_max}: prefill copies of CPU "
                 "experts get slower; check the slot and riser")
    if g.pcie_gen_loaded is not None and g.pcie_gen_max and g.pcie_gen_loaded < g.pcie_gen_max:
        w.append(f"GPU {g.index}: PCIe link ran at gen {g.pcie_gen_loaded} under load (max gen "
                 f"{g.pcie_gen_max}): host-to-GPU copies are slower than they should be")
    elif (g.pcie_width_loaded is not None and g.pcie_width_max
          and g.pcie_width_loaded < g.pcie_width_max and g.pcie_width == g.pcie_width_max):
        w.append(f"GPU {g.index}: PCIe link ran at x{g.pcie_width_loaded} under load (max "
                 f"x{g.pcie_width_max})")
    return w


def _free_ram_warnings(p: HardwareProfile, g: Gpu) -> list[str]:
    if g.numa_node is None or len(p.numa_nodes) < 2:
        return []
    by_id = {n.id: n for n in p.numa_nodes}
    home = by_id.get(g.numa_node)
    if home is None or home.mem_free_bytes is None:
        return []
    others = [n for n in p.numa_nodes if n.id != g.numa_node and n.mem_free_bytes is not None]
    if not others:
        return []
    best = max(others, key=lambda n: n.mem_free_bytes or 0)
    best_free = best.mem_free_bytes or 0  # `others` holds only nodes with a figure
    if best_free > 2 * home.mem_free_bytes:
        return [f"GPU {g.index} hangs off node {home.id} ({home.mem_free_bytes / 2**30:.1f} GiB free) but "
                f"node {best.id} has {best_free / 2**30:.1f} GiB free: CPU experts bound to the "
                f"GPU's node may not fit; drop caches or free memory on node {home.id}"]
    return []


def _busy(p: HardwareProfile) -> str:
    ld = p.load
    busy = max([b for b in (ld.cpu_busy_before, ld.cpu_busy_after) if b is not None], default=None)
    loads = [x for x in (ld.loadavg_1m_before, ld.loadavg_1m_after) if x is not None]
    high_load = bool(loads) and max(loads) > 0.5 * max(1, p.cpu.n_threads)
    if (busy is not None and busy > BUSY_CPU_FRACTION) or high_load:
        parts = []
        if busy is not None:
            parts.append(f"{busy:.0%} of CPU time busy")
        if loads:
            parts.append(f"load average {max(loads):.2f} on {p.cpu.n_threads} CPUs")
        return ("the machine was busy while probing (" + ", ".join(parts) + "): measured rates may be "
                "low; rerun `moeplan probe` when it is idle")
    return ""


def _measured_figures(p: HardwareProfile) -> list[tuple[str, Figure]]:
    out: list[tuple[str, Figure]] = []
    for n in p.numa_nodes:
        if n.dram_read_bytes_per_s and n.dram_read_bytes_per_s.source == "measured":
            out.append((f"DRAM read node {n.id}", n.dram_read_bytes_per_s))
    for g in p.gpus:
        for label, fig in (("host-to-GPU", g.h2d_bytes_per_s), ("GPU-to-host", g.d2h_bytes_per_s)):
            if fig and fig.source == "measured":
                out.append((f"GPU {g.index} {label}", fig))
    for s in p.storage:
        if s.seq_read_bytes_per_s and s.seq_read_bytes_per_s.source == "measured":
            out.append((f"sequential read of {s.path}", s.seq_read_bytes_per_s))
    return out
