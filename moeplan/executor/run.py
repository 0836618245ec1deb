"""One bench run: build the executor for a Placement, prefill a prompt, decode tokens, measure.

Order of a run: check the memory plan against free memory (nothing allocated yet); build
the blocks that run; one untimed step so lazy initialisation is not timed; prefill `n_prompt`
tokens in ubatches of the placement's n_ubatch (timed, threads = n_threads_batch); decode
`n_warmup` untimed tokens (they warm the GPU expert cache, as a running server's is warm);
decode `n_tokens` timed tokens, each fed the argmax of the previous logits (threads =
n_threads). Per-token times are the meter's (meter.py); with layer sampling every figure is
scaled to the whole model (sampling.py) and the output says so.
"""
from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from moeplan.errors import InputError, ProbeError, RunnerError
from moeplan.executor.build import ExecOptions, available_bytes, check_fits, plan_build, read_llc_bytes
from moeplan.executor.layout import model_layout
from moeplan.executor.routing import RoutingSpec, make_routing, write_trace
from moeplan.executor.sampling import extrapolate
from moeplan.planner import backends
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement

TIME_TIERS = ("gpu", "cpu", "mmap", "transfer")
BYTE_TIERS = ("gpu", "gpu_cache", "kv", "cpu", "mmap", "transfer", "activations")


@dataclass(frozen=True)
class RunSpec:
    n_prompt: int = 512
    n_tokens: int = 32
    n_warmup: int = 2
    routing: RoutingSpec = RoutingSpec("uniform")
    record_trace: str | None = None


def import_torch():
    try:
        import torch
    except ImportError:
        raise RunnerError("the bundled executor needs torch, which is not installed",
                          "pip install 'moeplan[executor]' (a CPU build is enough without a GPU)") from None
    return torch


def resolve_device(name: str | None) -> str:
    torch = import_torch()
    if name is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    name = name.lower()
    if name not in ("cuda", "cpu"):
        raise InputError(f"unknown device {name!r}", "use --device cuda or --device cpu")
    if name == "cuda" and not torch.cuda.is_available():
        why = "this torch build has no CUDA support" if torch.version.cuda is None else "torch sees no CUDA GPU"
        raise ProbeError(f"--device cuda: {why}", "run with --device cpu (the GPU tier then runs on the CPU)")
    return name


def _busy_note(load: float, placement: Placement) -> str:
    """A warning when other processes already keep the cores busy that the run's threads need:
    every parallel op then waits for a descheduled thread and times inflate many-fold."""
    n_cpu = len(os.sched_getaffinity(0))
    threads = max(placement.n_threads, placement.threads_batch)
    if load > n_cpu - threads + 1.0:  # + 1: this process itself may be in the average
        return (f"the load average was {load:.1f} on {n_cpu} CPUs before the run, which uses {threads} "
                f"thread{'s' if threads > 1 else ''}: "
                "other processes compete for the cores, so times are inflated (use fewer --threads or a quiet machine)")
    return ""


def _prompt_tokens(n: int, n_vocab: int, seed: int) -> list[int]:
    return np.random.default_rng(seed + 101).integers(0, max(1, n_vocab), size=n).tolist()


@dataclass
class Built:
    """An executor ready to run: the model, its tier context, meter, routing and build plan."""

    model: Any
    ctx: Any
    meter: Any
    routing: Any
    plan: Any
    layout: Any
    mmap_stores: list

    def close(self) -> None:
        for s in self.mmap_stores:
            s.close()


