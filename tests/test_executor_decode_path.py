"""The executor's one-token decode path: batched experts, fused q/k/v, huge-page host buffers.

run_experts_token (two torch calls per expert, the activation and the weighted sum once per
block, preallocated buffers) must give what the per-expert loop (expert_ffn per expert, each
result added) gives; q/k/v fused into one matrix must leave memory and bytes unchanged; host
buffers fall back to torch.empty where huge pages are not available.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from moeplan.executor import hostmem
from moeplan.executor.experts import Workspace, run_experts, run_experts_token
from moeplan.executor.layout import Gating
from moeplan.executor.ops import ExpertWeights, expert_ffn

torch.set_num_threads(1)

D, F, N_EXP = 64, 48, 12


def _experts(dtype: torch.dtype, split: bool, biases: bool, seed: int = 3) -> list[ExpertWeights]:
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=0.15):
        return ((torch.rand(shape, generator=g) * 2 - 1) * scale).to(dtype)

    out = []
    for _ in range(N_EXP):
        gu = r(2 * F, D)
        ew = ExpertWeights(down=r(D, F), gate=gu[:F].clone(), up=gu[F:].clone()) if split else \
            ExpertWeights(down=r(D, F), gate_up=gu)
        if biases:
            ew.gate_up_b, ew.down_b = r(2 * F, scale=0.05), r(D, scale=0.05)
        out.append(ew)
    return out


def _per_expert(x, ids, w, experts, get, gating):
    """The reference loop: each expert's FFN on its own, weighted and added one by one."""
    out = torch.zeros_like(x)
    row = ids[0].tolist()
    for e in experts:
        we = float(w[0, row.index(e)])
        out += expert_ffn(x * we, get(e), gating.activation) if gating.weight_before_ffn else \
            expert_ffn(x, get(e), gating.activation) * we
    return out


CASES = [  # (id, dtype, gating, gate/up as two matrices, biases)
    ("fp32-silu", torch.float32, Gating(), False, False),
    ("fp32-split-gate-up", torch.float32, Gating(), True, False),
    ("fp32-weight-before-ffn", torch.float32, Gating(weight_before_ffn=True), False, False),
    ("fp32-oai-biases", torch.float32, Gating(activation="swiglu_oai"), False, True),
    ("fp16", torch.float16, Gating(), False, False),
    ("bf16-biases", torch.bfloat16, Gating(), False, True),
]
TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 3e-2}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("subset", [False, True], ids=["all-k", "cache-subset"])
def test_batched_token_path_equals_the_per_expert_loop(case, subset):
    _, dtype, gating, split, biases = case
    experts_w = _experts(dtype, split, biases)
    rng = np.random.default_rng(11)
    ids = rng.permutation(N_EXP)[:6][None, :].astype(np.int64)
    w = torch.from_numpy(rng.random((1, 6)).astype(np.float32))
    x = (torch.randn(1, D, generator=torch.Generator().manual_seed(7))).to(dtype)
    experts = sorted(ids[0].tolist())
    if subset:  # the cache path runs only the misses on the CPU
        experts = experts[1::2]
    ws = Workspace()
    got = run_experts_token(x, ids, w, experts, experts_w.__getitem__, gating, ws)
    want = _per_expert(x, ids, w, experts, experts_w.__getitem__, gating)
    assert got.shape == want.shape == (1, D) and got.dtype == dtype
    tol = TOL[dtype]
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)
    # the dispatcher takes the batched path for one token with a workspace, the loop without
    torch.testing.assert_close(run_experts(x, ids, w, experts, experts_w.__getitem__, gating, ws).float(),
                               got.float(), rtol=0, atol=0)
    loop = run_experts(x, ids, w, experts, experts_w.__getitem__, gating)
    torch.testing.assert_close(loop.float(), want.float(), rtol=tol, atol=tol)


