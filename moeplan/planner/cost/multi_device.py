"""Several GPUs under a layer split: each device reads its own blocks at its own bandwidth, one
after another (a pipeline with one token in flight), plus one hop per device boundary.
"""
from __future__ import annotations

from moeplan.planner.cost import gpu_kernels
from moeplan.planner.cost.priors import BackendPriors
from moeplan.planner.cost.resolve import PCIE_PAYLOAD, Factors, _fig
from moeplan.planner.cost.work import S_HOP_REL_ERR, S_HOP_S
from moeplan.planner.hardware.profile import HardwareProfile
from moeplan.planner.memory.accounting import kv_read_bytes
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement
from moeplan.planner.plan import Term


def device_link_bytes_per_s(hw: HardwareProfile, f: Factors, index: int) -> float:
    """Host<->GPU copy rate of GPU `index` (its own PCIe link), else the first GPU's figure."""
    if index < len(hw.gpus):
        fig = _fig(hw.gpus[index].h2d_bytes_per_s)
        base = _fig(hw.gpus[0].h2d_bytes_per_s)
        if fig:
            # the first GPU's achieved share of its own figure, else the copy share of a link
            return fig[0] * (f.h2d_bytes_per_s.value / max(1.0, base[0]) if base else PCIE_PAYLOAD)
    return f.h2d_bytes_per_s.value


def device_bw_bytes_per_s(hw: HardwareProfile, f: Factors, index: int) -> float:
    """Achievable memory bandwidth of GPU `index`: its own figure times the same eta_gpu."""
    base = _fig(hw.gpus[0].mem_bw_bytes_per_s) if hw.gpus else None
    fig = _fig(hw.gpus[index].mem_bw_bytes_per_s) if index < len(hw.gpus) else None
    if fig and base:
        return f.bw_gpu_bytes_per_s.value * fig[0] / base[0]
    return f.bw_gpu_bytes_per_s.value


def _device_read_bytes(model: ModelSpec, dev, touched: float, depth: int, p: Placement) -> tuple[float, float]:
    """(weight bytes, KV bytes) GPU `dev` reads per decoded token."""
    blocks = set(dev.blocks)
    w = 0.0
    for layer in model.trunk_layers:
        if layer.index in blocks:
            w += layer.resident_bytes
            if layer.kind == "moe" and layer.index in dev.gpu_expert_blocks:
                w += layer.expert_bytes * touched
    if dev.output:
        w += sum(t.n_bytes for t in model.globals if t.group != "embed")
    kv = kv_read_bytes(model, depth, p.cache_type_k, p.cache_type_v, blocks=blocks) if depth else 0
    return w, kv


def _multi_gpu_decode_terms(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors, f: Factors,
                            depth: int, n_step: int, touched: float, devices: tuple, terms: list[Term],
                            errs: dict[str, float]) -> None:
    """Layer split: the devices run one after another (a pipeline with one token in flight),
    each reading its own blocks' weights and KV at its own bandwidth, plus one hop per
    boundary (S_HOP_S + the hidden state over the slower of the two links)."""
    parts, kv_parts = [], []
    t_w = t_kv = 0.0
    for d in devices:
        w, kv = _device_read_bytes(model, d, touched, depth + n_step - 1, p)
        bw = device_bw_bytes_per_s(hw, f, d.index)
        t_w += w / bw
        t_kv += kv / bw
        parts.append(f"GPU{d.index} {w / 1e9:.2f} GB / {bw / 1e9:.0f} GB/s")
        if kv:
            kv_parts.append(f"GPU{d.index} {kv / 1e9:.3f} GB")
    terms.append(Term("gpu_weights_read", t_w, "gpu-mem", "pipeline: " + " + ".join(parts)))
    errs["gpu_weights_read"] = f.bw_gpu_bytes_per_s.rel_err
    if t_kv:
        terms.append(Term("kv_read", t_kv, "gpu-mem", f"KV at depth {depth}: " + " + ".join(kv_parts)))
        errs["kv_read"] = f.bw_gpu_bytes_per_s.rel_err
    used = [d for d in devices if d.blocks or d.output]
    hops = max(0, len(used) - 1)
    if hops:
        act = 4 * model.n_embd * n_step
        t_h = 0.0
        for a, b in zip(used, used[1:]):
            link = min(device_link_bytes_per_s(hw, f, a.index), device_link_bytes_per_s(hw, f, b.index))
            t_h += S_HOP_S + act / max(1.0, link)
        terms.append(Term("device_hops", t_h, "sync",
                          f"{hops} hop(s) between GPUs x ({S_HOP_S * 1e6:.0f} us + {act / 1e3:.0f} kB hidden state "
                          "over the slower link)"))
        errs["device_hops"] = S_HOP_REL_ERR


