"""Decide what to allocate for a Placement, check it fits, then build the ExecModel.

`plan_build` is arithmetic on the layout (nothing is allocated; free memory comes in as
arguments): which blocks run (layer sampling), each MoE block's tier and expert pool, the GPU
cache and staging slots, and the bytes every part needs on the compute device and in host RAM.
`check_fits` compares that with free memory before anything is allocated, so a plan that
cannot fit fails at once.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from moeplan.errors import InfeasibleError, InputError
from moeplan.executor.layout import LayerLayout, ModelLayout
from moeplan.executor.sampling import choose_sample, classes_of, scale_factors
from moeplan.planner.memory.accounting import kv_cells
from moeplan.planner.model.spec import KvComponent
from moeplan.planner.placement import Placement
from moeplan.units import GIB, MIB

HEADROOM = 0.9  # use at most this share of free memory
RUNTIME_HOST_BYTES = 512 * MIB  # Python + torch CPU runtime, measured ~0.4 GiB RSS after import


@dataclass(frozen=True)
class ExecOptions:
    device: str = "cpu"  # 'cuda' or 'cpu' (the CPU stands in for the GPU)
    dtype: str = "auto"  # bf16 | fp16 | fp32, or auto: by what the CPU runs natively (executor/native.py)
    weights: str = "synthetic"  # or 'gguf'
    seed: int = 0
    expert_source: str = "ram"  # CPU-tier experts in host RAM, or 'mmap' (the GGUF's pages)
    mmap_cold: bool = False  # evict the file's expert pages before every decode step
    cpu_decode_mode: str = "compute"  # or 'transfer'
    cache_experts: int | None = None  # GPU expert cache size in experts (else the placement's bytes)
    cache_policy: str = "lru"
    cache_upload_share: float = 1.0
    expert_pool: int | None = None  # distinct expert buffers per block (None: all, or auto if sampling)
    sample_layers: int | None = None
    grouped_experts: bool | None = None  # device experts as grouped GEMMs (None: on CUDA only)
    max_ram_bytes: int | None = None
    max_vram_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.dtype == "auto":
            from moeplan.executor.native import choose_dtype

            object.__setattr__(self, "dtype", choose_dtype(self.device, self.weights))


@dataclass(frozen=True)
class MemItem:
    name: str
    device: str  # 'device' (the GPU tier) or 'host'
    n_bytes: int


@dataclass
class BuildPlan:
    layers: tuple[LayerLayout, ...]  # blocks that run, in order
    tier_of: dict[int, str]  # MoE block -> 'gpu' | 'cpu'
    classes: dict[str, list[int]]
    sample: dict[str, list[int]]
    factors: dict[int, float]
    pool: dict[int, int]  # MoE block -> distinct expert buffers
    cache_slots: int
    staging_slots: int
    n_ctx: int
    items: list[MemItem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def sampled(self) -> bool:
        return any(len(self.sample[k]) < len(self.classes[k]) for k in self.classes)

    def total(self, where: str) -> int:
        return sum(i.n_bytes for i in self.items if i.device == where)


def dtype_bytes(dtype: str) -> int:
    return 4 if dtype == "fp32" else 2


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape) if shape else 1


def _resident_numel(lay: LayerLayout) -> int:
    ws = [lay.attn_norm, lay.ffn_norm, *lay.attn.weights.values(),
          *(w for r, w in lay.ffn.weights.items() if r != "tid2eid"), *lay.side]
    return sum(w.n_elements for w in ws if w is not None)


def _kv_bytes(lay: LayerLayout, n_ctx: int, n_ubatch: int, db: int) -> int:
    comps = list(lay.attn.kv)
    if lay.attn.kind == "gqa":
        for name, d in (("k", lay.attn.d_k), ("v", lay.attn.d_v)):
            if not any(c.name == name for c in comps):
                comps.append(KvComponent(name, lay.attn.n_head_kv * d))
    return sum(kv_cells(c, n_ctx, 1, n_ubatch) * (c.n_embd * db + 8) for c in comps)


def _act_bytes(lay: LayerLayout, n_embd: int, n_ctx: int, u: int, db: int) -> int:
    """Peak temporaries of one step of u tokens: attention scores and probabilities (fp32) and
    the FFN intermediates (about 16 hidden-sized and 4 expert-sized rows per token)."""
    heads = max(1, lay.attn.n_head)
    scores = 2 * heads * u * n_ctx * 4
    ff = lay.ffn.experts.n_ff * 2 if lay.ffn.experts else 0
    return scores + u * (16 * n_embd + 4 * ff) * db


def read_llc_bytes(root: str = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """Size of the largest CPU cache (sysfs), 0 when unknown."""
    best = 0
    try:
        for name in os.listdir(root):
            try:
                with open(os.path.join(root, name, "size"), encoding="ascii") as f:
                    text = f.read().strip()
            except OSError:
                continue
            mult = {"K": 1024, "M": MIB, "G": GIB}.get(text[-1:], 1)
            digits = text[:-1] if text[-1:] in "KMG" else text
            if digits.isdigit():
                best = max(best, int(digits) * mult)
    except OSError:
        return 0
    return best


def plan_build(layout: ModelLayout, p: Placement, opt: ExecOptions, n_positions: int,
               host_free: int, dev_free: int, llc_bytes: int = 0) -> BuildPlan:
    """What to allocate (no allocation, no I/O: free memory and the CPU's last-level cache size
    come in as arguments)."""
    if n_positions > p.n_ctx:
        raise InputError(f"the run needs {n_positions} positions but the context is {p.n_ctx}",
                         "raise --ctx or lower --prompt/--tokens")
    cpu = set(p.cpu_moe_layers)
    tier_of = {lay.index: ("cpu" if lay.index in cpu else "gpu") for lay in layout.layers if lay.ffn.kind == "moe"}
    classes = classes_of(layout.layers, tier_of)
    sample = choose_sample(classes, opt.sample_layers)
    chosen = {i for v in sample.values() for i in v}
    layers = tuple(lay for lay in layout.layers if lay.index in chosen)
    moe = [lay for lay in layers if lay.ffn.kind == "moe"]
    notes: list[str] = []

    n_cpu_total = sum(1 for t in tier_of.values() if t == "cpu")
    n_cpu_run = sum(1 for lay in moe if tier_of[lay.index] == "cpu")
    cache_slots = 0
    if n_cpu_total:
        if opt.cache_experts is not None:
            cache_slots = opt.cache_experts
        elif p.gpu_expert_cache_bytes:
            cpu_lays = [lay for lay in layout.layers if tier_of.get(lay.index) == "cpu"]
            s_exp = sum(lay.ffn.routed.file_bytes_per_expert for lay in cpu_lays) / len(cpu_lays)
            cache_slots = int(p.gpu_expert_cache_bytes // max(1.0, s_exp))
            notes.append(f"GPU expert cache of {p.gpu_expert_cache_bytes / GIB:.2f} GiB holds {cache_slots} experts "
                         "at the model file's bytes per expert (the executor's copies use its own dtype)")
        if cache_slots and n_cpu_run < n_cpu_total:
            scaled = max(1, round(cache_slots * n_cpu_run / n_cpu_total))
            notes.append(f"cache scaled to the sampled CPU blocks: {cache_slots} -> {scaled} experts")
            cache_slots = scaled
    elif opt.cache_experts or p.gpu_expert_cache_bytes:
        notes.append("no block keeps its experts on the CPU, so the GPU expert cache is unused")

    cpu_moe = [lay for lay in moe if tier_of[lay.index] == "cpu"]
    staging = 0
    if cpu_moe:
        k = max(lay.ffn.routed.n_used for lay in cpu_moe)
        n_exp = max(lay.ffn.routed.n_expert for lay in cpu_moe)
        may_upload = opt.cpu_decode_mode == "transfer" or p.op_offload
        if may_upload:
            staging = min(n_exp, max(2 * k, 32))
        shapes = {(lay.ffn.routed.n_ff, lay.ffn.routed.n_embd) for lay in cpu_moe}
        if len(shapes) > 1 and (cache_slots or staging):
            raise InputError("the CPU-resident blocks have experts of different shapes",
                             "the executor's GPU cache and staging need one expert shape; drop the cache")

    pool = {lay.index: lay.ffn.routed.n_expert for lay in moe}
    if opt.expert_pool is not None:
        for lay in moe:
            pool[lay.index] = max(1, min(opt.expert_pool, lay.ffn.routed.n_expert))
    plan = BuildPlan(layers, tier_of, classes, sample, scale_factors(classes, sample), pool, cache_slots, staging,
                     p.n_ctx, notes=notes)
    plan.items = memory_items(layout, plan, p, opt)
    if opt.expert_pool is None and plan.sampled and moe:
        _shrink_pools(layout, plan, p, opt, host_free, dev_free, llc_bytes)
    return plan


def memory_items(layout: ModelLayout, plan: BuildPlan, p: Placement, opt: ExecOptions) -> list[MemItem]:
    """Bytes each part needs, on the compute device or in host RAM, in the executor's dtype."""
    db = dtype_bytes(opt.dtype)
    items: list[MemItem] = []
    u = max(1, p.n_ubatch)
    dense = sum(_resident_numel(lay) for lay in plan.layers) * db
    head = (layout.output.n_elements if layout.output else layout.token_embd.n_elements) * db
    items.append(MemItem("dense weights (attention, norms, router, shared, dense FFN, head)", "device", dense + head))
    items.append(MemItem("KV cache", "device", sum(_kv_bytes(lay, plan.n_ctx, u, db) for lay in plan.layers)))
    gpu_exp = cpu_exp = bias = 0
    one = 0
    for lay in plan.layers:
        e = lay.ffn.experts
        if e is None:
            continue
        per = 3 * e.n_ff * e.n_embd * db
        one = max(one, per)
        bias += e.n_expert * (3 * e.n_ff + e.n_embd) * db if e.bias_names else 0
        if plan.tier_of[lay.index] == "gpu":
            gpu_exp += plan.pool[lay.index] * per
        elif opt.expert_source == "ram":
            cpu_exp += plan.pool[lay.index] * per
    items.append(MemItem("routed experts, GPU tier", "device", gpu_exp + bias))
    items.append(MemItem("routed experts, CPU tier" + (" (pinned)" if opt.device == "cuda" else ""), "host", cpu_exp + bias))
    items.append(MemItem("GPU expert cache slots", "device", plan.cache_slots * one))
    items.append(MemItem("upload staging slots", "device", plan.staging_slots * one))
    act = max((_act_bytes(lay, layout.n_embd, plan.n_ctx, u, db) for lay in plan.layers), default=0)
    items.append(MemItem("activations of one ubatch", "device", act + layout.n_vocab * 4 * 2))
    items.append(MemItem("token_embd (host, as llama.cpp)", "host", layout.token_embd.n_elements * db))
    items.append(MemItem("build buffers and runtime", "host", RUNTIME_HOST_BYTES + 3 * one))
    return items


