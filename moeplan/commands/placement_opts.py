"""Placement flags shared by `estimate` and `bench`; their resolution to a Placement is the
planner's (planner/resolve.py), re-exported here for the commands."""
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

import typer

from moeplan.planner.model.ggml import KV_CACHE_TYPES
from moeplan.planner.placement import BACKENDS
from moeplan.planner.resolve import (  # noqa: F401  (re-exported: the commands' and tests' import)
    PlacementRequest,
    check_backend_device,
    check_backend_runs,
    check_kv_type_v,
    check_ngl,
)
from moeplan.planner.resolve import resolve_placement as _resolve

if TYPE_CHECKING:
    from moeplan.planner.model.spec import ModelSpec
    from moeplan.planner.placement import Placement

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


def resolve_placement(model: ModelSpec, **flags) -> Placement:
    """The flags (PlacementRequest's fields, by name) resolved by the planner."""
    return _resolve(model, PlacementRequest(**flags))
