"""The machine model's mechanisms (planner/cost/machine.py) on hand-worked cases."""
from __future__ import annotations

import pytest
from model_builders import toy_hw, toy_model, unit_priors

from moeplan.planner.cost import machine
from moeplan.planner.cost.estimate import estimate
from moeplan.planner.options import PlanOptions
from moeplan.planner.placement import Placement
from moeplan.profiles import catalog
from moeplan.profiles.catalog import SpecRequest
from moeplan.units import GIB


def _hw(cpu: str, sockets: int = 1, **kw):
    return catalog.build_profile(SpecRequest(cpu=cpu, sockets=sockets, ram_bytes=512 * GIB, **kw))


def test_core_read_rate_is_littles_law_of_the_family():
    hw = _hw("EPYC 9654")
    assert hw.cpu.family == "zen4" and hw.cpu.segment == "server"
    rate, how = machine.core_read_prior(hw)
    # 64 lines x 64 B / 115 ns = 35.6 GB/s
    assert rate == pytest.approx(64 * 64 / 115e-9)
    assert "64 lines" in how


def test_ccd_cap_counts_the_ccds_the_threads_occupy():
    hw = _hw("EPYC 9175F")  # 16 CCDs x 1 core, Zen 5
    assert hw.cpu.ccds_per_socket == 16
    # 13 threads spread over 13 CCDs: 13 x 32 B x 2.0 GHz = 832 GB/s; 4 threads: 256 GB/s
    assert machine.ccd_read_cap(hw, 13)[0] == pytest.approx(13 * 32 * 2.0e9)
    assert machine.ccd_read_cap(hw, 4)[0] == pytest.approx(4 * 32 * 2.0e9)


def test_gmi_wide_doubles_the_link_of_four_ccd_parts():
    hw = _hw("EPYC 9334")
    assert hw.cpu.ccds_per_socket == 4
    # 4 CCDs x 2 links x 32 B x 2.0 GHz = 512 GB/s
    assert machine.ccd_read_cap(hw, 16)[0] == pytest.approx(4 * 2 * 32 * 2.0e9)


def test_desktop_parts_get_no_server_ccd_cap():
    assert machine.ccd_read_cap(_hw("Ryzen 9 7950X"), 16) is None


def test_eight_socket_links_bound_remote_reads():
    hw = _hw("Xeon E7-8880 v3", sockets=8)
    cap, how = machine.socket_link_cap(hw, 8, 8)
    # 7 other sockets, 3 reached directly, 4 at two hops: mean (3 + 8) / 7 hops;
    # 8 sockets x 3 QPI links x 19.2 GB/s / 1.571 = 293 GB/s
    assert cap == pytest.approx(8 * 3 * 19.2e9 / (11 / 7))
    assert machine.socket_link_cap(hw, 1, 1) is None


def test_smt_siblings_and_oversubscription():
    tu = machine.thread_use(112, 56, 112)
    assert (tu.on_cores, tu.smt_threads, tu.oversubscribed) == (56, 56, 0)
    assert machine.oversubscription_s_per_barrier(tu) == 0
    tu = machine.thread_use(16, 8, 8)
    assert (tu.on_cores, tu.oversubscribed) == (8, 8)
    # every barrier waits one 3 ms slice x 8/8 oversubscribed
    assert machine.oversubscription_s_per_barrier(tu) == pytest.approx(3e-3)


def test_pages_spill_to_the_next_nodes_when_one_is_full():
    # 380 GB over 128 GB nodes (90% usable): ceil(380 / 115.2) = 4 nodes
    assert machine.pages_nodes(380e9, [128 * 10**9] * 8) == 4
    assert machine.pages_nodes(50e9, [128 * 10**9] * 2) == 1


def test_all_core_clock_between_base_and_boost():
    hw = _hw("Core i7-13700K")
    assert hw.cpu.max_clock_hz
    f, _ = machine.all_core_clock_hz(hw, 2.1e9)
    base, boost = hw.cpu.base_clock_hz, hw.cpu.max_clock_hz
    assert f == pytest.approx(base + 0.75 * (boost - base))
    # a Xeon's all-core turbo stops about halfway: 6980P 2.0 + 0.55 x 1.9 = 3.05 GHz (Intel: 3.2)
    xeon = _hw("Xeon 6980P")
    f, how = machine.all_core_clock_hz(xeon, 2.1e9)
    assert f == pytest.approx(3.045e9) and "0.55" in how


def test_isa_scale_differs_by_backend():
    zen5 = _hw("EPYC 9355")
    assert machine.isa_dot_scale(zen5, "ik_llama.cpp")[0] > machine.isa_dot_scale(zen5, "llama.cpp")[0]
    zen2 = _hw("Threadripper PRO 3995WX")
    # AVX2 kernels (0.75 of the VNNI anchor) on 4 vector ALU pipes against the anchor's 3
    assert machine.isa_dot_scale(zen2, "llama.cpp")[0] == pytest.approx(0.75 * 4 / 3)


def test_amd_cores_dot_on_four_vector_pipes():
    spr, zen4 = _hw("Xeon Gold 6548Y+"), _hw("EPYC 9654")
    x_spr, how_spr = machine.isa_dot_scale(spr, "llama.cpp")
    x_zen, how_zen = machine.isa_dot_scale(zen4, "llama.cpp")
    assert x_spr == pytest.approx(1.0) and "pipes" not in how_spr
    assert x_zen == pytest.approx(4 / 3) and "4/3 vector ALU pipes" in how_zen


def test_more_threads_than_cores_read_no_faster():
    m, hw = toy_model(), toy_hw(cores=8)
    pr = unit_priors(core_read_share=1.0)  # b_core = 80e9 / 8 = 10 GB/s
    e8 = estimate(m, Placement(cpu_moe_layers=(0,), n_threads=8), hw, pr)
    e12 = estimate(m, Placement(cpu_moe_layers=(0,), n_threads=12), hw, pr)
    r8 = {t.name: t.seconds for t in e8.decode_terms}["cpu_experts_read"]
    r12 = {t.name: t.seconds for t in e12.decode_terms}["cpu_experts_read"]
    assert r12 == pytest.approx(r8)


def test_ktransformers_uploads_all_cpu_experts_for_long_prompts():
    m, hw = toy_model(), toy_hw()
    pr = unit_priors(name="ktransformers", op_offload="never")
    p = Placement(cpu_moe_layers=(0, 1, 2, 3), n_threads=16, n_batch=4096,
                  options=PlanOptions(kt_gpu_prefill_token_threshold=4096))
    long = estimate(m, p, hw, pr, n_prompt=8192)
    terms = {t.name: t for t in long.prefill_terms}
    # 2 chunks of 4096 tokens (--chunked-prefill-size, the plan's n_batch), each uploads 4 layers
    # x 50,331,648 B at 25 GB/s -> per token:
    # 4 * 50,331,648 / 25e9 * 2 / 8192
    assert terms["h2d_experts"].seconds == pytest.approx(4 * 50_331_648 / 25e9 * 2 / 8192)
    short = {t.name for t in estimate(m, p, hw, pr, n_prompt=1024).prefill_terms}
    assert "h2d_experts" not in short and "cpu_experts" in short
    off = {t.name for t in estimate(m, p.with_(op_offload=False), hw, pr, n_prompt=8192).prefill_terms}
    assert "h2d_experts" not in off
