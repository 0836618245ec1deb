"""Layer sampling: class choice, scale factors, and extrapolation against a full run."""
from __future__ import annotations

import math
import statistics
import time

import pytest
import torch
from gguf_fixtures import Q, write_deepseek2, write_qwen3moe
from test_executor_support import FREE

from moeplan.executor.build import ExecOptions, plan_build
from moeplan.executor.layout import model_layout
from moeplan.executor.routing import parse_routing
from moeplan.executor.run import RunSpec, run_bench
from moeplan.executor.sampling import choose_sample, extrapolate, scale_factors
from moeplan.planner.placement import Placement
from moeplan.probes.gguf_model import read_gguf_model

torch.set_num_threads(1)


def test_choose_sample_and_factors():
    classes = {"a": list(range(10)), "b": [20, 21], "c": [30]}
    s = choose_sample(classes, 2)
    assert s == {"a": [2, 7], "b": [20, 21], "c": [30]}
    f = scale_factors(classes, s)
    assert f[2] == f[7] == 5.0 and f[20] == 1.0 and f[-1] == 1.0
    assert extrapolate({2: {"gpu": 1.0}, 7: {"gpu": 3.0}, 20: {"cpu": 2.0}, -1: {"gpu": 0.5}}, f) == \
        {"gpu": 20.5, "cpu": 2.0}
    assert choose_sample(classes, None) == classes


def test_classes_follow_kind_attention_and_tier(tmp_path):
    m = read_gguf_model(write_deepseek2(tmp_path / "d.gguf", n_layer=7, n_dense=2, nextn=1)[0])
    lay = model_layout(m)
    p = Placement(cpu_moe_layers=(2, 3, 4), n_ctx=512)
    plan = plan_build(lay, p, ExecOptions(sample_layers=1), 16, *FREE)
    assert set(plan.classes) == {"dense/mla:mla/gpu", "moe/mla:mla/cpu", "moe/mla:mla/gpu"}
    assert plan.classes["moe/mla:mla/cpu"] == [2, 3, 4]
    assert [x.index for x in plan.layers] == [1, 3, 6]  # one of each, from the middle of its class
    assert plan.factors[3] == 3.0 and plan.sampled


def _run(model, placement, k):
    opt = ExecOptions(dtype="fp32", sample_layers=k)
    # CPU time of this thread (torch runs single-threaded here): other tenants of a shared
    # machine cannot stretch it the way they stretch wall time
    return run_bench(model, placement, opt, RunSpec(n_prompt=32, n_tokens=32, n_warmup=2,
                                                   routing=parse_routing("uniform")),
                     free_bytes=FREE, clock=time.thread_time)


def test_sampled_run_predicts_the_full_run(tmp_path):
    """8 blocks, half on the CPU tier: running 2 of each class and scaling by 2 predicts the
    full run's bytes per token exactly and its decode time within a factor sqrt(2), halfway in
    log terms to the 2x a wrong scale factor gives (the median of 7 interleaved runs of each, in
    CPU time: on a shared 2-core machine single runs moved by up to 2x either way in a full test
    session -- the median of five pair ratios once fell to 0.60, the fastest of five runs once
    was an outlier at half the others -- while each side's median stayed within 5%). The model is small
    enough (13 MiB) that the full and the sampled run both stay in the CPU caches: a model
    straddling the last-level cache would be faster sampled (a real effect, which is why big
    sampled runs keep pools well over the cache size)."""
    m = read_gguf_model(write_qwen3moe(tmp_path / "q.gguf", n_layer=8, n_embd=128, n_head=4, n_head_kv=2,
                                       head_dim=32, n_expert=8, n_used=2, n_ff_exp=128, expert_type=Q.F16)[0])
    p = Placement(cpu_moe_layers=m.moe_layer_indices[::2], n_ctx=256, n_ubatch=32, n_threads=1)
    full, samp = [], []
    for _ in range(7):  # interleaved runs; each side's median is robust to a disturbed run either way
        f, s = _run(m, p, None), _run(m, p, 2)
        full.append(f["decode_s_per_token"])
        samp.append(s["decode_s_per_token"])
    assert not f["extrapolated"] and s["extrapolated"] and s["sampled_layers"] == 2
    assert len(s["blocks_run"]) == 4 and len(f["blocks_run"]) == 8
    assert any("sampled" in n for n in s["notes"])
    ratio = statistics.median(samp) / statistics.median(full)
    assert abs(math.log(ratio)) < math.log(2) / 2, (full, samp)
    for tier in ("gpu", "cpu", "kv", "activations"):
        assert s["bytes_per_token_by_tier"][tier] == pytest.approx(f["bytes_per_token_by_tier"][tier], rel=0.01)
    assert s["prefill_bytes_per_ubatch_by_tier"]["gpu"] == pytest.approx(
        f["prefill_bytes_per_ubatch_by_tier"]["gpu"], rel=0.01)


@pytest.mark.parametrize("writer,k", [(write_qwen3moe, None), (write_deepseek2, None), (write_deepseek2, 1)])
def test_model_bytes_per_token_match_the_model_spec(tmp_path, writer, k):
    """Weight bytes a decode token touches, in the file's types, are what ModelSpec says
    (bytes_read_per_token: resident tensors + k/N of the experts + head), sampled or not."""
    m = read_gguf_model(writer(tmp_path / "m.gguf")[0])
    p = Placement(cpu_moe_layers=m.moe_layer_indices[1:], n_ctx=256, n_ubatch=16, n_threads=1)
    r = run_bench(m, p, ExecOptions(dtype="fp32", sample_layers=k),
                  RunSpec(n_prompt=0, n_tokens=4, n_warmup=0, routing=parse_routing("uniform")), free_bytes=FREE)
    b = r["model_bytes_per_token_by_tier"]
    embd_row = next(t.n_bytes for t in m.globals if t.name == "token_embd.weight") // m.n_vocab
    assert b["gpu"] + b["cpu"] == m.bytes_read_per_token() - embd_row
