"""Enumerate placements, prune by memory, rank by objective, keep the Pareto front.

The search builds its table first and ranks it second (no mutation of inputs):

  for each KV type (legal ones: a quantized V cache needs flash attention, MLA needs the
  K and V types to match), ubatch in 512..4096 with and without op-offload, NUMA policy (when
  the machine has several nodes) and thread count (physical cores of the used nodes):
      the fewest CPU-expert layers that fit the VRAM budget (memory grows monotonically
      with the number of GPU-resident expert layers, so this is a binary search), because
      every layer moved to the GPU makes decode (and offloaded prefill) faster;
      prune by host RAM (anonymous memory must fit; page cache may spill to NVMe at a
      modelled cost) and by per-node RAM when bound to nodes;
  then rank by the objective (a GPU expert cache is not searched: mainline llama.cpp has
  none; `estimate --gpu-expert-cache` models one); the Pareto front of VRAM against decode speed varies the
  number of CPU layers for the best settings.

Which layers go to the CPU for a count c: the ones whose experts cost the CPU least per byte
freed on the GPU (cheap-to-dot types first), ties broken by block index ascending, so plain
models get the leading layers (like --n-cpu-moe) and the -ot patterns stay compact.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from moeplan.errors import InfeasibleError
from moeplan.planner import backends
from moeplan.planner.cost.estimate import (
    cpu_nodes,
    default_threads,
    dot_elements,
    kt_plan_threshold,
    physical_cores,
    used_nodes,
)
from moeplan.planner.cost.estimate import estimate as _estimate_once
from moeplan.planner.cost.machine import default_batch
from moeplan.planner.cost.priors import BackendPriors
from moeplan.planner.evaluations import evaluation_counts, memoised  # noqa: F401  (evaluation_counts: re-exported)
from moeplan.planner.hardware.profile import OS_RESERVE_BYTES, HardwareProfile
from moeplan.planner.hardware.vendors import unified_notes
from moeplan.planner.hardware.windows import affinity_mask, bind_hint, reserve_note, vram_reserve_bytes
from moeplan.planner.memory.accounting import MemoryConstants, estimate_memory, kv_cache_bytes, op_offload_vram_bytes
from moeplan.planner.memory.cache import plan_cache
from moeplan.planner.memory.devices import fit_split, format_tensor_split, layer_split
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.options import PlanOptions
from moeplan.planner.placement import Placement
from moeplan.planner.plan import Alternative, Estimate, Plan, Workload, digest_of, model_ref
from moeplan.units import GIB


def estimate(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors, *, depth: int = 0,
             n_prompt: int = 4096, consts: MemoryConstants | None = None, prompt_depth: int = 0) -> Estimate:
    """cost.estimate.estimate, memoised per placement within the search (planner/evaluations.py)."""
    return memoised(model, "estimate", (p, depth, n_prompt, prompt_depth), (hw, pr, consts),
                    lambda: _estimate_once(model, p, hw, pr, depth=depth, n_prompt=n_prompt, consts=consts,
                                           prompt_depth=prompt_depth))


UBATCHES = (512, 1024, 2048, 4096)
KV_TYPES = ("f16", "q8_0", "q4_0")
# a quantized KV cache costs quality: take it only when it buys this much decode speed
KV_PREFERENCE = {"f16": 1.0, "q8_0": 1.03, "q4_0": 1.10}
# "balanced" scores a typical request: a 4096-token prompt and 512 generated tokens
BALANCED_PROMPT, BALANCED_GEN = 4096, 512


@dataclass(frozen=True)
class Request:
    """What the user asked for. Budgets of 0 mean: take them from the hardware profile."""

    backend: str = "llama.cpp"
    objective: str = "decode"  # decode | prefill | balanced
    n_ctx: int | None = None  # exact context; None = at least min_ctx, grown to fill VRAM
    min_ctx: int = 4096
    vram_bytes: int = 0  # usable VRAM of all GPUs together
    ram_bytes: int = 0
    depth: int = 0
    n_prompt: int = 4096
    kv_types: tuple[str, ...] = KV_TYPES
    ubatches: tuple[int, ...] = UBATCHES
    numa_policies: tuple[str, ...] = ()  # () = all that make sense for the machine
    threads: int | None = None
    n_gpu_layers: int | None = None  # a fixed -ngl N (plain layer split); None = every layer on the GPUs
    # objective "workload": the request whose time is minimised (depth/n_prompt follow it)
    workload: Workload | None = None
    # n_ctx None and ctx_cap > 0: the context is the model's trained context up to ctx_cap when
    # that fits, else the largest that fits (tune's default); ctx_cap 0: min_ctx grown to fill VRAM
    ctx_cap: int = 0
    all_cpu_moe: bool = False  # every routed expert on the CPU (llama.cpp --cpu-moe)

    @property
    def decode_depth(self) -> int:
        return self.workload.decode_depth if self.workload else self.depth

    @property
    def prompt_tokens(self) -> int:
        return self.workload.prompt_tokens if self.workload else self.n_prompt

    @property
    def prompt_depth(self) -> int:
        return self.workload.depth if self.workload else 0


@dataclass(frozen=True)
class Candidate:
    """A placement with its estimate and score."""

    placement: Placement
    estimate: Estimate
    score: float


@dataclass(frozen=True)
class SearchResult:
    """The search's best candidate, its alternatives and Pareto front, and why."""

    best: Candidate
    alternatives: tuple[Candidate, ...]
    pareto: tuple[Alternative, ...]
    n_evaluated: int
    why: tuple[str, ...]
    one_more_gib: str
    workload: Workload | None = None


# tune's workload presets: a chat turn, and an agent's / coding assistant's turn with files and
# tool output in a long prompt
WORKLOADS = {
    "chat": Workload("chat", prompt_tokens=1024, gen_tokens=512),
    "agent": Workload("agent", prompt_tokens=16384, gen_tokens=1024),
    "coding": Workload("coding", prompt_tokens=16384, gen_tokens=1024),
}
# tune's default context: the model's trained context, at most this (a long context's KV cache
# takes VRAM from the experts; --ctx asks for more)
DEFAULT_CTX_CAP = 32768


