"""CPU attention at KV depth (moeplan/planner/cost/attention.py): the paths ggml-cpu and
ik_llama.cpp take, and how the estimate shows them."""
from __future__ import annotations

import pytest

from moeplan.planner.cost import attention as A
from moeplan.planner.cost.estimate import cpu_attention_decode, estimate, resolve_factors
from moeplan.planner.memory.accounting import kv_read_bytes
from moeplan.planner.placement import Placement
from moeplan.profiles import catalog
from moeplan.profiles.backends import read_priors
from moeplan.profiles.catalog import SpecRequest
from moeplan.profiles.model_profiles import load_profile
from moeplan.units import GIB


@pytest.fixture(scope="module")
def hw():
    return catalog.build_profile(SpecRequest(cpu="EPYC 9654", ram_bytes=512 * GIB))


@pytest.fixture(scope="module")
def qwen():
    return load_profile("qwen3-30b-a3b", "Q4_K_M")


def _machine(threads: int, cores: int = 96, **kw) -> A.CpuMachine:
    base = dict(threads=threads, cores_used=min(threads, cores), clock_hz=3e9, lanes_per_cycle=16.0,
                l2_bytes=1 << 20, l3_bytes_per_core=4 << 20, dram_bytes_per_s=300e9,
                gemm_flop_per_s=2e12, gemm_rel_err=0.3)
    base.update(kw)
    return A.CpuMachine(**base)


def _gqa(cells: int, n_head: int = 32, n_kv: int = 4, d: int = 128, layers: int = 1) -> list[A.AttnLayer]:
    return [A.AttnLayer(cells, cells, n_head, n_kv, d, d, False)] * layers


def _cpu_only(threads: int = 32, **kw) -> Placement:
    return Placement(n_gpus=0, n_threads=threads, n_ctx=32768, **kw)


def test_cpu_attention_term_grows_with_depth(hw, qwen):
    pr = read_priors("llama.cpp")
    secs, speeds = [], []
    for depth in (0, 2000, 8000, 24000):
        e = estimate(qwen, _cpu_only(), hw, pr, depth=depth, n_prompt=512)
        t = {x.name: x.seconds for x in e.decode_terms}
        secs.append(t.get("cpu_attention", 0.0))
        speeds.append(e.decode_tok_s)
        if depth:
            formula = next(x.formula for x in e.decode_terms if x.name == "cpu_attention")
            assert f"depth {depth}" in formula and "split-KV" in formula
    assert secs[0] == 0.0
    assert secs[1] < secs[2] < secs[3]
    assert speeds == sorted(speeds, reverse=True)


def test_prefill_at_depth_pays_attention(hw, qwen):
    pr = read_priors("llama.cpp")
    p = _cpu_only()
    a = estimate(qwen, p, hw, pr, n_prompt=512)
    b = estimate(qwen, p, hw, pr, n_prompt=512, prompt_depth=6000)
    ta = {x.name: x.seconds for x in a.prefill_terms}
    tb = {x.name: x.seconds for x in b.prefill_terms}
    assert tb["cpu_attention"] > 10 * ta["cpu_attention"]
    assert ta["cpu_matmul"] == pytest.approx(tb["cpu_matmul"])
    assert b.prefill_tok_s < a.prefill_tok_s


def test_row_parallel_path_uses_at_most_one_thread_per_head():
    # quantised KV cannot take the split-KV path: rows = n_head = 32 are the parallel work
    layers = _gqa(6000)
    t32 = A.decode_attention(layers, _machine(32), "llama.cpp", "q8_0", "q8_0")
    t64 = A.decode_attention(layers, _machine(64), "llama.cpp", "q8_0", "q8_0")
    t16 = A.decode_attention(layers, _machine(16), "llama.cpp", "q8_0", "q8_0")
    assert "row-parallel" in t32.path
    assert t64.seconds == pytest.approx(t32.seconds)
    assert t16.seconds == pytest.approx(2 * t32.seconds, rel=0.05)


def test_a_quantised_v_cache_pays_its_scalar_dequantisation(monkeypatch):
    # one thread, the same cells and heads: q8_0 K dots faster than f16, but every V row goes
    # through ggml-base's scalar dequantize_row_q8_0 first (measured ~2.5x the f16 cache's time)
    layers = _gqa(6000)
    m = _machine(1, lanes_per_cycle=32.0)
    f16 = A.decode_attention(layers, m, "llama.cpp", "f16", "f16", split_kv=False)
    q8 = A.decode_attention(layers, m, "llama.cpp", "q8_0", "q8_0", split_kv=False)
    assert q8.seconds > 2 * f16.seconds
    # the dequantisation is what makes it slower: without it q8_0's integer K dot would win
    monkeypatch.setattr(A, "V_DEQUANT_CYCLES_PER_ELEM", 0.0)
    assert A.decode_attention(layers, m, "llama.cpp", "q8_0", "q8_0", split_kv=False).seconds < f16.seconds


