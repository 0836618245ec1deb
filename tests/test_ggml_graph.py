"""The shape-only ggml graph mirror and its ggml-alloc replay (moeplan/planner/memory/ggml_graph.py).

The replay is held to llama.cpp's own buffer sizes in test_memory_llamacpp.py; these tests pin
the allocator rules it mirrors on graphs small enough to follow by hand.
"""
from __future__ import annotations

from moeplan.planner.memory.ggml_graph import F32, I32, BestFit, Graph, allocate

MIB = 1 << 20


def test_best_fit_takes_the_smallest_hole_then_the_end():
    a = BestFit()
    x, y, z = a.alloc(100), a.alloc(50), a.alloc(200)
    assert (x, y, z) == (0, 100, 150) and a.max_size == 350
    a.free(x, 100)  # hole [0, 100)
    a.free(z, 200)  # merges into the open end at 150
    assert a.alloc(40) == 0  # the hole fits: smallest block that fits, not the end
    assert a.alloc(70) == 150  # the remaining hole (60) is too small: the end
    a.free(y, 50)  # [100, 150) merges with the hole [40, 100)
    assert a.alloc(110) == 40
    assert a.max_size == 350


def test_best_fit_prefers_the_later_of_equal_holes():
    a = BestFit()
    offs = [a.alloc(10) for _ in range(5)]
    a.free(offs[1], 10)
    a.free(offs[3], 10)
    assert a.alloc(10) == offs[3]  # ggml_dyn_tallocr_alloc: block->size <= best_fit_size


def test_elementwise_chain_runs_in_place():
    """rms_norm -> mul -> add on an owned tensor with one consumer each reuse its memory."""
    g = Graph()
    x = g.new_tensor("x", 256, 64)
    y = g.mul_mat(g.external("w", 256, 256), x)
    z = g.unary("ADD", g.unary("MUL", g.unary("RMS_NORM", y), g.external("n", 256)), g.external("b", 256))
    out = g.mul_mat(g.external("w2", 256, 8), z)
    out.output = True
    g.expand(out)
    r = allocate(g)
    row = 256 * 64 * 4
    # x, then y (rms_norm, mul and add in place on it); out takes x's freed slot
    assert r.peak_bytes == 2 * row


def test_no_reuse_while_another_consumer_waits_nor_of_a_view():
    """An op takes over a source only when it is the source's last remaining consumer, and
    never a view (galloc does not own views)."""
    g = Graph()
    x = g.new_tensor("x", 1024)  # 4096 bytes at 0
    y = g.op("CONT", (1024,), F32, x)  # at 4096; x freed
    a = g.unary("SCALE", y)  # y still has b waiting: a new tensor, in x's hole at 0
    b = g.unary("SCALE", y)  # now b is y's last consumer: in place
    out = g.unary("ADD", a, b)  # in place on a; b freed
    g.expand(out)
    assert allocate(g).peak_bytes == 2 * 4096

    g = Graph()
    y = g.expand(g.op("CONT", (1024,), F32, g.new_tensor("x", 1024)))  # x at 0, t at 4096, y at 4128
    g.expand(g.op("CONT", (1024,), F32, g.new_tensor("t", 1)))  # fills x's hole, kept
    g.expand(g.unary("SCALE", g.reshape(y, 32, 32)))  # y's only consumer is a view: new memory
    assert allocate(g).peak_bytes == 4128 + 2 * 4096


def test_a_view_keeps_its_owner_alive_until_the_view_is_used():
    g = Graph()
    big = g.op("CONT", (MIB // 4,), F32, g.new_tensor("a", 1))  # leafs a, b: 32 bytes each
    v = g.expand(g.view(big, 16))
    z = g.expand(g.op("CONT", (MIB // 2,), F32, g.new_tensor("b", 1)))
    g.expand(g.unary("SCALE", g.op("CONT", (16,), F32, v)))
    r = allocate(g)
    # big stays until v's consumer runs, so z (2 MiB) goes above it: 64 + 1 MiB + 2 MiB
    assert r.peak_bytes == 64 + 3 * MIB
    assert z.op == "CONT" and ("CONT", "node", MIB) in r.live_at_peak


def test_outputs_are_never_freed_and_leafs_come_first():
    g = Graph()
    a = g.new_tensor("a", 1000)
    b = g.new_tensor("b", 1000)
    logits = g.op("CONT", (1000,), F32, a)
    logits.output = True
    g.expand(logits)
    tail = g.op("CONT", (1000,), F32, b)
    g.expand(tail)
    r = allocate(g)
    # a is freed after logits is made, so tail takes a's place; logits stays
    assert r.peak_bytes == 3 * 4000
    names = [n for n, _, _ in r.live_at_peak]
    assert "a" in names and "b" in names


def test_set_rows_sources_are_src_idx_dst():
    """ggml_set_rows(dst, src, idx) lists (src, idx, dst): the depth-first walk reaches the
    rows before the destination, as llama.cpp's graphs order them."""
    g = Graph()
    dst = g.op("FILL", (8, 16), F32, g.new_tensor("mask", 8, 16))
    rows = g.op("CONT", (8, 4), F32, g.new_tensor("rows", 8, 4))
    idx = g.new_tensor("idx", 4, type=I32)
    s = g.set_rows(dst, rows, idx)
    g.expand(s)
    order = [t.name or t.op for t in g.nodes]
    assert order.index("CONT") < order.index("FILL")
    assert s.view_src is dst


def test_staged_copy_lives_only_for_its_op():
    g = Graph()
    x = g.new_tensor("x", 64, 8)
    ids = g.new_tensor("ids", 2, 8, type=I32)
    mm = g.mul_mat_id(g.external("exps", 64, 32, 4), g.reshape(x, 64, 1, 8), ids)
    after = g.op("CONT", mm.ne, F32, mm)
    g.expand(after)
    base = allocate(g).peak_bytes
    staged = allocate(g, extra={id(mm): 10_000})
    assert staged.peak_bytes >= base + 10_000 - 32
    assert any(kind == "staging" for _, kind, _ in staged.live_at_peak)
