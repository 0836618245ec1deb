"""Layer sampling: run K blocks of each class and scale their measurements to the whole model.

A class is what decides a block's cost: (block kind, attention kind and label, expert tier).
With K blocks of a class of n run, every time and byte measured on those blocks counts
n / K times; block -1 (embedding, output head) counts once. So a 61-block model with 3 dense
MLA blocks and 58 MoE blocks, 20 of them on the CPU, runs 3 x K blocks at most.
"""
from __future__ import annotations

from collections import defaultdict

from moeplan.executor.layout import LayerLayout

GLOBAL = -1


def block_class(lay: LayerLayout, tier: str) -> str:
    return f"{lay.ffn.kind}/{lay.attn.kind}:{lay.attn.label}/{tier}"


def classes_of(layers: tuple[LayerLayout, ...], tier_of: dict[int, str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for lay in layers:
        out[block_class(lay, tier_of.get(lay.index, "gpu"))].append(lay.index)
    return dict(out)


def choose_sample(classes: dict[str, list[int]], k: int | None) -> dict[str, list[int]]:
    """K evenly spaced blocks of each class (all of them when K is None or K >= n)."""
    out = {}
    for key, members in classes.items():
        n = len(members)
        if k is None or k >= n:
            out[key] = list(members)
        else:
            out[key] = [members[int((i + 0.5) * n / k)] for i in range(k)]
    return out


def scale_factors(classes: dict[str, list[int]], sample: dict[str, list[int]]) -> dict[int, float]:
    """Block index -> how many blocks of the model its measurements stand for."""
    f: dict[int, float] = {GLOBAL: 1.0}
    for key, chosen in sample.items():
        for i in chosen:
            f[i] = len(classes[key]) / len(chosen)
    return f


def extrapolate(per_block: dict[int, dict[str, float]], factors: dict[int, float]) -> dict[str, float]:
    """Sum per tier over blocks, each scaled by its factor (blocks without one count once)."""
    total: dict[str, float] = defaultdict(float)
    for blk, tiers in per_block.items():
        fac = factors.get(blk, 1.0)
        for tier, v in tiers.items():
            total[tier] += v * fac
    return dict(total)
