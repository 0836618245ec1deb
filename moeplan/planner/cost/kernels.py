"""Which CPU kernel multiplies a weight matrix of a given ggml type, per backend, and how fast.

Decode (batch 1) runs every weight through the type's dot product: its cost per weight against
Q8_0 is the backend's `type_cost` table (profiles/backends.toml; `type_cost_of`). Prefill (a
ubatch of u tokens) picks one of these paths per weight tensor:

mainline llama.cpp (vendored ggml/src/ggml-cpu, llama-cpp-python 0.3.36):
  'amx'     ggml-cpu/amx/amx.cpp: MUL_MAT (dense weights, never MUL_MAT_ID) of
            qtype_has_amx_kernels() types (amx/common.h:106: Q4_0 Q4_1 Q8_0 Q4_K Q5_K Q6_K
            IQ4_XS) in a build with AMX; the AMX buffer is the first extra buffer
            (ggml-cpu.cpp:47) so it wins over repack for those tensors.
  'repack'  ggml-cpu/repack.cpp ggml_repack_get_optimal_repack_type (:4925): weights
            interleaved 8 rows at a time at load; MUL_MAT runs register-tiled int8 GEMM
            kernels. x86: Q4_0, Q4_K, IQ4_NL, MXFP4 with AVX2, Q2_K with AVX-512; ARM: Q4_0
            Q4_K Q5_K Q6_K IQ4_NL MXFP4 Q8_0. Weights overridden to the CPU (-ot exps=CPU,
            --cpu-moe) get it too (llama-model-loader.cpp: "when overriding to a CPU buffer,
            consider the extra buffer types").
  'repack_gemv' the routed experts (MUL_MAT_ID) of those types: forward_mul_mat_id
            (repack.cpp:4869-4911) calls the interleaved gemv once per token routed to the
            expert -- a batch-1 kernel over 8 rows at a time, at the dot rate times the gain
            of the interleaved layout (kernel_x.repack_gemv).
  'sgemm'   llamafile tinyBLAS (ggml-cpu.c ggml_compute_forward_mul_mat -> llamafile_sgemm,
            llamafile/sgemm.cpp:3829-4131): MUL_MAT only, F32 F16 BF16 Q8_0 Q4_0 Q5_0 IQ4_NL
            on x86 (AVX2+); the MUL_MAT_ID of the routed experts never calls it.
  'vec_dot' everything else: ggml_compute_forward_mul_mat_one_chunk / _id_one_chunk call the
            type's vec_dot once per (weight row, token) pair with the activations quantized to
            the vec_dot type: the batch-1 dot product, weights cache-resident. Its rate is the
            decode dot rate (cpu_dot_elem_per_s / type_cost), not a fraction of the FP32 peak.
ik_llama.cpp (ggml/src/iqk/iqk_mul_mat.cpp at 8337e4cd):
  'iqk_repack' MulMat::is_dequant_better (:238): when a matrix multiplies at least ny_min
            columns (tokens; for MUL_MAT_ID the tokens routed to that expert: iqk_mul_mat_moe
            :724 passes the expert's own row count), the weights are converted on the fly to
            Q8_K_R8 / Q8_K_R16 / Q8_0_R8 / Q8_1 tiles and one fast int8 GEMM runs: nearly the
            same rate for every type (PRs 531/533/2474).
  'iqk'     below that threshold, or for types without a conversion, the type's own iqk GEMM
            kernel, which unpacks a block once per pass of up to 8 columns (mul_mat_NxM):
            t(n) per weight and column = (U + n M) / n, U and M from the decode dot cost (n=1)
            and the type's published PP-512 rate relative to the repacked path (n=8).
KTransformers (llamafile/iqk GEMM of its CPU experts, kt-kernel AMX kernels for BF16/INT8/INT4):
  'gemm' for every type at the backend's cpu_mm_eff (its prior is fitted on Q4_K_M rows; no
            per-type figures are published).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

from moeplan.planner import backends

# ISA classes as estimate.cpu_isa_class names them
_AVX2_UP = ("avx2", "avx512f", "avx512_vnni", "amx")
_AVX512_UP = ("avx512f", "avx512_vnni", "amx")

# mainline repack.cpp ggml_repack_get_optimal_repack_type: type -> ISA classes that repack it
MAINLINE_REPACK: dict[str, tuple[str, ...]] = {
    "Q4_0": _AVX2_UP + ("neon",), "Q4_K": _AVX2_UP + ("neon",), "IQ4_NL": _AVX2_UP + ("neon",),
    "MXFP4": _AVX2_UP + ("neon",), "Q2_K": _AVX512_UP,  # ggml_cpu_has_avx512() (repack.cpp:5034)
    "Q5_K": ("neon",), "Q6_K": ("neon",), "Q8_0": ("neon",),
}
# llamafile_sgemm (sgemm.cpp): x86 AVX2+ F32/F16/BF16/Q8_0/Q4_0/Q5_0/IQ4_NL; ARM F32/F16/Q8_0/Q4_0
MAINLINE_SGEMM: dict[str, tuple[str, ...]] = {
    "F32": _AVX2_UP + ("neon",), "F16": _AVX2_UP + ("neon",), "BF16": _AVX2_UP,
    "Q8_0": _AVX2_UP + ("neon",), "Q4_0": _AVX2_UP + ("neon",), "Q5_0": _AVX2_UP, "IQ4_NL": _AVX2_UP,
}
# amx/common.h qtype_has_amx_kernels
MAINLINE_AMX = ("Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS")
FLOAT_TYPES = ("F32", "F16", "BF16")

# ik_llama.cpp MulMat::is_dequant_better, AVX2/AVX-512 branch (iqk_mul_mat.cpp:246-281): the
# fewest columns at which a type is converted for the fast GEMM
IK_DEQUANT_MIN_NY: dict[str, int] = {
    **{t: 32 for t in ("IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ4_XS", "IQ3_S", "IQ1_S", "IQ1_M", "Q2_K", "Q3_K",
                       "Q4_K", "Q5_K", "IQ2_KS", "IQ2_K", "IQ2_KL", "IQ3_KS", "IQ3_K", "IQ4_KS", "IQ4_KSS",
                       "IQ4_K", "IQ5_KS", "IQ5_K", "IQ6_K", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q6_0", "IQ4_NL",
                       "MXFP4", "Q8_0")},
    "IQ2_S": 16, "Q6_K": 64, "IQ1_KT": 16, "IQ2_KT": 16, "IQ3_KT": 16, "IQ4_KT": 24,
}
# iqk's own GEMM kernels process up to this many columns per pass over a block (mul_mat_NxM)
IK_TILE_COLS = 8
# ik_llama.cpp -rtr (iqk_quantize.cpp get_repack_info at 8337e4cd): the row-interleaved type each
# host tensor of these types is repacked to at load. F16/BF16 -> BF16_R16 happens only on CPUs
# with AVX512-BF16 and is left out here; the interleaved types are not among the types
# MulMat::is_dequant_better converts, so prefill multiplies them with their own kernels.
IK_REPACK: dict[str, str] = {
    "IQ2_K": "IQ2_K_R4", "IQ3_K": "IQ3_K_R4", "IQ4_K": "IQ4_K_R4", "IQ5_K": "IQ5_K_R4",
    "IQ4_XS": "IQ4_XS_R8", "IQ4_KS": "IQ4_KS_R4", "IQ5_KS": "IQ5_KS_R4", "IQ4_NL": "IQ4_NL_R4",
    "IQ2_XXS": "IQ2_XXS_R4", "IQ2_XS": "IQ2_XS_R4", "IQ2_S": "IQ2_S_R4", "IQ3_XXS": "IQ3_XXS_R4",
    "IQ3_S": "IQ3_S_R4", "Q2_K": "Q2_K_R4", "Q3_K": "Q3_K_R4", "Q4_K": "Q4_K_R4", "Q5_K": "Q5_K_R4",
    "Q6_K": "Q6_K_R4", "Q4_0": "Q4_0_R8", "Q5_0": "Q5_0_R4", "Q6_0": "Q6_0_R4", "Q8_0": "Q8_0_R8",
    "MXFP4": "MXFP4_R8",
}


# ik_llama.cpp's CUDA backend multiplies these row-interleaved types (ggml-cuda.cu
# ggml_backend_cuda_supports_op, GGML_OP_MUL_MAT / MUL_MAT_ID at 8337e4cd) and no other: a CPU
# expert tensor of another interleaved type (a Q4_K_R4 file, or Q4_K/Q5_K/Q6_K/IQ4_XS/Q8_0 after
# -rtr) cannot be offloaded for a large batch and is multiplied on the CPU
IK_CUDA_INTERLEAVED = frozenset({"IQ1_S_R4", "IQ1_M_R4", "IQ2_K_R4", "IQ3_K_R4", "IQ4_K_R4", "IQ4_KS_R4",
                                 "IQ5_K_R4", "IQ5_KS_R4"})


def ik_cuda_multiplies(ggml_type: str) -> bool:
    """Whether ik_llama.cpp's CUDA backend takes a matrix product with weights of this type."""
    return not _REPACKED.match(ggml_type) or ggml_type in IK_CUDA_INTERLEAVED


