"""CPU model, sockets, physical cores, ISA and L3 from /proc/cpuinfo and sysfs topology.

py-cpuinfo is used only as a fallback, for a machine without /proc/cpuinfo fields we need
(the caller passes it in, so tests on fake trees never read the real machine).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from moeplan.planner.hardware.profile import Cpu
from moeplan.probes.fsread import list_dir, parse_cpulist, read_int, read_text

# ISA extensions that decide which llama.cpp / KTransformers kernels run
ISA_FLAGS = (
    "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
    "avx512_fp16", "avx512_vbmi", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16", "amx_fp16",
    # arm64 (/proc/cpuinfo "Features")
    "asimd", "asimddp", "i8mm", "bf16", "sve", "sve2",
)
_VENDORS = {"GenuineIntel": "intel", "AuthenticAMD": "amd", "HygonGenuine": "hygon"}


@dataclass(frozen=True)
class Topology:
    """Online logical CPUs grouped into physical cores (sibling sets) and packages."""

    cores: tuple[tuple[int, ...], ...]  # each core's logical CPUs, sorted by first CPU
    package_of: dict[int, int]  # logical CPU -> physical package (socket)

    @property
    def cpus(self) -> tuple[int, ...]:
        return tuple(sorted(c for core in self.cores for c in core))

    def first_cpus(self, cpus: tuple[int, ...] | None = None) -> tuple[int, ...]:
        """One logical CPU per physical core (the first sibling), restricted to `cpus`."""
        allowed = set(cpus) if cpus is not None else None
        out = []
        for core in self.cores:
            mine = [c for c in core if allowed is None or c in allowed]
            if mine:
                out.append(mine[0])
        return tuple(out)


def parse_cpuinfo(text: str | None) -> list[dict[str, str]]:
    """/proc/cpuinfo -> one dict per 'processor' block."""
    blocks: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    for line in (text or "").splitlines():
        if not line.strip():
            if cur:
                blocks.append(cur)
                cur = {}
            continue
        if ":" in line:
            k, v = line.split(":", 1)
            cur[k.strip()] = v.strip()
    if cur:
        blocks.append(cur)
    return [b for b in blocks if "processor" in b]


def read_topology(root: str, blocks: list[dict[str, str]] | None = None) -> Topology:
    """Sibling sets from sysfs (core_cpus_list, or thread_siblings_list on older kernels);
    /proc/cpuinfo 'physical id'/'core id' when sysfs lacks them; one core per CPU at worst."""
    base = "/sys/devices/system/cpu"
    online = parse_cpulist(read_text(root, f"{base}/online"))
    if not online:
        online = tuple(int(n[3:]) for n in list_dir(root, base) if n.startswith("cpu") and n[3:].isdigit())
    if blocks is None:
        blocks = parse_cpuinfo(read_text(root, "/proc/cpuinfo"))
    by_proc = {int(b["processor"]): b for b in blocks if b.get("processor", "").isdigit()}
    if not online:
        online = tuple(sorted(by_proc))
    groups: dict[tuple, list[int]] = {}
    package_of: dict[int, int] = {}
    for cpu in online:
        topo = f"{base}/cpu{cpu}/topology"
        sib = read_text(root, f"{topo}/core_cpus_list") or read_text(root, f"{topo}/thread_siblings_list")
        pkg = read_int(root, f"{topo}/physical_package_id")
        b = by_proc.get(cpu, {})
        if pkg is None:
            pkg = int(b["physical id"]) if b.get("physical id", "").isdigit() else 0
        package_of[cpu] = pkg
        if sib:
            key: tuple = ("s", parse_cpulist(sib))
        elif b.get("core id", "").isdigit():
            key = ("c", pkg, int(b["core id"]))
        else:
            key = ("x", cpu)
        groups.setdefault(key, []).append(cpu)
    cores = tuple(sorted((tuple(sorted(v)) for v in groups.values()), key=lambda c: c[0]))
    return Topology(cores=cores, package_of=package_of)


def _l3_bytes(root: str, cpus: tuple[int, ...], first: dict[str, str]) -> int | None:
    """Sum of distinct L3 instances (keyed by their shared_cpu_list)."""
    seen: dict[str, int] = {}
    for cpu in cpus:
        cdir = f"/sys/devices/system/cpu/cpu{cpu}/cache"
        for idx in list_dir(root, cdir):
            if read_int(root, f"{cdir}/{idx}/level") != 3:
                continue
            size = _parse_cache_size(read_text(root, f"{cdir}/{idx}/size"))
            shared = (read_text(root, f"{cdir}/{idx}/shared_cpu_list") or str(cpu)).strip()
            if size:
                seen[shared] = size
    if seen:
        return sum(seen.values())
    return _parse_cache_size(first.get("cache size"))


def _parse_cache_size(text: str | None) -> int | None:
    if not text:
        return None
    t = text.strip().upper().replace(" ", "")
    for suffix, mult in (("KB", 1024), ("K", 1024), ("MB", 1024**2), ("M", 1024**2)):
        if t.endswith(suffix) and t[: -len(suffix)].isdigit():
            return int(t[: -len(suffix)]) * mult
    return int(t) if t.isdigit() else None


def _clock_hz(root: str, cpu: int, first: dict[str, str]) -> tuple[float | None, float | None]:
    freq = f"/sys/devices/system/cpu/cpu{cpu}/cpufreq"
    base_khz = read_int(root, f"{freq}/base_frequency")
    max_khz = read_int(root, f"{freq}/cpuinfo_max_freq")
    base = base_khz * 1e3 if base_khz else None
    top = max_khz * 1e3 if max_khz else None
    if top is None and first.get("cpu MHz"):
        try:  # current clock, the best /proc/cpuinfo offers (a VM shows the host's nominal)
            top = float(first["cpu MHz"]) * 1e6
        except ValueError:
            pass
    return base, top


def read_cpu(root: str = "/", fallback: Callable[[], dict[str, Any]] | None = None) -> tuple[Cpu, Topology]:
    """The CPU as the planner sees it, plus the core topology used to pin measurement threads.

    fallback: returns a py-cpuinfo style dict (brand_raw, vendor_id_raw, flags, l3_cache_size);
        called only when /proc/cpuinfo lacks the model or the flags.
    """
    blocks = parse_cpuinfo(read_text(root, "/proc/cpuinfo"))
    topo = read_topology(root, blocks)
    first = blocks[0] if blocks else {}
    model = first.get("model name") or first.get("Hardware") or ""
    vendor = _VENDORS.get(first.get("vendor_id", ""), first.get("vendor_id", "").lower())
    if not vendor and first.get("CPU implementer"):
        vendor = "arm"
    flags = set((first.get("flags") or first.get("Features") or "").split())
    source = "procfs"
    if (not model or not flags) and fallback is not None:
        info = fallback() or {}
        model = model or str(info.get("brand_raw", ""))
        vendor = vendor or _VENDORS.get(str(info.get("vendor_id_raw", "")), str(info.get("vendor_id_raw", "")).lower())
        flags = flags or set(info.get("flags", []))
        source = "py-cpuinfo"
    cpus = topo.cpus
    base, top = _clock_hz(root, cpus[0] if cpus else 0, first)
    cpu = Cpu(
        model=model,
        vendor=vendor,
        n_sockets=max(1, len(set(topo.package_of.values()))),
        n_cores=max(1, len(topo.cores)),
        n_threads=max(1, len(cpus)),
        isa=tuple(f for f in ISA_FLAGS if f in flags),
        l3_bytes=_l3_bytes(root, cpus, first),
        base_clock_hz=base,
        max_clock_hz=top,
        source=source,
    )
    return cpu, topo


def py_cpuinfo_fallback() -> dict[str, Any]:
    """py-cpuinfo's view of the live machine (slow: it may spawn a subprocess)."""
    try:
        import cpuinfo  # py-cpuinfo
    except ImportError:
        return {}
    try:
        return dict(cpuinfo.get_cpu_info())
    except Exception:  # py-cpuinfo raises assorted errors on exotic systems
        return {}
