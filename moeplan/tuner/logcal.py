"""Calibration from the logs of real runs (`moeplan calibrate --from LOG...`).

Two fits, each kept only when the held-out guard (tuner/holdout.py leave_one_out, the validate
loop's) says it predicts unseen logs better than the priors:

  memory constants  (planner/memory/constants.py) from what only a GPU shows:
      unaccounted_d = cuda_context + pool_d + pool[K type] * n_ubatch   (memory breakdown, per GPU)
      compute_d     = planner's compute buffer + compute_extra    (compute buffer line, one GPU)
    where pool_d is the memory pool's high-water derived from the sources for a CUDA/ROCm log
    (planner/memory/cuda_runtime.py; 0 for other builds) and pool[K type] what it misses.
    a linear MAP fit: Gaussian priors (MEMORY_PRIORS' sigma) and bounds, in MiB
    (scipy.optimize.lsq_linear), observation noise SIGMA_UNACCOUNTED_MIB / SIGMA_COMPUTE_MIB.
  speed factors     the validate loop's guarded fit (tuner/validate.py guarded_calibration) on one
                    Trial per speed figure of the logs (prefill at its prompt length, decode at its
                    depth); the figures of one placement are held out together.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moeplan.check.compare import context_and_pool, run_gpu_build
from moeplan.check.parse import MIB, RunLog
from moeplan.planner.hardware.profile import Calibration, HardwareProfile
from moeplan.planner.memory.accounting import MemoryConstants, estimate_memory
from moeplan.planner.memory.compute_buffer import reserve_shape
from moeplan.planner.memory.constants import MEMORY_PRIORS, memory_calibration_name
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement
from moeplan.tuner.calibrate import Trial
from moeplan.tuner.holdout import HoldoutResult, leave_one_out

# the breakdown prints integer MiB and `unaccounted` also holds the driver's varying allocations
SIGMA_UNACCOUNTED_MIB = 16.0
# the compute buffer line has two decimals; the graph mirror's own misses are what is fitted
SIGMA_COMPUTE_MIB = 1.0


@dataclass(frozen=True)
class MemObs:
    label: str
    kind: str  # 'unaccounted' | 'compute'
    observed_bytes: int
    base_bytes: int  # the planner's figure without the fitted constant (unaccounted: the derived pool)
    n_ubatch: int
    type_k: str


def memory_observations(run: RunLog, model: ModelSpec, p: Placement) -> tuple[list[MemObs], list[str]]:
    """GPU-only memory figures of one run, with the planner's figure they correct."""
    obs, notes = [], []
    n_ub = reserve_shape(p).n_tokens
    consts = MemoryConstants(gpu_build=run_gpu_build(run))
    mem = estimate_memory(model, p, consts)
    for m in run.memory:
        if m.host or m.unaccounted_mib is None:
            continue
        if m.name.startswith("RPC"):
            notes.append(f"{run.source}: {m.name} is an RPC device (its free/total are the remote host's memory); "
                         "its unaccounted memory is not a GPU constant")
            continue
        pool = context_and_pool(mem, m.name) - consts.cuda_context_bytes  # the derived pool
        obs.append(MemObs(f"{run.source}:{m.name} unaccounted", "unaccounted", m.unaccounted_mib * MIB, pool, n_ub,
                          p.cache_type_k))
    dev = [b for b in run.buffers if b.kind == "compute" and not b.host]
    devices = {b.buffer_type for b in dev}
    if len(devices) == 1 and p.n_gpus == 1:
        base = mem.get("compute")
        obs.append(MemObs(f"{run.source}:{dev[0].buffer_type} compute", "compute", sum(b.bytes for b in dev), base,
                          n_ub, p.cache_type_k))
    elif len(devices) > 1:
        notes.append(f"{run.source}: compute buffers on {len(devices)} devices; the planner reserves one, "
                     "so they are not fitted")
    return obs, notes


def _names(obs: list[MemObs]) -> list[str]:
    names = []
    if any(o.kind == "unaccounted" for o in obs):
        names.append("cuda_context_bytes")
        names += sorted({f"cuda_pool_bytes_per_ubatch:{o.type_k}" for o in obs if o.kind == "unaccounted"})
    if any(o.kind == "compute" for o in obs):
        names.append("compute_extra_bytes")
    return names


def _prior(name: str) -> tuple[float, float, float, float]:
    return MEMORY_PRIORS[name.split(":")[0]]


def predict_memory(params: dict[str, float], o: MemObs) -> float:
    if o.kind == "unaccounted":
        return params.get("cuda_context_bytes", _prior("cuda_context_bytes")[0]) + o.base_bytes + \
            params.get(f"cuda_pool_bytes_per_ubatch:{o.type_k}", 0.0) * o.n_ubatch
    return o.base_bytes + params.get("compute_extra_bytes", 0.0)


