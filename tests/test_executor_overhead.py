"""The executor's own cost model prices the per-op dispatch of its torch path, which is what a
small model's decode spends (benchmarks/executor_overhead.py, 2026-12-05, fp16: a 4-block tiny
qwen3moe decodes in 1.7-2.0 ms of CPU time per token with one thread, 1.9-2.1 ms at top-8)."""
from __future__ import annotations

import pytest
from model_builders import toy_hw, toy_model

from moeplan.planner.cost.estimate import estimate
from moeplan.planner.placement import Placement
from moeplan.profiles.backends import read_priors
from moeplan.tuner.exec_view import executor_hardware, retype

FIXED = ("block_dispatch", "expert_launch", "per_token")


def _estimate(k: int, n_layers: int = 4, n_gpus: int = 0, backend: str = "executor"):
    hw = toy_hw(vram_gib=0, ram_gib=64, cores=2)
    model = retype(toy_model(n_layers=n_layers, n_experts=8, k=k, n_embd=64, n_ff_exp=32), "bf16")
    p = Placement(n_threads=1, n_gpus=n_gpus)
    return estimate(model, p, executor_hardware(hw, "cpu", 1), read_priors(backend))


def _fixed_s(k: int, n_layers: int = 4) -> float:
    return sum(t.seconds for t in _estimate(k, n_layers).decode_terms if t.name in FIXED)


@pytest.mark.parametrize("n_gpus", [0, 1])  # a CPU-only plan, and the GPU tier on the CPU stand-in
def test_a_tiny_model_s_decode_is_priced_at_the_measured_dispatch_cost(n_gpus):
    e = _estimate(k=2, n_gpus=n_gpus)
    fixed = sum(t.seconds for t in e.decode_terms if t.name in FIXED)
    # measured 1.7-2.0 ms per token of which ~0.01 ms are bytes (benchmarks/executor_overhead.py)
    assert 1.85e-3 / 1.5 < fixed < 1.85e-3 * 1.5
    assert 1 / e.decode_tok_s >= fixed


def test_every_block_and_every_routed_expert_adds_its_dispatch():
    t2 = _fixed_s(k=2, n_layers=2)
    t8 = _fixed_s(k=2, n_layers=8)
    ex = read_priors("executor")
    per_block = (t8 - t2) / 6
    assert per_block == pytest.approx(ex.s_layer_host_s + 2 * ex.s_expert_op_s, rel=0.1)
    tk2 = _fixed_s(k=2)
    tk8 = _fixed_s(k=8)
    assert tk8 - tk2 == pytest.approx(4 * 6 * ex.s_expert_op_s, rel=0.1)


def test_llama_cpp_s_fused_expert_op_has_no_per_expert_launch():
    lc = read_priors("llama.cpp")
    assert lc.s_expert_op_s == 0.0 and lc.s_layer_host_s == 0.0
