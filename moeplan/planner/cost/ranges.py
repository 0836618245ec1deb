"""Fitted term-group scales and the ranges of a prediction (docs/cost-model.md): the term groups
(defined once here, imported by benchmarks/accuracy.py), the held-out range of the group that
dominates the terms, the priors' range from each term's uncertainty, and the bottleneck.
"""
from __future__ import annotations

import math

from moeplan.planner.hardware.profile import HardwareProfile
from moeplan.planner.plan import Term

# 1.28 sigma: the reported range is about an 80% interval
RANGE_SIGMA = 1.28


def _terms_range(terms: list[Term], errs: dict[str, float]) -> float:
    total = sum(t.seconds for t in terms)
    if total <= 0:
        return 0.0
    var = sum((t.seconds * errs.get(t.name, 0.3)) ** 2 for t in terms)
    return min(0.9, RANGE_SIGMA * math.sqrt(var) / total)


# the resource a term charges -> the group whose time scale is fitted (benchmarks/accuracy.py)
TERM_GROUP = {"cpu-mem": "cpu", "cpu-compute": "cpu", "nvme": "cpu", "gpu-mem": "gpu", "gpu-compute": "gpu",
              "pcie": "pcie", "sync": "fixed"}


def fitted_term_scales(terms: list[Term], scales: dict[str, float]) -> list[Term]:
    """Each term times its group's fitted scale (1 where none was fitted)."""
    out = []
    for t in terms:
        x = scales.get(TERM_GROUP.get(t.resource, "fixed"), 1.0)
        out.append(t if x == 1.0 else Term(t.name, t.seconds * x, t.resource,
                                           f"{t.formula} x {x:.2f} (fitted {TERM_GROUP.get(t.resource, 'fixed')} scale)"))
    return out


def dominant_group(terms: list[Term]) -> str:
    by: dict[str, float] = {}
    for t in terms:
        g = TERM_GROUP.get(t.resource, "fixed")
        by[g] = by.get(g, 0.0) + t.seconds
    return max(sorted(by), key=lambda g: by[g]) if by else "all"


# A CPU the user did not name is costed as a stand-in (profiles/catalog.py STAND_IN_CPU): the
# catalog's desktop parts read DRAM at -0.46 .. +0.23 log of the desktop stand-in's rate, its
# single-socket server parts at -1.73 .. +0.22 of the server stand-in's (10th-90th percentile,
# tests/test_hardware_spec.py recomputes both), so the CPU's share of the time widens the range
# by that much more.
STAND_IN_CPU_LOG_SPREAD = {"desktop": 0.35, "server": 0.98}


def held_out_range(value: float, terms: list[Term], widths: dict[str, float],
                   extra_log: float = 0.0, centers: dict[str, float] | None = None) -> tuple[float, float] | None:
    """value x exp(-c -/+ w) for the group dominating the terms: w its held-out 80% log
    half-width (with an independent extra log half-width added in quadrature), c the median
    log(predicted/measured) of the train split's public rows it dominates: the range is centred where
    measured runs fall against the model's figure."""
    g = dominant_group(terms)
    g = g if g in widths else "all"
    w = widths.get(g)
    if w is None:
        return None
    w = math.hypot(w, extra_log)
    c = (centers or {}).get(g, 0.0)
    return value * math.exp(-c - w), value * math.exp(w - c)


def _stand_in_extra(hw: HardwareProfile, terms: list[Term]) -> float:
    total = sum(t.seconds for t in terms)
    if hw.cpu.source != "prior" or total <= 0:
        return 0.0
    cpu = sum(t.seconds for t in terms if t.resource in ("cpu-mem", "cpu-compute"))
    spread = STAND_IN_CPU_LOG_SPREAD["desktop" if hw.cpu.segment == "desktop" else "server"]
    return spread * cpu / total


def _bottleneck(terms: list[Term]) -> str:
    if not terms:
        return "none"
    by_res: dict[str, float] = {}
    for t in terms:
        by_res[t.resource] = by_res.get(t.resource, 0.0) + t.seconds
    return max(sorted(by_res), key=lambda r: by_res[r])


BOTTLENECK_TEXT = {
    "cpu-mem": "CPU DRAM bandwidth (routed experts read from RAM)",
    "cpu-compute": "CPU compute (dequantising and multiplying experts)",
    "gpu-mem": "GPU memory bandwidth",
    "gpu-compute": "GPU compute / kernel launches",
    "pcie": "PCIe host-to-GPU copies",
    "sync": "per-layer synchronisation between CPU and GPU",
    "nvme": "NVMe reads (the CPU experts do not fit in RAM)",
}