class _Count(TorchDispatchMode):
    """Counts torch ops, and among them the ones that allocate a result (neither a view nor
    writing into a given tensor)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = self.allocating = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        if not func.is_view and not func._schema.is_mutable:
            self.allocating += 1
        return func(*args, **(kwargs or {}))


def _count(m: int, ws: Workspace | None) -> _Count:
    experts_w = _experts(torch.float32, False, False)
    ids = np.arange(m, dtype=np.int64)[None, :]
    w = torch.full((1, m), 1.0 / m)
    x = torch.randn(1, D)
    run_experts(x, ids, w, list(range(m)), experts_w.__getitem__, Gating(), ws)  # buffers exist after the first
    with _Count() as c:
        run_experts(x, ids, w, list(range(m)), experts_w.__getitem__, Gating(), ws)
    return c


def test_each_expert_costs_two_products_and_allocates_nothing():
    ws = Workspace()
    c2, c8 = _count(2, ws), _count(8, ws)
    per_expert = (c8.ops - c2.ops) / 6
    # gate_up and down products into buffer rows (mv.out) and the row views they write to
    assert per_expert <= 5, per_expert
    assert c8.allocating == c2.allocating  # no per-expert tensors: the rows are preallocated
    assert c8.ops <= 60
    # the per-expert loop it replaces: more than twice the calls, a few new tensors per expert
    l2, l8 = _count(2, None), _count(8, None)
    assert (l8.ops - l2.ops) / 6 > 2 * per_expert
    assert l8.allocating - l2.allocating >= 6 * 3


def test_workspace_buffers_are_reused_across_tokens_and_blocks():
    ws = Workspace()
    a = ws.get("gate_up", (8, 2 * F), torch.float16, torch.device("cpu"))
    b = ws.get("gate_up", (8, 2 * F), torch.float16, torch.device("cpu"))
    assert a.data_ptr() == b.data_ptr()
    assert ws.get("gate_up", (4, 2 * F), torch.float16, torch.device("cpu")).data_ptr() != a.data_ptr()


def test_one_decode_token_of_a_model_is_bounded_in_torch_calls():
    """A whole tiny qwen3moe decode token: the calls per block do not grow by more than the two
    products per extra routed expert (the overhead benchmark's model, benchmarks/executor_overhead.py)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from executor_overhead import tiny_moe

    from moeplan.executor.build import ExecOptions
    from moeplan.executor.routing import parse_routing
    from moeplan.executor.run import build_executor
    from moeplan.planner.placement import Placement

    def calls(k: int) -> int:
        model = tiny_moe(2, k)
        p = Placement(cpu_moe_layers=model.moe_layer_indices, n_ctx=64, n_ubatch=64, n_threads=1)
        built = build_executor(model, p, ExecOptions(dtype="fp32"), 16, parse_routing("uniform"))
        built.model.forward([1], 0, decode=True)
        with _Count() as c:
            built.model.forward([2], 1, decode=True)
        return c.ops

    c2, c8 = calls(2), calls(8)
    assert (c8 - c2) / (2 * 6) <= 5  # 2 blocks x 6 more experts
    assert c2 < 2 * 140, c2  # per block: norms, fused q/k/v, RoPE, attention, router, experts


def test_fused_qkv_keeps_weights_and_drops_the_separate_matrices():
    from moeplan.executor.attention import CacheGeometry, GqaAttention
    from moeplan.executor.layout import AttnLayout

    lay = AttnLayout(kind="gqa", label="full", weights={}, kv=(), n_head=4, n_head_kv=2, d_k=16, d_v=16)
    g = torch.Generator().manual_seed(0)
    w = {"q": torch.randn(64, 32, generator=g), "k": torch.randn(32, 32, generator=g),
         "v": torch.randn(32, 32, generator=g), "o": torch.randn(32, 64, generator=g)}
    att = GqaAttention(lay, w, CacheGeometry(16, 16), torch.device("cpu"), torch.float32)
    assert att.qkv is not None and att.qkv.shape == (128, 32) and att.split == [64, 32, 32]
    assert set(att.w) == {"o"}  # no second copy of q, k, v
    torch.testing.assert_close(att.qkv, torch.cat([w["q"], w["k"], w["v"]]))
    # a bias on q alone: not fused (the three would need one bias vector)
    att2 = GqaAttention(lay, dict(w, q_b=torch.zeros(64)), CacheGeometry(16, 16), torch.device("cpu"), torch.float32)
    assert att2.qkv is None and {"q", "k", "v", "q_b"} <= set(att2.w)


@pytest.mark.parametrize("text, usable", [("always [madvise] never\n", True), ("[always] madvise never\n", True),
                                          ("always madvise [never]\n", False)])
def test_hugepage_status_reads_the_thp_mode(tmp_path, text, usable):
    p = tmp_path / "enabled"
    p.write_text(text)
    ok, why = hostmem.hugepage_status.__wrapped__(str(p))
    assert ok is usable and why
    assert hostmem.hugepage_status.__wrapped__(str(tmp_path / "missing"))[0] is False


def test_host_buffers_fall_back_to_torch_empty(monkeypatch):
    def no_mapping(n):
        raise AssertionError("the fallback must not map memory")

    monkeypatch.setattr(hostmem, "hugepage_status", lambda path=hostmem.THP_ENABLED: (False, "test"))
    monkeypatch.setattr(hostmem, "_mapped", no_mapping)
    t = hostmem.host_empty((1024, 1024), torch.float16)
    assert t.shape == (1024, 1024) and t.dtype == torch.float16 and t.is_contiguous()
    t.fill_(1.5)
    assert float(t.sum(dtype=torch.float32)) == 1.5 * 1024 * 1024
    # refused madvise: the same fallback
    monkeypatch.setattr(hostmem, "hugepage_status", lambda path=hostmem.THP_ENABLED: (True, "test"))
    monkeypatch.setattr(hostmem, "_mapped", lambda n: None)
    u = hostmem.host_empty((3, 1 << 20), torch.float32)
    assert u.shape == (3, 1 << 20) and u.is_contiguous()
    # small buffers never take a mapping
    monkeypatch.undo()
    assert hostmem.host_empty((16,), torch.float32).untyped_storage().nbytes() == 64


def test_host_buffers_get_huge_pages_where_the_os_offers_them(monkeypatch):
    ok, why = hostmem.hugepage_status()
    if not ok:
        pytest.skip(why)
    monkeypatch.delenv("MOEPLAN_NO_HUGEPAGES", raising=False)
    t = hostmem.host_empty((8 << 20,), torch.float16)  # 16 MiB
    assert t.data_ptr() % hostmem.HUGE_PAGE_BYTES == 0
    t.fill_(2.0)  # first touch: the kernel backs the aligned range with huge pages
    assert hostmem.anon_huge_bytes(t) >= 2 << 20
    assert float(t[-1]) == 2.0
    monkeypatch.setenv("MOEPLAN_NO_HUGEPAGES", "1")  # the switch benchmarks compare with
    u = hostmem.host_empty((8 << 20,), torch.float16)
    u.fill_(1.0)
    if "'madvise'" in why:  # without the advice, 4 KiB pages
        assert hostmem.anon_huge_bytes(u) == 0


def test_joint_q_k_norm_and_rope_equal_the_separate_ones():
    from moeplan.executor.attention import CacheGeometry, GqaAttention, Pos
    from moeplan.executor.layout import AttnLayout

    lay = AttnLayout(kind="gqa", label="full", weights={}, kv=(), n_head=4, n_head_kv=2, d_k=16, d_v=16)
    g = torch.Generator().manual_seed(1)
    w = {"q": torch.randn(64, 32, generator=g), "k": torch.randn(32, 32, generator=g),
         "v": torch.randn(32, 32, generator=g), "o": torch.randn(32, 64, generator=g),
         "q_norm": torch.rand(16, generator=g) + 0.5, "k_norm": torch.rand(16, generator=g) + 0.5}
    cpu = torch.device("cpu")
    joint = GqaAttention(lay, w, CacheGeometry(16, 16), cpu, torch.float32)
    apart = GqaAttention(lay, w, CacheGeometry(16, 16), cpu, torch.float32)
    assert joint.qk_norm is not None
    apart.qk_norm = None  # the path a gated or differently normed attention takes
    x = torch.randn(3, 32, generator=g)
    for start, n in ((0, 3), (3, 1)):  # a prompt, then one decode token over the cache
        a, *_ = joint.forward(x[:n], Pos(start, n, cpu))
        b, *_ = apart.forward(x[:n], Pos(start, n, cpu))
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
