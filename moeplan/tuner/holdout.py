"""Leave-one-out guard: keep a fit only when it predicts runs it has not seen better.

An in-sample error (factors fitted on the same runs they are scored on) always improves
with more freedom, so it cannot tell a calibration that learnt the machine from one that
learnt an outlier. Here each observation (or group of observations: all runs of one
placement) is predicted from a fit made WITHOUT it; the prior's predictions are held-out
already (the prior saw none of them). The fit on all observations is accepted only when the
median held-out error falls below the prior's.

Generic over what is fitted: `fit(observations) -> params` and
`predict(params, observation) -> [(predicted, measured), ...]` (`params=None` means the
prior). Used by `tune --validate`, `moeplan calibrate`, and anything else that fits factors
to measurements.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

O = TypeVar("O")  # one observation
P = TypeVar("P")  # fitted parameters


@dataclass(frozen=True)
class HoldoutResult(Generic[P]):
    errors_before: tuple[float, ...]  # per held-out group: mean |predicted/measured - 1| with the prior
    errors_after: tuple[float, ...]  # the same, each group predicted by a fit without it
    loo_error_before: float  # median of errors_before (a fraction)
    loo_error_after: float  # median of errors_after (nan when no fit could be scored)
    accepted: bool
    reason: str
    params: P | None = None  # the fit on all observations (None when refused before fitting)
    groups: tuple[str, ...] = ()


def _rel_errors(pairs) -> list[float]:
    return [abs(p / m - 1.0) for p, m in pairs if p and m and p > 0 and m > 0]


def _group_error(pairs) -> float | None:
    errs = _rel_errors(pairs)
    return sum(errs) / len(errs) if errs else None


def leave_one_out(observations: Sequence[O], fit: Callable[[Sequence[O]], P],
                  predict: Callable[[P | None, O], Sequence[tuple[float, float]]],
                  key: Callable[[O], Hashable] | None = None, min_groups: int = 3,
                  min_gain: float = 0.0) -> HoldoutResult[P]:
    """Score `fit` by leave-one-group-out error against the prior; accept it only if it helps.

    key: observations with the same key are held out together (default: each alone).
    min_groups: fewer groups than this cannot be scored (one fold would fit on one run).
    min_gain: the held-out error must drop by more than this (a fraction) to accept.
    A fit that raises ValueError on a fold counts as refused for that fold (prior kept)."""
    groups: dict[Hashable, list[O]] = {}
    for i, o in enumerate(observations):
        groups.setdefault(key(o) if key else i, []).append(o)
    names = tuple(str(k) for k in groups)
    before = []
    for members in groups.values():
        e = _group_error([pm for o in members for pm in predict(None, o)])
        before.append(e)
    scored_before = tuple(e for e in before if e is not None)
    loo_before = statistics.median(scored_before) if scored_before else float("nan")
    if len(groups) < min_groups:
        return HoldoutResult(scored_before, (), loo_before, float("nan"), False,
                             f"{len(groups)} measured placements; a held-out score needs at least {min_groups}",
                             None, names)
    after = []
    for k, members in groups.items():
        rest = [o for kk, ms in groups.items() if kk != k for o in ms]
        try:
            params = fit(rest)
        except ValueError:
            params = None
        after.append(_group_error([pm for o in members for pm in predict(params, o)]))
    pairs = [(b, a) for b, a in zip(before, after) if b is not None and a is not None]
    errs_b = tuple(b for b, _ in pairs)
    errs_a = tuple(a for _, a in pairs)
    if not pairs:
        return HoldoutResult(scored_before, (), loo_before, float("nan"), False,
                             "no held-out prediction could be scored", None, names)
    loo_b, loo_a = statistics.median(errs_b), statistics.median(errs_a)
    if not loo_a < loo_b - min_gain:
        return HoldoutResult(errs_b, errs_a, loo_b, loo_a, False,
                             f"held-out error {loo_b:.1%} with the priors, {loo_a:.1%} calibrated: "
                             "the fit does not predict unseen runs better, so the priors stay", None, names)
    try:
        params = fit(list(observations))
    except ValueError as exc:
        return HoldoutResult(errs_b, errs_a, loo_b, loo_a, False, f"the fit on all runs failed: {exc}", None, names)
    return HoldoutResult(errs_b, errs_a, loo_b, loo_a, True,
                         f"held-out error {loo_b:.1%} -> {loo_a:.1%}", params, names)
