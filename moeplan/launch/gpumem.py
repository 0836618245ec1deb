"""Per-GPU memory check for backends that keep the whole model on GPUs (vLLM, SGLang).

  need_per_gpu = W / n_gpus_total + KV_per_gpu + OVERHEAD
  W           weights as the backend loads them: the plan's file bytes for a Hugging Face
              checkpoint; for a GGUF plan the Hugging Face checkpoint is what vLLM/SGLang
              serve, estimated as parameters * HF_BYTES_PER_PARAM (BF16; FP8 checkpoints need
              half) unless Placement.options.hf_bytes_per_param says otherwise
  KV_per_gpu  llama.cpp's KV bytes for the plan's context and types, split over pipeline
              stages (nodes) and, for GQA, over tensor-parallel ranks; an MLA latent cache is
              replicated on every tensor-parallel rank
  OVERHEAD    CUDA context, activations and CUDA graphs, a prior of 2 GiB per GPU
A plan fits when need_per_gpu <= fraction * vram_per_gpu, `fraction` being the share of GPU
memory the backend is told it may take (vLLM --gpu-memory-utilization, SGLang
--mem-fraction-static).
"""
from __future__ import annotations

from dataclasses import dataclass

from moeplan.errors import InfeasibleError, InputError
from moeplan.launch.common import EmitContext, refuse_experts_override
from moeplan.planner.memory.accounting import kv_cache_bytes
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement
from moeplan.units import GIB

OVERHEAD_BYTES = 2 * GIB
HF_BYTES_PER_PARAM = 2.0
MAX_NODES_HINT = 64


@dataclass(frozen=True)
class GpuNeed:
    weights_bytes: int  # whole model, as the backend loads it
    kv_bytes: int  # whole cache
    per_gpu_bytes: int
    n_gpus_total: int
    weights_source: str  # how weights_bytes was found


def weights_bytes(model: ModelSpec, bytes_per_param: float | None) -> tuple[int, str]:
    if model.source == "gguf" or bytes_per_param is not None:
        bpp = HF_BYTES_PER_PARAM if bytes_per_param is None else bytes_per_param
        trunk = {layer.index for layer in model.trunk_layers}
        n_params = sum(t.n_elements for t in model.tensors if t.layer is None or t.layer in trunk)
        return int(n_params * bpp), f"{n_params / 1e9:.1f}B parameters x {bpp:g} bytes (Hugging Face checkpoint)"
    return model.loaded_bytes, f"{model.source} tensor bytes"


def gpu_need(model: ModelSpec, p: Placement, n_gpus_per_node: int, n_nodes: int,
             bytes_per_param: float | None = None) -> GpuNeed:
    n_total = max(1, n_gpus_per_node) * max(1, n_nodes)
    w, src = weights_bytes(model, bytes_per_param)
    kv = kv_cache_bytes(model, p.n_ctx, p.cache_type_k, p.cache_type_v, p.n_seq, p.n_ubatch)
    tp_split = 1 if model.mla else max(1, n_gpus_per_node)
    kv_per_gpu = kv // max(1, n_nodes) // tp_split
    per_gpu = w // n_total + kv_per_gpu + OVERHEAD_BYTES
    return GpuNeed(weights_bytes=w, kv_bytes=kv, per_gpu_bytes=per_gpu, n_gpus_total=n_total, weights_source=src)


def nodes_needed(model: ModelSpec, p: Placement, n_gpus_per_node: int, vram_bytes: int, fraction: float,
                 bytes_per_param: float | None = None) -> int | None:
    """Fewest identical nodes on which the model fits the GPUs, or None up to MAX_NODES_HINT."""
    for n in range(1, MAX_NODES_HINT + 1):
        if gpu_need(model, p, n_gpus_per_node, n, bytes_per_param).per_gpu_bytes <= fraction * vram_bytes:
            return n
    return None


def check_gpu_fit(ctx: EmitContext, backend: str, fraction: float) -> list[str]:
    """Notes on the per-GPU memory check; raises when the model cannot run on the GPUs.

    vLLM and SGLang compute every expert on a GPU: a plan that keeps experts on the CPU is
    only emitted when the model fits the GPUs of `ctx.n_nodes` machines anyway.
    """
    p, m = ctx.placement, ctx.model
    bpp_text = ctx.placement.options.hf_bytes_per_param
    bpp = float(bpp_text) if bpp_text else None
    need = gpu_need(m, p, p.n_gpus, ctx.n_nodes, bpp)
    where = f"{ctx.n_nodes} node(s) x {p.n_gpus} GPU(s)"
    why = ("vLLM's --cpu-offload-gb streams weights over PCIe on every step instead" if backend == "vLLM"
           else "CPU experts with SGLang are the KTransformers integration: --backend ktransformers")
    cpu_note = f"{backend} cannot compute routed experts on the CPU ({why}); " if p.cpu_moe_layers else ""
    vram = ctx.gpu_vram_bytes
    if not vram:
        if p.cpu_moe_layers:
            raise InputError(
                f"{cpu_note}the plan keeps the experts of {len(p.cpu_moe_layers)} layers on the CPU, and "
                "without the GPU memory moeplan cannot tell whether the whole model fits the GPUs",
                "pass --gpu-vram (memory of one GPU, e.g. 80G) and --nodes, or use --backend llama.cpp, "
                "ik_llama.cpp or ktransformers for CPU expert offload")
        return [f"per-GPU memory not checked (pass --gpu-vram): about {need.per_gpu_bytes / GIB:.1f} GiB "
                f"per GPU on {where} ({need.weights_source})"]
    if need.per_gpu_bytes > fraction * vram:
        n = nodes_needed(m, p, p.n_gpus, vram, fraction, bpp)
        more = f"--nodes {n}" if n else "more GPUs"
        raise InfeasibleError(
            f"{cpu_note}{m.name} needs about {need.per_gpu_bytes / GIB:.1f} GiB per GPU on {where} "
            f"({need.weights_source}, KV {need.kv_bytes / GIB:.1f} GiB in all), more than "
            f"{fraction:.2f} x {vram / GIB:.1f} GiB",
            f"use {more}, or --backend llama.cpp / ktransformers to keep experts on the CPU")
    notes = [f"per-GPU memory: about {need.per_gpu_bytes / GIB:.1f} GiB of {vram / GIB:.1f} GiB "
             f"(limit {fraction:.2f}) on {where}; weights from {need.weights_source}"]
    if p.cpu_moe_layers:
        notes.append(f"{cpu_note}the plan's CPU expert layers are dropped: every expert runs on the GPUs, "
                     "which the memory check says fit; the plan's speed figures do not apply")
    return notes


def gpu_backend_notes(ctx: EmitContext, backend: str, fraction: float, kv_note: str) -> list[str]:
    """The checks every all-GPU backend (vLLM, SGLang) starts with, and their notes."""
    refuse_experts_override(ctx, backend)
    return check_gpu_fit(ctx, backend, fraction) + ([kv_note] if kv_note else [])
