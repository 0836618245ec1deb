"""VRAM and host-RAM needs of a placement, as a breakdown of named items.

Every item carries the formula it was computed with. The accounting follows what llama.cpp
allocates (src/llama-model.cpp load_tensors, src/llama-kv-cache*.cpp, ggml-backend's scheduler):

VRAM (one GPU, all blocks offloaded with -ngl, routed experts of `cpu_moe_layers` on the CPU)
  weights_gpu  = output + output_norm + sum_trunk(resident bytes) + sum_{MoE on GPU}(expert bytes)
                 (token_embd always stays on the CPU: llama.cpp's input layer is the CPU device)
  kv           = sum_layers sum_components row_size(type, n_embd) * cells   (see kv_cache_bytes)
  compute      = max(attention, moe + staging, output) live sets         (see compute_buffer.py)
  cuda_context = CUDA context, cuBLAS workspace and the allocator's slack (a per-backend prior)
  The fit check keeps llama.cpp --fit's 1 GiB margin free on top (`margin_bytes`).

Host RAM
  weights_cpu  = token_embd + sum_{MoE on CPU}(expert bytes)
                 with mmap these pages are page cache: reclaimable, but they must stay
                 resident or decode reads NVMe; --no-mmap / --mlock make them anonymous
  repack       = a second, repacked copy of CPU expert weights when the CPU backend repacks
                 their type (llama.cpp CPU_REPACK buffers) and the load is not mmap-only
  compute_cpu  = CPU compute buffer: the graph inputs (KQ masks, ids, inp_embd), which the
                 scheduler always places on the CPU, and the token-embedding rows
  output       = logits buffer n_vocab * n_outputs * 4 (host)
  kv_cpu       = the KV cache when --no-kv-offload
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from moeplan.planner.memory import compute_buffer as cb
from moeplan.planner.memory import cuda_runtime as cr
from moeplan.planner.memory.cache import memo, plan_cache
from moeplan.planner.memory.devices import (
    DeviceMemory,
    device_memory,
    layer_split,
    load_computed_bytes,
    parse_tensor_split,
)
from moeplan.planner.memory.kv import (  # noqa: F401 (re-exported: callers import them from here)
    kv_bytes_per_token,
    kv_cache_bytes,
    kv_cells,
    kv_component_bytes,
    kv_layer_bytes,
    kv_layer_bytes_per_token,
    kv_read_bytes,
    kv_row_bytes,
    pad,
    v_trans_width,
)
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement
from moeplan.units import GIB, MIB

# llama.cpp --fit keeps this much free on each GPU (common/fit: fit_target default 1024 MiB)
FIT_MARGIN_BYTES = 1 * GIB

# ggml types the CPU backend repacks into its CPU_REPACK buffer on x86-64
# (ggml/src/ggml-cpu/repack.cpp, ggml_repack_get_optimal_repack_type, 2026-10 sources): with
# AVX2 Q4_0, Q4_K, IQ4_NL and MXFP4; AVX-512 adds Q2_K. Only weights used by MUL_MAT /
# MUL_MAT_ID whose row count ne[1] is a multiple of 8; Q8_0, Q5_K and Q6_K repack only on ARM.
# When they apply (src/llama-model.cpp make_cpu_buft_list, src/llama-model-loader.cpp
# select_weight_buft): the CPU buffer list is [GPU host buffer (CUDA_Host), extra buffer types
# (AMX, CPU_REPACK), CPU]. On a GPU build the host buffer comes first and supports every op, so
# CPU-resident weights (-ot ...=CPU, --n-cpu-moe, layers past -ngl) go to CUDA_Host, which with
# mmap is swapped for the plain CPU buffer: no repack. They are repacked on a CPU-only build and
# on a GPU build run with --no-host. Measured on a CPU build (tests/data/llama_memory): the
# CPU_REPACK buffer is exactly the bytes of these tensors, and with mmap the CPU_Mapped buffer
# still spans them (their file pages are read once to repack and stay as clean page cache).
CPU_REPACK_TYPES_X86_AVX2 = ("IQ4_NL", "MXFP4", "Q4_0", "Q4_K")
CPU_REPACK_TYPES_X86_AVX512 = CPU_REPACK_TYPES_X86_AVX2 + ("Q2_K",)


@dataclass(frozen=True)
class MemoryConstants:
    """Per-backend figures that are not in the model file (priors; see profiles/)."""

    cuda_context_bytes: int = 640 * MIB  # context + cuBLAS workspace, as nvidia-smi shows it
    # compute buffers x these, learned from llama.cpp's own dry run (`moeplan calibrate --fit-params`,
    # tuner/fitcal.py): each GPU's, and the host's
    compute_factor_gpu: float = 1.0
    compute_factor_host: float = 1.0
    margin_bytes: int = FIT_MARGIN_BYTES
    op_offload_min_batch: int = 32  # GGML_OP_OFFLOAD_MIN_BATCH
    kv_pad: int = 256
    # the CUDA pool's high-water beyond the compute buffer, bytes per ubatch token, by K cache
    # type ('' = any type); 0 until calibrated from logs (moeplan calibrate --from LOG)
    cuda_pool_bytes_per_ubatch: tuple[tuple[str, float], ...] = ()
    compute_extra_bytes: int = 0  # calibrated additive correction of the GPU compute buffer
    # the llama.cpp build the plan runs on: "cuda" or "rocm" add what those builds allocate beyond
    # a CPU/RPC build (cuda_runtime.py: FA's F16 copies of a quantized cache in the compute
    # buffer, the memory pool's high-water); "" = the CPU/RPC build, accounted to the byte
    gpu_build: str = ""
    gpu_sm_count: int = 132  # streaming multiprocessors (MMQ's stream-k fixup buffer); H100 SXM

    def pool_per_ubatch(self, cache_type_k: str) -> float:
        d = dict(self.cuda_pool_bytes_per_ubatch)
        return d.get(cache_type_k, d.get("", 0.0))


@dataclass(frozen=True)
class MemoryItem:
    """One line of a memory breakdown: bytes on a device and the formula behind them."""

    name: str
    device: str  # 'gpu' or 'host'
    n_bytes: int
    formula: str
    page_cache: bool = False  # host bytes that are file-backed page cache (mmap)


@dataclass(frozen=True)
class MemoryBreakdown:
    """A placement's memory: its items, the margin and, with several GPUs, each device."""

    items: tuple[MemoryItem, ...]
    margin_bytes: int
    # several GPUs (layer split): each device's VRAM, in device order (devices.py)
    devices: tuple[DeviceMemory, ...] = ()

    @property
    def vram_bytes_per_gpu(self) -> tuple[int, ...]:
        if self.devices:
            return tuple(d.vram_bytes for d in self.devices)
        return (self.vram_bytes,) if self.margin_bytes else ()

    def total(self, device: str) -> int:
        return sum(i.n_bytes for i in self.items if i.device == device)

    @property
    def vram_bytes(self) -> int:
        """Predicted VRAM in use (without the fit margin)."""
        return self.total("gpu")

    @property
    def vram_required_bytes(self) -> int:
        """VRAM that must be free for the plan to fit: use plus llama.cpp's margin."""
        return self.vram_bytes + self.margin_bytes

    @property
    def ram_bytes(self) -> int:
        """Host RAM needed, page cache of CPU-resident weights included."""
        return self.total("host")

    @property
    def ram_anon_bytes(self) -> int:
        return sum(i.n_bytes for i in self.items if i.device == "host" and not i.page_cache)

    def get(self, name: str) -> int:
        return sum(i.n_bytes for i in self.items if i.name == name)

    def to_dict(self) -> dict:
        d = self._to_dict()
        if self.devices:
            d["per_gpu"] = [dev.to_dict() for dev in self.devices]
        return d

    def _to_dict(self) -> dict:
        return {
            "vram_bytes": self.vram_bytes,
            "vram_required_bytes": self.vram_required_bytes,
            "ram_bytes": self.ram_bytes,
            "ram_anon_bytes": self.ram_anon_bytes,
            "margin_bytes": self.margin_bytes,
            "items": [
                {"name": i.name, "device": i.device, "bytes": i.n_bytes, "formula": i.formula,
                 "page_cache": i.page_cache}
                for i in self.items
            ],
        }


