"""`moeplan calibrate --fit-params PLAN.json --bin BUILD/bin`: compute-buffer factors from
llama.cpp's own dry run of the plan and its next best placements (tuner/fitcal.py)."""
from __future__ import annotations

from pathlib import Path

from moeplan.errors import InputError

MAX_PLACEMENTS = 6


def calibrate_from_fit_params(plan_file: Path, binary: str | None, rpc: str | None, hw: str | None,
                              out: Path | None, model_arg: str | None, as_json: bool) -> None:
    from dataclasses import asdict, replace

    from moeplan.commands.launch import read_plan, read_plan_model
    from moeplan.commands.tuner import write_calibrated
    from moeplan.io import check_out_file
    from moeplan.planner.cost.report import memory_report
    from moeplan.planner.memory.accounting import estimate_memory
    from moeplan.planner.memory.constants import memory_constants
    from moeplan.planner.search import budgets, gpu_budgets
    from moeplan.probes.fitparams import FitRun, run_fit_params
    from moeplan.probes.hwprofile import load_hardware
    from moeplan.tuner.calibrate import store_calibration
    from moeplan.tuner.fitcal import learn, observations
    from moeplan.tuner.fitcheck import check_plan, plan_figures
    from moeplan.ui.console import emit_json, progress, stdout_console

    if not binary:
        raise InputError("--fit-params needs --bin", "give the llama.cpp build folder that has llama-fit-params")
    if out is not None:
        check_out_file(out, "--out")
    plan = read_plan(plan_file)
    backend = plan.placement.backend
    from moeplan.probes.fitparams import has_fit_params

    if not has_fit_params(backend):
        raise InputError(f"{plan_file} is a {backend} plan", "llama-fit-params is mainline llama.cpp's: plan with "
                                                             "--backend llama.cpp")
    spec, _, _ = read_plan_model(plan, model_arg)
    profile = load_hardware(hw)
    # moeplan's figures without any factor learned before (the profile's other constants stay)
    consts = replace(memory_constants(profile, backend), compute_factor_gpu=1.0, compute_factor_host=1.0)
    vram, _ = budgets(profile)
    per_gpu = gpu_budgets(profile, vram) if len(profile.gpus) > 1 else (vram,)
    placements = [plan.placement] + [a.placement for a in plan.alternatives]
    obs, notes, labels = [], [], []
    with progress("llama.cpp's dry runs (llama-fit-params)", enabled=not as_json):
        for i, p in enumerate(placements[:MAX_PLACEMENTS]):
            mem = memory_report(estimate_memory(spec, p, consts), profile)
            one = replace(plan, placement=p, estimate=replace(plan.estimate, memory=mem))
            runs: list[FitRun] = []

            def runner(*a, _runs=runs, **kw):
                _runs.append(run_fit_params(*a, **kw))
                return _runs[-1]

            fit = check_plan(one, spec, binary, rpc=rpc, budgets=per_gpu, runner=runner)
            if fit.status in ("skipped", "failed"):
                raise InputError(fit.note, fit.hint or "check --bin and the plan's model")
            label = "plan" if i == 0 else f"alternative {i}"
            got, said = observations(label, runs[-1].rows, plan_figures(mem, per_gpu))
            obs += got
            notes += said
            labels.append(label)
    cal = learn(obs, backend, runs=tuple(labels))
    written = write_calibrated(store_calibration(profile, cal), hw, out) if cal is not None else ""
    if as_json:
        emit_json({"fit_params": {"observations": [{**asdict(o), "ratio": round(o.ratio, 4)} for o in obs],
                                  "calibration": asdict(cal) if cal else None, "placements": labels,
                                  "notes": notes, "profile_path": written or None}})
        return
    from rich.table import Table

    from moeplan.units import MIB

    con = stdout_console()
    t = Table(title="compute buffers: moeplan against llama.cpp's dry run (llama-fit-params), MiB",
              title_justify="left")
    for col in ("placement", "device", "moeplan", "llama.cpp", "llama.cpp / moeplan"):
        t.add_column(col, justify="left" if col in ("placement", "device") else "right")
    for o in obs:
        t.add_row(o.label, o.device, f"{o.moeplan_bytes / MIB:,.2f}", f"{o.llama_cpp_mib:,}", f"{o.ratio:.3f}")
    con.print(t)
    for n in notes:
        con.print(f"note: {n}", markup=False, highlight=False)
    if cal is None:
        con.print("nothing learned: no compute buffer to compare; the profile is unchanged")
        return
    learned = ", ".join(f"{k} = {v:.3f}" for k, v in cal.factors.items())
    con.print(f"learned: {learned} (the smallest factors under which no observed compute buffer is above "
              f"moeplan's); median error {cal.median_abs_error_before:.1%} before, "
              f"{cal.median_abs_error_after:.1%} after", markup=False, highlight=False)
    con.print(f"wrote the calibrated profile to {written}; later estimate/tune with --hw {written} use it",
              markup=False, highlight=False)
