"""`moeplan bench`: run the bundled torch executor under a placement and measure it."""
from __future__ import annotations

import os
from typing import Annotated, Optional

import typer

from moeplan.commands.common import JsonOpt, ProgressOpt, command
from moeplan.commands.model import QuantOpt, SizeOpt
from moeplan.commands.placement_opts import (
    AcceptOpt,
    AllCpuMoeOpt,
    BackendOpt,
    CacheOpt,
    CpuLayersOpt,
    CpuMoeLayersOpt,
    CtxOpt,
    DraftOpt,
    KvTypeOpt,
    NoMmapOpt,
    NoOpOffloadOpt,
    NumaOpt,
    ThreadsOpt,
    UbatchOpt,
    resolve_placement,
)
from moeplan.errors import InputError
from moeplan.planner import backends


def read_plan_placement(path: str, model, plan=None):
    """Placement of a plan.json written by `moeplan tune` (and a note if it is for another model).

    The plan's thread count is for the machine it was made for (a preset, another host), so
    only its range is checked, not this machine's CPUs."""
    from moeplan.planfile import read_plan
    from moeplan.planner.limits import check_placement
    from moeplan.probes.numa import check_numa_nodes_here

    plan = plan or read_plan(path)
    check_placement(plan.placement, where=path, model=model)
    check_numa_nodes_here(plan.placement, path)  # bench runs the placement on this machine
    notes = []
    if plan.model.digest and plan.model.digest != model.digest():
        notes.append(f"the plan is for {plan.model.name} (digest {plan.model.digest}), not this model "
                     f"({model.digest()}); its placement is applied as it is")
    return plan, notes


