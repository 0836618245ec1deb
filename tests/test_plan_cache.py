"""The search-owned memo (planner/memory/cache.py): shared inside an open cache, nothing kept outside."""
from __future__ import annotations

from model_builders import toy_hw, toy_model, unit_priors

from moeplan.planner.memory.cache import PlanCache, memo, plan_cache
from moeplan.planner.placement import Placement
from moeplan.planner.search import Request, choose_plan


def test_memo_is_shared_inside_an_open_cache_and_thrown_away_outside():
    m = toy_model(n_layers=4, n_experts=8, k=2)
    memo(m)["x"] = 1
    assert "x" not in memo(m)  # no cache open: nothing is kept
    with plan_cache() as c:
        memo(m)["x"] = 1
        with plan_cache() as inner:  # a nested call (estimate inside the search) reuses it
            assert inner is c and memo(m)["x"] == 1
        other = toy_model(n_layers=4, n_experts=8, k=2)
        assert "x" not in memo(other)  # per model object
    assert "x" not in memo(m)


def test_a_given_cache_is_used_and_filled_by_the_search():
    m = toy_model(n_layers=6, n_experts=16, k=4, n_embd=1024, n_ff_exp=512)
    hw, pr = toy_hw(vram_gib=4), unit_priors()
    cache = PlanCache()
    with plan_cache(cache):
        res = choose_plan(m, hw, pr, Request())
    assert cache.for_model(m)  # the terms of the evaluated placements were memoised
    # the same search without any cache open gives the same plan
    assert choose_plan(m, hw, pr, Request()).best.placement == res.best.placement
    assert isinstance(res.best.placement, Placement)
