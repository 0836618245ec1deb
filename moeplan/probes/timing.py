"""Pure summarisers of timed samples (the measuring code only collects the samples).

Every measurement in the probe is split in two: a `measure_*` function that moves bytes and
records (bytes, seconds) samples, and a function here that turns samples into a Figure. The
summarisers are tested on injected samples.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from moeplan.planner.hardware.profile import Figure


@dataclass(frozen=True)
class RateStats:
    """Rates in bytes/s (or FLOP/s) of a set of samples."""

    best: float
    median: float
    worst: float
    overall: float  # sum of work / sum of time
    spread: float  # (best - worst) / median
    n: int


def summarise_rates(samples: list[tuple[float, float]]) -> RateStats:
    """samples: (work, seconds) pairs; samples with no time or no work are dropped."""
    good = [(w, s) for w, s in samples if s > 0 and w > 0]
    if not good:
        raise ValueError("no usable samples")
    rates = [w / s for w, s in good]
    med = statistics.median(rates)
    best, worst = max(rates), min(rates)
    overall = sum(w for w, _ in good) / sum(s for _, s in good)
    return RateStats(best=best, median=med, worst=worst, overall=overall,
                     spread=(best - worst) / med if med > 0 else 0.0, n=len(good))


def measured_figure(stats: RateStats, method: str, value: str = "best") -> Figure:
    """A 'measured' Figure: value is the best sample (STREAM's rule) or the overall rate
    (value='overall', as fio reports a whole run); the median is kept beside it."""
    v = stats.best if value == "best" else stats.overall
    return Figure(value=v, source="measured", method=method, n_samples=stats.n,
                  spread=round(stats.spread, 4), achievable=1.0, median=stats.median)


def windows(samples: list[tuple[float, float]], min_seconds: float) -> list[tuple[float, float]]:
    """Merge consecutive small (work, seconds) samples into windows of at least `min_seconds`,
    so one slow syscall does not make the spread meaningless. A short tail joins the last window."""
    out: list[tuple[float, float]] = []
    w_acc = s_acc = 0.0
    for w, s in samples:
        w_acc += w
        s_acc += s
        if s_acc >= min_seconds:
            out.append((w_acc, s_acc))
            w_acc = s_acc = 0.0
    if s_acc > 0:
        if out:
            w_last, s_last = out.pop()
            out.append((w_last + w_acc, s_last + s_acc))
        else:
            out.append((w_acc, s_acc))
    return out
