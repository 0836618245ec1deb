"""AMD GPUs: AMD SMI (the `amdsmi` package, ROCm's libamd_smi.so) with sysfs as the fallback.

The amdgpu driver shows every GPU under /sys/class/drm/cardN/device (PCI vendor 0x1002):
mem_info_vram_total / _used (the card's memory, or an APU's BIOS carve-out), mem_info_gtt_total
/ _used (system RAM the GPU may map), the PCIe link (current/max_link_speed, _width), numa_node
and local_cpulist. AMD SMI adds the marketed name, the LLVM target (gfx1100, gfx942), the
memory's bus width and peak bandwidth. `amdsmi` is imported only when sysfs shows an AMD GPU,
with its prints swallowed: without ROCm's library it prints two lines and raises (amdsmi 7.0
raises KeyError), which is a note here, never an exception; so is a GPU it cannot read.

An APU's iGPU (Strix Halo's Radeon 8060S, Strix Point's 890M, Phoenix's 780M) is recognised by
its PCI device ID (APU_DEVICE_IDS) or an iGPU part name from the catalog: it shares the host's
DRAM, its budget is carve-out + GTT, and the GTT part of it is host RAM
(Gpu.unified_memory, host_shared_bytes; planner/hardware/vendors.py).
"""
from __future__ import annotations

import contextlib
import io
import os
import re
from typing import Any

from moeplan.planner.hardware.profile import Figure, Gpu, pcie_bytes_per_s
from moeplan.probes.fsread import read_int, read_text
from moeplan.probes.gpu import _GTS_TO_GEN

AMD_VENDOR = "0x1002"
_CARD = re.compile(r"^card(\d+)$")
# PCI device IDs of the iGPUs of AMD's APUs (the Linux kernel's amdgpu_drv.c / pci.ids): the
# family and the largest iGPU the family ships with (the catalog part a probe takes for it
# when AMD SMI gives no marketed name)
APU_DEVICE_IDS = {
    0x1586: ("Strix Halo", "AMD Radeon 8060S"),
    0x150E: ("Strix Point", "AMD Radeon 890M"),
    0x1114: ("Krackan Point", ""),
    0x15BF: ("Phoenix", "AMD Radeon 780M"),
    0x15C8: ("Phoenix 2", ""),
    0x1900: ("Hawk Point", "AMD Radeon 780M"),
    0x1681: ("Rembrandt", ""),
    0x164E: ("Raphael", ""),
    0x13C0: ("Granite Ridge", ""),
    0x1638: ("Cezanne", ""),
    0x1636: ("Renoir", ""),
    0x163F: ("Van Gogh", ""),
}


def amd_cards(root: str = "/") -> list[tuple[int, str]]:
    """(card number, its sysfs device folder) of every AMD GPU, in card order."""
    base = os.path.join(root, "sys/class/drm")
    try:
        names = os.listdir(base)
    except OSError:
        return []
    out = []
    for name in names:
        m = _CARD.match(name)
        if not m:
            continue  # card0-DP-1 ... are connectors
        dev = f"/sys/class/drm/{name}/device"
        if (read_text(root, f"{dev}/vendor") or "").strip().lower() == AMD_VENDOR:
            out.append((int(m.group(1)), dev))
    return sorted(out)


def _hex(text: str | None) -> int | None:
    try:
        return int((text or "").strip(), 16)
    except ValueError:
        return None


