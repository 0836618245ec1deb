"""The compiled graph programs (planner/memory/graph_buffers.py) against plain builds.

The search evaluates a mirrored graph's block sizes as polynomials in the reserved ubatch's
tokens and outputs and the cache cells (ggml_graph.Sym), compiled once per model, cache type,
flash attention and stream count, and no longer builds the plain graph to check them on every
plan (issue 31: that build, once per ubatch, was most of a DeepSeek V4 / GLM-5 plan). These
tests do the check instead, for every bundled model whose compute buffer is a mirrored graph,
over the shapes the search reserves (each ubatch, f16 and q4_0 caches, flash attention on and
off, one and two sequences) and contexts from 4k to 128k: the program agrees with the plain
build's allocation plan and bytes wherever its guards hold, one program covers the search's
ubatches, and where a guard fails (a ubatch below the compressors' ratio) the program is not
used.
"""
from __future__ import annotations

import pytest

from moeplan.planner.memory import graph_buffers as gb
from moeplan.planner.memory.ggml_graph import Sym, block_bytes, plan_allocation, trace
from moeplan.planner.placement import Placement
from moeplan.profiles.model_profiles import load_profile

GRAPH_MODELS = ("deepseek-v4-flash", "deepseek-v4-pro", "glm-5.1", "glm-5.2")
SEARCH_UBATCHES = (512, 1024, 2048, 4096)
CONTEXTS = (4096, 32768, 131072)


