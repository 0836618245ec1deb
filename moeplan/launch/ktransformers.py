"""KTransformers: kt-kernel CPU experts inside SGLang (`python -m sglang.launch_server --kt-*`).

Flags target KT_RELEASE: the kt-kernel integration that SGLang 0.5.23 carries itself (its
launch_server --help lists the --kt-* flags, sglang/srt/arg_groups/fields/exec_.py; recorded in
tests/data/help/sglang-0.5.23), used with kt-kernel 0.7.2 (PyPI) for the CPU kernels:
  --kt-method          CPU expert kernel: AMXINT4 / AMXINT8 (Intel AMX, weights converted with
                       kt-kernel's conversion script) or LLAMAFILE (GGUF weights)
  --kt-weight-path     folder of the CPU expert weights (converted safetensors, or the GGUF folder)
  --kt-cpuinfer        CPU threads for the experts: the plan's threads (physical cores)
  --kt-threadpool-count  one worker pool per NUMA node under a per-node plan (numa 'distribute',
                       or 'bind' to several nodes), else 1 (cost/machine.py kt_pool_count: kt-kernel
                       maps pool i to node i and splits every expert between the pools)
  --kt-gpu-prefill-token-threshold  prompts of at least this many tokens prefill on the GPU layer
                       by layer (the plan's threshold, cost/machine.py); emitted only when the
                       target lists it: SGLang 0.5.23's launch_server --help does not (it lives in
                       the kvcache-ai SGLang build that `kt run` launches), and without it the
                       threshold stays at KTConfig's 0: every prompt's CPU experts run on the CPU
  --kt-num-gpu-experts   experts of *every* MoE layer kept on the GPU (see gpu_experts_per_layer)
  --kt-max-deferred-experts-per-token  experts whose CPU work may be deferred to overlap the
                       next layer (changes numerics slightly; the plan's extra sets it, default 0)
The GPU part (attention, shared experts, the GPU experts) is loaded by SGLang from --model-path,
a Hugging Face checkpoint. Memory fraction and token limits are SGLang's (sglang.py).
With --bin (the python that has sglang + kt-kernel) its `--help` decides.
"""
from __future__ import annotations

import math
import os

from moeplan.errors import InfeasibleError, InputError
from moeplan.launch.common import (
    GIB,
    Command,
    EmitContext,
    Launch,
    Script,
    ShellVar,
    refuse_experts_override,
    require_flags,
)
from moeplan.launch.flags import FlagSet, target_text
from moeplan.launch.numa import numa_prefix
from moeplan.launch.sglang import LAUNCHER, NO_SGLANG, PORT, bench_command, kv_dtype, limit_parts
from moeplan.launch.sglang import release_flags as sg_flags
from moeplan.launch.vllm import model_arg
from moeplan.planner.cost.machine import kt_pool_count

THRESHOLD_FLAG = "--kt-gpu-prefill-token-threshold"
KT_RELEASE = "kt-kernel 0.7.2 with SGLang 0.5.23 (the --kt-* flags of its launch_server --help)"
MAX_MEM_FRACTION = 0.95
KT_FLAGS = {"--kt-method": "KT_METHOD", "--kt-weight-path": "KT_WEIGHT_PATH", "--kt-cpuinfer": "KT_CPUINFER",
            "--kt-threadpool-count": "KT_THREADPOOL_COUNT", "--kt-num-gpu-experts": "KT_NUM_GPU_EXPERTS",
            "--kt-max-deferred-experts-per-token": "KT_MAX_DEFERRED_EXPERTS_PER_TOKEN"}


def release_flags() -> dict[str, FlagSet]:
    return sg_flags(KT_FLAGS, KT_RELEASE)


