"""`tune --validate`: run the plan and the trial placements it is given, compare, calibrate.

The tuner only reads a plan (docs/design.md): the trial placements come from the planner
(planner/search.py validation_trials) and the re-plan with a kept calibration is the command's
(commands/validation.py). A warm-up run comes first (not counted); then each placement is run at least twice, more
while its runs spread more than 10% (tuner/trials.py), and its figure is their median; a
run far from the others, or taken while other processes kept the cores busy when idle runs
exist, is dropped with a note. Each run records the load (probes/load.py). It stops early
when the first three trials are all within 10% of their predictions, when the trial count
or the wall-time budget is spent (a hard limit: no run starts that cannot finish), or on
Ctrl-C; every trial is appended to the results file as it lands, so nothing is lost.

The calibration uses every trial of every validation of the plan in that file, and is kept
only when its leave-one-trial-out error beats the priors' (tuner/holdout.py).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from moeplan.errors import InputError
from moeplan.planner.cost import factors as F
from moeplan.planner.cost.estimate import cpu_isa_class, estimate
from moeplan.planner.cost.priors import BackendPriors
from moeplan.planner.hardware.profile import Calibration, HardwareProfile
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement
from moeplan.planner.plan import Plan
from moeplan.tuner.calibrate import CalibrationResult, store_calibration
from moeplan.tuner.holdout import HoldoutResult
from moeplan.tuner.trials import RunLoad, Trial

EARLY_STOP_ERR = 0.10
EARLY_STOP_RUNS = 3
BUSY_OTHER_SHARE = 0.15  # --wait-idle: measure once other processes use at most this share of all CPUs


def parse_budget(text: str) -> float:
    """'5m', '90s', '1h', '300' -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", str(text))
    if not m:
        raise InputError(f"cannot read --budget {text!r}", "for example 5m, 90s or 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


MIN_REPEATS = 2  # runs per placement at least (after the warm-up)
MAX_REPEATS = 4  # at most, while the runs spread more than trials.SPREAD_MAX
WAIT_IDLE_MAX_S = 120.0  # --wait-idle: longest wait for the machine to settle before a run
BUDGET_MARGIN = 1.15  # a run is started only if 1.15 x the longest run so far still fits


@dataclass(frozen=True)
class FactorChange:
    """One calibrated factor: its value before (prior) and after validation, 1-sigma relative
    uncertainties; `fitted` is what the fit on all runs gave, kept or not."""

    name: str
    before: float
    before_rel_err: float
    after: float
    after_rel_err: float
    fitted: float
    fitted_rel_err: float


@dataclass
class ValidationReport:
    """What `tune --validate` found (commands/ render it; `to_dict` is the --json form)."""

    trials: list[Trial]
    stopped: str
    runner: str = ""
    device: str = ""
    results_path: str = ""
    profile_path: str = ""
    started: str = ""
    wall_s: float = 0.0
    budget_s: float = 0.0
    n_runs: int = 0  # runs started, warm-up included
    trials_used: int = 0  # trials of this and earlier validations the calibration saw
    loo_error_before: float | None = None
    loo_error_after: float | None = None
    calibration_accepted: bool = False
    reason: str = ""
    factors: list[FactorChange] = field(default_factory=list)
    choice_changed: bool = False
    replanned: str = ""
    plan: Plan | None = None  # the plan after validation (the input plan when nothing changed)
    notes: list[str] = field(default_factory=list)
    all_trials: list[Trial] = field(default_factory=list)  # of this and earlier validations of the plan

    @property
    def busy_trials(self) -> list[Trial]:
        return [t for t in self.trials if t.busy]

    @property
    def calibration_summary(self) -> str:
        if self.loo_error_before is None:
            return f"calibration not kept: {self.reason}"
        after = "n/a" if self.loo_error_after is None else f"{self.loo_error_after:.1%}"
        verdict = "kept" if self.calibration_accepted else "not kept"
        return (f"calibration {verdict}: leave-one-trial-out error {self.loo_error_before:.1%} with the priors, "
                f"{after} calibrated ({self.trials_used} trials); {self.reason}")

    def to_dict(self) -> dict:
        def num(x):
            return None if x is None or x != x else round(x, 4)

        trials = []
        for t in self.trials:
            trials.append({
                "label": t.label, "error": t.error,
                "predicted_decode_tok_s": num(t.predicted_decode_tok_s),
                "measured_decode_tok_s": num(t.measured_decode_tok_s), "decode_spread": num(t.decode_spread),
                "predicted_prefill_tok_s": num(t.predicted_prefill_tok_s),
                "measured_prefill_tok_s": num(t.measured_prefill_tok_s), "prefill_spread": num(t.prefill_spread),
                "n_repeats": t.n_repeats, "wall_s": num(t.wall_s), "notes": list(t.notes),
                "load": {"busy": t.busy, "note": t.load_note,
                         "runs": [{"loadavg_1m_before": r.load.loadavg_1m_before,
                                   "other_cpu_busy": num(r.load.other_cpu_busy), "busy": r.load.busy,
                                   "dropped": r.dropped, "warmup": r.warmup} for r in t.runs]},
            })
        return {
            "runner": self.runner, "device": self.device, "started": self.started, "wall_s": num(self.wall_s),
            "budget_s": self.budget_s, "n_runs": self.n_runs, "stopped": self.stopped, "trials": trials,
            "busy_trials": len(self.busy_trials), "trials_used": self.trials_used,
            "loo_error_before": num(self.loo_error_before), "loo_error_after": num(self.loo_error_after),
            "calibration_accepted": self.calibration_accepted, "reason": self.reason,
            "factors": [{"name": f.name, "before": f.before, "before_rel_err": num(f.before_rel_err),
                         "after": f.after, "after_rel_err": num(f.after_rel_err), "fitted": f.fitted,
                         "fitted_rel_err": num(f.fitted_rel_err)} for f in self.factors],
            "choice_changed": self.choice_changed, "replanned": self.replanned,
            "results_path": self.results_path, "profile_path": self.profile_path, "notes": list(self.notes),
        }


def _err(pred: float | None, meas: float | None) -> float | None:
    if not pred or not meas:
        return None
    return pred / meas - 1


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def is_busy(other_cpu_busy: float | None, n_cpus: int, threads: int) -> bool:
    """Other processes took more than the CPUs the run left free (plus a quarter of one)."""
    if other_cpu_busy is None:
        return False
    return other_cpu_busy * n_cpus > max(0, n_cpus - threads) + 0.25


def run_trials(plan: Plan, model: ModelSpec, hw: HardwareProfile, pr: BackendPriors, *, runner: str,
               trials: int, budget_s: float, settings, results_path: Path, predict, on_trial=None,
               run_one=None, on_run=None, wait_idle: bool = False, clock=time.monotonic,
               load_meter=None, idle_wait=None,
               candidates: list[tuple[str, Placement]] | None = None) -> ValidationReport:
    """Warm up, then run the plan and the `candidates` placements (label, placement; the plan
    first), each at least MIN_REPEATS times; without candidates the plan alone.

    `predict(placement) -> Estimate` is the cost model's view of the runner (RunnerView);
    `run_one(trial_plan, label, timeout_s) -> Trial` is one run (default: the runner's
    subprocess); `on_run(label, i, expected_s)` is called as a run starts and
    `on_trial(trial)` as a placement is done (commands/ print them). `load_meter()` returns
    an object with start() and other_busy() (probes.load.LoadMeter); `idle_wait(timeout_s)`
    waits for the machine to settle (probes.load.wait_for_idle). The budget is hard: a run
    starts only if it can finish in what is left, and a run still going at the limit is
    stopped and reported."""
    from moeplan.probes.load import LoadMeter, usable_cpus, wait_for_idle
    from moeplan.tuner.results import ResultsFile
    from moeplan.tuner.runners import run_executor, run_llama_bench
    from moeplan.tuner.trials import Run, needs_another, summarise

    if run_one is None:
        def run_one(trial_plan: Plan, label: str, timeout_s: float) -> Trial:
            s = replace(settings, timeout_s=timeout_s)
            if runner == "executor":
                return run_executor(trial_plan, label, s)
            return run_llama_bench(trial_plan, model, label, s)
    load_meter = load_meter or LoadMeter
    idle_wait = idle_wait or (lambda timeout_s: wait_for_idle(BUSY_OTHER_SHARE, timeout_s))
    n_cpus = usable_cpus()

    t0 = clock()
    deadline = t0 + budget_s
    started = _now()
    results = ResultsFile(results_path, plan, {"started": started, "runner": runner, "budget_s": budget_s})
    cands = list(candidates or [("plan", plan.placement)])[:max(1, trials)]
    done: list[Trial] = []
    notes: list[str] = [results.note] if results.note else []
    walls: list[float] = []  # walls of finished (non-warm-up) runs
    warm_wall: list[float] = []
    n_runs = 0
    stopped = "all planned runs done"

    def expected_s() -> float | None:
        if walls:
            return max(walls)
        return warm_wall[0] if warm_wall else None

    def one_run(trial_plan: Plan, label: str, warmup: bool) -> Run | None:
        """One run, or None when what is left of the budget cannot hold it."""
        nonlocal n_runs
        exp = expected_s()
        left = deadline - clock()
        if left <= 0 or (exp is not None and exp * BUDGET_MARGIN > left):
            return None
        if wait_idle:
            settled, share, waited = idle_wait(min(WAIT_IDLE_MAX_S, max(0.0, left - (exp or 0) * BUDGET_MARGIN)))
            if not settled:
                notes.append(f"--wait-idle: still busy after {waited:.0f} s (others at "
                             f"{(share or 0) * n_cpus:.1f} of {n_cpus} CPUs); measured anyway")
            left = deadline - clock()
            if left <= 0 or (exp is not None and exp * BUDGET_MARGIN > left):
                return None
        if on_run:
            on_run(label + (" (warm-up)" if warmup else ""), n_runs, exp)
        n_runs += 1
        meter = load_meter().start()
        stamp = _now()
        r0 = clock()
        timeout = max(1.0, min(settings.timeout_s, left))
        t = run_one(trial_plan, label, timeout)
        wall = clock() - r0
        other = meter.other_busy()
        threads = max(trial_plan.placement.n_threads, trial_plan.placement.threads_batch)
        load = RunLoad(loadavg_1m_before=meter.loadavg_1m_before, other_cpu_busy=other, n_cpus=n_cpus,
                       busy=is_busy(other, n_cpus, threads))
        error = t.error
        if error and timeout < settings.timeout_s and wall >= timeout - 1.0:
            error = f"stopped at the wall-time budget of {budget_s:.0f} s after {wall:.0f} s"
        return Run(decode_tok_s=t.measured_decode_tok_s, prefill_tok_s=t.measured_prefill_tok_s, wall_s=wall,
                   started=stamp, load=load, error=error, warmup=warmup, extra=dict(t.extra))

    def plan_for(label: str, p: Placement) -> Plan:
        if runner == "executor":
            # a speed run needs no long context: the executor allocates KV and scores for
            # n_ctx, so keep it to what the run uses
            p = p.with_(n_ctx=min(p.n_ctx, max(1024, settings.prompt + settings.tokens + 256)))
        return replace(plan, placement=p, estimate=predict(p))

    try:
        warm = one_run(plan_for("plan", cands[0][1]), "plan", warmup=True) if cands else None
        if warm is None:
            stopped = f"the wall-time budget of {budget_s:.0f} s holds no run"
        elif warm.error:
            warm_wall.append(warm.wall_s)
            done.append(summarise(_base(plan_for("plan", cands[0][1]), "plan", runner, settings), [warm]))
            stopped = ("the warm-up run was " + warm.error) if "budget" in warm.error else \
                f"the warm-up run failed: {warm.error}"
        else:
            warm_wall.append(warm.wall_s)
            for label, p in cands:
                tp = plan_for(label, p)
                runs: list[Run] = []
                out_of_budget = False
                while len(runs) < MAX_REPEATS and (not runs or needs_another(runs, MIN_REPEATS)):
                    r = one_run(tp, label, warmup=False)
                    if r is None:
                        out_of_budget = True
                        break
                    runs.append(r)
                    if not r.error:
                        walls.append(r.wall_s)
                    if r.error:
                        break
                if runs:
                    t = summarise(_base(tp, label, runner, settings), runs)
                    if out_of_budget and t.n_repeats < MIN_REPEATS:
                        t = replace(t, notes=t.notes + (f"{t.n_repeats} of {MIN_REPEATS} repeats: budget spent",))
                    done.append(t)
                    results.write(done, "running")
                    if on_trial:
                        on_trial(t)
                if out_of_budget or (runs and "budget" in runs[-1].error):
                    exp = expected_s()
                    stopped = (f"wall-time budget of {budget_s:.0f} s spent"
                               + (f" (a run takes about {exp:.0f} s)" if exp else ""))
                    break
                ok = [x for x in done if x.ok]
                if len(ok) >= EARLY_STOP_RUNS and all(
                        abs(er) < EARLY_STOP_ERR for x in ok[:EARLY_STOP_RUNS]
                        for er in (_err(x.predicted_decode_tok_s, x.measured_decode_tok_s),
                                   _err(x.predicted_prefill_tok_s, x.measured_prefill_tok_s)) if er is not None):
                    stopped = f"predictions held within {EARLY_STOP_ERR:.0%} on {EARLY_STOP_RUNS} trials"
                    break
                if not ok and len(done) >= 2:
                    stopped = "the first trials all failed"
                    break
    except KeyboardInterrupt:
        stopped = "interrupted; the runs so far are kept"
    results.write(done, stopped, _now())
    return ValidationReport(trials=done, stopped=stopped, runner=runner, results_path=str(results_path),
                            started=started, wall_s=clock() - t0, budget_s=budget_s, n_runs=n_runs, notes=notes,
                            all_trials=results.all_trials(done))


def _base(tp: Plan, label: str, runner: str, settings) -> Trial:
    return Trial(label=label, placement=tp.placement, runner=runner, n_prompt=settings.prompt,
                 predicted_decode_tok_s=tp.estimate.decode_tok_s, predicted_prefill_tok_s=tp.estimate.prefill_tok_s)

@dataclass(frozen=True)
class RunnerView:
    """What the cost model predicts a runner's runs with: the model as the runner holds it,
    the hardware it runs on (which, for the executor on the CPU, depends on the run's
    threads), and that runner's priors."""

    model: ModelSpec
    base_hw: HardwareProfile
    pr: BackendPriors
    stand_in: bool = False  # the executor's GPU tier ran on the CPU
    dtype: str = "bf16"

    def hw(self, p: Placement) -> HardwareProfile:
        if not self.stand_in:
            return self.base_hw
        from moeplan.tuner.exec_view import executor_hardware

        return executor_hardware(self.base_hw, "cpu", p.n_threads)

    def predict(self, p: Placement, n_prompt: int):
        return estimate(self.model, p, self.hw(p), self.pr, n_prompt=n_prompt)


def runner_view(runner: str, model: ModelSpec, hw: HardwareProfile, pr: BackendPriors, device: str,
                dtype: str) -> RunnerView:
    if runner == "llama-bench":
        return RunnerView(model, hw, pr)
    from moeplan.profiles.backends import read_priors
    from moeplan.tuner.exec_view import retype

    ex = read_priors("executor")
    stand_in = device != "cuda" or not hw.gpus
    if stand_in:
        ex = with_measured_dot_rate(ex, hw, dtype)
    return RunnerView(retype(model, dtype), hw, ex, stand_in=stand_in, dtype=dtype)


def with_measured_dot_rate(ex: BackendPriors, hw: HardwareProfile, dtype: str,
                           measure=None) -> BackendPriors:
    """The executor's priors with its batch-1 dot rate measured on this CPU (its own torch.mv in
    `dtype`, executor/gemv_rate.py) instead of the bundled figure, expressed in the cost model's
    terms: weights per cycle = rate x type cost / (ISA scale x all-core clock). Without torch the
    bundled prior stays."""
    from moeplan.planner.cost import machine
    from moeplan.planner.cost.estimate import REF_CLOCK_HZ

    if measure is None:
        try:
            from moeplan.executor.gemv_rate import mv_weights_per_s as measure
        except ImportError:
            return ex
    try:
        rate = measure(dtype)
    except ImportError:
        return ex
    clock, _ = machine.all_core_clock_hz(hw, REF_CLOCK_HZ)
    isa_x, _ = machine.isa_dot_scale(hw, ex.name)
    cost = ex.type_cost.get({"bf16": "BF16", "fp16": "F16", "fp32": "F32"}.get(dtype, "BF16"), 1.0)
    per_cycle = rate * cost / (isa_x * clock)
    return replace(ex, cpu_dot_weights_per_cycle=per_cycle,
                   sources=tuple(ex.sources) + (f"cpu_dot_weights_per_cycle measured here: torch.mv {dtype} "
                                                f"{rate / 1e9:.2f} G weights/s on one thread",))


def trial_pairs(view: RunnerView, factors: dict | None, t: Trial) -> list[tuple[float, float]]:
    """(predicted, measured) decode and prefill of trial `t` with `factors` calibrated for the
    runner (None: its priors)."""
    from moeplan.tuner.calibrate import _with_factors

    def hw_for(p):
        h = view.hw(p)
        h = replace(h, calibration=tuple(c for c in h.calibration if c.backend != view.pr.name))
        return _with_factors(h, view.pr, factors) if factors else h

    e = estimate(view.model, t.placement, hw_for(t.placement), view.pr, depth=t.depth, n_prompt=t.n_prompt)
    out = []
    if t.measured_decode_tok_s:
        out.append((e.decode_tok_s, t.measured_decode_tok_s))
    if t.measured_prefill_tok_s:
        out.append((e.prefill_tok_s, t.measured_prefill_tok_s))
    return out


@dataclass(frozen=True)
class GuardedCalibration:
    """A calibration judged by its leave-one-trial-out error (tuner/holdout.py)."""

    holdout: HoldoutResult
    result: CalibrationResult | None  # the fit on all trials (None when none could be made)
    calibration: Calibration | None  # what to store: set only when accepted
    factors: list[FactorChange]


def guarded_calibration(view: RunnerView, trials: list[Trial], strict: bool = False,
                        method_note: str = "") -> GuardedCalibration:
    """Fit the factors to `trials`, keep the fit only if it predicts held-out trials better.

    All trials of one placement (repeated validations) are held out together. `strict`:
    refuse to move factors from fewer placements than free factors (moeplan calibrate)."""
    from moeplan.tuner.calibrate import calibrate
    from moeplan.tuner.holdout import leave_one_out

    ok = [t for t in trials if t.ok]

    def fit(obs):
        res = calibrate(view.model, view.hw, view.pr, list(obs), strict=strict, method_note=method_note)
        return dict(res.calibration.factors) if not res.refused else None

    full = None
    if ok:
        full = calibrate(view.model, view.hw, view.pr, ok, strict=strict, method_note=method_note)
    if full is not None and full.refused:
        ho = leave_one_out(ok, lambda obs: None, lambda params, o: trial_pairs(view, params, o),
                           key=lambda t: t.placement, min_groups=10**9)
        ho = replace(ho, reason=full.refused)
    else:
        ho = leave_one_out(ok, fit, lambda params, o: trial_pairs(view, params, o), key=lambda t: t.placement)
    cal = None
    if ho.accepted and full is not None:
        cal = replace(full.calibration, created=_now())
        if view.stand_in:
            cal = replace(cal, priors={k: v for k, v in cal.priors.items() if k not in F.STAND_IN_ONLY},
                          method=cal.method + "; GPU tier on the CPU: GPU factors not carried over")
        cal = replace(cal, method=cal.method + f"; leave-one-trial-out error {ho.loo_error_before:.1%} -> "
                                               f"{ho.loo_error_after:.1%}")
    changes = []
    if full is not None:
        hw0 = view.hw(ok[0].placement)
        for name in full.fitted or full.held:
            spec = F.factor(name)
            prior = spec.prior(view.pr, cpu_isa_class(hw0))
            fitted = full.calibration.factors.get(name, prior)
            fitted_err = full.calibration.rel_err.get(name, spec.prior_err(view.pr))
            kept = ho.accepted and name in full.calibration.factors
            changes.append(FactorChange(name, prior, spec.prior_err(view.pr), fitted if kept else prior,
                                        fitted_err if kept else spec.prior_err(view.pr), fitted, fitted_err))
    return GuardedCalibration(ho, full, cal, changes)


def calibrate_report(plan: Plan, hw: HardwareProfile, report: ValidationReport,
                     view: RunnerView) -> tuple[ValidationReport, HardwareProfile]:
    """Calibrate on every successful trial of this and earlier validations of the plan and keep
    it only when its held-out error is lower: (the report filled in, the calibrated profile or
    `hw` when nothing was kept). No search: re-planning is the command's."""
    trials = [t for t in report.all_trials if t.ok] or [t for t in report.trials if t.ok]
    report.trials_used = len(trials)
    report.plan = plan
    if len(trials) < 2:
        report.reason = f"{len(trials)} successful trial{'s' if len(trials) != 1 else ''}; calibration needs more"
        return report, hw
    g = guarded_calibration(view, trials)
    ho = g.holdout
    report.loo_error_before = ho.loo_error_before if ho.errors_before else None
    report.loo_error_after = None if ho.loo_error_after != ho.loo_error_after else ho.loo_error_after
    report.calibration_accepted = ho.accepted
    report.reason = ho.reason
    report.factors = g.factors
    if g.result is not None and g.result.held:
        report.notes.append("held at their priors (fewer placements than factors): " + ", ".join(g.result.held))
    if not ho.accepted or g.calibration is None:
        return report, hw
    return report, store_calibration(hw, g.calibration)


def validate_plan(plan: Plan, model: ModelSpec, hw: HardwareProfile, pr: BackendPriors,
                  candidates: list[tuple[str, Placement]] | None = None, *,
                  runner: str = "executor", trials: int = 6, budget: str = "5m", binary: str | None = None,
                  out_dir: Path | None = None, device: str = "", dtype: str = "auto", tokens: int = 16,
                  prompt: int = 256, wait_idle: bool = False, on_start=None, on_run=None,
                  on_trial=None) -> tuple[ValidationReport, HardwareProfile]:
    """`tune --validate`: runs of the plan and the trial placements it is given, calibration
    guarded by held-out error. Prints nothing: `on_start(text)`, `on_run(label, i, expected_s)`
    and `on_trial(trial)` let the command show progress. Returns the report and the calibrated
    profile (`hw` when no calibration was kept); re-planning with it is the caller's."""
    from moeplan.io import PRIVATE
    from moeplan.probes.hwprofile import cache_dir, write_json_atomic
    from moeplan.tuner.runners import RunSettings

    require_runner(runner)
    budget_s = parse_budget(budget)
    if trials < 1:
        raise InputError("--trials must be at least 1", "for example --trials 6")
    if runner == "executor":
        dev = device or ("cuda" if _cuda() else "cpu")
    else:
        dev = "cuda" if hw.gpus else "cpu"
    from moeplan.executor.native import resolve_dtype

    dtype = resolve_dtype(dtype, dev)  # auto: by the CPU's native formats (executor/native.py)
    view = runner_view(runner, model, hw, pr, dev, dtype)
    settings = RunSettings(tokens=tokens, prompt=prompt, sample_layers=_sample_layers(model), dtype=dtype,
                           timeout_s=min(600.0, max(60.0, budget_s)), device=dev if runner == "executor" else "",
                           binary=binary, model_path=model.path if model.source == "gguf" else "")
    folder = Path(out_dir) if out_dir else Path(cache_dir()) / "validate"
    stamp = f"{plan.inputs_digest()}-{runner}"
    results_path = folder / f"results-{stamp}.json"
    if on_start:
        on_start(f"validating with the {runner} ({dev}{', sampled layers' if settings.sample_layers else ''}); "
                 f"runs are appended to {results_path}")
    if runner == "llama-bench":
        report = run_bench_sweep(plan, model, settings, candidates, view, budget_s, results_path, on_run, on_trial)
    else:
        report = run_trials(plan, model, hw, pr, runner=runner, trials=trials, budget_s=budget_s, settings=settings,
                            results_path=results_path, predict=lambda p: view.predict(p, settings.prompt),
                            on_trial=on_trial, on_run=on_run, wait_idle=wait_idle, candidates=candidates)
    report.device = dev
    report, new_hw = calibrate_report(plan, hw, report, view)
    if report.calibration_accepted:
        prof_path = folder / f"hardware-calibrated-{stamp}.json"
        write_json_atomic(str(prof_path), new_hw.to_dict(), None if out_dir else PRIVATE)
        report.profile_path = str(prof_path)
    return report, new_hw

# a prompt this short runs its CPU experts on the CPU even with op-offload (ggml offloads an op
# to the GPU from a batch of 32 tokens: ggml-cuda.cu GGML_OP_OFFLOAD_MIN_BATCH); the sweep's
# two prompt lengths sit on both sides of it
SHORT_PROMPT = 16


def sweep_points(plan: Plan, candidates: list[tuple[str, Placement]] | None) -> list[tuple[str, Placement]]:
    """The trials one llama-bench process can run (its comma lists): the plan, the candidate
    with other CPU layers, the one with other threads, and their cross (llama-bench runs every
    combination anyway): a 2 x 2 design that separates the CPU-layer term from the thread term."""
    p = plan.placement
    same = [(lab, q) for lab, q in (candidates or []) if q.with_(n_threads=p.n_threads, n_threads_batch=p.n_threads_batch,
                                                               cpu_moe_layers=p.cpu_moe_layers) == p]
    layers = next(((lab, q) for lab, q in same if q.cpu_moe_layers != p.cpu_moe_layers), None)
    threads = next(((lab, q) for lab, q in same if q.n_threads != p.n_threads), None)
    out = [("plan", p)] + [x for x in (layers, threads) if x is not None]
    if layers and threads:
        out.append((f"{layers[0]}, {threads[0]}", layers[1].with_(n_threads=threads[1].n_threads,
                                                                  n_threads_batch=threads[1].n_threads_batch)))
    return out


def run_bench_sweep(plan: Plan, model: ModelSpec, settings, candidates, view: RunnerView, budget_s: float,
                    results_path: Path, on_run=None, on_trial=None) -> ValidationReport:
    """tune --validate --runner llama-bench: every trial in one llama-bench process (the model
    loads once per CPU-layer set; llama-bench repeats each test itself)."""
    from moeplan.tuner.results import ResultsFile
    from moeplan.tuner.runners import run_llama_bench_sweep

    started = _now()
    results = ResultsFile(results_path, plan, {"started": started, "runner": "llama-bench", "budget_s": budget_s})
    points = sweep_points(plan, candidates)
    prompts = sorted({SHORT_PROMPT, settings.prompt})
    if on_run:
        on_run(f"llama-bench: {len(points)} placements x prompts {', '.join(map(str, prompts))} in one process", 0,
               None)
    trials, wall, error = run_llama_bench_sweep(
        [(lab, replace(plan, placement=q)) for lab, q in points], model, replace(settings, timeout_s=budget_s),
        prompts, lambda q, n: estimate(view.model, q, view.hw(q), view.pr, n_prompt=n))
    if on_trial:
        for t in trials:
            on_trial(t)
    stopped = error or f"{len(trials)} trials from one llama-bench run"
    if error and "timed out" in error:
        stopped = f"wall-time budget of {budget_s:.0f} s spent: {error}"
    results.write(trials, stopped, _now())
    return ValidationReport(trials=trials, stopped=stopped, runner="llama-bench", results_path=str(results_path),
                            started=started, wall_s=wall, budget_s=budget_s, n_runs=1,
                            notes=[results.note] if results.note else [], all_trials=results.all_trials(trials))


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _sample_layers(model: ModelSpec) -> int:
    """Big models run one block of each kind and extrapolate; small ones run whole."""
    return 1 if model.loaded_bytes > 8 * 1024**3 else 0


def require_runner(runner: str) -> None:
    from moeplan.tuner.runners import RUNNERS

    if runner not in RUNNERS:
        raise InputError(f"unknown runner {runner!r}", "use --runner executor or --runner llama-bench")

