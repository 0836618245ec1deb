"""Offloaded execution == a plain dense reference, for every placement, tier and cache policy.

The reference (moeplan/executor/reference.py) computes every expert for every token, weighted
by the routing mask, and recomputes attention from scratch without a KV cache (MLA the
non-absorbed way). fp32 keeps the tolerance tight. Each case also checks that the tier it is
about really ran (bytes moved on it), so no case passes vacuously.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf_fixtures import write_deepseek2, write_gptoss, write_qwen3moe
from test_executor_support import Q, exec_logits, reference_logits, tier_bytes, write_qwen3next, write_random_qwen3moe

from moeplan.executor.build import ExecOptions
from moeplan.executor.weights import DTYPES, GgufWeights
from moeplan.planner.placement import Placement
from moeplan.probes.gguf_model import read_gguf_model

torch.set_num_threads(1)  # tiny shapes: one thread is fastest and immune to a busy machine

N_PROMPT, N_DECODE = 40, 6  # prompt in ubatches of 32 + 8: op-offload in the first, CPU in the second


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("exec-models")
    return {
        "qwen3moe": read_gguf_model(write_qwen3moe(d / "q.gguf")[0]),
        "deepseek2": read_gguf_model(write_deepseek2(d / "d.gguf", n_embd=128, n_ff=256, n_ff_exp=64, expert_type=Q.Q8_0)[0]),
        "gptoss": read_gguf_model(write_gptoss(d / "g.gguf", window=8)[0]),
        "qwen3next": read_gguf_model(write_qwen3next(d / "n.gguf")),
    }


def _tokens(model, n):
    return np.random.default_rng(5).integers(0, model.n_vocab, size=n).tolist()


# (id, placement changes (cpu = 'all' | 'half' | none), executor options, routing, tiers that must move bytes)
CASES = [
    ("all-gpu", {}, {}, "uniform", {"gpu"}),
    ("cpu-compute", {"cpu": "all"}, {}, "uniform", {"cpu", "transfer", "activations"}),
    ("cpu-no-op-offload", {"cpu": "all", "op_offload": False}, {}, "zipf:1.2", {"cpu"}),
    ("cpu-transfer-decode", {"cpu": "half"}, {"cpu_decode_mode": "transfer"}, "uniform", {"transfer", "gpu"}),
    ("cache-lru", {"cpu": "all"}, {"cache_experts": 5}, "zipf:1.0", {"gpu_cache", "transfer"}),
    ("cache-lfu-half-upload", {"cpu": "half"}, {"cache_experts": 4, "cache_policy": "lfu", "cache_upload_share": 0.5},
     "zipf:0.8", {"gpu_cache", "cpu"}),
    ("cache-smaller-than-k-lfu", {"cpu": "all"}, {"cache_experts": 1, "cache_policy": "lfu"}, "zipf:1.5",
     {"gpu_cache", "cpu"}),
    ("expert-pool", {"cpu": "half"}, {"expert_pool": 3}, "uniform", {"cpu", "gpu"}),
    ("ik-rule-router", {"cpu": "all", "backend": "ik_llama.cpp"}, {}, "router", {"cpu"}),
    # the grouped-GEMM path CUDA takes, forced on the CPU: GPU tier, staging and cache slots
    ("grouped-gemm", {"cpu": "half"}, {"grouped_experts": True, "cache_experts": 3, "expert_pool": 5},
     "zipf:1.0", {"gpu", "gpu_cache", "transfer"}),
]


def _placement(model, changes: dict) -> Placement:
    ch = dict(changes)
    which = ch.pop("cpu", None)
    moe = model.moe_layer_indices
    cpu = moe if which == "all" else moe[::2] if which == "half" else ()
    return Placement(cpu_moe_layers=tuple(cpu), n_ctx=512, n_ubatch=32, n_threads=1, **ch)


@pytest.mark.parametrize("name", ["qwen3moe", "deepseek2", "gptoss", "qwen3next"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_offloaded_equals_dense_reference(models, name, case):
    _, changes, opts, routing, tiers = case
    model = models[name]
    p = _placement(model, changes)
    opt = ExecOptions(dtype="fp32", **opts)
    tokens = _tokens(model, N_PROMPT + N_DECODE)
    built, got = exec_logits(model, p, opt, routing, tokens, N_PROMPT)
    want = reference_logits(built, p, opt, tokens)
    assert got.shape == want.shape == (len(tokens), model.n_vocab)
    torch.testing.assert_close(got, want, rtol=2e-4, atol=2e-4)
    moved = tier_bytes(built)
    for tier in tiers:
        assert moved.get(tier, 0) > 0, f"tier {tier} did not run: {moved}"
    assert built.ctx.grouped == bool(opts.get("grouped_experts")) and not built.ctx.notes


def test_gptoss_sliding_window_ring_wraps(models):
    """A prompt longer than the SWA ring (pad256(window + ubatch) = 256 cells) reuses cells."""
    model = models["gptoss"]
    p = Placement(cpu_moe_layers=model.moe_layer_indices[:1], n_ctx=512, n_ubatch=32, n_threads=1)
    opt = ExecOptions(dtype="fp32")
    tokens = _tokens(model, 300)
    built, got = exec_logits(model, p, opt, "uniform", tokens, 296)
    swa = [b for b in built.model.blocks if b.lay.attn.label == "swa"][0]
    assert swa.attn.ring.n_cells == 256 and swa.attn.ring.ring
    want = reference_logits(built, p, opt, tokens)
    torch.testing.assert_close(got, want, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_half_precision_within_dtype_tolerance(models, dtype):
    """In bf16/fp16 the offloaded run and the reference (same weights, other summation order
    and no KV cache) agree within the dtype's tolerance."""
    model = models["deepseek2"]
    p = _placement(model, {"cpu": "half"})
    opt = ExecOptions(dtype=dtype, cache_experts=3)
    tokens = _tokens(model, 20)
    built, got = exec_logits(model, p, opt, "uniform", tokens, 16)
    want = reference_logits(built, p, opt, tokens)
    scale = want.abs().max()
    tol = 0.05 if dtype == "bf16" else 0.01
    assert (got - want).abs().max() <= tol * scale


