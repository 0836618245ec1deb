"""Thread barriers per decode block (cost/graph.py) against llama.cpp's own graphs, and the
core-to-core hand-over that prices them (cost/machine.py barrier_handoff_s)."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from moeplan.planner.cost import graph, machine
from moeplan.planner.cost.estimate import estimate
from moeplan.planner.hardware.spec import SpecRequest
from moeplan.planner.placement import Placement
from moeplan.profiles import catalog
from moeplan.profiles.backends import read_priors
from moeplan.profiles.model_profiles import load_profile

ROOT = Path(__file__).resolve().parents[1]
RECORDED = json.loads((ROOT / "tests" / "data" / "graph_barriers.json").read_text())

# the fixtures' blocks (tests/llama_fixtures.py defaults): (arch, attention label per block,
# n_expert_used); the last block also carries the output head's nodes and is not compared
FIXTURE_BLOCKS = {
    "qwen3moe": ("qwen3moe", ["full"] * 6, 4),
    "gpt-oss": ("gpt-oss", ["swa", "full"] * 3, 4),
    "qwen3next": ("qwen3next", ["recurrent"] * 3 + ["full"] + ["recurrent"] * 3 + ["full"], 4),
    # compress ratios (0, 0, 4, 128, 4, 128, 4, 0); blocks 0-2 are hash-routed (n_hash = 3), so
    # block 2's CSA has one node less than the routed CSA blocks the table keeps
    "deepseek4": ("deepseek4", ["swa-only", "swa-only", None, "hca", "csa", "hca", "csa", "swa-only"], 6),
    # every sixth block global (block 5), the last block sliding
    "gemma4": ("gemma4", ["swa"] * 5 + ["full", "swa"], 4),
    # pattern MEM*EM*E: Mamba-2 (recurrent), MoE (no attention), GQA (full)
    "nemotron_h_moe": ("nemotron_h_moe", ["recurrent", "none", "recurrent", "full", "none", "recurrent", "full",
                                          "none"], 6),
    # MLA on the 1-indexed blocks 4 and 8 (K3: every fourth and the last), KDA elsewhere; block
    # 0 is the dense lead block (compared in test_arch_conformance.py)
    "kimi-k3": ("kimi-k3", [None, "recurrent", "recurrent", "mla", "recurrent", "recurrent", "recurrent", "mla"], 16),
    # a dense lead block (DENSE_BLOCK, checked in test_arch_conformance.py), then MoE blocks: full on
    # block 4, sliding elsewhere (the MTP block is not in the decode graph)
    "step35": ("step35", [None, "swa", "swa", "swa", "full", "swa", "swa", "swa"], 4),
    # every block MoE beside a shared expert, full attention
    "hunyuan-moe": ("hunyuan-moe", ["full"] * 6, 4),
    # a dense lead block (DENSE_LEAD_BARRIERS, checked in test_arch_conformance.py), then MoE blocks
    "dots1": ("dots1", [None, "full", "full", "full", "full", "full"], 6),
    # a dense lead block (DENSE_LEAD_BARRIERS, checked in test_arch_conformance.py), then MoE blocks
    "ernie4_5-moe": ("ernie4_5-moe", [None, "full", "full", "full", "full", "full"], 4),
}


@pytest.mark.parametrize("fixture", sorted(FIXTURE_BLOCKS))
def test_table_matches_the_counted_llama_cpp_graphs(fixture):
    arch, kinds, n_used = FIXTURE_BLOCKS[fixture]
    counted = RECORDED["blocks"][fixture]
    assert len(counted) == len(kinds)
    compared = 0
    for il, kind in enumerate(kinds[:-1]):
        if kind is None:
            continue
        n, fixture_used, how = graph.BLOCK_BARRIERS[(arch, kind)]
        assert how == "counted" and fixture_used == n_used
        assert n == counted[il], f"{fixture} block {il} ({kind})"
        compared += 1
    assert compared >= 4


def test_blocks_scale_with_experts_and_layer_kind():
    q30, nxt, v4 = load_profile("qwen3-30b-a3b"), load_profile("qwen3-next-80b-a3b"), load_profile("deepseek-v4-flash")
    # one ADD per routed expert beyond the fixture's 4: Qwen3-30B routes 8
    assert graph.block_barriers(q30, q30.trunk_layers[:1], "llama.cpp") == 30 + 4
    # ik_llama.cpp: -fmoe fuses gate/up/act, MULTI_ADD sums the experts
    assert graph.block_barriers(q30, q30.trunk_layers[:1], "ik_llama.cpp") == 34 - 8
    lin = [l for l in nxt.trunk_layers if l.attention == "recurrent"][:1]
    full = [l for l in nxt.trunk_layers if l.attention == "full"][:1]
    assert graph.block_barriers(nxt, tuple(lin), "llama.cpp") == 60 + 6
    assert graph.block_barriers(nxt, tuple(full), "llama.cpp") == 41 + 6
    per_layer_v4 = graph.block_barriers(v4, v4.trunk_layers, "llama.cpp") / len(v4.trunk_layers)
    per_layer_q30 = graph.block_barriers(q30, q30.trunk_layers, "llama.cpp") / len(q30.trunk_layers)
    assert per_layer_v4 > 3 * per_layer_q30
    assert graph.expert_split_barriers(q30, "llama.cpp") == 4
    assert graph.expert_split_barriers(load_profile("gpt-oss-120b"), "llama.cpp") == 7


def _hw(cpu, **kw):
    return catalog.build_profile(SpecRequest(cpu=cpu, ram_bytes=256 * 2**30, **kw))


def test_handoff_follows_the_core_complexes():
    tr, _ = machine.barrier_handoff_s(_hw("Threadripper PRO 3995WX", channels=8, ram_type="ddr4", ram_speed_mts=3200), 64)
    ryzen, _ = machine.barrier_handoff_s(_hw("Ryzen 9 7950X", ram_type="ddr5", ram_speed_mts=6000), 16)
    one_ccd, _ = machine.barrier_handoff_s(_hw("Ryzen 9 7950X", ram_type="ddr5", ram_speed_mts=6000), 1)
    xeon, how = machine.barrier_handoff_s(_hw("Xeon Platinum 8480+"), 56)
    # Zen 2: 16 CCXs of 4 cores, ~110 ns across them; a desktop Zen 4's two CCDs: half the
    # hand-overs stay in a CCD; one thread: all in one complex; Intel's mesh: one figure
    assert tr == pytest.approx((20 / 16 + 110 * 15 / 16) * 1e-9)
    assert ryzen == pytest.approx((20 / 2 + 80 / 2) * 1e-9)
    assert one_ccd == pytest.approx(20e-9)
    assert xeon == pytest.approx(55e-9) and "Intel server" in how
    # a 12-core Ryzen 9 is two CCDs of 6 (the catalog gives the CCDs, not their size): not one
    r12, how12 = machine.barrier_handoff_s(_hw("Ryzen 9 9900X", ram_type="ddr5", ram_speed_mts=5600), 12)
    assert r12 == pytest.approx((20 / 2 + 100 / 2) * 1e-9) and "2 core complexes" in how12


def test_cpu_only_decode_charges_the_graph_barriers():
    hw = _hw("Threadripper PRO 3995WX", channels=8, ram_type="ddr4", ram_speed_mts=3200)
    pr = read_priors("llama.cpp")
    p = Placement(backend="llama.cpp", n_gpus=0, n_threads=64)
    terms = {}
    for name in ("qwen3-30b-a3b", "qwen3-next-80b-a3b"):
        m = load_profile(name, quant="Q4_K_M")
        e = estimate(m, p, hw, pr, n_prompt=512)
        t = {x.name: x.seconds for x in e.decode_terms}
        handoff, _ = machine.barrier_handoff_s(hw, 64)
        assert t["barriers"] == pytest.approx(graph.block_barriers(m, m.trunk_layers, "llama.cpp") * 64 * handoff)
        terms[name] = t["barriers"] / len(m.trunk_layers)
    # a gated delta-net model's blocks wait at ~1.8x the barriers of a plain MoE block
    assert terms["qwen3-next-80b-a3b"] > 1.6 * terms["qwen3-30b-a3b"]
    # fewer threads, cheaper barriers (T x hand-over)
    few = estimate(load_profile("qwen3-30b-a3b", quant="Q4_K_M"), replace(p, n_threads=16), hw, pr, n_prompt=512)
    assert {x.name: x.seconds for x in few.decode_terms}["barriers"] < 0.3 * terms["qwen3-30b-a3b"] * 48


@pytest.mark.skipif(not os.environ.get("MOEPLAN_LLAMA_BIN"), reason="set MOEPLAN_LLAMA_BIN to a llama.cpp bin folder")
def test_live_counts_match_the_recording(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    from count_graph_barriers import FIXTURES, count

    bin_dir = Path(os.environ["MOEPLAN_LLAMA_BIN"])
    for fixture in FIXTURES:
        per = count(bin_dir, fixture, tmp_path)
        assert [per[i] for i in sorted(per)] == RECORDED["blocks"][fixture]
