"""Decode: the terms of one decode step (seconds), formulas in cost/estimate.py's docstring."""
from __future__ import annotations

from dataclasses import dataclass

from moeplan.planner.cost import attention
from moeplan.planner.cost.multi_device import _multi_gpu_decode_terms
from moeplan.planner.cost.priors import BackendPriors
from moeplan.planner.cost.resolve import Factors
from moeplan.planner.cost.work import (
    S_HOP_REL_ERR,
    S_HOP_S,
    SplitLayers,
    _cpu_block_barriers,
    _overlap_text,
    _split_hops,
    attention_flops_per_token,
    cache_hit_rate,
    compute_excess,
    cpu_attention_decode,
    dense_dot_elements,
    distinct_experts,
    excess_term,
    layer_dot_elements,
    ngl_split,
    non_expert_params,
)
from moeplan.planner.hardware.profile import HardwareProfile
from moeplan.planner.memory.accounting import kv_read_bytes
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement
from moeplan.planner.plan import Term


def _attention_beyond_kv(name: str, ca: attention.CpuAttention, kv_bytes: float, f: Factors, depth: int,
                         terms: list[Term], errs: dict[str, float]) -> None:
    """Decode attention at depth as ggml-cpu / iqk run it (cost/attention.py), charged beyond
    the KV's read from DRAM that another term already counts."""
    if not ca.seconds:
        return
    t_kv = kv_bytes / f.bw_cpu_bytes_per_s.value
    terms.append(Term(name, compute_excess(ca.seconds, t_kv), "cpu-compute",
                      _overlap_text(f"{t_kv * 1e3:.2f} ms KV read", f"{ca.seconds * 1e3:.2f} ms")
                      + f" at depth {depth}: " + ca.formula))
    errs[name] = ca.rel_err


def _cpu_block_decode_terms(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors, f: Factors, depth: int,
                            n_step: int, split: SplitLayers, kv_cpu: float, terms: list[Term],
                            errs: dict[str, float]) -> None:
    """Decode of the blocks -ngl leaves on the CPU (their routed experts are in
    cpu_experts_read / cpu_compute_excess with the other CPU experts):
      cpu_blocks_read    = (R_dense_cpu + KV_read_cpu(depth)) / BW_c
      cpu_blocks_compute_excess = compute_excess(P_dense_cpu * n_step / r_dot, cpu_blocks_read)
      cpu_blocks_attention = the CPU blocks' attention as cost/attention.py runs it, beyond
                             their KV read
      cpu_blocks_barriers  = graph-node barriers of the CPU blocks (cost/graph.py) x one
                             barrier of the decode pool (Factors.barrier_s), as a CPU-only run's
      split_hop          = hops x (s_hop + 4 E n_step / B_h2d), hops = 1 (+1 when the output
                           layer is on the CPU) - one hidden state over PCIe per hand-over"""
    b = split.dense_bytes + kv_cpu
    t_read = b / f.bw_cpu_bytes_per_s.value
    terms.append(Term("cpu_blocks_read", t_read, "cpu-mem",
                      f"({split.dense_bytes / 1e9:.2f} dense + {kv_cpu / 1e9:.3f} KV at depth {depth}) GB of "
                      f"{len(split.blocks)} CPU blocks / {f.bw_cpu_bytes_per_s.value / 1e9:.1f} GB/s"))
    errs["cpu_blocks_read"] = f.bw_cpu_bytes_per_s.rel_err
    dot = dense_dot_elements(model, pr.type_cost, split.blocks, output=not split.out_gpu) * n_step
    terms.append(excess_term("cpu_blocks_compute_excess", dot, f.cpu_dot_elem_per_s.value, t_read))
    errs["cpu_blocks_compute_excess"] = f.cpu_dot_elem_per_s.rel_err
    # as a CPU-only run's attention; the KV's read is in cpu_blocks_read
    _attention_beyond_kv("cpu_blocks_attention", cpu_attention_decode(model, p, hw, pr, f, depth, n_step, split.blocks),
                         kv_cpu, f, depth, terms, errs)
    n_bar = _cpu_block_barriers(model, pr, tuple(l for l in model.trunk_layers if l.index in split.blocks))
    terms.append(Term("cpu_blocks_barriers", n_bar * f.barrier_s, "sync",
                      f"{n_bar} graph-node barriers of {split.n_trunk} CPU blocks x {f.barrier_s * 1e6:.1f} us"))
    errs["cpu_blocks_barriers"] = 0.5
    hops = _split_hops(split, model)
    if hops:
        act = 4 * model.n_embd * n_step
        h2d = max(1.0, f.h2d_bytes_per_s.value)
        terms.append(Term("split_hop", hops * (S_HOP_S + act / h2d), "sync",
                          f"{hops} host<->GPU hop(s) x ({S_HOP_S * 1e6:.0f} us + {act / 1e3:.1f} kB / "
                          f"{h2d / 1e9:.1f} GB/s)"))
        errs["split_hop"] = S_HOP_REL_ERR