def repacked(weights: dict[str, float]) -> dict[str, float]:
    """{type: weights} after ik_llama.cpp -rtr: each type with an interleaved variant becomes it."""
    out: dict[str, float] = {}
    for t, n in weights.items():
        r = IK_REPACK.get(t, t)
        out[r] = out.get(r, 0.0) + n
    return out

_REPACKED = re.compile(r"^(.+)_R(4|8|16)$")


def base_type(ggml_type: str) -> str:
    """ik_llama.cpp's row-interleaved variants (IQ4_K_R4, Q8_0_R8 ...) -> the type they repack."""
    m = _REPACKED.match(ggml_type)
    return m.group(1) if m else ggml_type


def type_cost_of(ggml_type: str, table: dict[str, float], default: float = 1.3) -> float:
    """Relative batch-1 dot cost of a type against Q8_0 (backends.toml type_cost); an
    interleaved _R4/_R8 variant costs what its base type does (ik_llama.cpp PR 517: IQ1_S and
    IQ1_S_R4 TG-128 27.8 / 28.2 t/s on a Ryzen-7950X); unknown types get `default`."""
    if ggml_type in table:
        return table[ggml_type]
    return table.get(base_type(ggml_type), default)


def mainline_path(ggml_type: str, isa: str, dense: bool) -> str:
    """The kernel mainline ggml-cpu runs a weight of this type with (module docstring)."""
    if dense and isa == "amx" and ggml_type in MAINLINE_AMX:
        return "amx"
    if isa in MAINLINE_REPACK.get(ggml_type, ()):
        return "repack" if dense else "repack_gemv"
    if dense and isa in MAINLINE_SGEMM.get(ggml_type, ()):
        return "sgemm"
    return "vec_dot"


