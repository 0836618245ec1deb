"""`tune --validate`: run the plan and its most informative neighbours, compare, calibrate,
re-plan.

Neighbours, in the order they teach the cost model most per run:
  1. the plan itself;
  2. two more CPU-expert layers (separates CPU-side time per layer from the GPU side);
  3. the other ubatch (prefill: PCIe copies against GPU compute);
  4. half the threads (per-core against per-node DRAM bandwidth);
  5. the other NUMA policy on multi-node machines (remote/local ratio);
  6. one fewer CPU layer, when it still fits;
  7. op-offload toggled.
It stops early when the first three successful runs are all within 10% of their
predictions, when the trial count or the wall-time budget is spent, or on Ctrl-C; every
finished run is written to the results file as it lands, so nothing is lost.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path

from moeplan.errors import InputError
from moeplan.planner.cost.estimate import estimate
from moeplan.planner.hardware.profile import HardwareProfile
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement
from moeplan.planner.plan import Plan
from moeplan.planner.cost.priors import BackendPriors
from moeplan.planner.search import Request, shortfall
from moeplan.tuner.calibrate import Trial, calibrate, store_calibration

EARLY_STOP_ERR = 0.10
EARLY_STOP_RUNS = 3


def parse_budget(text: str) -> float:
    """'5m', '90s', '1h', '300' -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", str(text))
    if not m:
        raise InputError(f"cannot read --budget {text!r}", "for example 5m, 90s or 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def neighbours(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors,
               vram: int, ram: int) -> list[tuple[str, Placement]]:
    """The plan and the placements around it, most informative first (all must fit RAM)."""
    from moeplan.planner.memory.accounting import MemoryConstants
    from moeplan.planner.search import cpu_layer_order

    order = cpu_layer_order(model, pr)
    c = len(p.cpu_moe_layers)
    moe = len(order)
    out: list[tuple[str, Placement]] = [("plan", p)]
    if c + 2 <= moe:
        out.append(("+2 CPU layers", p.with_(cpu_moe_layers=tuple(sorted(order[:c + 2])))))
    elif c + 1 <= moe:
        out.append(("+1 CPU layer", p.with_(cpu_moe_layers=tuple(sorted(order[:c + 1])))))
    other_ub = 2048 if p.n_ubatch < 2048 else 512
    out.append((f"ubatch {other_ub}", p.with_(n_ubatch=other_ub, n_batch=max(p.n_batch, other_ub))))
    if p.n_threads >= 2:
        out.append((f"{p.n_threads // 2} threads", p.with_(n_threads=p.n_threads // 2,
                                                           n_threads_batch=p.n_threads // 2)))
    nodes = [n for n in hw.numa_nodes if n.cpus and not n.memory_only]
    if len(nodes) > 1:
        if p.numa == "bind":
            out.append(("no NUMA policy", p.with_(numa="none", numa_nodes=())))
        else:
            gpu_node = hw.gpus[0].numa_node if hw.gpus and hw.gpus[0].numa_node is not None else nodes[0].id
            out.append((f"bind node {gpu_node}", p.with_(numa="bind", numa_nodes=(gpu_node,))))
    if c >= 1:
        out.append(("-1 CPU layer", p.with_(cpu_moe_layers=tuple(sorted(order[:c - 1])))))
    if p.cpu_moe_layers:
        out.append(("op-offload " + ("off" if p.op_offload else "on"), p.with_(op_offload=not p.op_offload)))
    consts = MemoryConstants()
    return [(lab, q) for lab, q in out if lab == "plan" or not shortfall(model, q, hw, vram, ram, consts, pr)]


@dataclass
class ValidationReport:
    trials: list[Trial]
    stopped: str
    calibration_summary: str = ""
    replanned: str = ""
    results_path: str = ""
    profile_path: str = ""


def _err(pred: float | None, meas: float | None) -> float | None:
    if not pred or not meas:
        return None
    return pred / meas - 1


def _write_results(path: Path, plan: Plan, trials: list[Trial], stopped: str) -> None:
    from moeplan.io import PRIVATE, write_text_atomic
    from moeplan.tuner.runners import trial_to_dict

    doc = {"plan": plan.to_dict(), "trials": [trial_to_dict(t) for t in trials], "stopped": stopped}
    # results live in the cache (0600) unless tune --validate was given a folder
    write_text_atomic(path, json.dumps(doc, indent=2, sort_keys=True) + "\n", PRIVATE)


def run_trials(plan: Plan, model: ModelSpec, hw: HardwareProfile, pr: BackendPriors, *, runner: str,
               trials: int, budget_s: float, settings, results_path: Path, predict, on_trial=None,
               run_one=None) -> ValidationReport:
    """Run the plan and neighbours; returns every trial (failed ones carry `error`).

    `predict(placement) -> Estimate` is the cost model's view of the runner (RunnerView);
    `run_one(trial_plan, label) -> Trial` runs one (default: the runner's subprocess)."""
    from moeplan.tuner.runners import run_executor, run_llama_bench

    if run_one is None:
        def run_one(trial_plan: Plan, label: str) -> Trial:
            if runner == "executor":
                return run_executor(trial_plan, label, settings)
            return run_llama_bench(trial_plan, model, label, settings)

    vram = sum((g.vram_free_bytes or g.vram_bytes) for g in hw.gpus)
    cands = neighbours(model, plan.placement, hw, pr, vram, hw.ram_bytes)[:max(1, trials)]
    done: list[Trial] = []
    stopped = "all planned runs done"
    t0 = time.perf_counter()
    try:
        for label, p in cands:
            if time.perf_counter() - t0 > budget_s:
                stopped = f"wall-time budget of {budget_s:.0f} s spent"
                break
            if runner == "executor":
                # a speed run needs no long context: the executor allocates KV and scores for
                # n_ctx, so keep it to what the run uses
                p = p.with_(n_ctx=min(p.n_ctx, max(1024, settings.prompt + settings.tokens + 256)))
            trial_plan = replace(plan, placement=p, estimate=predict(p))
            t = run_one(trial_plan, label)
            done.append(t)
            _write_results(results_path, plan, done, "running")
            if on_trial:
                on_trial(t)
            ok = [x for x in done if x.ok]
            if len(ok) >= EARLY_STOP_RUNS and all(
                    abs(er) < EARLY_STOP_ERR for x in ok[:EARLY_STOP_RUNS]
                    for er in (_err(x.predicted_decode_tok_s, x.measured_decode_tok_s),
                               _err(x.predicted_prefill_tok_s, x.measured_prefill_tok_s)) if er is not None):
                stopped = f"predictions held within {EARLY_STOP_ERR:.0%} on {EARLY_STOP_RUNS} runs"
                break
            if not ok and len(done) >= 2:
                stopped = "the first runs all failed"
                break
    except KeyboardInterrupt:
        stopped = "interrupted; the runs so far are kept"
    _write_results(results_path, plan, done, stopped)
    return ValidationReport(trials=done, stopped=stopped, results_path=str(results_path))


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
    return RunnerView(retype(model, dtype), hw, ex, stand_in=stand_in, dtype=dtype)


# factors whose meaning changes when the executor's GPU tier is the CPU: they must not carry
# over from such runs to a real GPU
STAND_IN_ONLY = ("eta_gpu", "pi_h2d", "gpu_mfu")


def calibrate_and_replan(plan: Plan, model: ModelSpec, hw: HardwareProfile, pr: BackendPriors, req: Request,
                         report: ValidationReport, view: RunnerView) -> tuple[Plan, HardwareProfile, str, str]:
    """Fit the factors to the runs (in the runner's view), store them in the profile, search again."""
    from moeplan import __version__
    from moeplan.planner.search import build_plan, choose_plan

    ok = [t for t in report.trials if t.ok]
    if len(ok) < 2:
        return plan, hw, "not enough successful runs to calibrate (need 2)", ""
    res = calibrate(view.model, view.hw, view.pr, ok)
    cal = replace(res.calibration, created=time.strftime("%Y-%m-%dT%H:%M:%S"))
    if view.stand_in:
        cal = replace(cal, priors={k: v for k, v in cal.priors.items() if k not in STAND_IN_ONLY},
                      method=cal.method + "; GPU tier on the CPU: GPU factors not carried over")
    new_hw = store_calibration(hw, cal)
    summary = (f"calibrated {', '.join(res.fitted) or 'nothing'} ({view.pr.name}) on {len(ok)} runs: "
               f"median error {res.median_abs_before:.0%} -> {res.median_abs_after:.0%}")
    new = choose_plan(model, new_hw, pr, req)
    before = estimate(model, plan.placement, new_hw, pr, n_prompt=req.n_prompt)
    after = new.best.estimate
    if new.best.placement == plan.placement:
        replanned = f"the choice stands (recalibrated: {after.decode_tok_s:.1f} tok/s decode)"
    else:
        gain = after.decode_tok_s / max(1e-9, before.decode_tok_s) - 1
        replanned = (f"the choice changed: {len(new.best.placement.cpu_moe_layers)} CPU layers, "
                     f"ubatch {new.best.placement.n_ubatch}, numa {new.best.placement.numa}: "
                     f"{after.decode_tok_s:.1f} tok/s against {before.decode_tok_s:.1f} ({gain:+.0%})")
    new_plan = build_plan(model, new_hw, new, plan.objective, plan.model.size_arg, moeplan_version=__version__)
    new_plan = replace(new_plan, notes=new_plan.notes + (summary, replanned))
    return new_plan, new_hw, summary, replanned


def validate_plan(plan: Plan, model: ModelSpec, hw: HardwareProfile, pr: BackendPriors, req: Request, *,
                  runner: str = "executor", trials: int = 6, budget: str = "5m", binary: str | None = None,
                  quiet: bool = False, out_dir: Path | None = None, device: str = "", dtype: str = "bf16",
                  tokens: int = 16, prompt: int = 256) -> Plan:
    """`tune --validate`: runs, comparison table, calibration, re-plan; returns the new Plan."""
    from moeplan.io import PRIVATE
    from moeplan.probes.hwprofile import cache_dir, write_json_atomic
    from moeplan.tuner.runners import RunSettings
    from moeplan.ui.console import stderr_console, stdout_console
    from moeplan.ui.tuner_tables import trial_row, trials_table

    require_runner(runner)
    budget_s = parse_budget(budget)
    if trials < 1:
        raise InputError("--trials must be at least 1", "for example --trials 6")
    if runner == "executor":
        dev = device or ("cuda" if _cuda() else "cpu")
    else:
        dev = "cuda"
    view = runner_view(runner, model, hw, pr, dev, dtype)
    settings = RunSettings(tokens=tokens, prompt=prompt, sample_layers=_sample_layers(model), dtype=dtype,
                           timeout_s=min(600.0, max(60.0, budget_s)), device=dev if runner == "executor" else "",
                           binary=binary, model_path=model.path if model.source == "gguf" else "")
    folder = Path(out_dir) if out_dir else Path(cache_dir()) / "validate"
    stamp = f"{plan.inputs_digest()}-{runner}"
    results_path = folder / f"results-{stamp}.json"
    con = stderr_console() if quiet else stdout_console()
    con.print(f"validating with the {runner} ({dev}{', sampled layers' if settings.sample_layers else ''}); "
              f"runs are written to {results_path}")
    report = run_trials(plan, model, hw, pr, runner=runner, trials=trials, budget_s=budget_s, settings=settings,
                        results_path=results_path, predict=lambda p: view.predict(p, settings.prompt),
                        on_trial=lambda t: con.print(trial_row(t)))
    con.print(trials_table(report.trials))
    con.print(f"stopped: {report.stopped}")
    new_plan, new_hw, summary, replanned = calibrate_and_replan(plan, model, hw, pr, req, report, view)
    con.print(summary)
    if replanned:
        con.print(replanned)
        prof_path = folder / f"hardware-calibrated-{stamp}.json"
        write_json_atomic(str(prof_path), new_hw.to_dict(), None if out_dir else PRIVATE)
        con.print(f"calibrated hardware profile: {prof_path} (use it with --hw)")
    return new_plan


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

