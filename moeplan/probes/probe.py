"""`moeplan probe`: read the machine, measure what decides offload speed, return a profile.

read_machine() only reads (sysfs, procfs, NVML, DMI) and is what the fake-tree tests drive;
run_probe() adds the timed measurements, the load before/after and the warnings.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from moeplan import __version__
from moeplan.errors import MoeplanError
from moeplan.planner.hardware.profile import Cpu, Figure, Gpu, HardwareProfile, Load, profile_warnings
from moeplan.planner.hardware.vendors import unified_notes
from moeplan.probes import dram, storage
from moeplan.probes.amd_gpu import read_amd_gpus, with_dram_bandwidth
from moeplan.probes.cpu import Topology, py_cpuinfo_fallback, read_cpu
from moeplan.probes.dmi import read_dimms
from moeplan.probes.flops import blas_name, measure_matmul
from moeplan.probes.fsread import parse_cpulist
from moeplan.probes.gpu import read_gpus
from moeplan.probes.load import sample_load
from moeplan.probes.numa import read_numa_nodes
from moeplan.probes.system import read_system
from moeplan.probes.timing import measured_figure, summarise_rates
from moeplan.profiles import catalog
from moeplan.units import MIB


@dataclass(frozen=True)
class ProbeSettings:
    mode: str
    dram: dram.DramSettings
    storage: storage.StorageSettings
    matmul_n: int
    matmul_reps: int
    copy_bytes: int
    copy_reps: int
    load_window_s: float


QUICK = ProbeSettings("quick", dram.QUICK, storage.QUICK, matmul_n=2048, matmul_reps=3,
                      copy_bytes=256 * MIB, copy_reps=5, load_window_s=0.25)
FULL = ProbeSettings("full", dram.FULL, storage.FULL, matmul_n=3072, matmul_reps=5,
                     copy_bytes=1024 * MIB, copy_reps=20, load_window_s=1.0)


@dataclass
class Machine:
    """What read_machine found, before any measurement."""

    profile: HardwareProfile
    topology: Topology
    notes: list[str]


def read_machine(root: str = "/", nvml: Any = None, cpu_fallback: Callable[[], dict] | None = None,
                 system_kwargs: dict[str, Any] | None = None, amd_smi: Any = None) -> Machine:
    """CPU, NUMA nodes, system, GPUs (NVML, AMD SMI, sysfs) and installed memory (DMI); no timing."""
    cpu, topo = read_cpu(root, fallback=cpu_fallback)
    nodes = read_numa_nodes(root, topo)
    sysinfo = read_system(root, **(system_kwargs or {}))
    gpus, notes = read_gpus(nvml, root)
    amd, amd_notes = read_amd_gpus(root, smi=amd_smi, first_index=len(gpus))
    if amd:  # NVML's "no GPU ... CPU only" is about NVIDIA's GPUs alone
        notes = [n.replace("no GPU:", "no NVIDIA GPU:").replace("; planning for CPU only", "") for n in notes]
    gpus, notes = gpus + amd, notes + amd_notes
    gpus = tuple(_enrich_gpu(g) for g in gpus)
    cpu, mem_notes = _enrich_cpu(cpu, root)
    notes += mem_notes
    gpus, igpu_notes = _unified_gpus(gpus, cpu, sysinfo.ram_total_bytes)
    notes += igpu_notes
    profile = HardwareProfile(name=sysinfo.hostname or "this machine", origin="probe",
                              moeplan_version=__version__, gpus=gpus, cpu=cpu, numa_nodes=nodes, system=sysinfo)
    return Machine(profile=profile, topology=topo, notes=notes)


def _unified_gpus(gpus: tuple[Gpu, ...], cpu: Cpu, ram_total_bytes: int) -> tuple[tuple[Gpu, ...], list[str]]:
    """An APU's iGPU reads the DRAM: its bandwidth and host link are the CPU's memory figures
    (channels x MT/s x 8 B, from DMI or the CPU's spec sheet), and the plan must say so."""
    out, notes = [], []
    for g in gpus:
        if g.unified_memory:
            peak = (cpu.memory_channels or 0) * (cpu.ram_speed_mts or 0) * 1e6 * 8
            how = f"{cpu.memory_channels} channels x {cpu.ram_type.upper()}-{cpu.ram_speed_mts} x 8 B"
            g = with_dram_bandwidth(g, peak or None, how, catalog.efficiency().gpu_mem)
            notes += unified_notes(g, ram_total_bytes + (g.vram_bytes - g.host_shared_bytes))
        out.append(g)
    return tuple(out), notes


def _enrich_gpu(g: Gpu) -> Gpu:
    """Spec-sheet figures NVML cannot give (FP16 tensor rate), and achievable fractions for
    NVML's theoretical figures, from the parts catalog."""
    eff = catalog.efficiency()
    part = catalog.match_gpu(g.name)
    changes: dict[str, Any] = {}
    if g.mem_bw_bytes_per_s is not None:
        changes["mem_bw_bytes_per_s"] = replace(g.mem_bw_bytes_per_s, achievable=eff.gpu_mem)
    elif part is not None:
        changes["mem_bw_bytes_per_s"] = Figure(value=part.mem_bw_bytes_per_s, source="spec-sheet",
                                               method=f"{part.name} spec sheet", achievable=eff.gpu_mem)
    if g.h2d_bytes_per_s is not None:
        changes["h2d_bytes_per_s"] = replace(g.h2d_bytes_per_s, achievable=eff.pcie_pinned)
        changes["d2h_bytes_per_s"] = replace(g.h2d_bytes_per_s, achievable=eff.pcie_pinned)
    if part is not None:
        changes["fp16_flop_per_s"] = Figure(value=part.fp16_flop_per_s, source="spec-sheet",
                                            method=f"{part.name}: dense FP16 tensor peak (parts catalog)",
                                            achievable=eff.gpu_fp16)
    return replace(g, **changes)


def read_machine_windows(api: Any, nvml: Any = None, cpu_info: Callable[[], dict] | None = None,
                         cim_run: Callable[[list[str]], str] | None = None, root: str = "/",
                         system_kwargs: dict[str, Any] | None = None) -> Machine:
    """read_machine on Windows: the Win32 API (`api`, probes/windows.Kernel32Api or a fake),
    py-cpuinfo, NVML and CIM; no timing."""
    from moeplan.probes import windows as win

    cpu, topo, recs = win.read_windows_cpu(api, (cpu_info or py_cpuinfo_fallback)())
    nodes, notes = win.read_windows_nodes(api, topo, recs)
    sysinfo = win.read_windows_system(api, **(system_kwargs or {}))
    gpus, gpu_notes = read_gpus(nvml, root)
    notes += gpu_notes
    if gpus:
        gpus = win.with_driver_models(gpus, win.read_driver_models(nvml, len(gpus)) if nvml is not None else {})
        if len(nodes) > 1:
            notes.append("GPU NUMA node unknown on Windows (no sysfs; NVML's CPU affinity is Linux-only)")
    gpus = tuple(_enrich_gpu(g) for g in gpus)
    dimms, cim_note = win.read_cim_dimms(cim_run)
    if cim_note:
        notes.append(cim_note)
    cpu, mem_notes = _enrich_cpu(cpu, root, dimms=dimms, source="cim")
    notes += mem_notes
    profile = HardwareProfile(name=sysinfo.hostname or "this machine", origin="probe", os="windows",
                              moeplan_version=__version__, gpus=gpus, cpu=cpu, numa_nodes=nodes, system=sysinfo)
    return Machine(profile=profile, topology=topo, notes=notes)


def _enrich_cpu(cpu: Cpu, root: str, dimms: tuple | None = None, source: str = "dmi") -> tuple[Cpu, list[str]]:
    """Memory type/speed from DMI (or the DIMMs given: CIM on Windows) when readable; channels
    (and type/speed otherwise) from the CPU's spec sheet when the catalog knows the model."""
    notes = []
    if dimms is None:
        dimms = read_dimms(root)
    part = catalog.match_cpu(cpu.model)
    changes: dict[str, Any] = {}
    if dimms:
        types = sorted({d.ram_type for d in dimms if d.ram_type})
        speeds = [mts for d in dimms if (mts := d.configured_mts or d.speed_mts)]
        changes.update(ram_type="/".join(types), ram_speed_mts=min(speeds) if speeds else None,
                       n_dimms=len(dimms), memory_source=source)
    if part is not None:
        changes["memory_channels"] = part.channels * cpu.n_sockets
        if not dimms:
            changes.update(ram_type=part.ram_type, ram_speed_mts=part.ram_speed_mts, memory_source="spec-sheet")
            why = "CIM gave no DIMMs" if source == "cim" else "DMI unreadable; run as root to read the installed DIMMs"
            notes.append(f"memory type and speed are {part.name}'s rated maximum ({why})")
    return replace(cpu, **changes), notes


def run_probe(s: ProbeSettings = QUICK, model_path: str | None = None, root: str = "/", nvml: Any = None,
              on_step: Callable[[str], None] = lambda msg: None,
              on_total: Callable[[int], None] = lambda n: None) -> HardwareProfile:
    """on_step(msg) announces each step; on_total(n) says, once the machine has been read, how
    many steps the whole probe announces at most (for a progress bar with an ETA)."""
    t_start = time.perf_counter()
    if model_path is not None:
        storage.resolve_model_file(model_path)  # a bad path fails before anything is measured
    win = sys.platform == "win32"
    load = _windows_load if win else sample_load
    on_step("load before")
    load_before = load(root, s.load_window_s)
    on_step("reading CPU, NUMA, memory, GPUs")
    if win:
        from moeplan.probes.windows import Kernel32Api

        api = Kernel32Api()
        m = read_machine_windows(api, nvml)
        pin, allowed = api.pin_current_thread, set(m.topology.cpus)
    else:
        m = read_machine(root, nvml, cpu_fallback=py_cpuinfo_fallback)
        pin, allowed = dram.pin_linux, None
    p, notes = m.profile, list(m.notes)
    on_total(expected_steps(p, model_path is not None and not win))
    from moeplan.probes.numa_alloc import Libnuma

    # libnuma only matters with 2+ nodes (memory-only nodes, cross-node placement)
    libnuma = Libnuma.load() if p.system.libnuma and len(p.numa_nodes) > 1 else None
    if win:
        notes.append("DRAM on Windows: pages placed by first touch from a thread pinned with "
                     "SetThreadGroupAffinity; where they landed is not verified (no numa_maps)")
    p = _guarded(notes, "DRAM", lambda: _measure_memory(p, m.topology, s, libnuma, on_step, notes, pin, allowed), p)
    p = _guarded(notes, "CPU matmul", lambda: _measure_flops(p, s, on_step), p)
    if p.gpus:
        p = _guarded(notes, "host<->GPU copy", lambda: _measure_copies(p, s, nvml, on_step, notes), p)
    if model_path is not None and win:
        notes.append("storage not measured on Windows: the disk timing reads with O_DIRECT and preadv, which "
                     "Windows lacks (FILE_FLAG_NO_BUFFERING is not wired up); pass --disk-read to `moeplan hardware`")
    elif model_path is not None:
        on_step(f"reading {model_path}")
        st, st_notes = storage.measure_storage(model_path, s.storage, root)
        p = replace(p, storage=(st,))
        notes += st_notes
    else:
        notes.append("storage not measured: pass --model-path FILE to time the disk holding the model")
    on_step("load after")
    load_after = load(root, s.load_window_s)
    p = replace(p, load=Load(loadavg_1m_before=load_before[0], cpu_busy_before=load_before[1],
                             loadavg_1m_after=load_after[0], cpu_busy_after=load_after[1]),
                notes=tuple(notes), probe_mode=s.mode, probe_wall_s=round(time.perf_counter() - t_start, 2),
                created=datetime.now(UTC).isoformat(timespec="seconds"))
    return replace(p, warnings=profile_warnings(p))


def expected_steps(p: HardwareProfile, measures_disk: bool) -> int:
    """Most steps run_probe announces for this machine: load before, reading, one DRAM pass per
    node with CPUs and per memory-only node, the cross-node pairs with 2+ nodes, the matmul, one
    copy run per GPU, the disk, load after (a step that turns out impossible is skipped)."""
    readers = len(p.cpu_nodes)
    mem_only = sum(1 for n in p.numa_nodes if not n.cpus and n.mem_total_bytes > 0)
    cross = readers * (len(p.numa_nodes) - 1) if readers >= 2 else 0
    return 2 + max(1, readers) + mem_only + cross + 1 + len(p.gpus) + int(measures_disk) + 1


def _guarded(notes: list[str], what: str, fn: Callable[[], HardwareProfile], p: HardwareProfile) -> HardwareProfile:
    """A failed measurement becomes a note; the rest of the probe goes on."""
    try:
        return fn()
    except (MoeplanError, OSError, MemoryError, RuntimeError) as exc:
        msg = exc.message if isinstance(exc, MoeplanError) else f"{type(exc).__name__}: {exc}"
        notes.append(f"{what} measurement failed: {msg}")
        return p


def _windows_load(root: str, window_s: float) -> tuple[float | None, float | None]:
    """(None: Windows has no load average, busy fraction over `window_s` from psutil)."""
    import psutil

    return None, psutil.cpu_percent(interval=window_s) / 100


def _measure_memory(p: HardwareProfile, topo: Topology, s: ProbeSettings, libnuma, on_step,
                    notes: list[str], pin=dram.pin_linux, allowed: set[int] | None = None) -> HardwareProfile:
    res = dram.measure_dram(p.numa_nodes, topo, p.cpu.l3_bytes, s.dram, p.system.ram_available_bytes,
                            libnuma, on_step, pin=pin, allowed=allowed)
    notes += res.notes
    nodes = tuple(replace(n, dram_read_bytes_per_s=res.node_figures.get(n.id, n.dram_read_bytes_per_s))
                  for n in p.numa_nodes)
    return replace(p, numa_nodes=nodes, numa_bw_matrix=res.matrix,
                   cpu=replace(p.cpu, core_read_bytes_per_s=res.core_figure or p.cpu.core_read_bytes_per_s))


def _measure_flops(p: HardwareProfile, s: ProbeSettings, on_step) -> HardwareProfile:
    on_step(f"CPU float32 matmul {s.matmul_n}x{s.matmul_n}")
    st = summarise_rates(measure_matmul(s.matmul_n, s.matmul_reps))
    cores = max(1, p.cpu.n_cores)
    per_core = replace(st, best=st.best / cores, median=st.median / cores, worst=st.worst / cores,
                       overall=st.overall / cores)
    fig = measured_figure(per_core, f"numpy float32 matmul {s.matmul_n}^3 ({blas_name()}, BLAS threads on all "
                                    f"CPUs) / {cores} physical cores; best of {s.matmul_reps}")
    return replace(p, cpu=replace(p.cpu, core_flop_per_s=fig))


def _measure_copies(p: HardwareProfile, s: ProbeSettings, nvml: Any, on_step, notes: list[str]) -> HardwareProfile:
    from moeplan.probes.copy_rates import measure_copy_rates, torch_cuda

    torch = torch_cuda()
    if torch is None:
        notes.append("host<->GPU copy rates not measured: needs torch with CUDA (pip install torch); "
                     "the PCIe figures are NVML's theoretical link rate")
        return p
    gpus = []
    for g in p.gpus:
        cpus = parse_cpulist(g.local_cpus) or _node_cpus(p, g.numa_node)
        on_step(f"GPU {g.index}: host<->GPU copies, {s.copy_bytes // MIB} MiB x {s.copy_reps}")
        res = measure_copy_rates(torch, g.index, cpus, s.copy_bytes, s.copy_reps,
                                 read_link=_link_reader(nvml, g.index))
        where = f"host buffer first touched on CPUs {g.local_cpus or 'any'}"
        method = (f"torch copy_ of {s.copy_bytes // MIB} MiB, {{}} host memory, {where}; best of "
                  f"{s.copy_reps} after 1 warm-up")
        gen, width = res.get("link_loaded", (None, None))
        gpus.append(replace(
            g,
            h2d_bytes_per_s=measured_figure(summarise_rates(res["h2d_pinned"]), method.format("pinned")),
            h2d_pageable_bytes_per_s=measured_figure(summarise_rates(res["h2d_pageable"]), method.format("pageable")),
            d2h_bytes_per_s=measured_figure(summarise_rates(res["d2h_pinned"]), method.format("pinned")),
            pcie_gen_loaded=gen, pcie_width_loaded=width))
    return replace(p, gpus=tuple(gpus))


def _node_cpus(p: HardwareProfile, node: int | None) -> tuple[int, ...]:
    for n in p.numa_nodes:
        if n.id == node:
            return n.cpus
    return ()


def _link_reader(nvml: Any, index: int) -> Callable[[], tuple[int | None, int | None]]:
    def read() -> tuple[int | None, int | None]:
        try:
            mod = nvml
            if mod is None:
                import pynvml as mod  # type: ignore[no-redef]
            mod.nvmlInit()
            try:
                h = mod.nvmlDeviceGetHandleByIndex(index)
                return mod.nvmlDeviceGetCurrPcieLinkGeneration(h), mod.nvmlDeviceGetCurrPcieLinkWidth(h)
            finally:
                mod.nvmlShutdown()
        except Exception:  # NVML unavailable now: the loaded link stays unknown
            return None, None

    return read
