"""Render llama.cpp's dry run (llama-fit-params) beside moeplan's per-device figures."""
from __future__ import annotations

from rich.table import Table
from rich.text import Text

from moeplan.probes.fitparams import FitCheck
from moeplan.units import MIB


def _pair(ours: float | None, theirs: int) -> str:
    return f"{theirs:,}" if ours is None else f"{ours:,.0f} / {theirs:,}"


def fit_table(fit: FitCheck) -> Table:
    t = Table(title="llama.cpp's dry run (llama-fit-params -fitp on), MiB: moeplan / llama.cpp",
              title_justify="left")
    for col in ("device", "model", "KV", "compute", "+ other", "need", "budget", "free", "fits"):
        t.add_column(col, justify="left" if col in ("device", "fits") else "right")
    for c in fit.devices:
        m = c.moeplan
        fits = "-" if c.fits is None else ("yes" if c.fits else "NO")
        t.add_row(c.device, _pair(m.model_bytes / MIB if m else None, c.row.model_mib),
                  _pair(m.context_bytes / MIB if m else None, c.row.context_mib),
                  _pair(m.compute_bytes / MIB if m else None, c.row.compute_mib),
                  _num((m.other_bytes + m.margin_bytes) / MIB if m else None), _num(c.need_bytes / MIB),
                  _num(m.budget_bytes / MIB if m and m.budget_bytes is not None else None), _num(c.free_mib), fits)
    return t


def _num(v) -> str:
    return "" if v is None else f"{v:,.0f}"


def fit_render(fit: FitCheck) -> list:
    """The table (when llama.cpp ran) and the one-line verdict, its hint and the command."""
    out: list = []
    if fit.devices:
        out.append(fit_table(fit))
        out.append(Text("+ other: moeplan's CUDA context/pool and the fit margin (not llama.cpp buffers); "
                        "free: as llama.cpp reports it"))
    out.append(Text(fit.note))
    for r in fit.refused[:-1]:
        out.append(Text(r))
    if fit.hint and fit.status != "fits":
        out.append(Text(f"hint: {fit.hint}"))
    if fit.command:
        out.append(Text(f"dry run ({fit.seconds:.1f} s): " + " ".join(fit.command)))
    return out