@dataclass(frozen=True)
class _Step:
    """What every part of a decode step's terms shares."""

    n_step: int  # tokens verified per step
    touched: float  # share of a layer's experts read
    per_tok: float  # k / N
    hit: float  # GPU expert-cache hit rate over the CPU layers
    split: SplitLayers
    r_dense: float  # dense bytes read on the GPU
    kv_bytes: float  # KV bytes read on the GPU (or all of them, CPU-only)
    kv_cpu: float  # KV bytes of the -ngl CPU blocks
    gpu_exp: float  # GPU experts' bytes read
    cpu_exp: list  # the CPU layers
    cpu_bytes: float  # CPU experts' bytes read
    cpu_dot: float  # their Q8_0-equivalent weights


def _step(model: ModelSpec, p: Placement, pr: BackendPriors, f: Factors, depth: int) -> _Step:
    k, n = p.n_experts_used or model.n_experts_used, model.n_experts
    split = ngl_split(model, p, f)
    cpu = set(p.cpu_moe_layers) | split.moe_on_cpu
    n_step = 1 + max(0, p.n_draft)  # tokens verified per step
    touched = distinct_experts(n, k, n_step) / max(1, n) if n else 0.0  # share of a layer's experts read
    per_tok = k / n if n else 0.0
    # GPU expert cache over the CPU layers
    hit = 0.0
    if p.gpu_expert_cache_bytes and cpu and n:
        s_exp = sum(layer.expert_bytes for layer in model.moe_layers if layer.index in cpu) / len(cpu) / n
        per_layer = p.gpu_expert_cache_bytes / max(1.0, s_exp) / len(cpu)
        hit = cache_hit_rate(per_layer, n, pr.zipf_s)
    kv_bytes = kv_read_bytes(model, depth + n_step - 1, p.cache_type_k, p.cache_type_v) if depth or n_step else 0
    kv_cpu = (kv_read_bytes(model, depth + n_step - 1, p.cache_type_k, p.cache_type_v, blocks=set(split.blocks))
              if split.blocks and kv_bytes else 0)
    cpu_exp = [layer for layer in model.moe_layers if layer.index in cpu]
    dots = layer_dot_elements(model, pr.type_cost)
    return _Step(n_step=n_step, touched=touched, per_tok=per_tok, hit=hit, split=split,
                 r_dense=model.dense_bytes_read_per_token - split.dense_bytes, kv_bytes=kv_bytes - kv_cpu,
                 kv_cpu=kv_cpu,
                 gpu_exp=sum(layer.expert_bytes for layer in model.moe_layers if layer.index not in cpu) * touched,
                 cpu_exp=cpu_exp, cpu_bytes=sum(layer.expert_bytes for layer in cpu_exp) * touched,
                 cpu_dot=sum(dots[layer.index] for layer in cpu_exp) * per_tok * n_step)


def _cpu_only_decode(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors, f: Factors, depth: int,
                     c: _Step, terms: list[Term], errs: dict[str, float]) -> None:
    n_step = c.n_step
    all_bytes = c.r_dense + sum(layer.expert_bytes for layer in model.moe_layers) * c.touched + c.kv_bytes
    all_dot = (dense_dot_elements(model, pr.type_cost) * n_step
               + sum(layer_dot_elements(model, pr.type_cost).values()) * c.per_tok * n_step)
    t_read = all_bytes / f.bw_cpu_bytes_per_s.value
    terms.append(Term("cpu_weights_read", t_read, "cpu-mem",
                      f"{all_bytes / 1e9:.2f} GB / {f.bw_cpu_bytes_per_s.value / 1e9:.1f} GB/s"))
    errs["cpu_weights_read"] = f.bw_cpu_bytes_per_s.rel_err
    terms.append(excess_term("cpu_compute_excess", all_dot, f.cpu_dot_elem_per_s.value, t_read))
    errs["cpu_compute_excess"] = f.cpu_dot_elem_per_s.rel_err
    # the KV's first read from DRAM is in cpu_weights_read
    _attention_beyond_kv("cpu_attention", cpu_attention_decode(model, p, hw, pr, f, depth, n_step),
                         c.kv_bytes, f, depth, terms, errs)
    n_bar = _cpu_block_barriers(model, pr, model.trunk_layers)
    terms.append(Term("barriers", n_bar * f.barrier_s, "sync",
                      f"{n_bar} graph-node barriers of {len(model.trunk_layers)} layers x "
                      f"{f.barrier_s * 1e6:.1f} us"))