# ---- compute buffers ------------------------------------------------------------------------

def compute_buffer_terms(model: ModelSpec, p: Placement, gpu: bool, consts: MemoryConstants) -> dict[str, int]:
    """Named terms of a compute buffer reserved for a ubatch; they sum to the buffer.

    gpu=True: the buffer of the device that runs the layers (every op but the token
      embedding lookup): the largest of the attention, MoE and output phases of
      moeplan.planner.memory.compute_buffer (formulas there), the MoE phase including `staging`,
      the full-size GPU copy of one host-resident expert weight tensor under op-offload
      (n_ubatch >= GGML_OP_OFFLOAD_MIN_BATCH). On a CPU-only build this is the CPU buffer.
    gpu=False: the CPU buffer of a GPU run: the graph inputs (ggml_backend_sched puts every
      graph input on the CPU backend) and the token-embedding rows
      (compute_buffer.cpu_side_bytes).
    Checked against llama.cpp's own allocation log; see tests/test_memory_llamacpp.py.
    """
    staging = cb.staging_bytes(model, p, consts.op_offload_min_batch) if gpu else 0
    fa_kv = cr.fa_f16_kv_bytes(model, p) if gpu and cr.is_gpu_build(consts.gpu_build) else 0
    # the terms depend on the placement only through these fields (and the staging size; the
    # backend picks ik_llama.cpp's MLA graph), so the search's thousands of calls share a per-model cache
    key = ("cb", gpu, staging, fa_kv, p.backend, p.n_ctx, p.n_ubatch, p.n_batch, p.n_seq, p.flash_attn, p.cache_type_k,
           p.cache_type_v, p.kv_unified, p.n_outputs_max, p.n_draft, p.n_experts_used, p.options.amb)
    cache = memo(model)
    hit = cache.get(key)
    if hit is not None:
        return dict(hit)
    if not gpu:
        terms = cb.cpu_side_bytes(model, p)
    else:
        _, phase = cb.peak_phase(cr.with_fa_f16_kv(cb.compute_phases(model, p, staging, gpu=gpu), fa_kv))
        terms = {k: v for k, v in phase.items() if v}
    cache[key] = dict(terms)
    return terms