def ik_path(ggml_type: str, ny: float) -> str:
    """The kernel ik_llama.cpp's iqk_mul_mat runs a weight of this type with when the matrix
    multiplies `ny` columns (tokens; per expert for MUL_MAT_ID)."""
    if ggml_type in FLOAT_TYPES:
        return "iqk_float"
    if _REPACKED.match(ggml_type):
        # row-interleaved types run their own kernels: is_dequant_better lists none of them at
        # 8337e4cd (ik_llama.cpp PR 2474, later, adds converters for some)
        return "iqk"
    need = IK_DEQUANT_MIN_NY.get(base_type(ggml_type))
    if need is not None and ny >= need:
        return "iqk_repack"
    return "iqk"


def path_of(backend: str, ggml_type: str, isa: str, dense: bool, ny: float) -> str:
    kind = backends.behaviour(backend).cpu_kernels
    if kind == "mainline":
        return mainline_path(ggml_type, isa, dense)
    if kind == "iqk":
        return ik_path(ggml_type, ny)
    return "gemm"


@dataclass(frozen=True)
class CpuRates:
    """The CPU's rates for one prefill, over the batch threads.

    fp_gemm_flop_per_s: the backend's FP32/F16 GEMM rate (cpu_flop_per_s = cpu_mm_eff x peak);
    peak_flop_per_s: the FP32 FMA peak behind it (cpu_flop_per_s / cpu_mm_eff);
    dot_elem_per_s: Q8_0 weights per second of the batch-1 dot product over the batch threads;
    isa: estimate.cpu_isa_class; backend: the backend's name;
    peak_x: {path: {isa: rate as a multiple of the FP32 peak}} (backends.toml gemm_peak_x);
    kernel_x: {'vec_dot_batch': the dot kernels' rate on cache-resident weights in a batch /
        the decode dot prior, 'repack_gemv': the interleaved gemv's / vec_dot's};
    native_frac: {type: the type's own iqk GEMM rate / the repacked path's} (ik_llama.cpp);
    type_cost: the backend's batch-1 dot costs;
    repack: ik_llama.cpp -rtr, the weights multiplied as their row-interleaved types;
    int_x: the quantized GEMM paths' rate on this core against peak_x x its FP32 peak (integer
        SIMD bits per cycle against FP32 FLOP per cycle, relative to the anchor's:
        machine.quant_gemm_x)."""

    fp_gemm_flop_per_s: float
    peak_flop_per_s: float
    dot_elem_per_s: float
    isa: str
    backend: str
    peak_x: dict[str, dict[str, float]]
    kernel_x: dict[str, float]
    native_frac: dict[str, float]
    type_cost: dict[str, float]
    repack: bool = False  # ik_llama.cpp -rtr: the weights run as their interleaved types (IK_REPACK)
    int_x: float = 1.0  # machine.quant_gemm_x

    def as_run(self, weights: dict[str, float]) -> dict[str, float]:
        """{type: weights} as the kernels see them: after -rtr, the interleaved types."""
        return repacked(weights) if self.repack else weights

    def gemm_flop_per_s(self, path: str) -> float:
        """FLOP/s of a GEMM path: its multiple of the FP32 peak (a quantized vector path at this
        core's integer SIMD width, int_x; AMX's tiles are no vector ALU work), else the FP32 GEMM
        rate."""
        x = self.peak_x.get(path, {}).get(self.isa, 0.0)
        if not x:
            return self.fp_gemm_flop_per_s
        return x * (1.0 if path == "amx" else self.int_x) * self.peak_flop_per_s

    def seconds_per_weight_token(self, ggml_type: str, path: str, ny: float) -> float:
        """Seconds per (weight x token) over all batch threads."""
        dot = max(1.0, self.dot_elem_per_s * self.kernel_x.get("vec_dot_batch", 1.0))
        if path in ("vec_dot", "repack_gemv"):
            gain = self.kernel_x.get("repack_gemv", 1.0) if path == "repack_gemv" else 1.0
            return type_cost_of(ggml_type, self.type_cost) / (dot * gain)
        if path == "iqk":
            # one unpack U per pass of up to IK_TILE_COLS columns + a multiply-add M per column:
            # decode (1 column) costs U + M, the type's PP-512 rate (full passes) (U + 8 M) / 8
            t1 = type_cost_of(ggml_type, self.type_cost) / dot
            frac = self.native_frac.get(ggml_type, self.native_frac.get(base_type(ggml_type), 0.5))
            t8 = 2.0 / max(1.0, frac * self.gemm_flop_per_s("iqk_repack"))
            m = max(0.0, (IK_TILE_COLS * t8 - t1) / (IK_TILE_COLS - 1))
            u = max(0.0, t1 - m)
            n = max(1.0, ny)
            return (math.ceil(n / IK_TILE_COLS) * u + n * m) / n
        if path in ("iqk_float", "gemm") or (path == "sgemm" and ggml_type in FLOAT_TYPES):
            return 2.0 / max(1.0, self.fp_gemm_flop_per_s)
        return 2.0 / max(1.0, self.gemm_flop_per_s(path))


