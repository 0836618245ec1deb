"""`moeplan calibrate`: fit the cost model's factors to measured runs and store them, when
they predict held-out runs better than the priors."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from moeplan.commands.common import JsonOpt, command
from moeplan.commands.model import QuantOpt, SizeOpt
from moeplan.errors import InputError


def _latest_results() -> Path:
    from moeplan.probes.hwprofile import cache_dir

    folder = Path(cache_dir()) / "validate"
    files = sorted(folder.glob("results-*.json"), key=lambda p: p.stat().st_mtime) if folder.exists() else []
    if not files:
        raise InputError("no validation results found", "run moeplan tune MODEL --validate first, or pass --from FILE")
    return files[-1]


def _is_results(path: Path) -> bool:
    """A results-*.json of tune --validate (a JSON object with plan and trials / validations)."""
    import json

    try:
        doc = json.loads(Path(path).read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and "plan" in doc


def write_calibrated(new_hw, hw: str | None, out: Path | None) -> str:
    """Write a calibrated profile: to --out, else over --hw's file, else the cache's
    hardware-calibrated.json (mode 0600; a file the user named keeps 0666 less the umask)."""
    from moeplan.io import PRIVATE
    from moeplan.probes.hwprofile import cache_dir, write_json_atomic

    mode = None
    if out is None:
        out = Path(hw) if hw and Path(hw).is_file() else Path(cache_dir()) / "hardware-calibrated.json"
        mode = None if hw and Path(hw).is_file() else PRIVATE
    write_json_atomic(str(out), new_hw.to_dict(), mode)
    return str(out)


def register(app: typer.Typer) -> None:
    @app.command("calibrate")
    @command
    def calibrate_cmd(
        more: Annotated[Optional[list[Path]], typer.Argument(help="More files for --from (--from a.log b.log c.log).",
                                                             show_default=False)] = None,
        from_: Annotated[Optional[list[Path]], typer.Option("--from", help="Results of tune --validate (default: the latest), "
                                                                     "or llama.cpp / llama-bench logs of real runs.")] = None,
        hw: Annotated[Optional[str], typer.Option("--hw", help="Hardware profile to calibrate (JSON, preset, or this machine).")] = None,
        out: Annotated[Optional[Path], typer.Option("--out", help="Where to write the calibrated profile (default: update --hw's file, else the cache).")] = None,
        model: Annotated[Optional[str], typer.Option("--model", help="With logs: the model when the log's path is not here.")] = None,
        quant: QuantOpt = None, size: SizeOpt = None,
        fit_params: Annotated[Optional[Path], typer.Option(
            "--fit-params", metavar="PLAN.json", help="Learn the compute-buffer factors from llama.cpp's own dry run "
            "(llama-fit-params, needs --bin) of this plan and its next best placements.")] = None,
        binary: Annotated[Optional[str], typer.Option("--bin", help="With --fit-params: the llama.cpp build folder.")] = None,
        rpc: Annotated[Optional[str], typer.Option("--rpc", help="With --fit-params: RPC servers (HOST:PORT,...) "
                                                                  "for the dry run, as llama.cpp's --rpc.")] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Fit efficiency factors (GPU/CPU bandwidth, sync, compute, PCIe, NUMA) to measured runs;
        keep them only when they predict held-out runs better than the priors."""
        files = list(from_ or []) + list(more or [])
        if fit_params is not None:
            if files:
                raise InputError("--fit-params takes no --from files", "calibrate from one source at a time")
            from moeplan.commands.fitcal import calibrate_from_fit_params

            calibrate_from_fit_params(fit_params, binary, rpc, hw, out, model, as_json)
            return
        if binary or rpc:
            raise InputError("--bin and --rpc go with --fit-params", "moeplan calibrate --fit-params PLAN.json --bin DIR")
        if files and not all(_is_results(f) for f in files):
            from moeplan.commands.logcal import calibrate_from_logs

            calibrate_from_logs(files, hw, out, model, quant, size, as_json)
            return
        if len(files) > 1:
            raise InputError("give one results file of tune --validate at a time",
                             "or give llama.cpp / llama-bench logs, as many as you have")
        results_file = files[0] if files else None
        from moeplan.io import check_out_file
        from moeplan.planner.serde import to_jsonable
        from moeplan.probes.hwprofile import load_hardware
        from moeplan.probes.models import resolve_model
        from moeplan.profiles.backends import read_priors
        from moeplan.tuner.calibrate import store_calibration
        from moeplan.tuner.results import all_trials, read_results
        from moeplan.tuner.validate import guarded_calibration, runner_view
        from moeplan.ui.console import emit_json, stdout_console
        from moeplan.ui.tuner_tables import calibration_table, trials_table

        if out is not None:
            check_out_file(out, "--out")
        path = results_file or _latest_results()
        plan, validations = read_results(path)
        trials = all_trials(validations)
        ok = [t for t in trials if t.ok]
        if len(ok) < 2:
            raise InputError(f"{path}: {len(ok)} successful runs; calibration needs at least 2",
                             "run tune --validate with more --trials or a longer --budget")
        profile = load_hardware(hw)
        path_, quant, size = plan.model.reopen_args()
        spec = resolve_model(path_, quant=quant, size=size)
        runner = ok[0].runner
        # the runs say where and in which dtype the executor held the weights
        device = str(ok[0].extra.get("device") or "cpu")
        dtype = str(ok[0].extra.get("dtype") or "bf16")
        view = runner_view(runner, spec, profile, read_priors(plan.placement.backend), device, dtype)
        g = guarded_calibration(view, ok, strict=True, method_note=f"from {path}")
        ho = g.holdout
        written = ""
        if ho.accepted and g.calibration is not None:
            written = write_calibrated(store_calibration(profile, g.calibration), hw, out)
        if as_json:
            res = g.result
            emit_json({"calibration": to_jsonable(g.calibration) if g.calibration else None,
                       "calibration_accepted": ho.accepted, "reason": ho.reason,
                       "loo_error_before": ho.loo_error_before if ho.errors_before else None,
                       "loo_error_after": None if ho.loo_error_after != ho.loo_error_after else ho.loo_error_after,
                       "trials_used": len(ok), "validations": len(validations),
                       "factors": to_jsonable(g.factors), "profile_path": written,
                       "errors_before": dict(res.errors_before) if res else {},
                       "errors_after": dict(res.errors_after) if res else {}})
            return
        con = stdout_console()
        con.print(trials_table(trials))
        if g.result is not None and g.result.fitted:
            con.print(calibration_table(g.result))
        before = f"{ho.loo_error_before:.1%}" if ho.errors_before else "n/a"
        after = "n/a" if ho.loo_error_after != ho.loo_error_after else f"{ho.loo_error_after:.1%}"
        con.print(f"leave-one-trial-out error: {before} with the priors, {after} calibrated "
                  f"({len(ok)} trials of {len(validations)} validation{'s' if len(validations) != 1 else ''})")
        if written:
            con.print(f"kept: wrote the calibrated profile to {written}; later estimate/tune with --hw {written} use it")
        else:
            con.print(f"not kept, the priors stay: {ho.reason}")
