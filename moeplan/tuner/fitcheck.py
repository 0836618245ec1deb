"""llama.cpp's own dry run of a plan beside moeplan's figures, and its verdict (issue 33 item 7).

`moeplan tune MODEL.gguf --bin BUILD/bin` and `moeplan emit PLAN.json --bin BUILD/bin` run
`llama-fit-params -fitp on` (probes/fitparams.py) with the flags of the plan's server command
as moeplan emits it for that build (-ngl, -ot, -ts, -dev, -c, -b, -ub, -fa, -ctk/-ctv, -np, -lm,
--no-op-offload, ...; the flags llama-fit-params' own --help does not list, such as the
server's --host, are left out) and the command's environment (GGML_OP_OFFLOAD_MIN_BATCH).
llama.cpp loads the model with no allocation and prints each device's model, context (KV) and
compute MiB: exact for that build and backend (truncated to whole MiB).

A device fits when llama.cpp's buffers plus what llama.cpp does not count (moeplan's CUDA
context and pool, `other`) plus the fit margin are within the device's budget as the plan's
hardware profile gives it, and llama.cpp's buffers plus the margin are within the free memory
llama.cpp itself reports for the device (its own `-fit` test, common/fit.cpp, with the default
`-fitt 1024`). Host RAM is shown, not judged (mmap'd weights are page cache).

Pure except `check_plan`, which runs the program.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from moeplan.probes.fitparams import (  # noqa: F401 (the records of a check live with the probe)
    NO_BIN_NOTE,
    DeviceCheck,
    DeviceFigures,
    FitCheck,
    FitRow,
    FitRun,
    skipped,
)
from moeplan.units import GIB, MIB

# tools/fit-params at llama.cpp 0c1e570 takes these placement flags; used only when its
# --help cannot be read (the help decides otherwise)
FALLBACK_FLAGS = frozenset({
    "-ngl", "--n-gpu-layers", "-ot", "--override-tensor", "-ts", "--tensor-split", "-dev", "--device",
    "-sm", "--split-mode", "-mg", "--main-gpu", "-c", "--ctx-size", "-b", "--batch-size", "-ub",
    "--ubatch-size", "-fa", "--flash-attn", "-ctk", "--cache-type-k", "-ctv", "--cache-type-v", "-np",
    "--parallel", "-lm", "--mmap", "--no-mmap", "--no-op-offload", "-nkvo", "--no-kv-offload", "-kvu",
    "--kv-unified", "--swa-full", "-cmoe", "--cpu-moe", "-ncmoe", "--n-cpu-moe", "--no-host", "--no-repack",
    "--rpc", "-t", "--threads", "-tb", "--threads-batch",
})


def plan_figures(memory, budgets: Sequence[int] | None = None) -> list[DeviceFigures]:
    """moeplan's per-device figures of a plan's MemoryReport (planner/plan.py): each GPU in
    device order, then the host. `budgets`: each GPU's budget when the report does not carry
    it (one GPU)."""
    out: list[DeviceFigures] = []
    if memory.per_gpu:
        for g in memory.per_gpu:
            out.append(DeviceFigures(f"GPU{g.device}", g.weights_dense_bytes + g.weights_experts_bytes, g.kv_bytes,
                                     g.compute_bytes, g.context_bytes + g.pool_bytes, g.margin_bytes,
                                     g.budget_bytes if g.budget_bytes is not None else
                                     (budgets[g.device] if budgets and g.device < len(budgets) else None)))
    elif any(i.device == "gpu" for i in memory.items):
        gpu = [i for i in memory.items if i.device == "gpu"]
        out.append(DeviceFigures(
            "GPU0", sum(i.bytes for i in gpu if _kind(i.name) == "model"),
            sum(i.bytes for i in gpu if _kind(i.name) == "context"),
            sum(i.bytes for i in gpu if _kind(i.name) == "compute"),
            sum(i.bytes for i in gpu if _kind(i.name) == "other"), memory.margin_bytes,
            budgets[0] if budgets else None))
    host = [i for i in memory.items if i.device == "host"]
    out.append(DeviceFigures("Host", sum(i.bytes for i in host if _kind(i.name) == "model"),
                             sum(i.bytes for i in host if _kind(i.name) == "context"),
                             sum(i.bytes for i in host if _kind(i.name) == "compute"),
                             sum(i.bytes for i in host if _kind(i.name) == "other")))
    return out


def _kind(item: str) -> str:
    """Which of llama.cpp's three columns a memory item of moeplan's breakdown belongs to."""
    if item.startswith(("weights", "repack", "expert_cache")):
        return "model"
    if item.startswith("kv_cache"):
        return "context"
    if item.startswith("compute"):
        return "compute"
    return "other"  # cuda_context (+ pool), the host's logits buffer


def judge(rows: Sequence[FitRow], figures: Sequence[DeviceFigures], free: dict[str, int] | None = None,
          command: Sequence[str] = (), seconds: float = 0.0, stdout: str = "") -> FitCheck:
    """llama.cpp's rows beside moeplan's figures (matched by position, the host last) and the
    verdict. Different device counts: shown, not compared (llama.cpp sees other devices than
    the plan's profile has)."""
    free = free or {}
    devs, host = list(rows[:-1]), rows[-1]
    gpus, hfig = list(figures[:-1]), figures[-1] if figures else None
    checks: list[DeviceCheck] = []
    if len(devs) != len(gpus):
        checks = [DeviceCheck(r.device, None, r, free.get(r.device), r.total_mib * MIB, None) for r in rows]
        return FitCheck("not-compared", f"llama.cpp sees {len(devs)} device(s) ({', '.join(r.device for r in devs) or 'none'}) "
                        f"where the plan has {len(gpus)} GPU(s): the figures are shown, not compared",
                        "run it where the plan's GPUs are (or give --rpc the plan's number of RPC servers)",
                        tuple(command), tuple(checks), seconds, stdout=stdout)
    short = []
    for r, f in zip(devs, gpus):
        buffers = r.total_mib * MIB
        need = buffers + f.other_bytes + f.margin_bytes
        f_mib = free.get(r.device)
        why = []
        if f.budget_bytes is not None and need > f.budget_bytes:
            why.append(f"needs {need / GIB:.2f} GiB (llama.cpp's {r.total_mib:,} MiB of buffers + "
                       f"{f.other_bytes / MIB:,.0f} MiB CUDA context/pool + {f.margin_bytes / MIB:,.0f} MiB margin), "
                       f"the profile's budget is {f.budget_bytes / GIB:.2f} GiB")
        if f_mib is not None and buffers + f.margin_bytes > f_mib * MIB:
            why.append(f"llama.cpp's {r.total_mib:,} MiB of buffers + {f.margin_bytes / MIB:,.0f} MiB margin "
                       f"exceed the {f_mib:,} MiB llama.cpp reports free")
        checks.append(DeviceCheck(r.device, f, r, f_mib, need, not why, "; ".join(why)))
        if why:
            short.append(f"{r.device} {why[0]}")
    if hfig is not None:
        checks.append(DeviceCheck(host.device, hfig, host, None, host.total_mib * MIB, None))
    if short:
        return FitCheck("does-not-fit", "llama.cpp's dry run says the plan does not fit: " + "; ".join(short),
                        "free memory on that device, or plan for less: --vram below what is free, a shorter --ctx",
                        tuple(command), tuple(checks), seconds, stdout=stdout)
    worst = max((c for c in checks if c.fits), key=lambda c: c.need_bytes, default=None)
    note = "llama.cpp's dry run: every device fits"
    if worst is not None:
        note += f" (largest need {worst.need_bytes / GIB:.2f} GiB on {worst.device})"
    return FitCheck("fits", note, "", tuple(command), tuple(checks), seconds, stdout=stdout)


def fit_flags(argv_parts: Sequence[Sequence[str]], accepted: Callable[[str], bool]) -> list[str]:
    """The flags of an emitted server command (Command.parts: the program, then one part per
    flag) that llama-fit-params takes, without the program and -m."""
    out: list[str] = []
    for part in list(argv_parts)[1:]:
        if not part or part[0] in ("-m", "--model") or not accepted(part[0]):
            continue
        out += [str(t) for t in part]
    return out


def fit_params_accepts(bin_dir: str | Path) -> Callable[[str], bool]:
    """Which flags llama-fit-params' --help lists (FALLBACK_FLAGS when it cannot be read)."""
    from moeplan.errors import MoeplanError
    from moeplan.launch.binaries import read_help
    from moeplan.launch.flags import parse_help
    from moeplan.probes.fitparams import fit_params_program

    prog = fit_params_program(bin_dir)
    try:
        fs = parse_help(read_help([str(prog), "--help"]), "llama-fit-params", f"--help of {prog}")
    except MoeplanError:
        return FALLBACK_FLAGS.__contains__
    return fs.has


def model_file(spec) -> str | None:
    """The GGUF file llama.cpp loads for the plan's model, when it is a file on this machine."""
    if getattr(spec, "source", "") != "gguf" or not spec.path:
        return None
    path = spec.shards[0] if spec.shards else spec.path
    return path if Path(path).is_file() else None


def check_plan(plan, spec, bin_dir: str | None, *, rpc: str | None = None, budgets: Sequence[int] | None = None,
               programs=None, runner: Callable[..., FitRun] | None = None) -> FitCheck:
    """Run llama-fit-params with the plan's flags and judge it; 'skipped' (with why) when there
    is no --bin, no llama-fit-params in it, no model file, or the backend is not llama.cpp."""
    from moeplan.probes.fitparams import fit_params_program, has_fit_params, run_fit_params

    backend = plan.placement.backend
    if not bin_dir:
        return skipped(NO_BIN_NOTE)
    if not has_fit_params(backend):
        return skipped(f"llama.cpp's dry run not run: llama-fit-params is mainline llama.cpp's; the plan is for {backend}")
    folder = Path(bin_dir).expanduser()
    folder = folder if folder.is_dir() else folder.parent
    if fit_params_program(folder) is None:
        return skipped(f"llama.cpp's dry run not run: no llama-fit-params in {folder} (llama.cpp builds it from "
                       "tools/fit-params since late 2025)")
    path = model_file(spec)
    if path is None:
        return skipped("llama.cpp's dry run not run: the plan's model is not a GGUF file on this machine")
    from moeplan.launch import emit_launch, find_programs

    progs = programs or find_programs(backend, str(folder))
    cmd = emit_launch(plan, spec, backend, progs, model_path=str(Path(path).absolute())).scripts[0].command
    flags = fit_flags(cmd.parts, fit_params_accepts(folder))
    if rpc:
        flags += ["--rpc", rpc]
    run = runner or run_fit_params
    try:
        res = run(folder, Path(path).absolute(), flags, env=dict(cmd.env))
    except (RuntimeError, ValueError, OSError) as err:
        return FitCheck("failed", f"llama.cpp's dry run failed: {err}",
                        "run the command by hand to see why", (str(folder / "llama-fit-params"), "-m", path, *flags))
    figures = plan_figures(plan.estimate.memory, budgets)
    return judge(res.rows, figures, res.free_mib, res.argv, res.seconds, res.stdout)


@dataclass(frozen=True)
class NextBest:
    """tune's walk down its ranking: the index of the first candidate llama.cpp says fits
    (None: none did), and every check made."""

    index: int | None
    checks: list[FitCheck] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)


def first_that_fits(candidates: Sequence[tuple[str, Callable[[], FitCheck]]], limit: int = 6) -> NextBest:
    """Check candidates in rank order (label, thunk) until llama.cpp says one fits; a check
    that is not a verdict (failed, skipped, not compared) stops the walk at that candidate."""
    checks, labels = [], []
    for i, (label, check) in enumerate(list(candidates)[:limit]):
        c = check()
        checks.append(c)
        labels.append(label)
        if c.status != "does-not-fit":
            return NextBest(i, checks, labels)
    return NextBest(None, checks, labels)
