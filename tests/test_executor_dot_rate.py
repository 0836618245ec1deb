"""The executor's batch-1 dot rate is measured on this CPU (its own torch.mv) and becomes the
cost model's prior for the executor runner, so 1- and 2-thread runs are predicted alike."""
from __future__ import annotations

import pytest
from model_builders import toy_hw, toy_model

from moeplan.planner.cost.estimate import estimate
from moeplan.planner.placement import Placement
from moeplan.profiles.backends import read_priors
from moeplan.tuner.exec_view import executor_hardware, retype
from moeplan.tuner.validate import with_measured_dot_rate


def test_the_measured_rate_is_the_estimate_s_dot_rate_per_thread():
    hw = toy_hw(vram_gib=0, ram_gib=64, cores=8)
    model = retype(toy_model(n_layers=4, n_experts=16, k=4, n_embd=1024, n_ff_exp=512), "bf16")
    ex = with_measured_dot_rate(read_priors("executor"), hw, "bf16", measure=lambda dtype: 5e9)
    assert "5.00 G weights/s" in ex.sources[-1]
    for threads in (1, 2):
        p = Placement(cpu_moe_layers=model.moe_layer_indices, n_threads=threads, n_gpus=0)
        e = estimate(model, p, executor_hardware(hw, "cpu", threads), ex)
        # the cost model's dot rate is the measured one, times the threads used
        assert e.factors.cpu_dot_elem_per_s.value == pytest.approx(5e9 * threads, rel=1e-9)


def test_without_torch_the_bundled_prior_stays():
    ex = read_priors("executor")

    def no_torch(dtype):
        raise ImportError("torch")

    assert with_measured_dot_rate(ex, toy_hw(), "bf16", measure=no_torch) == ex


def test_mv_rate_is_measured():
    pytest.importorskip("torch")
    from moeplan.executor.gemv_rate import mv_weights_per_s

    rate = mv_weights_per_s("fp32", repeats=5, rounds=1)
    assert 1e7 < rate < 1e12  # weights per second of one thread: a real timing, not a constant
    with pytest.raises(ValueError):
        mv_weights_per_s("int4")