def _shrink_pools(layout: ModelLayout, plan: BuildPlan, p: Placement, opt: ExecOptions, budget_host: int,
                  budget_dev: int, llc_bytes: int) -> None:
    """Under sampling, give each MoE block fewer distinct expert buffers when all of them would
    not fit: the largest pool (at least 2k experts) that fits. Pools smaller than 4x the CPU's
    last-level cache are flagged, as reads could then be served from the cache."""
    if fits(plan, opt, budget_host, budget_dev)[0]:
        return
    moe = [lay for lay in plan.layers if lay.ffn.experts is not None]
    per = max(3 * lay.ffn.routed.n_ff * lay.ffn.routed.n_embd * dtype_bytes(opt.dtype) for lay in moe)
    k = max(lay.ffn.routed.n_used for lay in moe)
    n_max = max(plan.pool.values())
    lo, hi = min(2 * k, n_max), n_max
    best = None
    while lo <= hi:
        mid = (lo + hi) // 2
        old = plan.pool
        plan.pool = {i: min(n, mid) for i, n in old.items()}
        plan.items = memory_items(layout, plan, p, opt)
        ok = fits(plan, opt, budget_host, budget_dev)[0]
        plan.pool = old
        if ok:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    if best is None:
        best = min(2 * k, n_max)  # does not fit even so; check_fits says so
    plan.pool = {i: min(n, best) for i, n in plan.pool.items()}
    plan.items = memory_items(layout, plan, p, opt)
    plan.notes.append(f"expert pool: each sampled MoE block holds {best} distinct expert buffers and expert e "
                      f"uses buffer e mod {best} (all {n_max} would not fit); bytes moved per token are unchanged")
    cache_floor = 4 * max(llc_bytes, 64 * MIB)
    if best * per * len(moe) < cache_floor:
        plan.notes.append(f"the expert pools ({best * per * len(moe) / MIB:.0f} MiB) are less than 4x the CPU's "
                          f"last-level cache ({max(llc_bytes, 64 * MIB) / MIB:.0f} MiB): some expert reads may come "
                          "from the cache, so expert tiers may look faster than DRAM allows")