# ---- the breakdown ----------------------------------------------------------------------------

def kt_prefill_layer_bytes(model: ModelSpec, p: Placement, cpu_layers: set[int]) -> int:
    """VRAM of KTransformers' layer-wise GPU prefill: one full MoE layer's experts, the largest
    of the CPU layers, held while prompts of at least the threshold prefill on the GPU
    (kt-kernel README: "requires one MoE layer extra VRAM (e.g., ~9GB+ for Kimi-K2-Thinking and
    ~3.6GB for MiniMax-M2.1)"); none when the plan's threshold is 0 (the path is off). A plan
    without a threshold yet (the planner's candidates) reserves it."""
    from moeplan.planner import backends

    if (not backends.behaviour(p.backend).layerwise_gpu_prefill or not p.op_offload or not cpu_layers
            or p.options.kt_gpu_prefill_token_threshold == 0):
        return 0
    return max((layer.expert_bytes for layer in model.moe_layers if layer.index in cpu_layers), default=0)


def estimate_memory(model: ModelSpec, p: Placement, consts: MemoryConstants | None = None,
                    repack_types: tuple[str, ...] = ()) -> MemoryBreakdown:
    from moeplan.planner.evaluations import memoised

    with plan_cache():  # once per placement in a search (planner/evaluations.py)
        return memoised(model, "memory", (p, repack_types), (consts,),
                        lambda: _estimate_memory(model, p, consts, repack_types))


