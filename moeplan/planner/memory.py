"""VRAM and host-RAM needs of a placement, as a breakdown of named items.

Every item carries the formula it was computed with. The accounting follows what llama.cpp
allocates (src/llama-model.cpp load_tensors, src/llama-kv-cache*.cpp, ggml-backend's scheduler):

VRAM (one GPU, all blocks offloaded with -ngl, routed experts of `cpu_moe_layers` on the CPU)
  weights_gpu  = output + output_norm + sum_trunk(resident bytes) + sum_{MoE on GPU}(expert bytes)
                 (token_embd always stays on the CPU: llama.cpp's input layer is the CPU device)
  kv           = sum_layers sum_components row_size(type, n_embd) * cells   (see kv_cache_bytes)
  compute      = logits + activations + attention + moe + staging           (see compute_buffer)
  cuda_context = CUDA context, cuBLAS workspace and the allocator's slack (a per-backend prior)
  The fit check keeps llama.cpp --fit's 1 GiB margin free on top (`margin_bytes`).

Host RAM
  weights_cpu  = token_embd + sum_{MoE on CPU}(expert bytes)
                 with mmap these pages are page cache: reclaimable, but they must stay
                 resident or decode reads NVMe; --no-mmap / --mlock make them anonymous
  repack       = a second, repacked copy of CPU expert weights when the CPU backend repacks
                 their type (llama.cpp CPU_REPACK buffers) and the load is not mmap-only
  compute_cpu  = CPU compute buffer (activations of a ubatch through CPU-resident ops)
  output       = logits buffer n_vocab * n_outputs * 4 (host)
  kv_cpu       = the KV cache when --no-kv-offload
"""
from __future__ import annotations

from dataclasses import dataclass

from moeplan.planner.ggml import canonical_type, row_bytes
from moeplan.planner.model import KvComponent, LayerSpec, ModelSpec
from moeplan.planner.placement import Placement

GIB = 1024**3
MIB = 1024**2

# llama.cpp --fit keeps this much free on each GPU (common/fit: fit_target default 1024 MiB)
FIT_MARGIN_BYTES = 1 * GIB