def build_executor(model: ModelSpec, placement: Placement, opt: ExecOptions, n_positions: int,
                   routing_spec: RoutingSpec, record: bool = False,
                   progress: Callable[[str, float | None], Any] | None = None,
                   free_bytes: tuple[int, int] | None = None, clock: Callable[[], float] | None = None) -> Built:
    """Plan, check memory (before allocating), then allocate and fill every tensor.
    `free_bytes` = (host, device) overrides the measured free memory and `clock` the meter's
    wall clock (seams for tests)."""
    torch = import_torch()
    from moeplan.executor.attention import CacheGeometry
    from moeplan.executor.cache import ExpertCache
    from moeplan.executor.experts import DeviceSlots, MoeRunner, TierContext
    from moeplan.executor.meter import Meter
    from moeplan.executor.model import Block, ExecModel
    from moeplan.executor.stores import ExpertBiases, MmapExperts, TensorExperts
    from moeplan.executor.weights import DTYPES, GgufWeights, SyntheticWeights

    tick: Callable[[str, float | None], Any] = progress or (lambda what, n: None)
    if opt.weights == "gguf" and model.source != "gguf":
        raise InputError("--weights gguf needs a GGUF model file", "profiles have no weights; use --weights synthetic")
    if opt.expert_source == "mmap" and model.source != "gguf":
        raise InputError("--expert-source mmap reads experts from the model's GGUF file",
                         "give a GGUF file as MODEL, or use --expert-source ram")
    layout = model_layout(model)
    host_free, dev_free = free_bytes or available_bytes(opt)
    plan = plan_build(layout, placement, opt, n_positions, host_free, dev_free, read_llc_bytes())
    check_fits(plan, opt, host_free, dev_free)
    if opt.weights == "gguf" and any(plan.pool[lay.index] < lay.ffn.routed.n_expert
                                     for lay in plan.layers if lay.index in plan.pool):
        raise RunnerError("real weights need every expert in memory, but the expert pool is smaller",
                          "use --weights synthetic, or a model that fits")

    device = torch.device(opt.device)
    dtype = DTYPES[opt.dtype]
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    meter = Meter(torch.cuda.synchronize if cuda else (lambda: None), clock or time.perf_counter)
    source = GgufWeights(model.shards or (model.path,), dtype) if opt.weights == "gguf" else \
        SyntheticWeights(opt.seed, dtype)
    moe_run = [lay for lay in plan.layers if lay.ffn.kind == "moe"]
    routing = make_routing(routing_spec, model.n_experts, model.n_experts_used, opt.seed, record=record)
    routing.prepare(tuple(lay.index for lay in moe_run), n_positions)

    ctx = TierContext(device=device, meter=meter, cpu_decode_mode=opt.cpu_decode_mode,
                      op_offload=placement.op_offload,
                      offload_rule=backends.get(placement.backend).op_offload_rule,
                      grouped=cuda if opt.grouped_experts is None else opt.grouped_experts)
    cpu_moe = [lay for lay in moe_run if plan.tier_of[lay.index] == "cpu"]
    if cpu_moe:
        e0 = cpu_moe[0].ffn.routed
        if plan.cache_slots:
            ctx.cache = ExpertCache(plan.cache_slots, opt.cache_policy, opt.cache_upload_share)
            ctx.cache_slots = DeviceSlots(plan.cache_slots, e0.n_ff, e0.n_embd, device, dtype, cuda)
        if plan.staging_slots:
            ctx.staging = DeviceSlots(plan.staging_slots, e0.n_ff, e0.n_embd, device, dtype, cuda)
    geo = CacheGeometry(placement.n_ctx, placement.n_ubatch, placement.cache_type_k, placement.cache_type_v)
    host = torch.device("cpu")
    blocks = []
    mmap_stores: list = []
    tick("build", len(plan.layers))
    try:
        for lay in plan.layers:
            moe = None
            if lay.ffn.kind == "moe":
                e = lay.ffn.routed
                tier = plan.tier_of[lay.index]
                dev_b = ExpertBiases(e, source, device, dtype)
                store: TensorExperts | MmapExperts
                if tier == "gpu":
                    store = TensorExperts(e, source, device, dtype, plan.pool[lay.index], False, dev_b)
                elif opt.expert_source == "mmap":
                    store = MmapExperts(e, model.shards or (model.path,), dtype, opt.weights == "gguf", dev_b.to(host))
                    mmap_stores.append(store)
                else:
                    store = TensorExperts(e, source, host, dtype, plan.pool[lay.index], cuda, dev_b.to(host))
                moe = MoeRunner(lay.index, e, lay.ffn.gating, tier, store, dev_b, ctx)
            blocks.append(Block(lay, source, ctx, geo, dtype, routing, moe))
            tick("build", None)
        exec_model = ExecModel(layout, blocks, source, ctx)
    except BaseException:
        for s in mmap_stores:
            s.close()
        raise
    source.done()
    return Built(exec_model, ctx, meter, routing, plan, layout, mmap_stores)


