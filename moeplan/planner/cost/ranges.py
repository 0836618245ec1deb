"""Fitted term-group scales and the ranges of a prediction (docs/cost-model.md): the term groups
(defined once here, imported by benchmarks/accuracy.py), the held-out range of the group that
dominates the terms, the priors' range from each term's uncertainty, and the bottleneck.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

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
    by = group_seconds(terms)
    return max(sorted(by), key=lambda g: by[g]) if by else "all"


# A CPU the user did not name is costed as a stand-in (profiles/catalog.py STAND_IN_CPU): the
# catalog's desktop parts read DRAM at -0.46 .. +0.23 log of the desktop stand-in's rate, its
# single-socket server parts at -1.73 .. +0.22 of the server stand-in's (10th-90th percentile,
# tests/test_hardware_spec.py recomputes both), so the CPU's share of the time widens the range
# by that much more.
STAND_IN_CPU_LOG_SPREAD = {"desktop": 0.35, "server": 0.98}


# The range tier: how far the prediction rests on the figures `moeplan hardware --cpu NAME` derives
# for the CPU (its DRAM read rate = channels x MT/s x an efficiency, its kernel rates from the
# family's priors), which describe a part, not the user's machine (BIOS, DIMM population, NUMA
# binding, CCD links, a busy box). A prediction whose CPU terms carry at least CPU_BOUND_SHARE of
# the time, or that has no GPU term at all, is 'cpu-bound' and takes the width of the train rows
# of that tier; the rest, whose time is shared with (or held by) GPU figures, 'shared'. On the train split's calibration rows
# (held out by source) the CPU-bound decode rows scatter about twice as far as the others
# (docs/cost-model.md, "Range tiers"); benchmarks/accuracy.py sets each tier's width from its
# own rows where it has enough sources, else the pooled one ('all').
CPU_BOUND_SHARE = 0.8
RANGE_TIERS = ("cpu-bound", "shared")
CPU_BOUND_TEXT = ("CPU-bound: {share:.0%} of the time is the CPU's, whose read and kernel rates come from the part's "
                  "spec sheet and family priors, not a measurement of this machine; such runs scatter wider "
                  "between machines")


def group_seconds(terms: Sequence[Term]) -> dict[str, float]:
    """Seconds of the terms by group (TERM_GROUP: cpu, gpu, pcie, fixed)."""
    by: dict[str, float] = {}
    for t in terms:
        g = TERM_GROUP.get(t.resource, "fixed")
        by[g] = by.get(g, 0.0) + t.seconds
    return by


def cpu_share_of_groups(by_group: dict[str, float]) -> float:
    """The share of the time that is the CPU's: its group's; all of it where no GPU or PCIe term
    is there (a CPU-only run's barriers and per-token costs are its thread pool's)."""
    total = sum(by_group.values())
    if total <= 0:
        return 0.0
    if not by_group.get("gpu") and not by_group.get("pcie"):
        return 1.0
    return by_group.get("cpu", 0.0) / total


def tier_of_groups(by_group: dict[str, float]) -> str:
    """'cpu-bound' where the CPU's share (cpu_share_of_groups) is at least CPU_BOUND_SHARE, else 'shared'."""
    return "cpu-bound" if cpu_share_of_groups(by_group) >= CPU_BOUND_SHARE else "shared"


def cpu_share(terms: Sequence[Term]) -> float:
    return cpu_share_of_groups(group_seconds(terms))


def range_tier(terms: Sequence[Term]) -> str:
    return tier_of_groups(group_seconds(terms))


def range_key(terms: Sequence[Term], widths: dict[str, float]) -> str | None:
    """The widths' entry a prediction's range uses: its tier where fit.json has one, else the
    pooled 'all'; None where neither is there (the priors' range applies)."""
    g = range_tier(terms)
    g = g if g in widths else "all"
    return g if g in widths else None


def range_tier_note(metric: str, key: str | None, terms: Sequence[Term], widths: dict[str, float]) -> str | None:
    """Why a CPU-bound range is wider than the pooled one, where it is (None otherwise)."""
    if key != "cpu-bound" or "all" not in widths or widths[key] <= widths["all"] + 1e-9:
        return None
    return (f"{metric} range wider than the pooled one (x{math.exp(widths[key]):.2f} either side against "
            f"x{math.exp(widths['all']):.2f}): " + CPU_BOUND_TEXT.format(share=cpu_share(terms)))


def held_out_range(value: float, terms: list[Term], widths: dict[str, float],
                   extra_log: float = 0.0, centers: dict[str, float] | None = None) -> tuple[float, float] | None:
    """value x exp(-c -/+ w) for the range tier of the terms (range_key): w its held-out 80% log
    half-width (with an independent extra log half-width added in quadrature), c the median
    log(predicted/measured) of the train split's public rows of that tier: the range is centred
    where measured runs fall against the model's figure."""
    g = range_key(terms, widths)
    if g is None:
        return None
    w = widths[g]
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


# ---- calibrating the ranges (benchmarks/accuracy.py --write-fit) ------------------------------
# Each held-out residual belongs to a source (one page, thread or repository: one machine and one
# way of measuring). A new user's machine is a new source, and rows of one source share their
# machine's error, so the calibration weighs every source the same: a row counts 1/n of its
# source's n rows. Row-weighted, one source with many tight rows (52 Strix Halo rows of one
# repository) would narrow every range.

def source_weights(sources: Sequence[str]) -> list[float]:
    """Each row's weight: 1 / (rows of its source), so that every source weighs 1."""
    n: dict[str, int] = {}
    for s in sources:
        n[s] = n.get(s, 0) + 1
    return [1.0 / n[s] for s in sources]


def weighted_median(values: Sequence[float], sources: Sequence[str]) -> float:
    """The median of values with every source weighing the same (source_weights): the smallest
    value whose cumulative weight reaches half the total, the mean of it and the next value where
    the half falls exactly between them; 0 for no values."""
    if not values:
        return 0.0
    pairs = sorted(zip(values, source_weights(sources), strict=True))
    half = 0.5 * sum(w for _, w in pairs)
    cum = 0.0
    for i, (v, w) in enumerate(pairs):
        cum += w
        if math.isclose(cum, half, rel_tol=1e-12, abs_tol=1e-12) and i + 1 < len(pairs):
            return 0.5 * (v + pairs[i + 1][0])
        if cum > half:
            return v
    return pairs[-1][0]


def weighted_conformal_quantile(scores: Sequence[float], sources: Sequence[str], q: float) -> float:
    """The q-quantile of held-out conformity scores with every source weighing 1 (a row 1/n of its
    source's n rows) and the finite-sample correction of weighted split conformal prediction
    (Tibshirani, Barber, Candes and Ramdas 2019, 'Conformal prediction under covariate shift'):
    the new machine is one more source, whose unit of weight sits at +infinity, so the quantile is
    the smallest score whose cumulative weight reaches q x (S + 1) for S sources. With one row per
    source this is split conformal's ceil((n + 1) q)-th smallest score. Where q x (S + 1) > S
    (fewer than q / (1 - q) sources) no finite score suffices and the largest is returned."""
    if not scores:
        return float("nan")
    pairs = sorted(zip(scores, source_weights(sources), strict=True))
    n_sources = len(set(sources))
    need = q * (n_sources + 1)
    cum = 0.0
    for v, w in pairs:
        cum += w
        if cum >= need - 1e-9:
            return v
    return pairs[-1][0]