def _default_threads() -> int:
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def register(app: typer.Typer) -> None:
    @app.command("bench")
    @command
    def bench_cmd(
        model: Annotated[str, typer.Argument(help="GGUF file (any shard), Hugging Face folder, or profile name")],
        quant: QuantOpt = None,
        size: SizeOpt = None,
        plan: Annotated[Optional[str], typer.Option("--plan", help="plan.json from moeplan tune (instead of placement flags)")] = None,
        cpu_moe_layers: CpuMoeLayersOpt = None,
        cpu_layers: CpuLayersOpt = None,
        all_cpu_moe: AllCpuMoeOpt = False,
        ctx: CtxOpt = "4096",
        kv_type: KvTypeOpt = "f16",
        threads: ThreadsOpt = None,
        ubatch: UbatchOpt = 512,
        numa: NumaOpt = "none",
        no_op_offload: NoOpOffloadOpt = False,
        gpu_expert_cache: CacheOpt = None,
        draft: DraftOpt = 0,
        accept: AcceptOpt = 0.0,
        backend: BackendOpt = "llama.cpp",
        no_mmap: NoMmapOpt = False,
        tokens: Annotated[int, typer.Option("--tokens", help="Decode tokens to time.")] = 32,
        prompt: Annotated[int, typer.Option("--prompt", help="Prompt tokens to prefill (timed; 0 skips prefill).")] = 512,
        warmup: Annotated[int, typer.Option("--warmup", help="Untimed decode tokens before timing (warm the cache).")] = 2,
        device: Annotated[Optional[str], typer.Option("--device", help="cuda or cpu (default: cuda when torch sees a GPU).")] = None,
        dtype: Annotated[str, typer.Option("--dtype", help="Compute and weight dtype: auto (by the CPU's native formats), bf16, fp16, fp32.")] = "auto",
        sample_layers: Annotated[Optional[int], typer.Option("--sample-layers", help="Run K blocks of each kind and extrapolate to the whole model.")] = None,
        routing: Annotated[str, typer.Option("--routing", help="uniform | zipf:S | trace:FILE | router")] = "uniform",
        weights: Annotated[str, typer.Option("--weights", help="synthetic (seeded) or gguf (dequantize the file's weights).")] = "synthetic",
        seed: Annotated[int, typer.Option("--seed", help="Seed of synthetic weights, prompt and routing.")] = 0,
        expert_source: Annotated[str, typer.Option("--expert-source", help="CPU-tier experts from host RAM (ram) or the GGUF's pages (mmap).")] = "ram",
        mmap_cold: Annotated[bool, typer.Option("--mmap-cold", help="Evict the file's expert pages before each decode token (reads hit the disk).")] = False,
        cpu_experts: Annotated[str, typer.Option("--cpu-experts", help="Decode of CPU-tier experts: compute (on the CPU) or transfer (upload, run on GPU).")] = "compute",
        cache_experts: Annotated[Optional[int], typer.Option("--cache-experts", help="GPU expert cache size in experts (overrides --gpu-expert-cache bytes).")] = None,
        cache_policy: Annotated[str, typer.Option("--cache-policy", help="lru or lfu (frequency-aware).")] = "lru",
        cache_upload_share: Annotated[float, typer.Option("--cache-upload-share", help="Share of cache misses uploaded to the GPU (the rest run on the CPU).")] = 1.0,
        expert_pool: Annotated[Optional[int], typer.Option("--expert-pool", help="Distinct expert buffers per block (memory cap; expert e uses buffer e mod N).")] = None,
        max_ram: Annotated[Optional[str], typer.Option("--max-ram", help="Host RAM bench may use (e.g. 16G).")] = None,
        max_vram: Annotated[Optional[str], typer.Option("--max-vram", help="Device memory bench may use (e.g. 24G; without a GPU, caps the GPU tier).")] = None,
        record_trace: Annotated[Optional[str], typer.Option("--record-trace", help="Write the router's choices to FILE (needs --routing router).")] = None,
        as_json: JsonOpt = False,
        show_progress: ProgressOpt = False,
    ) -> None:
        """Run the bundled offload executor with the model's exact shapes under a placement, and
        measure decode and prefill speed, time and bytes per tier, cache hits and memory."""
        from moeplan.executor.run import import_torch

        plan_doc = None
        if plan is not None:
            from moeplan.planfile import read_plan

            plan_doc = read_plan(plan)  # a bad plan file is refused before the slow imports
        import_torch()  # a clean 'needs torch' error before any module that imports it
        from moeplan.executor.build import ExecOptions
        from moeplan.executor.cache import POLICIES
        from moeplan.executor.routing import parse_routing
        from moeplan.executor.run import RunSpec, resolve_device, run_bench
        from moeplan.executor.weights import parse_dtype
        from moeplan.probes.models import resolve_model
        from moeplan.ui.console import emit_json, progress, stdout_console
        from moeplan.units import parse_size

        for name, val, ok in (("--tokens", tokens, tokens >= 1), ("--prompt", prompt, prompt >= 0),
                              ("--warmup", warmup, warmup >= 0),
                              ("--sample-layers", sample_layers, sample_layers is None or sample_layers >= 1),
                              ("--expert-pool", expert_pool, expert_pool is None or expert_pool >= 1),
                              ("--cache-experts", cache_experts, cache_experts is None or cache_experts >= 0)):
            if not ok:
                raise InputError(f"{name} {val} is out of range", f"give a positive number for {name}")
        if weights not in ("synthetic", "gguf"):
            raise InputError(f"unknown --weights {weights!r}", "use synthetic or gguf")
        if expert_source not in ("ram", "mmap"):
            raise InputError(f"unknown --expert-source {expert_source!r}", "use ram or mmap")
        if cpu_experts not in ("compute", "transfer"):
            raise InputError(f"unknown --cpu-experts {cpu_experts!r}", "use compute or transfer")
        if cache_policy not in POLICIES:
            raise InputError(f"unknown --cache-policy {cache_policy!r}", "use lru or lfu")
        if not 0.0 <= cache_upload_share <= 1.0:
            raise InputError(f"--cache-upload-share {cache_upload_share} is not a share", "give a value between 0 and 1")
        spec_routing = parse_routing(routing)
        dt = parse_dtype(dtype)
        dev = resolve_device(device)
        spec = resolve_model(model, quant=quant, size=size)
        notes: list[str] = []
        if plan is not None:
            # a flag given at its default value cannot be told apart, and changes nothing
            given = [flag for flag, changed in (
                ("--cpu-moe-layers", cpu_moe_layers is not None), ("--cpu-layers", cpu_layers is not None),
                ("--all-cpu-moe", all_cpu_moe), ("--ctx", ctx != "4096"), ("--kv-type", kv_type != "f16"),
                ("--threads", threads is not None), ("--ubatch", ubatch != 512), ("--numa", numa != "none"),
                ("--no-op-offload", no_op_offload), ("--gpu-expert-cache", gpu_expert_cache is not None),
                ("--draft", draft != 0), ("--accept", accept != 0.0), ("--backend", backend != backends.DEFAULT),
                ("--no-mmap", no_mmap)) if changed]
            if given:
                raise InputError(f"give either --plan or placement flags, not both ({given[0]})",
                                 "the plan already says where every layer goes")
            the_plan, notes = read_plan_placement(plan, spec, plan_doc)
            placement = the_plan.placement
            # the plan's figures are for the runtime it was planned for, not for this executor
            estimate = {"decode_tok_s": the_plan.estimate.decode_tok_s, "prefill_tok_s": the_plan.estimate.prefill_tok_s,
                        "runtime": the_plan.placement.backend}
        else:
            placement = resolve_placement(
                spec, backend=backend, cpu_moe_layers=cpu_moe_layers, cpu_layers=cpu_layers,
                all_cpu_moe=all_cpu_moe, ctx=ctx, kv_type=kv_type, threads=threads,
                default_threads=_default_threads(), ubatch=ubatch, numa=numa, no_op_offload=no_op_offload,
                gpu_expert_cache=gpu_expert_cache, draft=draft, accept=accept, no_mmap=no_mmap,
                logical_cpus=os.cpu_count())
            estimate = None
        opt = ExecOptions(
            device=dev, dtype=dt, weights=weights, seed=seed, expert_source=expert_source, mmap_cold=mmap_cold,
            cpu_decode_mode=cpu_experts, cache_experts=cache_experts, cache_policy=cache_policy,
            cache_upload_share=cache_upload_share, expert_pool=expert_pool, sample_layers=sample_layers,
            max_ram_bytes=parse_size(max_ram, "--max-ram") if max_ram else None,
            max_vram_bytes=parse_size(max_vram, "--max-vram") if max_vram else None)
        run = RunSpec(n_prompt=prompt, n_tokens=tokens, n_warmup=warmup, routing=spec_routing,
                      record_trace=os.path.expanduser(record_trace) if record_trace else None)
        with progress("bench", total=None, enabled=not as_json, force=show_progress) as bar:
            def tick(what: str, total: float | None) -> None:
                """A phase starts (total = its steps), or one step of it is done (total None)."""
                if total is None:
                    bar.advance(1)
                else:
                    bar.update(description=f"bench: {what}", total=total, completed=0)

            result = run_bench(spec, placement, opt, run, progress=tick)
        result["notes"] = notes + result["notes"]
        if estimate is not None:
            result["plan_estimate"] = estimate
        if as_json:
            emit_json(result)
        else:
            from moeplan.ui.bench_tables import bench_tables

            con = stdout_console()
            for t in bench_tables(result):
                con.print(t)
            for note in result["notes"]:
                con.print(f"note: {note}", markup=False, highlight=False)