def fit_memory(obs: list[MemObs], names: list[str] | None = None) -> dict[str, float]:
    """MAP linear fit of the constants in MiB with Gaussian priors and bounds."""
    from scipy.optimize import lsq_linear

    names = names or _names(obs)
    if not names:
        return {}
    k = {n: i for i, n in enumerate(names)}
    rows, y = [], []
    for o in obs:
        r = np.zeros(len(names))
        if o.kind == "unaccounted":
            s = SIGMA_UNACCOUNTED_MIB
            r[k["cuda_context_bytes"]] = 1.0
            if f"cuda_pool_bytes_per_ubatch:{o.type_k}" in k:
                r[k[f"cuda_pool_bytes_per_ubatch:{o.type_k}"]] = o.n_ubatch
            target = (o.observed_bytes - o.base_bytes) / MIB
        else:
            s = SIGMA_COMPUTE_MIB
            r[k["compute_extra_bytes"]] = 1.0
            target = (o.observed_bytes - o.base_bytes) / MIB
        rows.append(r / s)
        y.append(target / s)
    for n, i in k.items():
        prior, _, _, sig = _prior(n)
        r = np.zeros(len(names))
        r[i] = 1.0 / (sig / MIB)
        rows.append(r)
        y.append(prior / MIB / (sig / MIB))
    lo = np.array([_prior(n)[1] / MIB for n in names])
    hi = np.array([_prior(n)[2] / MIB for n in names])
    sol = lsq_linear(np.array(rows), np.array(y), bounds=(lo, hi))
    return {n: float(sol.x[i] * MIB) for n, i in k.items()}


def _memory_pairs(params: dict[str, float] | None, o: MemObs, priors: dict[str, float]) -> list[tuple[float, float]]:
    p = predict_memory(params if params is not None else priors, o)
    return [(max(p, 1.0), float(o.observed_bytes))]


def calibrate_memory(obs: list[MemObs], backend: str, runs: tuple[str, ...] = ()) -> tuple[Calibration | None,
                                                                                          HoldoutResult]:
    """The memory Calibration to store (None when the held-out guard refuses it). Observations of
    one log are held out together."""
    names = _names(obs)
    priors = {n: _prior(n)[0] for n in names}
    ho = leave_one_out(obs, lambda sub: fit_memory(list(sub), names),
                       lambda params, o: _memory_pairs(params, o, priors), key=lambda o: o.label.rsplit(":", 1)[0])
    if not ho.accepted or ho.params is None:
        return None, ho
    fitted = ho.params
    cal = Calibration(factors=fitted, priors=priors, backend=memory_calibration_name(backend), runs=runs,
                      residuals={o.label: round((predict_memory(fitted, o) - o.observed_bytes) / MIB, 2) for o in obs},
                      median_abs_error_before=ho.loo_error_before, median_abs_error_after=ho.loo_error_after,
                      method="MAP linear least squares on MiB with Gaussian priors and bounds (scipy lsq_linear); "
                             "kept by the leave-one-log-out guard (tuner/holdout.py); errors relative")
    return cal, ho


def speed_trials(run: RunLog, p: Placement) -> list[Trial]:
    """One Trial per speed figure that moeplan predicts (one stream)."""
    out = []
    prompt_n = next((s.n_tokens for s in run.speeds if s.metric == "prefill" and s.source == "timings"), 0)
    for s in run.speeds:
        if s.n_parallel > 1:
            continue
        label = f"{run.source}:{s.line_no or s.metric}"
        if s.metric == "prefill":
            out.append(Trial(label=label, placement=p, runner="log", depth=s.depth, n_prompt=s.n_tokens or 512,
                             measured_prefill_tok_s=s.tok_s))
        else:
            depth = s.depth + (prompt_n if s.source in ("timings", "llama-cli") else 0) + max(s.n_tokens, 1) // 2
            out.append(Trial(label=label, placement=p, runner="log", depth=depth, measured_decode_tok_s=s.tok_s))
    return out


def calibrate_speeds(model: ModelSpec, hw: HardwareProfile, pr, trials: list[Trial], note: str = ""):
    """The validate loop's guarded fit (tuner/validate.py guarded_calibration) on the logs' speeds:
    the backend's own runs, so the model and hardware are the real ones (runner_view 'llama-bench');
    the trials of one placement are held out together."""
    from moeplan.tuner.validate import guarded_calibration, runner_view

    view = runner_view("llama-bench", model, hw, pr, "", "")
    return guarded_calibration(view, trials, strict=True, method_note=note)


def holdout_dict(ho: HoldoutResult | None) -> dict | None:
    if ho is None:
        return None
    nan = ho.loo_error_after != ho.loo_error_after
    return {"accepted": ho.accepted, "reason": ho.reason, "groups": list(ho.groups),
            "loo_error_before": ho.loo_error_before if ho.errors_before else None,
            "loo_error_after": None if nan else ho.loo_error_after}
