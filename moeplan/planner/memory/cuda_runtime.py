"""What a CUDA (or ROCm) build of llama.cpp allocates on a GPU beyond its buffer lines (pure).

Two items, both derived from the sources of llama.cpp 0c1e570 (ggml/src/ggml-cuda/), applied only
when MemoryConstants.gpu_build names a GPU build ('cuda' or 'rocm'); a CPU/RPC build (the one
tests/data/llama_memory records) allocates neither:

fa_f16_kv   inside the compute buffer (the `compute buffer size` line): with flash attention and a
            quantized K or V cache, the CUDA buffer type sizes the FLASH_ATTN_EXT output tensor
            with room for F16 copies of K and V (ggml-cuda.cu L903-908 get_alloc_size ->
            fattn.cu L722-756, fattn-common.cuh L53-80: pad128(dst) + nelements(K)*2, then
            pad128 + nelements(V)*2 unless V is a view of K, as with MLA). A prompt batch runs the
            MMA or tile kernel, which needs both (fattn.cu L737-742). moeplan adds the extension
            to the attention phase of the compute buffer (compute_buffer.compute_phases) before
            taking the peak; the models whose graph is mirrored op by op (DeepSeek V4, GLM DSA)
            are left as they are.

cuda_pool   outside every buffer line: the high-water mark of the device's memory pool
            (ggml_cuda_pool_vmm, ggml-cuda.cu L528-676), which grows to the largest set of
            temporaries one op holds at a time during a full prompt ubatch and never shrinks.
            nvidia-smi counts it; llama.cpp's memory breakdown puts it in `unaccounted`.
            Each allocation is rounded to 128 bytes (L565-566) and the pool grows in steps of
            the driver's recommended granularity (L571-573; 2 MiB on current NVIDIA GPUs: a
            driver figure, not in the source). The ops, for one ubatch of T tokens:
  * MUL_MAT of a quantized weight (Turing and newer take MMQ for every batch size,
    mmq.cu L341-345): the activations as q8_1, T * pad512(n_in) * 144/128 bytes plus J_max
    spare blocks (mmq.cu L188-191, mmq.cuh L27-57, L372-382), and the stream-k fixup buffer
    (mmq.cuh L1449-1462): n_blocks * J * I floats where the tiles do not divide evenly;
  * MUL_MAT_ID through MMQ (routed experts; also CPU experts that op offload runs on the GPU):
    ids_src1 and ids_dst, 4*T*k bytes each, expert_bounds 4*(E+1) (mmq.cu L241-243), the
    activations T*k*pad512(n_in)*144/128 + J_max(ne11)*144 (L263-265), and the fixup buffer;
  * MUL_MAT of an F16/BF16 weight beyond 16 columns (mmf.cu L176-177 -> cuBLAS, ggml-cuda.cu
    L1436-1525, L1617-1633): src1 converted to the compute type (T*n_in*2) and, for F16 on
    NVIDIA, a temporary F16 dst (T*n_out*2); BF16 writes F32 directly (L1508-1509). F32
    weights run cuBLAS SGEMM without temporaries;
  * without flash attention: KQ is computed in F32 (llama-graph.cpp L2692 ggml_prec_set_acc ->
    ggml-cuda.cu L1631-1633), so the F16 K view is converted to F32 (n_kv * n_embd_k_gqa * 4);
    KQV converts the softmaxed F32 KQ to F16 (n_kv * T * n_head * 2) and writes a temporary F16
    dst (d_v * T * n_head * 2), with the batched-GEMM pointer arrays (L1574-1575).
  * ik_llama.cpp with flash attention and a quantized cache: the F16 copies of K and V go to
    the pool, not into the compute buffer (ik_llama.cpp ggml/src/ggml-cuda/fattn-common.cuh
    launch_fattn at 064003a6: K_f16.alloc(nelements(K)), V_f16.alloc(nelements(V)), V copied
    even when it is a view of K); the backend record's cuda_fa_kv_copies says which runtime
    does which.
  Not modelled: FA's own small temporaries (fattn-common.cuh L1110-1200: KV_max, stream-k
  meta; sized by the occupancy the driver reports) and cuBLAS's workspace (in the context prior).

The SM count (the fixup buffer's block count) and the compute capability come from
MemoryConstants: an H100 SXM (sm_90, 132 SMs) unless a profile says otherwise.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from moeplan.planner.memory import compute_buffer as cb
from moeplan.planner.memory.cache import memo
from moeplan.planner.model.spec import ModelSpec, Tensor
from moeplan.planner.placement import Placement
from moeplan.units import MIB

GPU_BUILDS = ("cuda", "rocm")
POOL_ALIGN = 128  # ggml-cuda.cu L565 (ggml_cuda_pool_vmm::alloc)
POOL_GRANULARITY = 2 * MIB  # cuMemGetAllocationGranularity(RECOMMENDED), ggml-cuda.cu L291: driver figure
MATRIX_ROW_PADDING = 512  # common.cuh L186
Q8_1_MMQ_BYTES, Q8_1_MMQ_VALUES = 144, 128  # block_q8_1_mmq: 128 int8 + 4 half2 (mmq.cuh L27-57)
MMQ_I, MMQ_J_MAX = 128, 128  # rows and widest column tile of the Ampere/Turing MMQ configs (mmq-config-ampere.cuh)
MMF_MAX_COLS = 16  # mmf.cu L176: dense F16/BF16 MUL_MAT beyond 16 columns goes to cuBLAS
QUANTIZED_NOT = ("F32", "F16", "BF16", "I8", "I16", "I32", "I64", "F64")


@dataclass(frozen=True)
class PoolOp:
    """One op's live pool allocations, bytes each before the 128-byte rounding."""

    what: str
    allocs: tuple[int, ...]

    @property
    def n_bytes(self) -> int:
        return sum(_pad(a, POOL_ALIGN) for a in self.allocs)


