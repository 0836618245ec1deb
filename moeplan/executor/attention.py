"""Attention blocks with a real KV cache of the model's kind, on the compute device.

Cache sizes are llama.cpp's (planner.memory.kv_cells): full-attention and MLA caches hold
pad256(n_ctx) cells; sliding-window caches hold pad256(min(ctx, window + n_ubatch)) cells used
as a ring; recurrent state is one row per sequence; compressed (ratio) caches ceil(ctx/ratio).
The cache is kept in the compute dtype (llama.cpp's q8_0/q4_0 cache types are counted in the
model-byte figures but not emulated).

  GqaAttention      K and V per kv head; RoPE (NeoX); optional q/k norms, biases, sinks (gpt-oss),
                    output gate (Qwen3-Next); causal, sliding-window or chunked (llama4) masks
  MlaAttention      DeepSeek MLA with the latent cache (kv_lora + rope per token), computed
                    absorbed: q_nope through attn_k_b into the latent space, output through attn_v_b
  GenericAttention  a stand-in with exact bytes: each attention tensor is applied as a
                    projection, each cache component is written and read at its size
"""
from __future__ import annotations

import math

import torch

from moeplan.executor.hostmem import host_empty
from moeplan.executor.layout import AttnLayout
from moeplan.executor.ops import linear, project, rms_norm, rope, rope_angles, tile
from moeplan.planner.memory.accounting import kv_cells
from moeplan.planner.model.ggml import canonical_type, row_bytes
from moeplan.planner.model.spec import KvComponent


class CacheGeometry:
    """What the caches are sized for: context, ubatch, and the model-file cache types."""

    def __init__(self, n_ctx: int, n_ubatch: int, type_k: str = "f16", type_v: str = "f16") -> None:
        self.n_ctx, self.n_ubatch, self.type_k, self.type_v = n_ctx, n_ubatch, type_k, type_v

    def cells(self, comp: KvComponent) -> int:
        return kv_cells(comp, self.n_ctx, 1, self.n_ubatch)

    def model_row_bytes(self, comp: KvComponent) -> int:
        dtype = self.type_k if comp.dtype == "k" else self.type_v if comp.dtype == "v" else comp.dtype
        return row_bytes(canonical_type(dtype), comp.n_embd)


