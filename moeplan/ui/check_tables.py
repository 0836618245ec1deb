"""Tables for `moeplan check`: the run's placement, and predicted against observed."""
from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from moeplan.check.compare import CheckResult, Row, fmt_value

MIB = 1024 * 1024

SHOWN_FIELDS = ("backend", "cpu_moe_layers", "n_ctx", "n_seq", "cache_type_k", "cache_type_v", "flash_attn",
                "n_ubatch", "n_batch", "n_threads", "op_offload", "load_mode", "n_gpus")


def _v(r: Row, x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x / MIB:,.2f} MiB" if r.section == "memory" else f"{x:,.2f} tok/s"


def _err(r: Row) -> Text:
    e = r.error
    if e is None:
        if r.predicted is not None and r.observed == 0 and r.predicted == 0:
            return Text("0%")
        return Text("-")
    style = "green" if abs(e) <= 0.05 else "yellow" if abs(e) <= 0.25 else "red"
    return Text(f"{e:+.1%}", style=style)


def placement_table(res: CheckResult) -> Table:
    t = Table(title=f"{res.source}: {res.program or res.tool} run", title_justify="left")
    t.add_column("setting")
    t.add_column("log's run")
    t.add_column("read from")
    if res.plan_placement is not None:
        t.add_column("plan")
    diff = {d.field for d in res.differences}
    for f in SHOWN_FIELDS:
        v = fmt_value(f, getattr(res.placement, f))
        row = [f, v, res.evidence.get(f, "-")]
        if res.plan_placement is not None:
            row.append(fmt_value(f, getattr(res.plan_placement, f)))
        t.add_row(*row, style="bold yellow" if f in diff else None)
    return t


def rows_table(res: CheckResult) -> Table:
    t = Table(title="predicted (at the log's placement) against observed", title_justify="left")
    for col in ("device", "figure", "predicted", "observed", "error", "terms / source"):
        t.add_column(col, justify="right" if col in ("predicted", "observed", "error") else "left",
                     overflow="fold")
    for r in res.rows:
        why = r.terms + (f" [{r.source}]" if r.source else "")
        t.add_row(r.device, r.item, _v(r, r.predicted), _v(r, r.observed), _err(r), why)
    return t


def check_render(res: CheckResult) -> Group:
    parts: list[RenderableType] = [placement_table(res)]
    if res.plan_placement is not None:
        if res.differences:
            parts.append(Text("the log's run is not the plan's:", style="bold yellow"))
            for d in res.differences:
                parts.append(Text(f"  {d.field}: plan {d.plan}, log {d.log} -> {d.effect}"))
        else:
            parts.append(Text("the log's run is the plan's placement", style="green"))
    if res.rows:
        parts.append(rows_table(res))
    else:
        parts.append(Text("no buffer or speed figures in this log", style="yellow"))
    for n in res.notes:
        parts.append(Text(f"note: {n}"))
    return Group(*parts)


def logcal_render(mem_obs, mem_cal, mem_guard, speed, notes) -> Group:
    """`calibrate --from LOG`: what was fitted, the held-out errors, and whether it was kept."""
    from moeplan.planner.memory.constants import MEMORY_PRIORS

    parts: list[RenderableType] = []
    if mem_guard is not None:
        t = Table(title="memory constants (GPU)", title_justify="left")
        for col in ("constant", "prior", "fitted"):
            t.add_column(col, justify="left" if col == "constant" else "right")
        fitted = mem_cal.factors if mem_cal else {}
        names = sorted(set(fitted) | ({"cuda_context_bytes"} if not fitted else set()))
        for n in names:
            unit = " MiB/token" if n.startswith("cuda_pool") else " MiB"
            prior = MEMORY_PRIORS[n.split(":")[0]][0]
            t.add_row(n, f"{prior / MIB:.3f}{unit}", f"{fitted[n] / MIB:.3f}{unit}" if n in fitted else "-")
        parts.append(t)
        parts.append(Text(f"memory ({len(mem_obs)} observations): {_verdict(mem_guard)}",
                          style="green" if mem_guard.accepted else "yellow"))
    if speed is not None:
        if speed.result is not None and speed.result.fitted:
            from moeplan.ui.tuner_tables import calibration_table

            parts.append(calibration_table(speed.result))
        parts.append(Text(f"speed factors: {_verdict(speed.holdout)}",
                          style="green" if speed.holdout.accepted else "yellow"))
    for n in notes:
        parts.append(Text(f"note: {n}"))
    return Group(*parts)


def _verdict(ho) -> str:
    if ho.accepted:
        return f"kept ({ho.reason})"
    return f"not kept, the priors stay: {ho.reason}"
