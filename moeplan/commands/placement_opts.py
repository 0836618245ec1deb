"""Placement flags shared by `estimate` and `bench`, and their resolution to a Placement."""
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

import typer

from moeplan.errors import InputError
from moeplan.planner.limits import check_ctx, check_placement, check_threads
from moeplan.planner.model.ggml import KV_CACHE_TYPES
from moeplan.planner.placement import BACKENDS, NUMA_POLICIES, Placement, layers_from_last, parse_layer_list
from moeplan.units import parse_ctx, parse_size

if TYPE_CHECKING:
    from moeplan.planner.model.spec import ModelSpec

CpuMoeLayersOpt = Annotated[Optional[int], typer.Option(
    "--cpu-moe-layers", help="N MoE layers keep their experts on the CPU, chosen as the backend's own flag would "
                             "(llama.cpp --n-cpu-moe: block indices 0..N-1; ik_llama.cpp -ncmoe: the last N).")]
CpuLayersOpt = Annotated[Optional[str], typer.Option(
    "--cpu-layers", help="Explicit block indices whose experts stay on the CPU: 0-19,40")]
AllCpuMoeOpt = Annotated[bool, typer.Option("--all-cpu-moe", help="All routed experts on the CPU (--cpu-moe).")]
CtxOpt = Annotated[str, typer.Option("--ctx", help="Context size (4096, 32k).")]
KvTypeOpt = Annotated[str, typer.Option("--kv-type", help="KV cache type for K and V: " + ", ".join(KV_CACHE_TYPES))]
KvTypeVOpt = Annotated[Optional[str], typer.Option(
    "--kv-type-v", help="V cache type when it differs from K (llama.cpp -ctk q8_0 -ctv f16); default: --kv-type.")]
NoFlashAttnOpt = Annotated[bool, typer.Option(
    "--no-flash-attn", help="Flash attention off (llama.cpp -fa off): attention runs as KQ and KQV matrix products "
    "with the KQ matrix in the compute buffer; a quantized V cache needs flash attention.")]
ThreadsOpt = Annotated[Optional[int], typer.Option("--threads", help="CPU threads (default: physical cores of the used nodes).")]
UbatchOpt = Annotated[int, typer.Option("--ubatch", help="Physical batch (-ub) for prefill.")]
BatchOpt = Annotated[Optional[int], typer.Option(
    "--batch", help="Logical batch: llama.cpp -b (default 2048); KTransformers' SGLang --chunked-prefill-size, the "
    "chunk its layer-wise GPU prefill uploads every CPU layer's experts for (default 4096, `kt run`'s).")]
NumaOpt = Annotated[str, typer.Option("--numa", help="none | bind | interleave | distribute")]
NoOpOffloadOpt = Annotated[bool, typer.Option("--no-op-offload", help="Keep CPU experts on the CPU in prefill too.")]
CacheOpt = Annotated[Optional[str], typer.Option("--gpu-expert-cache", help="GPU cache of hot experts of CPU layers (e.g. 4G).")]
DraftOpt = Annotated[int, typer.Option("--draft", help="Speculative decoding: drafted tokens per step.")]
AcceptOpt = Annotated[float, typer.Option("--accept", help="Speculative decoding: acceptance rate 0..1.")]
BackendOpt = Annotated[str, typer.Option("--backend", help=" | ".join(BACKENDS))]
CpuOnlyOpt = Annotated[bool, typer.Option("--cpu-only", help="No GPU layers (llama.cpp -ngl 0): every weight on the CPU.")]
ExpertsUsedOpt = Annotated[Optional[int], typer.Option(
    "--experts-used", help="Experts per token if not the model's own (llama.cpp --override-kv, KTransformers).")]
NglOpt = Annotated[Optional[int], typer.Option(
    "--ngl", help="llama.cpp -ngl N, a plain layer split: the last N layers (the output counts as one) on the "
                  "GPU, the blocks before them entirely on the CPU (default: every layer on the GPU).")]
KtThresholdOpt = Annotated[Optional[int], typer.Option(
    "--kt-prefill-threshold", help="KTransformers --kt-gpu-prefill-token-threshold: prompts of N+ tokens prefill on "
    "the GPU layer by layer (0 = never, as KTransformers 0.2/0.3 and SGLang builds without the flag); default: "
    "the crossover moeplan computes.")]