def _gpu_decode(model: ModelSpec, p: Placement, f: Factors, depth: int, c: _Step, terms: list[Term],
                errs: dict[str, float]) -> None:
    """One GPU: its weights, KV and (on a slow device) compute beyond the reads."""
    r_dense, gpu_exp, cpu_bytes, hit, split, n_step = c.r_dense, c.gpu_exp, c.cpu_bytes, c.hit, c.split, c.n_step
    t_gw = (r_dense + gpu_exp + cpu_bytes * hit) / f.bw_gpu_bytes_per_s.value
    terms.append(Term("gpu_weights_read", t_gw, "gpu-mem",
                      f"({r_dense / 1e9:.2f} dense + {gpu_exp / 1e9:.2f} GPU experts"
                      + (f" + {cpu_bytes * hit / 1e9:.2f} cached" if hit else "")
                      + f") GB / {f.bw_gpu_bytes_per_s.value / 1e9:.0f} GB/s"))
    errs["gpu_weights_read"] = f.bw_gpu_bytes_per_s.rel_err
    # batch-1 matmuls on a GPU are memory-bound; the term only shows for a slow device
    # (the executor's CPU stand-in): 2 FLOP per weight read on the GPU side
    cpu = {layer.index for layer in c.cpu_exp}
    gpu_params = (non_expert_params(model) - split.params + sum(layer.expert_elements for layer in model.moe_layers
                                                                if layer.index not in cpu) * c.touched) * n_step
    t_gc = 2 * gpu_params / max(1.0, f.gpu_flop_per_s.value)
    if t_gc > t_gw:
        terms.append(Term("gpu_compute_excess", t_gc - t_gw, "gpu-compute",
                          f"max(0, {2 * gpu_params / 1e9:.1f} GFLOP / {f.gpu_flop_per_s.value / 1e9:.0f} GFLOP/s"
                          f" - read time)"))
        errs["gpu_compute_excess"] = f.gpu_flop_per_s.rel_err
    if c.kv_bytes:
        # -nkvo (kv_offload False): the cache sits in RAM and is read at the host's rate
        kv_bw = f.bw_gpu_bytes_per_s if p.kv_offload else f.bw_cpu_bytes_per_s
        t_kv = c.kv_bytes / kv_bw.value
        terms.append(Term("kv_read", t_kv, "gpu-mem" if p.kv_offload else "cpu-mem",
                          f"{c.kv_bytes / 1e9:.3f} GB of KV{'' if p.kv_offload else ' in RAM'} at depth {depth}"))
        errs["kv_read"] = kv_bw.rel_err
        attn = (attention_flops_per_token(model, depth) - split.attention_flops(model, depth)) * n_step
        t_af = attn / max(1.0, f.gpu_flop_per_s.value)
        if t_af > t_kv:
            terms.append(Term("attention_compute_excess", t_af - t_kv, "gpu-compute",
                              f"{attn / 1e9:.1f} GFLOP of attention at depth {depth} beyond the KV read"))
            errs["attention_compute_excess"] = f.gpu_flop_per_s.rel_err


