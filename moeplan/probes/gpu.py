"""NVIDIA GPUs through NVML (nvidia-ml-py's `pynvml`), with NUMA placement from sysfs.

`nvml` is the pynvml module or any object with the same few calls (tests pass a fake). No
driver, no GPU, no permission: no GPUs and a note saying why, never an exception.
"""
from __future__ import annotations

from typing import Any

from moeplan.planner.hardware.profile import Figure, Gpu, pcie_bytes_per_s
from moeplan.probes.fsread import parse_cpulist, read_int, read_text

# nvmlGpuTopologyLevel_t -> the labels `nvidia-smi topo -m` prints
_TOPO = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_NVML_CLOCK_MEM = 2  # NVML_CLOCK_MEM
_GTS_TO_GEN = {"2.5": 1, "5.0": 2, "5": 2, "8.0": 3, "8": 3, "16.0": 4, "16": 4, "32.0": 5, "32": 5,
               "64.0": 6, "64": 6}


def nvml_error_kind(exc: BaseException) -> str:
    """'library-not-found', 'not-supported', 'function-not-found', 'no-permission',
    'driver-not-loaded', ... from an NVMLError subclass name (pynvml builds them dynamically)."""
    name = type(exc).__name__
    if name.startswith("NVMLError_"):
        raw = name[len("NVMLError_"):]
        out = "".join("-" + ch.lower() if ch.isupper() else ch for ch in raw).lstrip("-")
        return out
    if isinstance(exc, AttributeError):
        return "function-not-found"
    return "error"


def _is_nvml_error(nvml: Any, exc: BaseException) -> bool:
    base = getattr(nvml, "NVMLError", None)
    return (isinstance(base, type) and isinstance(exc, base)) or type(exc).__name__.startswith("NVMLError")


