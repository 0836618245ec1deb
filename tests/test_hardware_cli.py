"""`moeplan hardware` through typer's CliRunner, JSON parsed."""
from __future__ import annotations

import json

import pytest
from probe_trees import listing
from typer.testing import CliRunner

from moeplan.cli import app
from moeplan.planner.hardware.profile import HardwareProfile

GIB = 1024**3


def run(*args):
    return CliRunner().invoke(app, list(args))


def test_catalog_parts_to_json_and_out(tmp_path):
    out = tmp_path / "hw.json"
    r = run("hardware", "--gpu", "RTX 4090", "--gpu-count", "2", "--cpu", "EPYC 9355", "--sockets", "2",
            "--ram", "768G", "--out", str(out), "--json")
    assert r.exit_code == 0, r.stdout
    doc = json.loads(r.stdout)
    p = HardwareProfile.from_dict(doc)
    assert [g.name for g in p.gpus] == ["NVIDIA GeForce RTX 4090"] * 2 and p.origin == "spec"
    assert p.cpu.n_cores == 64 and p.cpu.memory_channels == 24 and p.system.ram_total_bytes == 768 * GIB
    # 12 channels x DDR5-6000 x 8 B per socket
    assert p.numa_nodes[0].dram_read_bytes_per_s.value == pytest.approx(576e9)
    assert json.loads(out.read_text()) == doc and listing(tmp_path) == {"hw.json"}
    assert "wrote" in r.stderr


def test_numbers_alone(tmp_path):
    r = run("hardware", "--gpu-vram", "96G", "--gpu-bw", "1792GB/s", "--pcie", "5x16", "--cores", "32",
            "--channels", "8", "--ram-type", "DDR5", "--ram-speed", "5200", "--sockets", "2", "--ram", "512G",
            "--numa-nodes", "2", "--isa", "avx2,avx512f,amx_int8", "--cpu-ghz", "2.5", "--disk", "nvme-gen5",
            "--name", "my box", "--json")
    assert r.exit_code == 0, r.stdout
    p = HardwareProfile.from_dict(json.loads(r.stdout))
    g = p.gpus[0]
    assert p.name == "my box" and g.vram_bytes == 96 * GIB and g.mem_bw_bytes_per_s.value == 1792e9
    assert (g.pcie_gen, g.pcie_width) == (5, 16) and g.mem_bw_bytes_per_s.source == "user"
    assert p.numa_nodes[1].dram_read_bytes_per_s.value == pytest.approx(332.8e9)
    assert p.cpu.isa == ("avx2", "avx512f", "amx_int8") and p.storage[0].seq_read_bytes_per_s.value == 14e9


def test_unknown_gpu_json_error():
    r = run("hardware", "--gpu", "RTX 4095", "--cpu", "Ryzen 9 7950X", "--ram", "64G", "--json")
    assert r.exit_code == 2
    err = json.loads(r.stdout)["error"]
    assert err["kind"] == "input" and "RTX 4090" in err["hint"] and "--gpu-vram" in err["hint"]


@pytest.mark.parametrize("args, words", [
    (["--pcie", "5by16"], "cannot read --pcie"),
    (["--ram-type", "ddr9"], "unknown --ram-type"),
    (["--isa", "avx1024"], "unknown ISA flag"),
    (["--sockets", "0"], "--sockets must be at least 1"),
    (["--gpu-vram", "banana"], "cannot read --gpu-vram"),
])
def test_bad_numbers(args, words):
    r = run("hardware", "--cores", "8", "--ram", "64G", *args, "--json")
    assert r.exit_code == 2 and words in json.loads(r.stdout)["error"]["message"]


def test_nothing_to_build():
    r = run("hardware")
    assert r.exit_code == 2 and "describe a machine" in r.stderr


def test_list_and_show():
    r = run("hardware", "--list", "--json")
    doc = json.loads(r.stdout)
    assert {p["name"] for p in doc["presets"]} >= {"seed-rtxpro6000-2x6548y", "desktop-4090-ddr5"}
    assert any(g["name"] == "NVIDIA H200" for g in doc["gpus"]) and any(c["name"] == "AMD EPYC 9654" for c in doc["cpus"])
    r = run("hardware", "--list")
    assert r.exit_code == 0 and "hardware presets" in r.stdout
    r = run("hardware", "--show", "desktop-4090-ddr5", "--json")
    assert json.loads(r.stdout)["origin"] == "preset"
    r = run("hardware", "--show", "seed-rtxpro6000-2x6548y")
    assert r.exit_code == 0 and "node distances" in r.stdout and "NUMA Affinity" in r.stdout


def test_memory_type_takes_the_parts_rating_for_that_type():
    def cpu_of(*args):
        r = run("hardware", *args, "--ram", "64G", "--json")
        assert r.exit_code == 0, r.stdout
        return json.loads(r.stdout)["cpu"]

    # LGA1700 runs DDR4 at its DDR4 rating, not the DDR5 one
    c = cpu_of("--cpu", "Core i7-14700K", "--ram-type", "ddr4")
    assert (c["ram_type"], c["ram_speed_mts"]) == ("ddr4", 3200)
    # MRDIMM is a DDR5 channel at the part's MRDIMM rating; --ram-speed still wins
    assert cpu_of("--cpu", "Xeon 6960P", "--ram-type", "mrdimm")["ram_speed_mts"] == 8800
    assert cpu_of("--cpu", "Xeon 6960P", "--ram-type", "mrdimm", "--ram-speed", "8000")["ram_speed_mts"] == 8000
    assert cpu_of("--cpu", "Xeon 6960P")["ram_speed_mts"] == 6400
    # a GPU with soldered LPDDR5X beside it: the laptop stand-in at its LPDDR5X rating
    c = cpu_of("--gpu", "RTX 4090 Laptop", "--ram-type", "lpddr5x")
    assert (c["model"], c["ram_speed_mts"]) == ("AMD Ryzen 7 7840HS", 7500)
