"""Quantized prefill GEMMs run at the core's integer SIMD width, not its FP32 FMA peak
(cost/machine.py quant_gemm_x, cost/kernels.py CpuRates.int_x)."""
from __future__ import annotations

import pytest

from moeplan.planner.cost import machine
from moeplan.planner.cost.resolve import resolve_factors
from moeplan.planner.cost.work import cpu_rates
from moeplan.planner.placement import Placement
from moeplan.profiles import catalog
from moeplan.profiles.backends import read_priors
from moeplan.profiles.catalog import SpecRequest
from moeplan.units import GIB


def _hw(cpu: str, sockets: int = 1):
    return catalog.build_profile(SpecRequest(cpu=cpu, sockets=sockets, ram_bytes=512 * GIB))


@pytest.mark.parametrize(("cpu", "backend", "x"), [
    ("Ryzen 9 7950X", "ik_llama.cpp", 1.0),      # the anchor: Zen 4, 4 x 256 bits, 32 FLOP/cycle
    ("EPYC 9355", "ik_llama.cpp", 1.0),          # Zen 5: 4 x 512 bits, 64 FLOP/cycle
    ("EPYC 7773X", "ik_llama.cpp", 1.0),         # Zen 3: 4 x 256 bits, 32 FLOP/cycle
    ("Xeon 6980P", "ik_llama.cpp", 0.5),         # 2 x 512-bit ports, 64 FLOP/cycle
    ("Xeon 6980P", "llama.cpp", 0.5),
    ("Xeon Gold 6138", "ik_llama.cpp", 0.375),   # no VNNI: ik's AVX2 kernels, 3 x 256 bits, 64 FLOP/cycle
    ("Xeon Gold 6138", "llama.cpp", 0.5),        # mainline's AVX-512 kernels
    ("Core i9-9900T", "ik_llama.cpp", 0.75),     # 3 x 256 bits, 32 FLOP/cycle
])
def test_quant_gemm_x_is_int_simd_bits_over_fp32_peak(cpu, backend, x):
    assert machine.quant_gemm_x(_hw(cpu), backend)[0] == pytest.approx(x)


def test_one_fma_unit_xeon_has_one_512_bit_port():
    # Gold 5218: one 512-bit FMA unit (cpus.toml fp32_flop_per_cycle = 32): port 0 only
    hw = _hw("Xeon Gold 5218")
    assert machine.fp32_flop_per_cycle(hw) == pytest.approx(32)
    assert machine.int_simd_bits_per_cycle(hw, 512) == 512
    assert machine.int_simd_bits_per_cycle(_hw("Xeon Gold 6226"), 512) == 1024
    assert machine.quant_gemm_x(hw, "ik_llama.cpp")[0] == pytest.approx(0.5)


def _per_core_clock(cpu: str, backend: str, threads: int, path: str) -> float:
    hw = _hw(cpu)
    pr = read_priors(backend)
    rates = cpu_rates(hw, pr, resolve_factors(hw, pr, Placement(n_threads=threads)))
    clock, _ = machine.all_core_clock_hz(hw, 2.0e9)
    return rates.gemm_flop_per_s(path) / (threads * clock)


def test_granite_rapids_and_zen4_cores_run_ik_gemm_alike_per_clock():
    # both issue 1024 bits of integer SIMD a cycle (2 x 512-bit ports; 4 x 256-bit pipes), though
    # the Xeon's FP32 FMA peak per cycle is twice the Zen 4's
    gnr = _per_core_clock("Xeon 6980P", "ik_llama.cpp", 64, "iqk_repack")
    zen4 = _per_core_clock("EPYC 9654", "ik_llama.cpp", 64, "iqk_repack")
    assert gnr == pytest.approx(zen4, rel=0.02)


def test_paths_outside_gemm_peak_x_keep_the_fp32_rate():
    # KTransformers' 'gemm' is anchored on a Sapphire Rapids box itself (backends.toml)
    hw = _hw("Xeon Gold 6454S")
    pr = read_priors("ktransformers")
    rates = cpu_rates(hw, pr, resolve_factors(hw, pr, Placement(n_threads=32)))
    assert rates.int_x == pytest.approx(0.5)
    assert rates.gemm_flop_per_s("gemm") == pytest.approx(rates.fp_gemm_flop_per_s)


def test_amx_tiles_keep_their_multiple_of_the_fp32_peak():
    hw = _hw("Xeon 6980P")
    pr = read_priors("llama.cpp")
    rates = cpu_rates(hw, pr, resolve_factors(hw, pr, Placement(n_threads=64)))
    assert rates.isa == "amx" and rates.int_x == pytest.approx(0.5)
    assert rates.gemm_flop_per_s("amx") == pytest.approx(pr.gemm_peak_x["amx"]["amx"] * rates.peak_flop_per_s)
    assert rates.gemm_flop_per_s("repack") == pytest.approx(
        pr.gemm_peak_x["repack"]["amx"] * 0.5 * rates.peak_flop_per_s)


def test_a_probed_flop_figure_keeps_the_quantized_rate_at_the_int_width():
    # `moeplan probe` stores an achieved numpy matmul rate, not the peak: the quantized paths'
    # rate (peak x int_x) then depends on the integer width and the clock alone
    from dataclasses import replace

    from moeplan.planner.hardware.profile import Figure

    hw = _hw("Xeon 6980P")
    measured = replace(hw, cpu=replace(hw.cpu, core_flop_per_s=Figure(
        value=0.7 * hw.cpu.core_flop_per_s.value, source="measured", achievable=1.0)))
    assert machine.intel_fma_units(measured) == 2
    x_spec, _ = machine.quant_gemm_x(hw, "ik_llama.cpp")
    x_meas, _ = machine.quant_gemm_x(measured, "ik_llama.cpp")
    assert 0.7 * x_meas == pytest.approx(x_spec)