def _made(model, ubatch, ctx, kv="f16", flash=True, n_seq=1):
    p = Placement(n_ctx=ctx, n_ubatch=ubatch, n_batch=max(2048, ubatch), cache_type_k=kv, cache_type_v=kv,
                  flash_attn=flash, n_seq=n_seq)
    t = min(ubatch, ctx)
    return gb._builder(model, p, t, t, ctx // n_seq, ubatch)


def _assert_plain(build, x, prog):
    graph, tags = build(x)
    assert plan_allocation(graph, tags) == prog.plan, f"the allocation order changed at {x}"
    assert block_bytes(prog.plan, graph) == prog.sizes(x), f"the sizes differ at {x}"


@pytest.mark.parametrize("name", GRAPH_MODELS)
def test_bundled_graph_models_are_covered(name):
    model = load_profile(name)
    assert model.arch in gb.GRAPH_ARCHS
    assert _made(model, 512, 32768) is not None


@pytest.mark.parametrize("name", GRAPH_MODELS)
@pytest.mark.parametrize("kv,flash,n_seq", [("f16", True, 1), ("q4_0", True, 1), ("f16", False, 1),
                                            ("q8_0", True, 2)])
def test_one_program_is_the_plain_build_at_every_search_ubatch(name, kv, flash, n_seq):
    """Compiled at ubatch 512 and 32k context, the program holds at every ubatch the search
    tries and every larger context, and equals the plain build at each (plan and bytes). At
    4k a stream's cache can hold fewer cells than the indexer's top-k (the top-k mask then
    follows the cells): a second program compiled there must equal the plain build too."""
    model = load_profile(name)
    build, x, key = _made(model, 512, 32768, kv, flash, n_seq)
    prog = gb._compile(build, x, check=True)
    assert prog is not None, "the symbolic build disagrees with the plain one where it was compiled"
    sizes = set()
    for ub in SEARCH_UBATCHES:
        for ctx in CONTEXTS:
            b, xu, key_u = _made(model, ub, ctx, kv, flash, n_seq)
            assert key_u == key, "the key must not depend on the ubatch or the context"
            use = prog
            if not prog.trace.holds(xu):
                assert ctx == 4096, f"a guard fails at ubatch {ub}, context {ctx}: {xu}"
                use = gb._compile(b, xu, check=True)
                assert use is not None and use.trace.holds(xu)
            _assert_plain(b, xu, use)
            sizes.add(tuple(use.sizes(xu)))
    assert len(sizes) == len(SEARCH_UBATCHES) * len(CONTEXTS)  # the point does move the sizes


@pytest.mark.parametrize("name", ("deepseek-v4-flash", "glm-5.2"))
@pytest.mark.parametrize("ubatch", (1, 2, 32, 100, 256, 640))
def test_small_and_odd_ubatches(name, ubatch):
    """A ubatch below the compressors' ratios or not a multiple of them: either the 512
    program's guards hold and it equals the plain build, or they fail and a program compiled
    there does."""
    model = load_profile(name)
    build, x, _ = _made(model, 512, 32768, n_seq=2)
    prog = gb._compile(build, x)
    b, xu, _ = _made(model, ubatch, 32768, n_seq=2)
    if not prog.trace.holds(xu):
        prog = gb._compile(b, xu, check=True)
        assert prog is not None and prog.trace.holds(xu)
    _assert_plain(b, xu, prog)


def test_a_failing_guard_is_seen():
    """DeepSeek V4's compressors divide the tokens by 128: a program traced at T = 512 does not
    hold at T = 32 (the guard is not vacuous), and the plain build there differs from it."""
    model = load_profile("deepseek-v4-flash")
    build, x, _ = _made(model, 512, 32768)
    prog = gb._compile(build, x)
    _, x32, _ = _made(model, 32, 32768)
    assert not prog.trace.holds(x32)


def test_evaluate_reuses_one_program_across_ubatches():
    """The search's path (_evaluate) compiles once per key for the search's ubatches."""
    from moeplan.planner.memory.cache import memo, plan_cache

    model = load_profile("glm-5.2")
    with plan_cache():
        for ub in SEARCH_UBATCHES:
            p = Placement(n_ctx=32768, n_ubatch=ub, n_batch=max(2048, ub), flash_attn=True)
            assert gb._evaluate(model, p, ub, ub, 32768, ub, staged=False) is not None
        progs = [v for k, v in memo(model).items() if k[0] == "graph_programs"]
    assert len(progs) == 1 and len(progs[0]) == 1


def test_check_rejects_a_program_that_disagrees():
    """check=True is not vacuous: a builder whose plain build differs from its symbolic one fails."""
    model = load_profile("glm-5.2")
    build, x, _ = _made(model, 512, 32768)
    other, _, _ = _made(model, 512, 32768, flash=False)  # f32 masks: other sizes

    def lying(point):
        return build(point) if not isinstance(point[0], int) else other(point)

    assert gb._compile(lying, x, check=True) is None
    assert gb._compile(lying, x) is not None  # the unchecked search path does not see it


# ---- Sym ------------------------------------------------------------------------------------

def test_sym_arithmetic_is_exact_and_constants_collapse():
    t, c = Sym.var(0, 512), Sym.var(1, 4096)
    e = (t * 4 + 8) * c - t * c * 4  # 8 * c
    assert isinstance(e, Sym) and e.p == {(1,): 8} and e.den == 1 and e.v == 8 * 4096
    assert isinstance(t - t, int) and t - t == 0
    assert (t * c * 2).at((3, 5)) == 30
    with trace() as tr:
        half = t // 2  # inexact in general: guarded on T being even
    assert isinstance(half, Sym) and half.v == 256 and half.at((6, 0)) == 3
    assert tr.holds((6, 0)) and not tr.holds((7, 0))
    assert len(tr.guards) == 1


def test_sym_decisions_are_guarded():
    t = Sym.var(0, 512)
    with pytest.raises(TypeError):
        _ = t < 1024  # a decision outside a trace
    with trace() as tr:
        assert min(t, 1024) is t  # guarded: not T > 1024 (min keeps its first on a tie)
        assert t % 128 == 0
    assert tr.holds((1024,)) and tr.holds((256,))
    assert not tr.holds((2048,))  # min would pick 1024
    assert not tr.holds((1000,))  # not a multiple of 128
    with trace() as exact:
        q = (t * 4) // 4
        assert (t * 6) % 3 == 0
    assert isinstance(q, Sym) and q.p == {(0,): 1}
    assert not exact.guards  # exact division and remainder need no guard


@pytest.mark.parametrize("name", ("deepseek-v4-flash", "glm-5.2"))
def test_the_search_replay_is_the_detailed_replay(name):
    """replay() without names (the search's calls) and with them (the walk that also lists
    the tensors at the peak) give the same peak, at several ubatches, both alignments and
    random sets of staged expert copies."""
    import random

    from moeplan.planner.memory.ggml_graph import replay

    rng = random.Random(7)
    model = load_profile(name)
    build, x, _ = _made(model, 512, 32768)
    prog = gb._compile(build, x)
    layers = sorted({t[0] for t in prog.plan.tags if t is not None})
    names = ["t"] * len(prog.plan.slots)
    peaks = set()
    for ub in (512, 2048):
        base = prog.sizes(_made(model, ub, 32768)[1])
        for trial in range(3):
            sizes = list(base)
            cpu = set(rng.sample(layers, rng.randrange(1, len(layers) + 1))) if trial else set()
            for b, tag in enumerate(prog.plan.tags):
                if tag is not None and tag[0] in cpu:
                    sizes[b] = rng.randrange(1, 2 << 30)
            for alignment in (32, 128):
                detailed = replay(prog.plan, sizes, alignment, names)
                assert detailed.live_at_peak
                detailed.live_at_peak = []
                fast = replay(prog.plan, sizes, alignment)
                assert fast == detailed
                peaks.add(fast.peak_bytes)
    assert len(peaks) > 6
