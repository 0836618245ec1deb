"""The machine as Windows reports it: NUMA nodes, cores and caches through the Win32 API
(ctypes, no new dependency), CPU model and ISA through py-cpuinfo, GPUs through NVML, and the
installed DIMMs through CIM (Win32_PhysicalMemory via PowerShell) when it answers.

Every Win32 call goes through `Kernel32Api` (a thin ctypes wrapper); `read_windows_machine`
takes any object with the same methods, so tests drive it with recorded answers shaped after
the documented structures. What Windows cannot tell is said in the notes, never guessed:
- a node's installed memory: Win32 gives only its available memory
  (GetNumaAvailableMemoryNodeEx), so mem_total_bytes stays 0 and mem_free_bytes is set;
- a GPU's NUMA node: there is no sysfs and NVML's CPU affinity is Linux-only;
- DIMMs: CIM needs PowerShell; channels come from the CPU's spec sheet as on Linux.

Structures (Microsoft Learn, winnt.h), x64 layout:
  GROUP_AFFINITY { KAFFINITY Mask (8); WORD Group; WORD Reserved[3] }  = 16 bytes
  SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX { DWORD Relationship; DWORD Size; union {...} }
    RelationProcessorCore (0) / RelationProcessorPackage (3): PROCESSOR_RELATIONSHIP
        { BYTE Flags (LTP_PC_SMT = 1); BYTE EfficiencyClass; BYTE Reserved[20]; WORD GroupCount;
          GROUP_AFFINITY GroupMask[GroupCount] }  -> Flags at 8, GroupCount at 30, masks at 32
    RelationNumaNode (1): NUMA_NODE_RELATIONSHIP { DWORD NodeNumber; BYTE Reserved[18];
        WORD GroupCount; GROUP_AFFINITY GroupMasks[] }  -> node at 8, GroupCount at 30, masks at 32
    RelationCache (2): CACHE_RELATIONSHIP { BYTE Level; BYTE Associativity; WORD LineSize;
        DWORD CacheSize; PROCESSOR_CACHE_TYPE Type; BYTE Reserved[18]; WORD GroupCount;
        GROUP_AFFINITY GroupMasks[] }  -> level at 8, size at 12, GroupCount at 38, masks at 40
  MEMORYSTATUSEX { DWORD dwLength; DWORD dwMemoryLoad; DWORDLONG ullTotalPhys; ullAvailPhys; ... }
Logical processors are numbered here as group * 64 + bit (a processor group holds 64).
"""
from __future__ import annotations

import ctypes
import json
import platform
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from moeplan.planner.hardware.profile import Cpu, Gpu, NumaNode, System
from moeplan.probes.cpu import ISA_FLAGS, Topology
from moeplan.probes.dmi import _MEMORY_TYPES, Dimm

RELATION_CORE, RELATION_NUMA, RELATION_CACHE, RELATION_PACKAGE, RELATION_ALL = 0, 1, 2, 3, 0xFFFF
LTP_PC_SMT = 1
GROUP_BITS = 64
# NVML nvmlDriverModel_t (nvml.h): NVML_DRIVER_WDDM, NVML_DRIVER_WDM (= TCC), NVML_DRIVER_MCDM
_DRIVER_MODELS = {0: "wddm", 1: "tcc", 2: "mcdm"}
CIM_COMMAND = ("Get-CimInstance Win32_PhysicalMemory | Select-Object Capacity,Speed,ConfiguredClockSpeed,"
               "SMBIOSMemoryType,DeviceLocator | ConvertTo-Json")


class GROUP_AFFINITY(ctypes.Structure):
    _fields_ = [("Mask", ctypes.c_uint64), ("Group", ctypes.c_uint16), ("Reserved", ctypes.c_uint16 * 3)]


