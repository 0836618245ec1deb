"""`moeplan estimate` (one placement) and `moeplan tune` (search, recommend, emit, validate)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from moeplan.commands.common import JsonOpt, ProgressOpt, command
from moeplan.commands.model import QuantOpt, SizeOpt
from moeplan.commands.placement_opts import (
    AcceptOpt,
    AllCpuMoeOpt,
    BackendOpt,
    BatchOpt,
    CacheOpt,
    CpuLayersOpt,
    CpuMoeLayersOpt,
    CpuOnlyOpt,
    CtxOpt,
    DraftOpt,
    ExpertsUsedOpt,
    KtGpuExpertsOpt,
    KtThresholdOpt,
    KvTypeOpt,
    KvTypeVOpt,
    LlamaBuildOpt,
    NglOpt,
    NoFlashAttnOpt,
    NoMmapOpt,
    NoOpOffloadOpt,
    NumaOpt,
    RtrOpt,
    ThreadsOpt,
    UbatchOpt,
    check_backend_device,
    check_backend_runs,
    check_ngl,
    resolve_placement,
)
from moeplan.errors import InputError
from moeplan.planner.hardware.vendors import build_options, device_names

HwOpt = Annotated[Optional[str], typer.Option("--hw", help="Hardware profile JSON, a preset name, or omit to use this machine (cached probe).")]
DepthOpt = Annotated[int, typer.Option("--depth", help="Tokens already in context when decoding.")]
PromptOpt = Annotated[int, typer.Option("--prompt", help="Prompt length for the prefill figure.")]
PromptDepthOpt = Annotated[int, typer.Option("--prompt-depth", help="Tokens already in the cache when the prompt is processed (llama-bench -d).")]
VramOpt = Annotated[Optional[str], typer.Option("--vram", help="What-if VRAM budget (all GPUs), e.g. 96G.")]
RamOpt = Annotated[Optional[str], typer.Option("--ram", help="What-if host RAM, e.g. 512G.")]

TsOpt = Annotated[Optional[str], typer.Option("--ts", help="Several GPUs: llama.cpp -ts weights (blocks per GPU, the output counted on the last), e.g. 57,7,7,9; default: the split moeplan would choose.")]
RpcOpt = Annotated[Optional[str], typer.Option(
    "--rpc", help="With --bin: llama.cpp RPC servers (HOST:PORT,...) that llama.cpp's dry run (llama-fit-params) "
    "loads the plan through, as llama.cpp's --rpc; the launch files do not get it.")]
GpusOpt = Annotated[Optional[str], typer.Option("--gpus", help="Use only these GPUs of the profile, by index: 0,2 (emitted as -dev CUDA0,CUDA2; ROCm0 or Vulkan0 for AMD GPUs).")]

OBJECTIVES = ("workload", "decode", "prefill", "balanced")
WorkloadOpt = Annotated[str, typer.Option(
    "--workload", help="The request tune minimises the time of: chat (1,024-token prompt, 512 generated), agent or "
    "coding (16,384-token prompt, 1,024 generated), or PROMPT:GEN[:DEPTH] in tokens (8k:500:20k: a 8k prompt after "
    "20k cached tokens, 500 generated). --prompt, --gen, --depth change one number of it.")]
GenOpt = Annotated[Optional[int], typer.Option("--gen", help="Tokens generated per request (the workload's).")]


def parse_workload(text: str, prompt: int | None, gen: int | None, depth: int | None):
    """--workload chat|agent|coding|PROMPT:GEN[:DEPTH], then --prompt/--gen/--depth over it."""
    from dataclasses import replace

    from moeplan.planner.plan import Workload
    from moeplan.planner.search import WORKLOADS
    from moeplan.units import parse_ctx

    key = text.strip().lower()
    if key in WORKLOADS:
        w = WORKLOADS[key]
    else:
        parts = key.split(":")
        try:
            if len(parts) not in (2, 3):
                raise InputError("", "")
            nums = [parse_ctx(x) for x in parts]
        except InputError:
            raise InputError(f"cannot read --workload {text!r}",
                             "chat, agent, coding, or PROMPT:GEN[:DEPTH] in tokens, for example 8k:500 or "
                             "8k:500:20k") from None
        w = Workload("custom", nums[0], nums[1], nums[2] if len(nums) == 3 else 0)
    w = replace(w, prompt_tokens=w.prompt_tokens if prompt is None else prompt,
                gen_tokens=w.gen_tokens if gen is None else gen, depth=w.depth if depth is None else depth)
    if w.prompt_tokens < 1 or w.gen_tokens < 0 or w.depth < 0:
        raise InputError(f"workload {w.describe()} is not a request", "a prompt of 1+ tokens, 0+ generated")
    return w


def ctx_warnings(spec, n_ctx: int | None) -> list[str]:
    """A context above the model's trained context: llama.cpp runs it, the model was not trained for it."""
    if n_ctx and spec.n_ctx_train and n_ctx > spec.n_ctx_train:
        return [f"--ctx {n_ctx:,} is above {spec.name}'s trained context of {spec.n_ctx_train:,} tokens: llama.cpp "
                "runs it, but output past the trained length degrades unless the model supports RoPE scaling (YaRN) "
                "and you enable it"]
    return []


