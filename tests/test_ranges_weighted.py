"""The source-weighted conformal calibration of the ranges (cost/ranges.py), on hand-worked sets."""
from __future__ import annotations

import pytest

from moeplan.planner.cost.ranges import source_weights, weighted_conformal_quantile, weighted_median


def test_every_source_weighs_one():
    assert source_weights(["a", "a", "b", "c", "c", "c", "c"]) == [0.5, 0.5, 1.0, 0.25, 0.25, 0.25, 0.25]
    assert sum(source_weights(["a", "a", "b", "c", "c", "c", "c"])) == pytest.approx(3.0)


def test_one_row_per_source_is_split_conformal():
    # ten sources of one row: the ceil((10 + 1) x 0.8) = 9th smallest
    v = [float(i) for i in range(1, 11)]
    assert weighted_conformal_quantile(v, [f"s{i}" for i in range(10)], 0.8) == 9.0
    # four sources: 0.8 x 5 = 4 needs all four, the largest
    assert weighted_conformal_quantile([1.0, 2.0, 3.0, 4.0], ["a", "b", "c", "d"], 0.8) == 4.0
    # three sources: 0.8 x 4 = 3.2 > 3, no finite score covers; the largest is returned
    assert weighted_conformal_quantile([1.0, 2.0, 3.0], ["a", "b", "c"], 0.8) == 3.0


def test_a_source_with_many_tight_rows_does_not_narrow_the_quantile():
    # nine sources of one row with scores 0.1 .. 0.9, and one source of 40 rows at 0.05.
    # Row-weighted, 40 of 49 rows sit at 0.05 and split conformal's ceil(50 x 0.8) = 40th
    # smallest is 0.05. Source-weighted: S = 10, the level needed is 0.8 x 11 = 8.8; sorted,
    # the 40 rows reach 1.0 at 0.05, then one unit per source: 0.1 -> 2, ..., 0.8 -> 9 >= 8.8.
    scores = [0.05] * 40 + [0.1 * k for k in range(1, 10)]
    sources = ["big"] * 40 + [f"s{k}" for k in range(1, 10)]
    assert sorted(scores)[40 - 1] == 0.05
    assert weighted_conformal_quantile(scores, sources, 0.8) == pytest.approx(0.8)


def test_rows_of_a_source_share_its_unit_of_weight():
    # sources a (rows 0.1, 0.5), b (0.2), c (0.3), d (0.4), e (0.6): weights 0.5, 1, 1, 1, 0.5, 1
    # sorted 0.1 (0.5), 0.2 (1.5), 0.3 (2.5), 0.4 (3.5), 0.5 (4.0), 0.6 (5.0); S = 5, need
    # 0.8 x 6 = 4.8 -> 0.6; at q = 0.6 need 3.6 -> 0.5; at q = 0.5 need 3.0 -> 0.4
    scores = [0.1, 0.5, 0.2, 0.3, 0.4, 0.6]
    sources = ["a", "a", "b", "c", "d", "e"]
    assert weighted_conformal_quantile(scores, sources, 0.8) == 0.6
    assert weighted_conformal_quantile(scores, sources, 0.6) == 0.5
    assert weighted_conformal_quantile(scores, sources, 0.5) == 0.4


def test_weighted_median():
    # three sources: a's three rows weigh 1/3 each; total 3, half 1.5: 0.0 (1/3), 0.1 (2/3),
    # 0.2 (1), 1.0 (2) -> 1.0; row-weighted it would be 0.15
    assert weighted_median([0.0, 0.1, 0.2, 1.0, 2.0], ["a", "a", "a", "b", "c"]) == 1.0
    # the half falls exactly between two values: their mean
    assert weighted_median([1.0, 3.0], ["a", "b"]) == 2.0
    assert weighted_median([5.0], ["a"]) == 5.0
    assert weighted_median([], []) == 0.0
