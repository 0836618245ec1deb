"""Public CUDA runs' buffer figures (tests/data/cuda_reports/train.json, TRAINING data): every
record names its source, and what moeplan can predict from a report today is checked, per
device, by the comparison of benchmarks/cuda_reports.py (which prints the same rows)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from moeplan.planner.memory.kv import kv_cache_bytes, kv_layer_bytes
from moeplan.profiles.model_profiles import load_profile
from moeplan.units import MIB

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from cuda_reports import KV_EXACT_MIB, compare, placement_of, predictable  # noqa: E402

DATA = json.loads((Path(__file__).parent / "data" / "cuda_reports" / "train.json").read_text())
REPORTS = {r["id"]: r for r in DATA["reports"]}
PREDICTABLE = [r["id"] for r in DATA["reports"] if predictable(r)]
ROWS = {rid: compare(REPORTS[rid])[0] for rid in PREDICTABLE}
KV_ROWS = [(rid, row.device) for rid in PREDICTABLE for row in ROWS[rid] if row.kind == "KV"]
COMPUTE_REPORTS = [rid for rid in PREDICTABLE if any(row.kind == "compute" for row in ROWS[rid])]

# Issue 33's target for the compute buffer (within 5% of llama.cpp's and never below) is not
# met today for these reports: strict xfails, so a fix of the CUDA accounting flips them.
COMPUTE_MISSES = {
    "ik259-deepseek-r1-a6000-mla2-q8kv": "ik_llama.cpp -mla 2 -fa -amb 2048 with every expert on the CPU, build "
                                         "f2fb15de: before #260 (9fe2b06f7) FlashMLA-2 decompressed K and V "
                                         "of all 128 heads at once (kv_f32 4096 MiB at 32K), -amb did not "
                                         "bound it; moeplan prices the current graph with mainline's terms",
    "llama24162-dsv4-flash-8x3090": "DeepSeek-V4 with -fa off on 8 GPUs: the non-FA attention of the "
                                    "compressed layers",
}


def test_records_name_their_source_and_are_training_data():
    assert DATA["split"] == "train" and "training" in DATA["use"]
    assert len(REPORTS) == len(DATA["reports"])
    for r in DATA["reports"]:
        assert r["url"].startswith("https://") and r["by"], r["id"]
        figures = [v for d in r.get("devices", []) + r.get("breakdown", []) for k, v in d.items()
                   if k.endswith("_mib") and k != "unaccounted_mib"]  # unaccounted may be negative
        figures += [v for k, v in r.items() if k.endswith(("_mib", "_gib"))]
        assert figures, r["id"]
        assert all(isinstance(v, (int, float)) and v >= 0 for v in figures), r["id"]


@pytest.mark.parametrize("rid", [r["id"] for r in DATA["reports"] if r.get("breakdown")])
def test_breakdown_rows_add_up(rid):
    """common_memory_breakdown_print: self = model + context + compute, and for a device
    total = free + self + unaccounted (common/fit.cpp:921-923), each term rounded to a MiB on
    its own (so within 2 MiB); a transcription error fails."""
    for row in REPORTS[rid]["breakdown"]:
        assert abs(row["self_mib"] - (row["model_mib"] + row["context_mib"] + row["compute_mib"])) <= 2, row
        if "unaccounted_mib" in row:
            assert abs(row["total_mib"] - (row["free_mib"] + row["self_mib"] + row["unaccounted_mib"])) <= 2, row


def test_deepseek_r1_mla_cache_per_device_is_exact():
    """ik_llama.cpp -mla 2, f16, 163840 cells, 15 GPUs: the c^KV cache (576 values per cell and
    layer) of moeplan's DeepSeek-V3 profile, the same geometry as R1, to the MiB, in total and
    per device from the layers each holds."""
    r = REPORTS["ik237-deepseek-r1-15gpu"]
    m = load_profile(r["profile"])
    ctx = r["flags"]["n_ctx"]
    assert kv_cache_bytes(m, ctx, "f16", "f16") == round(r["kv_total_mib"] * MIB)
    per_layer = kv_layer_bytes(m.layers[5], ctx, "f16", "f16")
    for d in r["devices"]:
        assert d["kv_layers"] * per_layer == round(d["kv_mib"] * MIB), d["name"]


def test_the_set_is_large_enough_and_covers_the_cases():
    """Issue 33 item 1 asks for 30 public runs; the predictable ones cover one and several
    GPUs, all experts on the CPU and none, a quantized cache, flash attention on and off."""
    assert len(REPORTS) >= 30
    flags = [REPORTS[rid].get("flags", {}) for rid in PREDICTABLE]
    n_gpus = [REPORTS[rid]["predict"].get("n_gpus", 1) for rid in PREDICTABLE]
    assert 1 in n_gpus and max(n_gpus) > 1
    assert any(REPORTS[rid]["predict"].get("cpu_moe") for rid in PREDICTABLE)
    assert any(f.get("cache_type_k") == "q8_0" for f in flags)
    assert {True, False} <= {f.get("flash_attn") for f in flags}


@pytest.mark.parametrize("rid", PREDICTABLE)
def test_predictable_reports_state_their_settings(rid):
    """A report is predicted only from settings it states (the context always; flash
    attention unless only its KV cache is compared); the rest are the tools' fixed defaults."""
    r = REPORTS[rid]
    assert "n_ctx" in r["flags"], rid
    _, p, defaults = placement_of(r)
    assert p.n_ctx == r["flags"]["n_ctx"]
    assert set(defaults) <= {"n_ubatch", "n_batch", "cache_type_k", "n_seq"}
    assert not set(defaults) & set(r["flags"])