def select_gpus(profile, gpus: str | None):
    """The profile with only the GPUs `--gpus 0,2` names, in that order (llama.cpp -dev)."""
    if not gpus:
        return profile
    from dataclasses import replace

    try:
        idx = [int(x) for x in gpus.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"cannot read --gpus {gpus!r}", "GPU indices separated by commas, for example --gpus 0,2") from None
    known = {g.index: g for g in profile.gpus}
    bad = [i for i in idx if i not in known]
    if not idx or bad or len(set(idx)) != len(idx):
        raise InputError(f"--gpus {gpus!r} names GPU(s) {bad or idx} that profile {profile.name!r} does not have "
                         "(or names one twice)", "known GPU indices: " + ",".join(str(i) for i in sorted(known)))
    chosen = tuple(replace(known[i], index=k) for k, i in enumerate(idx))
    return replace(profile, gpus=chosen, notes=profile.notes + (f"GPUs {gpus} of the machine only (-dev)",),
                   spec_inputs={**profile.spec_inputs, "devices": device_names(profile, idx)})


def _devices_options(options, gpus: str | None, profile=None):
    """`options` with -dev of --gpus (CUDA0 / ROCm0 / Vulkan0 by the GPUs' vendor) and, for AMD
    GPUs, the llama.cpp build the scripts are for (planner/hardware/vendors.py)."""
    options = build_options(profile, options)
    if not gpus:
        return options
    return options.with_(devices=device_names(profile, [int(i) for i in gpus.split(",") if i.strip()]))


def _with_devices(result, gpus: str | None, profile=None):
    """Put -dev of --gpus into the chosen placement (launch files emit it)."""
    p = result.best.placement
    options = _devices_options(p.options, gpus, profile)
    if options == p.options:
        return result
    from dataclasses import replace

    best = replace(result.best, placement=p.with_(options=options))
    return replace(result, best=best)


def _device_split(spec, p, profile, ts: str | None, gpus: str | None):
    """Several GPUs: the -ts given, else the split moeplan would choose for this placement
    (when none fits, llama.cpp's even split, and the per-GPU table shows what is over)."""
    from moeplan.planner.memory.accounting import MemoryConstants
    from moeplan.planner.memory.devices import format_tensor_split, parse_tensor_split
    from moeplan.planner.search import fit_placement

    p = p.with_(options=_devices_options(p.options.with_(tensor_split=""), gpus, profile))
    if p.n_gpus <= 1:
        if ts:
            raise InputError("--ts needs several GPUs", "drop --ts, or plan for a profile with several GPUs")
        return p
    if ts:
        try:
            w = parse_tensor_split(ts, p.n_gpus)
        except ValueError:
            raise InputError(f"cannot read --ts {ts!r} for {p.n_gpus} GPUs",
                             "non-negative weights, one per GPU at most, for example --ts 57,7,7,9") from None
        return p.with_(options=p.options.with_(tensor_split=format_tensor_split(w)))
    return fit_placement(spec, p, profile, sum(g.vram_free_bytes if g.vram_free_bytes is not None else g.vram_bytes
                                               for g in profile.gpus), MemoryConstants()) or p


def _fit_of(spec, p, profile):
    """Whether the placement fits the profile's budgets (planner/search.py check_fit)."""
    from moeplan.planner.memory.constants import memory_constants
    from moeplan.planner.search import budgets, check_fit

    vram, ram = budgets(profile)
    return check_fit(spec, p, profile, vram, ram, memory_constants(profile, p.backend))


