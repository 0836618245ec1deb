"""Memory is checked before anything is allocated; sampling shrinks expert pools to fit."""
from __future__ import annotations

import pytest
from gguf_fixtures import write_deepseek2, write_qwen3moe

from moeplan.errors import InfeasibleError
from moeplan.executor import run as run_mod
from moeplan.executor import stores
from moeplan.executor.build import ExecOptions, check_fits, plan_build, read_llc_bytes
from moeplan.executor.layout import model_layout
from moeplan.executor.routing import parse_routing
from moeplan.planner.placement import Placement
from moeplan.probes.gguf_model import read_gguf_model
from moeplan.units import MIB


@pytest.fixture
def model(tmp_path):
    return read_gguf_model(write_qwen3moe(tmp_path / "q.gguf", n_layer=4, n_embd=256, n_ff_exp=256, n_expert=32)[0])


def test_plan_that_cannot_fit_fails_before_allocating(model, monkeypatch):
    allocated = []
    monkeypatch.setattr(stores.TensorExperts, "__init__", lambda *a, **k: allocated.append("experts"))
    monkeypatch.setattr(run_mod, "SyntheticWeights", None, raising=False)
    p = Placement(cpu_moe_layers=model.moe_layer_indices[:2], n_ctx=512)
    for opt, free, what in ((ExecOptions(), (600 * MIB, 600 * MIB), "host RAM"),
                            (ExecOptions(max_vram_bytes=1 * MIB), (8 << 30, 1 * MIB), "GPU tier")):
        with pytest.raises(InfeasibleError) as exc:
            run_mod.build_executor(model, p, opt, 16, parse_routing("uniform"), free_bytes=free)
        assert what in exc.value.message and "GiB" in exc.value.message
        assert "--sample-layers" in exc.value.hint
    assert allocated == []


def test_memory_items_count_what_is_allocated(model):
    lay = model_layout(model)
    p = Placement(cpu_moe_layers=(0, 1), n_ctx=512, n_ubatch=64)
    plan = plan_build(lay, p, ExecOptions(dtype="fp32", cache_experts=5), 16, 8 << 30, 8 << 30)
    items = {i.name: i.n_bytes for i in plan.items}
    per_expert = 3 * 256 * 256 * 4
    assert items["routed experts, GPU tier"] == 2 * 32 * per_expert
    assert items["routed experts, CPU tier"] == 2 * 32 * per_expert
    assert items["GPU expert cache slots"] == 5 * per_expert
    assert plan.staging_slots == 32 and items["upload staging slots"] == 32 * per_expert
    # GQA cache: 2 kv heads x 16 dims, K and V, 512 cells, fp32, 4 blocks (+ 8 B of position per cell)
    assert items["KV cache"] == 4 * 2 * 512 * (32 * 4 + 8)
    check_fits(plan, ExecOptions(dtype="fp32"), 8 << 30, 8 << 30)


def test_sampling_shrinks_expert_pools_to_fit(tmp_path):
    m = read_gguf_model(write_deepseek2(tmp_path / "d.gguf", n_layer=6, n_expert=64, n_used=4, n_ff_exp=1024)[0])
    lay = model_layout(m)
    p = Placement(cpu_moe_layers=(1, 2), n_ctx=512)
    free = (700 * MIB, 700 * MIB)
    opt = ExecOptions(sample_layers=1)
    full = plan_build(lay, p, ExecOptions(), 16, *free)
    with pytest.raises(InfeasibleError):
        check_fits(full, ExecOptions(), *free)
    plan = plan_build(lay, p, opt, 16, *free, llc_bytes=1 * MIB)
    check_fits(plan, opt, *free)
    assert all(8 <= n < 64 for n in plan.pool.values())  # at least 2k = 8 distinct buffers
    assert any("expert pool" in n for n in plan.notes)


def test_read_llc_bytes(tmp_path):
    for name, size in (("index0", "48K"), ("index2", "2048K"), ("index3", "300M")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "size").write_text(size + "\n")
    assert read_llc_bytes(str(tmp_path)) == 300 * MIB
    assert read_llc_bytes(str(tmp_path / "missing")) == 0


def test_mmap_surrogate_weights_are_bounded_and_deterministic(tmp_path):
    """Quantized experts read through the mmap with synthetic weights become bounded stand-in
    weights made from the file's bytes (one per byte, or per nibble for 4-bit types)."""
    import numpy as np
    import torch
    from gguf_fixtures import Q
    from test_executor_support import exec_logits, tier_bytes, write_random_qwen3moe

    from moeplan.executor.stores import surrogate_matrix

    raw = np.arange(256, dtype=np.uint8).repeat(4)
    w8 = surrogate_matrix(raw, (32, 32), torch.float32)
    w4 = surrogate_matrix(raw[:300], (32, 32), torch.float32)  # fewer bytes than values: nibbles
    a = (3.0 / 32) ** 0.5
    for w in (w8, w4):
        assert w.shape == (32, 32) and w.abs().max() <= a + 1e-6 and w.std() > a / 4
    assert torch.equal(w8, surrogate_matrix(raw, (32, 32), torch.float32))
    m = read_gguf_model(write_random_qwen3moe(tmp_path / "q4.gguf", expert_type=Q.Q4_0))
    p = Placement(cpu_moe_layers=m.moe_layer_indices, n_ctx=256, n_ubatch=8, n_threads=1)
    built, logits = exec_logits(m, p, ExecOptions(dtype="bf16", expert_source="mmap"), "uniform", list(range(12)), 8)
    assert torch.isfinite(logits).all() and tier_bytes(built)["mmap"] > 0
