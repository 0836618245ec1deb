"""Several GPUs: which device holds each block, and the VRAM of every device (pure).

Which device holds each block follows llama.cpp's `-sm layer` rule, quoted with its source lines
in split.py (layer_split).

What else is per device:
  * KV cache: src/llama-kv-cache.cpp L216-217 puts layer il's K/V tensors on
    model.dev_layer(il) (with KV offload), so a block's cache is on the block's device;
  * compute buffer: ggml_backend_sched keeps one buffer per backend, sized by ggml-alloc over
    the graph nodes that backend runs (ggml/src/ggml-backend.cpp ggml_backend_sched_reserve);
    every device copies the graph inputs it uses (the KQ masks, row ids) as split inputs and
    receives the previous device's hidden state, so each device's buffer is the
    attention/MoE peak of compute_buffer.py, the output phase (logits) only on the device of
    the output layer, and the op-offload staging copy only on the first device: the scheduler
    hands an op whose weight is in a host buffer to the first backend, in priority order, that
    wants to offload it (ggml-backend.cpp L970-975, `for (int b = 0; b < src_backend_id; b++)`);
  * pipeline parallelism (every block and the output on the devices, no tensor override;
    compute_buffer.pipeline_copies): the scheduler keeps GGML_SCHED_MAX_COPIES (4) copies of
    every split input, never freed, so each device's buffer grows by 3 x its split inputs
    (masks, row ids, positions, hidden state) and the CPU's by 3 x the graph inputs
    (compute_buffer.pipeline_copy_terms; recorded: tests/data/llama_memory_multi/qwen3moe-2dev-pp.json);
  * the CUDA context and cuBLAS workspace exist once per device, and llama.cpp --fit keeps its
    1 GiB margin free on every device (common/fit: fit_target is per device).
Expert tensors overridden with `-ot ...=CPU` leave their block's device; everything else of a
block stays with the block.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from moeplan.planner import backends
from moeplan.planner.memory import compute_buffer as cb
from moeplan.planner.memory.cache import memo
from moeplan.planner.memory.cuda_runtime import with_fa_f16_kv
from moeplan.planner.memory.kv import kv_layer_bytes, v_trans_width
from moeplan.planner.memory.split import (  # noqa: F401 (re-exported: callers import them from here)
    assign_blocks,
    counts_from_assignment,
    f32,
    format_tensor_split,
    layer_split,
    parse_tensor_split,
    split_points,
)
from moeplan.planner.model.ggml import row_bytes
from moeplan.planner.model.spec import LayerSpec, ModelSpec
from moeplan.planner.placement import Placement


@dataclass(frozen=True)
class DeviceMemory:
    """VRAM of one device of a layer split, in bytes, term by term."""

    index: int
    blocks: tuple[int, ...]
    output: bool
    weights_dense_bytes: int
    weights_experts_bytes: int
    kv_bytes: int
    compute_bytes: int
    context_bytes: int
    margin_bytes: int
    gpu_expert_blocks: tuple[int, ...] = ()
    pool_bytes: int = 0  # a GPU build's memory-pool high-water (cuda_runtime.py); 0 on a CPU/RPC build

    @property
    def vram_bytes(self) -> int:
        return (self.weights_dense_bytes + self.weights_experts_bytes + self.kv_bytes + self.compute_bytes
                + self.context_bytes + self.pool_bytes)

    @property
    def vram_required_bytes(self) -> int:
        return self.vram_bytes + self.margin_bytes

    def to_dict(self) -> dict:
        return {"device": self.index, "blocks": _ranges(self.blocks), "output": self.output,
                "gpu_expert_blocks": _ranges(self.gpu_expert_blocks),
                "weights_dense_bytes": self.weights_dense_bytes, "weights_experts_bytes": self.weights_experts_bytes,
                "kv_bytes": self.kv_bytes, "compute_bytes": self.compute_bytes, "context_bytes": self.context_bytes,
                **({"pool_bytes": self.pool_bytes} if self.pool_bytes else {}),
                "vram_bytes": self.vram_bytes, "margin_bytes": self.margin_bytes,
                "vram_required_bytes": self.vram_required_bytes}


def _ranges(ix: Sequence[int]) -> str:
    out: list[tuple[int, int]] = []
    for i in sorted(ix):
        if out and out[-1][1] == i - 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in out)


def computed_kv_b_bytes(layer: LayerSpec) -> int:
    """Bytes of the attn_kv_b tensor ik_llama.cpp computes at load for an MLA block with
    attn_k_b/attn_v_b and no attn_kv_b (a GGUF converted by mainline): llm_prepare_mla
    (src/llama.cpp at 8337e4cd3) builds kv_lora x n_head*(nope + v), Q8_0 from quantized inputs,
    in a buffer of the block's buffer type (its device), unless -mla 1; no buffer line counts it
    (tests/data/ik_runs/ik-deepseek2-rpc2-complete.log: "Computed blk.N.attn_kv_b.weight")."""
    t = {x.name.split(".", 2)[-1]: x for x in layer.tensors}
    kb, vb = t.get("attn_k_b.weight"), t.get("attn_v_b.weight")
    if kb is None or vb is None or "attn_kv_b.weight" in t:
        return 0

    def ne(shape: tuple[int, ...], i: int) -> int:
        return shape[i] if len(shape) > i else 1

    q = kb.ggml_type if kb.ggml_type.upper() in ("F16", "BF16", "F32") else "Q8_0"
    return row_bytes(q, ne(vb.shape, 0)) * ne(kb.shape, 2) * (ne(kb.shape, 0) + ne(vb.shape, 1))


def load_computed_bytes(layer: LayerSpec, p: Placement) -> int:
    """Weights the plan's runtime builds at load beside the block's own (its record's
    computes_mla_kv_b: ik_llama.cpp's attn_kv_b), on the block's device."""
    return computed_kv_b_bytes(layer) if backends.behaviour(p.backend).computes_mla_kv_b else 0


@dataclass(frozen=True)
class _BlockCost:
    """Bytes one block puts on its device: dense weights, routed experts, KV cache."""

    dense: int
    experts: int  # routed experts, 0 when they are on the CPU
    kv: int


def _block_costs(model: ModelSpec, p: Placement) -> dict[int, _BlockCost]:
    n_ub = cb.reserve_shape(p).n_tokens
    v_width = v_trans_width(model, p.flash_attn)
    cpu = set(p.cpu_moe_layers)
    out = {}
    for layer in model.layers:
        nextn = layer.kind == "nextn"
        kv = kv_layer_bytes(layer, p.n_ctx, p.cache_type_k, p.cache_type_v, p.n_seq, n_ub,
                            kv_unified=p.kv_unified, v_width=v_width) if p.kv_offload else 0
        out[layer.index] = _BlockCost(dense=0 if nextn else layer.resident_bytes + load_computed_bytes(layer, p),
                                      experts=layer.expert_bytes if layer.kind == "moe" and layer.index not in cpu else 0,
                                      kv=kv)
    return out


def device_compute_bytes(model: ModelSpec, p: Placement, first: bool, has_output: bool, min_batch: int,
                         fa_f16_kv: int = 0) -> int:
    """Compute buffer of one device (see the module docstring): staging only on the first
    device, the output phase only on the device of the output layer; `fa_f16_kv`: a GPU build's
    F16 copies of a quantized cache in the attention phase (cuda_runtime.fa_f16_kv_bytes)."""
    staging = cb.staging_bytes(model, p, min_batch) if first else 0
    key = ("cb-dev", first, has_output, staging, fa_f16_kv, p.backend, p.kv_offload, bool(p.cpu_moe_layers), p.n_gpu_layers,
           p.n_gpus, p.n_ctx, p.n_ubatch, p.n_batch, p.n_seq, p.flash_attn,
           p.cache_type_k, p.cache_type_v, p.kv_unified, p.n_outputs_max, p.n_draft, p.n_experts_used, p.options.amb,
           p.options.sched_max_copies)
    cache = memo(model)
    hit = cache.get(key)
    if hit is not None:
        return hit
    phases = with_fa_f16_kv(cb.compute_phases(model, p, staging, gpu=True), fa_f16_kv)
    if not has_output and "output" in phases and len(phases) > 1:
        phases = {k: v for k, v in phases.items() if k != "output"}
    _, phase = cb.peak_phase(phases)
    # pipeline parallelism: the split inputs' extra copies sit below the graph for good
    copies = cb.pipeline_copies(model, p)
    extra = (copies - 1) * sum(cb.pipeline_copy_terms(model, p, True, has_output).values()) if copies > 1 else 0
    val = cache[key] = sum(phase.values()) + extra
    return val


def device_memory(model: ModelSpec, p: Placement, weights: Sequence[float], context_bytes: int,
                  margin_bytes: int, min_batch: int = 32, fa_f16_kv: int = 0) -> tuple[DeviceMemory, ...]:
    """Per-device VRAM of placement p split over len(weights) devices by -ts `weights`."""
    n_dev = len(weights)
    devs, out_dev = assign_blocks(len(model.layers), weights, p.n_gpu_layers)
    costs = _block_costs(model, p)
    out_bytes = sum(t.n_bytes for t in model.globals if t.group != "embed")
    result = []
    for d in range(n_dev):
        blocks = tuple(model.layers[i].index for i, dv in enumerate(devs) if dv == d)
        has_out = out_dev == d
        dense = sum(costs[b].dense for b in blocks) + (out_bytes if has_out else 0)
        experts = sum(costs[b].experts for b in blocks)
        kv = sum(costs[b].kv for b in blocks)
        comp = device_compute_bytes(model, p, d == 0, has_out, min_batch, fa_f16_kv)
        result.append(DeviceMemory(index=d, blocks=blocks, output=has_out, weights_dense_bytes=dense,
                                   weights_experts_bytes=experts, kv_bytes=kv, compute_bytes=comp,
                                   context_bytes=context_bytes, margin_bytes=margin_bytes,
                                   gpu_expert_blocks=tuple(b for b in blocks if costs[b].experts)))
    return tuple(result)


def fit_split(model: ModelSpec, p: Placement, budgets: Sequence[int], context_bytes: int, margin_bytes: int,
              min_batch: int = 32) -> tuple[int, ...] | None:
    """Whole-block -ts counts under which every device fits its budget, or None.

    Blocks are contiguous per device (llama.cpp's rule), so this is a partition of the block
    sequence: device after device takes as many of the remaining blocks as fit beside its
    fixed costs (context, margin, compute buffer), the last device takes the rest and the
    output layer. Costs add up block by block, so if any contiguous partition fits, this one
    does (each greedy boundary is at or past the feasible one's)."""
    n_dev = len(budgets)
    costs = _block_costs(model, p)
    cpu_blocks, out_gpu = layer_split(model, p)  # with -ngl N only the last N layers are split
    out_bytes = sum(t.n_bytes for t in model.globals if t.group != "embed") if out_gpu else 0
    order = [layer.index for layer in model.layers if layer.index not in cpu_blocks]
    counts = [0] * n_dev
    pos = 0
    for d in range(n_dev):
        last = d == n_dev - 1
        fixed = context_bytes + margin_bytes + device_compute_bytes(model, p, d == 0, last and out_gpu, min_batch)
        used = fixed + (out_bytes if last else 0)
        if last:
            used += sum(costs[b].kv + costs[b].dense + costs[b].experts for b in order[pos:])
            if used > budgets[d]:
                return None
            counts[d] = len(order) - pos + (1 if out_gpu else 0)
            break
        while pos < len(order):
            c = costs[order[pos]]
            need = c.dense + c.experts + c.kv
            if used + need > budgets[d]:
                break
            used += need
            counts[d] += 1
            pos += 1
    return tuple(counts)
