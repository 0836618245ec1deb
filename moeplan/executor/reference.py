"""A plain dense reference of the executor's model, for checking the offload machinery.

Everything on one device, no tiers, no caches of any kind:
  - every routed expert is computed for every token and weighted by the routing mask
    (zero for experts a token did not choose), in expert-id order;
  - attention is recomputed from scratch over all positions with a causal (and window /
    chunk) mask: no KV cache; MLA is computed the textbook way (keys and values materialised
    per head from the latent), not absorbed as the executor does;
  - weights are built from the same source (a pure function of seed, name and slot, or the
    GGUF file read by gguf-py), with the same expert pool aliasing.
The generic stand-in attention and recurrent states have no independent definition, so for
those blocks the reference runs the executor's own GenericAttention.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from moeplan.executor.attention import CacheGeometry, GenericAttention, Pos
from moeplan.executor.layout import LayerLayout, ModelLayout
from moeplan.executor.ops import ExpertWeights, dense_ffn, expert_ffn, expert_weights, gate_probs, rms_norm, rope, top_k
from moeplan.executor.routing import Routing
from moeplan.executor.stores import ExpertBiases, fill_slot


def visible(n: int, window: int = 0, chunked: bool = False) -> torch.Tensor:
    """(n, n) True where query i may attend to key j, written out the long way: causal, and
    llama.cpp's SWA rule (masked when i - j >= window) or llama4's chunks (same chunk only)."""
    ok = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(i + 1):
            if window and chunked:
                ok[i, j] = i // window == j // window
            elif window:
                ok[i, j] = i - j < window
            else:
                ok[i, j] = True
    return ok


class DenseReference:
    def __init__(self, layout: ModelLayout, layers: tuple[LayerLayout, ...], source, dtype: torch.dtype,
                 routing: Routing, pool: dict[int, int], geo: CacheGeometry, expert_values=None) -> None:
        """`expert_values(block, e)` -> ExpertWeights overrides where expert values come from
        (the file, for blocks the executor reads through mmap)."""
        self.layout, self.layers, self.routing = layout, layers, routing
        cpu = torch.device("cpu")
        self.w: dict[str, torch.Tensor] = {}
        self.experts: dict[int, list[ExpertWeights]] = {}
        self.generic: dict[int, GenericAttention] = {}
        for lay in layers:
            for role, wt in lay.attn.weights.items():
                self.w[f"{lay.index}.attn.{role}"] = source.tensor(wt, cpu)
            for role, wt in lay.ffn.weights.items():
                if role != "tid2eid":
                    self.w[f"{lay.index}.ffn.{role}"] = source.tensor(wt, cpu)
            for name, norm in (("attn_norm", lay.attn_norm), ("ffn_norm", lay.ffn_norm)):
                if norm is not None:
                    self.w[f"{lay.index}.{name}"] = source.tensor(norm, cpu)
            if lay.attn.kind == "generic":
                attn_w = {role: self.w[f"{lay.index}.attn.{role}"] for role in lay.attn.weights}
                self.generic[lay.index] = GenericAttention(lay.attn, attn_w, geo, cpu, dtype)
            e = lay.ffn.experts
            if e is not None:
                biases = ExpertBiases(e, source, cpu, dtype)
                self.experts[lay.index] = [
                    expert_values(lay.index, i) if expert_values else
                    biases.attach(self._expert(lay, source, dtype, i % pool[lay.index]), i)
                    for i in range(e.n_expert)]
        self.embd = source.tensor(layout.token_embd, cpu)
        self.out_norm = source.tensor(layout.output_norm, cpu) if layout.output_norm else None
        self.output = source.tensor(layout.output, cpu) if layout.output else self.embd

    @staticmethod
    def _expert(lay: LayerLayout, source, dtype: torch.dtype, slot: int) -> ExpertWeights:
        """An expert's matrices, built the way the executor defines them (slot e mod pool)."""
        x = lay.ffn.routed
        gate_up = torch.empty(2 * x.n_ff, x.n_embd, dtype=dtype)
        down = torch.empty(x.n_embd, x.n_ff, dtype=dtype)
        fill_slot(x, source, slot, gate_up, down)
        return ExpertWeights(down=down, gate_up=gate_up)

    # ---- attention without a cache ----------------------------------------------------------
    def _gqa(self, lay: LayerLayout, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        a, i = lay.attn, lay.index
        w = {k.split(".")[-1]: v for k, v in self.w.items() if k.startswith(f"{i}.attn.")}
        n = x.shape[0]
        q = F.linear(x, w["q"], w.get("q_b"))
        gate = None
        if a.gated:
            q, gate = q.view(n, a.n_head, 2 * a.d_k).split(a.d_k, dim=-1)
            gate = gate.reshape(n, -1)
        q = q.reshape(n, a.n_head, a.d_k)
        k = F.linear(x, w["k"], w.get("k_b")).view(n, a.n_head_kv, a.d_k)
        v = F.linear(x, w["v"], w.get("v_b")).view(n, a.n_head_kv, a.d_v)
        if "q_norm" in w:
            q = rms_norm(q, w["q_norm"]) if w["q_norm"].shape[0] == a.d_k else \
                rms_norm(q.reshape(n, -1), w["q_norm"]).view(n, a.n_head, a.d_k)
        if "k_norm" in w:
            k = rms_norm(k, w["k_norm"]) if w["k_norm"].shape[0] == a.d_k else \
                rms_norm(k.reshape(n, -1), w["k_norm"]).view(n, a.n_head_kv, a.d_k)
        q, k = rope(q, positions, a.rope_base), rope(k, positions, a.rope_base)
        g = a.n_head // a.n_head_kv
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) / math.sqrt(a.d_k)
        ok = visible(n, a.window, a.chunked)
        scores = scores.masked_fill(~ok[None], float("-inf"))
        if "sinks" in w:
            sink = w["sinks"].float()[:, None, None].expand(a.n_head, n, 1)
            probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :n]
        else:
            probs = torch.softmax(scores, dim=-1)
        out = torch.einsum("hqk,khd->qhd", probs, v.float()).reshape(n, -1).to(x.dtype)
        if gate is not None:
            out = out * torch.sigmoid(gate)
        return F.linear(out, w["o"], w.get("o_b"))

    def _mla(self, lay: LayerLayout, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        a, i = lay.attn, lay.index
        w = {k.split(".")[-1]: v for k, v in self.w.items() if k.startswith(f"{i}.attn.")}
        n, h = x.shape[0], a.n_head
        if "q_a" in w:
            q = F.linear(rms_norm(F.linear(x, w["q_a"]), w.get("q_a_norm")), w["q_b"])
        else:
            q = F.linear(x, w["q"])
        q = q.view(n, h, a.d_nope + a.d_rope)
        q_nope, q_pe = q[..., : a.d_nope], rope(q[..., a.d_nope:], positions, a.rope_base)
        kv = F.linear(x, w["kv_a"])
        c = rms_norm(kv[:, : a.kv_lora], w["kv_norm"])
        k_pe = rope(kv[:, None, a.kv_lora:], positions, a.rope_base)  # (n, 1, rope)
        if a.kv_b_fused:
            kvb = w["kv_b"].view(h, a.d_nope + a.d_v, a.kv_lora)
            k_up, v_up = kvb[:, : a.d_nope, :], kvb[:, a.d_nope:, :]  # (H, nope, L), (H, v, L)
        else:
            k_up, v_up = w["k_b"].transpose(1, 2), w["v_b"]  # attn_k_b (H, L, nope) -> (H, nope, L)
        k_nope = torch.einsum("hdl,tl->thd", k_up, c)  # keys materialised per head
        vals = torch.einsum("hvl,tl->thv", v_up, c)
        keys = torch.cat([k_nope, k_pe.expand(n, h, a.d_rope)], dim=-1)
        qf = torch.cat([q_nope, q_pe], dim=-1)
        scores = torch.einsum("qhd,khd->hqk", qf.float(), keys.float()) / math.sqrt(a.d_nope + a.d_rope)
        scores = scores.masked_fill(~visible(n)[None], float("-inf"))
        out = torch.einsum("hqk,khv->qhv", torch.softmax(scores, dim=-1), vals.float()).reshape(n, -1)
        return F.linear(out.to(x.dtype), w["o"])

    # ---- the stack --------------------------------------------------------------------------
    def _moe(self, lay: LayerLayout, x: torch.Tensor, positions: np.ndarray) -> torch.Tensor:
        i = lay.index
        w = {k.split(".")[-1]: v for k, v in self.w.items() if k.startswith(f"{i}.ffn.")}
        g = lay.ffn.gating
        probs, select = gate_probs(F.linear(x, w["router"], w.get("router_bias")), g, w.get("probs_bias"))
        ids = self.routing.chosen(i, positions)
        ids_t = torch.from_numpy(ids) if ids is not None else top_k(select, lay.ffn.routed.n_used)
        wts = expert_weights(probs, ids_t, g)
        mask = torch.zeros(x.shape[0], lay.ffn.routed.n_expert).scatter(1, ids_t, wts).to(x.dtype)
        out = torch.zeros_like(x)
        for e, ew in enumerate(self.experts[i]):
            m = mask[:, e:e + 1]
            if g.weight_before_ffn:
                y = expert_ffn(x * m, ew, g.activation) * (m != 0)
            else:
                y = expert_ffn(x, ew, g.activation) * m
            out = out + y
        if "shexp_down" in w:
            s = dense_ffn(x, w.get("shexp_gate"), w["shexp_up"], w["shexp_down"])
            if "shexp_inp" in w:
                s = s * torch.sigmoid((x * w["shexp_inp"]).sum(-1, keepdim=True))
            out = out + s
        if "dense_down" in w:
            out = out + dense_ffn(x, w.get("dense_gate"), w["dense_up"], w["dense_down"])
        return out

    def forward(self, tokens: list[int]) -> torch.Tensor:
        """Logits (n, n_vocab) fp32 of every position of `tokens`, computed in one pass."""
        n = len(tokens)
        positions = torch.arange(n)
        h = self.embd[torch.tensor(tokens)]
        for lay in self.layers:
            i = lay.index
            x = rms_norm(h, self.w.get(f"{i}.attn_norm"))
            if lay.attn.kind == "gqa":
                a = self._gqa(lay, x, positions)
            elif lay.attn.kind == "mla":
                a = self._mla(lay, x, positions)
            else:
                gen = self.generic[i]
                gen.reset()
                a = torch.cat([gen.forward(x[p:p + 1], Pos(p, 1, torch.device("cpu")))[0] for p in range(n)])
            h = h + a
            x = rms_norm(h, self.w.get(f"{i}.ffn_norm"))
            if lay.ffn.kind == "moe":
                h = h + self._moe(lay, x, np.arange(n))
            elif lay.ffn.kind == "dense":
                w = {k.split(".")[-1]: v for k, v in self.w.items() if k.startswith(f"{i}.ffn.")}
                h = h + dense_ffn(x, w.get("gate"), w["up"], w["down"])
        return F.linear(rms_norm(h, self.out_norm), self.output).float()
