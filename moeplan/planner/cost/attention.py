"""CPU attention at KV depth, as ggml-cpu (mainline llama.cpp) and ik_llama.cpp execute it.

Sources (llama.cpp as vendored, 0c1e570; ik_llama.cpp 8337e4c):
  ggml/src/ggml-cpu/ops.cpp ggml_compute_forward_flash_attn_ext_f16 (l. 9441-9575):
    split-KV path (l. 9490): one query row (decode), F16/F32 K of the same type as V and
      nek1 >= 512 cells: every thread takes ceil(cells / nth) cells and runs ..._one_chunk over
      them for every q head in turn (l. 9504-9509), then the partials are reduced (l. 9520);
    otherwise rows = n_tokens x n_head in chunks of ceil(rows / (4 nth)) handed out dynamically
      (l. 9528-9575): at most `rows` threads have work and the last one finishes after
      ceil(rows / threads) rows; with >= GGML_FA_TILE_Q (64) query tokens and F16/F32 K=V the
      chunk runs ..._tiled (l. 9081), else ..._one_chunk (l. 8843).
  ..._one_chunk, per KV cell and q head (l. 8958-9018): ggml_vec_dot_f16 of the K row with Q
    (Q converted to the K vec_dot type once per row), expf of the online softmax, then
    ggml_vec_mad_f16 of the V row into an F16 accumulator (each element converted to F32, FMA,
    converted back; vec.h ggml_vec_mad_f16). Quantised K uses the type's vec_dot (Q as Q8),
    quantised V is dequantised to F32 (v_to_float) and added with ggml_vec_mad_f32.
  ..._tiled (l. 9150-9340): 64 query rows of one head x 64 KV cells: K tile converted to F32
    scalar by scalar, mask converted per element, simd_gemm for KQ and for VKQ
    (ggml-cpu/simd-gemm.h), ggml_vec_soft_max_f32; rows past the chunk are zero-padded to 64.
  -fa 0 (llama-graph.cpp build_attn_mha): mul_mat(K, Q) (vec_dot_f16 per cell and head for one
    token, GEMM for a batch), soft_max_ext, mul_mat(V^T, KQ); rows of src0 spread over every
    thread (ggml_compute_forward_mul_mat).
  ik_llama.cpp ggml/src/iqk/iqk_flash_attn.cpp iqk_flash_attn_noalibi: for one query token with
    GQA (rk2 > 1) the KV cells (and KV heads) are split over all threads and the rk2 q heads
    sharing a KV head run together as the rows of one FlashAttn tile (iqk_flash_impl.h), so a
    K/V row is loaded and converted once per group; SWA layers only visit the last
    ceil((max(256, n_tokens) + n_swa) / 256) * 256 cells and masked cells at the ends are
    trimmed. Batches run iqk's tiled FlashAttn (GEMM-like) per head.

The per-cell cost of the vector paths is counted in vector operations per element of the K and
V rows (a load+convert, an FMA, a convert+store each count one; the F32 lanes of one FMA pipe x
two pipes give the elements retired per cycle) plus a fixed cost per cell (the horizontal sum of
the dot product, expf, the indirect vec_dot call and the mask load). These are instruction
counts, not fits; their error is taken as 35%.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from moeplan.planner import backends
from moeplan.planner.model.spec import ModelSpec

# split-KV threshold and query tile (ops.cpp l. 9490; ggml-cpu/common.h GGML_FA_TILE_Q/KV)
SPLIT_KV_MIN_CELLS = 512
# the split-KV decode path came with llama.cpp PR #19209 ("ggml-cpu: FA split across kv for
# faster TG", commit 9f682fb64, merged 2026-01-30), between release tags b7845 and b7921: a build
# numbered below this one runs decode's flash attention row-parallel (each of the n_head rows
# scans the whole cache on one thread). Builds 7846-7920 are taken as having it.
FA_SPLIT_KV_FROM_BUILD = 7846
FA_TILE_Q = 64
FA_TILE_KV = 64
# ik_llama.cpp: FlashAttn q_step rows share one K/V load (iqk_flash_impl.h; 8 on AVX2/AVX512)
IK_Q_STEP = 8

# vector ops per element, ..._one_chunk with F16 K and V (vec.cpp ggml_vec_dot_f16: load+cvt of
# Q and of K, one FMA; vec.h ggml_vec_mad_f16: load+cvt of the accumulator and of V, one FMA,
# cvt+store of the accumulator)
OPS_K_F16 = 3
OPS_V_F16 = 4
# quantised K: an integer dot product (Q8_0: ~2 ops per element of 32-lane int8 work counted in
# F32 lanes); quantised V: dequantise into V32, then ggml_vec_mad_f32 (load, FMA, store)
OPS_K_QUANT = 2
OPS_V_QUANT = 4
# a quantised V row is dequantised into V32 by ggml_get_type_traits(type)->to_float (ops.cpp
# ggml_compute_forward_flash_attn_ext_f16_one_chunk): dequantize_row_q8_0 & co. are plain loops
# in ggml-quants.c, part of ggml-base, which is built without the CPU backend's -march flags.
# benchmarks/kernels/ggml_attn_cell_cost.c (vendored llama.cpp, one thread, d = 128 and 256)
# measured a q8_0 cache at 155-430 cycles per cell and q head against 64-163 for f16 on an
# AVX-512 Xeon, 1.1 cycles per V element more in the same runs
V_DEQUANT_CYCLES_PER_ELEM = 1.1
# fixed cycles per cell and q head of the vec path: horizontal sum (~10), expf (~20), indirect
# vec_dot call, mask load, compare and branch (~10)
CELL_FIXED_CYCLES = 40.0
# ik_llama.cpp's FlashAttn: softmax over blocks of 32 cells with SIMD exp, max, scale
IK_CELL_FIXED_CYCLES = 4.0
# -fa 0: the KQ vec_dot's horizontal sum per cell and head, soft_max_ext with SIMD exp
NOFA_CELL_FIXED_CYCLES = 14.0
# tiled path: scalar work per cell and query row (mask converted and scaled per element; the
# K tile transposed to F32 scalar by scalar, DK / 64 per row of the 64-row tile)
TILED_SCALAR_PER_CELL = 1.0
# a core's read rate from its shared L3 (Zen: 32 B/clk L3->L2; Intel mesh ~16-20 B/clk):
# 16 B per cycle taken for both
L3_BYTES_PER_CYCLE = 16.0
# private L2 per core by family (AMD / Intel optimisation manuals, product briefs)
L2_BYTES = {"haswell": 256 << 10, "comet-lake": 256 << 10, "skylake-client": 256 << 10, "ivy-bridge": 256 << 10,
            "zen1": 512 << 10, "skylake-sp": 1 << 20, "cascade-lake": 1 << 20,
            "icelake-sp": 1280 << 10, "rocket-lake": 512 << 10, "alder-lake": 1280 << 10,
            "sapphire-rapids": 2 << 20, "granite-rapids": 2 << 20, "sierra-forest": 1 << 20,
            "zen2": 512 << 10, "zen3": 512 << 10, "zen4": 1 << 20, "zen5": 1 << 20, "zen5-mobile": 1 << 20}
L2_DEFAULT_BYTES = 1 << 20
VEC_REL_ERR = 0.35

_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32,
               "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32, "q6_0": 26 / 32}


@dataclass(frozen=True)
class AttnLayer:
    """One attention layer as the kernel sees it."""
    cells: int  # cells attended (the window for a sliding-window layer)
    cache_cells: int  # cells in the view the kernel gets (nek1): decides the split-KV path
    n_head: int
    n_head_kv: int
    d_k: int
    d_v: int
    v_in_k: bool  # MLA: V is a view of the latent K cache (no V bytes of its own)
    # ik_llama.cpp's MLA prompt path: FLOP per cell of expanding the latent cache to every head's
    # K and V before the attention (0 elsewhere)
    expand_flop_per_cell: float = 0.0


# ik_llama.cpp's prompt path for MLA (src/graphs/build_deepseek2.cpp at 8337e4cd, `pp_opt =
# n_tokens >= 128 && mla_attn > 1` with flash attention, -mla 3 the default): the cached latent
# c_kv of all n_kv cells is multiplied by wkv_b into every head's K_nope and V (kv_f32 =
# ggml_mul_mat(wkv_b, kv_cache_nope)), then FlashAttention runs as multi-head attention with
# key_length_mla (nope + rope) and value_length_mla per head, instead of the absorbed one-KV-head
# form over kv_lora_rank + rope that decode and mainline llama.cpp (src/models/deepseek2.cpp)
# use for every batch
IK_MLA_PP_MIN_TOKENS = 128


def mla_prompt_dims(model: ModelSpec) -> tuple[int, int, int, int] | None:
    """(d_k, d_v, kv_lora_rank, rope) of an MLA model's expanded heads, None without MLA."""
    extra: dict[str, Any] = dict(model.extra)
    dk, dv, rank = (int(extra.get(k) or 0) for k in ("attention.key_length_mla", "attention.value_length_mla",
                                                     "attention.kv_lora_rank"))
    if not (model.mla and dk and dv and rank):
        return None
    rope = max(0, int(extra.get("attention.key_length") or rank) - rank)
    return dk, dv, rank, rope


