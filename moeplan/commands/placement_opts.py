"""Placement flags shared by `estimate` and `bench`, and their resolution to a Placement."""
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

import typer

from moeplan.errors import InputError
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
ThreadsOpt = Annotated[Optional[int], typer.Option("--threads", help="CPU threads (default: physical cores of the used nodes).")]
UbatchOpt = Annotated[int, typer.Option("--ubatch", help="Physical batch (-ub) for prefill.")]
NumaOpt = Annotated[str, typer.Option("--numa", help="none | bind | interleave | distribute")]
NoOpOffloadOpt = Annotated[bool, typer.Option("--no-op-offload", help="Keep CPU experts on the CPU in prefill too.")]
CacheOpt = Annotated[Optional[str], typer.Option("--gpu-expert-cache", help="GPU cache of hot experts of CPU layers (e.g. 4G).")]
DraftOpt = Annotated[int, typer.Option("--draft", help="Speculative decoding: drafted tokens per step.")]
AcceptOpt = Annotated[float, typer.Option("--accept", help="Speculative decoding: acceptance rate 0..1.")]
BackendOpt = Annotated[str, typer.Option("--backend", help="llama.cpp | ik_llama.cpp | ktransformers | vllm")]
CpuOnlyOpt = Annotated[bool, typer.Option("--cpu-only", help="No GPU layers (llama.cpp -ngl 0): every weight on the CPU.")]
ExpertsUsedOpt = Annotated[Optional[int], typer.Option(
    "--experts-used", help="Experts per token if not the model's own (llama.cpp --override-kv, KTransformers).")]
NoMmapOpt = Annotated[bool, typer.Option("--no-mmap", help="Load weights into anonymous memory (no page cache).")]


def resolve_placement(model: ModelSpec, *, backend: str = "llama.cpp", cpu_moe_layers: int | None = None,
                      cpu_layers: str | None = None, all_cpu_moe: bool = False, ctx: str = "4096",
                      kv_type: str = "f16", threads: int | None = None, default_threads: int = 1,
                      ubatch: int = 512, numa: str = "none", numa_nodes: tuple[int, ...] = (),
                      no_op_offload: bool = False, gpu_expert_cache: str | None = None, draft: int = 0,
                      accept: float = 0.0, no_mmap: bool = False, experts_used: int | None = None) -> Placement:
    """Turn the flags into a Placement; raises InputError with a hint on bad values."""
    if backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r}", "use one of " + ", ".join(BACKENDS))
    if numa not in NUMA_POLICIES:
        raise InputError(f"unknown NUMA policy {numa!r}", "use one of " + ", ".join(NUMA_POLICIES))
    kv = kv_type.lower()
    if kv not in KV_CACHE_TYPES:
        raise InputError(f"unknown KV cache type {kv_type!r}", "use one of " + ", ".join(KV_CACHE_TYPES))
    chosen = [x for x in (cpu_moe_layers is not None, cpu_layers is not None, all_cpu_moe) if x]
    if len(chosen) > 1:
        raise InputError("give only one of --cpu-moe-layers, --cpu-layers, --all-cpu-moe",
                         "they all say which layers keep their experts on the CPU")
    moe = model.moe_layer_indices
    if all_cpu_moe:
        cpu = moe
    elif cpu_layers is not None:
        try:
            cpu = parse_layer_list(cpu_layers)
        except ValueError:
            raise InputError(f"cannot read --cpu-layers {cpu_layers!r}", "write block indices like 0-19,40") from None
        not_moe = [i for i in cpu if i not in moe]
        if not_moe:
            raise InputError(f"block {not_moe[0]} has no routed experts",
                             f"MoE blocks of {model.name}: {moe[0]}-{moe[-1]} (see moeplan inspect)")
    elif cpu_moe_layers is not None:
        if cpu_moe_layers < 0 or cpu_moe_layers > len(moe):
            raise InputError(f"--cpu-moe-layers {cpu_moe_layers} is out of range",
                             f"{model.name} has {len(moe)} MoE layers")
        from moeplan.planner import backends

        if backends.get(backend).n_cpu_moe_from == "last":
            cpu = layers_from_last(moe, cpu_moe_layers)
        else:
            # llama.cpp --n-cpu-moe N covers block indices 0..N-1; to keep N *MoE* layers on the
            # CPU as asked, take the first N MoE blocks (what --n-cpu-moe N+n_dense_lead does)
            cpu = moe[:cpu_moe_layers]
    else:
        cpu = ()
    if threads is not None and threads < 1:
        raise InputError("--threads must be at least 1", "for example --threads 32")
    if ubatch < 1 or ubatch > 65536:
        raise InputError(f"--ubatch {ubatch} is out of range", "typical values: 512, 1024, 2048, 4096")
    if not 0.0 <= accept <= 1.0:
        raise InputError(f"--accept {accept} is not a rate", "give the acceptance rate between 0 and 1")
    if draft < 0:
        raise InputError("--draft must not be negative", "for example --draft 4")
    if experts_used is not None and not 1 <= experts_used <= model.n_experts:
        raise InputError(f"--experts-used {experts_used} is out of range",
                         f"{model.name} has {model.n_experts} experts, {model.n_experts_used} used by default")
    cache_bytes = parse_size(gpu_expert_cache, "--gpu-expert-cache") if gpu_expert_cache else 0
    n_threads = threads or default_threads
    return Placement(
        backend=backend, cpu_moe_layers=tuple(cpu), n_ctx=parse_ctx(ctx), cache_type_k=kv, cache_type_v=kv,
        flash_attn=True, n_ubatch=ubatch, n_batch=max(2048, ubatch), n_threads=n_threads,
        numa=numa, numa_nodes=numa_nodes, op_offload=not no_op_offload,
        gpu_expert_cache_bytes=cache_bytes, load_mode="no-mmap" if no_mmap else "mmap",
        n_draft=draft, draft_accept=accept, n_experts_used=experts_used or 0,
    )