def _bus_id(root: str, dev: str) -> str:
    for line in (read_text(root, f"{dev}/uevent") or "").splitlines():
        if line.startswith("PCI_SLOT_NAME="):
            return line.split("=", 1)[1].strip().lower()
    real = os.path.realpath(os.path.join(root, dev.lstrip("/")))
    base = os.path.basename(real)
    return base if re.match(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d$", base) else ""


def _gen(root: str, path: str) -> int | None:
    t = (read_text(root, path) or "").split()
    return _GTS_TO_GEN.get(t[0]) if t else None


class _Smi:
    """AMD SMI's per-GPU facts by PCI bus id, or nothing (and a note) when it cannot run."""

    def __init__(self, smi: Any) -> None:
        self.smi = smi
        self.by_bus: dict[str, dict[str, Any]] = {}
        self.note = ""

    def read(self) -> None:
        s = self.smi
        try:
            s.amdsmi_init()
        except Exception as exc:  # AmdSmiLibraryException: no driver, no permission
            self.note = f"AMD SMI could not start ({type(exc).__name__}: {exc}); GPU figures from sysfs"
            return
        try:
            for h in s.amdsmi_get_processor_handles():
                bus = self._call("amdsmi_get_gpu_device_bdf", h)
                if not bus:
                    continue
                self.by_bus[str(bus).lower()] = {
                    "asic": self._call("amdsmi_get_gpu_asic_info", h) or {},
                    "vram": self._call("amdsmi_get_gpu_vram_info", h) or {},
                    "uuid": self._call("amdsmi_get_gpu_device_uuid", h) or "",
                }
        except Exception as exc:
            self.note = f"AMD SMI failed ({type(exc).__name__}: {exc}); GPU figures from sysfs"
        finally:
            with contextlib.suppress(Exception):
                s.amdsmi_shut_down()

    def _call(self, fn: str, *args: Any) -> Any:
        f = getattr(self.smi, fn, None)
        if f is None:
            return None
        try:
            return f(*args)
        except Exception:  # AmdSmiLibraryException: not supported on this GPU / driver
            return None


def import_amdsmi() -> tuple[Any, str]:
    """(the amdsmi module, '') or (None, why): its import prints and raises without ROCm."""
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            import amdsmi
    except ImportError:
        return None, "amdsmi is not installed (pip install amdsmi; it needs ROCm's libamd_smi.so)"
    except Exception as exc:  # amdsmi 7.0 without libamd_smi.so: KeyError('libamd_smi.so')
        return None, f"amdsmi could not load ROCm's libamd_smi.so ({type(exc).__name__}: {exc})"
    return amdsmi, ""


def read_amd_gpus(root: str = "/", smi: Any = None, first_index: int = 0,
                  use_smi: bool = True) -> tuple[tuple[Gpu, ...], list[str]]:
    """Every AMD GPU (indices from `first_index`, after the NVIDIA ones) and notes. `smi`: the
    amdsmi module or a fake with its calls; None imports it when sysfs shows an AMD GPU."""
    cards = amd_cards(root)
    if not cards:
        return (), ["no AMD GPU (no amdgpu device with vendor 0x1002 under /sys/class/drm)"]
    notes: list[str] = []
    info = _Smi(smi)
    if smi is None and use_smi:
        smi, why = import_amdsmi()
        info.smi = smi
        if why:
            notes.append(f"AMD GPU figures from sysfs only: {why}")
    if info.smi is not None:
        info.read()
        if info.note:
            notes.append(info.note)
    gpus = tuple(_read_card(root, dev, first_index + k, info.by_bus) for k, (_, dev) in enumerate(cards))
    return gpus, notes


def _read_card(root: str, dev: str, index: int, by_bus: dict[str, dict[str, Any]]) -> Gpu:
    from moeplan.profiles import catalog

    bus = _bus_id(root, dev)
    smi = by_bus.get(bus, {})
    asic, vinfo = smi.get("asic", {}), smi.get("vram", {})
    device_id = _hex(read_text(root, f"{dev}/device")) or _hex(str(asic.get("device_id", "")))
    family, apu_part = APU_DEVICE_IDS.get(device_id or -1, ("", ""))
    market = str(asic.get("market_name") or "").strip()
    if market in ("", "N/A"):
        market = (read_text(root, f"{dev}/product_name") or "").strip()
    part = catalog.match_gpu(market) if market else None
    if part is None and apu_part:
        part = catalog.match_gpu(apu_part)
    if part is not None:
        name = part.name
    elif market:
        name = market
    else:
        name = f"AMD GPU {device_id:#06x}" if device_id else "AMD GPU"
    unified = bool(family) or bool(part is not None and part.unified)
    vram = read_int(root, f"{dev}/mem_info_vram_total") or int(vinfo.get("vram_size") or 0) * 1024**2
    vram_used = read_int(root, f"{dev}/mem_info_vram_used")
    gtt = read_int(root, f"{dev}/mem_info_gtt_total") or 0
    gtt_used = read_int(root, f"{dev}/mem_info_gtt_used")
    if unified:  # the carve-out and the GTT: both are the iGPU's to map, the GTT out of MemTotal
        total = vram + gtt
        free = None if vram_used is None or gtt_used is None else max(0, total - vram_used - gtt_used)
    else:
        total = vram
        free = None if vram_used is None else max(0, vram - vram_used)
    gen, width = _gen(root, f"{dev}/current_link_speed"), read_int(root, f"{dev}/current_link_width")
    gen_max, width_max = _gen(root, f"{dev}/max_link_speed"), read_int(root, f"{dev}/max_link_width")
    bw = None
    peak = vinfo.get("vram_max_bandwidth")
    if isinstance(peak, (int, float)) and peak > 0 and not unified:
        bits = vinfo.get("vram_bit_width")
        bw = Figure(value=float(peak) * 1e9, source="sysfs",
                    method=f"AMD SMI vram_max_bandwidth {peak} GB/s" + (f" ({bits}-bit bus)" if bits else "")
                           + " (theoretical)")
    h2d = None
    if not unified and pcie_bytes_per_s(gen_max, width_max):
        h2d = Figure(value=pcie_bytes_per_s(gen_max, width_max) or 0.0, source="sysfs",
                     method=f"PCIe gen {gen_max} x{width_max} theoretical, one direction")
    node = read_int(root, f"{dev}/numa_node")
    return Gpu(
        index=index, name=name, vram_bytes=total, vram_free_bytes=free, uuid=str(smi.get("uuid") or ""),
        pci_bus_id=bus, mem_bw_bytes_per_s=bw,
        pcie_gen=None if unified else gen, pcie_width=None if unified else width,
        pcie_gen_max=None if unified else gen_max, pcie_width_max=None if unified else width_max,
        h2d_bytes_per_s=h2d, numa_node=node if node is not None and node >= 0 else None,
        local_cpus=(read_text(root, f"{dev}/local_cpulist") or "").strip(),
        source="sysfs", vendor="amd", unified_memory=unified, host_shared_bytes=gtt if unified else 0,
        gfx_target=str(asic.get("target_graphics_version") or (part.gfx_target if part is not None else "")),
    )


def with_dram_bandwidth(g: Gpu, dram_peak_bytes_per_s: float | None, how: str, achievable: float) -> Gpu:
    """An iGPU's memory and host-link figures are the DRAM's (the CPU's channels x MT/s x 8 B)."""
    if not g.unified_memory or not dram_peak_bytes_per_s:
        return g
    bw = Figure(value=dram_peak_bytes_per_s, source="spec-sheet", achievable=achievable,
                method=f"unified memory: the DRAM's peak ({how})")
    h2d = Figure(value=dram_peak_bytes_per_s, source="spec-sheet", achievable=achievable,
                 method="no PCIe link: the iGPU reads host buffers in the same DRAM, at its rate")
    from dataclasses import replace

    return replace(g, mem_bw_bytes_per_s=bw, h2d_bytes_per_s=h2d, d2h_bytes_per_s=h2d)
