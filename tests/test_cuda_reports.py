"""Public CUDA runs' buffer figures (tests/data/cuda_reports/train.json, TRAINING data): every
record names its source, and what moeplan can predict from a report today is checked."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from moeplan.planner.memory.kv import kv_cache_bytes, kv_layer_bytes
from moeplan.profiles.model_profiles import load_profile
from moeplan.units import MIB

DATA = json.loads((Path(__file__).parent / "data" / "cuda_reports" / "train.json").read_text())
REPORTS = {r["id"]: r for r in DATA["reports"]}


def test_records_name_their_source_and_are_training_data():
    assert DATA["split"] == "train" and "training" in DATA["use"]
    assert len(REPORTS) == len(DATA["reports"])
    for r in DATA["reports"]:
        assert r["url"].startswith("https://github.com/") and r["by"], r["id"]
        figures = [v for d in r.get("devices", []) + r.get("breakdown", []) for k, v in d.items()
                   if k.endswith("_mib") and k != "unaccounted_mib"]  # unaccounted may be negative
        assert figures or "vram_used_gib" in r, r["id"]
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
