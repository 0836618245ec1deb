"""`moeplan emit`: write the launch scripts and config files of a saved plan."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from moeplan.commands.common import JsonOpt, command
from moeplan.errors import ModelFormatError

if TYPE_CHECKING:
    from moeplan.planner.model.spec import ModelSpec
    from moeplan.planner.plan import Plan


def read_plan(path: Path) -> Plan:
    """The plan at `path`: moeplan/planfile.py's one reader (schema and fields checked)."""
    from moeplan.planfile import read_plan as read

    return read(path)


def _check_numa_nodes(plan: Plan, where: str, check_here) -> None:
    """The nodes a plan binds must exist on the machine it was made for: its own profile when
    that resolves to the same profile (a preset, or this machine's cached probe: then checked
    against this machine's sysfs too), else only the ids' range (checked with the placement),
    since a plan is often emitted on another machine than the one that runs it."""
    from moeplan.errors import MoeplanError
    from moeplan.planner.limits import check_placement
    from moeplan.planner.plan import digest_of
    from moeplan.probes.hwprofile import load_hardware

    if not plan.placement.numa_nodes or plan.placement.numa == "none":
        return
    hw = None
    for arg in (plan.hardware_name, None):  # a preset of that name, or this machine's cached probe
        try:
            cand = load_hardware(arg, allow_probe=False)
        except MoeplanError:
            continue
        if digest_of(cand) == plan.hardware_digest:
            hw = cand
            break
    if hw is None:
        return
    check_placement(plan.placement, where=where, profile=hw, logical_cpus=None)
    if hw.origin == "probe":
        check_here(plan.placement, where)


def read_plan_model(plan: Plan, model_path: str | None) -> tuple[ModelSpec, bool, str]:
    """Read the plan's model again (or the one at `model_path`) and compare its digest.

    Returns the model, whether it is the plan's, and a one-line verdict. A changed model is
    reported, not refused: the -ot patterns are checked against the model as it is now.
    """
    from moeplan.probes.models import resolve_model

    ref = plan.model
    try:
        if model_path:
            spec = resolve_model(model_path)
        else:
            path, quant, size = ref.reopen_args()
            spec = resolve_model(path, quant=quant, size=size)
    except ModelFormatError as err:
        raise ModelFormatError(err.message, "the plan's model moved? pass --model PATH to read it from there") from None
    now = spec.digest()
    if now == ref.digest:
        return spec, True, f"model digest {now} matches the plan"
    return spec, False, (f"the model changed since the plan was made (digest {ref.digest} -> {now}); "
                  "the placement was checked against the model as it is now, but the plan's "
                  "predictions may no longer hold: re-plan with `moeplan tune`")


def _dry_run(plan: Plan, spec: ModelSpec, backend: str, binary: str | None, rpc: str | None, programs,
             quiet: bool):
    """llama.cpp's dry run of the plan (tuner/fitcheck.py); a device it says does not fit stops
    emit before any file is written (emit cannot search: tune --bin tries the next best)."""
    from moeplan.errors import InfeasibleError
    from moeplan.probes.fitparams import NO_BIN_NOTE, has_fit_params, skipped

    if not has_fit_params(backend):
        return skipped(f"llama.cpp's dry run not run: llama-fit-params is mainline llama.cpp's, not {backend}'s")
    if not binary:
        return skipped(NO_BIN_NOTE)
    from moeplan.tuner.fitcheck import check_plan
    from moeplan.ui.console import progress

    with progress("llama.cpp's dry run (llama-fit-params)", enabled=not quiet and bool(binary)):
        fit = check_plan(plan, spec, binary, rpc=rpc, budgets=_plan_budgets(plan), programs=programs)
    if fit.status == "does-not-fit":
        raise InfeasibleError(fit.note, "re-plan with `moeplan tune MODEL --bin BUILD/bin`, which tries the next "
                                        "best placement, or " + fit.hint)
    return fit


def _plan_budgets(plan: Plan) -> tuple[int, ...] | None:
    """One GPU's budget for the dry run's verdict: the plan's hardware profile when it resolves
    here to the same profile (a preset, this machine's cached probe); several GPUs carry theirs."""
    from moeplan.errors import MoeplanError
    from moeplan.planner.plan import digest_of
    from moeplan.planner.search import budgets
    from moeplan.probes.hwprofile import load_hardware

    if plan.estimate.memory.per_gpu or plan.placement.n_gpus != 1:
        return None
    for arg in (plan.hardware_name, None):
        try:
            cand = load_hardware(arg, allow_probe=False)
        except MoeplanError:
            continue
        if digest_of(cand) == plan.hardware_digest:
            return (budgets(cand)[0],)
    return None