def test_split_kv_path_uses_every_thread_above_512_cells():
    layers = _gqa(6000)
    t32 = A.decode_attention(layers, _machine(32), "llama.cpp", "f16", "f16")
    t64 = A.decode_attention(layers, _machine(64), "llama.cpp", "f16", "f16")
    assert t32.path == "split-KV"
    assert t64.seconds == pytest.approx(t32.seconds / 2, rel=0.05)
    # below 512 cells the same f16 cache runs row-parallel
    short = A.decode_attention(_gqa(500), _machine(64), "llama.cpp", "f16", "f16")
    assert "row-parallel" in short.path


def test_builds_before_the_split_kv_change_run_f16_decode_row_parallel(hw, qwen):
    """llama.cpp PR #19209 (between b7845 and b7921) split CPU flash-attention decode over the KV
    cells; before it the 32 q heads of Qwen3-30B are the only parallel work of 64 threads."""
    layers = _gqa(6000)
    old = A.decode_attention(layers, _machine(64), "llama.cpp", "f16", "f16", split_kv=False)
    new = A.decode_attention(layers, _machine(64), "llama.cpp", "f16", "f16")
    assert "row-parallel (32 of 64 threads busy)" in old.path and new.path == "split-KV"
    assert old.seconds > 1.5 * new.seconds
    from moeplan.planner.options import PlanOptions

    pr = read_priors("llama.cpp")
    at = {b: estimate(qwen, _cpu_only(64, options=PlanOptions(llama_build=b)), hw, pr, depth=6000, n_prompt=512)
          for b in (A.FA_SPLIT_KV_FROM_BUILD - 1, A.FA_SPLIT_KV_FROM_BUILD)}
    cur = estimate(qwen, _cpu_only(64), hw, pr, depth=6000, n_prompt=512)
    assert at[A.FA_SPLIT_KV_FROM_BUILD].decode_tok_s == pytest.approx(cur.decode_tok_s)
    assert at[A.FA_SPLIT_KV_FROM_BUILD - 1].decode_tok_s < 0.9 * cur.decode_tok_s
    assert any("PR #19209" in n for n in at[A.FA_SPLIT_KV_FROM_BUILD - 1].notes)
    assert not any("PR #19209" in n for n in cur.notes)
    # with an empty cache there is no attention to run either way
    empty = estimate(qwen, _cpu_only(64, options=PlanOptions(llama_build=6000)), hw, pr, depth=0, n_prompt=512)
    assert empty.decode_tok_s == pytest.approx(estimate(qwen, _cpu_only(64), hw, pr, depth=0, n_prompt=512).decode_tok_s)


def test_split_kv_rereads_a_chunk_that_overflows_l2():
    # MLA-like: one KV head of 576 + its q heads; 20000 cells over 4 threads = 5000 x 1152 B = 5.8 MB
    layers = [A.AttnLayer(20000, 20000, 20, 1, 576, 512, True)]
    small_l2 = A.decode_attention(layers, _machine(4, l2_bytes=1 << 20, l3_bytes_per_core=2 << 20), "llama.cpp",
                                  "f16", "f16")
    big_l2 = A.decode_attention(layers, _machine(4, l2_bytes=16 << 20), "llama.cpp", "f16", "f16")
    assert small_l2.seconds > big_l2.seconds * 1.05


def test_sliding_window_layers_attend_only_the_window():
    gpt = load_profile("gpt-oss-120b", "MXFP4")
    layers = A.attention_layers(gpt, 8000)
    swa = [a for a in layers if a.cells == 128]
    full = [a for a in layers if a.cells == 8000]
    assert len(swa) == len(full) == 18
    assert all(a.cache_cells == 128 + 512 for a in swa)
    m = _machine(32)
    t_swa = A.decode_attention(swa, m, "llama.cpp", "f16", "f16").seconds
    swa_deeper = [a for a in A.attention_layers(gpt, 30000) if a.cells == 128]
    assert A.decode_attention(swa_deeper, m, "llama.cpp", "f16", "f16").seconds == pytest.approx(t_swa)


def test_mla_reads_the_latent_cache_once_per_cell():
    glm = load_profile("glm-4.7-flash", "Q4_K_M")
    layers = A.attention_layers(glm, 10000)
    a = layers[0]
    assert (a.n_head_kv, a.d_k, a.d_v, a.v_in_k) == (1, 576, 512, True)
    bk, bv = A._row_bytes(a, "f16", "f16")
    assert bv == 0.0 and bk == 576 * 2
    # the bytes the kernel streams once are what the memory accounting sizes
    assert sum(A._row_bytes(x, "f16", "f16")[0] * x.cells for x in layers) == kv_read_bytes(glm, 10000)