@pytest.mark.parametrize("etype", [Q.F32, Q.F16, Q.Q8_0])
def test_mmap_tier_reads_the_files_experts(tmp_path, etype):
    """CPU-tier experts read through the mmap at the GGUF's offsets give the same outputs as the
    reference built from gguf-py's reader and dequantizer (real weights)."""
    path = write_random_qwen3moe(tmp_path / "r.gguf", expert_type=etype)
    model = read_gguf_model(path)
    p = Placement(cpu_moe_layers=model.moe_layer_indices[1:], n_ctx=256, n_ubatch=32, n_threads=1, op_offload=False)
    opt = ExecOptions(dtype="fp32", weights="gguf", expert_source="mmap")
    tokens = _tokens(model, 24)
    built, got = exec_logits(model, p, opt, "router", tokens, 16)
    assert tier_bytes(built).get("mmap", 0) > 0
    want = reference_logits(built, p, opt, tokens, source=GgufWeights((str(path),), DTYPES["fp32"]))
    tol = 2e-4 if etype == Q.F32 else 2e-3  # F16 experts are computed in fp16, as ggml does
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def test_mmap_cold_eviction_keeps_results(tmp_path):
    path = write_random_qwen3moe(tmp_path / "r.gguf")
    model = read_gguf_model(path)
    p = Placement(cpu_moe_layers=model.moe_layer_indices, n_ctx=256, n_ubatch=32, n_threads=1)
    opt = ExecOptions(dtype="fp32", weights="gguf", expert_source="mmap")
    tokens = _tokens(model, 10)
    built, got = exec_logits(model, p, opt, "uniform", tokens, 4)
    before = path.read_bytes()
    from test_executor_support import FREE

    from moeplan.executor.routing import parse_routing
    from moeplan.executor.run import build_executor

    b2 = build_executor(model, p, opt, 10, parse_routing("uniform"), free_bytes=FREE)
    try:
        outs = [b2.model.forward(tokens[:4], 0, decode=False, all_logits=True)]
        for pos in range(4, 10):
            for s in b2.mmap_stores:
                s.evict()
            outs.append(b2.model.forward([tokens[pos]], pos, decode=True))
    finally:
        b2.close()
    torch.testing.assert_close(torch.cat(outs), got)
    assert path.read_bytes() == before  # the user's file is never written
