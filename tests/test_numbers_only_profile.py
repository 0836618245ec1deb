"""Numbers-only machines (`moeplan hardware` with no part names): the x86 ISA and clock
priors, the VRAM-class bandwidth prior, and `estimate` on such a profile (issue 16)."""
from __future__ import annotations

import json
import statistics
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from moeplan.cli import app
from moeplan.errors import InputError
from moeplan.planner.cost.estimate import cpu_isa_class, resolve_factors
from moeplan.planner.hardware.profile import HardwareProfile
from moeplan.planner.hardware.spec import SpecRequest
from moeplan.profiles import catalog

GIB = 1024**3


def _numbers(**kw) -> HardwareProfile:
    base = dict(cores=16, channels=2, ram_type="ddr5", ram_speed_mts=5600, ram_bytes=64 * GIB)
    base.update(kw)
    return catalog.build_profile(SpecRequest(**base))


def test_x86_cpu_by_numbers_gets_avx2_and_the_catalog_clock():
    p = _numbers()
    assert "avx2" in p.cpu.isa and "avx512f" not in p.cpu.isa and cpu_isa_class(p) == "avx2"
    desktop = [c.base_hz for c in catalog.cpu_parts() if c.segment == "desktop" and not c.mobile]
    assert p.cpu.base_clock_hz == statistics.median(desktop)
    assert p.cpu.core_flop_per_s.source == "prior"
    assert any("x86 with AVX2" in n for n in p.notes) and any("median base clock" in n for n in p.notes)


def test_server_numbers_take_the_server_clock_and_given_numbers_win():
    p = _numbers(channels=8, cores=32)
    server = [c.base_hz for c in catalog.cpu_parts() if c.segment == "server" and not c.mobile]
    assert p.cpu.base_clock_hz == statistics.median(server)
    q = _numbers(cpu_ghz=2.9, isa=("avx2", "avx512f"))
    assert q.cpu.base_clock_hz == 2.9e9 and q.cpu.isa == ("avx2", "avx512f")
    assert q.cpu.core_flop_per_s.source == "user" and not any("x86 with AVX2" in n for n in q.notes)


@pytest.mark.parametrize("vram_gib, lo_gbps, hi_gbps", [(8, 192, 608), (24, 672, 1008), (12, 192, 912)])
def test_gpu_by_vram_alone_gets_the_class_prior(vram_gib, lo_gbps, hi_gbps):
    p = _numbers(gpu_vram_bytes=vram_gib * GIB)
    bw = p.gpus[0].mem_bw_bytes_per_s
    same = [g.mem_bw_bytes_per_s for g in catalog.gpu_parts() if round(g.vram_bytes / GIB, 1) == vram_gib]
    assert bw.source == "prior" and bw.value == statistics.median(same)
    assert lo_gbps * 1e9 <= bw.value <= hi_gbps * 1e9
    assert bw.spread == pytest.approx((max(same) - min(same)) / bw.value)
    assert any(f"{vram_gib} GiB" in n and "--gpu-bw" in n for n in p.notes)


def test_odd_vram_takes_the_nearest_class():
    p = _numbers(gpu_vram_bytes=22 * GIB)
    assert "24 GiB" in p.gpus[0].mem_bw_bytes_per_s.method


def test_prior_bandwidth_widens_the_range():
    p = _numbers(gpu_vram_bytes=8 * GIB)
    given = _numbers(gpu_vram_bytes=8 * GIB, gpu_bw_bytes_per_s=p.gpus[0].mem_bw_bytes_per_s.value)
    from moeplan.planner.placement import Placement
    from moeplan.profiles.backends import read_priors as load_priors
    pr = load_priors("llama.cpp")
    pl = Placement(n_threads=8, n_gpus=1)
    a, b = resolve_factors(p, pr, pl), resolve_factors(given, pr, pl)
    assert a.bw_gpu_bytes_per_s.value == pytest.approx(b.bw_gpu_bytes_per_s.value)
    assert a.bw_gpu_bytes_per_s.rel_err > b.bw_gpu_bytes_per_s.rel_err


def test_a_gpu_without_bandwidth_is_an_input_error_not_a_crash():
    p = _numbers(gpu_vram_bytes=8 * GIB)
    bare = replace(p, gpus=(replace(p.gpus[0], mem_bw_bytes_per_s=None),))
    from moeplan.planner.placement import Placement
    from moeplan.profiles.backends import read_priors as load_priors
    with pytest.raises(InputError, match="no memory bandwidth"):
        resolve_factors(bare, load_priors("llama.cpp"), Placement(n_threads=8, n_gpus=1))


def test_estimate_runs_on_a_vram_only_profile(tmp_path):
    hw = tmp_path / "hw.json"
    r = CliRunner().invoke(app, ["hardware", "--gpu-vram", "8G", "--cores", "8", "--channels", "2",
                                 "--ram-type", "ddr4", "--ram-speed", "3200", "--ram", "32G", "--out", str(hw)])
    assert r.exit_code == 0, r.output
    doc = json.loads(hw.read_text())
    assert doc["gpus"][0]["mem_bw_bytes_per_s"]["source"] == "prior"
    r = CliRunner().invoke(app, ["estimate", "qwen3-30b-a3b", "--hw", str(hw), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out
    # experts on the CPU with op-offload: prefill uploads them over a link the profile does not
    # state; the PCIe 4.0 x16 prior keeps the figure finite (it was 0 tok/s)
    r = CliRunner().invoke(app, ["estimate", "qwen3-30b-a3b", "--hw", str(hw), "--json", "--all-cpu-moe",
                                 "--prompt", "4096"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    h2d = next(t for t in out["prefill_terms"] if t["name"] == "h2d_experts")
    assert h2d["seconds"] > 0
    assert 10 < out["prefill_tok_s"] < 1e5
    assert "PCIe 4.0 x16 assumed" in out["factors"]["h2d_bytes_per_s"]["source"]