def run_bench(model: ModelSpec, placement: Placement, opt: ExecOptions, spec: RunSpec,
              progress: Callable[[str, float | None], Any] | None = None,
              free_bytes: tuple[int, int] | None = None, clock: Callable[[], float] | None = None) -> dict:
    """Run the executor; returns the result dict (`moeplan bench --json` prints it)."""
    torch = import_torch()
    tick: Callable[[str, float | None], Any] = progress or (lambda what, n: None)
    n_positions = spec.n_prompt + spec.n_warmup + spec.n_tokens
    load_before = os.getloadavg()[0]
    torch.set_num_threads(max(1, placement.threads_batch))
    built = build_executor(model, placement, opt, n_positions, spec.routing, spec.record_trace is not None,
                           progress, free_bytes, clock)
    plan, layout, routing, meter, ctx = built.plan, built.layout, built.routing, built.meter, built.ctx
    cuda = opt.device == "cuda"
    try:
        result = _measure(torch, built.model, ctx, meter, placement, opt, spec, built.mmap_stores, tick, layout)
    finally:
        built.close()
    if spec.record_trace:
        write_trace(spec.record_trace, routing.recorded_trace(model.name))
    per_tok = _summarise(meter, plan, spec)
    peak_vram = int(torch.cuda.max_memory_allocated()) if cuda else None
    notes = list(layout.notes) + list(plan.notes) + list(routing.notes) + result["notes"] + list(ctx.notes)
    busy = _busy_note(load_before, placement)
    if busy:
        notes.append(busy)
    if not cuda:
        notes.append("no GPU in this run: the GPU tier ran on the CPU through the same code path, so "
                     "'gpu' times are CPU times and transfers are host memory copies")
    if plan.sampled:
        notes.append(f"sampled: {len(plan.layers)} of {len(layout.layers)} blocks ran; times and bytes are "
                     "scaled to the whole model (see classes)")
    if placement.n_draft:
        notes.append("speculative decoding (--draft) is not executed; figures are plain decoding")
    if placement.cache_type_k not in ("f16", "bf16", "f32") or placement.cache_type_v not in ("f16", "bf16", "f32"):
        notes.append(f"KV cache kept in {opt.dtype}; the {placement.cache_type_k}/{placement.cache_type_v} "
                     "types count only in the model-byte figures")
    if placement.numa != "none":
        notes.append("NUMA policy is not applied by bench itself: start it under numactl to bind")
    return {
        "model": model.summary_dict(),
        "placement": placement.to_dict(),
        "executor": {
            "device": opt.device,
            "device_name": torch.cuda.get_device_name() if cuda else "cpu",
            "torch_version": torch.__version__,
            "dtype": opt.dtype, "weights": opt.weights, "seed": opt.seed,
            "expert_source": opt.expert_source, "mmap_cold": opt.mmap_cold,
            "cpu_decode_mode": opt.cpu_decode_mode,
            "cache_slots": plan.cache_slots, "cache_policy": opt.cache_policy,
            "cache_upload_share": opt.cache_upload_share,
            "staging_slots": plan.staging_slots,
            "expert_pool": {str(k): v for k, v in plan.pool.items()},
            "routing": spec.routing.label,
            "threads": placement.n_threads, "threads_batch": placement.threads_batch,
            "n_prompt": spec.n_prompt, "n_tokens": spec.n_tokens, "n_warmup": spec.n_warmup,
            "n_ubatch": placement.n_ubatch,
        },
        **per_tok,
        "cache": result["cache"],
        "cache_hit_rate": result["cache"]["hit_rate"] if result["cache"] else None,
        "peak_vram_bytes": peak_vram,
        "peak_vram_scope": ("sampled blocks" if plan.sampled else "whole model") if cuda else None,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "planned_device_bytes": plan.total("device"),
        "planned_host_bytes": plan.total("host"),
        "memory_plan": [{"name": i.name, "where": i.device, "bytes": i.n_bytes} for i in plan.items],
        "sampled_layers": opt.sample_layers,
        "extrapolated": plan.sampled,
        "blocks_run": [lay.index for lay in plan.layers],
        "classes": {k: {"n_blocks": len(v), "run": plan.sample[k]} for k, v in plan.classes.items()},
        "notes": notes,
    }