def _estimate_memory(model: ModelSpec, p: Placement, consts: MemoryConstants | None,
                     repack_types: tuple[str, ...]) -> MemoryBreakdown:
    """VRAM and host-RAM breakdown of placement `p` (one GPU holding all non-expert weights,
    or, with p.n_gpus == 0, a CPU-only run: every weight, the KV cache and the buffers in RAM).

    `repack_types`: ggml types the CPU backend repacks into a second buffer at load time.
    """
    c = consts or MemoryConstants()
    cpu_only = p.n_gpus == 0
    # -ngl N (plain layer split): blocks before the last N are wholly on the CPU
    split = not cpu_only and p.n_gpu_layers is not None
    cpu_blocks, out_gpu = layer_split(model, p) if split else (frozenset(), True)
    cpu_layers = (set(layer.index for layer in model.moe_layers) if cpu_only
                  else set(p.cpu_moe_layers) | {i for i in model.moe_layer_indices if i in cpu_blocks})
    items: list[MemoryItem] = []
    mmap_backed = p.load_mode == "mmap"
    weights_dev = "host" if cpu_only else "gpu"

    embd = sum(t.n_bytes for t in model.globals if t.group == "embed")
    out = sum(t.n_bytes for t in model.globals if t.group != "embed")
    resident = sum(layer.resident_bytes for layer in model.trunk_layers if layer.index not in cpu_blocks)
    gpu_experts = sum(layer.expert_bytes for layer in model.moe_layers if layer.index not in cpu_layers)
    cpu_experts = sum(layer.expert_bytes for layer in model.moe_layers if layer.index in cpu_layers)
    n_gpu_moe = sum(1 for layer in model.moe_layers if layer.index not in cpu_layers)
    # weights the runtime builds at load on each block's device (ik_llama.cpp: attn_kv_b of a
    # mainline MLA GGUF, devices.load_computed_bytes)
    built = {layer.index: load_computed_bytes(layer, p) for layer in model.trunk_layers}

    if split:
        n_cpu_trunk = sum(1 for layer in model.trunk_layers if layer.index in cpu_blocks)
        items.append(MemoryItem("weights_dense", "gpu", (out if out_gpu else 0) + resident,
                                ("output + output_norm + " if out_gpu else "")
                                + f"attention/norm/router/shared/dense-FFN of the {model.n_layers - n_cpu_trunk} "
                                f"GPU blocks (-ngl {p.n_gpu_layers})"))
        cpu_resident = sum(layer.resident_bytes for layer in model.trunk_layers if layer.index in cpu_blocks)
        items.append(MemoryItem("weights_dense_cpu", "host", cpu_resident + (0 if out_gpu else out),
                                f"attention/norm/router/shared/dense-FFN of the {n_cpu_trunk} CPU blocks"
                                + ("" if out_gpu else " + output + output_norm (-ngl 0: dev_output is the CPU)"),
                                page_cache=mmap_backed))
    else:
        items.append(MemoryItem("weights_dense", weights_dev, out + resident,
                                "output + output_norm + attention/norm/router/shared/dense-FFN of every block",
                                page_cache=cpu_only and mmap_backed))
    built_gpu = sum(b for i, b in built.items() if i not in cpu_blocks) if not cpu_only else 0
    built_cpu = sum(built.values()) - built_gpu
    why = "attn_kv_b that ik_llama.cpp computes at load from attn_k_b/attn_v_b (a GGUF without it), Q8_0, of the "
    if built_gpu:
        items.append(MemoryItem("weights_computed", "gpu", built_gpu, why + "GPU blocks"))
    if built_cpu:
        items.append(MemoryItem("weights_computed_cpu", "host", built_cpu, why + "CPU blocks"))
    if not cpu_only:
        items.append(MemoryItem("weights_experts", "gpu", gpu_experts,
                                f"routed experts of the {n_gpu_moe} MoE layers kept on the GPU"))
        if p.gpu_expert_cache_bytes:
            items.append(MemoryItem("expert_cache", "gpu", p.gpu_expert_cache_bytes,
                                    "GPU cache of hot experts of CPU layers (plan's cache size)"))
        layer_buf = kt_prefill_layer_bytes(model, p, cpu_layers)
        if layer_buf:
            items.append(MemoryItem("kt_prefill_layer", "gpu", layer_buf,
                                    "one CPU MoE layer's experts, the GPU copy KTransformers' layer-wise prefill "
                                    "uploads each layer into (threshold > 0)"))

    n_ub = cb.reserve_shape(p).n_tokens  # llama.cpp's effective ubatch: min(n_ctx, n_batch, n_ubatch)
    v_width = v_trans_width(model, p.flash_attn)
    kv = kv_cache_bytes(model, p.n_ctx, p.cache_type_k, p.cache_type_v, p.n_seq, n_ub, kv_unified=p.kv_unified,
                        v_width=v_width)
    kv_formula = (f"pad256(ctx={p.n_ctx}) cells x per-layer rows "
                  f"(K {p.cache_type_k}, V {p.cache_type_v}, n_seq {p.n_seq})")
    if split and cpu_blocks and p.kv_offload:
        # src/llama-kv-cache.cpp: layer il's K/V live on model.dev_layer(il) with offload_kqv,
        # so the CPU blocks' cache is in host RAM
        kv_cpu = sum(kv_layer_bytes(layer, p.n_ctx, p.cache_type_k, p.cache_type_v, p.n_seq, n_ub,
                                    kv_unified=p.kv_unified, v_width=v_width)
                     for layer in model.layers if layer.index in cpu_blocks)
        items.append(MemoryItem("kv_cache", "gpu", kv - kv_cpu, kv_formula + ", GPU blocks"))
        items.append(MemoryItem("kv_cache_cpu", "host", kv_cpu, kv_formula + f", the {len(cpu_blocks)} CPU blocks"))
    else:
        items.append(MemoryItem("kv_cache", "gpu" if (p.kv_offload and not cpu_only) else "host", kv, kv_formula))

    devices: tuple[DeviceMemory, ...] = ()
    if not cpu_only and p.n_gpus > 1:
        weights = tensor_split_weights(p)
        fa_kv = cr.fa_f16_kv_bytes(model, p) if cr.is_gpu_build(c.gpu_build) else 0
        devices = device_memory(model, p, weights, c.cuda_context_bytes, c.margin_bytes, c.op_offload_min_batch,
                                fa_f16_kv=fa_kv)
        if cr.is_gpu_build(c.gpu_build):
            devices = cr.with_device_pools(model, p, devices, cpu_layers, c.gpu_build, c.gpu_sm_count,
                                           c.op_offload_min_batch)
        if c.compute_factor_gpu != 1.0:
            devices = tuple(replace(d, compute_bytes=math.ceil(d.compute_bytes * c.compute_factor_gpu)) for d in devices)
        items.append(MemoryItem("compute", "gpu", sum(d.compute_bytes for d in devices),
                                " + ".join(f"GPU{d.index} {d.compute_bytes / MIB:.0f} MiB" for d in devices)
                                + " (one buffer per device; staging on GPU0, logits on the output's device)"))
        items.append(MemoryItem("cuda_context", "gpu", c.cuda_context_bytes * len(devices),
                                f"{len(devices)} x CUDA context + cuBLAS workspace (backend prior)"))
        if any(d.pool_bytes for d in devices):
            items.append(MemoryItem("cuda_pool", "gpu", sum(d.pool_bytes for d in devices),
                                    " + ".join(f"GPU{d.index} {d.pool_bytes / MIB:.0f} MiB" for d in devices)
                                    + f" (ggml_cuda_pool high-water of a {n_ub}-token ubatch, {c.gpu_build} build)"))
    elif not cpu_only:
        gterms = compute_buffer_terms(model, p, gpu=True, consts=c)
        if c.compute_extra_bytes:
            gterms = {**gterms, "calibrated extra": c.compute_extra_bytes}
        if c.compute_factor_gpu != 1.0:
            gterms = {**gterms, f"x{c.compute_factor_gpu:.3f} (llama-fit-params)":
                      math.ceil(sum(gterms.values()) * (c.compute_factor_gpu - 1.0))}
        items.append(MemoryItem("compute", "gpu", sum(gterms.values()),
                                " + ".join(f"{k} {v / MIB:.0f} MiB" for k, v in gterms.items())))
        pool = round(c.pool_per_ubatch(p.cache_type_k) * n_ub)
        items.append(MemoryItem("cuda_context", "gpu", c.cuda_context_bytes + pool,
                                "CUDA context + cuBLAS workspace (backend prior)" +
                                (f" + pool high-water {pool / MIB:.0f} MiB ({n_ub}-token ubatch)" if pool else "")))
        if cr.is_gpu_build(c.gpu_build):
            staged = p.op_offload and n_ub >= c.op_offload_min_batch
            gpu_blocks = {layer.index for layer in model.layers if layer.index not in cpu_blocks}
            pool_b, top = cr.cuda_pool_bytes(model, p, cpu_layers, staged, c.gpu_sm_count, c.gpu_build == "cuda",
                                             gpu_blocks, out_gpu)
            if pool_b:
                items.append(MemoryItem("cuda_pool", "gpu", pool_b,
                                        f"ggml_cuda_pool high-water of a {n_ub}-token ubatch ({c.gpu_build} build): {top}"))

    items.append(MemoryItem("weights_embed", "host", embd, "token_embd (llama.cpp keeps the input layer on the CPU)",
                            page_cache=mmap_backed))
    items.append(MemoryItem("weights_experts_cpu", "host", cpu_experts,
                            f"routed experts of the {len(cpu_layers)} MoE layers on the CPU",
                            page_cache=mmap_backed))
    repack = 0
    if repack_types and cpu_experts:
        repack = sum(t.n_bytes for layer in model.trunk_layers if layer.index in cpu_layers
                     for t in layer.tensors if t.group == "experts" and t.ggml_type in repack_types)
    if repack:
        items.append(MemoryItem("repack", "host", repack,
                                "CPU_REPACK copy of CPU expert weights of repackable types"))
    # CPU-only: the CPU buffer holds the whole graph (logits too), and nothing is staged
    if split and cpu_blocks:
        cterms = cpu_blocks_compute_terms(model, p, out_gpu)
        formula = (f"the CPU blocks' ops ({'attention/MoE' if out_gpu else 'attention/MoE/output'} peak of "
                   "compute_buffer.py, CPU alignment), graph inputs included")
    else:
        cterms = compute_buffer_terms(model, p.with_(op_offload=False) if cpu_only else p, gpu=cpu_only, consts=c)
        formula = ("whole graph (CPU-only run)" if cpu_only else
                   "graph inputs (KQ masks, ids) and token-embedding rows, which llama.cpp keeps on the CPU")
        copies = cb.pipeline_copies(model, p) if devices else 1
        if copies > 1:
            extra = (copies - 1) * sum(cb.pipeline_copy_terms(model, p, device=False).values())
            cterms = {**cterms, "pipeline copies": extra}
            formula += f", + {copies - 1} more copies of the graph inputs (pipeline parallelism, {copies} copies)"
    if c.compute_factor_host != 1.0:
        cterms = {**cterms, "llama-fit-params factor": math.ceil(sum(cterms.values()) * (c.compute_factor_host - 1.0))}
        formula += f", x{c.compute_factor_host:.3f} learned from llama-fit-params"
    items.append(MemoryItem("compute_cpu", "host", sum(cterms.values()), formula))
    items.append(MemoryItem("output", "host", model.n_vocab * 4 * p.n_seq,
                            "logits buffer n_vocab * n_outputs * 4 (one output per sequence)"))
    margin = 0 if cpu_only else c.margin_bytes * max(1, len(devices))
    return MemoryBreakdown(items=tuple(items), margin_bytes=margin, devices=devices)