@dataclass(frozen=True)
class MatmulTime:
    """The time of a ubatch's matmuls, their FLOPs and each path's share."""

    seconds: float          # per ubatch
    flops: float            # 2 x weights x tokens
    shares: dict[str, float]  # path -> share of the time

    def how(self) -> str:
        rate = self.flops / self.seconds if self.seconds else 0.0
        paths = ", ".join(f"{p} {s:.0%}" for p, s in sorted(self.shares.items(), key=lambda kv: -kv[1]))
        return f"{self.flops / 1e12:.2f} TFLOP / {rate / 1e12:.2f} TFLOP/s ({paths} of the time)"


@lru_cache(maxsize=256)
def expert_columns(n_tokens: int, k: int, n_experts: int) -> tuple[tuple[int, float], ...]:
    """How a ubatch's expert work spreads over the columns each expert multiplies: (n, share of
    the token x expert products done by experts that got n tokens). With every token routing to k
    of N experts uniformly, an expert's count is Binomial(n_tokens, k/N), and the products at
    count n are P(n) n / (n_tokens k / N). Real routers are skewed, which only widens it."""
    if n_experts <= 0 or k <= 0 or n_tokens <= 0:
        return ((max(1, n_tokens), 1.0),)
    q = min(1.0, k / n_experts)
    if q >= 1.0:
        return ((n_tokens, 1.0),)
    mean = n_tokens * q
    sd = math.sqrt(n_tokens * q * (1.0 - q))
    lo, hi = max(1, int(mean - 8 * sd)), min(n_tokens, int(math.ceil(mean + 8 * sd)))
    out = []
    for n in range(lo, hi + 1):
        log_p = (math.lgamma(n_tokens + 1) - math.lgamma(n + 1) - math.lgamma(n_tokens - n + 1)
                 + n * math.log(q) + (n_tokens - n) * math.log1p(-q))
        share = math.exp(log_p) * n / mean
        if share > 1e-6:
            out.append((n, share))
    total = sum(s for _, s in out)
    return tuple((n, s / total) for n, s in out)


