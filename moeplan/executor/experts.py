"""Running one block's routed experts under its tier: the offload machinery.

A GPU-resident block computes its experts on the compute device. A CPU-resident block, as
llama.cpp runs it:
  decode   the CPU computes the used experts from host memory (the hidden state goes to the
           host and the result comes back: 'activations'), or, in transfer mode, the used
           experts are uploaded to a staging area on the device and computed there;
           with a GPU expert cache, hits run from the cache and misses are uploaded (and
           admitted) or computed on the CPU, by the cache's policy (cache.py)
  prefill  with op-offload and a large enough ubatch (llama.cpp: >= 32 tokens,
           GGML_OP_OFFLOAD_MIN_BATCH; ik_llama.cpp: ubatch * k >= 32 * n_expert) the distinct
           experts the ubatch uses are uploaded and computed on the device; otherwise the CPU
           computes them. Uploads and compute are not overlapped (neither are they in llama.cpp).
Experts of a step are grouped: each used expert's matrices are read once for all the tokens
that chose it (what MUL_MAT_ID does). On the device the used experts of a step run as two
grouped GEMMs over the slot tensor (torch._grouped_mm, what MoE kernels do) instead of a
Python loop of small kernels, whose launch cost would otherwise dominate a GPU decode step.
On the CPU one decode token's experts run batched (run_experts_token): each expert's two
matrix-vector products write into rows of preallocated buffers, and the activation and the
weighted sum run once for all of them. The products stay one call per expert: the chosen
experts are not adjacent in memory, and gathering them into one tensor for a single bmm copies
every byte (a gathered bmm read 1.1 GB/s on one Zen 4 thread); torch._grouped_mm over the
slot tensor reads nothing twice but streamed 18-19 GB/s of fp16 experts there, against
20 GB/s for the torch.mv loop into buffer rows (16 tokens x 8 of 128 Qwen3-30B-A3B experts,
torch 2.13, thread CPU time, 2026-12-05; fp32 14.7-15.7 GB/s both ways).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from moeplan.executor.cache import CPU, HIT, UPLOAD, ExpertCache
from moeplan.executor.layout import ExpertLayout, Gating
from moeplan.executor.meter import Meter
from moeplan.executor.ops import ExpertWeights, expert_ffn, glu
from moeplan.executor.stores import ExpertBiases

OP_OFFLOAD_MIN_BATCH = 32  # ggml-backend GGML_OP_OFFLOAD_MIN_BATCH


class DeviceSlots:
    """Expert-sized slots on the compute device (the GPU cache, or the upload staging area)."""

    def __init__(self, n_slots: int, n_ff: int, n_embd: int, device: torch.device, dtype: torch.dtype,
                 non_blocking: bool) -> None:
        self.n_slots, self.n_ff = n_slots, n_ff
        self.gate_up = torch.empty((n_slots, 2 * n_ff, n_embd), dtype=dtype, device=device)
        self.down = torch.empty((n_slots, n_embd, n_ff), dtype=dtype, device=device)
        self.non_blocking = non_blocking

    def load(self, slot: int, w: ExpertWeights) -> int:
        """Copy one expert from host memory into `slot`; returns the bytes moved."""
        nb = self.non_blocking
        if w.gate_up is not None:
            self.gate_up[slot].copy_(w.gate_up, non_blocking=nb)
            moved = w.gate_up.numel() * w.gate_up.element_size()
        else:
            assert w.gate is not None and w.up is not None  # ExpertWeights: gate_up, or gate and up
            self.gate_up[slot, : self.n_ff].copy_(w.gate, non_blocking=nb)
            self.gate_up[slot, self.n_ff:].copy_(w.up, non_blocking=nb)
            moved = (w.gate.numel() + w.up.numel()) * w.gate.element_size()
        self.down[slot].copy_(w.down, non_blocking=nb)
        return moved + w.down.numel() * w.down.element_size()

    def view(self, slot: int) -> ExpertWeights:
        return ExpertWeights(down=self.down[slot], gate_up=self.gate_up[slot])

    def n_bytes(self) -> int:
        return (self.gate_up.numel() + self.down.numel()) * self.gate_up.element_size()


def matvec_into(w: torch.Tensor, x: torch.Tensor, out: torch.Tensor) -> None:
    """out (rows,) = w (rows, n) @ x (n,), written into `out` (a preallocated row). torch.mv for
    fp16 and fp32 (its fp16 kernel converts with F16C and sums in fp32); bf16 through torch.mm,
    oneDNN's path, twice torch.mv's bf16 rate (executor/native.py)."""
    if w.dtype is torch.bfloat16 and w.device.type == "cpu":
        torch.mm(x.unsqueeze(0), w.t(), out=out.unsqueeze(0))
    else:
        torch.mv(w, x, out=out)


class Workspace:
    """Preallocated buffers reused by every block's one-token expert step (keyed by role,
    shape and dtype), so decode allocates no per-expert tensors."""

    def __init__(self) -> None:
        self._bufs: dict[tuple, torch.Tensor] = {}

    def get(self, role: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        key = (role, shape, dtype, device)
        t = self._bufs.get(key)
        if t is None:
            t = self._bufs[key] = torch.empty(shape, dtype=dtype, device=device)
        return t


@dataclass
class TierContext:
    """What every block's expert runner shares."""

    device: torch.device  # the compute device: 'cuda', or the CPU standing in for it
    meter: Meter
    cache: ExpertCache | None = None
    cache_slots: DeviceSlots | None = None
    staging: DeviceSlots | None = None
    cpu_decode_mode: str = "compute"  # 'compute' | 'transfer'
    op_offload: bool = True
    offload_rule: str = "mainline"  # or 'ik' (the backend record's op_offload_rule)
    grouped: bool = False  # device-side experts as grouped GEMMs (see the module docstring)
    workspace: Workspace = field(default_factory=Workspace)  # one-token expert buffers (run_experts_token)
    notes: list = field(default_factory=list)

    def prefill_uploads(self, n_tokens: int, k: int, n_expert: int) -> bool:
        if not self.op_offload:
            return False
        if self.offload_rule == "ik":
            return n_tokens * k >= OP_OFFLOAD_MIN_BATCH * n_expert
        return n_tokens >= OP_OFFLOAD_MIN_BATCH