def cpu_blocks_compute_terms(model: ModelSpec, p: Placement, out_gpu: bool) -> dict[str, int]:
    """CPU compute buffer under -ngl N with blocks on the CPU: ggml_backend_sched runs those
    blocks' ops on the CPU backend (their weights and KV are in host buffers), so its buffer
    holds their live sets: the attention and MoE phases of compute_buffer.py as on a CPU-only
    run, and the output phase too when the output layer is on the CPU. An upper bound when
    op-offload moves the blocks' matmuls to the GPU at n_ubatch >= 32: their results are then
    in the GPU buffer and only copied back. Never below the plain CPU-side buffer."""
    phases = cb.compute_phases(model, p.with_(op_offload=False, n_gpus=0), 0, gpu=False)
    if out_gpu and "output" in phases and len(phases) > 1:
        phases = {k: v for k, v in phases.items() if k != "output"}
    _, phase = cb.peak_phase(phases)
    side = cb.cpu_side_bytes(model, p)
    return dict(phase) if sum(phase.values()) >= sum(side.values()) else side


def tensor_split_weights(p: Placement) -> tuple[float, ...]:
    """The plan's -ts (Placement.options.tensor_split) as weights per device; without one,
    equal weights (what moeplan emits then: -ts 1,1,...)."""
    ts = p.options.tensor_split
    if ts:
        return parse_tensor_split(ts, p.n_gpus)
    return (1.0,) * p.n_gpus


def op_offload_vram_bytes(model: ModelSpec, p: Placement, consts: MemoryConstants | None = None) -> int:
    """VRAM that op offload costs this placement (what --no-op-offload saves), in bytes: the
    predicted VRAM with op offload minus without. The difference is the staged GPU copy of a
    host-resident weight the scheduler moves a batch's MUL_MAT(_ID) to the GPU with
    (compute_buffer.staging_bytes: the largest expert tensor of the CPU layers, or with -ngl N
    the largest weight of the CPU blocks), where the phase holding it is the buffer's peak;
    0 when nothing is on the CPU or the ubatch is below GGML_OP_OFFLOAD_MIN_BATCH. The other
    side of the choice, the prefill time of copying the CPU experts over PCIe each ubatch
    against computing them on the CPU, is the cost model's (planner/cost)."""
    c = consts or MemoryConstants()
    on = estimate_memory(model, p.with_(op_offload=True), c).vram_bytes
    off = estimate_memory(model, p.with_(op_offload=False), c).vram_bytes
    return max(0, on - off)
