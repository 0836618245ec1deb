"""CPU kernel cost per quant type (cost/kernels.py): which path each backend runs a weight
type with, the bundled per-backend decode costs, and the prefill terms' dependence on type."""
from dataclasses import replace

import pytest
from model_builders import toy_hw, toy_model, unit_priors

from moeplan.planner.cost import kernels
from moeplan.planner.cost.estimate import estimate
from moeplan.planner.placement import Placement
from moeplan.profiles.backends import read_priors

# ---- path selection -------------------------------------------------------------------------

@pytest.mark.parametrize("typ, isa, dense, path", [
    ("Q4_K", "avx2", True, "repack"),          # repack.cpp: Q4_K 8x8 with AVX2
    ("Q4_K", "avx2", False, "repack_gemv"),    # MUL_MAT_ID of repacked experts: gemv per token
    ("Q6_K", "avx512_vnni", False, "vec_dot"),  # Q6_K repacks on ARM only
    ("Q6_K", "neon", True, "repack"),
    ("Q2_K", "avx2", True, "vec_dot"),         # Q2_K repack needs AVX-512
    ("Q2_K", "avx512f", True, "repack"),
    ("Q8_0", "avx2", True, "sgemm"),           # tinyBLAS for dense MUL_MAT
    ("Q8_0", "avx2", False, "vec_dot"),        # ... never for the routed experts
    ("F16", "avx512f", True, "sgemm"),
    ("IQ2_XXS", "avx512_vnni", True, "vec_dot"),
    ("Q4_K", "amx", True, "amx"),              # the AMX buffer takes dense MUL_MAT first
    ("Q4_K", "amx", False, "repack_gemv"),     # ... not MUL_MAT_ID
    ("IQ2_XXS", "amx", True, "vec_dot"),       # no AMX kernel for i-quants
])
def test_mainline_path(typ, isa, dense, path):
    assert kernels.path_of("llama.cpp", typ, isa, dense, 512) == path


@pytest.mark.parametrize("typ, ny, path", [
    ("IQ2_KL", 11, "iqk"),          # a 384-expert model at -ub 512: ~11 tokens per expert
    ("IQ2_KL", 32, "iqk_repack"),   # is_dequant_better: converted at >= 32 columns
    ("Q6_K", 32, "iqk"),            # Q6_K only at >= 64
    ("Q6_K", 64, "iqk_repack"),
    ("IQ3_KT", 16, "iqk_repack"),   # trellis: >= 16
    ("IQ4_KT", 16, "iqk"),          # IQ4_KT: >= 24
    ("IQ4_K_R4", 512, "iqk"),       # interleaved types run their own kernels
    ("BF16", 512, "iqk_float"),
])
def test_ik_path(typ, ny, path):
    assert kernels.path_of("ik_llama.cpp", typ, "avx512_vnni", False, ny) == path


def test_ktransformers_one_gemm_path():
    assert {kernels.path_of("ktransformers", t, "amx", False, 8) for t in ("Q4_K", "IQ2_XXS", "BF16")} == {"gemm"}


# ---- decode costs ---------------------------------------------------------------------------

def test_ik_types_have_their_own_costs():
    ik, main = read_priors("ik_llama.cpp").type_cost, read_priors("llama.cpp").type_cost
    for t in ("IQ2_KS", "IQ2_KL", "IQ2_K", "IQ3_KS", "IQ3_K", "IQ4_KS", "IQ4_KSS", "IQ4_K", "IQ5_KS",
              "IQ5_K", "IQ6_K", "IQ2_KT", "IQ3_KT", "IQ4_KT"):
        assert t in ik, t
        assert t not in main  # mainline cannot load ik_llama.cpp's types
    # trellis types generate every weight (iqk_gemm_ktquants.cpp): costlier than the table types
    assert ik["IQ3_KT"] > 1.5 * ik["IQ3_KS"]
    # IQ6_K's 64-entry table takes four shuffles: costlier than IQ4_KS's one
    assert ik["IQ6_K"] > ik["IQ4_KS"]
    # mainline's types keep mainline's costs under ik_llama.cpp (no published difference)
    assert ik["IQ2_XXS"] == main["IQ2_XXS"]