def cpu_layer_order(model: ModelSpec, pr: BackendPriors) -> tuple[int, ...]:
    """MoE layers in the order they should move to the CPU (see module docstring)."""
    def key(layer):
        cost = dot_elements(layer, pr.type_cost) / max(1, layer.expert_elements)
        return (round(cost, 3), -layer.expert_bytes, layer.index)
    return tuple(layer.index for layer in sorted(model.moe_layers, key=key))


def _budgets(hw: HardwareProfile, req: Request) -> tuple[int, int]:
    """(VRAM, RAM) budgets: the request's, else the profile's free VRAM less what Windows keeps
    for WDDM (planner/hardware/windows.py), and its RAM."""
    vram = req.vram_bytes or max(0, sum((g.vram_free_bytes or g.vram_bytes) for g in hw.gpus)
                                 - vram_reserve_bytes(hw))
    ram = req.ram_bytes or hw.ram_bytes
    return vram, ram


def gpu_budgets(hw: HardwareProfile, vram: int) -> tuple[int, ...]:
    """VRAM budget of every GPU, in device order: its free (else total) memory, scaled so
    that they sum to `vram` when a what-if total differs."""
    sizes = [g.vram_free_bytes if g.vram_free_bytes is not None else g.vram_bytes for g in hw.gpus]
    total = sum(sizes)
    if not total or vram == total:
        return tuple(sizes)
    return tuple(int(s * vram / total) for s in sizes)


def fit_placement(model: ModelSpec, p: Placement, hw: HardwareProfile, vram: int,
                  consts: MemoryConstants) -> Placement | None:
    """p with the whole-block -ts (Placement.options.tensor_split) under which every GPU fits;
    p itself with one GPU; None when no split of the blocks fits."""
    if p.n_gpus <= 1 or len(hw.gpus) <= 1:
        return p
    counts = fit_split(model, p, gpu_budgets(hw, vram), consts.cuda_context_bytes, consts.margin_bytes,
                       consts.op_offload_min_batch)
    if counts is None:
        return None
    return p.with_(options=p.options.with_(tensor_split=format_tensor_split(counts)))


@dataclass(frozen=True)
class Fit:
    """Whether a placement fits its budgets and, when not, which one, by how much and what a
    real run does then (`estimate` shows it; `tune` prunes on it)."""

    fits: bool = True
    budget: str = ""  # vram | ram | numa_node
    needed_bytes: int = 0
    budget_bytes: int = 0
    message: str = ""  # what is short: the search's own wording
    outcome: str = ""  # what happens when it is run as it is

    @property
    def short_bytes(self) -> int:
        return max(0, self.needed_bytes - self.budget_bytes)

    def to_dict(self) -> dict:
        return {"fits": self.fits, "budget": self.budget or None, "needed_bytes": self.needed_bytes,
                "budget_bytes": self.budget_bytes, "short_bytes": self.short_bytes, "message": self.message,
                "outcome": self.outcome}


def _load_fails(p: Placement, what: str) -> str:
    runtime = p.backend
    return f"{runtime} fails to load: {what}"


def check_fit(model: ModelSpec, p: Placement, hw: HardwareProfile, vram: int, ram: int,
              consts: MemoryConstants) -> Fit:
    """Fit of placement p: the first budget it exceeds (VRAM, host RAM, the bound NUMA node's
    RAM), by how much, and what a run does. With several GPUs, fits = some split of the blocks
    over the GPUs fits every GPU."""
    if p.n_gpus > 1 and len(hw.gpus) > 1:
        fitted = fit_placement(model, p, hw, vram, consts)
        if fitted is None:
            mem = estimate_memory(model, p, consts)
            return Fit(False, "vram", mem.vram_required_bytes, vram,
                       f"VRAM: no split of the blocks over the {p.n_gpus} GPUs fits every GPU (needs "
                       f"{mem.vram_required_bytes / GIB:.2f} GiB with a 1 GiB margin per GPU, budgets "
                       + " + ".join(f"{b / GIB:.1f}" for b in gpu_budgets(hw, vram)) + " GiB)",
                       _load_fails(p, "a GPU's buffer allocation runs out of memory"))
        p = fitted
    mem = estimate_memory(model, p, consts)
    if p.n_gpus == 1 and mem.vram_required_bytes > vram:
        return Fit(False, "vram", mem.vram_required_bytes, vram,
                   f"VRAM short by {(mem.vram_required_bytes - vram) / GIB:.2f} GiB",
                   _load_fails(p, "the GPU buffer allocation runs out of memory (cudaMalloc)"))
    anon = mem.ram_anon_bytes  # kt-kernel's per-node pools split the experts: counted once
    if anon > ram - OS_RESERVE_BYTES:
        return Fit(False, "ram", anon + OS_RESERVE_BYTES, ram,
                   f"RAM short by {(anon - ram + OS_RESERVE_BYTES) / GIB:.2f} GiB",
                   "the allocation fails or the kernel's OOM killer ends the process (anonymous memory "
                   "cannot be paged back to the model file)")
    if p.numa == "bind" and hw.numa_nodes:
        nodes = used_nodes(hw, p)
        # Windows reports only a node's available memory (mem_total_bytes 0): use that
        node_mem = sum(n.mem_total_bytes or (n.mem_free_bytes or 0) for n in nodes)
        if node_mem and mem.ram_bytes > node_mem - OS_RESERVE_BYTES // 2:
            outcome = ("mapped (mmap), the bound node's page cache holds only part of the file: the kernel "
                       "evicts expert pages and decode reads them from the disk"
                       if p.load_mode == "mmap" else
                       "read in (--no-mmap) under --membind, the allocation beyond the node fails or the OOM "
                       "killer ends the process")
            return Fit(False, "numa_node", mem.ram_bytes, node_mem,
                       f"bound NUMA node RAM short by {(mem.ram_bytes - node_mem) / GIB:.2f} GiB", outcome)
    return Fit()


def shortfall(model: ModelSpec, p: Placement, hw: HardwareProfile, vram: int, ram: int,
              consts: MemoryConstants, pr: BackendPriors) -> str:
    """What is short (a message) when placement p does not fit; '' when it fits."""
    return check_fit(model, p, hw, vram, ram, consts).message


