"""Issue 32 item 2: `estimate` of a placement over a budget says so in the table, the notes and
the JSON (fits false, which budget, by how much) and prices what a real run does."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from moeplan.cli import app

GIB = 1024**3


def run(*args):
    return CliRunner().invoke(app, list(args))




def test_vram_over_budget_json(hw3090):
    r = run("estimate", "glm-4.5-air", "--hw", hw3090, "--cpu-moe-layers", "0", "--ctx", "32k", "--json")
    assert r.exit_code == 0, r.stdout
    doc = json.loads(r.stdout)
    assert doc["fits"] is False
    fit = doc["fit"]
    assert fit["budget"] == "vram" and fit["budget_bytes"] == 24 * GIB
    assert fit["short_bytes"] == fit["needed_bytes"] - fit["budget_bytes"] > 40 * GIB
    assert "fails to load" in fit["outcome"]
    # what really happens: no speed at all; the figures if it fit are in the notes
    assert doc["decode_tok_s"] == 0 and doc["prefill_tok_s"] == 0
    assert any(n.startswith("does not fit: VRAM short by") for n in doc["notes"])
    assert any(n.startswith("if it fit: decode") for n in doc["notes"])


def test_vram_over_budget_table(hw3090):
    r = run("estimate", "glm-4.5-air", "--hw", hw3090, "--cpu-moe-layers", "0", "--ctx", "32k")
    assert r.exit_code == 0
    text = " ".join(r.stdout.split())
    assert "DOES NOT FIT VRAM: needs 72.98 GiB, budget 24.00 GiB, short by 48.98 GiB" in text
    assert "OVER BUDGET: vram" in text and "it does not load" in text


def test_fitting_placement_says_fits(hw3090):
    r = run("estimate", "glm-4.5-air", "--hw", hw3090, "--all-cpu-moe", "--json")
    doc = json.loads(r.stdout)
    assert doc["fits"] is True and doc["fit"]["budget"] is None and doc["decode_tok_s"] > 1


def test_numa_bind_over_node_pages_from_disk(hw_epyc):
    r = run("estimate", "deepseek-v3", "--hw", hw_epyc, "--all-cpu-moe", "--numa", "bind", "--ctx", "32k", "--json")
    assert r.exit_code == 0, r.stdout
    doc = json.loads(r.stdout)
    assert doc["fits"] is False and doc["fit"]["budget"] == "numa_node"
    assert doc["fit"]["budget_bytes"] == 256 * GIB and doc["fit"]["short_bytes"] > 50 * GIB
    assert "from the disk" in doc["fit"]["outcome"]
    if_fit = float(next(n for n in doc["notes"] if n.startswith("if it fit")).split()[4])
    assert 0 < doc["decode_tok_s"] < if_fit / 5
    r = run("estimate", "deepseek-v3", "--hw", hw_epyc, "--all-cpu-moe", "--numa", "distribute", "--ctx", "32k",
            "--json")
    assert json.loads(r.stdout)["fits"] is True
