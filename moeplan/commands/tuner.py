"""`moeplan calibrate`: fit the cost model's factors to measured runs and store them."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from moeplan.commands.common import JsonOpt, command
from moeplan.errors import InputError


def _latest_results() -> Path:
    from moeplan.probes.hwprofile import cache_dir

    folder = Path(cache_dir()) / "validate"
    files = sorted(folder.glob("results-*.json"), key=lambda p: p.stat().st_mtime) if folder.exists() else []
    if not files:
        raise InputError("no validation results found", "run moeplan tune MODEL --validate first, or pass --from FILE")
    return files[-1]


def register(app: typer.Typer) -> None:
    @app.command("calibrate")
    @command
    def calibrate_cmd(
        from_: Annotated[Optional[Path], typer.Option("--from", help="Results of tune --validate (default: the latest).")] = None,
        hw: Annotated[Optional[str], typer.Option("--hw", help="Hardware profile to calibrate (JSON, preset, or this machine).")] = None,
        out: Annotated[Optional[Path], typer.Option("--out", help="Where to write the calibrated profile (default: update --hw's file, else the cache).")] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Fit efficiency factors (GPU/CPU bandwidth, sync, compute, PCIe, NUMA) to measured runs."""
        from dataclasses import asdict, replace

        from moeplan.io import PRIVATE, check_out_file
        from moeplan.planfile import read_json_file
        from moeplan.planner.plan import plan_from_doc
        from moeplan.probes.hwprofile import cache_dir, load_hardware, write_json_atomic
        from moeplan.probes.models import resolve_model
        from moeplan.profiles.backends import read_priors
        from moeplan.tuner.calibrate import calibrate, store_calibration
        from moeplan.tuner.runners import trial_from_dict
        from moeplan.tuner.validate import STAND_IN_ONLY, runner_view
        from moeplan.ui.console import emit_json, stdout_console
        from moeplan.ui.tuner_tables import calibration_table, trials_table

        if out is not None:
            check_out_file(out, "--out")
        path = from_ or _latest_results()
        doc = read_json_file(path, "results")
        if not isinstance(doc, dict) or "plan" not in doc:
            raise InputError(f"{path}: not a moeplan results file (no plan)",
                             "pass the results-*.json that tune --validate wrote")
        plan = plan_from_doc(doc["plan"], f"{path}: plan")
        try:
            trials = [trial_from_dict(t) for t in doc["trials"]]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InputError(f"{path}: not a moeplan results file ({exc})",
                             "pass the results-*.json that tune --validate wrote") from None
        ok = [t for t in trials if t.ok]
        if len(ok) < 2:
            raise InputError(f"{path}: {len(ok)} successful runs; calibration needs at least 2",
                             "run tune --validate with more --trials or a longer --budget")
        profile = load_hardware(hw)
        path_, quant, size = plan.model.reopen_args()
        model = resolve_model(path_, quant=quant, size=size)
        runner = ok[0].runner
        # the runs say where and in which dtype the executor held the weights
        device = str(ok[0].extra.get("device") or "cpu")
        dtype = str(ok[0].extra.get("dtype") or "bf16")
        view = runner_view(runner, model, profile, read_priors(plan.placement.backend), device, dtype)
        res = calibrate(view.model, view.hw, view.pr, ok, method_note=f"from {path}")
        cal = res.calibration
        if view.stand_in:
            cal = replace(cal, priors={k: v for k, v in cal.priors.items() if k not in STAND_IN_ONLY})
        new_hw = store_calibration(profile, cal)
        mode = None
        if out is None:
            out = Path(hw) if hw and Path(hw).is_file() else Path(cache_dir()) / "hardware-calibrated.json"
            mode = None if hw and Path(hw).is_file() else PRIVATE
        write_json_atomic(str(out), new_hw.to_dict(), mode)
        if as_json:
            emit_json({"calibration": asdict(cal), "profile_path": str(out),
                       "errors_before": dict(res.errors_before), "errors_after": dict(res.errors_after)})
            return
        con = stdout_console()
        con.print(trials_table(trials))
        con.print(calibration_table(res))
        con.print(f"wrote the calibrated profile to {out}; later estimate/tune with --hw {out} use it")