def budgets(hw: HardwareProfile, req: Request | None = None) -> tuple[int, int]:
    """(VRAM, RAM) budgets of a profile (and a request's what-if budgets)."""
    return _budgets(hw, req or Request())


def as_run(e: Estimate, fit: Fit) -> Estimate:
    """The estimate of what really happens when a placement that does not fit is run: no
    speed when it fails to load; decode at the disk's pace when experts page from the disk.
    The figures if it fit are kept in the notes; an estimate that fits is returned as it is."""
    from dataclasses import replace

    if fit.fits:
        return e
    head = (f"does not fit: {fit.message} (needs {fit.needed_bytes / GIB:.2f} GiB, budget "
            f"{fit.budget_bytes / GIB:.2f} GiB); {fit.outcome}")
    if_fit = (f"if it fit: decode {e.decode_tok_s:.1f} tok/s, prefill {e.prefill_tok_s:.0f} tok/s")
    if fit.budget == "numa_node" and e.factors is not None and "disk" in fit.outcome:
        # the decode sweep over the layers is LRU's worst case (every expert page misses); the
        # range's top: only the share beyond the node misses
        paging = _paging_decode(e, 1.0)
        best = _paging_decode(e, min(1.0, fit.short_bytes / max(1, fit.needed_bytes)))
        return replace(e, decode_tok_s=paging, decode_tok_s_range=(paging, max(paging, best)),
                       decode_tok_s_paging=paging, notes=(head, if_fit) + e.notes)
    return replace(e, decode_tok_s=0.0, decode_tok_s_range=(0.0, 0.0), prefill_tok_s=0.0,
                   prefill_tok_s_range=(0.0, 0.0), notes=(head, if_fit) + e.notes)


def _paging_decode(e: Estimate, miss: float) -> float:
    """Decode when a share `miss` of the CPU expert bytes comes from the disk: that share of the
    estimate's CPU expert read term at the NVMe rate instead of the DRAM rate (miss 1: as
    cost/estimate.py paging_decode_tok_s)."""
    f = e.factors
    assert f is not None
    by = {t.name: t.seconds for t in e.decode_terms}
    cpu_read = by.get("cpu_experts_read", 0.0)
    if cpu_read <= 0 or f.nvme_bytes_per_s.value <= 0:
        return e.decode_tok_s
    nbytes = cpu_read * f.bw_cpu_bytes_per_s.value
    t = (sum(by.values()) - miss * (cpu_read + by.get("cpu_compute_excess", 0.0)) - by.get("nvme_read", 0.0)
         + miss * nbytes / f.nvme_bytes_per_s.value)
    return 1.0 / t if t > 0 else 0.0


def kv_type_legal(model: ModelSpec, kv: str) -> bool:
    """llama.cpp refuses a quantized cache whose block does not divide the head size
    (q8_0/q4_0 blocks are 32 wide): check d_k and d_v of the model."""
    from moeplan.planner.model.ggml import TYPE_SIZES, canonical_type

    block = TYPE_SIZES[canonical_type(kv)][0]
    return model.head_dim_k % block == 0 and model.head_dim_v % block == 0


def _score(e: Estimate, req: Request, kv: str) -> float:
    """Higher is better: tokens per second of the objective, or 1 / the workload's seconds."""
    pref = KV_PREFERENCE.get(kv, 1.2)
    if req.objective == "prefill":
        return e.prefill_tok_s / pref
    if req.objective == "workload" and req.workload is not None:
        return 1.0 / req.workload.seconds(e.prefill_tok_s, e.decode_tok_s) / pref
    if req.objective == "balanced":
        t = BALANCED_PROMPT / max(e.prefill_tok_s, 1e-9) + BALANCED_GEN / max(e.decode_tok_s, 1e-9)
        return 1.0 / t / pref
    return e.decode_tok_s / pref


def _estimate(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors, req: Request,
              consts: MemoryConstants) -> Estimate:
    """The estimate at the request's depths: decode at the workload's average depth, the prompt
    after its cached tokens."""
    return estimate(model, p, hw, pr, depth=req.decode_depth, n_prompt=req.prompt_tokens,
                    prompt_depth=req.prompt_depth, consts=consts)


def _numa_options(hw: HardwareProfile, req: Request, pr: BackendPriors) -> tuple[tuple[str, tuple[int, ...]], ...]:
    nodes = list(hw.cpu_nodes)
    if len(nodes) <= 1:
        return (("none", ()),)
    if pr.numa_aware:
        # KTransformers: one worker pool per node ('distribute', kt-kernel --kt-threadpool-count
        # = the nodes) unless asked otherwise; one pool ('none') or one bound node ('bind': kt-kernel's
        # single pool lives on node 0, experts_base.py subpool_numa_map = range(count)); numactl
        # --interleave is overridden by the pools' own memory binding, so it is not offered
        ids = tuple(n.id for n in nodes)
        kt = {"distribute": ids, "none": (), "bind": (nodes[0].id,)}
        allowed = tuple(pol for pol in (req.numa_policies or ("distribute",)) if pol in kt) or ("distribute",)
        return tuple((pol, kt[pol]) for pol in allowed)
    allowed = req.numa_policies or ("bind", "interleave", "distribute", "none")
    if hw.os == "windows":
        # no numactl and no --numa on Windows: the OS default ('none', pages spread over the
        # nodes) or a `start /NODE` bind (planner/hardware/windows.py)
        allowed = tuple(pol for pol in allowed if pol in ("bind", "none")) or ("none",)
    gpu_node = hw.gpus[0].numa_node if hw.gpus else None
    bind_node = gpu_node if gpu_node is not None else nodes[0].id
    out = []
    for pol in allowed:
        out.append((pol, (bind_node,) if pol == "bind" else ()))
    return tuple(out)


