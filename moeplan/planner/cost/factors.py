"""The cost model's efficiency factors: one record each (pure data).

A factor is a number the cost model cannot read off the hardware profile: how much of a
measured rate a runtime's kernels reach, or a fixed cost per layer or token. Each backend
has a prior for it (profiles/backends.toml, BackendPriors), `moeplan calibrate` and
`tune --validate` may fit it on this machine (tuner/calibrate.py), and resolve.py resolves
it (calibrated > prior). This table is the one place that names a factor:

  name          BackendPriors field and the key in calibrations (HardwareProfile.calibration)
  unit          what the value counts
  prior_source  where the prior comes from: "field" (BackendPriors.<name>) or "by_isa"
                (BackendPriors.<name>[isa class])
  bounds        physical limits a fit must stay within (and a bundled prior too)
  err_key       BackendPriors.rel_err key of its prior's 1-sigma relative uncertainty
  level         "machine": describes the machine more than the runtime's kernels, so a
                calibration made with another runner (the bundled executor) carries over to
                this backend as a ratio; "backend": the runtime's own kernels, never carried
  stand_in_only True when its meaning changes if the executor's GPU tier runs on the CPU:
                such fits must not carry over to a real GPU
"""
from __future__ import annotations

from dataclasses import dataclass

from moeplan.planner.cost.priors import BackendPriors


@dataclass(frozen=True)
class FactorSpec:
    """One fitted factor of the cost model: its unit, bounds and level."""

    name: str
    unit: str
    bounds: tuple[float, float]
    level: str  # "machine" | "backend"
    err_key: str = ""  # '' = the name itself
    prior_source: str = "field"  # "field" | "by_isa"
    stand_in_only: bool = False
    meaning: str = ""

    @property
    def error_key(self) -> str:
        return self.err_key or self.name

    @property
    def machine_level(self) -> bool:
        return self.level == "machine"

    def prior(self, pr: BackendPriors, isa_class: str = "") -> float:
        """The backend's prior value (for "by_isa" factors: of `isa_class`, else the largest)."""
        v = getattr(pr, self.name)
        if self.prior_source == "by_isa":
            return float(v.get(isa_class) or max(v.values(), default=1.0))
        return float(v)

    def prior_err(self, pr: BackendPriors) -> float:
        return pr.err(self.error_key)


ETA_GPU = FactorSpec("eta_gpu", "fraction of GPU memory bandwidth", (0.05, 1.3), "machine", stand_in_only=True,
                     meaning="share of the GPU's effective bandwidth decode kernels reach")
ETA_CPU = FactorSpec("eta_cpu", "fraction of node DRAM read bandwidth", (0.02, 1.3), "machine",
                     meaning="share of a node's DRAM read bandwidth CPU expert streaming reaches")
CORE_READ_SHARE = FactorSpec("core_read_share", "multiple of node bandwidth / node cores", (0.2, 40.0), "machine",
                             err_key="eta_cpu", meaning="one core's read rate against its fair share of the node")
RHO_REMOTE = FactorSpec("rho_remote", "remote/local read-bandwidth ratio", (0.03, 1.0), "machine",
                        meaning="remote NUMA reads against local ones")
S_SYNC_S = FactorSpec("s_sync_s", "s per CPU-expert layer per token", (1e-7, 0.02), "backend",
                      meaning="backend switches and copies around each CPU-expert layer")
CPU_DOT = FactorSpec("cpu_dot_weights_per_cycle", "Q8_0 weights per core per cycle", (0.05, 200.0), "backend",
                     err_key="cpu_dot", meaning="batch-1 dot-product rate of one core")
PI_H2D = FactorSpec("pi_h2d", "fraction of host-to-GPU copy rate", (0.02, 1.3), "machine", stand_in_only=True,
                    meaning="share of the PCIe copy rate expert uploads reach in prefill")
GPU_MFU = FactorSpec("gpu_mfu", "fraction of dense FP16 FLOP/s", (0.005, 1.0), "backend", stand_in_only=True,
                     meaning="share of the GPU's tensor rate prefill matmuls reach")
CPU_MM_EFF = FactorSpec("cpu_mm_eff", "fraction of one core's FP32 FMA peak", (0.01, 20.0), "backend",
                        err_key="cpu_flop", prior_source="by_isa",
                        meaning="batched (prefill) matmul rate of one core, by ISA class")
T_TOKEN_S = FactorSpec("t_token_s", "s per token", (1e-6, 0.2), "backend", err_key="s_sync_s",
                       meaning="fixed per-token cost: sampling, graph build, host sync")
S_LAYER_GPU_S = FactorSpec("s_layer_gpu_s", "s per layer per token", (1e-8, 0.01), "backend", err_key="s_sync_s",
                           meaning="GPU kernel launches per layer not hidden by graphs")

FACTORS: tuple[FactorSpec, ...] = (ETA_GPU, ETA_CPU, CORE_READ_SHARE, RHO_REMOTE, S_SYNC_S, CPU_DOT, PI_H2D,
                                   GPU_MFU, CPU_MM_EFF, T_TOKEN_S, S_LAYER_GPU_S)
BY_NAME: dict[str, FactorSpec] = {f.name: f for f in FACTORS}
MACHINE_FACTORS = frozenset(f.name for f in FACTORS if f.machine_level)
STAND_IN_ONLY = tuple(f.name for f in FACTORS if f.stand_in_only)


def factor(name: str) -> FactorSpec:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown cost factor {name!r}; known: {', '.join(BY_NAME)}") from None


def check_priors(pr: BackendPriors, isa_classes: tuple[str, ...] = ()) -> list[str]:
    """Problems of a backend's priors against the table: a nonzero prior outside its factor's
    bounds, or a rel_err key that names no factor's error key (a typo would silently fall
    back to the default uncertainty)."""
    problems = []
    for f in FACTORS:
        values = list(getattr(pr, f.name).values()) if f.prior_source == "by_isa" else [getattr(pr, f.name)]
        for v in values:
            # 0: the backend has no such path (vLLM's CPU factors), never used as a divisor
            if float(v) != 0.0 and not f.bounds[0] <= float(v) <= f.bounds[1]:
                problems.append(f"{pr.name}: {f.name} = {v} is outside its bounds {f.bounds}")
    keys = {f.error_key for f in FACTORS}
    for k in pr.rel_err:
        if k not in keys:
            problems.append(f"{pr.name}: rel_err key {k!r} names no factor (known: {', '.join(sorted(keys))})")
    return problems
