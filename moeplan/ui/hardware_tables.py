"""Tables for `moeplan probe` and `moeplan hardware`: the machine summary, NUMA nodes like
`numactl --hardware`, GPUs like `nvidia-smi topo -m`, and every figure with its source.

Units: GiB = 1024^3 bytes (memory sizes, as numactl and nvidia-smi count), GB/s = 1e9 bytes/s
(bandwidth, as spec sheets and STREAM print), TFLOPS/GFLOPS = 1e12/1e9 FLOP/s.
"""
from __future__ import annotations

from rich.table import Table

from moeplan.planner.hardware.profile import Figure, HardwareProfile, format_cpulist
from moeplan.units import GIB


def _gib(n: float | None) -> str:
    return "-" if n is None else f"{n / GIB:.1f}"


def _gbs(f: Figure | None, effective: bool = False) -> str:
    if f is None:
        return "-"
    return f"{(f.effective if effective else f.value) / 1e9:.1f}"


def _src(f: Figure | None) -> str:
    return "-" if f is None else f.source


def summary_table(p: HardwareProfile) -> Table:
    c, s = p.cpu, p.system
    t = Table(title=f"{p.name} ({p.origin}{', ' + p.probe_mode if p.probe_mode else ''}"
                    f"{', ' + p.created if p.created else ''})", show_header=False)
    t.add_column("what")
    t.add_column("value")
    sockets = f"{c.n_sockets} socket(s), {c.n_cores} physical cores, {c.n_threads} logical CPUs"
    t.add_row("CPU", f"{c.model or '?'} — {sockets}")
    t.add_row("ISA", ", ".join(c.isa) or "unknown")
    if c.l3_bytes:
        t.add_row("L3 cache", f"{c.l3_bytes / 2**20:.0f} MiB")
    mem = []
    if c.ram_type or c.ram_speed_mts:
        mem.append(f"{c.ram_type.upper() or 'DDR'}-{c.ram_speed_mts or '?'}")
    if c.memory_channels:
        mem.append(f"{c.memory_channels} channels")
    if c.n_dimms:
        mem.append(f"{c.n_dimms} DIMMs")
    if mem:
        t.add_row("memory", ", ".join(mem) + (f" ({c.memory_source})" if c.memory_source else ""))
    ram = f"{_gib(s.ram_total_bytes)} GiB total"
    if s.ram_available_bytes is not None:
        ram += f", {_gib(s.ram_available_bytes)} GiB available"
    if s.cgroup_limit_bytes:
        ram += f", cgroup limit {_gib(s.cgroup_limit_bytes)} GiB"
    t.add_row("RAM", ram)
    if p.origin == "probe":
        t.add_row("swap / THP / hugepages", f"{_gib(s.swap_total_bytes)} GiB / {s.thp or '?'} / "
                  f"{s.hugepages_total} x {s.hugepage_bytes // 1024} KiB ({s.hugepages_free} free)")
        nb = {None: "unknown", 0: "off", 1: "on"}.get(s.numa_balancing, str(s.numa_balancing))
        t.add_row("NUMA tools", f"numa_balancing {nb}, numactl {'yes' if s.numactl else 'no'}, "
                  f"libnuma {'yes' if s.libnuma else 'no'}")
        t.add_row("OS", f"{s.os} {s.kernel}" + (f", VM {s.vm_vendor}".rstrip() if s.is_vm else ""))
    return t


def _whole(col: str, values: list[str]) -> dict:
    """A source column's words are never broken at 80 columns ("spec-she|et"): the figures' headers
    wrap instead."""
    if col != "source" or not values:
        return {}
    return {"no_wrap": True, "min_width": max(len(v) for v in values)}


def numa_tables(p: HardwareProfile) -> list[Table]:
    """`numactl --hardware` as tables: nodes, distances, and the cross-node read matrix."""
    nodes = p.numa_nodes
    ids = [n.id for n in nodes]
    t = Table(title=f"NUMA: available: {len(nodes)} node(s) ({format_cpulist(ids)})")
    for col in ("node", "cpus", "cores", "size GiB", "free GiB", "read GB/s", "effective GB/s", "source"):
        t.add_column(col, justify="left" if col in ("cpus", "source") else "right", overflow="fold",
                     **_whole(col, [_src(n.dram_read_bytes_per_s) for n in nodes]))
    for n in nodes:
        t.add_row(str(n.id), format_cpulist(n.cpus) or "(memory only)", str(n.n_physical_cores),
                  _gib(n.mem_total_bytes), _gib(n.mem_free_bytes), _gbs(n.dram_read_bytes_per_s),
                  _gbs(n.dram_read_bytes_per_s, effective=True), _src(n.dram_read_bytes_per_s))
    out = [t]
    if len(nodes) > 1 and any(n.distances for n in nodes):
        d = Table(title="node distances")
        d.add_column("node")
        for i in ids:
            d.add_column(str(i), justify="right")
        for n in nodes:
            d.add_row(str(n.id), *[str(x) for x in n.distances])
        out.append(d)
    if p.numa_bw_matrix:
        m = Table(title="DRAM read GB/s: CPUs of node (row) reading memory of node (column); - = not measured")
        m.add_column("node")
        for i in ids:
            m.add_column(str(i), justify="right")
        for i, row in zip(ids, p.numa_bw_matrix):
            m.add_row(str(i), *[f"{v / 1e9:.1f}" if v else "-" for v in row])
        out.append(m)
    return out


