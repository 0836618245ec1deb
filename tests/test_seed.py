"""The seed machine check (issue: DeepSeek-V4-Flash, 151 GiB file, on the seed preset).

The public figures (benchmarks/data/measurements.jsonl: seed-dsv4flash-*): all experts on the CPU
about 17.7 GiB of VRAM and ~7 tok/s; 20 MoE layers' experts on the CPU about 91.9 GiB and
~25 tok/s. Sizes from that source are binary (GiB), so the file is --size 151G.
"""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from moeplan.cli import app

GIB = 1024**3
BASE = ["deepseek-v4-flash", "--size", "151G"]


@pytest.fixture(scope="module")
def seed_hw(tmp_path_factory) -> str:
    """The seed preset as the seed ran it: on Windows (benchmarks/data: seed-* rows, "os")."""
    out = CliRunner().invoke(app, ["hardware", "--show", "seed-rtxpro6000-2x6548y", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    doc = doc.get("profile", doc)
    doc["os"] = "windows"
    path = tmp_path_factory.mktemp("seed") / "seed-windows.json"
    path.write_text(json.dumps(doc))
    return str(path)


def _est(hw: str, *extra: str) -> dict:
    out = CliRunner().invoke(app, ["estimate", *BASE, "--hw", hw, *extra, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_twenty_cpu_layers_vram_and_decode(seed_hw):
    d = _est(seed_hw, "--cpu-moe-layers", "20")
    assert d["vram_bytes"] / GIB == pytest.approx(91.9, rel=0.05)
    assert d["decode_tok_s"] == pytest.approx(25, rel=0.25)


def test_the_vram_gap_between_the_two_runs_is_23_layers_of_experts(seed_hw):
    # independent of context and runtime overhead: what 23 layers' experts weigh
    gap = _est(seed_hw, "--cpu-moe-layers", "20")["vram_bytes"] - _est(seed_hw, "--all-cpu-moe")["vram_bytes"]
    assert gap / GIB == pytest.approx(91.9 - 17.7, rel=0.03)


@pytest.mark.xfail(strict=True, reason="moeplan predicts 14.9 GiB at ctx 4096 (weights 12.9, compute 1.2, "
                   "context 0.6): the seed's context, ubatch and Windows/WDDM overhead are not stated; "
                   "moeplan reaches 17.6 GiB at ctx 256k with -ub 2048")
def test_all_experts_on_the_cpu_vram_at_the_default_context(seed_hw):
    assert _est(seed_hw, "--all-cpu-moe")["vram_bytes"] / GIB == pytest.approx(17.7, rel=0.10)


def test_tune_on_96g_recommends_a_plan_at_least_as_fast_that_fits():
    out = CliRunner().invoke(app, ["tune", *BASE, "--hw", "seed-rtxpro6000-2x6548y", "--vram", "96G", "--json"])
    assert out.exit_code == 0, out.output
    plan = json.loads(out.stdout)["plan"]
    assert plan["estimate"]["vram_required_bytes"] <= 96 * GIB
    assert plan["estimate"]["decode_tok_s"] >= 25