def test_ik_llama_prompts_expand_the_mla_heads(hw):
    """ik_llama.cpp (build_deepseek2.cpp, pp_opt: >= 128 tokens, -mla 2/3, flash attention)
    multiplies the latent cache by wkv_b into every head's K (192) and V (128) and runs
    multi-head attention; decode and mainline keep the absorbed one-KV-head form (576 / 512)."""
    lite = load_profile("deepseek-coder-v2-lite", "Q4_0")
    ex = A.attention_layers(lite, 8192, mla_expanded=True)
    a = ex[0]
    assert (a.n_head_kv, a.d_k, a.d_v, a.v_in_k) == (16, 192, 128, False)
    assert a.expand_flop_per_cell == 2 * 512 * 16 * (128 + 128)  # kv_lora_rank x heads x (nope + v)
    absorbed = A.attention_layers(lite, 8192)
    u = 1024
    assert A.attention_flops(ex, u) < A.attention_flops(absorbed, u) / 2
    # whole estimates: a 1024-token ubatch after 8192 cached tokens on the CPU
    p = _cpu_only(threads=16, n_ubatch=1024, n_batch=1024)
    ik = estimate(lite, p, hw, read_priors("ik_llama.cpp"), n_prompt=1024, prompt_depth=8192, depth=8192)
    main = estimate(lite, p, hw, read_priors("llama.cpp"), n_prompt=1024, prompt_depth=8192, depth=8192)
    f_ik = next(x.formula for x in ik.prefill_terms if x.name == "cpu_attention")
    f_main = next(x.formula for x in main.prefill_terms if x.name == "cpu_attention")
    assert "MLA heads expanded" in f_ik and "MLA heads expanded" not in f_main
    # decode stays absorbed on both
    dec = [x.formula for e in (ik, main) for x in e.decode_terms if x.name == "cpu_attention"]
    assert len(dec) == 2 and all("d_k 576" in f for f in dec)


def test_ik_llama_shares_kv_rows_across_the_gqa_group():
    layers = _gqa(6000)
    m = _machine(32)
    main_q8 = A.decode_attention(layers, m, "llama.cpp", "q8_0", "q8_0")
    ik_q8 = A.decode_attention(layers, m, "ik_llama.cpp", "q8_0", "q8_0")
    main_f16 = A.decode_attention(layers, m, "llama.cpp", "f16", "f16")
    ik_f16 = A.decode_attention(layers, m, "ik_llama.cpp", "f16", "f16")
    assert "GQA group" in ik_q8.path
    assert ik_q8.seconds < main_q8.seconds / 2
    assert ik_f16.seconds < main_f16.seconds
    # without GQA (one q head per KV head) ik runs heads over threads
    mha = A.decode_attention(_gqa(6000, n_head=8, n_kv=8), _machine(32), "ik_llama.cpp", "f16", "f16")
    assert "per head" in mha.path


def test_backend_changes_the_estimate(hw, qwen):
    p = _cpu_only(cache_type_k="q8_0", cache_type_v="q8_0")
    main = cpu_attention_decode(qwen, p, hw, read_priors("llama.cpp"),
                                resolve_factors(hw, read_priors("llama.cpp"), p), 8000)
    ik = cpu_attention_decode(qwen, p, hw, read_priors("ik_llama.cpp"),
                              resolve_factors(hw, read_priors("ik_llama.cpp"), p), 8000)
    assert ik.seconds < main.seconds


def test_prefill_tiled_path_beats_one_chunk():
    layers = _gqa(6000)
    m = _machine(44)
    tiled = A.prefill_attention(layers, m, "llama.cpp", "f16", "f16", 512)
    vec = A.prefill_attention(layers, m, "llama.cpp", "q8_0", "q8_0", 512)
    few = A.prefill_attention(layers, m, "llama.cpp", "f16", "f16", 32)
    assert "tiled" in tiled.path and vec.path == "one_chunk vec" and few.path == "one_chunk vec"
    assert tiled.seconds < vec.seconds / 1.5


def test_no_flash_attention_runs_matmuls_over_all_threads():
    layers = _gqa(6000)
    fa0 = A.decode_attention(layers, _machine(32), "llama.cpp", "f16", "f16", flash_attn=False)
    fa0_64 = A.decode_attention(layers, _machine(64), "llama.cpp", "f16", "f16", flash_attn=False)
    assert "-fa 0" in fa0.path
    assert fa0_64.seconds == pytest.approx(fa0.seconds / 2)


def test_lanes_follow_the_vector_width():
    half = {"zen4"}
    assert A.lanes_per_cycle(("avx2", "avx512f"), "sapphire-rapids", half) == 32
    assert A.lanes_per_cycle(("avx2", "avx512f"), "zen4", half) == 16
    assert A.lanes_per_cycle(("avx2",), "zen3", half) == 16
    assert A.lanes_per_cycle(("neon",), "", half) == 8