def pad(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclass(frozen=True)
class MemoryConstants:
    """Per-backend figures that are not in the model file (priors; see profiles/)."""

    cuda_context_bytes: int = 640 * MIB  # context + cuBLAS workspace, as nvidia-smi shows it
    margin_bytes: int = FIT_MARGIN_BYTES
    op_offload_min_batch: int = 32  # GGML_OP_OFFLOAD_MIN_BATCH
    kv_pad: int = 256


@dataclass(frozen=True)
class MemoryItem:
    name: str
    device: str  # 'gpu' or 'host'
    n_bytes: int
    formula: str
    page_cache: bool = False  # host bytes that are file-backed page cache (mmap)


@dataclass(frozen=True)
class MemoryBreakdown:
    items: tuple[MemoryItem, ...]
    margin_bytes: int

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


# ---- KV cache -----------------------------------------------------------------------------

def kv_cells(comp: KvComponent, n_ctx: int, n_seq: int, n_ubatch: int, swa_full: bool = False,
             kv_pad: int = 256) -> int:
    """Cells (rows) llama.cpp allocates for one cache component."""
    kv_size = pad(max(n_ctx, 1), kv_pad)
    if comp.cells == "ctx":
        return kv_size
    if comp.cells == "swa":
        if swa_full:
            return kv_size
        # llama-kv-cache-iswa.cpp: GGML_PAD(min(size_base, n_swa*n_seq_max + n_ubatch), 256)
        return pad(min(kv_size, comp.window * n_seq + n_ubatch), kv_pad)
    if comp.cells == "seq":
        return max(1, n_seq)
    if comp.cells == "ratio":
        # llama-kv-cache-dsv4.cpp: GGML_PAD(max(1, ceil(kv_size / ratio)), 256) cells per
        # stream, one stream per sequence (the compressed caches are never unified)
        return pad(max(1, -(-kv_size // comp.ratio)), kv_pad) * max(1, n_seq)
    if comp.cells == "fixed":
        return comp.window * max(1, n_seq)
    raise ValueError(f"unknown KV cell rule {comp.cells!r}")


def kv_component_bytes(comp: KvComponent, n_ctx: int, type_k: str, type_v: str, n_seq: int = 1,
                       n_ubatch: int = 512, swa_full: bool = False) -> int:
    dtype = type_k if comp.dtype == "k" else type_v if comp.dtype == "v" else comp.dtype
    return row_bytes(canonical_type(dtype), comp.n_embd) * kv_cells(comp, n_ctx, n_seq, n_ubatch, swa_full)


def kv_layer_bytes(layer: LayerSpec, n_ctx: int, type_k: str = "f16", type_v: str = "f16",
                   n_seq: int = 1, n_ubatch: int = 512, swa_full: bool = False) -> int:
    return sum(kv_component_bytes(c, n_ctx, type_k, type_v, n_seq, n_ubatch, swa_full) for c in layer.kv)


def kv_cache_bytes(model: ModelSpec, n_ctx: int, type_k: str = "f16", type_v: str = "f16",
                   n_seq: int = 1, n_ubatch: int = 512, swa_full: bool = False) -> int:
    """Total KV cache (plus recurrent state) of the trunk layers, in bytes."""
    return sum(kv_layer_bytes(layer, n_ctx, type_k, type_v, n_seq, n_ubatch, swa_full)
               for layer in model.trunk_layers)


def kv_bytes_per_token(model: ModelSpec, type_k: str = "f16", type_v: str = "f16") -> int:
    """Bytes one more token of context adds to the caches that grow with context."""
    total = 0
    for layer in model.trunk_layers:
        for c in layer.kv:
            if c.cells == "ctx":
                dtype = type_k if c.dtype == "k" else type_v if c.dtype == "v" else c.dtype
                total += row_bytes(canonical_type(dtype), c.n_embd)
    return total


def kv_read_bytes(model: ModelSpec, depth: int, type_k: str = "f16", type_v: str = "f16",
                  n_ubatch: int = 1) -> int:
    """KV bytes attention reads to decode one token at context depth `depth`."""
    total = 0
    for layer in model.trunk_layers:
        for c in layer.kv:
            dtype = type_k if c.dtype == "k" else type_v if c.dtype == "v" else c.dtype
            row = row_bytes(canonical_type(dtype), c.n_embd)
            if c.cells == "ctx":
                total += row * depth
            elif c.cells == "swa":
                total += row * min(depth, c.window)
            elif c.cells == "ratio":
                total += row * (depth // max(1, c.ratio))
            else:  # recurrent state: read once per token
                total += row
    return total


# ---- compute buffers ------------------------------------------------------------------------

def compute_buffer_terms(model: ModelSpec, p: Placement, gpu: bool, consts: MemoryConstants) -> dict[str, int]:
    """Named terms of a compute buffer reserved for a ubatch of n_ubatch tokens.

    llama.cpp reserves the worst-case graph (n_tokens = n_ubatch, all outputs) and ggml-alloc
    reuses memory between ops, so the buffer is about the peak of live tensors:
      logits      n_vocab * n_ubatch * 4                  (f32 result of the output matmul)
      activations n_ubatch * n_embd * 4 * 6               (residual, norm, attn out, ffn in/out...)
      attention   FA:     n_ubatch * n_head * d_head * 4 * 3
                  no FA:  n_head * n_kv * n_ubatch * 4 * 2 (f32 KQ and its softmax)
      moe         n_ubatch * k * n_ff_exp * 4 * 3          (gate, up, act of the chosen experts)
                  + n_ubatch * n_expert * 4 * 2            (router logits and probabilities)
      staging     (GPU only, op-offload with n_ubatch >= 32) the largest CPU layer's expert
                  tensors: ggml-backend copies the used experts of a host-resident MUL_MAT_ID
                  weight into a full-size copy tensor in the GPU compute buffer.
    """
    u = max(1, p.n_ubatch)
    kv_size = pad(max(p.n_ctx, 1), consts.kv_pad)
    d_head = 0
    for layer in model.trunk_layers:
        for c in layer.kv:
            d_head = max(d_head, c.n_embd)
    n_head = max(1, model.n_head)
    d_q = max(1, d_head // 1)
    terms: dict[str, int] = {}
    terms["logits"] = model.n_vocab * u * 4
    terms["activations"] = u * model.n_embd * 4 * 6
    if p.flash_attn:
        terms["attention"] = u * n_head * min(d_q, 1024) * 4 * 3
    else:
        terms["attention"] = n_head * kv_size * u * 4 * 2
    if model.n_experts:
        terms["moe"] = u * model.n_experts_used * model.n_ff_exp * 4 * 3 + u * model.n_experts * 4 * 2
    else:
        terms["moe"] = 0
    terms["staging"] = 0
    if gpu and p.op_offload and u >= consts.op_offload_min_batch and p.cpu_moe_layers:
        cpu = set(p.cpu_moe_layers)
        terms["staging"] = max((layer.expert_bytes for layer in model.moe_layers if layer.index in cpu),
                               default=0)
    if not gpu:
        # the CPU buffer holds activations of CPU-resident ops only; logits live on the GPU
        terms["logits"] = 0
        terms["staging"] = 0
    return terms


# ---- the breakdown ----------------------------------------------------------------------------

def estimate_memory(model: ModelSpec, p: Placement, consts: MemoryConstants | None = None,
                    repack_types: tuple[str, ...] = ()) -> MemoryBreakdown:
    """VRAM and host-RAM breakdown of placement `p` (one GPU holding all non-expert weights,
    or, with p.n_gpus == 0, a CPU-only run: every weight, the KV cache and the buffers in RAM).

    `repack_types`: ggml types the CPU backend repacks into a second buffer at load time.
    """
    c = consts or MemoryConstants()
    cpu_only = p.n_gpus == 0
    cpu_layers = set(layer.index for layer in model.moe_layers) if cpu_only else set(p.cpu_moe_layers)
    items: list[MemoryItem] = []
    mmap_backed = p.load_mode == "mmap"
    weights_dev = "host" if cpu_only else "gpu"

    embd = sum(t.n_bytes for t in model.globals if t.group == "embed")
    out = sum(t.n_bytes for t in model.globals if t.group != "embed")
    resident = sum(layer.resident_bytes for layer in model.trunk_layers)
    gpu_experts = sum(layer.expert_bytes for layer in model.moe_layers if layer.index not in cpu_layers)
    cpu_experts = sum(layer.expert_bytes for layer in model.moe_layers if layer.index in cpu_layers)
    n_gpu_moe = sum(1 for layer in model.moe_layers if layer.index not in cpu_layers)

    items.append(MemoryItem("weights_dense", weights_dev, out + resident,
                            "output + output_norm + attention/norm/router/shared/dense-FFN of every block",
                            page_cache=cpu_only and mmap_backed))
    if not cpu_only:
        items.append(MemoryItem("weights_experts", "gpu", gpu_experts,
                                f"routed experts of the {n_gpu_moe} MoE layers kept on the GPU"))
        if p.gpu_expert_cache_bytes:
            items.append(MemoryItem("expert_cache", "gpu", p.gpu_expert_cache_bytes,
                                    "GPU cache of hot experts of CPU layers (plan's cache size)"))

    kv = kv_cache_bytes(model, p.n_ctx, p.cache_type_k, p.cache_type_v, p.n_seq, p.n_ubatch)
    kv_formula = (f"pad256(ctx={p.n_ctx}) cells x per-layer rows "
                  f"(K {p.cache_type_k}, V {p.cache_type_v}, n_seq {p.n_seq})")
    items.append(MemoryItem("kv_cache", "gpu" if (p.kv_offload and not cpu_only) else "host", kv, kv_formula))

    if not cpu_only:
        gterms = compute_buffer_terms(model, p, gpu=True, consts=c)
        items.append(MemoryItem("compute", "gpu", sum(gterms.values()),
                                " + ".join(f"{k} {v / MIB:.0f} MiB" for k, v in gterms.items())))
        items.append(MemoryItem("cuda_context", "gpu", c.cuda_context_bytes,
                                "CUDA context + cuBLAS workspace (backend prior)"))

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
    cterms = compute_buffer_terms(model, p.with_(op_offload=False) if cpu_only else p, gpu=cpu_only, consts=c)
    items.append(MemoryItem("compute_cpu", "host", sum(cterms.values()) if cpu_layers else 0,
                            "activations of a ubatch through the CPU-resident ops"))
    items.append(MemoryItem("output", "host", model.n_vocab * 4 * p.n_seq,
                            "logits buffer n_vocab * n_outputs * 4 (one output per sequence)"))
    return MemoryBreakdown(items=tuple(items), margin_bytes=0 if cpu_only else c.margin_bytes)