def _kernel_ratio(hw: HardwareProfile, index: int) -> float:
    """GPU index's kernel efficiency (cost/gpu_kernels.py) over GPU 0's, whose is in the rate."""
    if index >= len(hw.gpus) or not hw.gpus:
        return 1.0
    g, g0 = hw.gpus[index], hw.gpus[0]
    return (gpu_kernels.kernel_efficiency(g.vendor, g.gfx_target)[0]
            / gpu_kernels.kernel_efficiency(g0.vendor, g0.gfx_target)[0])


def _multi_gpu_prefill(model: ModelSpec, p: Placement, hw: HardwareProfile, f: Factors, u: int, share: float,
                       per_tok: float, attn: float, offload_cpu_params: float, devices: tuple) -> tuple[float, str, float]:
    """Seconds per ubatch of the GPU side of a layer split: each device's matmuls (compute or
    weight reads, whichever is longer, at its own rate; the offloaded CPU experts on GPU0,
    where ggml-backend sends them) one after another, and the ubatch's hidden states crossing
    every boundary over the slower link."""
    n_attn = max(1, sum(1 for layer in model.trunk_layers if any(c.name == "k" for c in layer.kv)))
    total, parts = 0.0, []
    base_flop = _fig(hw.gpus[0].fp16_flop_per_s) if hw.gpus else None
    for d in devices:
        blocks = set(d.blocks)
        params = 0.0
        rd = 0.0
        n_a = 0
        for layer in model.trunk_layers:
            if layer.index not in blocks:
                continue
            params += sum(t.n_elements for t in layer.tensors
                          if t.group not in ("experts", "expert_aux", "norm") and len(t.shape) >= 2)
            rd += layer.resident_bytes
            n_a += any(c.name == "k" for c in layer.kv)
            if layer.index in d.gpu_expert_blocks:
                params += layer.expert_elements * per_tok
                rd += layer.expert_bytes * share
        if d.output:
            params += sum(t.n_elements for t in model.globals if t.group == "output")
        if d.index == 0:
            params += offload_cpu_params
        flops = u * (2 * params + attn * n_a / n_attn)
        fig = _fig(hw.gpus[d.index].fp16_flop_per_s) if d.index < len(hw.gpus) else None
        rate = f.gpu_flop_per_s.value * (fig[0] / base_flop[0] if fig and base_flop else 1.0) * \
            _kernel_ratio(hw, d.index)
        bw = device_bw_bytes_per_s(hw, f, d.index)
        t = max(flops / max(1.0, rate), rd / max(1.0, bw))
        total += t
        parts.append(f"GPU{d.index} {t * 1e3:.1f} ms")
    used = [d for d in devices if d.blocks or d.output]
    t_h = 0.0
    for a, b in zip(used, used[1:]):
        link = min(device_link_bytes_per_s(hw, f, a.index), device_link_bytes_per_s(hw, f, b.index))
        t_h += S_HOP_S + 4 * model.n_embd * u / max(1.0, link)
    return total, " + ".join(parts), t_h