def _measure(torch, model, ctx, meter, placement, opt, spec, mmap_stores, tick, layout) -> dict:
    from moeplan.executor.cache import ExpertCache

    notes: list[str] = []
    # untimed steps of both shapes: oneDNN/cuBLAS pick kernels and pages are touched on first use
    meter.phase = "warmup"
    u = max(1, placement.n_ubatch)
    prompt = _prompt_tokens(spec.n_prompt, layout.n_vocab, opt.seed)
    if spec.n_prompt:
        torch.set_num_threads(max(1, placement.threads_batch))
        with meter.step(1):
            model.forward(prompt[:u], 0, decode=False)
        model.reset()
    torch.set_num_threads(max(1, placement.n_threads))
    with meter.step(1):
        model.forward([0], 0, decode=True)
    model.reset()
    if ctx.cache is not None:
        ctx.cache = ExpertCache(ctx.cache.n_slots, ctx.cache.policy, ctx.cache.upload_share)
    pos = 0
    token = 0
    if spec.n_prompt:
        torch.set_num_threads(max(1, placement.threads_batch))
        meter.phase = "prefill"
        tick("prefill", -(-spec.n_prompt // u))
        for start in range(0, spec.n_prompt, u):
            chunk = prompt[start:start + u]
            with meter.step(len(chunk)):
                logits = model.forward(chunk, pos, decode=False)
                token = int(logits[-1].argmax())
            pos += len(chunk)
            tick("prefill", None)
    torch.set_num_threads(max(1, placement.n_threads))
    meter.phase = "warmup"
    for _ in range(spec.n_warmup):
        with meter.step(1):
            token = int(model.forward([token], pos, decode=True)[-1].argmax())
        pos += 1
    if ctx.cache is not None:
        ctx.cache.reset_stats()
    meter.phase = "decode"
    tick("decode", spec.n_tokens)
    for _ in range(spec.n_tokens):
        if opt.mmap_cold:
            for s in mmap_stores:
                s.evict()
        with meter.step(1):
            token = int(model.forward([token], pos, decode=True)[-1].argmax())
        pos += 1
        tick("decode", None)
    if opt.mmap_cold and not mmap_stores:
        notes.append("--mmap-cold has no effect without --expert-source mmap and CPU-resident blocks")
    return {"cache": ctx.cache.stats.to_dict() if ctx.cache is not None else None, "notes": notes}


def _tiers(d: dict[str, float], keys: tuple[str, ...]) -> dict[str, float]:
    return {k: d.get(k, 0.0) for k in keys}


def _summarise(meter, plan, spec: RunSpec) -> dict:
    f = plan.factors
    out: dict[str, Any] = {}
    dec_t = extrapolate(meter.per_block("decode", meter.seconds), f)
    dec_b = extrapolate(meter.per_block("decode", meter.bytes_exec), f)
    dec_m = extrapolate(meter.per_block("decode", meter.bytes_model), f)
    n = max(1, meter.tokens["decode"])
    total = sum(dec_t.values())
    out["decode_tok_s"] = n / total if total > 0 else None
    out["decode_s_per_token"] = total / n
    out["decode_s_per_token_by_tier"] = {k: v / n for k, v in _tiers(dec_t, TIME_TIERS).items()}
    out["bytes_per_token_by_tier"] = {k: int(v / n) for k, v in _tiers(dec_b, BYTE_TIERS).items()}
    out["model_bytes_per_token_by_tier"] = {k: int(v / n) for k, v in _tiers(dec_m, BYTE_TIERS).items()}
    out["decode_wall_s"] = meter.wall["decode"]
    if spec.n_prompt:
        pre_t = extrapolate(meter.per_block("prefill", meter.seconds), f)
        pre_b = extrapolate(meter.per_block("prefill", meter.bytes_exec), f)
        pre_m = extrapolate(meter.per_block("prefill", meter.bytes_model), f)
        np_ = max(1, meter.tokens["prefill"])
        nu = max(1, meter.steps["prefill"])
        ptot = sum(pre_t.values())
        out["prefill_tok_s"] = np_ / ptot if ptot > 0 else None
        out["prefill_s_per_token_by_tier"] = {k: v / np_ for k, v in _tiers(pre_t, TIME_TIERS).items()}
        out["prefill_bytes_per_ubatch_by_tier"] = {k: int(v / nu) for k, v in _tiers(pre_b, BYTE_TIERS).items()}
        out["prefill_model_bytes_per_ubatch_by_tier"] = {k: int(v / nu) for k, v in _tiers(pre_m, BYTE_TIERS).items()}
        out["prefill_wall_s"] = meter.wall["prefill"]
        out["prefill_ubatches"] = nu
    else:
        out["prefill_tok_s"] = None
        out["prefill_s_per_token_by_tier"] = None
        out["prefill_bytes_per_ubatch_by_tier"] = None
        out["prefill_model_bytes_per_ubatch_by_tier"] = None
        out["prefill_wall_s"] = 0.0
        out["prefill_ubatches"] = 0
    return out
