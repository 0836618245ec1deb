"""Bundled presets are honest spec-sheet profiles: each one is exactly what `moeplan hardware`
builds from its recorded inputs, and fills every field the planner reads."""
from __future__ import annotations

import json

import pytest

from moeplan.errors import InputError
from moeplan.profiles import catalog

PRESETS = ["seed-rtxpro6000-2x6548y", "desktop-4090-ddr5", "desktop-5080-ddr5", "desktop-3060-ddr4",
           "epyc-genoa-2s-4090"]
STAMPS = ("created", "moeplan_version")  # set by the command that wrote the file


def _file(name):
    with open(catalog.profiles_dir() / "hardware" / f"{name}.json", encoding="utf-8") as f:
        return json.load(f)


def test_the_five_presets_exist():
    assert sorted(r["name"] for r in catalog.list_presets()) == sorted(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_preset_is_rebuilt_from_its_inputs(name):
    data = _file(name)
    rebuilt = catalog.build_profile(catalog.spec_request(data["spec_inputs"])).to_dict()
    for k in STAMPS:
        data.pop(k)
        rebuilt.pop(k)
    assert rebuilt == data


@pytest.mark.parametrize("name", PRESETS)
def test_preset_fills_what_the_planner_reads(name):
    p = catalog.load_preset(name)
    assert p.origin == "preset" and p.name == name
    assert p.gpus and p.numa_nodes and p.system.ram_total_bytes > 0
    for g in p.gpus:
        assert g.vram_bytes > 0 and g.pcie_gen and g.pcie_width and g.numa_node is not None
        for f in (g.mem_bw_bytes_per_s, g.fp16_flop_per_s, g.h2d_bytes_per_s):
            assert f.source in ("spec-sheet", "user") and 0 < f.achievable < 1 and f.method
    for n in p.numa_nodes:
        f = n.dram_read_bytes_per_s
        assert f.source in ("spec-sheet", "user") and 0 < f.achievable < 1
        assert n.n_physical_cores > 0 and n.mem_total_bytes > 0 and n.cpus
    c = p.cpu
    assert c.n_cores and c.n_sockets and c.isa and c.memory_channels and c.ram_type and c.ram_speed_mts
    assert c.core_read_bytes_per_s.source == "prior" and c.core_flop_per_s.source == "spec-sheet"
    assert p.numa_bw_matrix == ()  # only a probe measures cross-node reads


def test_seed_preset_is_the_calibration_machine():
    p = catalog.load_preset("seed-rtxpro6000-2x6548y")
    assert p.gpus[0].name == "NVIDIA RTX PRO 6000 Blackwell" and p.gpus[0].vram_bytes == 96 * 1024**3
    assert p.cpu.n_sockets == 2 and p.cpu.n_cores == 64 and len(p.numa_nodes) == 2 and p.gpus[0].numa_node == 0
    assert p.system.ram_total_bytes == 512 * 1024**3 and p.storage == ()  # the source states no disk


def test_unknown_preset():
    with pytest.raises(InputError) as e:
        catalog.load_preset("desktop-4090")
    assert "desktop-4090-ddr5" in e.value.hint
