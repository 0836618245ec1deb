"""Fit the cost model's efficiency factors to measured runs (maximum a posteriori).

Each factor f_i is fitted as x_i = log(f_i / prior_i), so the model is scale-free and the
prior is a Gaussian on x_i with sigma = the prior's relative uncertainty:

    minimise  sum_runs sum_metrics ( log(pred_m(x) / meas_m) / sigma_meas )^2
            + sum_i ( x_i / sigma_i )^2
    subject to bounds (physical limits of each factor)

with scipy.optimize.least_squares (trust region reflective). Only factors the runs can see
are fitted: a factor is free when changing it by 10% moves some prediction by more than
0.5%; the others stay at their priors. The posterior relative uncertainty of each factor
comes from the Gauss-Newton covariance (J^T J)^-1 of the final point.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from moeplan.planner.cost.estimate import estimate
from moeplan.planner.hardware.profile import Calibration, HardwareProfile
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement
from moeplan.planner.cost.priors import BackendPriors

# factor -> (lower, upper) physical bounds
BOUNDS: dict[str, tuple[float, float]] = {
    "eta_gpu": (0.05, 1.3),
    "eta_cpu": (0.02, 1.3),
    "core_read_share": (0.2, 40.0),
    "rho_remote": (0.03, 1.0),
    "s_sync_s": (1e-7, 0.02),
    "cpu_dot_weights_per_cycle": (0.05, 200.0),
    "pi_h2d": (0.02, 1.3),
    "gpu_mfu": (0.005, 1.0),
    "cpu_mm_eff": (0.01, 20.0),
    "t_token_s": (1e-6, 0.2),
    "s_layer_gpu_s": (1e-8, 0.01),
}
ERR_KEY = {"cpu_dot_weights_per_cycle": "cpu_dot", "cpu_mm_eff": "cpu_flop",
           "core_read_share": "eta_cpu", "s_layer_gpu_s": "s_sync_s", "t_token_s": "s_sync_s"}
SIGMA_MEAS = 0.05  # relative noise of one measured speed on a shared machine


@dataclass(frozen=True)
class Trial:
    """One measured run of a placement (what the runners return)."""

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

    @property
    def ok(self) -> bool:
        return not self.error and (self.measured_decode_tok_s or self.measured_prefill_tok_s) is not None


@dataclass(frozen=True)
class CalibrationResult:
    calibration: Calibration
    fitted: tuple[str, ...]
    errors_before: tuple[tuple[str, float], ...]  # (run/metric, predicted/measured - 1)
    errors_after: tuple[tuple[str, float], ...]

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
    if name == "cpu_mm_eff":
        from moeplan.planner.cost.estimate import cpu_isa_class

        return pr.cpu_mm_eff.get(cpu_isa_class(hw)) or max(pr.cpu_mm_eff.values(), default=1.0)
    return float(getattr(pr, name))


def _with_factors(hw: HardwareProfile, pr: BackendPriors, factors: dict[str, float]) -> HardwareProfile:
    others = tuple(c for c in hw.calibration if c.backend != pr.name)
    cal = Calibration(factors=dict(factors), backend=pr.name)
    return replace(hw, calibration=others + (cal,))


def _hw_for(hw) -> "callable":
    """`hw` is a profile, or a function of the placement (the executor's CPU stand-in
    depends on the run's threads)."""
    return hw if callable(hw) else (lambda p, _h=hw: _h)


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


def calibrate(model: ModelSpec, hw, pr: BackendPriors, trials: list[Trial],
              candidates: tuple[str, ...] = tuple(BOUNDS), method_note: str = "") -> CalibrationResult:
    """Fit the factors the trials can see; returns a Calibration to store in the profile.

    `hw` is the profile the runs ran on, or a function placement -> profile."""
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
        vals = []
        for t in good:
            p = _predict(model, lambda q: _with_factors(base_for(q), pr, factors), pr, t)
            vals.extend(max(p[i], 1e-12) for _, _, i in _metrics(t))
        return np.array(vals)

    meas = np.array([m for t in good for _, m, _ in _metrics(t)])
    base = preds(priors)
    free = []
    for n in candidates:
        bumped = dict(priors)
        bumped[n] = priors[n] * 1.1
        if np.max(np.abs(np.log(preds(bumped) / base))) > 0.005:
            free.append(n)
    sig = np.array([max(0.05, pr.err(ERR_KEY.get(n, n))) for n in free])

    def unpack(x: np.ndarray) -> dict[str, float]:
        f = dict(priors)
        for n, xi in zip(free, x):
            f[n] = priors[n] * math.exp(xi)
        return f

    def resid(x: np.ndarray) -> np.ndarray:
        r = np.log(preds(unpack(x)) / meas) / SIGMA_MEAS
        return np.concatenate([r, x / sig])

    if free:
        lo = np.array([math.log(BOUNDS[n][0] / priors[n]) if BOUNDS[n][0] < priors[n] else -1e-9 for n in free])
        hi = np.array([math.log(BOUNDS[n][1] / priors[n]) if BOUNDS[n][1] > priors[n] else 1e-9 for n in free])
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
        method="MAP least squares on log speed (scipy least_squares, trf)" + (f"; {method_note}" if method_note else ""),
    )
    return CalibrationResult(calibration=cal, fitted=tuple(free), errors_before=before, errors_after=after)


def store_calibration(hw: HardwareProfile, cal: Calibration) -> HardwareProfile:
    """The profile with `cal` replacing any earlier calibration of the same backend."""
    return replace(hw, calibration=tuple(c for c in hw.calibration if c.backend != cal.backend) + (cal,))