def test_interleaved_variant_costs_its_base_type():
    ik = read_priors("ik_llama.cpp").type_cost
    assert kernels.type_cost_of("IQ3_K_R4", ik) == ik["IQ3_K"]
    assert kernels.type_cost_of("Q4_K_R4", ik) == ik["Q4_K"]
    assert kernels.type_cost_of("NO_SUCH", ik) == 1.3


def _retyped(model, expert_type: str, dense_type: str | None = None):
    """The toy model with its routed experts (and optionally its attention) in other types;
    the bytes stay, so reading time does not change with the type."""
    def t2(t):
        if t.group == "experts":
            return replace(t, ggml_type=expert_type)
        if dense_type and t.group == "attn":
            return replace(t, ggml_type=dense_type)
        return t
    layers = tuple(replace(layer, tensors=tuple(t2(t) for t in layer.tensors)) for layer in model.layers)
    return replace(model, layers=layers)


def test_decode_compute_excess_follows_ik_type_cost():
    m = toy_model()
    hw = toy_hw(dram_bw=10e12)  # compute-bound: the dot product is the limit
    pr = unit_priors(name="ik_llama.cpp", op_offload="ik", cpu_dot_weights_per_cycle=1.0,
                     type_cost=dict(read_priors("ik_llama.cpp").type_cost))
    p = Placement(cpu_moe_layers=tuple(range(8)), n_threads=16)

    def excess(t):
        e = estimate(_retyped(m, t), p, hw, pr)
        return {x.name: x.seconds for x in e.decode_terms}["cpu_compute_excess"]

    assert excess("IQ3_KT") > 1.5 * excess("IQ3_KS")
    assert excess("IQ2_KL") > excess("Q8_0")


# ---- prefill terms --------------------------------------------------------------------------

def _cpu_only_prefill(model, pr, ubatch=512):
    hw = toy_hw(dram_bw=10e12, ram_gib=256)
    p = Placement(n_gpus=0, n_threads=16, n_ubatch=ubatch)
    e = estimate(model, p, hw, pr, n_prompt=512)
    return {x.name: x for x in e.prefill_terms}["cpu_matmul"]


def test_mainline_prefill_depends_on_type():
    # toy CPU: avx2, 1 GHz, 100 GFLOP/s per core; dot 4.2 weights/cycle
    pr = unit_priors(cpu_dot_weights_per_cycle=4.2, type_cost=dict(read_priors("llama.cpp").type_cost),
                     gemm_peak_x=dict(read_priors("llama.cpp").gemm_peak_x),
                     kernel_x=dict(read_priors("llama.cpp").kernel_x), cpu_mm_eff={"avx2": 0.6})
    m = toy_model()
    q4k = _cpu_only_prefill(_retyped(m, "Q4_K", "Q4_K"), pr)
    iq2 = _cpu_only_prefill(_retyped(m, "IQ2_XXS", "IQ2_XXS"), pr)
    # IQ2_XXS has neither a repack nor a tinyBLAS kernel: every weight through vec_dot, at 2.2x
    # Q8_0's cost, against Q4_K's repacked GEMM (dense) and interleaved gemv (experts)
    assert iq2.seconds > 1.5 * q4k.seconds
    assert "vec_dot 100%" in iq2.formula
    assert "repack" in q4k.formula


def test_ik_prefill_below_conversion_threshold_is_slower():
    base = read_priors("ik_llama.cpp")
    pr = unit_priors(name="ik_llama.cpp", op_offload="ik", cpu_dot_weights_per_cycle=5.5,
                     type_cost=dict(base.type_cost), gemm_peak_x=dict(base.gemm_peak_x),
                     gemm_native_frac=dict(base.gemm_native_frac), cpu_mm_eff={"avx2": 1.0})
    # 64 experts, 8 used: at -ub 512 each used expert gets 64 tokens (converted GEMM), at -ub 64
    # 8 (its own kernel): the time per token grows
    m = _retyped(toy_model(n_experts=64, k=8), "IQ2_KL")
    big = _cpu_only_prefill(m, pr, ubatch=512)
    small = _cpu_only_prefill(m, pr, ubatch=64)
    assert "iqk_repack" in big.formula and "iqk " in small.formula
    assert small.seconds > 1.3 * big.seconds