@dataclass(frozen=True)
class CpuMachine:
    """What the attention kernels see of the CPU."""
    threads: int  # threads the op runs on (-t for decode, -tb for a batch)
    cores_used: float  # threads on distinct cores (+0.1 per SMT sibling)
    clock_hz: float
    lanes_per_cycle: float  # F32 elements one vector op covers x vector ops per cycle
    l2_bytes: int
    l3_bytes_per_core: float
    dram_bytes_per_s: float  # the whole machine's read rate (the weights' rate)
    gemm_flop_per_s: float  # the matmul rate (cpu_flop_per_s) for tiled / GEMM paths
    gemm_rel_err: float


@dataclass(frozen=True)
class CpuAttention:
    """The CPU attention's time, its formula, relative error and path."""

    seconds: float
    formula: str
    rel_err: float
    path: str


def _is_quant(t: str) -> bool:
    return t.lower() not in ("f16", "f32", "bf16")


def attention_layers(model: ModelSpec, depth: int, n_ubatch: int = 512,
                     blocks: frozenset[int] | None = None, mla_expanded: bool = False) -> list[AttnLayer]:
    """Layers with a K cache ('k' component), their heads and row widths. MLA: the cache holds
    the latent c_kv + k_rope (accounting.kv_read_bytes sizes the same 'k' rows); llama.cpp
    attends with one KV head of width key_length (kv_lora_rank + rope) and V = the first
    value_length of it; `mla_expanded`: ik_llama.cpp's prompt path instead (expanded heads of
    key_length_mla / value_length_mla after a latent-to-heads product, IK_MLA_PP_MIN_TOKENS).
    Sliding-window caches hold window + n_ubatch cells (KvComponent 'swa').
    `blocks`: only these blocks (the CPU blocks of a -ngl split)."""
    extra: dict[str, Any] = dict(model.extra)
    n_head = max(1, model.n_head)
    d_k = int(extra.get("attention.key_length") or (model.n_embd // n_head))
    d_v = int(extra.get("attention.value_length") or d_k)
    mla = mla_prompt_dims(model) if mla_expanded else None
    out = []
    for layer in model.trunk_layers:
        if blocks is not None and layer.index not in blocks:
            continue
        k = next((c for c in layer.kv if c.name == "k"), None)
        if k is None or depth <= 0:
            continue
        if k.cells == "ctx":
            cells, cache = depth, depth
        elif k.cells == "swa":
            cells, cache = min(depth, k.window), min(depth, k.window + n_ubatch)
        else:
            continue
        v_in_k = not any(c.name == "v" for c in layer.kv)
        if mla is not None and v_in_k:
            dk, dv, rank, rope = mla
            out.append(AttnLayer(cells, cache, n_head, n_head, dk, dv, False,
                                 expand_flop_per_cell=2.0 * rank * n_head * (dk - rope + dv)))
            continue
        n_kv = 1 if v_in_k else max(1, k.n_embd // max(1, d_k))
        out.append(AttnLayer(cells, cache, n_head, n_kv, d_k, d_v, v_in_k))
    return out


def attention_flops(layers: list[AttnLayer], n_tokens: int = 1) -> float:
    """Score and value products: 2 * (d_k + d_v) FLOP per cell and q head, plus the MLA
    expansion of ik_llama.cpp's prompt path, once per batch of n_tokens."""
    return sum(2.0 * (a.d_k + a.d_v) * a.cells * a.n_head * n_tokens + a.expand_flop_per_cell * a.cells
               for a in layers)


def _row_bytes(a: AttnLayer, type_k: str, type_v: str) -> tuple[float, float]:
    """Bytes of one cell of one KV head: K row, V row (0 when V is a view of K)."""
    bk = _TYPE_BYTES.get(type_k.lower(), 2.0) * a.d_k
    bv = 0.0 if a.v_in_k else _TYPE_BYTES.get(type_v.lower(), 2.0) * a.d_v
    return bk, bv


def _vec_cycles(a: AttnLayer, m: CpuMachine, type_k: str, type_v: str) -> float:
    """Cycles per cell and q head of ..._one_chunk; a quantised V row is first dequantised by
    the type's to_float, which lives in ggml-base and runs scalar (V_DEQUANT_CYCLES_PER_ELEM)."""
    ok = OPS_K_QUANT if _is_quant(type_k) else OPS_K_F16
    ov = OPS_V_QUANT if _is_quant(type_v) else OPS_V_F16
    dequant = V_DEQUANT_CYCLES_PER_ELEM * a.d_v if _is_quant(type_v) else 0.0
    return (ok * a.d_k + ov * a.d_v) / m.lanes_per_cycle + CELL_FIXED_CYCLES + dequant


def _reread_s(chunk_bytes: float, n_rereads: float, m: CpuMachine, per_thread_dram: float) -> float:
    """Time one thread spends re-reading a working set it already streamed once (the first
    read is the KV read charged with the weights): free from L2, else L3, else DRAM."""
    if n_rereads <= 0 or chunk_bytes <= m.l2_bytes:
        return 0.0
    rate = L3_BYTES_PER_CYCLE * m.clock_hz if chunk_bytes <= m.l3_bytes_per_core else per_thread_dram
    return chunk_bytes * n_rereads / max(1.0, rate)


def decode_attention(layers: list[AttnLayer], m: CpuMachine, backend: str, type_k: str, type_v: str,
                     flash_attn: bool = True, n_tokens: int = 1, split_kv: bool = True) -> CpuAttention:
    """Seconds of the attention ops of one decode step (n_tokens query rows, > 1 with a draft);
    split_kv False: a mainline build from before FA_SPLIT_KV_FROM_BUILD (row-parallel only)."""
    if not layers:
        return CpuAttention(0.0, "", 0.0, "none")
    T = max(1, m.threads)
    eff = max(1.0, min(m.cores_used, T))
    per_thread_dram = m.dram_bytes_per_s / eff
    total, paths = 0.0, set()
    for a in layers:
        rk2 = max(1, a.n_head // a.n_head_kv)
        bk, bv = _row_bytes(a, type_k, type_v)
        if not flash_attn:
            # -fa 0: mul_mat KQ and KQV split over all threads; a K row stays in L1/L2 across the
            # q heads of its group (mul_mat blocks of 16 rows)
            cyc = ((OPS_K_F16 * a.d_k + OPS_K_F16 * a.d_v) / m.lanes_per_cycle + NOFA_CELL_FIXED_CYCLES)
            t = a.cells * a.n_head * n_tokens * cyc / m.clock_hz / eff
            paths.add("mul_mat (-fa 0)")
        elif backends.behaviour(backend).cpu_kernels == "iqk":
            # iqk FlashAttn: per element one FMA per q row, the K/V load+convert shared by the
            # rows of a tile (up to q_step q heads of a GQA group)
            share = min(rk2, IK_Q_STEP) if n_tokens == 1 else min(n_tokens, IK_Q_STEP)
            cyc = ((1 + 1 / share) * (a.d_k + a.d_v)) / m.lanes_per_cycle + IK_CELL_FIXED_CYCLES
            if n_tokens == 1 and rk2 > 1:
                # cells x KV heads over all threads, the group's q heads together
                t = a.cells * a.n_head * cyc / m.clock_hz / eff
                paths.add("iqk split-KV, GQA group together")
            else:
                rows = n_tokens * a.n_head
                per = math.ceil(rows / T)
                t = per * a.cells * cyc / m.clock_hz * (T / eff if rows >= T else 1.0)
                paths.add(f"iqk per head ({min(rows, T)} of {T} threads busy)")
        elif split_kv and n_tokens == 1 and not _is_quant(type_k) and type_k.lower() == type_v.lower() \
                and a.cache_cells >= SPLIT_KV_MIN_CELLS:
            # split-KV: each thread's chunk of cells, every q head in turn; the chunk of one KV
            # head is re-read by the rk2 q heads of its group (from L2 when it fits)
            chunk = math.ceil(a.cells / T)
            cyc = _vec_cycles(a, m, type_k, type_v)
            work = a.cells * a.n_head * cyc / m.clock_hz
            t = max(work / eff, chunk * a.n_head * cyc / m.clock_hz)
            t += _reread_s(chunk * (bk + bv), (rk2 - 1) * a.n_head_kv, m, per_thread_dram)
            paths.add("split-KV")
        else:
            # row-parallel: n_tokens x n_head rows, the busiest thread gets ceil(rows / threads)
            rows = n_tokens * a.n_head
            per = math.ceil(rows / T) if rows >= T else 1
            slow = T / eff if rows >= T else max(1.0, min(rows, T) / eff)
            cyc = _vec_cycles(a, m, type_k, type_v)
            t = per * a.cells * cyc / m.clock_hz * slow
            # every row streams its KV head's whole K and V; the group's other rows re-read it
            t += _reread_s(a.cells * (bk + bv), per * (rk2 - 1) / rk2, m, per_thread_dram)
            paths.add(f"row-parallel ({min(rows, T)} of {T} threads busy)")
        total += t
    a0 = max(layers, key=lambda x: x.cells)
    path = ", ".join(sorted(paths))
    formula = (f"{len(layers)} layers, up to {a0.cells} cells x {a0.n_head} q heads "
               f"(d_k {a0.d_k}, d_v {a0.d_v}, {a0.n_head_kv} KV heads): {path}, {m.threads} threads at "
               f"{m.clock_hz / 1e9:.2f} GHz, {m.lanes_per_cycle:.0f} lanes/cycle")
    return CpuAttention(total, formula, VEC_REL_ERR, path)


def prefill_attention(layers: list[AttnLayer], m: CpuMachine, backend: str, type_k: str, type_v: str,
                      n_ubatch: int, flash_attn: bool = True) -> CpuAttention:
    """Seconds of the attention ops of one ubatch of n_ubatch tokens whose cells are given by
    `layers` (built at the ubatch's mean depth)."""
    if not layers:
        return CpuAttention(0.0, "", 0.0, "none")
    T = max(1, m.threads)
    eff = max(1.0, min(m.cores_used, T))
    u = max(1, n_ubatch)
    total, paths, err = 0.0, set(), VEC_REL_ERR
    for a in layers:
        fl = 2.0 * (a.d_k + a.d_v) * a.cells * a.n_head * u
        rows = u * a.n_head
        tiled_ok = not _is_quant(type_k) and type_k.lower() == type_v.lower()
        if a.expand_flop_per_cell:
            # the latent cache times wkv_b into every head's K and V: a GEMM over all cells
            total += a.expand_flop_per_cell * a.cells / max(1.0, m.gemm_flop_per_s)
            paths.add("MLA heads expanded")
        if not flash_attn or backends.behaviour(backend).cpu_kernels == "iqk" and u >= IK_Q_STEP:
            # GEMMs (-fa 0 mul_mat; iqk's tiled FlashAttn) at the matmul rate, plus the softmax
            t = fl / max(1.0, m.gemm_flop_per_s) + rows * a.cells * NOFA_CELL_FIXED_CYCLES / 2 / m.clock_hz / eff
            paths.add("GEMM (-fa 0)" if not flash_attn else "iqk tiled")
            err = max(err, m.gemm_rel_err)
        elif tiled_ok and u >= FA_TILE_Q:
            # tiled: chunks of ceil(rows / 4T) rows cut into 64-row tiles; a short tile still
            # runs the full 64-row GEMM (zero-padded Q)
            dr = max(1, math.ceil(rows / (4 * T)))
            padded = math.ceil(dr / FA_TILE_Q) * FA_TILE_Q / dr
            # scalar: the mask element and the K tile's transposing convert (d_k / 64 per row);
            # the V tile converts with SIMD (ggml_cpu_fp16_to_fp32)
            per_cell = TILED_SCALAR_PER_CELL + a.d_k / FA_TILE_KV + a.d_v / FA_TILE_KV / m.lanes_per_cycle
            scalar = per_cell * rows * a.cells / m.clock_hz / eff
            t = fl * padded / max(1.0, m.gemm_flop_per_s) + scalar
            paths.add(f"tiled (64-row Q tiles, {1 / padded:.0%} filled)")
            err = max(err, m.gemm_rel_err)
        else:
            cyc = _vec_cycles(a, m, type_k, type_v)
            t = rows * a.cells * cyc / m.clock_hz / eff
            paths.add("one_chunk vec")
        total += t
    a0 = max(layers, key=lambda x: x.cells)
    path = ", ".join(sorted(paths))
    formula = (f"{len(layers)} layers, ubatch {u} x {a0.n_head} q heads x ~{a0.cells} cells: {path}, "
               f"{m.threads} threads")
    return CpuAttention(total, formula, err, path)


def lanes_per_cycle(isa: tuple[str, ...], family: str, half_width_families: set[str]) -> float:
    """F32 elements of vector work retired per cycle: two vector pipes x lanes per op. AVX-512
    cores with full-width units: 2 x 16; Zen 4 (512-bit ops as two 256-bit halves) and AVX2
    cores: 2 x 8; NEON (128-bit) cores: 2 x 4."""
    s = set(isa)
    if "avx512f" in s:
        return 16.0 if family in half_width_families else 32.0
    if "avx2" in s:
        return 16.0
    return 8.0


def cpu_machine(hw, threads: int, n_cores: int, dram_bytes_per_s: float, gemm_flop_per_s: float,
                gemm_rel_err: float, ref_clock_hz: float) -> CpuMachine:
    """The attention kernels' view of the CPU of profile `hw` running `threads` threads."""
    from moeplan.planner.cost import machine

    tu = machine.thread_use(max(1, threads), max(1, n_cores), max(hw.cpu.n_threads, n_cores))
    clock, _ = machine.all_core_clock_hz(hw, ref_clock_hz)
    fam = machine.cpu_family(hw)
    l3 = (hw.cpu.l3_bytes or 0) / max(1, hw.cpu.n_cores) or float(2 << 20)
    return CpuMachine(threads=max(1, threads), cores_used=tu.on_cores + 0.1 * tu.smt_threads, clock_hz=clock,
                      lanes_per_cycle=lanes_per_cycle(hw.cpu.isa, fam, machine.HALF_WIDTH_AVX512_FAMILIES),
                      l2_bytes=L2_BYTES.get(fam, L2_DEFAULT_BYTES), l3_bytes_per_core=l3,
                      dram_bytes_per_s=dram_bytes_per_s, gemm_flop_per_s=gemm_flop_per_s, gemm_rel_err=gemm_rel_err)
