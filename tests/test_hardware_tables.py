"""Rendering and the warnings that matter for offload."""
from __future__ import annotations

from dataclasses import replace
from io import StringIO

from probe_trees import FakeNvml, gpu_dev, server_tree
from rich.console import Console

from moeplan.planner.hardware.profile import Figure, Load, profile_warnings
from moeplan.probes.probe import read_machine
from moeplan.profiles import catalog
from moeplan.ui.hardware_tables import hardware_tables

NO_TOOLS = {"which": lambda name: None, "find_library": lambda name: None}


def render(p) -> str:
    con = Console(file=StringIO(), width=140, color_system=None)
    for t in hardware_tables(p):
        con.print(t)
    return con.file.getvalue()


def _server(tmp_path, **gpu):
    return read_machine(str(server_tree(tmp_path)), FakeNvml([gpu_dev(**gpu)]), system_kwargs=NO_TOOLS).profile


def test_server_tables_read_like_numactl_and_nvidia_smi(tmp_path):
    text = render(_server(tmp_path))
    assert "NUMA: available: 2 node(s) (0-1)" in text
    assert "node distances" in text and "│ 1    │ 21 │ 10 │" in text
    assert "CPU Affinity" in text and "8-15,24-31" in text and "NUMA Affinity" in text
    assert "RTX PRO 6000 Blackwell Workstation Edition" in text and "1792.1" in text
    assert "DDR5-5200, 16 channels, 4 DIMMs (dmi)" in text


def test_link_below_max_under_load(tmp_path):
    p = _server(tmp_path, gen=1)  # idle at gen 1 is power saving, not a warning
    assert not any("PCIe" in w for w in profile_warnings(p))
    g = replace(p.gpus[0], pcie_gen_loaded=3, pcie_width_loaded=16)
    w = profile_warnings(replace(p, gpus=(g,)))
    assert any("ran at gen 3 under load (max gen 5)" in x for x in w)
    g = replace(p.gpus[0], pcie_width=8)
    assert any("x8 of x16" in x for x in profile_warnings(replace(p, gpus=(g,))))


def test_busy_machine_and_noisy_figures(tmp_path):
    p = _server(tmp_path)
    assert not any("busy" in w for w in profile_warnings(p))
    busy = replace(p, load=Load(loadavg_1m_before=20.0, cpu_busy_before=0.6, cpu_busy_after=0.1))
    (w,) = [x for x in profile_warnings(busy) if "busy" in x]
    assert "60% of CPU time busy" in w and "load average 20.00 on 32 CPUs" in w
    noisy = replace(p.numa_nodes[0], dram_read_bytes_per_s=Figure(1e11, "measured", n_samples=5, spread=0.4))
    assert any("DRAM read node 0: samples spread 40%" in x
               for x in profile_warnings(replace(p, numa_nodes=(noisy, p.numa_nodes[1]))))


def test_spec_profiles_do_not_warn_about_smt():
    p = catalog.load_preset("seed-rtxpro6000-2x6548y")
    assert profile_warnings(p) == ()
    text = render(p)
    assert "spec-sheet" in text and "prior" in text and "how each figure was obtained" in text