def gpu_tables(p: HardwareProfile) -> list[Table]:
    """GPUs with their figures, their host links, and `nvidia-smi topo -m`'s matrix with
    CPU/NUMA affinity."""
    if not p.gpus:
        return []
    t = Table(title="GPUs (VRAM in GiB, memory bandwidth in GB/s, FP16 dense TFLOPS)")
    for col in ("gpu", "name", "VRAM GiB", "free GiB", "mem GB/s", "FP16 TFLOPS", "cc"):
        t.add_column(col, justify="left" if col == "name" else "right")
    for g in p.gpus:
        fp16 = "-" if g.fp16_flop_per_s is None else f"{g.fp16_flop_per_s.value / 1e12:.0f}"
        t.add_row(str(g.index), g.name.replace("NVIDIA ", ""), _gib(g.vram_bytes), _gib(g.vram_free_bytes),
                  _gbs(g.mem_bw_bytes_per_s), fp16, g.compute_capability or "-")
    link = Table(title="host links (GB/s = 1e9 bytes/s; H2D host-to-GPU, D2H GPU-to-host)")
    for col in ("gpu", "PCIe now", "PCIe max", "under load", "H2D pinned", "H2D pageable", "D2H", "source"):
        link.add_column(col, justify="left" if col.startswith("PCIe") or col in ("under load", "source") else "right",
                        **_whole(col, [_src(g.h2d_bytes_per_s) for g in p.gpus] if col == "source" else []))
    for g in p.gpus:
        loaded = f"gen{g.pcie_gen_loaded} x{g.pcie_width_loaded or '?'}" if g.pcie_gen_loaded else "-"
        link.add_row(str(g.index), f"gen{g.pcie_gen or '?'} x{g.pcie_width or '?'}",
                     f"gen{g.pcie_gen_max or '?'} x{g.pcie_width_max or '?'}", loaded, _gbs(g.h2d_bytes_per_s),
                     _gbs(g.h2d_pageable_bytes_per_s), _gbs(g.d2h_bytes_per_s), _src(g.h2d_bytes_per_s))
    topo = Table(title="topology (like nvidia-smi topo -m)")
    topo.add_column("")
    for g in p.gpus:
        topo.add_column(f"GPU{g.index}", justify="center")
    topo.add_column("CPU Affinity")
    topo.add_column("NUMA Affinity")
    for g in p.gpus:
        cells = list(g.topology) if len(g.topology) == len(p.gpus) else \
            ["X" if o.index == g.index else "?" for o in p.gpus]
        topo.add_row(f"GPU{g.index}", *cells, g.local_cpus or "?", "N/A" if g.numa_node is None else str(g.numa_node))
    return [t, link, topo]


def storage_table(p: HardwareProfile) -> Table | None:
    if not p.storage:
        return None
    t = Table(title="storage (GB/s = 1e9 bytes/s)")
    for col in ("path", "device", "fs", "seq read GB/s", "4 KiB random MB/s", "source"):
        t.add_column(col, justify="right" if "/s" in col else "left")
    for s in p.storage:
        rnd = "-" if s.rand4k_read_bytes_per_s is None else f"{s.rand4k_read_bytes_per_s.value / 1e6:.1f}"
        dev = s.device + (f" ({s.device_model})" if s.device_model else "")
        t.add_row(s.path or "-", dev or "-", s.fs_type or "-", _gbs(s.seq_read_bytes_per_s), rnd,
                  _src(s.seq_read_bytes_per_s))
    return t