KtGpuExpertsOpt = Annotated[Optional[int], typer.Option(
    "--kt-gpu-experts", help="KTransformers --kt-num-gpu-experts G: G experts of every MoE layer on the GPU, costed as "
    "the whole layers of the same bytes (what `emit` turns a plan's GPU layers into).")]
NoMmapOpt = Annotated[bool, typer.Option("--no-mmap", help="Load weights into anonymous memory (no page cache).")]
RtrOpt = Annotated[bool, typer.Option(
    "--rtr", help="ik_llama.cpp -rtr: the CPU weights are repacked to row-interleaved types at load (mmap off); "
    "prefill then multiplies them with those types' own kernels instead of the converted int8 GEMM.")]
LlamaBuildOpt = Annotated[Optional[int], typer.Option(
    "--llama-build", help="The llama.cpp build you run (`llama-server --version`: version: 6263 ...): kernels that "
    "changed are costed as that build runs them (before b7846 CPU flash-attention decode is not split over "
    "the KV cells); default: a current build.")]


def check_ngl(ngl: int | None, model: ModelSpec, backend: str) -> int | None:
    """--ngl N as Placement.n_gpu_layers: None when not given or when N covers every block and
    the output (llama.cpp clamps it: the same as moeplan's default); InputError when negative
    or for a backend without llama.cpp's layer split."""
    if ngl is None:
        return None
    n_all = len(model.layers)
    if ngl < 0:
        raise InputError(f"--ngl {ngl} is below 0",
                         f"give 0..{n_all + 1} ({n_all} blocks of {model.name} + the output layer)")
    from moeplan.planner import backends

    if backend in backends.NAMES and not backends.get(backend).gguf_runner:
        raise InputError(f"--ngl {ngl}: {backend} has no plain layer split (-ngl)",
                         "use --backend llama.cpp or ik_llama.cpp, or --cpu-moe-layers for experts on the CPU")
    return ngl if ngl <= n_all else None


def check_backend_runs(model: ModelSpec, backend: str) -> None:
    """A one-line error when the backend cannot run the model's architecture at all, or cannot
    load its tensor types (ik_llama.cpp's own types: type ids above mainline ggml's)."""
    from moeplan.planner import backends
    from moeplan.planner.model.ggml import IK_TYPES

    why = backends.unsupported_reason(backend, model.arch)
    if why:
        able = [b for b in backends.NAMES if not backends.unsupported_reason(b, model.arch)]
        raise InputError(f"--backend {backend} cannot run {model.name} ({model.arch}): {why}",
                         "use --backend " + " or ".join(able))
    ik_only = sorted({t.ggml_type for t in model.tensors if t.ggml_type in IK_TYPES})
    if ik_only and backends.behaviour(backend).cpu_kernels != "iqk":
        raise InputError(f"--backend {backend} cannot load {model.name}'s {', '.join(ik_only)} tensors: "
                         "ik_llama.cpp's own types",
                         "use --backend ik_llama.cpp, or a llama-quantize type (--quant Q4_K_M, IQ4_XS, UD-Q4_K_XL ...)")


def check_backend_device(backend: str, n_gpus: int) -> None:
    """A one-line error when a GPU-only backend is asked to run without a GPU (vLLM and SGLang
    are modelled as their CUDA builds, whose --cpu-offload-gb streams the weights to a GPU; the
    planner's priors give their CPU no work of its own)."""
    from moeplan.planner import backends

    if n_gpus == 0 and backend in backends.BACKENDS and backends.get(backend).needs_gpu:
        able = [b for b in backends.NAMES if not backends.get(b).needs_gpu]
        raise InputError(f"--backend {backend} needs a GPU: moeplan models its CUDA build, and this run has none "
                         "(--cpu-only or a profile without GPUs)", "use --backend " + ", ".join(able))


def check_kv_type_v(model: ModelSpec, kv_k: str, kv_type_v: str | None, flash_attn: bool) -> str:
    """The V cache type: --kv-type-v, else the K type. llama.cpp's rules (llama-context.cpp
    llama_init_from_model, vendored 0c1e570 l. 3835-3848): MLA and DeepSeek V4 caches hold V inside
    K, so the types must match; a quantized V cache needs flash attention."""
    kv_v = (kv_type_v or kv_k).lower()
    if kv_v not in KV_CACHE_TYPES:
        raise InputError(f"unknown V cache type {kv_type_v!r}", "use one of " + ", ".join(KV_CACHE_TYPES))
    if (model.mla or model.arch == "deepseek4") and kv_v != kv_k:
        raise InputError(f"{model.name}'s cache holds V inside K (an MLA or DeepSeek V4 cache), so K and V cannot "
                         f"differ (--kv-type {kv_k}, --kv-type-v {kv_v})", "drop --kv-type-v")
    if not flash_attn and kv_v not in ("f16", "bf16", "f32"):
        raise InputError(f"a {kv_v} V cache needs flash attention (llama.cpp refuses it with -fa off)",
                         "drop --no-flash-attn, or give --kv-type-v f16")
    return kv_v


