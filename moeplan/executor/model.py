"""The decoder stack: blocks with attention, a dense FFN or routed experts, and the head.

Dense weights (attention, norms, router, shared expert, dense FFN, output head) live on the
compute device; token_embd stays in host memory as in llama.cpp (its input layer is the CPU)
and one row per token crosses to the device. Routed experts run through MoeRunner (experts.py)
on the block's tier.
"""
from __future__ import annotations

import numpy as np
import torch

from moeplan.executor.attention import Pos, make_attention
from moeplan.executor.experts import MoeRunner, TierContext
from moeplan.executor.layout import LayerLayout, ModelLayout, Weight
from moeplan.executor.ops import dense_ffn, expert_weights, gate_probs, linear, project, rms_norm, top_k
from moeplan.executor.routing import Routing


def _bytes(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.numel() * t.element_size()


class Block:
    def __init__(self, lay: LayerLayout, source, ctx: TierContext, geo, dtype: torch.dtype,
                 routing: Routing, moe: MoeRunner | None) -> None:
        dev = ctx.device
        self.lay, self.ctx, self.routing, self.moe = lay, ctx, routing, moe
        self.index = lay.index

        def get(w: Weight | None) -> torch.Tensor | None:
            return None if w is None else source.tensor(w, dev)

        self.attn_norm = get(lay.attn_norm)
        self.ffn_norm = get(lay.ffn_norm)
        attn_w = {role: source.tensor(w, dev) for role, w in lay.attn.weights.items()}
        self.attn = make_attention(lay.attn, attn_w, geo, dev, dtype)
        self.ffn_w = {role: source.tensor(w, dev) for role, w in lay.ffn.weights.items() if role != "tid2eid"}
        self.side = [source.tensor(w, dev) for w in lay.side]
        tensors = [self.attn_norm, self.ffn_norm, *attn_w.values(), *self.ffn_w.values(), *self.side]
        self.resident_exec_bytes = sum(_bytes(t) for t in tensors)
        ws = [lay.attn_norm, lay.ffn_norm, *lay.attn.weights.values(),
              *(w for r, w in lay.ffn.weights.items() if r != "tid2eid"), *lay.side]
        self.resident_model_bytes = sum(w.file_bytes for w in ws if w is not None)

    def forward(self, h: torch.Tensor, pos: Pos, decode: bool) -> torch.Tensor:
        m = self.ctx.meter
        with m.block(self.index):
            x = rms_norm(h, self.attn_norm)
            a, kv_exec, kv_model = self.attn.forward(x, pos)
            for t in self.side:  # tensors without a role: read once per step, result unused
                project(x, t)
            h = h + a
            x = rms_norm(h, self.ffn_norm)
            h = h + self.ffn(x, pos, decode)
            m.add_bytes("gpu", self.resident_exec_bytes, self.resident_model_bytes)
            m.add_bytes("kv", kv_exec, kv_model)
        return h

    def ffn(self, x: torch.Tensor, pos: Pos, decode: bool) -> torch.Tensor:
        w = self.ffn_w
        kind = self.lay.ffn.kind
        if kind == "dense":
            return dense_ffn(x, w.get("gate"), w["up"], w["down"])
        if kind == "none":
            return torch.zeros_like(x)
        gating = self.lay.ffn.gating
        logits = linear(x, w["router"], w.get("router_bias"))
        probs, select = gate_probs(logits, gating, w.get("probs_bias"))
        ids = self.routing.chosen(self.index, pos.np)
        if ids is None:
            ids = top_k(select, self.lay.ffn.routed.n_used).cpu().numpy()
            self.routing.note_router_choice(self.index, pos.np, ids)
        weights = expert_weights(probs, torch.from_numpy(ids).to(x.device), gating)
        assert self.moe is not None  # a 'moe' block is built with its runner
        out = self.moe.forward(x, ids, weights, decode)
        if "shexp_down" in w:
            s = dense_ffn(x, w.get("shexp_gate"), w["shexp_up"], w["shexp_down"])
            if "shexp_inp" in w:  # Qwen2/3-Next: the shared expert's output is gated by sigmoid(w . x)
                s = s * torch.sigmoid((x * w["shexp_inp"]).sum(-1, keepdim=True))
            out = out + s
        if "dense_down" in w:
            out = out + dense_ffn(x, w.get("dense_gate"), w["dense_up"], w["dense_down"])
        return out


class ExecModel:
    def __init__(self, layout: ModelLayout, blocks: list[Block], source, ctx: TierContext) -> None:
        self.layout, self.blocks, self.ctx = layout, blocks, ctx
        dev = ctx.device
        self.embd = source.tensor(layout.token_embd, torch.device("cpu"))
        self.out_norm = source.tensor(layout.output_norm, dev) if layout.output_norm else None
        self.output = source.tensor(layout.output, dev) if layout.output else self.embd.to(dev)
        self.head_exec_bytes = _bytes(self.output) + _bytes(self.out_norm)
        self.head_model_bytes = (layout.output.file_bytes if layout.output else layout.token_embd.file_bytes) + \
            (layout.output_norm.file_bytes if layout.output_norm else 0)

    def reset(self) -> None:
        for b in self.blocks:
            b.attn.reset()

    def forward(self, tokens: list[int], start: int, decode: bool, all_logits: bool = False) -> torch.Tensor:
        """Run tokens at positions start.. as one step; logits (n or 1, n_vocab) fp32."""
        dev = self.ctx.device
        pos = Pos(start, len(tokens), dev)
        h = self.embd[torch.from_numpy(np.asarray(tokens, dtype=np.int64))].to(dev)
        for b in self.blocks:
            h = b.forward(h, pos, decode)
        if not all_logits:
            h = h[-1:]
        logits = linear(rms_norm(h, self.out_norm), self.output).float()
        self.ctx.meter.add_bytes("gpu", self.head_exec_bytes, self.head_model_bytes)
        return logits
