"""Range tiers (cost/ranges.py, issue 29 item 4): a prediction whose time is mostly the CPU's takes
the width of the train rows of that tier, says so in its JSON and in a note, and the benchmark
sets each tier's width from its own calibration rows."""
from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moeplan.cli import app
from moeplan.planner.cost.ranges import (
    CPU_BOUND_SHARE,
    cpu_share,
    held_out_range,
    range_key,
    range_tier,
    range_tier_note,
)
from moeplan.planner.plan import Term

ROOT = Path(__file__).resolve().parent.parent
CPU_BOUND = [Term("cpu_experts_read", 0.09, "cpu-mem", "x"), Term("gpu_weights_read", 0.01, "gpu-mem", "x")]
SHARED = [Term("cpu_experts_read", 0.05, "cpu-mem", "x"), Term("gpu_weights_read", 0.05, "gpu-mem", "x")]


def _bench():
    if "accuracy_bench_tiers" in sys.modules:
        return sys.modules["accuracy_bench_tiers"]
    spec = importlib.util.spec_from_file_location("accuracy_bench_tiers", ROOT / "benchmarks" / "accuracy.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["accuracy_bench_tiers"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_tier_is_the_cpu_share_of_the_time():
    assert cpu_share(CPU_BOUND) == pytest.approx(0.9) and range_tier(CPU_BOUND) == "cpu-bound"
    assert cpu_share(SHARED) == pytest.approx(0.5) and range_tier(SHARED) == "shared"
    edge = [Term("a", CPU_BOUND_SHARE, "cpu-compute", "x"), Term("b", 1 - CPU_BOUND_SHARE, "pcie", "x")]
    assert range_tier(edge) == "cpu-bound"
    assert range_tier([Term("nvme", 1.0, "nvme", "x")]) == "cpu-bound"  # the CPU group's disk reads
    assert range_tier([]) == "shared"
    # without a GPU or PCIe term all the time is the CPU's: a CPU-only run's barriers are its
    # thread pool's, whatever their share
    cpu_only = [Term("cpu_weights_read", 0.07, "cpu-mem", "x"), Term("barriers", 0.03, "sync", "x")]
    assert cpu_share(cpu_only) == 1.0 and range_tier(cpu_only) == "cpu-bound"
    assert range_tier(cpu_only + [Term("gpu", 0.01, "gpu-mem", "x")]) == "shared"  # 0.07 of 0.11


def test_each_tier_takes_its_own_width_and_says_why_it_is_wider():
    widths = {"all": 0.25, "cpu-bound": 0.55, "shared": 0.24}
    assert range_key(CPU_BOUND, widths) == "cpu-bound" and range_key(SHARED, widths) == "shared"
    assert range_key(CPU_BOUND, {"all": 0.3}) == "all" and range_key(CPU_BOUND, {}) is None
    lo, hi = held_out_range(10.0, CPU_BOUND, widths)
    assert (lo, hi) == pytest.approx((10 * math.exp(-0.55), 10 * math.exp(0.55)))
    note = range_tier_note("decode", "cpu-bound", CPU_BOUND, widths)
    assert note and note.startswith("decode range wider") and "90%" in note and "x1.73" in note
    # no note for a range no wider than the pooled one, nor for the pooled one itself, nor for a
    # shared range a little wider than the pooled one (the finite-sample level of fewer sources)
    assert range_tier_note("decode", "shared", SHARED, widths) is None
    assert range_tier_note("decode", "shared", SHARED, dict(widths, shared=0.3)) is None
    assert range_tier_note("decode", "cpu-bound", CPU_BOUND, dict(widths, **{"cpu-bound": 0.2})) is None
    assert range_tier_note("decode", "all", SHARED, widths) is None


def test_the_benchmark_sets_each_tiers_width_from_its_rows():
    b = _bench()
    row = b.Row({"id": "x"}, groups={"decode": {"cpu": 0.85, "gpu": 0.15}, "prefill": {"cpu": 0.2, "gpu": 0.8}})
    assert b._tier(row, "decode") == "cpu-bound" and b._tier(row, "prefill") == "shared"
    assert b._tier(b.Row({"id": "y"}, groups={"decode": {"cpu": 0.6, "fixed": 0.4}}), "decode") == "cpu-bound"
    # ten sources of wide CPU-bound rows, ten of tight shared ones: the CPU-bound width is the
    # wider, and a tier of too few sources takes none of its own
    wide = [("cpu-bound", 0.1 * (i - 5), False, f"c{i}") for i in range(12)]
    tight = [("shared", 0.02 * (i - 5), False, f"s{i}") for i in range(12)]
    w = b.range_widths(wide + tight)
    assert w["cpu-bound"][1] > w["all"][1] > w["shared"][1]
    assert "cpu-bound" not in b.range_widths(wide[:8] + tight)


def test_a_cpu_only_estimate_reports_its_tier_and_why_its_range_is_wider(tmp_path):
    """Through the CLI with the bundled fit.json: a CPU-only run is CPU-bound, and where the
    tier's train width is wider than the pooled one the note says so."""
    from moeplan.profiles.backends import fitted_terms

    widths = fitted_terms("llama.cpp").get("range_log_half_width", {}).get("decode", {})
    runner = CliRunner()
    hw = tmp_path / "hw.json"
    out = runner.invoke(app, ["hardware", "--json", "--cpu", "EPYC 9654", "--ram", "768GB", "--gpu", "RTX 4090"])
    assert out.exit_code == 0, out.output
    hw.write_text(out.stdout)
    d = json.loads(runner.invoke(app, ["estimate", "deepseek-v3", "--hw", str(hw), "--quant", "Q4_K_M",
                                       "--cpu-only", "--json"]).stdout)
    assert d["decode_range_tier"] == ("cpu-bound" if "cpu-bound" in widths else "all" if widths else "")
    wider = [n for n in d["notes"] if n.startswith("decode range wider")]
    assert bool(wider) == ("cpu-bound" in widths and widths["cpu-bound"] > widths.get("all", math.inf))
    g = json.loads(runner.invoke(app, ["estimate", "qwen3-30b-a3b", "--hw", str(hw), "--quant", "Q4_K_M",
                                       "--json"]).stdout)  # all on the GPU
    assert g["decode_range_tier"] == ("shared" if "shared" in widths else "all" if widths else "")
    assert not [n for n in g["notes"] if n.startswith("decode range wider")]
