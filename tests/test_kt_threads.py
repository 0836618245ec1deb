"""KTransformers' CPU threads: --cpu_infer + 1 spinning threads, the scheduler wait every job pays
when they outnumber the logical CPUs, SMT, and the AVX-512-without-VNNI kernels
(planner/cost/machine.py "KTransformers worker threads", cost/estimate.py resolve_factors)."""
from __future__ import annotations

import dataclasses

import pytest
from model_builders import toy_model

from moeplan.planner.cost import machine
from moeplan.planner.cost.estimate import estimate, resolve_factors
from moeplan.planner.placement import Placement
from moeplan.profiles import catalog
from moeplan.profiles.backends import read_priors
from moeplan.profiles.catalog import SpecRequest
from moeplan.units import GIB


def xeon_8136_x2(kernel: str = ""):
    """KTransformers #219's machine: 2 x 28 cores, 112 logical CPUs, one RTX 4090."""
    hw = catalog.build_profile(SpecRequest(cpu="Xeon Platinum 8136", sockets=2, ram_bytes=448 * GIB,
                                           gpu="RTX 4090"))
    return dataclasses.replace(hw, system=dataclasses.replace(hw.system, kernel=kernel)) if kernel else hw


def kt(threads: int, numa: str = "distribute", nodes: tuple[int, ...] = (0, 1)) -> Placement:
    return Placement(backend="ktransformers", n_threads=threads, numa=numa,
                     numa_nodes=nodes if numa == "distribute" else ())


# ---- machine.kt_threads ----------------------------------------------------------------------

def test_cpu_infer_plus_one_threads_spin():
    below = machine.kt_threads(111, 56, 112)
    at = machine.kt_threads(112, 56, 112)
    assert below.busy == 112 and below.oversubscribed == 0 and below.wait_s_per_job == 0.0
    assert at.busy == 113 and at.oversubscribed == 1 and at.wait_s_per_job > 0


def test_cfs_wait_is_half_a_two_task_slice_eevdf_a_quarter_of_that():
    cfs = machine.kt_threads(112, 56, 112, kernel="5.15.0-91-generic")
    eevdf = machine.kt_threads(112, 56, 112, kernel="6.8.0-45-generic")
    # one descheduled spinner: it waits on average half of the running one's slice
    assert cfs.wait_s_per_job == pytest.approx(machine.CFS_LATENCY_S / 2 / 2)  # 24 ms / 2 tasks / 2
    assert eevdf.wait_s_per_job == pytest.approx(machine.EEVDF_SLICE_S / 2)
    # more descheduled threads: the job waits for the last of them, up to the whole slice
    many = machine.kt_threads(150, 56, 112, kernel="5.15.0")
    assert cfs.wait_s_per_job < many.wait_s_per_job <= machine.CFS_LATENCY_S / 2


@pytest.mark.parametrize("kernel,eevdf", [("6.6.0", True), ("6.10.3-arch1", True), ("6.5.13", False),
                                          ("5.15.0-91-generic", False), ("3.10.0-1160.el7", False),
                                          ("", False), ("weird", False)])
def test_kernel_scheduler(kernel, eevdf):
    assert machine.kernel_is_eevdf(kernel) is eevdf


def test_per_node_pool_larger_than_its_node_is_oversubscribed():
    # 2 pools of 9 threads on nodes of 8 logical CPUs: 18 + 1 < 24 CPUs in all, but each node runs 9
    fits = machine.kt_threads(18, 12, 24)
    split = machine.kt_threads(18, 12, 24, pools=2, node_logical=8)
    assert fits.oversubscribed == 0 and split.oversubscribed == 2 and split.wait_s_per_job > 0


def test_helpers_take_cores_before_the_compute_threads_share_them():
    assert machine.kt_threads(8, 16, 32).dot_threads == 8  # room for all: every thread a core
    full = machine.kt_threads(16, 16, 32)  # 17 busy on 16 cores: one core hosts two of them
    assert full.dot_threads < 16
    assert full.dot_threads == pytest.approx((16 + 0.1) * 16 / 17)


