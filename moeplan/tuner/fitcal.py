"""Memory constants from llama.cpp's own dry run (`moeplan calibrate --fit-params PLAN.json --bin`).

llama-fit-params prints each device's compute buffer as this build and backend would allocate
it (truncated to MiB). moeplan's weights and KV are exact on the recorded builds; its compute
buffer is a mirror of ggml-alloc's graph planning, and on a user's backend (CUDA, ROCm) that
mirror can miss. What is learned, per device kind (the GPUs, the host):

    compute_factor = max over observations of (llama.cpp MiB + 1) x MiB / moeplan's bytes

the smallest factor under which no observed compute buffer is above moeplan's (the +1 MiB is
llama.cpp's truncation), bounded to [FACTOR_MIN, FACTOR_MAX]. It is stored in the hardware
profile as the calibration '<backend> memory (llama-fit-params)' (planner/memory/constants.py)
and MemoryConstants.compute_factor_gpu / _host scale every compute buffer the planner sizes.
Weights and KV are compared and their differences reported, not learned.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from moeplan.planner.hardware.profile import Calibration
from moeplan.planner.memory.constants import fit_params_calibration_name
from moeplan.probes.fitparams import FitRow
from moeplan.tuner.fitcheck import DeviceFigures
from moeplan.units import MIB

FACTOR_MIN, FACTOR_MAX = 0.5, 4.0


@dataclass(frozen=True)
class ComputeObs:
    label: str  # which run (placement)
    device: str  # llama.cpp's name (CUDA0, RPC1, Host)
    kind: str  # 'gpu' | 'host'
    llama_cpp_mib: int
    moeplan_bytes: int

    @property
    def ratio(self) -> float:
        """llama.cpp's bytes (truncation's upper end) over moeplan's."""
        return (self.llama_cpp_mib + 1) * MIB / self.moeplan_bytes


def observations(label: str, rows: Sequence[FitRow], figures: Sequence[DeviceFigures]) -> tuple[list[ComputeObs],
                                                                                                list[str]]:
    """Each device's compute buffer beside moeplan's (rows and figures by position, the host
    last), and notes on weights/KV that differ by more than llama.cpp's truncation."""
    notes: list[str] = []
    if len(rows) != len(figures):
        return [], [f"{label}: llama.cpp sees {len(rows) - 1} device(s), the plan has {len(figures) - 1}: not used"]
    out = []
    for r, f in zip(rows, figures):
        kind = "host" if r.device == "Host" else "gpu"
        for what, mib, ours in (("weights", r.model_mib, f.model_bytes), ("KV", r.context_mib, f.context_bytes)):
            if kind == "gpu" and abs(ours / MIB - mib) >= 1.0 + 1e-9 and not (mib <= ours / MIB < mib + 1):
                notes.append(f"{label}: {r.device} {what} moeplan {ours / MIB:,.2f} MiB, llama.cpp {mib:,} MiB")
        if f.compute_bytes > 0 and r.compute_mib > 0:
            out.append(ComputeObs(label, r.device, kind, r.compute_mib, f.compute_bytes))
    return out, notes


def learn(obs: Sequence[ComputeObs], backend: str, runs: Sequence[str] = ()) -> Calibration | None:
    """The compute-buffer factors the observations call for (None without any)."""
    factors, priors, residuals = {}, {}, {}
    for kind in ("gpu", "host"):
        mine = [o for o in obs if o.kind == kind]
        if not mine:
            continue
        f = min(FACTOR_MAX, max(FACTOR_MIN, max(o.ratio for o in mine)))
        f = math.ceil(f * 10_000) / 10_000  # rounded up: still never below an observation
        factors[f"compute_factor_{kind}"] = f
        priors[f"compute_factor_{kind}"] = 1.0
        for o in mine:
            residuals[f"{o.label}:{o.device}"] = round(o.moeplan_bytes * f / ((o.llama_cpp_mib + 1) * MIB) - 1.0, 4)
    if not factors:
        return None
    before = [abs(o.moeplan_bytes / ((o.llama_cpp_mib + 0.5) * MIB) - 1.0) for o in obs]
    after = [abs(o.moeplan_bytes * factors[f"compute_factor_{o.kind}"] / ((o.llama_cpp_mib + 0.5) * MIB) - 1.0)
             for o in obs]
    return Calibration(factors=factors, priors=priors, backend=fit_params_calibration_name(backend),
                       runs=tuple(runs), residuals=residuals,
                       median_abs_error_before=_median(before), median_abs_error_after=_median(after),
                       method="compute buffer x the largest ratio llama.cpp / moeplan over llama-fit-params' "
                              "devices (never below an observation; tuner/fitcal.py)")


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return (s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2) if n else 0.0