def figures(p: HardwareProfile) -> list[tuple[str, Figure, str]]:
    """Every figure in the profile: (what, figure, unit)."""
    out: list[tuple[str, Figure, str]] = []
    for n in p.numa_nodes:
        if n.dram_read_bytes_per_s:
            out.append((f"DRAM read, node {n.id}", n.dram_read_bytes_per_s, "GB/s"))
    if p.cpu.core_read_bytes_per_s:
        out.append(("DRAM read, one core", p.cpu.core_read_bytes_per_s, "GB/s"))
    if p.cpu.core_flop_per_s:
        out.append(("FP32 matmul, per core", p.cpu.core_flop_per_s, "GFLOP/s"))
    for g in p.gpus:
        for what, f, unit in (("memory", g.mem_bw_bytes_per_s, "GB/s"), ("FP16 tensor", g.fp16_flop_per_s, "TFLOP/s"),
                              ("host-to-GPU pinned", g.h2d_bytes_per_s, "GB/s"),
                              ("host-to-GPU pageable", g.h2d_pageable_bytes_per_s, "GB/s"),
                              ("GPU-to-host", g.d2h_bytes_per_s, "GB/s")):
            if f:
                out.append((f"GPU {g.index} {what}", f, unit))
    for s in p.storage:
        if s.seq_read_bytes_per_s:
            out.append(("storage sequential read", s.seq_read_bytes_per_s, "GB/s"))
        if s.rand4k_read_bytes_per_s:
            out.append(("storage 4 KiB random read", s.rand4k_read_bytes_per_s, "MB/s"))
    return out


_SCALE = {"GB/s": 1e9, "MB/s": 1e6, "GFLOP/s": 1e9, "TFLOP/s": 1e12}


def figures_tables(p: HardwareProfile) -> list[Table]:
    """Every figure (value = best sample or peak; effective = value x achievable, what the
    planner uses), then how each was obtained."""
    t = Table(title="figures (effective = value x achievable: what the planner uses)")
    for col in ("#", "figure", "value", "effective", "unit", "source", "samples", "spread"):
        t.add_column(col, justify="left" if col in ("figure", "unit", "source") else "right")
    how = Table(title="how each figure was obtained", show_lines=False)
    how.add_column("#", justify="right")
    how.add_column("method", overflow="fold")
    for i, (what, f, unit) in enumerate(figures(p), 1):
        k = _SCALE[unit]
        t.add_row(str(i), what, f"{f.value / k:.1f}", f"{f.effective / k:.1f}", unit, f.source,
                  str(f.n_samples or "-"), f"{f.spread:.0%}" if f.n_samples else "-")
        how.add_row(str(i), f.method or "-")
    return [t, how]


def hardware_tables(p: HardwareProfile) -> list[Table]:
    out: list[Table] = [summary_table(p), *numa_tables(p), *gpu_tables(p)]
    st = storage_table(p)
    if st is not None:
        out.append(st)
    out.extend(figures_tables(p))
    return out


def presets_table(rows: list[dict]) -> Table:
    t = Table(title="hardware presets (--hw NAME); RAM and VRAM in GiB")
    for col in ("name", "GPU", "VRAM GiB", "CPU", "RAM GiB", "NUMA nodes"):
        t.add_column(col, justify="right" if "GiB" in col or col == "NUMA nodes" else "left")
    for r in rows:
        t.add_row(r["name"], ", ".join(r["gpus"]) or "-", _gib(r["gpu_vram_bytes"]), r["cpu"],
                  _gib(r["ram_bytes"]), str(r["numa_nodes"]))
    return t


def parts_tables(gpus: list, cpus: list) -> list[Table]:
    g = Table(title="GPU catalog (VRAM GiB, bandwidth GB/s, FP16 dense TFLOPS)")
    for col in ("name", "VRAM GiB", "mem GB/s", "PCIe", "FP16 TFLOPS"):
        g.add_column(col, justify="left" if col in ("name", "PCIe") else "right")
    for p in gpus:
        g.add_row(p.name, "shared" if p.unified else _gib(p.vram_bytes), f"{p.mem_bw_bytes_per_s / 1e9:.0f}",
                  f"gen{p.pcie_gen} x{p.pcie_width}" if p.pcie_gen else "-", f"{p.fp16_flop_per_s / 1e12:.1f}")
    c = Table(title="CPU catalog (per socket)")
    for col in ("name", "cores", "threads", "base GHz", "channels", "memory", "max sockets"):
        c.add_column(col, justify="left" if col in ("name", "memory") else "right")
    for p in cpus:
        c.add_row(p.name, str(p.cores), str(p.threads), f"{p.base_hz / 1e9:.2f}", str(p.channels),
                  f"{p.ram_type.upper()}-{p.ram_speed_mts}", str(p.max_sockets))
    return [g, c]
