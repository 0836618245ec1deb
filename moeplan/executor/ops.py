"""Tensor math shared by the executor and its dense reference: norms, RoPE, gating, SwiGLU.

These are plain functions of tensors (no placement, no tiers), mirroring what llama.cpp's
graph does for the same op (src/llama-graph.cpp build_moe_ffn, build_norm).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from moeplan.executor.layout import Gating

RMS_EPS = 1e-6
# gpt-oss SwiGLU (llama.cpp LLM_FFN_SWIGLU_OAI_MOE: alpha 1.702, limit 7)
OAI_ALPHA = 1.702
OAI_LIMIT = 7.0


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float = RMS_EPS) -> torch.Tensor:
    """RMSNorm over the last dim, computed in fp32 (one fused torch call), returned in x's dtype."""
    y = F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)
    return y * weight if weight is not None else y


@functools.lru_cache(maxsize=64)
def _inv_freq(base: float, half: int, device: torch.device) -> torch.Tensor:
    return base ** (-torch.arange(0, half, device=device, dtype=torch.float32) / half)


def rope_angles(positions: torch.Tensor, base: float, half: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each (n, 1, half) fp32, of NeoX RoPE at `positions` (n,)."""
    ang = positions.to(torch.float32)[:, None] * _inv_freq(float(base), half, positions.device)[None, :]
    return ang.cos()[:, None, :], ang.sin()[:, None, :]


def rope(x: torch.Tensor, positions: torch.Tensor, base: float, n_rot: int | None = None,
         angles: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """NeoX-style rotary embedding on the first n_rot dims of x (..., n, heads, d); positions (n,).
    `angles`: rope_angles(positions, base, n_rot // 2) when the caller has them already."""
    d = x.shape[-1]
    n_rot = d if n_rot is None else n_rot
    half = n_rot // 2
    if half == 0:
        return x
    cos, sin = angles if angles is not None else rope_angles(positions.to(x.device), base, half)
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:n_rot]
    parts = [x1 * cos - x2 * sin, x2 * cos + x1 * sin]
    if n_rot < d:
        parts.append(xf[..., n_rot:])
    return torch.cat(parts, dim=-1).to(x.dtype)


def gate_probs(logits: torch.Tensor, gating: Gating, probs_bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Router logits (n, N) -> (probs, selection scores), both fp32 (llama.cpp build_moe_ffn)."""
    logits = logits.float()
    if gating.func == "softmax":
        probs = torch.softmax(logits, dim=-1)
    elif gating.func == "sigmoid":
        probs = torch.sigmoid(logits)
    elif gating.func == "softmax_weight":
        probs = logits
    elif gating.func == "sqrt_softplus":
        probs = torch.sqrt(F.softplus(logits))
    else:
        raise ValueError(f"unknown gating {gating.func!r}")
    select = probs + probs_bias.float() if probs_bias is not None else probs
    if gating.select_on_logits:
        select = logits
    if gating.n_groups > 1:
        n, n_exp = select.shape
        groups = select.view(n, gating.n_groups, n_exp // gating.n_groups)
        score = groups.topk(min(2, groups.shape[-1]), dim=-1).values.sum(-1)  # (n, n_groups)
        keep = score.topk(gating.n_groups_used, dim=-1).indices
        mask = torch.full_like(score, float("-inf")).scatter(1, keep, 0.0)
        select = (groups + mask[..., None]).view(n, n_exp)
    return probs, select


def top_k(select: torch.Tensor, k: int) -> torch.Tensor:
    return select.topk(k, dim=-1).indices


def expert_weights(probs: torch.Tensor, ids: torch.Tensor, gating: Gating) -> torch.Tensor:
    """Weights (n, k) of the chosen experts: gather, then softmax/normalise/scale as the arch does."""
    w = probs.gather(1, ids.to(probs.device))
    if gating.func == "softmax_weight":
        w = torch.softmax(w, dim=-1)
    if gating.norm_weights:
        w = w / w.sum(-1, keepdim=True).clamp(min=6.103515625e-5)
    if gating.scale not in (0.0, 1.0):
        w = w * gating.scale
    return w


def glu(g: torch.Tensor, u: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "swiglu_oai":
        g = g.clamp(max=OAI_LIMIT)
        u = u.clamp(-OAI_LIMIT, OAI_LIMIT)
        return g * torch.sigmoid(OAI_ALPHA * g) * (u + 1)
    return F.silu(g) * u


@dataclass
class ExpertWeights:
    """One expert's tensors, all on one device. Either gate_up (2F, D) or gate and up (F, D)."""

    down: torch.Tensor  # (D, F)
    gate_up: torch.Tensor | None = None
    gate: torch.Tensor | None = None
    up: torch.Tensor | None = None
    gate_up_b: torch.Tensor | None = None  # (2F,)
    down_b: torch.Tensor | None = None  # (D,)


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """x (n, in) @ w (out, in)^T (+ b). One row of fp16 or fp32 on the CPU goes through torch.mv
    (its fp16 kernel streams at 60-65 % of DRAM); bf16 through F.linear, whose oneDNN path ran
    twice torch.mv's bf16 rate with torch 2.13 (executor/native.py, benchmarks/executor_roofline.py)."""
    if x.dim() == 2 and x.shape[0] == 1 and x.device.type == "cpu" and w.dtype is not torch.bfloat16:
        y = torch.mv(w, x[0]).unsqueeze(0)
        return y + b if b is not None else y
    return F.linear(x, w, b)


matvec = linear


def expert_ffn(x: torch.Tensor, w: ExpertWeights, activation: str) -> torch.Tensor:
    """SwiGLU expert: down(act(gate x) * up x), x (n, D) -> (n, D), computed in the weights'
    dtype (an F16 expert read from a file runs in fp16, as ggml runs it) and returned in x's."""
    out_dtype = x.dtype
    x = x.to(w.down.dtype)
    if w.gate_up is not None:
        h = matvec(x, w.gate_up)
        if w.gate_up_b is not None:
            h = h + w.gate_up_b.to(h.dtype)
        n_ff = h.shape[-1] // 2
        g, u = h[..., :n_ff], h[..., n_ff:]
    else:
        assert w.gate is not None and w.up is not None  # ExpertWeights: gate_up, or gate and up
        g, u = matvec(x, w.gate), matvec(x, w.up)
        if w.gate_up_b is not None:
            n_ff = g.shape[-1]
            b = w.gate_up_b.to(g.dtype)
            g, u = g + b[:n_ff], u + b[n_ff:]
    y = matvec(glu(g, u, activation), w.down)
    if w.down_b is not None:
        y = y + w.down_b.to(y.dtype)
    return y.to(out_dtype)


def dense_ffn(x: torch.Tensor, gate: torch.Tensor | None, up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    if gate is None:
        return linear(F.silu(linear(x, up)), down)
    return linear(F.silu(linear(x, gate)) * linear(x, up), down)


def tile(x: torch.Tensor, n: int) -> torch.Tensor:
    """Resize the last dim of x to n by repeating or truncating (the generic stand-in's glue)."""
    d = x.shape[-1]
    if d == n:
        return x
    if d > n:
        return x[..., :n]
    reps = -(-n // d)
    return x.repeat(*([1] * (x.dim() - 1)), reps)[..., :n]


def project(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Apply any weight as a stand-in projection of x (n, D): 1-D scales, 2-D maps, 3-D batches.
    Returns (n, out) where out is the weight's output size (all of its rows)."""
    if w.dim() == 1:
        return tile(x, w.shape[0]) * w
    if w.dim() == 2:
        return linear(tile(x, w.shape[1]), w)
    flat = w.reshape(-1, w.shape[-2], w.shape[-1])  # (batch, out, in)
    xin = tile(x, flat.shape[-1])  # (n, in)
    return torch.einsum("boi,ni->nbo", flat, xin).reshape(x.shape[0], -1)