OutOpt = Annotated[Optional[Path], typer.Option("--out", help="Folder to write into (default: ./launch-BACKEND).")]
BinOpt = Annotated[Optional[str], typer.Option(
    "--bin", help="The backend's build folder or program (llama.cpp: build/bin; sglang/ktransformers: "
                  "the python that has sglang; vllm: the vllm command). Its --help decides the flags.")]
NodesOpt = Annotated[int, typer.Option("--nodes", help="Identical machines to spread the model over (vllm, sglang).")]
GpuVramOpt = Annotated[Optional[str], typer.Option(
    "--gpu-vram", help="Memory of one GPU (80G), for the per-GPU checks of vllm/sglang/ktransformers.")]
ModelOpt = Annotated[Optional[str], typer.Option("--model", help="Where the plan's model is now, if it moved.")]


def register(app: typer.Typer) -> None:
    @app.command("emit")
    @command
    def emit_cmd(
        plan_file: Annotated[Path, typer.Argument(metavar="PLAN.json", help="A plan written by `moeplan tune`.")],
        backend: Annotated[Optional[str], typer.Option(
            "--backend", help="llama.cpp | ik_llama.cpp | ktransformers | vllm | sglang (default: the plan's)")] = None,
        out: OutOpt = None,
        binary: BinOpt = None,
        nodes: NodesOpt = 1,
        gpu_vram: GpuVramOpt = None,
        model: ModelOpt = None,
        os_family: Annotated[Optional[str], typer.Option(
            "--os", help="linux | windows: windows adds launch.ps1 and launch.cmd (llama.cpp, ik_llama.cpp); "
                         "default: the OS of the plan's hardware profile")] = None,
        rpc: Annotated[Optional[str], typer.Option(
            "--rpc", help="With --bin: llama.cpp RPC servers (HOST:PORT,...) that llama.cpp's dry run "
                          "(llama-fit-params) loads the plan through; the launch files do not get it.")] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Write launch.sh, bench.sh and the backend's config files for a saved plan; with --bin, check it
        first with llama.cpp's own dry run (llama-fit-params) and refuse a plan it says does not fit."""
        from moeplan.io import check_out_dir
        from moeplan.launch import backend_of, find_programs, os_of, write_launch
        from moeplan.planner.limits import check_placement
        from moeplan.probes.numa import check_numa_nodes_here
        from moeplan.ui.console import emit_json, progress, stderr_console, stdout_console
        from moeplan.ui.launch_tables import launch_data, launch_table
        from moeplan.units import parse_size

        plan = read_plan(plan_file)
        name = backend_of(plan, backend)
        os_name = os_of(plan, os_family)
        vram = parse_size(gpu_vram, "--gpu-vram") if gpu_vram else None
        spec, same_model, model_note = read_plan_model(plan, model)
        check_placement(plan.placement, where=str(plan_file), model=spec, logical_cpus=None)
        _check_numa_nodes(plan, str(plan_file), check_numa_nodes_here)
        out_dir = out or Path(f"launch-{name}")
        check_out_dir(out_dir, "--out")
        if not same_model and not as_json:
            stderr_console().print(f"warning: {model_note}", markup=False)
        with progress(f"reading the flags of the {name} programs", enabled=not as_json):
            programs = find_programs(name, binary, os_family=os_name)
        fit = _dry_run(plan, spec, name, binary, rpc, programs, as_json)
        launch, paths = write_launch(plan, spec, out_dir, name, binary, n_nodes=nodes, gpu_vram_bytes=vram,
                                     programs=programs, notes=() if same_model else (model_note,),
                                     os_family=os_name)
        if as_json:
            emit_json({**launch_data(launch, paths, plan.inputs_digest(), same_model, model_note),
                       "llama_fit_params": fit.to_dict()})
            return
        con = stdout_console()
        from moeplan.ui.fit_tables import fit_render

        for r in fit_render(fit):
            con.print(r, crop=False)
        con.print(launch_table(launch, paths))
        runs = ("launch.cmd", "launch.ps1") if launch.os == "windows" else ("launch.sh",)
        con.print("run: " + " or ".join(str(out_dir / r) for r in runs), markup=False, highlight=False)
        for note in launch.notes:
            con.print(f"note: {note}", markup=False, highlight=False)
