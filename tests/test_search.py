"""The search: feasibility, monotonicity, determinism, infeasible paths."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_builders import GIB, toy_hw, toy_model, unit_priors

from moeplan.errors import InfeasibleError
from moeplan.planner.cost.estimate import estimate
from moeplan.planner.memory.accounting import MemoryConstants, estimate_memory
from moeplan.planner.memory.constants import memory_constants
from moeplan.planner.placement import Placement
from moeplan.planner.search import Request, choose_plan, shortfall

MODEL = toy_model(n_layers=12, n_experts=16, k=4, n_embd=2048, n_ff_exp=1024, n_dense_lead=1)
PRIORS = unit_priors(s_sync_s=100e-6, t_token_s=1e-3, eta_gpu=0.8, eta_cpu=0.7, core_read_share=2.5)
FAST = Request(kv_types=("f16", "q8_0"), ubatches=(512, 2048))


def test_picks_fewest_cpu_layers_that_fit():
    # experts: 3 * 2048 * 1024 * 16 * 2 B = 192 MiB per MoE layer, 11 MoE layers
    hw = toy_hw(vram_gib=3.0)
    r = choose_plan(MODEL, hw, PRIORS, FAST.__class__(n_ctx=4096, kv_types=("f16",), ubatches=(512,)))
    p = r.best.placement
    consts = memory_constants(hw, "llama.cpp")  # the toy GPU's CUDA build: its pool is counted
    mem = estimate_memory(MODEL, p, consts)
    assert mem.vram_required_bytes <= 3.0 * GIB
    # one layer fewer on the CPU would not fit
    fewer = p.with_(cpu_moe_layers=p.cpu_moe_layers[:-1])
    assert estimate_memory(MODEL, fewer, consts).vram_required_bytes > 3.0 * GIB
    # layers leave from the front (block order), the dense lead block 0 is not a candidate
    assert p.cpu_moe_layers == tuple(range(1, 1 + len(p.cpu_moe_layers)))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(vram=st.floats(min_value=1.5, max_value=6.0), ram=st.floats(min_value=8, max_value=64))
def test_chosen_plan_always_fits(vram, ram):
    hw = toy_hw(vram_gib=vram, ram_gib=ram)
    try:
        r = choose_plan(MODEL, hw, PRIORS, FAST)
    except InfeasibleError:
        return
    assert shortfall(MODEL, r.best.placement, hw, int(vram * GIB), int(ram * GIB), MemoryConstants(), PRIORS) == ""
    assert r.best.estimate.vram_required_bytes <= vram * GIB


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(vram=st.floats(min_value=1.5, max_value=5.0), extra=st.floats(min_value=0.1, max_value=3.0))
def test_more_vram_never_gives_a_slower_best_plan(vram, extra):
    req = Request(n_ctx=8192, kv_types=("f16",), ubatches=(512,))
    try:
        small = choose_plan(MODEL, toy_hw(vram_gib=vram), PRIORS, req)
    except InfeasibleError:
        return
    big = choose_plan(MODEL, toy_hw(vram_gib=vram + extra), PRIORS, req)
    assert big.best.estimate.decode_tok_s >= small.best.estimate.decode_tok_s * (1 - 1e-12)


@settings(max_examples=20, deadline=None)
@given(n_cpu=st.integers(min_value=1, max_value=11), numa=st.sampled_from(["none", "bind"]))
def test_one_more_layer_on_the_gpu_never_slows_decode(n_cpu, numa):
    hw = toy_hw(nodes=2, cores=32, dram_bw=160e9)
    moe = MODEL.moe_layer_indices
    p = Placement(cpu_moe_layers=moe[:n_cpu], n_threads=16, numa=numa, numa_nodes=(0,) if numa == "bind" else ())
    slower = estimate(MODEL, p, hw, PRIORS).decode_tok_s
    faster = estimate(MODEL, p.with_(cpu_moe_layers=moe[:n_cpu - 1]), hw, PRIORS).decode_tok_s
    assert faster >= slower


def test_identical_inputs_give_identical_json():
    from moeplan.planner.search import build_plan

    hw = toy_hw(vram_gib=4.0)
    a = build_plan(MODEL, hw, choose_plan(MODEL, hw, PRIORS, FAST), "decode", "").to_json()
    b = build_plan(MODEL, hw, choose_plan(MODEL, hw, PRIORS, FAST), "decode", "").to_json()
    assert a == b
    json.loads(a)


def test_context_grows_into_spare_vram():
    hw = toy_hw(vram_gib=40.0)  # everything fits with room to spare
    r = choose_plan(MODEL, hw, PRIORS, Request(kv_types=("f16",), ubatches=(512,)))
    assert r.best.placement.cpu_moe_layers == ()
    assert r.best.placement.n_ctx == MODEL.n_ctx_train  # the model's maximum fits
    r2 = choose_plan(MODEL, hw, PRIORS, Request(n_ctx=4096, kv_types=("f16",), ubatches=(512,)))
    assert r2.best.placement.n_ctx == 4096  # an exact --ctx is kept


def test_quantized_kv_only_when_it_buys_speed():
    # with plenty of VRAM the KV type cannot buy speed: f16 is kept
    r = choose_plan(MODEL, toy_hw(vram_gib=40.0), PRIORS, Request(n_ctx=32768, ubatches=(512,)))
    assert r.best.placement.cache_type_k == "f16"


def test_numa_policy_is_searched_on_two_nodes():
    hw = toy_hw(vram_gib=3.0, nodes=2, cores=32, dram_bw=160e9, ram_gib=64)
    # one KV type and ubatch, so the alternatives differ by NUMA policy rather than by those
    r = choose_plan(MODEL, hw, PRIORS, Request(kv_types=("f16",), ubatches=(512,)))
    assert r.best.placement.numa in ("bind", "interleave", "distribute", "none")
    seen = {c.placement.numa for c in r.alternatives} | {r.best.placement.numa}
    assert len(seen) >= 2


def test_infeasible_says_what_is_short():
    with pytest.raises(InfeasibleError) as ei:
        choose_plan(MODEL, toy_hw(vram_gib=0.5), PRIORS, FAST)
    assert "VRAM" in ei.value.message and "GiB" in ei.value.message
    assert ei.value.hint
    with pytest.raises(InfeasibleError) as ei:
        choose_plan(MODEL, toy_hw(vram_gib=3.0, ram_gib=1.0), PRIORS, Request(kv_types=("f16",), ubatches=(512,)))
    assert "RAM" in ei.value.message


def test_pareto_front_is_monotone():
    r = choose_plan(MODEL, toy_hw(vram_gib=3.0), PRIORS, FAST)
    pts = r.pareto
    assert len(pts) >= 3
    for a, b in zip(pts, pts[1:]):
        assert b.vram_bytes >= a.vram_bytes
        assert b.decode_tok_s >= a.decode_tok_s * (1 - 1e-12)


def test_fewer_decode_threads_when_barriers_cost_more_than_they_read():
    """On a 2 x 96-core EPYC every graph node's barrier costs 192 hand-overs: the plan decodes on
    fewer threads that still saturate the DRAM (and says why); a 16-core desktop keeps every core;
    --threads is the user's."""
    from moeplan.planner.cost.estimate import physical_cores
    from moeplan.profiles.backends import read_priors
    from moeplan.profiles.catalog import load_preset
    from moeplan.profiles.model_profiles import load_profile

    m, pr = load_profile("qwen3-235b-a22b", "Q4_K_M"), read_priors("llama.cpp")
    hw = load_preset("epyc-genoa-2s-4090")
    r = choose_plan(m, hw, pr, Request())
    p = r.best.placement
    cores = physical_cores(hw, p)
    assert p.n_threads < cores and any("cores decode (-t)" in w for w in r.why)
    full = estimate(m, p.with_(n_threads=cores, n_threads_batch=0), hw, pr)
    assert r.best.estimate.decode_tok_s > full.decode_tok_s
    # --numa distribute places pages by the first pass's threads: prefill runs on the same pool
    assert p.numa != "distribute" or p.threads_batch == p.n_threads
    assert choose_plan(m, hw, pr, Request(threads=cores)).best.placement.n_threads == cores
    desk = load_preset("desktop-4090-ddr5")
    d = choose_plan(load_profile("gpt-oss-120b"), desk, pr, Request()).best.placement
    assert d.n_threads == physical_cores(desk, d)