class MEMORYSTATUSEX(ctypes.Structure):
    _fields_ = [("dwLength", ctypes.c_uint32), ("dwMemoryLoad", ctypes.c_uint32),
                ("ullTotalPhys", ctypes.c_uint64), ("ullAvailPhys", ctypes.c_uint64),
                ("ullTotalPageFile", ctypes.c_uint64), ("ullAvailPageFile", ctypes.c_uint64),
                ("ullTotalVirtual", ctypes.c_uint64), ("ullAvailVirtual", ctypes.c_uint64),
                ("ullAvailExtendedVirtual", ctypes.c_uint64)]


class Kernel32Api:
    """The kernel32 calls the probe makes (Windows only; tests use a fake with these methods)."""

    def __init__(self, lib: Any = None) -> None:
        self._k = lib if lib is not None else ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]

    def _ok(self, ret: int, what: str) -> None:
        if not ret:
            raise OSError(ctypes.get_last_error(), f"{what} failed")  # type: ignore[attr-defined]

    def highest_numa_node(self) -> int:
        n = ctypes.c_ulong(0)
        self._ok(self._k.GetNumaHighestNodeNumber(ctypes.byref(n)), "GetNumaHighestNodeNumber")
        return int(n.value)

    def node_processor_mask(self, node: int) -> tuple[int, int]:
        """(group, mask) of the node's processors (GetNumaNodeProcessorMaskEx: the node's
        primary group; nodes larger than a group are read from the processor records)."""
        ga = GROUP_AFFINITY()
        self._ok(self._k.GetNumaNodeProcessorMaskEx(ctypes.c_ushort(node), ctypes.byref(ga)),
                 "GetNumaNodeProcessorMaskEx")
        return int(ga.Group), int(ga.Mask)

    def node_available_bytes(self, node: int) -> int | None:
        v = ctypes.c_ulonglong(0)
        if not self._k.GetNumaAvailableMemoryNodeEx(ctypes.c_ushort(node), ctypes.byref(v)):
            return None
        return int(v.value)

    def logical_processor_information(self, relation: int = RELATION_ALL) -> bytes:
        """The raw SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX records (parse_processor_records)."""
        size = ctypes.c_ulong(0)
        self._k.GetLogicalProcessorInformationEx(relation, None, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        self._ok(self._k.GetLogicalProcessorInformationEx(relation, buf, ctypes.byref(size)),
                 "GetLogicalProcessorInformationEx")
        return buf.raw[: size.value]

    def memory_status(self) -> tuple[int, int]:
        """(total, available) physical memory in bytes (GlobalMemoryStatusEx)."""
        m = MEMORYSTATUSEX()
        m.dwLength = ctypes.sizeof(MEMORYSTATUSEX)
        self._ok(self._k.GlobalMemoryStatusEx(ctypes.byref(m)), "GlobalMemoryStatusEx")
        return int(m.ullTotalPhys), int(m.ullAvailPhys)

    def pin_current_thread(self, cpu: int) -> None:
        """Run the calling thread on logical processor `cpu` only (SetThreadGroupAffinity)."""
        ga = GROUP_AFFINITY(Mask=1 << (cpu % GROUP_BITS), Group=cpu // GROUP_BITS)
        self._ok(self._k.SetThreadGroupAffinity(self._k.GetCurrentThread(), ctypes.byref(ga), None),
                 "SetThreadGroupAffinity")


@dataclass(frozen=True)
class ProcessorRecord:
    relationship: int
    masks: tuple[tuple[int, int], ...]  # (group, mask)
    flags: int = 0  # processor records: LTP_PC_SMT
    node: int | None = None  # NUMA records
    cache_level: int | None = None  # cache records
    cache_bytes: int | None = None

    @property
    def cpus(self) -> tuple[int, ...]:
        return tuple(sorted(g * GROUP_BITS + b for g, m in self.masks for b in range(GROUP_BITS) if m >> b & 1))


def _masks(raw: bytes, count_off: int, first_off: int, end: int) -> tuple[tuple[int, int], ...]:
    count = struct.unpack_from("<H", raw, count_off)[0] or 1  # before Windows 20H2 the count was reserved (0)
    out = []
    for i in range(count):
        off = first_off + 16 * i
        if off + 16 > end:
            break
        mask, group = struct.unpack_from("<QH", raw, off)
        out.append((group, mask))
    return tuple(out)


def parse_processor_records(raw: bytes) -> list[ProcessorRecord]:
    """SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX records -> ProcessorRecord (layouts above)."""
    out: list[ProcessorRecord] = []
    off = 0
    while off + 8 <= len(raw):
        rel, size = struct.unpack_from("<II", raw, off)
        if size < 8 or off + size > len(raw):
            raise ValueError(f"malformed processor record at byte {off} (size {size})")
        rec = raw[off:off + size]
        if rel in (RELATION_CORE, RELATION_PACKAGE) and size >= 48:
            out.append(ProcessorRecord(rel, _masks(rec, 30, 32, size), flags=rec[8]))
        elif rel == RELATION_NUMA and size >= 48:
            out.append(ProcessorRecord(rel, _masks(rec, 30, 32, size), node=struct.unpack_from("<I", rec, 8)[0]))
        elif rel == RELATION_CACHE and size >= 56:
            out.append(ProcessorRecord(rel, _masks(rec, 38, 40, size), cache_level=rec[8],
                                       cache_bytes=struct.unpack_from("<I", rec, 12)[0]))
        off += size
    return out


def parse_cim_dimms(text: str | None) -> tuple[Dimm, ...]:
    """ConvertTo-Json of Win32_PhysicalMemory (one object, or a list) -> populated DIMMs.
    SMBIOSMemoryType uses SMBIOS type 17's memory type codes (26 = DDR4, 34 = DDR5)."""
    if not text or not text.strip():
        return ()
    data = json.loads(text)
    rows = data if isinstance(data, list) else [data]
    out = []
    for r in rows:
        if not isinstance(r, dict) or not r.get("Capacity"):
            continue
        speed, conf = r.get("Speed"), r.get("ConfiguredClockSpeed")
        out.append(Dimm(size_bytes=int(r["Capacity"]), ram_type=_MEMORY_TYPES.get(int(r.get("SMBIOSMemoryType") or 0), ""),
                        speed_mts=int(speed) if speed else None, configured_mts=int(conf) if conf else None))
    return tuple(out)


def read_cim_dimms(run: Callable[[list[str]], str] | None = None) -> tuple[tuple[Dimm, ...], str]:
    """(DIMMs, note): Win32_PhysicalMemory through PowerShell; () and why when it does not answer."""
    def default_run(argv: list[str]) -> str:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise OSError(r.returncode, (r.stderr or "").strip()[-200:])
        return r.stdout

    try:
        dimms = parse_cim_dimms((run or default_run)(["powershell", "-NoProfile", "-Command", CIM_COMMAND]))
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return (), f"installed memory not read: CIM (Win32_PhysicalMemory via PowerShell) did not answer ({exc})"
    return dimms, ("" if dimms else "installed memory not read: Win32_PhysicalMemory listed no DIMM")


def _isa(flags: list[str]) -> tuple[str, ...]:
    """py-cpuinfo flag names (avx512vnni, avx512_bf16 ...) -> moeplan's ISA names."""
    have = {f.replace("_", "").lower() for f in flags}
    return tuple(f for f in ISA_FLAGS if f.replace("_", "") in have)


def read_windows_cpu(api: Any, info: dict[str, Any]) -> tuple[Cpu, Topology, list[ProcessorRecord]]:
    """Cores, SMT, packages and L3 from the processor records; model, vendor, ISA and clock from
    py-cpuinfo's dict (brand_raw, vendor_id_raw, flags, hz_advertised)."""
    recs = parse_processor_records(api.logical_processor_information(RELATION_ALL))
    cores = sorted((r.cpus for r in recs if r.relationship == RELATION_CORE and r.cpus), key=lambda c: c[0])
    packages = [r.cpus for r in recs if r.relationship == RELATION_PACKAGE]
    package_of = {c: i for i, pk in enumerate(packages) for c in pk}
    l3 = {r.cpus: r.cache_bytes for r in recs if r.relationship == RELATION_CACHE and r.cache_level == 3}
    hz = info.get("hz_advertised")
    base = float(hz[0]) if isinstance(hz, (list, tuple)) and hz and hz[0] else None
    vendor = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(str(info.get("vendor_id_raw", "")),
                                                                 str(info.get("vendor_id_raw", "")).lower())
    n_threads = sum(len(c) for c in cores)
    cpu = Cpu(model=str(info.get("brand_raw", "")), vendor=vendor, n_sockets=max(1, len(packages)),
              n_cores=max(1, len(cores)), n_threads=max(1, n_threads), isa=_isa(list(info.get("flags", []))),
              l3_bytes=sum(v for v in l3.values() if v) or None, base_clock_hz=base, source="win32")
    topo = Topology(cores=tuple(cores), package_of={c: package_of.get(c, 0) for core in cores for c in core})
    return cpu, topo, recs


def read_windows_nodes(api: Any, topo: Topology, recs: list[ProcessorRecord]) -> tuple[tuple[NumaNode, ...], list[str]]:
    """One NumaNode per Windows node: processors from the NUMA records (every group of the
    node), else GetNumaNodeProcessorMaskEx; available memory from GetNumaAvailableMemoryNodeEx."""
    notes = ["NUMA node memory sizes: Windows reports only each node's available memory "
             "(GetNumaAvailableMemoryNodeEx); installed memory per node is unknown (0)"]
    by_node: dict[int, set[int]] = {}
    for r in recs:
        if r.relationship == RELATION_NUMA and r.node is not None:
            by_node.setdefault(r.node, set()).update(r.cpus)
    nodes = []
    for nid in range(api.highest_numa_node() + 1):
        cpus = by_node.get(nid)
        if cpus is None:
            group, mask = api.node_processor_mask(nid)
            cpus = {group * GROUP_BITS + b for b in range(GROUP_BITS) if mask >> b & 1}
        avail = api.node_available_bytes(nid)
        n_cores = sum(1 for core in topo.cores if any(c in cpus for c in core))
        nodes.append(NumaNode(id=nid, cpus=tuple(sorted(cpus)), n_physical_cores=n_cores, mem_total_bytes=0,
                              mem_free_bytes=avail, memory_only=not cpus and bool(avail), source="win32"))
    return tuple(nodes), notes


def read_driver_models(nvml: Any, n_gpus: int) -> dict[int, str]:
    """GPU index -> 'wddm' / 'tcc' / 'mcdm' (nvmlDeviceGetDriverModel, Windows only)."""
    out: dict[int, str] = {}
    try:
        nvml.nvmlInit()
    except Exception:  # NVML gone since read_gpus: the driver model stays unknown
        return out
    try:
        for i in range(n_gpus):
            try:
                cur = nvml.nvmlDeviceGetDriverModel(nvml.nvmlDeviceGetHandleByIndex(i))
                cur = cur[0] if isinstance(cur, (list, tuple)) else cur
                out[i] = _DRIVER_MODELS.get(int(cur), "")
            except Exception:  # NotSupported, FunctionNotFound: unknown
                continue
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    return out


def read_windows_system(api: Any, hostname: str = "", os_name: str = "", kernel: str = "") -> System:
    total, avail = api.memory_status()
    return System(os=os_name or f"{platform.system()} {platform.release()}", kernel=kernel or platform.version(),
                  hostname=hostname or platform.node(), ram_total_bytes=total, ram_available_bytes=avail)


def with_driver_models(gpus: tuple[Gpu, ...], models: dict[int, str]) -> tuple[Gpu, ...]:
    from dataclasses import replace

    return tuple(replace(g, driver_model=models.get(g.index, g.driver_model)) for g in gpus)