def _hardware(hw: str | None, vram: str | None = None, ram: str | None = None):
    from moeplan.planner.hardware.profile import apply_overrides
    from moeplan.probes.hwprofile import load_hardware
    from moeplan.units import parse_size

    profile = load_hardware(hw)
    vram_bytes = parse_size(vram, "--vram") if vram else None
    if vram_bytes and not profile.gpus:
        profile = what_if_gpu(profile, vram_bytes)
    return apply_overrides(profile, vram_bytes=vram_bytes, ram_bytes=parse_size(ram, "--ram") if ram else None)


# a what-if GPU's host link when the user names none: the common one of current cards
WHAT_IF_PCIE = (4, 16)


def what_if_gpu(profile, vram_bytes: int):
    """--vram on a profile without a GPU ("what if I had a 96 GB card"): one GPU of that size,
    its memory bandwidth the median of the catalog's cards of that size, on PCIe 4.0 x16 to the
    first node; the notes say what was assumed."""
    from dataclasses import replace

    from moeplan.planner.hardware.spec import SpecRequest
    from moeplan.profiles import catalog

    if vram_bytes <= 0:
        return profile
    spec = catalog.build_profile(SpecRequest(gpu_vram_bytes=vram_bytes, pcie_gen=WHAT_IF_PCIE[0],
                                             pcie_width=WHAT_IF_PCIE[1], ram_bytes=max(profile.ram_bytes, 1 << 30)))
    node = profile.numa_nodes[0].id if profile.numa_nodes else 0
    gpu = replace(spec.gpus[0], name=f"what-if GPU ({vram_bytes / 2**30:.0f} GiB)", numa_node=node,
                  local_cpus=profile.numa_nodes[0].cpus_str if profile.numa_nodes and
                  hasattr(profile.numa_nodes[0], "cpus_str") else spec.gpus[0].local_cpus)
    bw = [n for n in spec.notes if n.startswith("GPU memory bandwidth")]
    note = (f"--vram {vram_bytes / 2**30:.0f} GiB on {profile.name}, which has no GPU: planned with a what-if GPU of "
            f"that size on PCIe {WHAT_IF_PCIE[0]}.0 x{WHAT_IF_PCIE[1]}"
            + (f"; {bw[0]}" if bw else "") + "; name one with `moeplan hardware --gpu NAME` for its own figures")
    return replace(profile, gpus=(gpu,), notes=profile.notes + (note,),
                   name=f"{profile.name} + what-if {vram_bytes / 2**30:.0f} GiB GPU")


def what_if_notes(profile) -> tuple[str, ...]:
    return tuple(n for n in profile.notes if n.startswith("--vram ") and "what-if GPU" in n)