def matmul_time(weights: dict[str, float], tokens: float, ny: float | tuple[tuple[int, float], ...], dense: bool,
                r: CpuRates) -> MatmulTime:
    """Time of multiplying `tokens` tokens through weights {ggml type: elements each token
    meets}, each type by the path its backend takes at `ny` columns per matrix; `ny` may be the
    spread of expert_columns, each count with its share of the work (ik_llama.cpp picks the
    kernel of each expert's matrix by its own count)."""
    spread = ny if isinstance(ny, tuple) else ((ny, 1.0),)
    weights = r.as_run(weights)
    total, flops = 0.0, 0.0
    by_path: dict[str, float] = {}
    for t, n in weights.items():
        if n <= 0:
            continue
        for cols, share in spread:
            path = path_of(r.backend, t, r.isa, dense, cols)
            s = share * tokens * n * r.seconds_per_weight_token(t, path, cols)
            total += s
            by_path[path] = by_path.get(path, 0.0) + s
        flops += 2.0 * tokens * n
    shares = {p: s / total for p, s in by_path.items()} if total else {}
    return MatmulTime(total, flops, shares)


def add(a: MatmulTime, b: MatmulTime) -> MatmulTime:
    s = a.seconds + b.seconds
    paths = {p: (a.shares.get(p, 0.0) * a.seconds + b.shares.get(p, 0.0) * b.seconds) / s if s else 0.0
             for p in set(a.shares) | set(b.shares)}
    return MatmulTime(s, a.flops + b.flops, paths)
