"""Prefill: the terms of processing a prompt on a given path (seconds per prompt token),
formulas in cost/estimate.py's docstring. Which path a plan takes (KTransformers' layer-wise
GPU prefill or not) is cost/prefill_path.py's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from moeplan.planner import backends
from moeplan.planner.cost import attention, kernels
from moeplan.planner.cost.multi_device import _multi_gpu_prefill
from moeplan.planner.cost.priors import BackendPriors
from moeplan.planner.cost.resolve import Factors
from moeplan.planner.cost.work import (
    S_HOP_REL_ERR,
    S_HOP_S,
    SplitLayers,
    _cpu_block_barriers,
    _matmul_err,
    _split_hops,
    attention_flops_per_token,
    cpu_attention_prefill,
    cpu_rates,
    dense_weights_by_type,
    distinct_experts,
    expert_weights_by_type,
    ik_mla_prompt_ubatch,
    ngl_split,
    non_expert_params,
)
from moeplan.planner.hardware.profile import HardwareProfile
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.options import RTR_KEY
from moeplan.planner.placement import Placement
from moeplan.planner.plan import Term


def kt_chunk_tokens(p: Placement) -> int:
    """The chunk KTransformers' layer-wise GPU prefill uploads every CPU layer's experts for:
    SGLang's --chunked-prefill-size, the plan's logical batch (launch/sglang.py emits it)."""
    return max(1, p.n_batch)


def _cpu_block_prefill_terms(model: ModelSpec, f: Factors, u: int, scale: float, split: SplitLayers,
                             dense_offload: bool, ca: attention.CpuAttention, terms: list[Term],
                             errs: dict[str, float], rates: kernels.CpuRates) -> None:
    """Prefill of the blocks -ngl leaves on the CPU, per ubatch of u tokens (x scale: per token):
      op-offload (u >= 32): every dense weight of those blocks is copied to the GPU for its op
        (ggml-backend.cpp ggml_backend_sched_split_graph: a host-buffer weight whose op the
        GPU's offload_op accepts is run there, the weight a split input copied each ubatch),
        h2d_cpu_blocks = R_dense_cpu / B_h2d, and their matmuls join gpu_matmul;
      otherwise cpu_blocks_matmul = max(their matmuls by kernel path (cost/kernels.py), R_dense_cpu / BW_c);
      cpu_blocks_attention = the CPU blocks' attention of a ubatch as cost/attention.py runs it
        (K/V are in a host buffer that is not a weight buffer, so the op is not offloaded);
      split_hop = hops x (s_hop + 4 E u / B_h2d)."""
    if dense_offload:
        b = split.dense_bytes
        terms.append(Term("h2d_cpu_blocks", b / max(1.0, f.h2d_bytes_per_s.value) * scale, "pcie",
                          f"{b / 1e9:.2f} GB dense weights of {len(split.blocks)} CPU blocks per ubatch of {u} / "
                          f"{f.h2d_bytes_per_s.value / 1e9:.1f} GB/s (op-offload)"))
        errs["h2d_cpu_blocks"] = f.h2d_bytes_per_s.rel_err
    else:
        mm = kernels.matmul_time(dense_weights_by_type(model, split.blocks, output=False), u, u, True, rates)
        t_c, how, c_err = mm.seconds, mm.how(), _matmul_err(mm, f)
        t_r = split.dense_bytes / max(1.0, f.bw_cpu_bytes_per_s.value)
        terms.append(Term("cpu_blocks_matmul", max(t_c, t_r) * scale, "cpu-compute" if t_c >= t_r else "cpu-mem",
                          f"max({how}, "
                          f"{split.dense_bytes / 1e9:.2f} GB / {f.bw_cpu_bytes_per_s.value / 1e9:.0f} GB/s) per ubatch"))
        errs["cpu_blocks_matmul"] = c_err if t_c >= t_r else f.bw_cpu_bytes_per_s.rel_err
    if ca.seconds:
        terms.append(Term("cpu_blocks_attention", ca.seconds * scale, "cpu-compute",
                          f"{ca.seconds * 1e3:.1f} ms per ubatch of the CPU blocks: {ca.formula}"))
        errs["cpu_blocks_attention"] = ca.rel_err
    hops = _split_hops(split, model)
    if hops:
        h2d = max(1.0, f.h2d_bytes_per_s.value)
        terms.append(Term("split_hop", hops * (S_HOP_S + 4 * model.n_embd * u / h2d) * scale, "pcie",
                          f"{hops} host<->GPU hop(s) of {u} hidden states per ubatch"))
        errs["split_hop"] = S_HOP_REL_ERR


def layerwise_possible(p: Placement, pr: BackendPriors, f: Factors) -> bool:
    """Whether the backend's layer-wise GPU prefill can run this plan: CPU experts, a GPU and
    op-offload on."""
    return (backends.behaviour(pr.name).layerwise_gpu_prefill and p.op_offload and bool(set(p.cpu_moe_layers))
            and not f.cpu_only)


@dataclass(frozen=True)
class _Ubatch:
    """What every part of a prompt's terms shares: the ubatch, which experts are where, and
    what op-offload moves to the GPU."""

    u: int  # tokens per ubatch
    k: int  # experts used per token
    n: int  # experts per layer
    scale: float  # per-ubatch seconds -> seconds per prompt token
    share: float  # share of a layer's experts a ubatch uses
    per_tok: float  # k / n
    depth_mid: float  # the prompt's mean depth
    split: SplitLayers
    moe_gpu: list
    moe_cpu: list
    attn: float  # attention FLOPs per token on the GPU side
    layerwise: bool
    offload: bool  # the CPU experts' work goes to the GPU
    stay: float  # share of the CPU experts' weights that stay on the CPU anyway
    stay_w: dict[str, float]
    dense_offload: bool  # the -ngl CPU blocks' dense weights go to the GPU
    p_dense_gpu: float
    rates: kernels.CpuRates
    ny_exp: float  # tokens each used expert's matrices multiply at once
    cols_exp: float | tuple[tuple[int, float], ...]  # and how they spread (kernels.expert_columns)

    def exp_params(self, layers) -> float:
        return sum(layer.expert_elements for layer in layers) * self.per_tok


def _offloads(pr: BackendPriors, p: Placement, u: int, k: int, n: int, layerwise: bool) -> bool:
    """Whether op-offload moves the CPU experts' work of a ubatch of u tokens to the GPU."""
    if pr.op_offload == "mainline":
        offload = p.op_offload and u >= 32
    elif pr.op_offload == "ik":
        offload = p.op_offload and u * k >= 32 * n
    else:
        offload = pr.op_offload == "weights"
    return offload or layerwise


def _ubatch(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors, f: Factors, n_prompt: int,
            prompt_depth: int, layerwise: bool) -> _Ubatch:
    k, n = p.n_experts_used or model.n_experts_used, model.n_experts
    u = max(1, min(p.n_ubatch, n_prompt))
    if layerwise:
        u = min(n_prompt, kt_chunk_tokens(p))
    n_ub = math.ceil(n_prompt / u)
    split = ngl_split(model, p, f)
    cpu = set(p.cpu_moe_layers) | split.moe_on_cpu
    depth_mid = max(0, prompt_depth) + n_prompt / 2
    moe_cpu = [layer for layer in model.moe_layers if layer.index in cpu]
    per_tok = k / n if n else 0.0
    mla_u = ik_mla_prompt_ubatch(model, p, pr, u)
    attn_all = attention_flops_per_token(model, int(depth_mid), mla_ubatch=mla_u)
    # attention of the CPU blocks stays on the CPU: its K/V are not weights (see SplitLayers)
    attn_cpu = split.attention_flops(model, int(depth_mid), mla_u)
    offload = _offloads(pr, p, u, k, n, layerwise)
    rates = cpu_rates(hw, pr, f)
    backend = backends.behaviour(pr.name)
    if backend.takes(RTR_KEY) and p.options.rtr:
        rates = replace(rates, repack=True)
    # ik_llama.cpp: experts of an interleaved type its CUDA backend does not multiply stay on the
    # CPU whatever the batch (kernels.IK_CUDA_INTERLEAVED); `stay` is their share of the weights
    stay_w: dict[str, float] = {}
    stay = 0.0
    if offload and not layerwise and backend.interleaved_types_stay_on_cpu and moe_cpu:
        w = rates.as_run(expert_weights_by_type(moe_cpu, per_tok))
        stay_w = {t: x for t, x in w.items() if not kernels.ik_cuda_multiplies(t)}
        stay = sum(stay_w.values()) / max(1e-9, sum(w.values()))
        if stay >= 1.0 - 1e-9:
            offload, stay, stay_w = False, 0.0, {}
    # whole CPU blocks (-ngl): their dense weights are MUL_MAT srcs in host buffers, offloaded
    # at u >= 32 (ggml-cuda.cu ggml_backend_cuda_device_offload_op: ne[1] >= 32; ik_llama.cpp
    # has the same rule for MUL_MAT, its u*k rule is for MUL_MAT_ID)
    dense_offload = bool(split.blocks) and p.op_offload and pr.op_offload in ("mainline", "ik") and u >= 32
    # tokens each used expert's matrices multiply at once (iqk picks its kernel by this)
    ny_exp = u * k / max(1e-9, distinct_experts(n, k, u)) if n else float(u)
    return _Ubatch(
        u=u, k=k, n=n, scale=n_ub / n_prompt, share=distinct_experts(n, k, u) / max(1, n), per_tok=per_tok,
        depth_mid=depth_mid, split=split, moe_gpu=[layer for layer in model.moe_layers if layer.index not in cpu],
        moe_cpu=moe_cpu, attn=attn_all - attn_cpu, layerwise=layerwise, offload=offload, stay=stay, stay_w=stay_w,
        dense_offload=dense_offload, p_dense_gpu=non_expert_params(model) - (0.0 if dense_offload else split.params),
        rates=rates, ny_exp=ny_exp,
        # and how they spread: ik_llama.cpp picks each expert's kernel by its own count
        cols_exp=kernels.expert_columns(u, k, n) if n else ny_exp)


def _cpu_only_prefill(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors, f: Factors,
                      c: _Ubatch, terms: list[Term], errs: dict[str, float]) -> None:
    u, scale = c.u, c.scale
    # the output matrix multiplies the last token of the prompt only (llama_batch_get_one /
    # the server's prompt batches ask logits of the last token; llama-context.cpp selects the
    # output rows before the lm_head), so it is not in the per-ubatch work
    mm = kernels.add(kernels.matmul_time(dense_weights_by_type(model, output=False), u, u, True, c.rates),
                     kernels.matmul_time(expert_weights_by_type(model.moe_layers, c.per_tok), u, c.cols_exp, False,
                                         c.rates))
    # every weight a ubatch uses streams from DRAM once (all experts at large u x k / N)
    b = model.dense_bytes_read_per_token + sum(layer.expert_bytes for layer in model.moe_layers) * c.share
    t_r = b / max(1.0, f.bw_cpu_bytes_per_s.value)
    terms.append(Term("cpu_matmul", max(mm.seconds, t_r) * scale,
                      "cpu-compute" if mm.seconds >= t_r else "cpu-mem",
                      f"per ubatch of {u} ({c.ny_exp:.0f} tokens per used expert): max({mm.how()}, "
                      f"{b / 1e9:.1f} GB / {f.bw_cpu_bytes_per_s.value / 1e9:.0f} GB/s)"))
    errs["cpu_matmul"] = _matmul_err(mm, f) if mm.seconds >= t_r else f.bw_cpu_bytes_per_s.rel_err
    ca = cpu_attention_prefill(model, p, hw, pr, f, int(c.depth_mid), u)
    if ca.seconds:
        # the attention ops of a ubatch as ggml-cpu / iqk run them (cost/attention.py)
        terms.append(Term("cpu_attention", ca.seconds * scale, "cpu-compute",
                          f"{ca.seconds * 1e3:.1f} ms per ubatch at mean depth {int(c.depth_mid)}: {ca.formula}"))
        errs["cpu_attention"] = ca.rel_err


def _devices_prefill(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors, f: Factors,
                     c: _Ubatch, devices: tuple, terms: list[Term], errs: dict[str, float]) -> None:
    u, scale = c.u, c.scale
    t_g, how, t_h = _multi_gpu_prefill(model, p, hw, f, u, c.share, c.per_tok, c.attn,
                                       (c.exp_params(c.moe_cpu) * (1 - c.stay) if c.offload else 0.0)
                                       + (c.split.params if c.dense_offload else 0.0), devices)
    if backends.behaviour(pr.name).tensor_parallel_gpus:
        # SGLang --tp-size n (launch/ktransformers.py): every GPU computes its 1/n of every
        # layer at once, not the layers one device after another
        t_g, how, t_h = t_g / len(devices), f"tensor-parallel over {len(devices)} GPUs: ({how}) / {len(devices)}", 0.0
        terms.append(Term("gpu_matmul", t_g * scale, "gpu-compute", f"per ubatch of {u}, {how}"))
    else:
        terms.append(Term("gpu_matmul", t_g * scale, "gpu-compute",
                          f"per device, one after another, per ubatch of {u}: {how}"))
    errs["gpu_matmul"] = f.gpu_flop_per_s.rel_err
    if t_h:
        terms.append(Term("device_hops", t_h * scale, "pcie",
                          f"hidden states of {u} tokens crossing {len(devices) - 1} GPU boundaries"))
        errs["device_hops"] = S_HOP_REL_ERR


def _gpu_prefill(model: ModelSpec, f: Factors, c: _Ubatch, terms: list[Term], errs: dict[str, float]) -> None:
    u = c.u
    gpu_params = c.p_dense_gpu + c.exp_params(c.moe_gpu) + (c.exp_params(c.moe_cpu) * (1 - c.stay) if c.offload else 0.0)
    flops = u * (2 * gpu_params + c.attn)
    t_c = flops / max(1.0, f.gpu_flop_per_s.value)
    r = (model.dense_bytes_read_per_token - c.split.dense_bytes
         + sum(layer.expert_bytes for layer in c.moe_gpu) * c.share)
    t_r = r / max(1.0, f.bw_gpu_bytes_per_s.value)
    terms.append(Term("gpu_matmul", max(t_c, t_r) * c.scale, "gpu-compute",
                      f"max({flops / 1e12:.2f} TFLOP / {f.gpu_flop_per_s.value / 1e12:.0f} TFLOP/s, "
                      f"{r / 1e9:.2f} GB / {f.bw_gpu_bytes_per_s.value / 1e9:.0f} GB/s) per ubatch of {u}"))
    errs["gpu_matmul"] = f.gpu_flop_per_s.rel_err


def _expert_upload(pr: BackendPriors, f: Factors, c: _Ubatch, terms: list[Term], errs: dict[str, float]) -> None:
    full = 1.0 if pr.op_offload == "weights" or c.layerwise else c.share
    b = sum(layer.expert_bytes for layer in c.moe_cpu) * full * (1 - c.stay)
    what = ("all experts of the CPU layers uploaded layer by layer (KTransformers GPU prefill)"
            if c.layerwise else "used experts")
    # one link's rate with several GPUs too: kt-kernel's pools write every expert's
    # shards for all the GPUs (write_weights_to_buffer, an expert at a time), and
    # KTransformers' Kimi-K2-Thinking table gains 1.6-2.5x, not 2-8x, on 2048-token
    # prompts (upload-bound) from 2-8 GPUs
    rate, rate_how, rate_err = f.h2d_bytes_per_s.value, "", f.h2d_bytes_per_s.rel_err
    if c.layerwise and f.bw_cpu_bytes_per_s.value / 2 < rate:
        # kt-kernel's pools memcpy each expert into the pinned buffer first
        # (write_weights_to_buffer): a read and a write of every byte
        rate, rate_err = f.bw_cpu_bytes_per_s.value / 2, f.bw_cpu_bytes_per_s.rel_err
        rate_how = " (CPU copy into the pinned buffer: CPU read rate / 2)"
    terms.append(Term("h2d_experts", b / max(1.0, rate) * c.scale, "pcie",
                      f"{b / 1e9:.2f} GB of {what} per ubatch of {c.u} / "
                      f"{rate / 1e9:.1f} GB/s{rate_how}"))
    errs["h2d_experts"] = rate_err


def _cpu_experts_prefill(pr: BackendPriors, f: Factors, c: _Ubatch, terms: list[Term],
                         errs: dict[str, float]) -> None:
    """The CPU layers' experts beside a GPU: uploaded (op-offload), multiplied on the CPU, and
    the hand-overs."""
    if c.offload:
        _expert_upload(pr, f, c, terms, errs)
    # the experts multiplied on the CPU: all of them without offload, else those of types
    # ik_llama.cpp's CUDA backend does not take
    on_cpu, frac, why = ((expert_weights_by_type(c.moe_cpu, c.per_tok), 1.0, "") if not c.offload else
                         (c.stay_w, c.stay, f"{c.stay:.0%} of the CPU experts ({', '.join(sorted(c.stay_w))}: "
                                            f"ik_llama.cpp's CUDA backend does not multiply them) on the CPU: "))
    if on_cpu:
        mm = kernels.matmul_time(on_cpu, c.u, c.cols_exp, False, c.rates)
        b = sum(layer.expert_bytes for layer in c.moe_cpu) * c.share * frac
        t_c = mm.seconds
        t_r = b / max(1.0, f.bw_cpu_bytes_per_s.value)
        terms.append(Term("cpu_experts", max(t_c, t_r) * c.scale, "cpu-compute" if t_c >= t_r else "cpu-mem",
                          f"{why}max({mm.how()}, {b / 1e9:.2f} GB / {f.bw_cpu_bytes_per_s.value / 1e9:.0f} "
                          f"GB/s) per ubatch of {c.u} ({c.ny_exp:.0f} tokens per used expert)"))
        errs["cpu_experts"] = _matmul_err(mm, f) if t_c >= t_r else f.bw_cpu_bytes_per_s.rel_err
    n_sync = sum(1 for layer in c.moe_cpu if layer.index not in c.split.blocks)
    if n_sync or not c.split.blocks:
        terms.append(Term("sync", n_sync * f.s_sync_s.value * c.scale, "sync",
                          f"{n_sync} CPU layers x {f.s_sync_s.value * 1e6:.0f} us per ubatch"))
        errs["sync"] = f.s_sync_s.rel_err


def prefill_terms(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors,
                  f: Factors, n_prompt: int, devices: tuple = (), prompt_depth: int = 0, *,
                  layerwise: bool) -> tuple[list[Term], dict[str, float]]:
    """Terms of processing an n_prompt-token prompt, in seconds per prompt token; prompt_depth
    tokens are in the cache before it (llama-bench -d). `layerwise`: KTransformers' layer-wise
    GPU prefill path, where the plan can take it (cost/prefill_path.py decides)."""
    n_prompt = max(1, n_prompt)
    layerwise = bool(layerwise and layerwise_possible(p, pr, f))
    c = _ubatch(model, p, hw, pr, f, n_prompt, prompt_depth, layerwise)
    terms: list[Term] = []
    errs: dict[str, float] = {}
    if f.cpu_only:
        _cpu_only_prefill(model, p, hw, pr, f, c, terms, errs)
        _cpu_ubatch_barriers(model, pr, f, c, terms, errs)
        return terms, errs
    if devices:
        _devices_prefill(model, p, hw, pr, f, c, devices, terms, errs)
    else:
        _gpu_prefill(model, f, c, terms, errs)
    _gpu_launch_floor(model, f, c, terms, errs)
    if c.moe_cpu:
        _cpu_experts_prefill(pr, f, c, terms, errs)
    if c.split.blocks:
        ca = cpu_attention_prefill(model, p, hw, pr, f, int(c.depth_mid), c.u, c.split.blocks)
        _cpu_block_prefill_terms(model, f, c.u, c.scale, c.split, c.dense_offload, ca, terms, errs, c.rates)
    return terms, errs


def _cpu_ubatch_barriers(model: ModelSpec, pr: BackendPriors, f: Factors, c: _Ubatch, terms: list[Term],
                         errs: dict[str, float]) -> None:
    """Every node of a ubatch's CPU graph ends in a barrier, as in decode (cost/graph.py): per
    ubatch, nodes x the barrier figure decode uses (core hand-over x threads, plus the wait for
    a descheduled thread when threads outnumber CPUs). With one thread a node costs no
    measurable fixed time beyond its work (benchmarks/llamacpp_ubatch_overhead.py: 8-75 us per
    ubatch in all, 0 +- 0.4 us per node on this project's VM); with two, 1.2 us per node."""
    n_bar = _cpu_block_barriers(model, pr, model.trunk_layers)
    if n_bar and f.barrier_s:
        terms.append(Term("barriers", n_bar * f.barrier_s * c.scale, "sync",
                          f"{n_bar} graph-node barriers per ubatch of {c.u} x {f.barrier_s * 1e6:.2f} us"))
        errs["barriers"] = f.s_sync_s.rel_err


def _gpu_launch_floor(model: ModelSpec, f: Factors, c: _Ubatch, terms: list[Term], errs: dict[str, float]) -> None:
    """The host's fixed work per ubatch: building the graph and syncing (t_token_s) and
    launching every GPU layer's kernels (s_layer_gpu_s; CUDA graphs are used only for batch-1
    decode), the same figures decode charges per token. The host runs ahead of the GPU, so only
    the part beyond the GPU's own work of the ubatch shows: a floor that a tiny model's prefill
    hits (millions of tokens/s otherwise)."""
    n_gpu_blocks = len(model.trunk_layers) - c.split.n_trunk
    host = (n_gpu_blocks * f.s_layer_gpu_s.value + f.t_token_s.value) * c.scale
    gpu = sum(t.seconds for t in terms if t.resource == "gpu-compute")
    if host > gpu:
        terms.append(Term("launch_floor", host - gpu, "sync",
                          f"max(0, ({n_gpu_blocks} layers x {f.s_layer_gpu_s.value * 1e6:.0f} us + "
                          f"{f.t_token_s.value * 1e3:.1f} ms) per ubatch of {c.u} - GPU work)"))
        errs["launch_floor"] = f.t_token_s.rel_err