def _only_for(backend: str, option: str, what: str) -> None:
    """A one-line error when a backend's own setting (a plan option its record takes) is given
    for another backend."""
    from moeplan.planner import backends

    if not backends.behaviour(backend).takes(option):
        able = " or ".join(b for b in backends.NAMES if backends.get(b).takes(option))
        raise InputError(what, f"add --backend {able} or drop it")


def resolve_placement(model: ModelSpec, *, backend: str = "llama.cpp", cpu_moe_layers: int | None = None,
                      cpu_layers: str | None = None, all_cpu_moe: bool = False, ctx: str = "4096",
                      kv_type: str = "f16", threads: int | None = None, default_threads: int = 1,
                      ubatch: int = 512, numa: str = "none", numa_nodes: tuple[int, ...] = (),
                      no_op_offload: bool = False, gpu_expert_cache: str | None = None, draft: int = 0,
                      accept: float = 0.0, no_mmap: bool = False, experts_used: int | None = None,
                      logical_cpus: int | None = None, ngl: int | None = None,
                      kt_prefill_threshold: int | None = None, llama_build: int | None = None,
                      rtr: bool = False, batch: int | None = None, kt_gpu_experts: int | None = None,
                      kv_type_v: str | None = None, no_flash_attn: bool = False) -> Placement:
    """Turn the flags into a Placement; raises InputError with a hint on bad values.

    The ranges are planner/limits.py's, shared with tune and with plan files; `logical_cpus`
    bounds --threads (the profile's CPUs for estimate, this machine's for bench)."""
    from moeplan.planner.cost import machine

    if backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r}", "use one of " + ", ".join(BACKENDS))
    check_backend_runs(model, backend)
    if numa not in NUMA_POLICIES:
        raise InputError(f"unknown NUMA policy {numa!r}", "use one of " + ", ".join(NUMA_POLICIES))
    kv = kv_type.lower()
    if kv not in KV_CACHE_TYPES:
        raise InputError(f"unknown KV cache type {kv_type!r}", "use one of " + ", ".join(KV_CACHE_TYPES))
    kv_v = check_kv_type_v(model, kv, kv_type_v, flash_attn=not no_flash_attn)
    chosen = [x for x in (cpu_moe_layers is not None, cpu_layers is not None, all_cpu_moe, kt_gpu_experts is not None)
              if x]
    if len(chosen) > 1:
        raise InputError("give only one of --cpu-moe-layers, --cpu-layers, --all-cpu-moe, --kt-gpu-experts",
                         "they all say which experts stay on the CPU")
    moe = model.moe_layer_indices
    if batch is not None and batch < 1:
        raise InputError(f"--batch {batch} is not a batch size", "give tokens per logical batch, e.g. --batch 4096")
    extra: tuple[tuple[str, str], ...] = ()
    if kt_gpu_experts is not None:
        _only_for(backend, machine.KT_GPU_EXPERTS_KEY, "--kt-gpu-experts is KTransformers' --kt-num-gpu-experts")
        if not 0 <= kt_gpu_experts <= model.n_experts:
            raise InputError(f"--kt-gpu-experts {kt_gpu_experts} is out of range",
                             f"{model.name} has {model.n_experts} experts per MoE layer")
        # G of N experts of every layer hold the bytes of G/N of the layers, and with routing
        # spread over the experts they serve the same share of each token's expert reads
        cpu_moe_layers = len(moe) - round(kt_gpu_experts * len(moe) / max(1, model.n_experts))
        from moeplan.planner.cost.machine import KT_GPU_EXPERTS_KEY

        extra += ((KT_GPU_EXPERTS_KEY, str(kt_gpu_experts)),)
    n_gpu_layers = check_ngl(ngl, model, backend)
    if n_gpu_layers is not None:
        from moeplan.planner.memory.devices import layer_split

        cpu_blocks, _ = layer_split(model, Placement(n_gpu_layers=n_gpu_layers))
        # experts to move to the CPU are chosen among the GPU blocks' MoE layers
        moe = tuple(i for i in moe if i not in cpu_blocks)
    if all_cpu_moe:
        cpu = moe
    elif cpu_layers is not None:
        try:
            cpu = parse_layer_list(cpu_layers)
        except ValueError:
            raise InputError(f"cannot read --cpu-layers {cpu_layers!r}", "write block indices like 0-19,40") from None
        all_moe = model.moe_layer_indices
        not_moe = [i for i in cpu if i not in all_moe]
        if not_moe:
            raise InputError(f"block {not_moe[0]} has no routed experts",
                             f"MoE blocks of {model.name}: {all_moe[0]}-{all_moe[-1]} (see moeplan inspect)")
    elif cpu_moe_layers is not None:
        if cpu_moe_layers < 0 or cpu_moe_layers > len(moe):
            raise InputError(f"--cpu-moe-layers {cpu_moe_layers} is out of range",
                             f"{model.name} has {len(moe)} MoE layers"
                             + (f" on the GPU with --ngl {ngl}" if n_gpu_layers is not None else ""))
        from moeplan.planner import backends

        if backends.get(backend).n_cpu_moe_from == "last":
            cpu = layers_from_last(moe, cpu_moe_layers)
        else:
            # llama.cpp --n-cpu-moe N covers block indices 0..N-1; to keep N *MoE* layers on the
            # CPU as asked, take the first N MoE blocks (what --n-cpu-moe N+n_dense_lead does)
            cpu = moe[:cpu_moe_layers]
    else:
        cpu = ()
    # ranges of --threads, --ubatch, --accept, --draft: planner/limits.py (check_placement below)
    if experts_used is not None and not 1 <= experts_used <= model.n_experts:
        raise InputError(f"--experts-used {experts_used} is out of range",
                         f"{model.name} has {model.n_experts} experts, {model.n_experts_used} used by default")
    cache_bytes = parse_size(gpu_expert_cache, "--gpu-expert-cache") if gpu_expert_cache else 0
    if kt_prefill_threshold is not None:
        _only_for(backend, machine.KT_THRESHOLD_KEY, "--kt-prefill-threshold is a KTransformers setting")
        if kt_prefill_threshold < 0:
            raise InputError(f"--kt-prefill-threshold {kt_prefill_threshold} is negative",
                             "give a prompt length in tokens, or 0 for no layer-wise GPU prefill")
        from moeplan.planner.cost.machine import KT_THRESHOLD_KEY

        extra += ((KT_THRESHOLD_KEY, str(kt_prefill_threshold)),)
    if llama_build is not None:
        _only_for(backend, machine.LLAMA_BUILD_KEY, "--llama-build is a llama.cpp build number")
        if llama_build <= 0:
            raise InputError(f"--llama-build {llama_build} is not a build number",
                             "give the number `llama-server --version` prints, e.g. 6263")
        from moeplan.planner.cost.machine import LLAMA_BUILD_KEY

        extra += ((LLAMA_BUILD_KEY, str(llama_build)),)
    if rtr:
        _only_for(backend, machine.RTR_KEY, "--rtr is ik_llama.cpp's run-time repacking")
        from moeplan.planner.cost.machine import RTR_KEY

        extra += ((RTR_KEY, "1"),)
        no_mmap = True  # -rtr sets use_mmap = false (common.cpp)
    n_threads = threads or default_threads
    n_ctx = check_ctx(parse_ctx(ctx), "--ctx", model.name, model.n_ctx_train)
    if threads is not None:
        check_threads(threads, logical_cpus)
    if logical_cpus:
        n_threads = min(n_threads, logical_cpus)  # a default never exceeds the machine
    from moeplan.planner.cost.machine import default_batch

    p = Placement(
        backend=backend, cpu_moe_layers=tuple(cpu), n_ctx=n_ctx, cache_type_k=kv, cache_type_v=kv_v,
        flash_attn=not no_flash_attn, n_ubatch=ubatch, n_batch=max(batch or default_batch(backend), ubatch), n_threads=n_threads,
        numa=numa, numa_nodes=numa_nodes, op_offload=not no_op_offload,
        gpu_expert_cache_bytes=cache_bytes, load_mode="no-mmap" if no_mmap else "mmap",
        n_draft=draft, draft_accept=accept, n_experts_used=experts_used or 0, n_gpu_layers=n_gpu_layers,
        extra=extra,
    )
    check_placement(p, model=model, logical_cpus=logical_cpus)
    return p