def validation_trials(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors,
               vram: int, ram: int) -> list[tuple[str, Placement]]:
    """The placements `tune --validate` runs: the plan and the placements around it, most
    informative first (each must fit), as (label, placement):
      1. the plan itself;
      2. two more CPU-expert layers (separates CPU-side time per layer from the GPU side);
      3. the other ubatch (prefill: PCIe copies against GPU compute);
      4. half the threads (per-core against per-node DRAM bandwidth);
      5. the other NUMA policy on multi-node machines (remote/local ratio);
      6. one fewer CPU layer, when it still fits;
      7. op-offload toggled."""

    order = cpu_layer_order(model, pr)
    c = len(p.cpu_moe_layers)
    moe = len(order)
    out: list[tuple[str, Placement]] = [("plan", p)]
    if c + 2 <= moe:
        out.append(("+2 CPU layers", p.with_(cpu_moe_layers=tuple(sorted(order[:c + 2])))))
    elif c + 1 <= moe:
        out.append(("+1 CPU layer", p.with_(cpu_moe_layers=tuple(sorted(order[:c + 1])))))
    other_ub = 2048 if p.n_ubatch < 2048 else 512
    out.append((f"ubatch {other_ub}", p.with_(n_ubatch=other_ub, n_batch=max(p.n_batch, other_ub))))
    if p.n_threads >= 2:
        out.append((f"{p.n_threads // 2} threads", p.with_(n_threads=p.n_threads // 2,
                                                           n_threads_batch=p.n_threads // 2)))
    nodes = [n for n in hw.numa_nodes if n.cpus and not n.memory_only]
    if len(nodes) > 1:
        if p.numa == "bind":
            out.append(("no NUMA policy", p.with_(numa="none", numa_nodes=())))
        else:
            gpu_node = hw.gpus[0].numa_node if hw.gpus and hw.gpus[0].numa_node is not None else nodes[0].id
            out.append((f"bind node {gpu_node}", p.with_(numa="bind", numa_nodes=(gpu_node,))))
    if c >= 1:
        out.append(("-1 CPU layer", p.with_(cpu_moe_layers=tuple(sorted(order[:c - 1])))))
    if p.cpu_moe_layers:
        out.append(("op-offload " + ("off" if p.op_offload else "on"), p.with_(op_offload=not p.op_offload)))
    consts = MemoryConstants()
    return [(lab, q) for lab, q in out if lab == "plan" or not shortfall(model, q, hw, vram, ram, consts, pr)]


def _win_mask(hw: HardwareProfile, node_ids: tuple[int, ...]) -> str:
    """start /AFFINITY's mask for the bound node (launch.cmd reads it from Placement.options)."""
    for n in hw.numa_nodes:
        if n.id in node_ids:
            return affinity_mask(n)
    return affinity_mask(cpu_nodes(hw)[0])


def _min_cpu_layers(model: ModelSpec, base: Placement, order: tuple[int, ...], hw: HardwareProfile,
                    vram: int, ram: int, consts: MemoryConstants, pr: BackendPriors) -> int | None:
    """Fewest CPU layers (in `order`) that fit; None if even all-on-CPU does not fit."""
    lo, hi = 0, len(order)
    if shortfall(model, base.with_(cpu_moe_layers=tuple(sorted(order))), hw, vram, ram, consts, pr):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        p = base.with_(cpu_moe_layers=tuple(sorted(order[:mid])))
        if shortfall(model, p, hw, vram, ram, consts, pr):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _grow_ctx(model: ModelSpec, p: Placement, hw: HardwareProfile, vram: int, ram: int,
              consts: MemoryConstants, pr: BackendPriors, cap: int = 0) -> Placement:
    """Largest context (multiple of 256, up to the model's maximum and `cap`) that still fits."""
    top = model.n_ctx_train or p.n_ctx
    if cap:
        top = min(top, cap)
    if top <= p.n_ctx:
        return p
    lo, hi = p.n_ctx // 256, top // 256
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if shortfall(model, p.with_(n_ctx=mid * 256), hw, vram, ram, consts, pr):
            hi = mid - 1
        else:
            lo = mid
    return p.with_(n_ctx=lo * 256)


def default_ctx(model: ModelSpec, cap: int = DEFAULT_CTX_CAP) -> int:
    """tune's default context: the model's trained context, at most `cap`."""
    return min(model.n_ctx_train or cap, cap)


def choose_plan(model: ModelSpec, hw: HardwareProfile, pr: BackendPriors, req: Request,
                consts: MemoryConstants | None = None) -> SearchResult:
    """The fastest placement for `req.objective` that fits the budgets. Raises InfeasibleError.
    The search owns one memo (memory/cache.py) for all the placements it evaluates.

    With req.ctx_cap (tune's default context) the context is the model's trained context up to
    the cap when a placement fits at it, else the largest that fits; the result's first note
    says which."""
    from dataclasses import replace

    with plan_cache():
        if req.n_ctx is not None or not req.ctx_cap:
            return _choose_plan(model, hw, pr, req, consts)
        target = default_ctx(model, req.ctx_cap)
        trained = (f"the model's trained context of {model.n_ctx_train:,}" if model.n_ctx_train
                   else "the model's trained context is unknown")
        try:
            # its InfeasibleError is only caught: the message (a q4_0 estimate) is not built
            res = _choose_plan(model, hw, pr, replace(req, n_ctx=target), consts, say_why=False)
            capped = model.n_ctx_train and model.n_ctx_train > target
            note = (f"context {target:,}: the default, {trained}"
                    + (f" capped at {req.ctx_cap // 1024}k (its KV cache would take VRAM from the experts)"
                       if capped else "") + "; --ctx N for another")
        except InfeasibleError:
            res = _choose_plan(model, hw, pr, replace(req, min_ctx=min(req.min_ctx, target)), consts)
            note = (f"context {res.best.placement.n_ctx:,}: the largest that fits beside this placement (the default {target:,}, "
                    f"{trained} up to {req.ctx_cap // 1024}k, does not); --ctx N for another")
        return replace(res, why=(note,) + res.why)


def _search_settings(model: ModelSpec, hw: HardwareProfile, pr: BackendPriors, req: Request, ctx0: int,
                     has_gpu: bool, n_gpus: int, ngl: int | None) -> list[Placement]:
    """Every setting the search tries (KV type x NUMA policy x ubatch x op-offload), as a
    placement without CPU layers yet.

    Flash attention stays on (llama.cpp's default on CUDA): it is what makes a quantized V cache
    legal, and K = V types keeps MLA's latent cache legal too. A quantized cache can only buy
    speed by freeing room for one more layer's experts: when it saves less than the smallest
    layer's experts at this context, f16 (preferred) wins and the quantized type is skipped.
    KTransformers: SGLang's --chunked-prefill-size (the plan's n_batch) is the chunk the
    layer-wise GPU prefill uploads the CPU experts for (cost/machine.py)."""
    import itertools

    min_layer = min((layer.expert_bytes for layer in model.moe_layers), default=0)
    kv_f16 = kv_cache_bytes(model, ctx0, "f16", "f16")
    kvs = [kv for kv in req.kv_types if kv_type_legal(model, kv)
           and not (kv != "f16" and has_gpu and kv_f16 - kv_cache_bytes(model, ctx0, kv, kv) < min_layer)]
    ops = (True, False) if has_gpu and pr.op_offload in ("mainline", "ik") else (True,)
    batch0 = default_batch(pr.name)
    out = []
    for kv, (numa, nodes), ub, op in itertools.product(kvs, _numa_options(hw, req, pr), req.ubatches, ops):
        base = Placement(backend=pr.name, n_ctx=ctx0, cache_type_k=kv, cache_type_v=kv, flash_attn=True,
                         n_ubatch=ub, n_batch=max(batch0, ub), numa=numa, numa_nodes=nodes, op_offload=op,
                         n_gpus=n_gpus, n_gpu_layers=ngl)
        base = base.with_(n_threads=req.threads or default_threads(hw, base, pr.name))
        if hw.os == "windows" and numa == "bind":
            base = base.with_(options=PlanOptions(win_affinity_mask=_win_mask(hw, nodes)))
        out.append(base)
    return out


def _place_experts(model: ModelSpec, base: Placement, order: tuple[int, ...], hw: HardwareProfile, vram: int,
                   ram: int, consts: MemoryConstants, pr: BackendPriors, has_gpu: bool,
                   all_cpu: bool = False) -> tuple[Placement | None, str]:
    """(the placement with the fewest CPU-expert layers that fits, '') or (None, what is short).
    Without a GPU every expert is on the CPU."""
    if not has_gpu or all_cpu:
        p = base.with_(cpu_moe_layers=model.moe_layer_indices)
        p = (fit_placement(model, p, hw, vram, consts) or p) if has_gpu else p
        short = shortfall(model, p, hw, vram, ram, consts, pr)
        return (None, short) if short else (p, "")
    c = _min_cpu_layers(model, base, order, hw, vram, ram, consts, pr)
    if c is None:
        return None, shortfall(model, base.with_(cpu_moe_layers=tuple(sorted(order))), hw, vram, ram, consts, pr)
    p = base.with_(cpu_moe_layers=tuple(sorted(order[:c])))
    return fit_placement(model, p, hw, vram, consts) or p, ""


def _rank_key(req: Request):
    """Deterministic ranking: the objective, then the other speed (a decode tie goes to the
    faster prefill and the other way round), then smaller VRAM, then a stable key."""
    def rank(c: Candidate) -> tuple:
        other = c.estimate.decode_tok_s if req.objective == "prefill" else c.estimate.prefill_tok_s
        return (-float(f"{c.score:.6g}"), -float(f"{other:.6g}"), c.estimate.vram_bytes, _stable_key(c.placement))
    return rank


def _choose_plan(model: ModelSpec, hw: HardwareProfile, pr: BackendPriors, req: Request,
                 consts: MemoryConstants | None, say_why: bool = True) -> SearchResult:
    if consts is None:
        from moeplan.planner.memory.constants import memory_constants

        consts = memory_constants(hw, pr.name)
    vram, ram = _budgets(hw, req)
    has_gpu = bool(hw.gpus) and vram > 0
    n_gpus = max(1, len(hw.gpus)) if has_gpu else 0
    order = cpu_layer_order(model, pr)
    ngl = req.n_gpu_layers if has_gpu else None
    if ngl is not None:
        # -ngl N keeps the first blocks wholly on the CPU: only the GPU blocks' experts can move
        cpu_blocks, _ = layer_split(model, Placement(n_gpu_layers=ngl, n_gpus=n_gpus))
        order = tuple(i for i in order if i not in cpu_blocks)
    ctx0 = req.n_ctx or min(req.min_ctx, model.n_ctx_train or req.min_ctx)
    candidates: list[Candidate] = []
    shortfalls: list[str] = []
    for base in _search_settings(model, hw, pr, req, ctx0, has_gpu, n_gpus, ngl):
        p, short = _place_experts(model, base, order, hw, vram, ram, consts, pr, has_gpu, req.all_cpu_moe)
        if p is None:
            shortfalls.append(short)
            continue
        e = _estimate(model, p, hw, pr, req, consts)
        candidates.append(Candidate(p, e, _score(e, req, p.cache_type_k)))
    if not candidates:
        if not say_why:
            raise InfeasibleError(f"{model.name}: no placement fits", "")
        raise infeasible(model, hw, pr, req, vram, ram, consts, shortfalls)
    n_eval = len(candidates)
    candidates.sort(key=_rank_key(req))
    best = candidates[0]
    if req.threads is None and pr.barriers == "ggml-graph" and req.objective != "prefill":
        fewer = _fewer_decode_threads(model, best, hw, pr, req, consts)
        if fewer is not None:
            best = fewer
            n_eval += 1
    best = _no_mmap_if_short(model, best, hw, pr, req, vram, ram, consts)
    if req.n_ctx is None:
        # spare VRAM below the next layer's experts goes to context; decode at the planned
        # depth and the ranking do not depend on it, so only the chosen plan is grown
        grown = _grow_ctx(model, best.placement, hw, vram, ram, consts, pr, req.ctx_cap)
        grown = fit_placement(model, grown, hw, vram, consts) or grown
        e = _estimate(model, grown, hw, pr, req, consts)
        best = Candidate(grown, e, _score(e, req, grown.cache_type_k))
    if backends.behaviour(pr.name).layerwise_gpu_prefill and has_gpu:
        # the layer-wise GPU prefill threshold the estimate assumed (cost/prefill_path.py
        # kt_prefill_crossover_tokens), written into the plan for the emitter
        thr = kt_plan_threshold(model, best.placement, hw, pr, consts)
        options = best.placement.options.with_(kt_gpu_prefill_token_threshold=thr)
        best = Candidate(best.placement.with_(options=options), best.estimate, best.score)
    alts = _distinct_alternatives(candidates[1:], best)
    pareto = pareto_front(model, best.placement, order, hw, pr, req, vram, ram, consts) if has_gpu else ()
    return SearchResult(best=best, alternatives=tuple(alts), pareto=pareto, n_evaluated=n_eval,
                        why=explain(best, candidates, model, hw, req),
                        one_more_gib=one_more_gib(model, best.placement, order, hw, pr, req, vram, ram, consts)
                        if has_gpu else "", workload=req.workload)


def _no_mmap_if_short(model: ModelSpec, best: Candidate, hw: HardwareProfile, pr: BackendPriors, req: Request,
                      vram: int, ram: int, consts: MemoryConstants) -> Candidate:
    """--no-mmap when the mapped file would not fit in the page cache beside the rest (the
    kernel may then evict CPU expert pages: cost/report.py page_cache_short_bytes) and the
    CPU weights fit in anonymous memory; else the plan as it is. Not under --numa distribute:
    read in, every page is first touched by the loading thread, not by the thread that reads
    it in decode, so the node-local reads that policy is chosen for would be lost."""
    if not best.estimate.decode_tok_s_paging or best.placement.numa == "distribute":
        return best
    p = best.placement.with_(load_mode="no-mmap")
    if shortfall(model, p, hw, vram, ram, consts, pr):
        return best
    e = _estimate(model, p, hw, pr, req, consts)
    return Candidate(p, e, _score(e, req, p.cache_type_k))


# decode thread counts tried below the physical cores, as fractions of them
DECODE_THREAD_FRACTIONS = (0.75, 0.5, 0.375, 0.25)
# a smaller decode pool must be this much faster to be chosen (the model's terms are not finer)
FEWER_THREADS_MIN_GAIN = 0.03


def _fewer_decode_threads(model: ModelSpec, best: Candidate, hw: HardwareProfile, pr: BackendPriors,
                          req: Request, consts: MemoryConstants) -> Candidate | None:
    """ggml ends every node of the CPU's graph with a barrier over the decode pool, each about T
    core-to-core hand-overs (cost/graph.py): on a large machine fewer decode threads (-t) can
    still saturate the DRAM and wait less, while prefill keeps every core (-tb; not under
    --numa distribute, whose page placement follows the thread count). The best of a few smaller
    pools when it scores FEWER_THREADS_MIN_GAIN better on the objective (decode, or balanced with
    the prefill it costs), else None."""
    p = best.placement
    cores = p.n_threads
    n_nodes = max(1, len(p.numa_nodes) or (len(cpu_nodes(hw)) if p.numa in ("distribute", "interleave") else 1))
    out = None
    for frac in DECODE_THREAD_FRACTIONS:
        t = max(n_nodes, int(cores * frac) // n_nodes * n_nodes)
        if t >= cores or (out and t == out.placement.n_threads):
            continue
        # under --numa distribute each page is first touched by the thread whose static chunk
        # holds it, so the pages follow the first pass's thread count: -tb must equal -t there
        q = p.with_(n_threads=t, n_threads_batch=0 if p.numa == "distribute" else cores)
        e = _estimate(model, q, hw, pr, req, consts)
        score = _score(e, req, q.cache_type_k)
        if score > (out.score if out else best.score * (1 + FEWER_THREADS_MIN_GAIN)):
            out = Candidate(q, e, score)
    return out


def _stable_key(p: Placement) -> tuple:
    return (p.cache_type_k, p.n_ubatch, not p.op_offload, p.numa, p.n_ctx, p.cpu_moe_layers)


def _distinct_alternatives(cands: list[Candidate], best: Candidate, n: int = 5) -> list[Candidate]:
    seen = {_label(best.placement)}
    out = []
    for c in cands:
        lab = _label(c.placement)
        if lab in seen:
            continue
        seen.add(lab)
        out.append(c)
        if len(out) >= n:
            break
    return out


def _label(p: Placement) -> str:
    return (f"{len(p.cpu_moe_layers)} CPU layers, KV {p.cache_type_k}, ub {p.n_ubatch}"
            f"{'' if p.op_offload else ', no op-offload'}, numa {p.numa}")


def build_plan(model: ModelSpec, hw: HardwareProfile, result: SearchResult, objective: str, size_arg: str = "",
               moeplan_version: str = "") -> Plan:
    """The Plan of a search result: the chosen placement, why, the alternatives and the front."""
    notes = tuple(result.why) + ((f"one more GiB of VRAM: {result.one_more_gib}",) if result.one_more_gib else ())
    notes += tuple(n for g in hw.gpus for n in unified_notes(g, 0))  # an APU's iGPU: one memory (hardware/vendors.py)
    return Plan(model=model_ref(model, size_arg), hardware_name=hw.name, hardware_digest=digest_of(hw),
                placement=result.best.placement, estimate=result.best.estimate, objective=objective,
                alternatives=tuple(to_alternative(c) for c in result.alternatives), pareto=result.pareto,
                notes=notes + (f"{result.n_evaluated} placements evaluated",), moeplan_version=moeplan_version,
                hardware_os=hw.os)


def to_alternative(c: Candidate) -> Alternative:
    return Alternative(label=_label(c.placement), placement=c.placement, decode_tok_s=c.estimate.decode_tok_s,
                       prefill_tok_s=c.estimate.prefill_tok_s, vram_bytes=c.estimate.vram_bytes,
                       ram_bytes=c.estimate.ram_bytes)


def pareto_front(model: ModelSpec, best: Placement, order: tuple[int, ...], hw: HardwareProfile,
                 pr: BackendPriors, req: Request, vram: int, ram: int, consts: MemoryConstants,
                 max_points: int = 24) -> tuple[Alternative, ...]:
    """VRAM against decode speed: the best settings with every feasible CPU-layer count
    (each point is the fastest for its VRAM, since speed falls as layers leave the GPU)."""
    n = len(order)
    step = max(1, math.ceil((n + 1) / max_points))
    counts = sorted(set(range(0, n + 1, step)) | {n, len(best.cpu_moe_layers)})
    out = []
    for c in counts:
        p = best.with_(cpu_moe_layers=tuple(sorted(order[:c])))
        if shortfall(model, p, hw, 1 << 62, ram, consts, pr):
            continue  # RAM-infeasible whatever the VRAM
        p = fit_placement(model, p, hw, vram, consts) or fit_placement(model, p, hw, 1 << 62, consts) or p
        e = _estimate(model, p, hw, pr, req, consts)
        out.append(Alternative(label=f"{c} CPU layers", placement=p, decode_tok_s=e.decode_tok_s,
                               prefill_tok_s=e.prefill_tok_s, vram_bytes=e.vram_bytes, ram_bytes=e.ram_bytes))
    return tuple(sorted(out, key=lambda a: a.vram_bytes))


def one_more_gib(model: ModelSpec, best: Placement, order: tuple[int, ...], hw: HardwareProfile,
                 pr: BackendPriors, req: Request, vram: int, ram: int, consts: MemoryConstants) -> str:
    """What 1 GiB more VRAM would buy (the next layer's experts, or more context)."""
    c = len(best.cpu_moe_layers)
    if c == 0:
        return "nothing for speed: every expert already sits on the GPU"
    extra = vram + GIB
    p = best.with_(cpu_moe_layers=tuple(sorted(order[:c - 1])))
    base_e = _estimate(model, best, hw, pr, req, consts)
    k = 0
    while k < c and not shortfall(model, best.with_(cpu_moe_layers=tuple(sorted(order[:c - k - 1]))), hw,
                                  extra, ram, consts, pr):
        k += 1
    if k == 0 and best.n_gpus > 1:
        return "not enough for another layer's experts on any GPU"
    if k == 0:
        mem_next = estimate_memory(model, p, consts).vram_required_bytes
        need = mem_next - vram
        return f"not enough for another layer's experts (the next needs {need / GIB:.2f} GiB more)"
    q = best.with_(cpu_moe_layers=tuple(sorted(order[:c - k])))
    q = fit_placement(model, q, hw, extra, consts) or q
    e = _estimate(model, q, hw, pr, req, consts)
    gain = e.decode_tok_s / base_e.decode_tok_s - 1
    layers = "layers'" if k > 1 else "layer's"
    return (f"{k} more {layers} experts on the GPU: decode "
            f"{base_e.decode_tok_s:.1f} -> {e.decode_tok_s:.1f} tok/s (+{gain:.0%})")


def _request_text(req: Request, e: Estimate) -> str:
    """One placement's figures as the objective sees them."""
    figs = f"prefill {e.prefill_tok_s:,.0f} tok/s, decode {e.decode_tok_s:.2f} tok/s"
    if req.objective == "workload" and req.workload is not None:
        return f"{req.workload.seconds(e.prefill_tok_s, e.decode_tok_s):.1f} s per {req.workload.name} request ({figs})"
    return figs


def _versus(best: Candidate, cands: list[Candidate], req: Request, other: str, differs) -> str:
    """The chosen placement's figures against the best candidate that differs in one setting
    (`differs`), as the table shows them; '' when there is none."""
    others = [c for c in cands if differs(c.placement)]
    if not others:
        return ""
    o = max(others, key=lambda c: c.score)
    return f"{_request_text(req, best.estimate)}; {other}: {_request_text(req, o.estimate)}"


def _objective_line(req: Request) -> str:
    if req.objective == "workload" and req.workload is not None:
        return (f"chosen for the shortest request: {req.workload.describe()} "
                "(--workload chat|agent|PROMPT:GEN[:DEPTH], or --objective decode|prefill)")
    return {"decode": "chosen for decode speed (--objective decode): prefill only breaks ties",
            "prefill": "chosen for prefill speed (--objective prefill)",
            "balanced": f"chosen for a {BALANCED_PROMPT}-token prompt and {BALANCED_GEN} generated tokens "
                        "(--objective balanced)"}.get(req.objective, f"objective {req.objective}")


def numa_table(cands: list[Candidate], req: Request) -> tuple[str, ...]:
    """Every NUMA policy's best predicted figures (one line each), for a machine with several
    nodes."""
    best_of: dict[str, Candidate] = {}
    for c in cands:
        pol = c.placement.numa
        if pol not in best_of or c.score > best_of[pol].score:
            best_of[pol] = c
    if len(best_of) < 2:
        return ()
    ranked = sorted(best_of.items(), key=lambda kv: -kv[1].score)
    win, runner = ranked[0], ranked[1]
    gain = win[1].score / max(runner[1].score, 1e-12) - 1
    what = "request time" if req.objective == "workload" else req.objective
    out = [f"NUMA: {win[0]} predicted best for {what}, {gain:+.0%} over {runner[0]} (every policy below; "
           "--numa POLICY to choose one)"]
    for pol, c in ranked:
        q = c.placement
        how = {"bind": f" node {','.join(map(str, q.numa_nodes))} (numactl --cpunodebind={','.join(map(str, q.numa_nodes))}"
                       f" --membind={','.join(map(str, q.numa_nodes))}: the CPU part fits that node)",
               "distribute": " (--numa distribute; its figure needs the page cache dropped before the first run)",
               "interleave": " (numactl --interleave=all)", "none": " (first touch: pages where the loader put them)"}
        out.append(f"  {pol}{how.get(pol, '')}, {q.n_threads} threads: {_request_text(req, c.estimate)}")
    return tuple(out)


def explain(best: Candidate, cands: list[Candidate], model: ModelSpec, hw: HardwareProfile,
            req: Request | None = None) -> tuple[str, ...]:
    """Why the chosen placement wins, from the same figures the tables show."""
    from moeplan.planner.cost.estimate import BOTTLENECK_TEXT

    req = req or Request()
    p, e = best.placement, best.estimate
    why = [_objective_line(req), f"bottleneck: {BOTTLENECK_TEXT.get(e.bottleneck, e.bottleneck)}"]
    n_moe = len(model.moe_layers)
    c = len(p.cpu_moe_layers)
    if hw.gpus:
        why.append(f"{n_moe - c} of {n_moe} MoE layers keep their experts on the GPU: "
                   f"the most that fit beside the KV cache at ctx {p.n_ctx}")
    if p.cache_type_k != "f16":
        f16 = [x for x in cands if x.placement.cache_type_k == "f16"]
        if f16:
            gain = e.decode_tok_s / max(x.estimate.decode_tok_s for x in f16) - 1
            why.append(f"KV {p.cache_type_k}: frees VRAM for more expert layers (+{gain:.0%} decode over f16)")
    if p.numa != "none":
        why.append(f"NUMA {p.numa}: {e.factors.numa_note if e.factors else ''}")
    if hw.os != "windows":
        why += numa_table(cands, req)
    cores = physical_cores(hw, p)
    if p.n_threads < cores:
        how = (f"prefill on {p.threads_batch} (-tb)" if p.threads_batch > p.n_threads else
               "prefill too (--numa distribute places each page by the thread count that first reads it)")
        why.append(f"{p.n_threads} of {cores} cores decode (-t), {how}: each graph node ends in a barrier that "
                   f"costs every thread a core-to-core hand-over, and {p.n_threads} threads still read the "
                   "experts at the DRAM's rate")
    if p.cpu_moe_layers and hw.gpus:
        vs = _versus(best, cands, req, "with op-offload" if not p.op_offload else "without",
                     lambda q: q.op_offload != p.op_offload and q.numa == p.numa)
        saved = op_offload_vram_bytes(model, p)
        vram = f", {saved / GIB:.2f} GiB of VRAM for the staged expert copy" if saved else ""
        if vs:
            why.append((f"no op-offload (prefill computes the CPU experts on the CPU; saves{vram[1:] or ' no VRAM'}): "
                        if not p.op_offload else
                        f"op-offload (prefill copies the CPU experts to the GPU per ubatch{vram}): ") + vs)
    if p.load_mode == "no-mmap":
        why.append(f"--no-mmap: the {model.file_bytes / 1e9:.1f} GB file does not fit in RAM beside the buffers and "
                   "the OS; mapped, the kernel may evict CPU expert pages and keep those of the tensors copied to the "
                   "GPU (decode then reads experts from the disk), read in, the CPU weights stay in memory")
    if hw.os == "windows":
        why += _windows_why(best, cands, hw)
    return tuple(why)


def _windows_why(best: Candidate, cands: list[Candidate], hw: HardwareProfile) -> list[str]:
    """What Windows changes: the WDDM VRAM reserve, and what binding a node gains or costs and
    how to get it (there is no numactl, and llama.cpp's --numa does nothing on Windows)."""
    out = [n for n in (reserve_note(hw),) if n]
    if len(cpu_nodes(hw)) < 2:
        return out
    p, e = best.placement, best.estimate
    binds = [c for c in cands if c.placement.numa == "bind"]
    spread = [c for c in cands if c.placement.numa != "bind"]
    if p.numa == "bind":
        node = p.numa_nodes[0] if p.numa_nodes else 0
        mask = p.options.win_affinity_mask
        line = f"NUMA on Windows: bound to node {node} with {bind_hint(node, mask)}"
        if spread:
            d = max(c.estimate.decode_tok_s for c in spread)
            line += (f"; the Windows default (pages spread over the nodes) would decode at {d:.1f} tok/s, "
                     f"the bind gains {e.decode_tok_s / d - 1:+.0%}")
        return out + [line]
    if not binds:
        return out + ["NUMA on Windows: the Windows default spreads pages over the nodes "
                      f"({e.decode_tok_s:.1f} tok/s); binding one node (`start /NODE n`) was not possible: the "
                      "model's host memory does not fit one node's RAM"]
    b = max(binds, key=lambda c: c.estimate.decode_tok_s)
    node = b.placement.numa_nodes[0] if b.placement.numa_nodes else 0
    mask = b.placement.options.win_affinity_mask
    gain = b.estimate.decode_tok_s / max(e.decode_tok_s, 1e-9) - 1
    verdict = "would gain" if gain > 0 else "would change decode by"
    return out + [f"NUMA on Windows: the plan keeps the Windows default (pages spread over the nodes, "
                  f"{e.decode_tok_s:.1f} tok/s); binding node {node} {verdict} {gain:+.0%} "
                  f"({b.estimate.decode_tok_s:.1f} tok/s with {b.placement.n_threads} threads): {bind_hint(node, mask)}"]


def infeasible(model: ModelSpec, hw: HardwareProfile, pr: BackendPriors, req: Request, vram: int, ram: int,
               consts: MemoryConstants, shortfalls: list[str]) -> InfeasibleError:
    """Say what is short by how much, and what would make it fit."""
    ctx = req.n_ctx or req.min_ctx
    p = Placement(backend=pr.name, n_ctx=ctx, cache_type_k="q4_0", cache_type_v="q4_0",
                  cpu_moe_layers=model.moe_layer_indices, n_gpus=1 if hw.gpus else 0)
    mem = estimate_memory(model, p, consts)
    parts = []
    if hw.gpus and mem.vram_required_bytes > vram:
        parts.append(f"even with every expert on the CPU and a q4_0 KV cache it needs "
                     f"{mem.vram_required_bytes / GIB:.1f} GiB of VRAM (with the 1 GiB margin), "
                     f"the budget is {vram / GIB:.1f} GiB")
    if mem.ram_anon_bytes > ram - OS_RESERVE_BYTES or mem.ram_bytes > ram:
        parts.append(f"host RAM: needs {mem.ram_bytes / GIB:.1f} GiB, has {ram / GIB:.1f} GiB")
    if not parts:
        parts = sorted(set(shortfalls))[:2] or ["no placement fits"]
    hint = "a smaller quant (--quant), a shorter --ctx, more VRAM (--vram) or RAM (--ram)"
    if model.n_ctx_train and ctx > model.n_ctx_train:
        parts.append(f"--ctx {ctx:,} is above the model's maximum context of {model.n_ctx_train:,} tokens")
        hint = f"--ctx {model.n_ctx_train:,} or less (the model's maximum context)"
    return InfeasibleError(f"{model.name}: no placement fits: " + "; ".join(parts), f"try {hint}")