def _mask(qpos: torch.Tensor, kpos: torch.Tensor, window: int, chunked: bool) -> torch.Tensor:
    """(n, T) True where query position qpos may see key position kpos."""
    q = qpos[:, None]
    k = kpos[None, :]
    ok = (k >= 0) & (k <= q)
    if window and chunked:
        ok &= (k // window) == (q // window)
    elif window:
        ok &= (q - k) < window
    return ok


class Pos:
    """Positions of the tokens of one step: on the device (`t`), on the host (`np`), and the
    largest (`hi`), so cache bookkeeping never waits on the device."""

    def __init__(self, start: int, n: int, device: torch.device) -> None:
        import numpy as np

        self.np = np.arange(start, start + n, dtype=np.int64)
        self.t = torch.arange(start, start + n, dtype=torch.long, device=device)
        self.lo, self.hi, self.n = start, start + n - 1, n
        self._angles: dict[tuple[float, int], tuple[torch.Tensor, torch.Tensor]] = {}

    def angles(self, base: float, half: int) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE (cos, sin) at these positions, computed once per step for all blocks."""
        key = (base, half)
        got = self._angles.get(key)
        if got is None:
            got = self._angles[key] = rope_angles(self.t, base, half)
        return got


class _Ring:
    """Cell bookkeeping: which position each cell holds (-1 = empty). 'ctx' caches are indexed
    by position; ring caches by position modulo their size."""

    def __init__(self, n_cells: int, ring: bool, device: torch.device) -> None:
        self.n_cells, self.ring = n_cells, ring
        self.pos = torch.full((n_cells,), -1, dtype=torch.long, device=device)
        self.n_used = 0

    def reset(self) -> None:
        self.pos.fill_(-1)
        self.n_used = 0

    def write(self, positions: torch.Tensor, hi: int, lo: int | None = None) -> torch.Tensor | slice:
        """Claim the cells of `positions` (largest `hi`); returns the cell indices. Consecutive
        positions lo..hi in a position-indexed cache are one slice (a copy, not a scatter)."""
        if self.ring:
            s: torch.Tensor | slice = positions % self.n_cells
        elif hi >= self.n_cells:
            raise RuntimeError(f"position {hi} past the cache ({self.n_cells} cells)")
        elif lo is not None:
            s = slice(lo, hi + 1)
        else:
            s = positions
        self.pos[s] = positions
        self.n_used = min(self.n_cells, max(self.n_used, hi + 1))
        return s


class GenericState:
    """A cache component kept at its real size with stand-in arithmetic: rows are written at
    each position and every visible row is read by a softmax read-out ('seq' state: one row,
    blended and read every step)."""

    def __init__(self, comp: KvComponent, geo: CacheGeometry, device: torch.device, dtype: torch.dtype) -> None:
        self.comp = comp
        self.n_cells = geo.cells(comp)
        self.data = torch.zeros(self.n_cells, comp.n_embd, dtype=dtype, device=device)
        self.ring = _Ring(self.n_cells, comp.cells in ("swa", "fixed"), device)
        self.window = comp.window if comp.cells == "swa" else 0
        self.exec_row_bytes = comp.n_embd * self.data.element_size()
        self.model_row_bytes = geo.model_row_bytes(comp)

    def reset(self) -> None:
        self.data.zero_()
        self.ring.reset()

    def step(self, x: torch.Tensor, pos: Pos) -> tuple[torch.Tensor, int, int]:
        """Returns (contribution (n, D), exec bytes read, model bytes read)."""
        rows = tile(x, self.comp.n_embd)
        n, d_model = x.shape
        if self.comp.cells == "seq":
            outs = []
            for i in range(n):
                self.data[0] = 0.5 * self.data[0] + 0.5 * rows[i]
                outs.append(self.data[0].clone())
            return tile(torch.stack(outs), d_model), n * self.exec_row_bytes, n * self.model_row_bytes
        ratio = max(1, self.comp.ratio) if self.comp.cells == "ratio" else 1
        cpos = pos.t // ratio
        slots = self.ring.write(cpos, pos.hi // ratio)
        self.data[slots] = rows
        used = self.ring.n_used
        keys = self.data[:used]
        scores = (rows @ keys.T).float() / math.sqrt(self.comp.n_embd)
        scores = scores.masked_fill(~_mask(cpos, self.ring.pos[:used], self.window, False), float("-inf"))
        out = torch.softmax(scores, dim=-1).to(keys.dtype) @ keys
        return tile(out, d_model), n * used * self.exec_row_bytes, n * used * self.model_row_bytes


def _step_extra(extra: list[GenericState], x: torch.Tensor, pos: Pos, exec_bytes: int,
                model_bytes: int) -> tuple[int, int]:
    """Step the cache components the main attention does not own (a DSA indexer's keys):
    their rows are written and read, their output unused. Returns the byte totals."""
    for s in extra:
        _, e2, m2 = s.step(x, pos)
        exec_bytes, model_bytes = exec_bytes + e2, model_bytes + m2
    return exec_bytes, model_bytes


def fuse_rows(parts: list[torch.Tensor]) -> torch.Tensor:
    """The matrices (or vectors) `parts` stacked along their first dim in one new tensor (huge
    pages on the host, hostmem.py)."""
    shape = (sum(p.shape[0] for p in parts), *parts[0].shape[1:])
    dev = parts[0].device
    out = host_empty(shape, parts[0].dtype) if dev.type == "cpu" else torch.empty(shape, dtype=parts[0].dtype, device=dev)
    return torch.cat(parts, dim=0, out=out)


class GqaAttention:
    """q, k and v run as one fused projection (their rows stacked in one matrix, the separate
    matrices dropped, so memory and bytes read are unchanged) when they share input size and
    dtype and all or none has a bias."""

    def __init__(self, lay: AttnLayout, w: dict[str, torch.Tensor], geo: CacheGeometry,
                 device: torch.device, dtype: torch.dtype) -> None:
        w = dict(w)
        self.lay, self.w = lay, w
        self.qkv: torch.Tensor | None = None
        self.qkv_b: torch.Tensor | None = None
        mats = [w[r] for r in ("q", "k", "v") if r in w]
        biases = [w[r] for r in ("q_b", "k_b", "v_b") if r in w]
        if len(mats) == 3 and all(m.dim() == 2 for m in mats) and len({(m.shape[1], m.dtype) for m in mats}) == 1 \
                and len(biases) in (0, 3):
            self.split = [m.shape[0] for m in mats]
            self.qkv = fuse_rows(mats)
            self.qkv_b = fuse_rows(biases) if biases else None
            for r in ("q", "k", "v", "q_b", "k_b", "v_b"):
                w.pop(r, None)
        # per-head q and k norms of one size: q's and k's heads are normed (and rotated) together
        self.qk_norm: torch.Tensor | None = None
        qn, kn = w.get("q_norm"), w.get("k_norm")
        if self.qkv is not None and not lay.gated and qn is not None and kn is not None and \
                qn.shape == kn.shape == (lay.d_k,) and self.split == [lay.n_head * lay.d_k, *[lay.n_head_kv * lay.d_k] * 2] \
                and lay.d_v == lay.d_k:
            self.qk_norm = torch.cat([qn.expand(lay.n_head, lay.d_k), kn.expand(lay.n_head_kv, lay.d_k)])
        comp_k = next((c for c in lay.kv if c.name == "k"), None)
        comp_v = next((c for c in lay.kv if c.name == "v"), None)
        if comp_k is None:  # a layout without a declared cache still needs one to attend over
            comp_k = KvComponent("k", lay.n_head_kv * lay.d_k)
        if comp_v is None:
            comp_v = KvComponent("v", lay.n_head_kv * lay.d_v)
        n_cells = geo.cells(comp_k)
        self.k = torch.zeros(lay.n_head_kv, n_cells, lay.d_k, dtype=dtype, device=device)
        self.v = torch.zeros(lay.n_head_kv, n_cells, lay.d_v, dtype=dtype, device=device)
        self.ring = _Ring(n_cells, comp_k.cells == "swa", device)
        self.extra = [GenericState(c, geo, device, dtype) for c in lay.kv if c.name not in ("k", "v")]
        self.exec_row_bytes = (lay.d_k + lay.d_v) * lay.n_head_kv * self.k.element_size()
        self.model_row_bytes = geo.model_row_bytes(comp_k) + geo.model_row_bytes(comp_v)

    def reset(self) -> None:
        self.ring.reset()
        for s in self.extra:
            s.reset()

    def _qkv_apart(self, x: torch.Tensor, angles, pos: Pos):
        """q (n, H, dk), k and v (n, Hkv, d) and the output gate (or None), each normed and rotated
        on its own."""
        lay, w = self.lay, self.w
        n = x.shape[0]
        hq, hkv, dk, dv = lay.n_head, lay.n_head_kv, lay.d_k, lay.d_v
        if self.qkv is not None:
            q, k, v = linear(x, self.qkv, self.qkv_b).split(self.split, dim=-1)
        else:
            q, k, v = (linear(x, w[r], w.get(r + "_b")) for r in ("q", "k", "v"))
        gate = None
        if lay.gated:
            q, gate = q.reshape(n, hq, 2 * dk).split(dk, dim=-1)
            gate = gate.reshape(n, hq * dk)
        q = q.reshape(n, hq, dk)
        k = k.reshape(n, hkv, dk)
        v = v.reshape(n, hkv, dv)
        if "q_norm" in w:
            q = rms_norm(q, w["q_norm"]) if w["q_norm"].shape[0] == dk else \
                rms_norm(q.reshape(n, hq * dk), w["q_norm"]).view(n, hq, dk)
        if "k_norm" in w:
            k = rms_norm(k, w["k_norm"]) if w["k_norm"].shape[0] == dk else \
                rms_norm(k.reshape(n, hkv * dk), w["k_norm"]).view(n, hkv, dk)
        q = rope(q, pos.t, lay.rope_base, angles=angles)
        k = rope(k, pos.t, lay.rope_base, angles=angles)
        return q, k, v, gate

    def forward(self, x: torch.Tensor, pos: Pos) -> tuple[torch.Tensor, int, int]:
        lay, w = self.lay, self.w
        n = x.shape[0]
        hq, hkv, dk, dv = lay.n_head, lay.n_head_kv, lay.d_k, lay.d_v
        angles = pos.angles(lay.rope_base, dk // 2)
        if self.qk_norm is not None and self.qkv is not None:  # q and k heads side by side: one norm, one RoPE
            o = linear(x, self.qkv, self.qkv_b)
            qk = rope(rms_norm(o[:, : (hq + hkv) * dk].view(n, hq + hkv, dk), self.qk_norm), pos.t,
                      lay.rope_base, angles=angles)
            q, k = qk[:, :hq], qk[:, hq:]
            v = o[:, (hq + hkv) * dk:].reshape(n, hkv, dv)
            gate = None
        else:
            q, k, v, gate = self._qkv_apart(x, angles, pos)
        slots = self.ring.write(pos.t, pos.hi, pos.lo)
        self.k[:, slots] = k.transpose(0, 1)
        self.v[:, slots] = v.transpose(0, 1)
        used = self.ring.n_used
        keys, vals = self.k[:, :used], self.v[:, :used]  # (hkv, T, d)
        g = hq // hkv
        qg = q.view(n, hkv, g, dk).permute(1, 2, 0, 3).reshape(hkv, g * n, dk)
        if keys.dtype is torch.float16 and keys.device.type == "cpu":
            # torch's fp16 bmm on the CPU is a generic loop: 231 us for one decode query over
            # 64 cells of Qwen3-30B-A3B's 4 x 128 heads, 1.8 ms over 512, against 71 and 273 us
            # converting q, K and V to fp32 first (one Zen 4 thread, torch 2.13)
            qg, keys, vals = qg.float(), keys.float(), vals.float()
        scores = torch.bmm(qg, keys.transpose(1, 2)).float() / math.sqrt(dk)  # (hkv, g*n, T)
        ok = _mask(pos.t, self.ring.pos[:used], lay.window, lay.chunked)  # (n, T)
        scores = scores.view(hkv, g, n, used).masked_fill(~ok[None, None], float("-inf"))
        if "sinks" in w:  # gpt-oss: one extra logit per head that takes probability mass, no value
            sink = w["sinks"].float().view(hkv, g, 1, 1).expand(hkv, g, n, 1)
            probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :used]
        else:
            probs = torch.softmax(scores, dim=-1)
        out = torch.bmm(probs.reshape(hkv, g * n, used).to(vals.dtype), vals)  # (hkv, g*n, dv)
        out = out.view(hkv, g, n, dv).permute(2, 0, 1, 3).reshape(n, hq * dv).to(x.dtype)
        if gate is not None:
            out = out * torch.sigmoid(gate)
        y = linear(out, w["o"], w.get("o_b"))
        return (y, *_step_extra(self.extra, x, pos, n * used * self.exec_row_bytes, n * used * self.model_row_bytes))


class MlaAttention:
    def __init__(self, lay: AttnLayout, w: dict[str, torch.Tensor], geo: CacheGeometry,
                 device: torch.device, dtype: torch.dtype) -> None:
        self.lay, self.w = lay, w
        comp = next((c for c in lay.kv if c.name == "k"), None) or KvComponent("k", lay.kv_lora + lay.d_rope)
        n_cells = geo.cells(comp)
        self.latent = torch.zeros(n_cells, lay.kv_lora + lay.d_rope, dtype=dtype, device=device)
        self.ring = _Ring(n_cells, False, device)
        self.extra = [GenericState(c, geo, device, dtype) for c in lay.kv if c.name != "k"]
        self.exec_row_bytes = (lay.kv_lora + lay.d_rope) * self.latent.element_size()
        self.model_row_bytes = geo.model_row_bytes(comp)
        h = lay.n_head
        if lay.kv_b_fused:  # attn_kv_b (H*(nope+v), kv_lora): split into the two absorbed maps
            kvb = w["kv_b"].view(h, lay.d_nope + lay.d_v, lay.kv_lora)
            self.k_b = kvb[:, : lay.d_nope, :].transpose(1, 2)  # (H, kv_lora, nope) like attn_k_b
            self.v_b = kvb[:, lay.d_nope:, :]  # (H, v, kv_lora) like attn_v_b
        else:
            self.k_b, self.v_b = w["k_b"], w["v_b"]

    def reset(self) -> None:
        self.ring.reset()
        for s in self.extra:
            s.reset()

    def queries(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lay, w = self.lay, self.w
        n = x.shape[0]
        if "q_a" in w:
            q = linear(rms_norm(linear(x, w["q_a"]), w.get("q_a_norm")), w["q_b"])
        else:
            q = linear(x, w["q"])
        q = q.view(n, lay.n_head, lay.d_nope + lay.d_rope)
        q_nope, q_pe = q[..., : lay.d_nope], q[..., lay.d_nope:]
        return q_nope, rope(q_pe, positions, lay.rope_base)

    def latents(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        lay = self.lay
        kv = linear(x, self.w["kv_a"])
        c = rms_norm(kv[:, : lay.kv_lora], self.w["kv_norm"])
        k_pe = rope(kv[:, None, lay.kv_lora:], positions, lay.rope_base)[:, 0]
        return torch.cat([c, k_pe], dim=-1)

    def forward(self, x: torch.Tensor, pos: Pos) -> tuple[torch.Tensor, int, int]:
        lay = self.lay
        n = x.shape[0]
        q_nope, q_pe = self.queries(x, pos.t)
        slots = self.ring.write(pos.t, pos.hi, pos.lo)
        self.latent[slots] = self.latents(x, pos.t)
        used = self.ring.n_used
        c, k_pe = self.latent[:used, : lay.kv_lora], self.latent[:used, lay.kv_lora:]
        q_lat = torch.einsum("nhd,hld->nhl", q_nope, self.k_b)  # absorbed: (n, H, kv_lora)
        scores = (torch.einsum("nhl,tl->nht", q_lat, c) + torch.einsum("nhr,tr->nht", q_pe, k_pe)).float()
        scores = scores / math.sqrt(lay.d_nope + lay.d_rope)
        ok = _mask(pos.t, self.ring.pos[:used], 0, False)
        probs = torch.softmax(scores.masked_fill(~ok[:, None, :], float("-inf")), dim=-1).to(c.dtype)
        o_lat = torch.einsum("nht,tl->nhl", probs, c)
        o = torch.einsum("nhl,hvl->nhv", o_lat, self.v_b).reshape(n, lay.n_head * lay.d_v)
        y = linear(o, self.w["o"])
        return (y, *_step_extra(self.extra, x, pos, n * used * self.exec_row_bytes, n * used * self.model_row_bytes))


class GenericAttention:
    """Stand-in for attention kinds the executor does not implement (see the module docstring):
    y = rms(mean of the tensors' projections + the cache read-outs) / 4."""

    def __init__(self, lay: AttnLayout, w: dict[str, torch.Tensor], geo: CacheGeometry,
                 device: torch.device, dtype: torch.dtype) -> None:
        self.lay, self.w = lay, w
        self.states = [GenericState(c, geo, device, dtype) for c in lay.kv]

    def reset(self) -> None:
        for s in self.states:
            s.reset()

    def forward(self, x: torch.Tensor, pos: Pos) -> tuple[torch.Tensor, int, int]:
        d = x.shape[-1]
        acc = torch.zeros_like(x, dtype=torch.float32)
        terms = 0
        for t in self.w.values():
            acc += tile(project(x, t), d).float()
            terms += 1
        eb = mb = 0
        for s in self.states:
            y, e2, m2 = s.step(x, pos)
            acc += y.float()
            eb, mb, terms = eb + e2, mb + m2, terms + 1
        y = rms_norm(acc / max(1, terms), None) * 0.25
        return y.to(x.dtype), eb, mb


def make_attention(lay: AttnLayout, w: dict[str, torch.Tensor], geo: CacheGeometry,
                   device: torch.device, dtype: torch.dtype):
    cls = {"gqa": GqaAttention, "mla": MlaAttention}.get(lay.kind, GenericAttention)
    return cls(lay, w, geo, device, dtype)


def attention_cache_bytes(lay: AttnLayout, geo: CacheGeometry, dtype_bytes: int) -> int:
    """Bytes the caches of one block allocate in the compute dtype (for the up-front check)."""
    total = 0
    comps = list(lay.kv)
    if lay.kind == "gqa" and not any(c.name == "k" for c in comps):
        comps.append(KvComponent("k", lay.n_head_kv * lay.d_k))
    if lay.kind == "gqa" and not any(c.name == "v" for c in comps):
        comps.append(KvComponent("v", lay.n_head_kv * lay.d_v))
    for c in comps:
        total += geo.cells(c) * c.n_embd * dtype_bytes + geo.cells(c) * 8
    return total
