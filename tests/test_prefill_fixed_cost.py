"""Prefill pays the host's fixed work per ubatch: a tiny model on a GPU no longer prefills at
tens of millions of tokens/s (issue 32 item 10), and a CPU-only prefill pays its graph-node
barriers per ubatch, as decode does per token."""
from __future__ import annotations

import pytest
from model_builders import toy_hw, toy_model

from moeplan.planner.cost.estimate import estimate
from moeplan.planner.placement import Placement
from moeplan.profiles.backends import read_priors

PR = read_priors("llama.cpp")


def _est(model, hw, **kw):
    return estimate(model, Placement(n_ubatch=512, **kw), hw, PR, n_prompt=512)


def test_a_tiny_model_s_gpu_prefill_is_bounded_by_the_launch_work_of_a_ubatch():
    model = toy_model(n_layers=4, n_experts=8, k=2, n_embd=64, n_ff_exp=32)
    e = _est(model, toy_hw())
    host_per_ubatch = 4 * e.factors.s_layer_gpu_s.value + e.factors.t_token_s.value
    assert e.prefill_tok_s == pytest.approx(512 / host_per_ubatch, rel=0.02)
    assert "launch_floor" in [t.name for t in e.prefill_terms]


def test_a_large_model_s_gpu_work_hides_the_launches():
    model = toy_model(n_layers=8, n_experts=8, k=2, n_embd=4096, n_ff_exp=4096)
    e = _est(model, toy_hw(vram_gib=96))
    assert "launch_floor" not in [t.name for t in e.prefill_terms]


def test_cpu_only_prefill_pays_the_graph_barriers_of_each_ubatch():
    model = toy_model(n_layers=4, n_experts=8, k=2, n_embd=64, n_ff_exp=32)
    hw = toy_hw(vram_gib=0, cores=16)
    e = _est(model, hw, n_gpus=0, n_threads=16)
    bar = [t for t in e.prefill_terms if t.name == "barriers"]
    assert bar and bar[0].seconds > 0
    # per ubatch, every graph node's barrier: 512 tokens share them
    n_dec = [t for t in e.decode_terms if t.name == "barriers"][0].seconds
    assert bar[0].seconds == pytest.approx(n_dec / 512, rel=0.01)
