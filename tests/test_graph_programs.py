"""The compiled graph programs (planner/memory/graph_buffers.py) against plain builds.

The search evaluates a mirrored graph's block sizes as affine functions of the cache cells,
compiled once per reserved shape, and no longer builds the plain graph to check them on every
plan (issue 31: that second build was a third of a DeepSeek V4 / GLM-5 plan). This test does
the check instead, for every bundled model whose compute buffer is a mirrored graph, over the
shapes the search reserves (each ubatch, f16 and q4_0 caches, one and two sequences): the
program compiles, agrees with the plain build where it was compiled, and gives the plain
build's bytes at other contexts too."""
from __future__ import annotations

import pytest

from moeplan.planner.memory import graph_buffers as gb
from moeplan.planner.memory.ggml_graph import block_bytes, plan_allocation
from moeplan.planner.placement import Placement
from moeplan.profiles.model_profiles import load_profile

GRAPH_MODELS = ("deepseek-v4-flash", "deepseek-v4-pro", "glm-5.1", "glm-5.2")


def _plain_sizes(build, cells, plan):
    graph, tags = build(cells)
    return block_bytes(plan, graph), plan_allocation(graph, tags)


@pytest.mark.parametrize("name", GRAPH_MODELS)
def test_bundled_graph_models_are_covered(name):
    model = load_profile(name)
    assert model.arch in gb.GRAPH_ARCHS
    assert gb._builder(model, Placement(), 512, 512, 32768, 512) is not None


@pytest.mark.parametrize("name", GRAPH_MODELS)
@pytest.mark.parametrize("ubatch,kv,n_seq", [(512, "f16", 1), (4096, "f16", 1), (1024, "q4_0", 1),
                                             (2048, "f16", 2)])
def test_program_equals_the_plain_build(name, ubatch, kv, n_seq):
    model = load_profile(name)
    p = Placement(n_ubatch=ubatch, n_batch=max(2048, ubatch), cache_type_k=kv, cache_type_v=kv,
                  flash_attn=True, n_seq=n_seq)
    build, cells, saturated, _ = gb._builder(model, p, ubatch, ubatch, 32768, ubatch)
    assert saturated
    prog = gb._compile(build, cells, check=True)
    assert prog is not None, "the affine build disagrees with the plain one where it was compiled"
    # a larger context: same key (the raw window and top-k are fixed once the cache is large)
    big, big_cells, _, key_big = gb._builder(model, p, ubatch, ubatch, 131072, ubatch)
    assert key_big == gb._builder(model, p, ubatch, ubatch, 32768, ubatch)[3]
    plain, plan = _plain_sizes(big, big_cells, prog.plan)
    assert plan == prog.plan, "the allocation order changed with the context"
    assert prog.sizes(big_cells) == plain
    assert prog.sizes(big_cells) != prog.sizes(cells)  # the cells do move the sizes


def test_check_rejects_a_program_that_disagrees():
    """check=True is not vacuous: a builder whose plain build differs from its affine one fails."""
    model = load_profile("glm-5.2")
    p = Placement(n_ubatch=512, flash_attn=True)
    build, cells, _, _ = gb._builder(model, p, 512, 512, 32768, 512)
    other, _, _, _ = gb._builder(model, p, 1024, 1024, 32768, 1024)

    def lying(c):
        return build(c) if not isinstance(c[0], int) else other(c)

    assert gb._compile(lying, cells, check=True) is None
    assert gb._compile(lying, cells) is not None  # the unchecked search path does not see it