def available_bytes(opt: ExecOptions) -> tuple[int, int]:
    """(host RAM, device memory) free for the run, after --max-ram / --max-vram caps."""
    import psutil

    host = int(psutil.virtual_memory().available)
    if opt.device == "cuda":
        import torch

        dev = int(torch.cuda.mem_get_info()[0])
    else:
        dev = host
    if opt.max_ram_bytes is not None:
        host = min(host, opt.max_ram_bytes)
    if opt.max_vram_bytes is not None:
        dev = min(dev, opt.max_vram_bytes)
    return host, dev


def fits(plan: BuildPlan, opt: ExecOptions, host_free: int, dev_free: int) -> tuple[bool, str]:
    host_need, dev_need = plan.total("host"), plan.total("device")
    if opt.device == "cpu":
        # the device tier is the CPU too: everything comes out of host RAM
        if dev_need > HEADROOM * dev_free:
            return False, "device"
        return host_need + dev_need <= HEADROOM * host_free, "host"
    if dev_need > HEADROOM * dev_free:
        return False, "device"
    return host_need <= HEADROOM * host_free, "host"


def check_fits(plan: BuildPlan, opt: ExecOptions, host_free: int, dev_free: int) -> None:
    """Raise InfeasibleError (before anything is allocated) when the run cannot fit."""
    ok, where = fits(plan, opt, host_free, dev_free)
    if ok:
        return
    host_need, dev_need = plan.total("host"), plan.total("device")
    biggest = max(plan.items, key=lambda i: i.n_bytes)
    if where == "device":
        if opt.device == "cuda":
            what = "VRAM"
        elif opt.max_vram_bytes is not None and dev_free <= opt.max_vram_bytes:
            what = "memory for the GPU tier (--max-vram)"
        else:
            what = "host RAM for the GPU tier (no GPU: it runs on the CPU)"
        need, free = dev_need, dev_free
    else:
        what = "host RAM"
        need = host_need + (dev_need if opt.device == "cpu" else 0)
        free = host_free
    hints = []
    if not opt.sample_layers:
        hints.append("--sample-layers 2 (run 2 blocks of each kind and extrapolate)")
    if opt.dtype == "fp32":
        hints.append("--dtype bf16")
    if opt.expert_source == "ram" and any(t == "cpu" for t in plan.tier_of.values()):
        hints.append("--expert-source mmap (CPU experts read from the GGUF)")
    hints.append("--expert-pool 16 (fewer distinct expert buffers per block)")
    raise InfeasibleError(
        f"the run needs {need / GIB:.2f} GiB of {what} but {free / GIB:.2f} GiB are free "
        f"(largest part: {biggest.name}, {biggest.n_bytes / GIB:.2f} GiB, in {opt.dtype})",
        "try " + ", or ".join(hints),
    )