def _cpu_experts_decode(model: ModelSpec, p: Placement, pr: BackendPriors, f: Factors, resident_share: float,
                        c: _Step, terms: list[Term], errs: dict[str, float]) -> None:
    """The CPU layers' experts beside a GPU: streamed over PCIe (vLLM/SGLang), or read and
    multiplied by the CPU with a hand-over per layer and NVMe for pages not in RAM."""
    cpu_exp, cpu_bytes, split = c.cpu_exp, c.cpu_bytes, c.split
    if pr.op_offload == "weights":
        # vLLM/SGLang --cpu-offload-gb: the offloaded layers' weights cross PCIe every step
        full = sum(layer.expert_bytes for layer in cpu_exp)
        terms.append(Term("pcie_weights", full / max(1.0, f.h2d_bytes_per_s.value), "pcie",
                          f"{full / 1e9:.2f} GB offloaded weights / {f.h2d_bytes_per_s.value / 1e9:.1f} GB/s"))
        errs["pcie_weights"] = f.h2d_bytes_per_s.rel_err
        return
    miss = 1.0 - c.hit
    t_read = cpu_bytes * miss / f.bw_cpu_bytes_per_s.value
    terms.append(Term("cpu_experts_read", t_read, "cpu-mem",
                      f"{cpu_bytes * miss / 1e9:.2f} GB / {f.bw_cpu_bytes_per_s.value / 1e9:.1f} GB/s "
                      f"({f.numa_note})"))
    errs["cpu_experts_read"] = f.bw_cpu_bytes_per_s.rel_err
    terms.append(excess_term("cpu_compute_excess", c.cpu_dot * miss, f.cpu_dot_elem_per_s.value, t_read))
    errs["cpu_compute_excess"] = f.cpu_dot_elem_per_s.rel_err
    # a GPU block whose experts are on the CPU hands over twice per layer; a whole CPU
    # block does not (its barriers are in cpu_blocks_barriers); KTransformers' G GPU
    # experts of every layer leave CPU experts, and a hand-over, in every layer
    n_sync = sum(1 for layer in cpu_exp if layer.index not in split.blocks)
    if p.options.kt_num_gpu_experts is not None:
        n_sync = len(model.moe_layers)
    if n_sync or not split.blocks:
        terms.append(Term("sync", n_sync * f.s_sync_s.value, "sync",
                          f"{n_sync} CPU layers x {f.s_sync_s.value * 1e6:.0f} us"))
        errs["sync"] = f.s_sync_s.rel_err
    if resident_share < 1.0:
        miss_bytes = cpu_bytes * miss * (1.0 - resident_share)
        terms.append(Term("nvme_read", miss_bytes / f.nvme_bytes_per_s.value, "nvme",
                          f"{1 - resident_share:.0%} of CPU expert pages not in RAM: "
                          f"{miss_bytes / 1e9:.2f} GB / {f.nvme_bytes_per_s.value / 1e9:.1f} GB/s"))
        errs["nvme_read"] = f.nvme_bytes_per_s.rel_err


def estimate_decode_terms(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors,
                          f: Factors, depth: int, resident_share: float = 1.0,
                          devices: tuple = ()) -> tuple[list[Term], dict[str, float], float]:
    """Terms of one decode step (seconds), their errors, and tokens produced per step."""
    c = _step(model, p, pr, f, depth)
    terms: list[Term] = []
    errs: dict[str, float] = {}
    if f.cpu_only:
        _cpu_only_decode(model, p, hw, pr, f, depth, c, terms, errs)
    elif devices:
        _multi_gpu_decode_terms(model, p, hw, pr, f, depth, c.n_step, c.touched, devices, terms, errs)
    else:
        _gpu_decode(model, p, f, depth, c, terms, errs)
    if not f.cpu_only:
        n_gpu_blocks = len(model.trunk_layers) - c.split.n_trunk
        terms.append(Term("gpu_launch", n_gpu_blocks * f.s_layer_gpu_s.value, "gpu-compute",
                          f"{n_gpu_blocks} layers x {f.s_layer_gpu_s.value * 1e6:.0f} us"))
        errs["gpu_launch"] = f.s_layer_gpu_s.rel_err
        if c.split.blocks:
            _cpu_block_decode_terms(model, p, hw, pr, f, depth, c.n_step, c.split, c.kv_cpu, terms, errs)
        if c.cpu_exp:
            _cpu_experts_decode(model, p, pr, f, resident_share, c, terms, errs)
    if pr.s_layer_host_s:
        n_blocks = len(model.trunk_layers) * c.n_step
        terms.append(Term("block_dispatch", n_blocks * pr.s_layer_host_s, "sync",
                          f"{n_blocks} blocks x {pr.s_layer_host_s * 1e6:.0f} us of host op dispatch"))
        errs["block_dispatch"] = pr.err("s_sync_s")
    if pr.s_expert_op_s and model.moe_layers:
        n_launch = len(model.moe_layers) * (p.n_experts_used or model.n_experts_used) * c.n_step
        terms.append(Term("expert_launch", n_launch * pr.s_expert_op_s, "sync",
                          f"{n_launch} expert FFNs x {pr.s_expert_op_s * 1e6:.0f} us (one op group each)"))
        errs["expert_launch"] = pr.err("s_sync_s")
    terms.append(Term("per_token", f.t_token_s.value, "sync", "sampling, graph build, host sync"))
    errs["per_token"] = f.t_token_s.rel_err
    a = min(max(p.draft_accept, 0.0), 0.999)
    tokens_per_step = (1 - a ** c.n_step) / (1 - a) if p.n_draft else 1.0
    return terms, errs, tokens_per_step
