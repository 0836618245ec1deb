"""GPU families' prompt-processing kernel efficiency (cost/gpu_kernels.py): each figure is a
cited llama-bench run of a dense model, its peak the parts catalog's, and the prior gpu_mfu is
scaled by it for AMD parts only."""
from __future__ import annotations

import importlib.util
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from moeplan.planner.cost import gpu_kernels as K
from moeplan.planner.cost.estimate import resolve_factors
from moeplan.planner.hardware.profile import Calibration
from moeplan.planner.placement import Placement
from moeplan.profiles import catalog
from moeplan.profiles.backends import read_priors
from moeplan.profiles.catalog import SpecRequest
from moeplan.units import GIB

ROOT = Path(__file__).resolve().parent.parent


def _split():
    spec = importlib.util.spec_from_file_location("moeplan_bench_split_gk", ROOT / "benchmarks" / "split.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["moeplan_bench_split_gk"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_every_run_is_cited_and_never_a_test_source():
    split = _split()
    test_sources = {split.source_key(r["source_url"]) for r in split.rows() if split.side(r["source_url"]) == "test"}
    for r in K.KERNEL_RUNS:
        assert r.source.startswith("https://github.com/"), r
        assert split.source_key(r.source) not in test_sources, r.source
    # the Strix Halo runs are the same repository snapshot the train split's rows cite
    kyuz0 = [r for r in K.KERNEL_RUNS if r.family == "rdna3.5"]
    assert kyuz0 and all("d1a34bee0900be574fc31be9dcdc02a925581889" in r.source for r in kyuz0)


def test_peaks_are_the_parts_catalogs():
    for r in K.KERNEL_RUNS:
        assert r.fp16_peak_flop_per_s == pytest.approx(catalog.find_gpu(r.gpu).fp16_flop_per_s, rel=1e-3), r.gpu


def test_shares_recomputed_by_hand():
    # Llama 2 7B: 6.738e9 - 2 x 32000 x 4096 = 6.476e9 matmul weights; pp512 attention at mean
    # depth 256: 4 x 32 x 4096 x 256 = 0.134 GFLOP; 13.086 GFLOP a token
    assert K.LLAMA2_7B.flop_per_token(512) == pytest.approx(2 * 6.47587e9 + 0.134218e9, rel=1e-5)
    rocm = next(r for r in K.KERNEL_RUNS if r.gpu == "AMD Radeon 8060S" and r.api.startswith("ROCm"))
    # 1545.36 tok/s x 13.086 GFLOP = 20.22 TFLOP/s of 59.4: 0.340
    assert rocm.share_of_peak == pytest.approx(0.3404, abs=0.001)
    # RTX 4090 llama 8B Q4_0 pp512: 10358.75 x (2 x 6.979e9 + 0.134e9) = 146.0 TFLOP/s of 330.3
    ref = next(r for r in K.KERNEL_RUNS if r.gpu == "NVIDIA GeForce RTX 4090")
    assert ref.share_of_peak == pytest.approx(0.442, abs=0.002)
    for r in K.KERNEL_RUNS:
        assert 0.2 < r.share_of_peak < 0.7, r  # well below the peak, above a memory-bound run


def test_amd_families_reach_less_of_their_peak_than_nvidia():
    # the RDNA 3.5 factor: mean of ROCm 0.340 and Vulkan 0.295 over NVIDIA's mean of 0.442, 0.502
    k, err, how = K.kernel_efficiency("amd", "gfx1151")
    assert k == pytest.approx(((0.3404 + 0.2947) / 2) / ((0.4420 + 0.5023) / 2), abs=0.01)
    assert 0.6 < k < 0.75 and 0.1 <= err < 0.3 and "rdna3.5" in how
    assert K.kernel_efficiency("amd", "gfx1100")[0] == pytest.approx(0.376 / 0.472, abs=0.01)
    # NVIDIA is the reference; unmeasured families (CDNA, RDNA 4) keep the prior
    assert K.kernel_efficiency("", "") == (1.0, 0.0, "")
    assert K.kernel_efficiency("amd", "gfx942") == (1.0, 0.0, "")
    assert K.kernel_efficiency("amd", "gfx1201") == (1.0, 0.0, "")


def test_the_prior_mfu_is_scaled_for_an_amd_gpu_and_a_calibration_is_not():
    p = Placement(n_gpu_layers=999, cpu_moe_layers=())
    pr = read_priors("llama.cpp")
    amd = catalog.build_profile(SpecRequest(gpu="Radeon 8060S", cpu="Ryzen AI Max+ 395", ram_bytes=128 * GIB))
    f = resolve_factors(amd, pr, p).gpu_flop_per_s
    k = K.kernel_efficiency("amd", "gfx1151")[0]
    peak = amd.gpus[0].fp16_flop_per_s
    assert peak is not None
    assert f.value == pytest.approx(peak.effective * pr.gpu_mfu * k, rel=1e-6)
    assert "rdna3.5" in f.source
    nv = catalog.build_profile(SpecRequest(gpu="RTX 4090", cpu="Ryzen 9 7950X", ram_bytes=128 * GIB))
    fn = resolve_factors(nv, pr, p).gpu_flop_per_s
    assert nv.gpus[0].fp16_flop_per_s is not None
    assert fn.value == pytest.approx(nv.gpus[0].fp16_flop_per_s.effective * pr.gpu_mfu, rel=1e-6)
    # an AMD profile without its LLVM target (unknown family) keeps the prior
    bare = replace(amd, gpus=(replace(amd.gpus[0], gfx_target=""),))
    assert resolve_factors(bare, pr, p).gpu_flop_per_s.value == pytest.approx(f.value / k, rel=1e-6)
    assert math.isfinite(k)
    # a calibration of gpu_mfu measured this GPU's kernels: it stands as it is
    cal = replace(amd, calibration=(Calibration(factors={"gpu_mfu": 0.12}, priors={"gpu_mfu": pr.gpu_mfu},
                                                backend="llama.cpp"),))
    fc = resolve_factors(cal, pr, p).gpu_flop_per_s
    assert fc.value == pytest.approx(peak.effective * 0.12, rel=1e-6) and "rdna3.5" not in fc.source