HOST = torch.device("cpu")


def run_experts_token(x: torch.Tensor, ids: np.ndarray, w: torch.Tensor, experts: list[int], get, gating: Gating,
                      ws: Workspace) -> torch.Tensor:
    """run_experts for one token (x (1, D)), batched: each expert's gate_up product is written
    into row i of one (m, 2F) buffer, the activation runs once over all m rows, each down product
    into row i of an (m, D) buffer, and one matrix-vector product weights and sums the rows.
    Two torch calls per expert (its two weight reads, which have to be separate: the experts
    are not adjacent in memory, and gathering them would copy every byte) plus five per block,
    instead of about ten per expert."""
    row = ids[0].tolist()
    order = sorted(row.index(e) for e in experts)  # the experts in the token's own slot order
    m = len(order)
    first = get(row[order[0]])
    wd = first.down.dtype
    d, n_ff = first.down.shape
    dev = x.device
    xc = x[0].to(wd)
    h = ws.get("gate_up", (m, 2 * n_ff), wd, dev)
    y = ws.get("down", (m, d), wd, dev)
    gu_b, dn_b, ews = [], [], []
    for i, (j, h_i) in enumerate(zip(order, h.unbind(0))):  # unbind: every row view in one call
        ew = first if i == 0 else get(row[j])  # an mmap store decodes here: once per expert
        ews.append(ew)
        if ew.gate_up is not None:
            matvec_into(ew.gate_up, xc, h_i)
        else:
            assert ew.gate is not None and ew.up is not None  # ExpertWeights: gate_up, or gate and up
            matvec_into(ew.gate, xc, h_i[:n_ff])
            matvec_into(ew.up, xc, h_i[n_ff:])
        if ew.gate_up_b is not None:
            gu_b.append(ew.gate_up_b)
        if ew.down_b is not None:
            dn_b.append(ew.down_b)
    wv = (w[0] if order == list(range(len(row))) else w[0, order]).to(wd)
    if gating.weight_before_ffn:  # expert(x * w) = w * (gate_up x) + b: the products are linear in x
        h.mul_(wv.unsqueeze(1))
    if gu_b:
        h.add_(torch.stack(gu_b).to(wd))
    a = glu(h[:, :n_ff], h[:, n_ff:], gating.activation)
    for ew, a_i, y_i in zip(ews, a.unbind(0), y.unbind(0)):
        matvec_into(ew.down, a_i, y_i)
    if dn_b:
        y.add_(torch.stack(dn_b).to(wd))
    out = y.sum(0) if gating.weight_before_ffn else torch.mv(y.t(), wv)
    return out.to(x.dtype).unsqueeze(0)