def gpu_experts_per_layer(ctx: EmitContext) -> tuple[int, int]:
    """(experts per MoE layer on the GPU, experts in all).

    KTransformers keeps the same number G of experts of every MoE layer on the GPU, where the
    plan keeps whole layers. G spends the same bytes:
      G = floor((sum_{GPU MoE layers} expert bytes + gpu_expert_cache_bytes) / (n_moe * S_exp))
    """
    m, p = ctx.model, ctx.placement
    moe = m.moe_layers
    given = p.options.kt_num_gpu_experts  # estimate --kt-gpu-experts G: G as given
    if given is not None:
        return given, given * len(moe)
    s_exp = m.expert_bytes_per_expert
    if not moe or not s_exp:
        return 0, 0
    cpu = set(p.cpu_moe_layers)
    gpu_bytes = sum(layer.expert_bytes for layer in moe if layer.index not in cpu) + p.gpu_expert_cache_bytes
    g = min(m.n_experts, int(gpu_bytes // (len(moe) * s_exp)))
    return g, g * len(moe)


def mem_fraction(ctx: EmitContext) -> float | None:
    """The plan's predicted VRAM as SGLang's --mem-fraction-static, rounded up to 0.01."""
    if not ctx.gpu_vram_bytes:
        return None
    frac = math.ceil(ctx.plan.estimate.vram_bytes / ctx.gpu_vram_bytes * 100) / 100
    if frac > MAX_MEM_FRACTION:
        raise InfeasibleError(
            f"the plan needs {ctx.plan.estimate.vram_bytes / GIB:.1f} GiB of a {ctx.gpu_vram_bytes / GIB:.1f} GiB GPU "
            f"(fraction {frac:.2f} > {MAX_MEM_FRACTION})",
            "re-plan with more experts on the CPU or a smaller context")
    return frac


# kt-kernel's native-precision methods (doc/en/kt-kernel/Native-Precision-Tutorial.md: BF16, FP8
# blockwise, RAWINT4 "same INT4 weights for CPU and GPU"; MXFP4 for DeepSeek-V4's experts) by the
# checkpoint's expert dtype (tests/data/help/kt-kernel-0.7.2/inference-methods.txt lists them)
NATIVE_KT_METHOD = {"BF16": "BF16", "F8_E4M3": "FP8", "INT4": "RAWINT4", "MXFP4": "MXFP4"}


def _native_method(model) -> str | None:
    """The --kt-method that reads a plan's native checkpoint experts as they are, if any."""
    if not model.quant.startswith(("native", "FP8")) or not model.moe_layers:
        return None
    types = model.moe_layers[0].expert_types
    return NATIVE_KT_METHOD.get(types[0]) if len(types) == 1 else None


def weights(ctx: EmitContext) -> tuple[str, str, tuple[tuple[str, str], ...], str]:
    """(--kt-method, --kt-weight-path, required variables, note)."""
    method = ctx.placement.options.kt_method
    path = ctx.placement.options.kt_weight_path
    if ctx.model.source == "gguf":
        method = method or "LLAMAFILE"
        first = ctx.model.shards[0] if ctx.model.shards else ctx.model.path
        path = path or os.path.dirname(os.path.abspath(first))
        return method, path, (), f"CPU experts read by kt-kernel's {method} kernel from the GGUF folder"
    native = _native_method(ctx.model) if not method else None
    if native:
        # kt-kernel reads a native checkpoint's experts from the checkpoint itself: the weight path
        # is the --model-path folder (KTransformers doc/en/kt-kernel/Native-Precision-Tutorial.md)
        model, requires = model_arg(ctx)
        return native, path or model, requires, (
            f"--kt-method {native}: kt-kernel runs the checkpoint's own {ctx.model.moe_layers[0].expert_types[0]} "
            "experts (AVX-512 CPUs), the same folder as --model-path")
    method = method or "AMXINT4"
    note = (f"--kt-method {method} needs an Intel CPU with AMX (Sapphire Rapids or newer) and expert "
            "weights converted by kt-kernel's conversion script; on other CPUs use GGUF weights with LLAMAFILE")
    if path:
        return method, path, (), note
    return method, ShellVar("KT_WEIGHT_PATH"), (
        ("KT_WEIGHT_PATH", f"the folder of {ctx.model.name}'s CPU expert weights converted for {method}"),), note


def emit(ctx: EmitContext) -> Launch:
    refuse_experts_override(ctx, "KTransformers")
    p, m = ctx.placement, ctx.model
    if ctx.n_nodes > 1:
        raise InputError("KTransformers launch files are for one machine", "--nodes applies to vllm or sglang")
    model, requires = model_arg(ctx)
    method, wpath, wrequires, wnote = weights(ctx)
    g, g_total = gpu_experts_per_layer(ctx)
    if p.numa == "distribute" and not p.numa_nodes:
        raise InputError("the plan asks for per-node kt-kernel pools but lists no NUMA nodes",
                         "re-plan with `moeplan tune --backend ktransformers` so the plan names the nodes")
    n_pools = kt_pool_count(p.numa, len(p.numa_nodes))
    notes = [wnote,
             f"--kt-num-gpu-experts {g}: KTransformers keeps {g} experts of each of the {len(m.moe_layers)} MoE "
             f"layers on the GPU ({g_total} in all), the same expert bytes as the plan's GPU layers"
             + (" and expert cache" if p.gpu_expert_cache_bytes else "")
             + f"; counted in {m.quant} bytes, so if the checkpoint stores experts in a wider type, lower it"]
    if n_pools > 1 and tuple(p.numa_nodes) != tuple(range(n_pools)):
        notes.append(f"kt-kernel puts its {n_pools} pools on NUMA nodes 0-{n_pools - 1} (experts_base.py "
                     f"subpool_numa_map), not the plan's nodes {','.join(map(str, p.numa_nodes))}")
    if n_pools == 1 and p.numa == "bind" and p.numa_nodes and p.numa_nodes[0] != 0:
        notes.append(f"kt-kernel's single pool pins its threads and memory to NUMA node 0 (worker_pool.cpp), "
                     f"the plan binds node {p.numa_nodes[0]}: check the server log for hwloc binding errors")
    elif n_pools == 1 and p.numa != "bind":
        notes.append("one kt-kernel worker pool: its threads and pages are bound to NUMA node 0 (worker_pool.cpp); "
                     "on a multi-socket machine re-plan with --numa distribute for one pool per node")
    threshold = p.options.kt_gpu_prefill_token_threshold
    threshold_part: tuple[tuple[str, ...], ...] = ()
    if threshold is not None and p.cpu_moe_layers:
        if ctx.flags["server"].has(THRESHOLD_FLAG):
            threshold_part = ((THRESHOLD_FLAG, str(threshold)),)
        elif threshold:
            notes.append(f"{target_text(ctx.flags['server'], KT_RELEASE, NO_SGLANG)} has no {THRESHOLD_FLAG}: "
                         f"it prefills every prompt's CPU experts on the CPU (KTConfig's threshold 0); the plan's "
                         f"prefill figure for prompts of {threshold}+ tokens assumes the layer-wise GPU prefill of "
                         f"the kvcache-ai SGLang build (`kt run`), which takes {THRESHOLD_FLAG} {threshold}")
    kv_note = kv_dtype(p.cache_type_k)[1]
    if kv_note:
        notes.append(kv_note)
    parts: list[tuple[str, ...]] = [
        (ctx.programs["server"], *LAUNCHER), ("--model-path", model),
        ("--kt-method", method), ("--kt-weight-path", wpath), ("--kt-cpuinfer", str(p.n_threads)),
        ("--kt-threadpool-count", str(n_pools)), ("--kt-num-gpu-experts", str(g)),
        ("--kt-max-deferred-experts-per-token", ctx.placement.options.kt_max_deferred_experts_per_token or "0"),
        *threshold_part,
    ]
    if p.n_gpus > 1:
        parts.append(("--tp-size", str(p.n_gpus)))
    parts += limit_parts(ctx)
    frac = mem_fraction(ctx)
    if frac is not None:
        parts.append(("--mem-fraction-static", f"{frac:.2f}"))
    else:
        notes.append("--mem-fraction-static left to SGLang: the plan does not record the GPU's memory "
                     "(pass --gpu-vram to set it from the plan's VRAM figure)")
    parts += [("--trust-remote-code",), ("--served-model-name", m.name), ("--port", str(PORT))]
    server = Command(parts=tuple(parts), prefix=numa_prefix(p) if p.numa == "bind" else ())
    bench = bench_command(ctx)
    require_flags(server, ctx.flags["server"], "KTransformers", skip=3)
    require_flags(bench, ctx.flags["bench"], "KTransformers", skip=3)
    scripts = (Script("launch.sh", "SGLang server with kt-kernel CPU experts", server, requires=requires + wrequires),
               Script("bench.sh", "sglang.bench_serving against the running server", bench, exec_=False))
    return Launch(backend="ktransformers", target=target_text(ctx.flags["server"], KT_RELEASE, NO_SGLANG),
                  scripts=scripts, notes=tuple(notes) + ctx.notes,
                  placement_text=f"{g} of {m.n_experts} routed experts of every MoE layer on the GPU, the rest "
                                 f"on the CPU (kt-kernel, {p.n_threads} threads)")
