"""Fit the cost model's efficiency factors to measured runs (maximum a posteriori, robust).

Each factor f_i (moeplan/planner/cost/factors.py) is fitted as x_i = log(f_i / prior_i),
so the model is scale-free and the prior is a Gaussian on x_i with sigma = the prior's
relative uncertainty:

    minimise  sum_runs sum_metrics rho( (log(pred_m(x) / meas_m) / sigma_meas)^2 )
            + sum_i ( x_i / sigma_i )^2
    subject to bounds (physical limits of each factor)

with rho the soft-L1 loss rho(z) = 2 (sqrt(1 + z) - 1) (scipy's loss="soft_l1"): quadratic
for small residuals, linear beyond sigma_meas, so one run taken while the machine was busy
pulls the factors far less than it would in plain least squares. The prior terms stay
quadratic: the loss is applied by transforming the measurement residuals, r -> sign(r)
sqrt(rho(r^2)), before scipy.optimize.least_squares (trust region reflective).

Only factors the runs can see are fitted: a factor is free when changing it by 10% moves
some prediction by more than 0.5%; the others stay at their priors. No more factors are
moved than there are measured placements: with `strict` (moeplan calibrate) nothing is
moved then; otherwise the most visible ones are fitted and the rest held at their priors.
The posterior relative uncertainty of each factor comes from the Gauss-Newton covariance
(J^T J)^-1 of the final point. Whether a calibration is kept is decided by its
leave-one-trial-out error (moeplan/tuner/holdout.py), not by the in-sample error here.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from moeplan.planner.cost import factors as F
from moeplan.planner.cost.estimate import cpu_isa_class, estimate
from moeplan.planner.cost.priors import BackendPriors
from moeplan.planner.hardware.profile import Calibration, HardwareProfile
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement
from moeplan.tuner.trials import Trial

SIGMA_MEAS = 0.05  # relative noise of one measured speed on a shared machine
LOSS = "soft_l1"


@dataclass(frozen=True)
class CalibrationResult:
    calibration: Calibration
    fitted: tuple[str, ...]
    errors_before: tuple[tuple[str, float], ...]  # (run/metric, predicted/measured - 1)
    errors_after: tuple[tuple[str, float], ...]
    held: tuple[str, ...] = ()  # visible factors held at their priors (too few runs)
    refused: str = ""  # why no factor was moved ('' = fitted)

    @property
    def median_abs_before(self) -> float:
        return _median_abs(self.errors_before)

    @property
    def median_abs_after(self) -> float:
        return _median_abs(self.errors_after)


def _median_abs(errs) -> float:
    vals = sorted(abs(e) for _, e in errs)
    return float(np.median(vals)) if vals else float("nan")


def prior_value(pr: BackendPriors, hw: HardwareProfile, name: str) -> float:
    return F.factor(name).prior(pr, cpu_isa_class(hw))


def _with_factors(hw: HardwareProfile, pr: BackendPriors, factors: dict[str, float]) -> HardwareProfile:
    others = tuple(c for c in hw.calibration if c.backend != pr.name)
    cal = Calibration(factors=dict(factors), backend=pr.name)
    return replace(hw, calibration=others + (cal,))


def _hw_for(hw) -> Callable[[Placement], HardwareProfile]:
    """`hw` is a profile, or a function of the placement (the executor's CPU stand-in
    depends on the run's threads)."""
    return hw if callable(hw) else (lambda p: hw)


def _predict(model: ModelSpec, hw, pr: BackendPriors, t: Trial) -> tuple[float, float]:
    e = estimate(model, t.placement, _hw_for(hw)(t.placement), pr, depth=t.depth, n_prompt=t.n_prompt)
    return e.decode_tok_s, e.prefill_tok_s


def _metrics(t: Trial) -> list[tuple[str, float, int]]:
    out = []
    if t.measured_decode_tok_s:
        out.append((f"{t.label} decode", t.measured_decode_tok_s, 0))
    if t.measured_prefill_tok_s:
        out.append((f"{t.label} prefill", t.measured_prefill_tok_s, 1))
    return out


def prediction_errors(model: ModelSpec, hw, pr: BackendPriors,
                      trials: list[Trial]) -> tuple[tuple[str, float], ...]:
    out = []
    for t in trials:
        if not t.ok:
            continue
        pred = _predict(model, hw, pr, t)
        for name, meas, i in _metrics(t):
            out.append((name, pred[i] / meas - 1.0))
    return tuple(out)


_ALL_FACTORS = tuple(f.name for f in F.FACTORS)


def calibrate(model: ModelSpec, hw, pr: BackendPriors, trials: list[Trial],
              candidates: tuple[str, ...] = _ALL_FACTORS, method_note: str = "",
              strict: bool = False) -> CalibrationResult:
    """Fit the factors the trials can see; returns a Calibration to store in the profile.

    `hw` is the profile the runs ran on, or a function placement -> profile. With fewer
    measured placements than visible factors, `strict` moves none (the result says why);
    otherwise only the most visible ones, as many as there are placements, are fitted."""
    from scipy.optimize import least_squares

    good = [t for t in trials if t.ok]
    if not good:
        raise ValueError("no successful runs to calibrate from")
    hw_for = _hw_for(hw)

    def base_for(p: Placement) -> HardwareProfile:
        h = hw_for(p)
        return replace(h, calibration=tuple(c for c in h.calibration if c.backend != pr.name))

    priors = {n: prior_value(pr, hw_for(good[0].placement), n) for n in candidates}
    before = prediction_errors(model, base_for, pr, good)

    def preds(factors: dict[str, float]) -> np.ndarray:
        vals: list[float] = []
        for t in good:
            p = _predict(model, lambda q: _with_factors(base_for(q), pr, factors), pr, t)
            vals.extend(max(p[i], 1e-12) for _, _, i in _metrics(t))
        return np.array(vals)

    meas = np.array([m for t in good for _, m, _ in _metrics(t)])
    base = preds(priors)
    seen = []
    for n in candidates:
        bumped = dict(priors)
        bumped[n] = priors[n] * 1.1
        moved = float(np.max(np.abs(np.log(preds(bumped) / base))))
        if moved > 0.005:
            seen.append((moved, n))
    n_places = len({t.placement for t in good})
    visible = [n for _, n in sorted(seen, key=lambda x: -x[0])]
    held: list[str] = []
    if len(visible) > n_places:
        if strict:
            return CalibrationResult(
                calibration=Calibration(factors={}, backend=pr.name, runs=tuple(t.label for t in good),
                                        method="refused: fewer measured placements than free factors"),
                fitted=(), errors_before=before, errors_after=before, held=tuple(visible),
                refused=(f"{n_places} measured placement{'s' if n_places != 1 else ''} cannot move "
                         f"{len(visible)} free factors ({', '.join(visible)}); the priors stay"))
        visible, held = visible[:n_places], visible[n_places:]
    free = [n for n in candidates if n in visible]
    sig = np.array([max(0.05, F.factor(n).prior_err(pr)) for n in free])

    def unpack(x: np.ndarray) -> dict[str, float]:
        f = dict(priors)
        for n, xi in zip(free, x):
            f[n] = priors[n] * math.exp(xi)
        return f

    def resid(x: np.ndarray) -> np.ndarray:
        r = np.log(preds(unpack(x)) / meas) / SIGMA_MEAS
        return np.concatenate([robust(r), x / sig])

    if free:
        bounds = [F.factor(n).bounds for n in free]
        lo = np.array([math.log(b[0] / priors[n]) if b[0] < priors[n] else -1e-9 for n, b in zip(free, bounds)])
        hi = np.array([math.log(b[1] / priors[n]) if b[1] > priors[n] else 1e-9 for n, b in zip(free, bounds)])
        sol = least_squares(resid, np.zeros(len(free)), bounds=(lo, hi), x_scale=sig, diff_step=1e-3)
        x = sol.x
        try:
            cov = np.linalg.pinv(sol.jac.T @ sol.jac)
            post = {n: float(min(1.0, math.sqrt(max(cov[i, i], 0.0)))) for i, n in enumerate(free)}
        except np.linalg.LinAlgError:
            post = {n: 0.3 for n in free}
    else:
        x = np.zeros(0)
        post = {}
    fitted = unpack(x)
    factors = {n: fitted[n] for n in free}
    after = prediction_errors(model, lambda q: _with_factors(base_for(q), pr, factors), pr, good)
    cal = Calibration(
        factors=factors, priors={n: priors[n] for n in free}, rel_err=post, backend=pr.name,
        runs=tuple(t.label for t in good), residuals={name: round(e, 4) for name, e in after},
        median_abs_error_before=_median_abs(before), median_abs_error_after=_median_abs(after),
        method=(f"MAP fit of log speed, {LOSS} loss on the runs (scipy least_squares, trf)"
                + (f"; held at priors (fewer placements than factors): {', '.join(held)}" if held else "")
                + (f"; {method_note}" if method_note else "")),
    )
    return CalibrationResult(calibration=cal, fitted=tuple(free), errors_before=before, errors_after=after,
                             held=tuple(held))


def robust(r: np.ndarray) -> np.ndarray:
    """Residuals whose squares sum to the soft-L1 cost: sign(r) sqrt(2 (sqrt(1 + r^2) - 1))."""
    return np.sign(r) * np.sqrt(2.0 * (np.sqrt(1.0 + r * r) - 1.0))


def store_calibration(hw: HardwareProfile, cal: Calibration) -> HardwareProfile:
    """The profile with `cal` replacing any earlier calibration of the same backend."""
    return replace(hw, calibration=tuple(c for c in hw.calibration if c.backend != cal.backend) + (cal,))