def _pad(n: int, a: int) -> int:
    return -(-n // a) * a


def _attention_rows(model: ModelSpec, p: Placement) -> Iterator[tuple[Any, Any, dict, int]]:
    """(K component, V component or None, compute_buffer's attention figures, KV cells over all
    streams) of each attention kind."""
    shape = cb.reserve_shape(p)
    streams = 1 if p.kv_unified or p.n_seq <= 1 else p.n_seq
    for (_, k, v, _layer), a in zip(cb._attention_kinds(model), cb._attention_layers(model, p, shape)):
        yield k, v, a, a["n_kv"] * streams


def is_gpu_build(gpu_build: str | None) -> bool:
    return (gpu_build or "") in GPU_BUILDS


def quantized(ggml_type: str) -> bool:
    return ggml_type.upper() not in QUANTIZED_NOT


def q8_1_bytes(rows: int, n_in: int) -> int:
    """MMQ's quantized activations: rows x pad512(n_in) values as block_q8_1_mmq (mmq.cu L188-189)."""
    return rows * _pad(n_in, MATRIX_ROW_PADDING) * Q8_1_MMQ_BYTES // Q8_1_MMQ_VALUES


def j_max(ne11: int) -> int:
    """ggml_cuda_mmq_get_J_max (mmq.cuh L372-382): the widest configured column tile <= min(ne11, 512)."""
    r = min(ne11, 512)
    r -= r % 8
    return min(r, MMQ_J_MAX)


def mmq_fixup_bytes(n_out: int, ncols: int, n_channels: int, sm_count: int, nvidia: bool = True) -> int:
    """The stream-k fixup buffer of one MMQ launch (mmq.cuh L1417-1462): the column tile J is the
    narrowest giving the fewest tiles (mul_mat_q_switch_J, L1485-1503); stream-k launches one block
    per SM unless plain tiling is >= 90% efficient (NVIDIA only), and a fixup buffer of
    blocks x J x I floats is needed when the tiles do not divide among the blocks."""
    n_tiles_x = -(-ncols // MMQ_J_MAX)
    j = min(MMQ_J_MAX, _pad(-(-ncols // n_tiles_x), 8))
    ntiles = -(-n_out // MMQ_I) * -(-ncols // j) * n_channels
    waves = -(-ntiles // sm_count)
    efficiency = 100 * ntiles // (sm_count * waves)
    blocks = ntiles if nvidia and efficiency >= 90 else sm_count
    return 0 if ntiles % blocks == 0 else blocks * j * MMQ_I * 4


def _pool_weights(model: ModelSpec) -> list[tuple[int, Tensor]]:
    """(layer index, -1 for the output layer; tensor) of every matrix whose MUL_MAT(_ID) may run
    on a GPU in a prompt batch, the output layer first."""
    out = [(-1, t) for t in model.globals if t.group == "output" and len(t.shape) >= 2]
    for layer in model.layers:
        for t in layer.tensors:
            if len(t.shape) < 2 or not t.name.endswith(".weight") or "conv1d" in t.name or t.group == "norm":
                continue
            out.append((layer.index, t))
    return out


def _runs_here(index: int, expert: bool, cpu_layers: set[int], staged: bool, blocks: set[int] | None,
               with_output: bool) -> bool:
    """Whether this GPU runs the matmul of a weight of layer `index` (-1: the output layer):
    every matrix of its blocks (`blocks`, None = all) and the output layer; CPU experts too
    when op offload stages them."""
    if index < 0:
        return with_output
    cpu_expert = expert and index in cpu_layers
    if cpu_expert and not staged:
        return False
    return blocks is None or index in blocks or cpu_expert


def matmul_pool_op(t: Tensor, n_tokens: int, n_outputs: int, n_used: int, sm_count: int,
                   nvidia: bool = True) -> PoolOp | None:
    """The pool allocations of one weight's matmul over a full ubatch (see the module docstring)."""
    n_in, n_out = t.shape[0], t.shape[1]
    cols = n_outputs if t.group == "output" else n_tokens
    if len(t.shape) >= 3 and t.group == "experts":
        n_exp = t.shape[2]
        rows = cols * n_used
        # gate/up see the token broadcast over the experts (ne11 = 1), down the k expert rows (ne11 = k)
        ne11 = n_used if "down" in t.name else 1
        if quantized(t.ggml_type):
            return PoolOp(f"MUL_MAT_ID MMQ {t.name}",
                          (4 * rows, 4 * rows, 4 * (n_exp + 1),
                           q8_1_bytes(rows, n_in) + j_max(ne11) * Q8_1_MMQ_BYTES,
                           mmq_fixup_bytes(n_out, cols, n_exp, sm_count, nvidia)))
        # F16/BF16 experts without MMF (ggml-cuda.cu L1965-1970): sorted ids, src1 and dst
        ts = 4 if t.ggml_type.upper() == "F32" else 2
        return PoolOp(f"MUL_MAT_ID sorted {t.name}", (8 * rows, rows * n_in * ts, rows * n_out * 4))
    if quantized(t.ggml_type):
        return PoolOp(f"MUL_MAT MMQ {t.name}",
                      (q8_1_bytes(cols, n_in) + j_max(cols) * Q8_1_MMQ_BYTES,
                       mmq_fixup_bytes(n_out, cols, 1, sm_count, nvidia)))
    ty = t.ggml_type.upper()
    if ty == "F32" or cols <= MMF_MAX_COLS:
        return None
    # cuBLAS: src1 to F16/BF16; F16 on NVIDIA writes a temporary F16 dst, BF16 writes F32
    return PoolOp(f"MUL_MAT cuBLAS {t.name}", (cols * n_in * 2,) + ((cols * n_out * 2,) if ty == "F16" else ()))


def _fa_kv_in_pool(p: Placement) -> bool:
    from moeplan.planner import backends

    return backends.behaviour(p.backend).cuda_fa_kv_copies == "pool"


def attention_pool_ops(model: ModelSpec, p: Placement) -> list[PoolOp]:
    """Without flash attention: KQ's F32 copy of the K view, KQV's F16 copy of KQ and F16 dst;
    with it, on a runtime that converts a quantized cache in the pool, the F16 K and V."""
    if p.flash_attn:
        return _fa_pool_ops(model, p) if _fa_kv_in_pool(p) else []
    t = cb.reserve_shape(p).n_tokens
    ops: list[PoolOp] = []
    for k, _v, a, n_kv in _attention_rows(model, p):
        if a["kind"] == "mla":
            h, d_k, d_v = max(1, model.n_head), a["kv_lora"] + a["rope"], a["kv_lora"]
        else:
            h, d_k, d_v = a["n_head"], a["d_k"], a["d_v"]
        k_elems = k.n_embd * n_kv
        ptrs = (2 * h * 8, h * 8)  # cublasGemmBatchedEx pointer arrays (ggml-cuda.cu L1574-1575)
        if quantized(p.cache_type_k):
            # MMQ over the query rows: src1 = q [d_k, T, n_head] (mmq.cu L188-191)
            kq = PoolOp("KQ MMQ (quantized K)", (q8_1_bytes(t * h, d_k) + j_max(t) * Q8_1_MMQ_BYTES,))
        else:
            kq = PoolOp("KQ cuBLAS F32 (K view to F32)", (k_elems * 4,) + ptrs)
        kqv = PoolOp("KQV cuBLAS F16 (KQ to F16, F16 dst)", (n_kv * t * h * 2, d_v * t * h * 2) + ptrs)
        ops += [kq, kqv]
    return ops


def _weight_pool_ops(model: ModelSpec, n_tokens: int, n_outputs: int, n_used: int, sm_count: int,
                     nvidia: bool) -> list[tuple[int, bool, int, Tensor]]:
    """(layer index or -1, whether a routed expert, the bytes of its pool op, the weight) of
    each of _pool_weights whose matmul uses the pool, in its order; memoised per model and
    ubatch (the search asks for hundreds of placements of one model: only the choice of weights
    differs), each op computed once per distinct weight shape and type (the blocks repeat)."""
    cache = memo(model)
    key = ("cuda_weight_pool_ops", n_tokens, n_outputs, n_used, sm_count, nvidia)
    got = cache.get(key)
    if got is None:
        got = []
        by_kind: dict[tuple, int | None] = {}  # what matmul_pool_op reads of a weight besides its name
        for index, t in _pool_weights(model):
            kind = (t.shape, t.group, t.ggml_type, "down" in t.name)
            if kind not in by_kind:
                op = matmul_pool_op(t, n_tokens, n_outputs, n_used, sm_count, nvidia)
                by_kind[kind] = None if op is None else op.n_bytes
            n_bytes = by_kind[kind]
            if n_bytes is not None:
                got.append((index, t.group == "experts", n_bytes, t))
        cache[key] = got
    return got


def cuda_pool_bytes(model: ModelSpec, p: Placement, cpu_layers: set[int], staged: bool, sm_count: int,
                    nvidia: bool = True, blocks: set[int] | None = None, with_output: bool = True) -> tuple[int, str]:
    """The pool's size after a full prompt ubatch, and the op that sets it (the first of the
    largest, weights in _pool_weights' order, then attention); `blocks` and `with_output` restrict it to one device's ops."""
    shape = cb.reserve_shape(p)
    n_used = p.n_experts_used or model.n_experts_used
    top: Tensor | PoolOp | None = None
    top_bytes = 0
    for index, expert, n_bytes, t in _weight_pool_ops(model, shape.n_tokens, shape.n_outputs, n_used, sm_count,
                                                      nvidia):
        if (top is None or n_bytes > top_bytes) and _runs_here(index, expert, cpu_layers, staged, blocks,
                                                                with_output):
            top, top_bytes = t, n_bytes
    if blocks is None or blocks:
        for op in attention_pool_ops(model, p):
            if top is None or op.n_bytes > top_bytes:
                top, top_bytes = op, op.n_bytes
    if isinstance(top, Tensor):
        top = matmul_pool_op(top, shape.n_tokens, shape.n_outputs, n_used, sm_count, nvidia)
    if top is None:
        return 0, "no op uses the pool"
    return _pad(top_bytes, POOL_GRANULARITY), top.what


def _fa_pool_ops(model: ModelSpec, p: Placement) -> list[PoolOp]:
    """ik_llama.cpp's launch_fattn: F16 copies of a quantized K and V in the pool, per attention kind."""
    ops = []
    for k, v, a, n_kv in _attention_rows(model, p):
        v_width = a["kv_lora"] if a["kind"] == "mla" else (v.n_embd if v is not None else 0)
        allocs = ((k.n_embd * n_kv * 2,) if quantized(p.cache_type_k) else ()) + (
            (v_width * n_kv * 2,) if quantized(p.cache_type_v if a["kind"] != "mla" else p.cache_type_k) else ())
        if allocs:
            ops.append(PoolOp("FA F16 copies of the quantized K/V (ik_llama.cpp)", allocs))
    return ops


def fa_f16_kv_bytes(model: ModelSpec, p: Placement) -> int:
    """The FLASH_ATTN_EXT output's extension for F16 copies of a quantized K/V cache (module
    docstring), for the attention kind where it is largest; 0 without FA, with an F16 cache or on
    a runtime that makes the copies in the pool (ik_llama.cpp)."""
    if not p.flash_attn or (not quantized(p.cache_type_k) and not quantized(p.cache_type_v)) or _fa_kv_in_pool(p):
        return 0
    n_tokens = cb.reserve_shape(p).n_tokens
    best = 0
    for k, v, a, n_kv in _attention_rows(model, p):
        if a["kind"] == "mla":
            dst = 4 * max(1, model.n_head) * a["kv_lora"] * n_tokens
            v_view_of_k = True
        else:
            dst = 4 * a["n_head"] * a["d_v"] * n_tokens
            v_view_of_k = v is None
        end = dst
        if quantized(p.cache_type_k):
            end = _pad(end, 128) + k.n_embd * n_kv * 2
        if quantized(p.cache_type_v) and not v_view_of_k and v is not None:
            end = _pad(end, 128) + v.n_embd * n_kv * 2
        best = max(best, end - dst)
    return best


def with_fa_f16_kv(phases: dict[str, dict[str, int]], fa_f16_kv: int) -> dict[str, dict[str, int]]:
    """compute_buffer phases with the FA output's F16 extension in the attention phase."""
    if not fa_f16_kv or "attention" not in phases:
        return phases
    return {**phases, "attention": {**phases["attention"], "fa_f16_kv": fa_f16_kv}}


def with_device_pools(model: ModelSpec, p: Placement, devices: tuple[Any, ...], cpu_layers: set[int],
                      gpu_build: str, sm_count: int, min_batch: int) -> tuple[Any, ...]:
    """devices.DeviceMemory rows with each device's pool high-water from the ops it runs: its
    blocks' matmuls, the output's on the output device, and the staged CPU experts on the first
    device (op offload hands them to the first backend that wants them, ggml-backend.cpp L970-975)."""
    staged_ok = p.op_offload and cb.reserve_shape(p).n_tokens >= min_batch
    out = []
    for d in devices:
        pool, _ = cuda_pool_bytes(model, p, cpu_layers, staged_ok and d.index == 0, sm_count,
                                  gpu_build == "cuda", set(d.blocks), d.output)
        out.append(replace(d, pool_bytes=pool))
    return tuple(out)