def run_experts(x: torch.Tensor, ids: np.ndarray, w: torch.Tensor, experts: list[int], get, gating: Gating,
                ws: Workspace | None = None) -> torch.Tensor:
    """Sum over `experts` of weight * expert(x) for the tokens that chose each (all on x's device).
    ids (n, k) host array; w (n, k) weights on x's device. One token with a workspace takes the
    batched path (run_experts_token)."""
    if x.shape[0] == 1 and ws is not None and experts:
        return run_experts_token(x, ids, w, experts, get, gating, ws)
    out = torch.zeros_like(x)
    before = gating.weight_before_ffn
    act = gating.activation
    for e in experts:
        rows, slots = np.nonzero(ids == e)
        r = torch.from_numpy(rows).to(x.device)
        we = w[r, torch.from_numpy(slots).to(x.device)].unsqueeze(1).to(x.dtype)
        xe = x[r]
        y = expert_ffn(xe * we, get(e), act) if before else expert_ffn(xe, get(e), act) * we
        out.index_add_(0, r, y)
    return out


def run_experts_grouped(x: torch.Tensor, ids: np.ndarray, w: torch.Tensor, experts: list[int],
                        gate_up: torch.Tensor, down: torch.Tensor, slot_of, biases: ExpertBiases,
                        gating: Gating) -> torch.Tensor:
    """run_experts as two grouped GEMMs: the (token, expert) pairs sorted by slot, one group per
    slot of gate_up (S, 2F, D) / down (S, D, F); empty groups read nothing."""
    dev = x.device
    tok, col, exp_ = [], [], []
    for e in experts:
        r, c = np.nonzero(ids == e)
        tok.append(r)
        col.append(c)
        exp_.append(np.full(len(r), e))
    tok_a, col_a, exp_a = np.concatenate(tok), np.concatenate(col), np.concatenate(exp_)
    slots = np.asarray([slot_of(int(e)) for e in exp_a], dtype=np.int64)
    order = np.argsort(slots, kind="stable")
    tok_a, col_a, exp_a, slots = tok_a[order], col_a[order], exp_a[order], slots[order]
    offs = torch.from_numpy(np.cumsum(np.bincount(slots, minlength=gate_up.shape[0])).astype(np.int32)).to(dev)
    t_tok = torch.from_numpy(tok_a).to(dev)
    wr = w[t_tok, torch.from_numpy(col_a).to(dev)].unsqueeze(1).to(x.dtype)
    t_exp = torch.from_numpy(exp_a).to(dev)
    xs = x[t_tok] * wr if gating.weight_before_ffn else x[t_tok]
    h = torch._grouped_mm(xs, gate_up.transpose(-2, -1), offs=offs)
    if biases.gate_up is not None:
        h = h + biases.gate_up[t_exp].to(h.dtype)
    n_ff = h.shape[-1] // 2
    y = torch._grouped_mm(glu(h[:, :n_ff], h[:, n_ff:], gating.activation), down.transpose(-2, -1), offs=offs)
    if biases.down is not None:
        y = y + biases.down[t_exp].to(y.dtype)
    if not gating.weight_before_ffn:
        y = y * wr
    return torch.zeros_like(x).index_add_(0, t_tok, y)


