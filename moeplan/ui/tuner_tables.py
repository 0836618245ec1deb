"""Tables for `tune --validate` and `moeplan calibrate`: predicted against measured."""
from __future__ import annotations

from rich.table import Table
from rich.text import Text

from moeplan.tuner.trials import Trial


def _err(pred: float | None, meas: float | None) -> str:
    if not pred or not meas:
        return "-"
    return f"{pred / meas - 1:+.0%}"


def _v(x: float | None, fmt: str) -> str:
    return format(x, fmt) if x else "-"


def _spread(x: float | None) -> str:
    return f"±{x / 2:.0%}" if x is not None else ""


def trial_row(t: Trial) -> Text:
    """One line per finished trial, printed as it lands."""
    if t.error:
        return Text(f"  {t.label}: failed after {t.wall_s:.0f} s: {t.error}", style="red")
    load = f"; {t.load_note}" if t.load_note else ""
    return Text(f"  {t.label} [{t.runner}]: decode {_v(t.measured_decode_tok_s, '.2f')} tok/s {_spread(t.decode_spread)} "
                f"(predicted for the {t.runner} "
                f"{_v(t.predicted_decode_tok_s, '.2f')}, {_err(t.predicted_decode_tok_s, t.measured_decode_tok_s)}), "
                f"prefill {_v(t.measured_prefill_tok_s, '.1f')} {_spread(t.prefill_spread)} (predicted "
                f"{_v(t.predicted_prefill_tok_s, '.1f')}, {_err(t.predicted_prefill_tok_s, t.measured_prefill_tok_s)}), "
                f"{t.n_repeats} runs, {t.wall_s:.0f} s{load}", style="yellow" if t.busy else "")


def trials_table(trials: list[Trial]) -> Table:
    runtimes = sorted({x.runner for x in trials}) or ["the runner"]
    t = Table(title=f"predicted for and measured by the {', '.join(runtimes)} (tok/s; median of the runs, ± half "
                    "their spread): not the plan's backend unless that is the runner")
    for col in ("run", "decode pred", "decode meas", "err", "prefill pred", "prefill meas", "err", "runs", "s",
                "load"):
        t.add_column(col, justify="left" if col in ("run", "load") else "right")
    for x in trials:
        if x.error:
            t.add_row(x.label, "", "", "", "", "", "", str(x.n_repeats), f"{x.wall_s:.0f}", x.error[:40], style="red")
            continue
        t.add_row(x.label, _v(x.predicted_decode_tok_s, ".2f"),
                  f"{_v(x.measured_decode_tok_s, '.2f')} {_spread(x.decode_spread)}",
                  _err(x.predicted_decode_tok_s, x.measured_decode_tok_s), _v(x.predicted_prefill_tok_s, ".1f"),
                  f"{_v(x.measured_prefill_tok_s, '.1f')} {_spread(x.prefill_spread)}",
                  _err(x.predicted_prefill_tok_s, x.measured_prefill_tok_s), str(x.n_repeats), f"{x.wall_s:.0f}",
                  "BUSY" if x.busy else "idle", style="yellow" if x.busy else None)
    return t


def calibration_table(res) -> Table:
    cal = res.calibration
    t = Table(title=f"fitted factors ({cal.backend}); in-sample median error "
                    f"{res.median_abs_before:.0%} before, {res.median_abs_after:.0%} after")
    t.add_column("factor")
    t.add_column("prior", justify="right")
    t.add_column("fitted", justify="right")
    t.add_column("± (1 sigma)", justify="right")
    for name, value in sorted(cal.factors.items()):
        prior = cal.priors.get(name)
        t.add_row(name, f"{prior:.4g}" if prior else "(not carried over)", f"{value:.4g}",
                  f"{cal.rel_err.get(name, 0):.0%}")
    return t


def factors_table(factors) -> Table:
    t = Table(title="factors before and after validation (± 1 sigma)")
    for col in ("factor", "before", "after", "fitted (kept or not)"):
        t.add_column(col, justify="left" if col == "factor" else "right")
    for f in factors:
        t.add_row(f.name, f"{f.before:.4g} ±{f.before_rel_err:.0%}", f"{f.after:.4g} ±{f.after_rel_err:.0%}",
                  f"{f.fitted:.4g} ±{f.fitted_rel_err:.0%}")
    return t


def validation_render(report) -> list:
    """What tune --validate found, after the runs: the trials, the load, the calibration."""
    out: list = [trials_table(report.trials)]
    n_busy = len(report.busy_trials)
    out.append(Text(f"stopped: {report.stopped} ({report.n_runs} runs incl. warm-up, {report.wall_s:.0f} s of "
                    f"{report.budget_s:.0f} s)"))
    if n_busy:
        out.append(Text(f"warning: {n_busy} of {len(report.trials)} trials ran while other processes kept the cores "
                        "busy: their figures may be low (rerun with --wait-idle on a quieter machine)", style="yellow"))
    for t in report.trials:
        for n in t.notes:
            out.append(Text(f"note: {t.label}: {n}"))
    for n in report.notes:
        out.append(Text(f"note: {n}"))
    if report.factors:
        out.append(factors_table(report.factors))
    out.append(Text(report.calibration_summary))
    if report.replanned:
        out.append(Text(report.replanned))
    for step in next_steps(report):
        out.append(Text(f"next: {step}"))
    if report.profile_path:
        out.append(Text(f"calibrated hardware profile: {report.profile_path} (use it with --hw)"))
    return out


def next_steps(report) -> list[str]:
    """What the validation learned, as what to do next: the budget against a run's time, a busy
    machine, a runner whose figures are not the plan's backend's."""
    out = []
    ok = [t for t in report.trials if t.ok]
    walls = [t.wall_s / max(1, t.n_repeats) for t in ok if t.wall_s]
    per_run = max(walls) if walls else 0.0
    if "budget" in report.stopped and per_run:
        need = per_run * (1 + 2 * 3) * 1.15  # a warm-up and 3 trials of 2 runs: the least a calibration fits on
        out.append(f"a run takes about {per_run:.0f} s: calibrating needs 3 placements of 2 runs, about "
                   f"{need:.0f} s: rerun with --budget {int(need // 60) + 1}m, or fewer --trials")
    if report.busy_trials:
        out.append("other processes kept the cores busy: rerun with --wait-idle, or when the machine is quiet")
    if ok and report.runner == "executor" and not report.calibration_accepted:
        errs = [abs(t.predicted_decode_tok_s / t.measured_decode_tok_s - 1) for t in ok
                if t.predicted_decode_tok_s and t.measured_decode_tok_s]
        if errs and max(errs) > 1.0:
            out.append("the executor's runs are far from its prediction (its per-operation overhead dominates a "
                       "small model): they say little about llama.cpp; validate with the real runtime: "
                       "--runner llama-bench --bin DIR")
    if not ok and report.trials:
        out.append("every trial failed: see the errors above; `moeplan bench` runs one placement with its output")
    return out