@pytest.mark.parametrize("rid,device", KV_ROWS)
def test_kv_buffer_is_exact(rid, device):
    """Every KV buffer moeplan can predict from a public CUDA run, per device (its blocks under
    the stated -ts) or in total: exact to the buffer's alignment."""
    row = next(r for r in ROWS[rid] if r.kind == "KV" and r.device == device)
    assert abs(row.predicted_mib - row.reported_mib) <= KV_EXACT_MIB, row


@pytest.mark.parametrize("rid", [
    pytest.param(rid, marks=pytest.mark.xfail(strict=True, reason=COMPUTE_MISSES[rid])) if rid in COMPUTE_MISSES
    else rid for rid in COMPUTE_REPORTS])
def test_compute_buffer_within_5pct_and_never_below(rid):
    """Issue 33 item 3's target, per device: moeplan's compute buffer at or above llama.cpp's
    (a prediction below it crashes the load) and at most 5% above."""
    for row in ROWS[rid]:
        if row.kind == "compute":
            assert 0 <= row.error <= 0.05, row


VRAM_REPORTS = [rid for rid in PREDICTABLE if any(row.kind == "VRAM" for row in ROWS[rid])]
VRAM_MISSES = {
    "ik259-deepseek-r1-a6000-mla2-q8kv": "the compute buffer of -mla 2 -fa -amb 2048 (above) is 5.2 GiB short",
    "page-gptoss120b-ncpumoe36-8gb": "5% below the author's 'about 8GB'",
    "reddit1rei65v-qwen35-35b-q8-exps-cpu": "issue 33's Qwen3.5-35B-A3B case at the default -ub 512; the runs set "
                                            "unstated batch flags (-7.5% at an assumed -ub 4096, docs/cuda-vram.md)",
    "reddit1rei65v-qwen35-35b-q4km-exps-cpu": "issue 33's Qwen3.5-35B-A3B case at the default -ub 512; the runs set "
                                              "unstated batch flags (-6.7% at an assumed -ub 4096)",
    "reddit1rei65v-qwen35-35b-q4km-ncpumoe24": "issue 33's Qwen3.5-35B-A3B case with 24 MoE layers on the CPU at "
                                               "-ub 512 (-4.3% at an assumed -ub 4096)",
}


@pytest.mark.parametrize("rid", [
    pytest.param(rid, marks=pytest.mark.xfail(strict=True, reason=VRAM_MISSES[rid])) if rid in VRAM_MISSES
    else rid for rid in VRAM_REPORTS])
def test_total_vram_within_10pct_and_never_below_a_reading(rid):
    """Issue 33 item 3: the total a user sees (every buffer, the CUDA context and pool) at or
    above the report's reading and at most 10% above it."""
    row = next(r for r in ROWS[rid] if r.kind == "VRAM")
    assert 0 <= row.error <= 0.10, row


def test_the_expected_misses_are_predictable_reports():
    assert set(COMPUTE_MISSES) <= set(COMPUTE_REPORTS)
    assert set(VRAM_MISSES) <= set(VRAM_REPORTS)