def test_expert_columns_spread_the_work_binomially():
    cols = kernels.expert_columns(512, 8, 128)  # Qwen3-30B at -ub 512: 32 tokens per expert on average
    assert sum(s for _, s in cols) == pytest.approx(1.0)
    # the work-weighted mean count is E[n^2] / E[n] = mean + variance / mean
    q = 8 / 128
    assert sum(n * s for n, s in cols) == pytest.approx(512 * q + (1 - q), rel=1e-3)
    below = sum(s for n, s in cols if n < 32)
    assert 0.3 < below < 0.6  # about half the expert work runs below iqk's conversion threshold
    assert kernels.expert_columns(512, 128, 128) == ((512, 1.0),)
    base = read_priors("ik_llama.cpp")
    rates = kernels.CpuRates(fp_gemm_flop_per_s=1e12, peak_flop_per_s=1e12, dot_elem_per_s=2e11, isa="avx512_vnni",
                             backend="ik_llama.cpp", peak_x=dict(base.gemm_peak_x), kernel_x={},
                             native_frac=dict(base.gemm_native_frac), type_cost=dict(base.type_cost))
    at_mean = kernels.matmul_time({"IQ4_XS": 1e9}, 512, 32.0, False, rates)
    spread = kernels.matmul_time({"IQ4_XS": 1e9}, 512, cols, False, rates)
    # the experts that got fewer than 32 tokens run IQ4_XS's own kernel: slower than all-converted
    assert spread.seconds > 1.1 * at_mean.seconds and set(spread.shares) == {"iqk", "iqk_repack"}
    assert spread.flops == at_mean.flops


def test_rtr_runs_the_interleaved_types_with_their_own_kernels():
    # ik_llama.cpp -rtr repacks IQ4_XS to IQ4_XS_R8 at load; MulMat::is_dequant_better converts
    # no interleaved type, so 512 columns run the type's own kernel instead of the int8 GEMM
    assert kernels.repacked({"IQ4_XS": 5.0, "Q8_0": 1.0, "IQ2_KL": 2.0}) == {"IQ4_XS_R8": 5.0, "Q8_0_R8": 1.0,
                                                                            "IQ2_KL": 2.0}
    base = read_priors("ik_llama.cpp")
    rates = kernels.CpuRates(fp_gemm_flop_per_s=1e12, peak_flop_per_s=1e12, dot_elem_per_s=2e11, isa="avx512_vnni",
                             backend="ik_llama.cpp", peak_x=dict(base.gemm_peak_x), kernel_x={},
                             native_frac=dict(base.gemm_native_frac), type_cost=dict(base.type_cost))
    plain = kernels.matmul_time({"IQ4_XS": 1e9}, 512, 512.0, True, rates)
    rtr = kernels.matmul_time({"IQ4_XS": 1e9}, 512, 512.0, True, replace(rates, repack=True))
    assert set(plain.shares) == {"iqk_repack"} and set(rtr.shares) == {"iqk"}
    assert rtr.seconds > 1.5 * plain.seconds
    # Q8_0_R8 is the conversion target itself: -rtr costs it nothing
    q8 = kernels.matmul_time({"Q8_0": 1e9}, 512, 512.0, True, rates)
    assert kernels.matmul_time({"Q8_0": 1e9}, 512, 512.0, True, replace(rates, repack=True)).seconds == \
        pytest.approx(q8.seconds)


def test_prefill_output_matrix_is_not_per_token():
    pr = unit_priors()
    m = toy_model()
    # the output matrix (32768 x 1024, as big as ~3 layers of attention) stays out of cpu_matmul
    bigger = replace(m, globals=tuple(replace(t, shape=(t.shape[0], t.shape[1] * 4)) if t.group == "output" else t
                                      for t in m.globals))
    assert _cpu_only_prefill(bigger, pr).seconds == pytest.approx(_cpu_only_prefill(m, pr).seconds)