def test_no_mmap_when_the_file_does_not_fit_in_the_page_cache():
    from moeplan.planner.hardware.profile import OS_RESERVE_BYTES

    req = Request(n_ctx=4096, kv_types=("f16",), ubatches=(512,))
    roomy = choose_plan(MODEL, toy_hw(vram_gib=2.5, ram_gib=64), PRIORS, req).best
    assert roomy.placement.load_mode == "mmap"
    cpu_bytes = estimate_memory(MODEL, roomy.placement, MemoryConstants()).get("weights_experts_cpu")
    assert cpu_bytes > 0
    # RAM for the OS, the CPU experts and the buffers with 64 MiB to spare, less than the whole file
    anon = estimate_memory(MODEL, roomy.placement.with_(load_mode="no-mmap"), MemoryConstants()).ram_anon_bytes
    ram = (OS_RESERVE_BYTES + anon + 64 * 2**20) / GIB
    assert ram * GIB < OS_RESERVE_BYTES + MODEL.file_bytes
    r = choose_plan(MODEL, toy_hw(vram_gib=2.5, ram_gib=ram), PRIORS, req)
    assert r.best.placement.load_mode == "no-mmap"
    assert any(w.startswith("--no-mmap") for w in r.why)
    assert shortfall(MODEL, r.best.placement, toy_hw(vram_gib=2.5, ram_gib=ram), int(2.5 * GIB), int(ram * GIB),
                     MemoryConstants(), PRIORS) == ""


def test_distribute_keeps_the_file_mapped_under_page_cache_pressure():
    # read in (--no-mmap), the loader would first-touch every page: distribute's node-local
    # reads need the mapped file's first touch by the reading threads
    from moeplan.planner.hardware.profile import OS_RESERVE_BYTES

    req = Request(n_ctx=4096, kv_types=("f16",), ubatches=(512,), numa_policies=("distribute",))
    roomy = choose_plan(MODEL, toy_hw(vram_gib=2.5, ram_gib=64, nodes=2), PRIORS, req).best
    assert roomy.placement.numa == "distribute"
    anon = estimate_memory(MODEL, roomy.placement.with_(load_mode="no-mmap"), MemoryConstants()).ram_anon_bytes
    ram = (OS_RESERVE_BYTES + anon + 64 * 2**20) / GIB
    best = choose_plan(MODEL, toy_hw(vram_gib=2.5, ram_gib=ram, nodes=2), PRIORS, req).best
    assert best.placement.numa == "distribute"
    assert best.placement.load_mode == "mmap" and best.estimate.decode_tok_s_paging > 0