def register(app: typer.Typer) -> None:
    @app.command("estimate")
    @command
    def estimate_cmd(
        model: Annotated[str, typer.Argument(help="GGUF file, Hugging Face folder, or profile name")],
        hw: HwOpt = None, quant: QuantOpt = None, size: SizeOpt = None,
        cpu_moe_layers: CpuMoeLayersOpt = None, cpu_layers: CpuLayersOpt = None, all_cpu_moe: AllCpuMoeOpt = False,
        ctx: CtxOpt = "4096", depth: DepthOpt = 0, prompt: PromptOpt = 4096, kv_type: KvTypeOpt = "f16",
        threads: ThreadsOpt = None, ubatch: UbatchOpt = 512, batch: BatchOpt = None, numa: NumaOpt = "none",
        no_op_offload: NoOpOffloadOpt = False, gpu_expert_cache: CacheOpt = None, draft: DraftOpt = 0,
        accept: AcceptOpt = 0.0, backend: BackendOpt = "llama.cpp", no_mmap: NoMmapOpt = False,
        experts_used: ExpertsUsedOpt = None, cpu_only: CpuOnlyOpt = False, vram: VramOpt = None, ram: RamOpt = None,
        tensor_split: TsOpt = None, gpus: GpusOpt = None, ngl: NglOpt = None, as_json: JsonOpt = False,
        prompt_depth: PromptDepthOpt = 0, kt_prefill_threshold: KtThresholdOpt = None,
        llama_build: LlamaBuildOpt = None, rtr: RtrOpt = False, kt_gpu_experts: KtGpuExpertsOpt = None,
        kv_type_v: KvTypeVOpt = None, no_flash_attn: NoFlashAttnOpt = False,
    ) -> None:
        """Predict VRAM, RAM, decode and prefill speed of one placement, with where the time goes."""
        from moeplan.planner.cost.estimate import default_threads, estimate
        from moeplan.planner.limits import check_placement, check_run_shape
        from moeplan.planner.placement import Placement
        from moeplan.planner.search import as_run
        from moeplan.probes.models import resolve_model
        from moeplan.profiles.backends import read_priors
        from moeplan.ui.console import emit_json, stdout_console
        from moeplan.ui.plan_tables import estimate_data, estimate_render

        check_run_shape(depth, prompt)
        if prompt_depth < 0:
            raise InputError(f"--prompt-depth {prompt_depth} is negative", "for example --prompt-depth 6000")
        spec = resolve_model(model, quant=quant, size=size)
        profile = select_gpus(_hardware(hw, vram, ram), gpus)
        p = resolve_placement(spec, backend=backend, cpu_moe_layers=cpu_moe_layers, cpu_layers=cpu_layers,
                              all_cpu_moe=all_cpu_moe, ctx=ctx, kv_type=kv_type, threads=threads,
                              default_threads=default_threads(profile, Placement(numa=numa), backend),
                              ubatch=ubatch, numa=numa, no_op_offload=no_op_offload,
                              gpu_expert_cache=gpu_expert_cache, draft=draft, accept=accept, no_mmap=no_mmap, experts_used=experts_used,
                              logical_cpus=profile.cpu.n_threads, ngl=ngl,
                              kt_prefill_threshold=kt_prefill_threshold, llama_build=llama_build, rtr=rtr,
                              batch=batch, kt_gpu_experts=kt_gpu_experts, kv_type_v=kv_type_v,
                              no_flash_attn=no_flash_attn)
        p = p.with_(n_gpus=0 if cpu_only else len(profile.gpus))
        check_backend_device(backend, p.n_gpus)
        from moeplan.ui.console import warn

        for w in ctx_warnings(spec, p.n_ctx):
            warn(w)
        for n in what_if_notes(profile):
            warn(n)
        p = _device_split(spec, p, profile, tensor_split, gpus)
        check_placement(p, model=spec, profile=profile)
        e = estimate(spec, p, profile, read_priors(backend), depth=depth, n_prompt=prompt, prompt_depth=prompt_depth)
        fit = _fit_of(spec, p, profile)
        e = as_run(e, fit)
        if as_json:
            emit_json(estimate_data(spec, p, e, profile.name, fit))
        else:
            stdout_console().print(estimate_render(spec, p, e, fit))

    @app.command("tune")
    @command
    def tune_cmd(
        model: Annotated[str, typer.Argument(help="GGUF file, Hugging Face folder, or profile name")],
        hw: HwOpt = None, quant: QuantOpt = None, size: SizeOpt = None,
        vram: VramOpt = None, ram: RamOpt = None,
        ctx: Annotated[Optional[str], typer.Option("--ctx", help="Exact context size.")] = None,
        min_ctx: Annotated[Optional[str], typer.Option(
            "--min-ctx", help="At least this context, grown to fill spare VRAM (default: the model's trained context "
            "up to 32k when it fits, else the largest that fits).")] = None,
        backend: BackendOpt = "llama.cpp",
        objective: Annotated[str, typer.Option(
            "--objective", help="workload (the shortest --workload request, the default) | decode | prefill | "
            "balanced")] = "workload",
        workload: WorkloadOpt = "chat", gen: GenOpt = None,
        depth: Annotated[Optional[int], typer.Option("--depth", help="Tokens already in context (the workload's "
                                                     "cached tokens; with --objective decode: when decoding).")] = None,
        prompt: Annotated[Optional[int], typer.Option("--prompt", help="Prompt tokens (the workload's; with "
                                                      "--objective decode/prefill: for the prefill figure).")] = None,
        threads: ThreadsOpt = None,
        numa: Annotated[Optional[str], typer.Option(
            "--numa", help="Only this NUMA policy: none | bind | interleave | distribute (default: every one that "
            "fits, each policy's figures shown).")] = None,
        cpu_only: CpuOnlyOpt = False, all_cpu_moe: AllCpuMoeOpt = False,
        emit: Annotated[Optional[Path], typer.Option("--emit", help="Write launch.sh, plan.json, bench.sh and configs here.")] = None,
        plot: Annotated[Optional[Path], typer.Option("--plot", help="Write a picture of the Pareto front (PNG/SVG).")] = None,
        out: Annotated[Optional[Path], typer.Option("--out", help="Write plan.json here.")] = None,
        validate: Annotated[bool, typer.Option("--validate", help="Run the plan and neighbours, calibrate, re-plan.")] = False,
        runner: Annotated[str, typer.Option("--runner", help="executor | llama-bench (with --validate)")] = "executor",
        trials: Annotated[int, typer.Option("--trials", help="Most runs with --validate.")] = 6,
        budget: Annotated[str, typer.Option("--budget", help="Wall-time budget of --validate (5m, 90s): no run starts that cannot finish in it.")] = "5m",
        wait_idle: Annotated[bool, typer.Option("--wait-idle", help="With --validate: before each run, wait (up to 2 min) for other processes to leave the CPUs.")] = False,
        show_progress: ProgressOpt = False,
        binary: Annotated[Optional[str], typer.Option("--bin", help="Backend binary to check flags against / run.")] = None,
        explain: Annotated[bool, typer.Option("--explain", help="Show the formula of every figure.")] = False,
        gpus: GpusOpt = None,
        ngl: NglOpt = None,
        rpc: RpcOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Search every sensible placement, recommend the fastest that fits, and say why."""
        from moeplan import __version__
        from moeplan.planner.limits import check_ctx, check_run_shape, check_threads
        from moeplan.planner.placement import BACKENDS
        from moeplan.planner.search import DEFAULT_CTX_CAP, Request, build_plan, choose_plan
        from moeplan.probes.models import resolve_model
        from moeplan.profiles.backends import read_priors
        from moeplan.ui.console import warn
        from moeplan.units import parse_ctx

        # every input is checked before the first model byte is read or file written
        if objective not in OBJECTIVES:
            raise InputError(f"unknown objective {objective!r}", "use workload, decode, prefill or balanced")
        if backend not in BACKENDS:
            raise InputError(f"unknown backend {backend!r}", "use one of " + ", ".join(BACKENDS))
        from moeplan.planner.placement import NUMA_POLICIES

        if numa is not None and numa not in NUMA_POLICIES:
            raise InputError(f"unknown NUMA policy {numa!r}", "use one of " + ", ".join(NUMA_POLICIES))
        check_run_shape(0 if depth is None else depth, 4096 if prompt is None else prompt)
        if gen is not None and gen < 0:
            raise InputError(f"--gen = {gen} is negative", "tokens generated per request, for example --gen 512")
        wl = parse_workload(workload, prompt, gen, depth) if objective == "workload" else None
        depth = 0 if depth is None else depth
        prompt = 4096 if prompt is None else prompt
        n_ctx = parse_ctx(ctx) if ctx else None
        min_ctx_given = min_ctx is not None
        n_min_ctx = parse_ctx(min_ctx or "4096")
        if validate:
            from moeplan.tuner.validate import parse_budget, require_runner

            require_runner(runner)
            parse_budget(budget)
            if trials < 1:
                raise InputError(f"--trials {trials} must be at least 1", "for example --trials 6")
        check_outputs(emit, plot, out)
        spec = resolve_model(model, quant=quant, size=size)
        check_backend_runs(spec, backend)
        for flag, n in (("--ctx", n_ctx), ("--min-ctx", n_min_ctx)):
            if n is not None:
                check_ctx(n, flag, spec.name, spec.n_ctx_train)
        profile = select_gpus(_hardware(hw, vram, ram), gpus)
        if cpu_only:
            from dataclasses import replace as _replace

            profile = _replace(profile, gpus=(), notes=profile.notes + ("--cpu-only: the GPUs are not used",))
        check_backend_device(backend, len(profile.gpus))
        if threads is not None:
            check_threads(threads, profile.cpu.n_threads)
        priors = read_priors(backend)
        n_gpu_layers = check_ngl(ngl, spec, backend)
        for w in ctx_warnings(spec, n_ctx):
            warn(w)
        req = Request(backend=backend, objective=objective, n_ctx=n_ctx,
                      min_ctx=n_min_ctx, depth=depth, n_prompt=prompt, threads=threads, n_gpu_layers=n_gpu_layers,
                      workload=wl, ctx_cap=0 if min_ctx_given else DEFAULT_CTX_CAP,
                      numa_policies=(numa,) if numa else (), all_cpu_moe=all_cpu_moe)
        result = choose_plan(spec, profile, priors, req)
        result = _with_devices(result, gpus, profile)
        result, fit = _dry_run(spec, profile, result, gpus, binary, rpc, objective, size or "", as_json)
        plan = build_plan(spec, profile, result, objective, size or "", moeplan_version=__version__)
        if fit.refused:
            plan = _replace_plan(plan, notes=plan.notes + (fit.refused[-1],))
        plan = _replace_plan(plan, workload=wl,
                             notes=what_if_notes(profile) + tuple(ctx_warnings(spec, n_ctx)) + plan.notes)
        if validate:
            report = _validate(plan, spec, profile, priors, req, runner=runner, trials=trials, budget=budget,
                               binary=binary, as_json=as_json, wait_idle=wait_idle, show_progress=show_progress)
            plan = report.plan
        else:
            report = None
        _write_outputs(plan, spec, emit, plot, out, backend, binary, _plot_budget(profile, backend))
        if report is not None and report.stopped.startswith("interrupted"):
            from moeplan.errors import Interrupted

            raise Interrupted(f"--validate interrupted (Ctrl-C) after {len(report.trials)} trial(s)",
                              f"the runs so far are kept in {report.results_path}; rerun `tune --validate` to add "
                              "to them (the plan was not re-planned)")
        _render_tune(plan, spec, as_json, emit, explain, report, fit)


def _dry_run(spec, profile, result, gpus: str | None, binary: str | None, rpc: str | None, objective: str,
             size: str, quiet: bool):
    """llama.cpp's own dry run (llama-fit-params) of the chosen plan and, when it says a device
    does not fit, of the next best placements in the search's order (tuner/fitcheck.py): the
    result with the first that fits as the best, and that plan's check. None fits: an error."""
    from dataclasses import replace

    from moeplan.probes.fitparams import NO_BIN_NOTE, skipped

    if not binary:  # the plain planning path loads nothing of the tuner
        return result, skipped(NO_BIN_NOTE)
    from moeplan.errors import InfeasibleError
    from moeplan.planner.search import budgets, build_plan, gpu_budgets
    from moeplan.tuner.fitcheck import check_plan, first_that_fits
    from moeplan.ui.console import progress

    vram, _ = budgets(profile)
    per_gpu = gpu_budgets(profile, vram) if len(profile.gpus) > 1 else (vram,)
    cands = [result.best] + list(result.alternatives)
    programs = None
    backend = result.best.placement.backend
    from moeplan.probes.fitparams import fit_params_program, has_fit_params

    if spec.source == "gguf" and has_fit_params(backend):
        from moeplan.launch import find_programs

        folder = Path(binary).expanduser()
        if fit_params_program(folder if folder.is_dir() else folder.parent) is not None:
            programs = find_programs(backend, binary)

    def thunk(c):
        def run():
            one = replace(result, best=replace(c, placement=c.placement.with_(
                options=_devices_options(c.placement.options, gpus, profile))))
            plan = build_plan(spec, profile, one, objective, size)
            return check_plan(plan, spec, binary, rpc=rpc, budgets=per_gpu, programs=programs)
        return run

    from moeplan.planner.search import to_alternative

    with progress("llama.cpp's dry run (llama-fit-params)", enabled=not quiet and programs is not None):
        walk = first_that_fits([(to_alternative(c).label, thunk(c)) for c in cands])
    refused = [f"refused by llama.cpp's dry run: {lab}: {c.note}" for lab, c in zip(walk.labels, walk.checks)
               if c.status == "does-not-fit"]
    if walk.index is None:
        first = walk.checks[0]
        raise InfeasibleError(f"{first.note} (and the {len(walk.checks) - 1} next best placements too)"
                              if len(walk.checks) > 1 else first.note, first.hint)
    fit = walk.checks[walk.index]
    if walk.index > 0:
        best = cands[walk.index]
        rest = tuple(c for i, c in enumerate(cands) if i > walk.index)
        result = _with_devices(replace(result, best=best, alternatives=rest), gpus, profile)
        fit = replace(fit, refused=tuple(refused) + (
            f"llama.cpp's dry run refused the {walk.index} placement(s) ranked above this one "
            f"(first: {refused[0].split(': ', 1)[1]})",))
    return result, fit


def _plot_budget(profile, backend: str) -> tuple[int, int]:
    """(VRAM budget of all GPUs, llama.cpp's margin over them) for the plot's budget line."""
    from moeplan.planner.memory.constants import memory_constants
    from moeplan.planner.search import budgets

    vram, _ = budgets(profile)
    return vram, memory_constants(profile, backend).margin_bytes * max(1, len(profile.gpus))


def _replace_plan(plan, **kw):
    from dataclasses import replace

    return replace(plan, **kw)


def _validate(plan, spec, profile, priors, req, *, runner, trials, budget, binary, as_json, wait_idle,
              show_progress):
    """Run tune --validate, showing each run and trial as it lands (stderr under --json)."""
    import time

    from moeplan.commands.validation import replan, trial_placements
    from moeplan.tuner.validate import parse_budget, validate_plan
    from moeplan.ui.console import progress, stderr_console, stdout_console
    from moeplan.ui.tuner_tables import trial_row, validation_render

    con = stderr_console() if as_json else stdout_console()
    budget_s = parse_budget(budget)
    t0 = time.monotonic()
    with progress("validate", total=budget_s, enabled=not as_json, force=show_progress) as bar:
        def on_start(text: str) -> None:
            if as_json and not show_progress:
                return
            con.print(text, markup=False, highlight=False)

        def on_run(label: str, i: int, expected_s: float | None) -> None:
            exp = f", about {expected_s:.0f} s" if expected_s else ""
            bar.update(description=f"validate: {label} (run {i + 1}{exp})", completed=time.monotonic() - t0)

        def on_trial(t) -> None:
            bar.update(completed=time.monotonic() - t0)
            if not as_json:
                bar.print(trial_row(t))

        report, new_hw = validate_plan(plan, spec, profile, priors, trial_placements(plan, spec, profile, priors),
                                       runner=runner, trials=trials, budget=budget, binary=binary,
                                       wait_idle=wait_idle, on_start=on_start, on_run=on_run, on_trial=on_trial)
        if report.calibration_accepted and new_hw is not profile:
            report = replan(plan, spec, new_hw, priors, req, report)
    if not as_json:
        for r in validation_render(report):
            con.print(r)
    return report


def check_outputs(emit: Path | None, plot: Path | None, out: Path | None) -> None:
    """Every output the user named can be written (and --plot's format drawn) before any work."""
    from moeplan.io import check_out_dir, check_out_file

    if out:
        check_out_file(out, "--out")
    if emit:
        check_out_dir(emit, "--emit")
    if plot:
        from moeplan.ui.plot import check_plot_path

        check_out_file(plot, "--plot")
        check_plot_path(plot)


def _write_outputs(plan, spec, emit: Path | None, plot: Path | None, out: Path | None, backend: str,
                   binary: str | None, plot_budget: tuple[int, int] | None = None) -> None:
    from moeplan.io import write_text_atomic

    if out:
        write_text_atomic(out, plan.to_json())
    if emit:
        from moeplan.launch import write_launch_files

        write_launch_files(plan, spec, emit, backend=backend, binary=binary)
    if plot:
        from moeplan.ui.plot import write_pareto_plot

        write_pareto_plot(plan, plot, *(plot_budget or (0, 0)))


def _render_tune(plan, spec, as_json: bool, emit: Path | None, explain: bool = False, report=None,
                 fit=None) -> None:
    from moeplan.ui.console import emit_json, stdout_console

    if as_json:
        doc = {"plan": plan.to_dict()}
        if report is not None:
            doc["validation"] = report.to_dict()
        if fit is not None:
            doc["llama_fit_params"] = fit.to_dict()
        emit_json(doc)
        return
    from moeplan.launch import preview_command
    from moeplan.ui.plan_tables import tune_render  # rich: only for a table

    cmd = preview_command(plan, spec)
    stdout_console().print(tune_render(spec, plan, cmd, explain), crop=False)
    if fit is not None:
        from moeplan.ui.fit_tables import fit_render

        for r in fit_render(fit):
            stdout_console().print(r, crop=False)
    if emit:
        stdout_console().print(f"wrote launch files to {emit}")
