"""The executor on a real CUDA device: same outputs as the CPU reference in every tier, peak
VRAM reported, pinned uploads. Skipped without CUDA (scripts/gpu-check.sh runs these)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf_fixtures import write_deepseek2, write_gptoss
from test_executor_support import FREE, Q, exec_logits, reference_logits, tier_bytes

from moeplan.executor.build import ExecOptions
from moeplan.executor.routing import parse_routing
from moeplan.executor.run import RunSpec, run_bench
from moeplan.planner.placement import Placement
from moeplan.probes.gguf_model import read_gguf_model

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpu-models")
    return {"deepseek2": read_gguf_model(write_deepseek2(d / "d.gguf", n_embd=128, n_ff_exp=64, expert_type=Q.Q8_0)[0]),
            "gptoss": read_gguf_model(write_gptoss(d / "g.gguf", window=8)[0])}


@pytest.mark.parametrize("name", ["deepseek2", "gptoss"])
@pytest.mark.parametrize("opts,cpu", [({}, False), ({}, True), ({"cpu_decode_mode": "transfer"}, True),
                                      ({"cache_experts": 3, "cache_policy": "lfu"}, True)])
def test_cuda_offload_equals_cpu_reference(models, name, opts, cpu):
    model = models[name]
    p = Placement(cpu_moe_layers=model.moe_layer_indices if cpu else (), n_ctx=512, n_ubatch=32, n_threads=4)
    opt = ExecOptions(device="cuda", dtype="fp32", **opts)
    tokens = np.random.default_rng(3).integers(0, model.n_vocab, size=46).tolist()
    built, got = exec_logits(model, p, opt, "uniform", tokens, 40)
    want = reference_logits(built, p, ExecOptions(dtype="fp32"), tokens)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-3, atol=1e-3)
    if cpu:
        assert tier_bytes(built).get("transfer", 0) > 0


def test_cuda_bench_reports_vram_and_uses_pinned_memory(models):
    model = models["deepseek2"]
    p = Placement(cpu_moe_layers=model.moe_layer_indices, n_ctx=512, n_ubatch=32, n_threads=4)
    r = run_bench(model, p, ExecOptions(device="cuda", dtype="bf16", cache_experts=4),
                  RunSpec(32, 8, 2, parse_routing("zipf:1.0")), free_bytes=FREE)
    assert r["executor"]["device"] == "cuda" and r["peak_vram_bytes"] > 0
    assert r["decode_s_per_token_by_tier"]["cpu"] > 0 and r["cache"]["hits"] + r["cache"]["misses"] > 0
    assert r["bytes_per_token_by_tier"]["activations"] > 0
    from moeplan.executor.run import build_executor

    built = build_executor(model, p, ExecOptions(device="cuda"), 8, parse_routing("uniform"), free_bytes=FREE)
    stores = [b.moe.store for b in built.model.blocks if b.moe is not None]
    assert stores and all(s.gate_up.is_pinned() and s.down.is_pinned() for s in stores)


def test_cuda_grouped_gemm_path_in_bf16(models):
    """bf16 on CUDA runs device experts as grouped GEMMs; within bf16 tolerance of the reference."""
    model = models["deepseek2"]
    p = Placement(cpu_moe_layers=model.moe_layer_indices[::2], n_ctx=512, n_ubatch=32, n_threads=4)
    opt = ExecOptions(device="cuda", dtype="bf16", cache_experts=3)
    tokens = np.random.default_rng(4).integers(0, model.n_vocab, size=40).tolist()
    built, got = exec_logits(model, p, opt, "uniform", tokens, 32)
    assert built.ctx.grouped, built.ctx.notes  # the kernel exists for bf16 on this GPU
    want = reference_logits(built, p, ExecOptions(dtype="bf16"), tokens)
    assert (got.cpu() - want).abs().max() <= 0.05 * want.abs().max()
