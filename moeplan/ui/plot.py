"""`tune --plot FILE`: a picture of the VRAM / decode-speed Pareto front."""
from __future__ import annotations

import io
from pathlib import Path

from moeplan.errors import InputError
from moeplan.io import write_bytes_atomic
from moeplan.planner.plan import Plan
from moeplan.units import GIB

PLOT_FORMATS = ("png", "svg", "pdf")


def check_plot_path(path: Path) -> str:
    """The picture format of `path` (from its suffix), and matplotlib present; before any work."""
    import importlib.util

    fmt = path.suffix.lstrip(".").lower() or "png"
    if fmt not in PLOT_FORMATS:
        raise InputError(f"--plot {path}: cannot write a {fmt!r} picture", "name the file .png, .svg or .pdf")
    if importlib.util.find_spec("matplotlib") is None:
        raise InputError("--plot needs matplotlib", "pip install 'moeplan[plot]'")
    return fmt


def write_pareto_plot(plan: Plan, path: Path, vram_budget_bytes: int = 0, margin_bytes: int = 0) -> Path:
    """The front, the recommended plan with its range, and the VRAM budget as a vertical line
    (at the budget less llama.cpp's margin, on the same "in use" scale as the points)."""
    check_plot_path(path)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("--plot needs matplotlib", "pip install 'moeplan[plot]'") from None
    fmt = path.suffix.lstrip(".").lower() or "png"
    if fmt not in ("png", "svg", "pdf"):
        raise InputError(f"cannot write a {fmt!r} picture", "name the file .png, .svg or .pdf")
    xs = [a.vram_bytes / GIB for a in plan.pareto]
    ys = [a.decode_tok_s for a in plan.pareto]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(xs, ys, marker="o", label="fewer CPU layers ->")
    e = plan.estimate
    ax.scatter([e.vram_bytes / GIB], [e.decode_tok_s], s=120, marker="*", color="red", zorder=3,
               label=f"recommended ({len(plan.placement.cpu_moe_layers)} CPU layers)")
    lo, hi = e.decode_tok_s_range
    ax.errorbar([e.vram_bytes / GIB], [e.decode_tok_s], yerr=[[e.decode_tok_s - lo], [hi - e.decode_tok_s]],
                color="red", capsize=4)
    if vram_budget_bytes:
        x = (vram_budget_bytes - margin_bytes) / GIB
        ax.axvline(x, color="gray", linestyle="--",
                   label=f"VRAM budget {vram_budget_bytes / GIB:.1f} GiB"
                   + (f" less the {margin_bytes / GIB:.0f} GiB margin" if margin_bytes else ""))
    ax.set_xlabel("VRAM in use (GiB)")
    ax.set_ylabel("predicted decode (tok/s)")
    ax.set_title(f"{plan.model.name} {plan.model.quant} on {plan.hardware_name}")
    ax.grid(alpha=0.3)
    ax.legend()
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return write_bytes_atomic(path, buf.getvalue())