def test_kt_avx512_without_vnni_runs_the_avx2_kernels():
    skx = catalog.build_profile(SpecRequest(cpu="Xeon Platinum 8136", sockets=1, ram_bytes=256 * GIB))
    assert machine.dot_isa_class(skx) == "avx512f"
    # KTransformers' AVX2 kernels: 0.7 of the AVX-512 VNNI anchor (an Intel core: no pipe scaling)
    assert machine.isa_dot_scale(skx, "ktransformers")[0] == 0.7
    # with VNNI its 512-bit kernels run at the anchor's rate (a Cascade Lake part)
    clx = catalog.build_profile(SpecRequest(cpu="Xeon Gold 6248", sockets=1, ram_bytes=256 * GIB))
    assert machine.dot_isa_class(clx) == "avx512_vnni"
    assert machine.isa_dot_scale(clx, "ktransformers")[0] == 1.0


# ---- through the cost model -------------------------------------------------------------------

def test_factors_112_threads_on_112_cpus_pay_the_wait_56_do_not():
    hw, pr = xeon_8136_x2(), read_priors("ktransformers")
    f56 = resolve_factors(hw, pr, kt(56), host_bytes=380 * GIB)
    f112 = resolve_factors(hw, pr, kt(112), host_bytes=380 * GIB)
    assert f56.oversub_s_per_barrier == 0.0
    assert f112.oversub_s_per_barrier == pytest.approx(6e-3)
    # the wait enters every MoE layer's sync, once per decode job (backends.toml: 2 per layer)
    assert pr.n_cpu_ops_per_layer == machine.KT_DECODE_JOBS_PER_LAYER
    assert f112.s_sync_s.value - f56.s_sync_s.value >= 2 * 6e-3
    assert "descheduled" in f112.s_sync_s.note


def test_decode_collapses_past_the_logical_cpus_and_not_before():
    m, hw, pr = toy_model(n_layers=16), xeon_8136_x2(), read_priors("ktransformers")
    base = dict(cpu_moe_layers=tuple(range(16)))
    t56 = estimate(m, dataclasses.replace(kt(56), **base), hw, pr).decode_tok_s
    t111 = estimate(m, dataclasses.replace(kt(111), **base), hw, pr).decode_tok_s
    t112 = estimate(m, dataclasses.replace(kt(112), **base), hw, pr).decode_tok_s
    assert t111 == pytest.approx(t56, rel=0.1)  # only the per-thread barrier term grows
    assert t112 < 0.6 * t111
    # a newer kernel's shorter slices cost less
    t112_eevdf = estimate(m, dataclasses.replace(kt(112), **base), xeon_8136_x2("6.8.0"), pr).decode_tok_s
    assert t112 < t112_eevdf < t111


def test_rule_is_ktransformers_only():
    hw = xeon_8136_x2()
    p = Placement(backend="llama.cpp", n_threads=112, numa="none")
    f = resolve_factors(hw, read_priors("llama.cpp"), p, host_bytes=380 * GIB)
    assert f.oversub_s_per_barrier == machine.oversubscription_s_per_barrier(machine.thread_use(112, 56, 112))


def test_default_threads_leave_the_helper_a_cpu_without_smt():
    """A plan with no --threads runs the physical cores, but KTransformers' --cpu_infer plus the
    thread that waits on the GPU would oversubscribe a CPU without SMT (Xeon 6 E-cores): its
    default keeps one logical CPU free, so `estimate` and `tune` do not plan a collapsed run."""
    from moeplan.planner.cost.estimate import default_threads
    from moeplan.planner.search import Request, choose_plan
    from moeplan.profiles.model_profiles import load_profile

    e_core = catalog.build_profile(SpecRequest(cpu="Xeon 6740E", gpu="RTX 4090", ram_bytes=1024 * GIB))
    assert e_core.cpu.n_cores == e_core.cpu.n_threads == 96
    p = Placement(numa="none")
    assert default_threads(e_core, p, "llama.cpp") == 96
    assert default_threads(e_core, p, "ktransformers") == 95
    smt = catalog.build_profile(SpecRequest(cpu="EPYC 9355", gpu="RTX 4090", ram_bytes=1024 * GIB))
    assert default_threads(smt, p, "ktransformers") == 32  # SMT siblings hold the helper
    model = load_profile("deepseek-v3", "Q4_K_M")
    plan = choose_plan(model, e_core, read_priors("ktransformers"), Request())
    assert plan.best.placement.n_threads == 95
    all_cores = estimate(model, plan.best.placement.with_(n_threads=96), e_core, read_priors("ktransformers"))
    assert plan.best.estimate.decode_tok_s > 5 * all_cores.decode_tok_s  # 96 + 1 threads on 96 CPUs
