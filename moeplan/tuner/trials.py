"""One measured placement: its repeated runs, their median, spread, load and notes (pure).

A Run is one execution of the runner (one subprocess); a Trial is one placement measured
by several Runs after a warm-up. The Trial's figures are the medians of its kept runs;
`decode_spread` / `prefill_spread` are (max - min) / median of those. A run is dropped when
the machine was busy during it while other runs were not, or when it lies more than
OUTLIER_FRAC from the median of the runs (with at least three runs, a majority of them within it).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

from moeplan.planner.placement import Placement

OUTLIER_FRAC = 0.30  # a run this far from the median of the others is dropped
SPREAD_MAX = 0.10  # repeat while the kept runs spread more than this (and the budget allows)


@dataclass(frozen=True)
class RunLoad:
    """How busy the machine was around one run (probes/load.py measures it).

    loadavg_1m_before: the 1-minute load average as the run started; other_cpu_busy: the
    share of all CPU time that processes other than the run used while it ran (0..1);
    n_cpus: CPUs this process may use; busy: other processes took more than the cores the
    run left free."""

    loadavg_1m_before: float | None = None
    other_cpu_busy: float | None = None
    n_cpus: int = 0
    busy: bool = False

    def describe(self) -> str:
        parts = []
        if self.other_cpu_busy is not None:
            parts.append(f"others used {self.other_cpu_busy * max(1, self.n_cpus):.1f} of {self.n_cpus} CPUs")
        if self.loadavg_1m_before is not None:
            parts.append(f"load {self.loadavg_1m_before:.1f}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Run:
    decode_tok_s: float | None = None
    prefill_tok_s: float | None = None
    wall_s: float = 0.0
    started: str = ""  # ISO time stamp
    load: RunLoad = field(default_factory=RunLoad)
    error: str = ""
    dropped: str = ""  # why this run does not count ('' = it counts)
    warmup: bool = False
    extra: dict = field(default_factory=dict)  # what the runner said about the run (device, dtype, ...)

    @property
    def ok(self) -> bool:
        return not self.error and (self.decode_tok_s or self.prefill_tok_s) is not None


@dataclass(frozen=True)
class Trial:
    """One measured placement (what the validate loop returns and calibration fits)."""

    label: str
    placement: Placement
    runner: str
    depth: int = 0
    n_prompt: int = 512
    measured_decode_tok_s: float | None = None
    measured_prefill_tok_s: float | None = None
    predicted_decode_tok_s: float | None = None
    predicted_prefill_tok_s: float | None = None
    measured_vram_bytes: int | None = None
    wall_s: float = 0.0
    error: str = ""
    extra: dict = field(default_factory=dict)
    decode_spread: float | None = None  # (max - min) / median of the kept runs
    prefill_spread: float | None = None
    n_repeats: int = 1  # runs that count
    runs: tuple[Run, ...] = ()
    busy: bool = False  # a kept run ran on a busy machine
    notes: tuple[str, ...] = ()
    validation: str = ""  # time stamp of the validation it belongs to

    @property
    def ok(self) -> bool:
        return not self.error and (self.measured_decode_tok_s or self.measured_prefill_tok_s) is not None

    @property
    def load_note(self) -> str:
        loads = [r.load for r in self.runs if not r.dropped and not r.warmup and r.load.n_cpus]
        if not loads:
            return ""
        worst = max(loads, key=lambda ld: ld.other_cpu_busy or 0.0)
        return ("busy: " if self.busy else "idle: ") + worst.describe()


def _spread(vals: list[float]) -> float | None:
    if len(vals) < 2:
        return 0.0 if vals else None
    med = statistics.median(vals)
    return (max(vals) - min(vals)) / med if med else None


def mark_outliers(runs: list[Run]) -> list[Run]:
    """Drop busy runs when idle ones exist, then runs far from the median of the others."""
    out = list(runs)
    live = [i for i, r in enumerate(out) if r.ok and not r.warmup and not r.dropped]
    idle = [i for i in live if not out[i].load.busy]
    if idle and len(idle) < len(live):
        for i in live:
            if out[i].load.busy:
                out[i] = replace(out[i], dropped="ran while other processes kept the cores busy")
        live = idle
    if len(live) < 3:
        return out
    for metric in ("decode_tok_s", "prefill_tok_s"):
        vals = [getattr(out[i], metric) for i in live if getattr(out[i], metric)]
        if len(vals) < 3:
            continue
        med = statistics.median(vals)
        near = [v for v in vals if abs(v / med - 1) <= OUTLIER_FRAC]
        if len(near) < 2 or 2 * len(near) <= len(vals):
            continue  # no majority agrees: nothing is an outlier, the trial stays unsettled
        for i in live:
            v = getattr(out[i], metric)
            if v and not out[i].dropped and abs(v / med - 1) > OUTLIER_FRAC:
                out[i] = replace(out[i], dropped=f"{metric.split('_')[0]} {v:.3g} tok/s is {v / med - 1:+.0%} "
                                                 f"from the median of the runs ({med:.3g})")
    return out


def needs_another(runs: list[Run], min_repeats: int = 2) -> str:
    """Why one more run of this placement would help ('' = it is settled)."""
    kept = [r for r in mark_outliers(runs) if r.ok and not r.warmup and not r.dropped]
    if len(kept) < min_repeats:
        return f"{len(kept)} of {min_repeats} repeats"
    for metric in ("decode_tok_s", "prefill_tok_s"):
        s = _spread([getattr(r, metric) for r in kept if getattr(r, metric)])
        if s is not None and s > SPREAD_MAX:
            return f"{metric.split('_')[0]} spread {s:.0%} > {SPREAD_MAX:.0%}"
    return ""


def summarise(base: Trial, runs: list[Run]) -> Trial:
    """The Trial of `runs` (medians of the kept ones), `base` giving label, placement, predictions."""
    runs = mark_outliers(runs)
    kept = [r for r in runs if r.ok and not r.warmup and not r.dropped]
    notes = [f"run {i + 1} dropped: {r.dropped}" for i, r in enumerate(runs) if r.dropped]
    wall = sum(r.wall_s for r in runs)
    if not kept:
        errors = [r.error for r in runs if r.error]
        return replace(base, runs=tuple(runs), n_repeats=0, wall_s=wall, notes=tuple(notes),
                       error=errors[-1] if errors else "no run counted",
                       busy=any(r.load.busy for r in runs))
    dec = [r.decode_tok_s for r in kept if r.decode_tok_s]
    pre = [r.prefill_tok_s for r in kept if r.prefill_tok_s]
    busy = any(r.load.busy for r in kept)
    if busy:
        notes.append("measured while other processes kept the cores busy: figures may be low")
    if len(kept) >= 2 and needs_another(runs):
        notes.append(f"unsettled: {needs_another(runs)}")
    return replace(base, runs=tuple(runs), n_repeats=len(kept), wall_s=wall, error="", extra=dict(kept[0].extra),
                   measured_decode_tok_s=statistics.median(dec) if dec else None,
                   measured_prefill_tok_s=statistics.median(pre) if pre else None,
                   decode_spread=_spread(dec), prefill_spread=_spread(pre), busy=busy, notes=tuple(notes))
