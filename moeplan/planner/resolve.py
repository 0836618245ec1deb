"""Placement resolution: what the user asked for (a PlacementRequest: the flags of `estimate`
and `bench`, or any caller's) checked and turned into a Placement. Pure: raises InputError with a
hint on a bad value; the ranges are planner/limits.py's, shared with tune and plan files."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from moeplan.errors import InputError
from moeplan.planner.limits import check_ctx, check_placement, check_threads
from moeplan.planner.model.ggml import KV_CACHE_TYPES
from moeplan.planner.options import KT_GPU_EXPERTS_KEY, KT_THRESHOLD_KEY, LLAMA_BUILD_KEY, RTR_KEY, PlanOptions
from moeplan.planner.placement import BACKENDS, NUMA_POLICIES, Placement, layers_from_last, parse_layer_list
from moeplan.units import parse_ctx, parse_size

if TYPE_CHECKING:
    from moeplan.planner.model.spec import ModelSpec


@dataclass(frozen=True)
class PlacementRequest:
    """One placement as asked for, field by field as the flags say it (None: not given).

    `default_threads` is used when `threads` is not given; `logical_cpus` bounds --threads
    (the profile's CPUs for estimate, this machine's for bench)."""

    backend: str = "llama.cpp"
    cpu_moe_layers: int | None = None
    cpu_layers: str | None = None
    all_cpu_moe: bool = False
    kt_gpu_experts: int | None = None
    ngl: int | None = None
    ctx: str = "4096"
    kv_type: str = "f16"
    kv_type_v: str | None = None
    no_flash_attn: bool = False
    threads: int | None = None
    default_threads: int = 1
    logical_cpus: int | None = None
    ubatch: int = 512
    batch: int | None = None
    numa: str = "none"
    numa_nodes: tuple[int, ...] = ()
    no_op_offload: bool = False
    gpu_expert_cache: str | None = None
    draft: int = 0
    accept: float = 0.0
    no_mmap: bool = False
    experts_used: int | None = None
    kt_prefill_threshold: int | None = None
    llama_build: int | None = None
    rtr: bool = False


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
    from moeplan.planner.model import registry

    kv_v = (kv_type_v or kv_k).lower()
    if kv_v not in KV_CACHE_TYPES:
        raise InputError(f"unknown V cache type {kv_type_v!r}", "use one of " + ", ".join(KV_CACHE_TYPES))
    rec = registry.ARCHS.get(model.arch)
    if (model.mla or (rec is not None and rec.kv_layout == "dsv4")) and kv_v != kv_k:
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


def resolve_placement(model: ModelSpec, req: PlacementRequest) -> Placement:
    """Turn the request into a Placement; raises InputError with a hint on bad values."""
    backend = req.backend
    if backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r}", "use one of " + ", ".join(BACKENDS))
    check_backend_runs(model, backend)
    if req.numa not in NUMA_POLICIES:
        raise InputError(f"unknown NUMA policy {req.numa!r}", "use one of " + ", ".join(NUMA_POLICIES))
    kv = req.kv_type.lower()
    if kv not in KV_CACHE_TYPES:
        raise InputError(f"unknown KV cache type {req.kv_type!r}", "use one of " + ", ".join(KV_CACHE_TYPES))
    kv_v = check_kv_type_v(model, kv, req.kv_type_v, flash_attn=not req.no_flash_attn)
    if req.batch is not None and req.batch < 1:
        raise InputError(f"--batch {req.batch} is not a batch size", "give tokens per logical batch, e.g. --batch 4096")
    n_gpu_layers = check_ngl(req.ngl, model, backend)
    cpu, options = _cpu_expert_layers(model, req, n_gpu_layers)
    # ranges of --threads, --ubatch, --accept, --draft: planner/limits.py (check_placement below)
    if req.experts_used is not None and not 1 <= req.experts_used <= model.n_experts:
        raise InputError(f"--experts-used {req.experts_used} is out of range",
                         f"{model.name} has {model.n_experts} experts, {model.n_experts_used} used by default")
    cache_bytes = parse_size(req.gpu_expert_cache, "--gpu-expert-cache") if req.gpu_expert_cache else 0
    options = _backend_options(req, options)
    no_mmap = req.no_mmap or req.rtr  # -rtr sets use_mmap = false (common.cpp)
    n_threads = req.threads or req.default_threads
    n_ctx = check_ctx(parse_ctx(req.ctx), "--ctx", model.name, model.n_ctx_train)
    if req.threads is not None:
        check_threads(req.threads, req.logical_cpus)
    if req.logical_cpus:
        n_threads = min(n_threads, req.logical_cpus)  # a default never exceeds the machine
    from moeplan.planner.cost.machine import default_batch

    p = Placement(
        backend=backend, cpu_moe_layers=tuple(cpu), n_ctx=n_ctx, cache_type_k=kv, cache_type_v=kv_v,
        flash_attn=not req.no_flash_attn, n_ubatch=req.ubatch,
        n_batch=max(req.batch or default_batch(backend), req.ubatch), n_threads=n_threads,
        numa=req.numa, numa_nodes=req.numa_nodes, op_offload=not req.no_op_offload,
        gpu_expert_cache_bytes=cache_bytes, load_mode="no-mmap" if no_mmap else "mmap",
        n_draft=req.draft, draft_accept=req.accept, n_experts_used=req.experts_used or 0, n_gpu_layers=n_gpu_layers,
        options=options,
    )
    check_placement(p, model=model, logical_cpus=req.logical_cpus)
    return p


def _cpu_expert_layers(model: ModelSpec, req: PlacementRequest,
                       n_gpu_layers: int | None) -> tuple[tuple[int, ...], PlanOptions]:
    """The blocks whose experts stay on the CPU (one of --cpu-moe-layers, --cpu-layers,
    --all-cpu-moe, --kt-gpu-experts), and the KTransformers GPU-expert count when given."""
    backend = req.backend
    chosen = [x for x in (req.cpu_moe_layers is not None, req.cpu_layers is not None, req.all_cpu_moe,
                          req.kt_gpu_experts is not None) if x]
    if len(chosen) > 1:
        raise InputError("give only one of --cpu-moe-layers, --cpu-layers, --all-cpu-moe, --kt-gpu-experts",
                         "they all say which experts stay on the CPU")
    moe = model.moe_layer_indices
    options = PlanOptions()
    cpu_moe_layers = req.cpu_moe_layers
    if req.kt_gpu_experts is not None:
        _only_for(backend, KT_GPU_EXPERTS_KEY, "--kt-gpu-experts is KTransformers' --kt-num-gpu-experts")
        if not 0 <= req.kt_gpu_experts <= model.n_experts:
            raise InputError(f"--kt-gpu-experts {req.kt_gpu_experts} is out of range",
                             f"{model.name} has {model.n_experts} experts per MoE layer")
        # G of N experts of every layer hold the bytes of G/N of the layers, and with routing
        # spread over the experts they serve the same share of each token's expert reads
        cpu_moe_layers = len(moe) - round(req.kt_gpu_experts * len(moe) / max(1, model.n_experts))

        options = options.with_(kt_num_gpu_experts=req.kt_gpu_experts)
    if n_gpu_layers is not None:
        from moeplan.planner.memory.devices import layer_split

        cpu_blocks, _ = layer_split(model, Placement(n_gpu_layers=n_gpu_layers))
        # experts to move to the CPU are chosen among the GPU blocks' MoE layers
        moe = tuple(i for i in moe if i not in cpu_blocks)
    if req.all_cpu_moe:
        return moe, options
    if req.cpu_layers is not None:
        try:
            cpu = parse_layer_list(req.cpu_layers)
        except ValueError:
            raise InputError(f"cannot read --cpu-layers {req.cpu_layers!r}",
                             "write block indices like 0-19,40") from None
        all_moe = model.moe_layer_indices
        not_moe = [i for i in cpu if i not in all_moe]
        if not_moe:
            raise InputError(f"block {not_moe[0]} has no routed experts",
                             f"MoE blocks of {model.name}: {all_moe[0]}-{all_moe[-1]} (see moeplan inspect)")
        return tuple(cpu), options
    if cpu_moe_layers is None:
        return (), options
    if cpu_moe_layers < 0 or cpu_moe_layers > len(moe):
        raise InputError(f"--cpu-moe-layers {cpu_moe_layers} is out of range",
                         f"{model.name} has {len(moe)} MoE layers"
                         + (f" on the GPU with --ngl {req.ngl}" if n_gpu_layers is not None else ""))
    from moeplan.planner import backends

    if backends.get(backend).n_cpu_moe_from == "last":
        return tuple(layers_from_last(moe, cpu_moe_layers)), options
    # llama.cpp --n-cpu-moe N covers block indices 0..N-1; to keep N *MoE* layers on the
    # CPU as asked, take the first N MoE blocks (what --n-cpu-moe N+n_dense_lead does)
    return tuple(moe[:cpu_moe_layers]), options


def _backend_options(req: PlacementRequest, options: PlanOptions) -> PlanOptions:
    """`options` with the backend-specific settings (--kt-prefill-threshold, --llama-build,
    --rtr), each only for its backend."""
    if req.kt_prefill_threshold is not None:
        _only_for(req.backend, KT_THRESHOLD_KEY, "--kt-prefill-threshold is a KTransformers setting")
        if req.kt_prefill_threshold < 0:
            raise InputError(f"--kt-prefill-threshold {req.kt_prefill_threshold} is negative",
                             "give a prompt length in tokens, or 0 for no layer-wise GPU prefill")
        options = options.with_(kt_gpu_prefill_token_threshold=req.kt_prefill_threshold)
    if req.llama_build is not None:
        _only_for(req.backend, LLAMA_BUILD_KEY, "--llama-build is a llama.cpp build number")
        if req.llama_build <= 0:
            raise InputError(f"--llama-build {req.llama_build} is not a build number",
                             "give the number `llama-server --version` prints, e.g. 6263")
        options = options.with_(llama_build=req.llama_build)
    if req.rtr:
        _only_for(req.backend, RTR_KEY, "--rtr is ik_llama.cpp's run-time repacking")
        options = options.with_(rtr=True)
    return options