def _text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML '00000000:65:00.0' -> sysfs '0000:65:00.0'."""
    s = _text(nvml_bus_id).strip()
    if ":" not in s:
        return s.lower()
    dom, rest = s.split(":", 1)
    try:
        return f"{int(dom, 16):04x}:{rest.lower()}"
    except ValueError:
        return s.lower()


def read_pci_link(root: str, bus_id: str) -> dict[str, int | None]:
    """Link generation/width (current and max) from sysfs, for when NVML does not say."""
    d = f"/sys/bus/pci/devices/{bus_id}"

    def gen(name: str) -> int | None:
        t = (read_text(root, f"{d}/{name}") or "").split()
        return _GTS_TO_GEN.get(t[0]) if t else None

    return {"gen": gen("current_link_speed"), "gen_max": gen("max_link_speed"),
            "width": read_int(root, f"{d}/current_link_width"), "width_max": read_int(root, f"{d}/max_link_width")}


def read_gpu_numa(root: str, bus_id: str) -> tuple[int | None, str]:
    """(NUMA node or None when sysfs says -1 / nothing, local CPU list as sysfs prints it)."""
    d = f"/sys/bus/pci/devices/{bus_id}"
    node = read_int(root, f"{d}/numa_node")
    cpus = (read_text(root, f"{d}/local_cpulist") or "").strip()
    return (node if node is not None and node >= 0 else None), cpus


class _Session:
    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.missing: set[str] = set()

    def call(self, fn: str, *args: Any) -> Any:
        """nvml.fn(*args), or None when the driver or GPU does not support it."""
        f = getattr(self.nvml, fn, None)
        if f is None:
            self.missing.add(fn)
            return None
        try:
            return f(*args)
        except Exception as exc:  # NVMLError_* (NotSupported, FunctionNotFound, NoPermission, ...)
            if not _is_nvml_error(self.nvml, exc):
                raise
            self.missing.add(fn)
            return None


def read_gpus(nvml: Any = None, root: str = "/") -> tuple[tuple[Gpu, ...], list[str]]:
    """All NVIDIA GPUs and notes. `nvml=None` imports pynvml (nvidia-ml-py)."""
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[no-redef]
        except ImportError:
            return (), ["no GPU figures: nvidia-ml-py (pynvml) is not installed"]
    try:
        nvml.nvmlInit()
    except Exception as exc:
        if not _is_nvml_error(nvml, exc):
            raise
        return (), [_init_note(nvml_error_kind(exc), exc)]
    s = _Session(nvml)
    try:
        count = s.call("nvmlDeviceGetCount") or 0
        handles = [s.call("nvmlDeviceGetHandleByIndex", i) for i in range(count)]
        gpus = tuple(_read_one(s, i, h, handles, root) for i, h in enumerate(handles) if h is not None)
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception as exc:
            if not _is_nvml_error(nvml, exc):
                raise
    notes = []
    if not gpus:
        notes.append("NVML found no NVIDIA GPU")
    if s.missing:
        notes.append("NVML could not answer " + ", ".join(sorted(s.missing))
                     + " (not supported by this GPU or driver); those fields are unknown or from sysfs")
    return gpus, notes


def _init_note(kind: str, exc: BaseException) -> str:
    why = {
        "library-not-found": "no NVIDIA driver (libnvidia-ml.so not found)",
        "driver-not-loaded": "the NVIDIA driver is not loaded",
        "no-permission": "no permission to query the NVIDIA driver",
        "function-not-found": "the NVIDIA driver is too old for this NVML",
        "lib-rm-version-mismatch": "the NVIDIA driver and library versions differ (reboot after a driver update)",
    }.get(kind, f"NVML failed: {exc}")
    return f"no GPU: {why}; planning for CPU only"


def _read_one(s: _Session, index: int, h: Any, handles: list[Any], root: str) -> Gpu:
    mem = s.call("nvmlDeviceGetMemoryInfo", h)
    pci = s.call("nvmlDeviceGetPciInfo", h)
    bus = sysfs_bus_id(getattr(pci, "busId", "")) if pci is not None else ""
    cc = s.call("nvmlDeviceGetCudaComputeCapability", h)
    link = read_pci_link(root, bus) if bus else {}
    gen = s.call("nvmlDeviceGetCurrPcieLinkGeneration", h) or link.get("gen")
    gen_max = s.call("nvmlDeviceGetMaxPcieLinkGeneration", h) or link.get("gen_max")
    width = s.call("nvmlDeviceGetCurrPcieLinkWidth", h) or link.get("width")
    width_max = s.call("nvmlDeviceGetMaxPcieLinkWidth", h) or link.get("width_max")
    node, local = read_gpu_numa(root, bus) if bus else (None, "")
    topo = []
    for other in handles:
        if other is h:
            topo.append("X")
        elif other is None:
            topo.append("?")
        else:
            lvl = s.call("nvmlDeviceGetTopologyCommonAncestor", h, other)
            topo.append(_TOPO.get(int(lvl), str(lvl)) if lvl is not None else "?")
    h2d = pcie_bytes_per_s(gen_max, width_max)
    return Gpu(
        index=index,
        name=_text(s.call("nvmlDeviceGetName", h) or f"GPU {index}"),
        vram_bytes=int(getattr(mem, "total", 0) or 0),
        vram_free_bytes=int(mem.free) if mem is not None else None,
        uuid=_text(s.call("nvmlDeviceGetUUID", h) or ""),
        pci_bus_id=bus,
        compute_capability=f"{cc[0]}.{cc[1]}" if cc else "",
        mem_bw_bytes_per_s=_mem_bw(s, h),
        pcie_gen=gen, pcie_width=width, pcie_gen_max=gen_max, pcie_width_max=width_max,
        h2d_bytes_per_s=Figure(value=h2d, source="nvml",
                               method=f"PCIe gen {gen_max} x{width_max} theoretical, one direction")
        if h2d else None,
        numa_node=node,
        local_cpus=local,
        topology=tuple(topo),
        source="nvml",
    )


def _mem_bw(s: _Session, h: Any) -> Figure | None:
    """Theoretical device-memory bandwidth: bus width x max memory clock x 2 (double data
    rate, as NVML reports GDDR6X/GDDR7/HBM clocks) / 8. E.g. RTX 4090: 384 bit x 10501 MHz
    x 2 / 8 = 1008 GB/s; H100 SXM: 5120 bit x 2619 MHz x 2 / 8 = 3352 GB/s."""
    bits = s.call("nvmlDeviceGetMemoryBusWidth", h)
    mhz = s.call("nvmlDeviceGetMaxClockInfo", h, _NVML_CLOCK_MEM)
    if not bits or not mhz:
        return None
    return Figure(value=bits * mhz * 1e6 * 2 / 8, source="nvml",
                  method=f"{bits}-bit bus x {mhz} MHz max memory clock x 2 / 8 (theoretical)")


def read_local_cpus(gpu: Gpu) -> tuple[int, ...]:
    return parse_cpulist(gpu.local_cpus)
