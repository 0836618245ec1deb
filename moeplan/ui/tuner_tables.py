"""Tables for `tune --validate` and `moeplan calibrate`: predicted against measured."""
from __future__ import annotations

from rich.table import Table
from rich.text import Text

from moeplan.tuner.calibrate import Trial


def _err(pred: float | None, meas: float | None) -> str:
    if not pred or not meas:
        return "-"
    return f"{pred / meas - 1:+.0%}"


def _v(x: float | None, fmt: str) -> str:
    return format(x, fmt) if x else "-"


def trial_row(t: Trial) -> Text:
    """One line per finished run, printed as it lands."""
    if t.error:
        return Text(f"  {t.label}: failed after {t.wall_s:.0f} s: {t.error}", style="red")
    return Text(f"  {t.label}: decode {_v(t.measured_decode_tok_s, '.2f')} tok/s (predicted "
                f"{_v(t.predicted_decode_tok_s, '.2f')}, {_err(t.predicted_decode_tok_s, t.measured_decode_tok_s)}), "
                f"prefill {_v(t.measured_prefill_tok_s, '.1f')} (predicted {_v(t.predicted_prefill_tok_s, '.1f')}, "
                f"{_err(t.predicted_prefill_tok_s, t.measured_prefill_tok_s)}), {t.wall_s:.0f} s")


def trials_table(trials: list[Trial]) -> Table:
    t = Table(title="predicted against measured (tok/s)")
    for col in ("run", "decode pred", "decode meas", "err", "prefill pred", "prefill meas", "err", "s"):
        t.add_column(col, justify="left" if col == "run" else "right")
    for x in trials:
        if x.error:
            t.add_row(x.label, "", "", "", "", "", "", f"{x.wall_s:.0f}", style="red")
            continue
        t.add_row(x.label, _v(x.predicted_decode_tok_s, ".2f"), _v(x.measured_decode_tok_s, ".2f"),
                  _err(x.predicted_decode_tok_s, x.measured_decode_tok_s), _v(x.predicted_prefill_tok_s, ".1f"),
                  _v(x.measured_prefill_tok_s, ".1f"), _err(x.predicted_prefill_tok_s, x.measured_prefill_tok_s),
                  f"{x.wall_s:.0f}")
    return t


def calibration_table(res) -> Table:
    cal = res.calibration
    t = Table(title=f"calibrated factors ({cal.backend}); median error "
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