class MoeRunner:
    """The routed experts of one block, on its tier."""

    def __init__(self, index: int, lay: ExpertLayout, gating: Gating, tier: str, store, dev_biases: ExpertBiases,
                 ctx: TierContext) -> None:
        self.index, self.lay, self.gating, self.tier = index, lay, gating, tier
        self.store, self.dev_biases, self.ctx = store, dev_biases, ctx
        self.host_tier = "mmap" if getattr(store, "kind", "") == "mmap" else "cpu"
        self.exec_bytes = store.exec_bytes_per_expert
        self.model_bytes = lay.file_bytes_per_expert

    def forward(self, x: torch.Tensor, ids: np.ndarray, w: torch.Tensor, decode: bool) -> torch.Tensor:
        experts = sorted(set(ids.reshape(-1).tolist()))
        m = self.ctx.meter
        if self.tier == "gpu":
            m.add_bytes("gpu", len(experts) * self.exec_bytes, len(experts) * self.model_bytes)
            st = self.store
            return self._on_device(x, ids, w, experts, st.gate_up, st.down, lambda e: e % st.n_pool,
                                   st.weights, st.biases)
        if decode and self.ctx.cache is not None:
            return self._cached(x, ids, w, experts)
        if (decode and self.ctx.cpu_decode_mode == "transfer") or \
                (not decode and self.ctx.prefill_uploads(x.shape[0], self.lay.n_used, self.lay.n_expert)):
            return self._uploaded(x, ids, w, experts)
        return self._on_host(x, ids, w, experts)

    def _on_host(self, x: torch.Tensor, ids: np.ndarray, w: torch.Tensor, experts: list[int]) -> torch.Tensor:
        m = self.ctx.meter
        if not experts:
            return torch.zeros_like(x)
        with m.tier(self.host_tier):
            xh, wh = x.to(HOST), w.to(HOST)
            yh = run_experts(xh, ids, wh, experts, self.store.weights, self.gating, self.ctx.workspace)
            y = yh.to(x.device)
        m.add_bytes(self.host_tier, len(experts) * self.exec_bytes, len(experts) * self.model_bytes)
        n_act = x.shape[0] * x.shape[1]
        # llama.cpp moves f32 activations both ways; the executor moves its own dtype
        m.add_bytes("activations", 2 * n_act * x.element_size(), 2 * n_act * 4)
        return y

    def _uploaded(self, x: torch.Tensor, ids: np.ndarray, w: torch.Tensor, experts: list[int]) -> torch.Tensor:
        m, staging = self.ctx.meter, self.ctx.staging
        assert staging is not None
        out = torch.zeros_like(x)
        for c in range(0, len(experts), staging.n_slots):
            chunk = experts[c: c + staging.n_slots]
            slot_of = {}
            moved = 0
            with m.tier("transfer"):
                for i, e in enumerate(chunk):
                    moved += staging.load(i, self.store.weights(e))
                    slot_of[e] = i
            m.add_bytes("transfer", moved, len(chunk) * self.model_bytes)
            m.add_bytes("gpu", len(chunk) * self.exec_bytes, len(chunk) * self.model_bytes)
            def attach(e, slot_of=slot_of):
                return self.dev_biases.attach(staging.view(slot_of[e]), e)

            out += self._on_device(x, ids, w, chunk, staging.gate_up, staging.down, slot_of.__getitem__,
                                   attach, self.dev_biases)
        return out

    def _cached(self, x: torch.Tensor, ids: np.ndarray, w: torch.Tensor, experts: list[int]) -> torch.Tensor:
        m, cache, slots = self.ctx.meter, self.ctx.cache, self.ctx.cache_slots
        assert cache is not None and slots is not None
        on_dev: dict[int, int] = {}
        uploads: list[tuple[int, int]] = []
        on_host: list[int] = []
        cache.begin_step()
        for e in experts:
            what, slot = cache.access(self.index, e)
            if what == HIT:
                on_dev[e] = slot
            elif what == UPLOAD:
                on_dev[e] = slot
                uploads.append((e, slot))
            else:
                assert what == CPU
                on_host.append(e)
        if uploads:
            moved = 0
            with m.tier("transfer"):
                for e, slot in uploads:
                    moved += slots.load(slot, self.store.weights(e))
            m.add_bytes("transfer", moved, len(uploads) * self.model_bytes)
        out = self._on_host(x, ids, w, on_host)
        if on_dev:
            m.add_bytes("gpu_cache", len(on_dev) * self.exec_bytes, len(on_dev) * self.model_bytes)
            out = out + self._on_device(x, ids, w, sorted(on_dev), slots.gate_up, slots.down, on_dev.__getitem__,
                                        lambda e: self.dev_biases.attach(slots.view(on_dev[e]), e), self.dev_biases)
        return out

    def _on_device(self, x, ids, w, experts, gate_up, down, slot_of, get, biases) -> torch.Tensor:
        """Experts whose matrices are in a device slot tensor: grouped GEMMs, or one by one."""
        if self.ctx.grouped:
            try:
                return run_experts_grouped(x, ids, w, experts, gate_up, down, slot_of, biases, self.gating)
            except (RuntimeError, NotImplementedError) as exc:  # no kernel for this device or dtype
                self.ctx.grouped = False
                self.ctx.notes.append(f"grouped GEMM unavailable here ({str(exc).splitlines()[0][:120]}): "
                                      "device experts run one kernel each")
        return run_experts(x, ids, w, experts, get, self.gating, self.ctx.workspace)
