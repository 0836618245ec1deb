"""`moeplan calibrate --from LOG...`: memory constants and speed factors from real runs' logs."""
from __future__ import annotations

from pathlib import Path

from moeplan.errors import InputError


def calibrate_from_logs(files: list[Path], hw: str | None, out: Path | None, model_arg: str | None,
                        quant: str | None, size: str | None, as_json: bool) -> None:
    from dataclasses import asdict

    from moeplan.check.parse import parse_log
    from moeplan.check.placement import recover_placement
    from moeplan.commands.check import model_for, read_inputs
    from moeplan.probes.hwprofile import cache_dir, load_hardware, write_json_atomic
    from moeplan.profiles.backends import read_priors
    from moeplan.tuner.calibrate import store_calibration
    from moeplan.tuner.logcal import calibrate_memory, calibrate_speeds, holdout_dict, memory_observations, speed_trials
    from moeplan.ui.console import emit_json, stdout_console

    profile = load_hardware(hw)
    mem_obs, notes = [], []
    trials_by_model: dict[str, tuple] = {}
    backends = set()
    for name, text in read_inputs([str(f) for f in files]):
        run = parse_log(text, source=name)
        if run.tool == "unknown":
            raise InputError(f"{name}: no llama.cpp, ik_llama.cpp or llama-bench figures found",
                             "give the program's full output (2>&1), or a results-*.json of tune --validate")
        model = model_for(run, None, model_arg, quant, size)
        rec = recover_placement(run, model)
        backends.add(rec.placement.backend)
        o, n = memory_observations(run, model, rec.placement)
        mem_obs += o
        notes += n
        key = model.digest()
        entry = trials_by_model.setdefault(key, (model, rec.placement.backend, []))
        entry[2].extend(speed_trials(run, rec.placement))
    if len(backends) > 1:
        raise InputError(f"the logs come from several backends ({', '.join(sorted(backends))})",
                         "calibrate one backend at a time")
    backend = backends.pop()
    pr = read_priors(backend)
    new_hw = profile
    mem_cal, mem_guard = (None, None)
    if mem_obs:
        mem_cal, mem_guard = calibrate_memory(mem_obs, backend, runs=tuple(o.label for o in mem_obs))
        if mem_cal is not None:
            new_hw = store_calibration(new_hw, mem_cal)
    else:
        notes.append("no GPU memory figures in these logs (memory breakdown of a CUDA/ROCm/... device, one GPU's "
                     "compute buffer): the memory constants keep their priors")
    speed = None
    if trials_by_model:
        model, _, trials = max(trials_by_model.values(), key=lambda e: len(e[2]))
        if len(trials_by_model) > 1:
            notes.append(f"speed factors are fitted on the {len(trials)} figures of {model.name} only "
                         "(one model at a time)")
        if trials:
            speed = calibrate_speeds(model, profile, pr, trials, note=f"from {len(files)} log(s)")
            if speed.holdout.accepted and speed.calibration is not None:
                new_hw = store_calibration(new_hw, speed.calibration)
        else:
            notes.append("no speed figures in these logs: the speed factors keep their priors")
    changed = new_hw is not profile
    if changed:
        if out is None:
            out = Path(hw) if hw and Path(hw).is_file() else Path(cache_dir()) / "hardware-calibrated.json"
        write_json_atomic(str(out), new_hw.to_dict())
    doc = {
        "memory": {"observations": [asdict(o) for o in mem_obs], "guard": holdout_dict(mem_guard),
                   "calibration": asdict(mem_cal) if mem_cal else None},
        "speed": {"guard": holdout_dict(speed.holdout) if speed else None,
                  "calibration": asdict(speed.calibration) if speed and speed.calibration else None},
        "profile_path": str(out) if changed else None, "notes": notes,
    }
    if as_json:
        emit_json(doc)
        return
    from moeplan.ui.check_tables import logcal_render

    con = stdout_console()
    con.print(logcal_render(mem_obs, mem_cal, mem_guard, speed, notes))
    if changed:
        con.print(f"wrote the calibrated profile to {out}; later estimate/tune/check with --hw {out} use it")
    else:
        con.print("nothing was kept: the profile is unchanged")
