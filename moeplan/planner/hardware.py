"""HardwareProfile: the machine as the planner sees it, every figure with its provenance.

Written by `moeplan probe` (measured), `moeplan hardware` (spec sheets and numbers) or a
bundled preset; read by every `--hw`. The JSON schema is versioned (SCHEMA_VERSION) and
documented in docs/hardware-profile.md.

Sources, weakest to strongest for the planner: 'spec-sheet' < 'user' < 'sysfs'/'nvml' <
'measured' < 'calibrated'. A spec-sheet bandwidth carries the fraction of it that is
achievable in practice (`achievable`), so the planner never treats a peak as a measurement.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from moeplan.planner.serde import from_jsonable, to_jsonable

SCHEMA_VERSION = 1
SOURCES = ("spec-sheet", "user", "sysfs", "nvml", "procfs", "measured", "calibrated")
_RANK = {s: i for i, s in enumerate(SOURCES)}


@dataclass(frozen=True)
class Figure:
    """A number with where it came from.

    value: in the unit its field name says (bytes_per_s, bytes, flop_per_s, ...).
    achievable: the fraction of `value` a real workload reaches (spec-sheet peaks only;
        1.0 for measured figures). `effective` = value * achievable.
    n_samples / spread: for measurements; spread is (max - min) / median of the samples.
    """

    value: float
    source: str = "spec-sheet"
    method: str = ""
    n_samples: int = 0
    spread: float = 0.0
    achievable: float = 1.0

    @property
    def effective(self) -> float:
        return self.value * self.achievable

    def stronger_than(self, other: "Figure | None") -> bool:
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


@dataclass(frozen=True)
class NumaNode:
    id: int
    cpus: tuple[int, ...] = ()
    n_physical_cores: int = 0
    mem_total_bytes: int = 0
    mem_free_bytes: int | None = None
    distances: tuple[int, ...] = ()
    dram_read_bytes_per_s: Figure | None = None  # all cores of the node reading local memory
    memory_only: bool = False


@dataclass(frozen=True)
class Cpu:
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


@dataclass(frozen=True)
class Storage:
    path: str = ""
    device: str = ""
    seq_read_bytes_per_s: Figure | None = None
    rand4k_read_bytes_per_s: Figure | None = None
    rotational: bool | None = None


@dataclass(frozen=True)
class System:
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


@dataclass(frozen=True)
class Load:
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

    # ---- convenience views ---------------------------------------------------------------
    @property
    def gpu_vram_bytes(self) -> int:
        return sum(g.vram_bytes for g in self.gpus)

    @property
    def ram_bytes(self) -> int:
        s = self.system
        if s.cgroup_limit_bytes:
            return min(s.ram_total_bytes, s.cgroup_limit_bytes)
        return s.ram_total_bytes

    @property
    def dram_read_bytes_per_s(self) -> float:
        """Sum of per-node local read bandwidth (effective)."""
        return sum(n.dram_read_bytes_per_s.effective for n in self.numa_nodes
                   if n.dram_read_bytes_per_s is not None)

    def calibration_for(self, backend: str) -> Calibration | None:
        for c in self.calibration:
            if c.backend == backend:
                return c
        return None

    def with_(self, **changes) -> "HardwareProfile":
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return to_jsonable(self)

    @classmethod
    def from_dict(cls, data: dict) -> "HardwareProfile":
        return from_jsonable(cls, data)
