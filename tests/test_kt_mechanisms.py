"""KTransformers mechanisms: per-node worker pools vs one pool, and the layer-wise GPU prefill
threshold (planner/cost/machine.py "KTransformers", cost/estimate.py, launch/ktransformers.py)."""
from __future__ import annotations

import dataclasses

import pytest
from launch_plans import make_plan, write_models
from model_builders import toy_hw, toy_model, unit_priors

from moeplan.launch import emit_launch, release_programs
from moeplan.launch.binaries import Programs
from moeplan.launch.ktransformers import THRESHOLD_FLAG
from moeplan.planner.cost import machine
from moeplan.planner.cost.estimate import (
    LINK_READ,
    estimate,
    estimate_prefill_terms,
    kt_prefill_crossover_tokens,
    resolve_factors,
)
from moeplan.planner.memory.accounting import estimate_memory
from moeplan.planner.memory.constants import memory_constants
from moeplan.planner.options import KT_THRESHOLD_KEY, PlanOptions
from moeplan.planner.placement import Placement
from moeplan.planner.search import Request, choose_plan
from moeplan.profiles import catalog
from moeplan.profiles.backends import read_priors
from moeplan.profiles.catalog import SpecRequest
from moeplan.units import GIB

KEY = KT_THRESHOLD_KEY


def kt_priors(**kw):
    return unit_priors(name="ktransformers", op_offload="never", numa_aware=True, **kw)


def two_socket_xeon():
    return catalog.build_profile(SpecRequest(cpu="Xeon Gold 6330", sockets=2, ram_bytes=1024 * GIB,
                                             gpu="RTX 4090"))


# ---- NUMA: pools ---------------------------------------------------------------------------

def test_per_node_pools_read_locally_one_pool_reads_over_the_socket_links():
    hw, pr = two_socket_xeon(), read_priors("ktransformers")
    assert pr.numa_aware and len(hw.cpu_nodes) == 2
    ids = tuple(n.id for n in hw.cpu_nodes)
    pools = resolve_factors(hw, pr, Placement(backend="ktransformers", n_threads=56, numa="distribute",
                                              numa_nodes=ids), host_bytes=400 * GIB)
    one = resolve_factors(hw, pr, Placement(backend="ktransformers", n_threads=56, numa="none"),
                          host_bytes=400 * GIB)
    assert pools.remote_share == 0.0 and "2 per-node pools" in pools.numa_note
    assert one.remote_share == pytest.approx(0.5)
    assert pools.bw_cpu_bytes_per_s.value > one.bw_cpu_bytes_per_s.value
    # half the reads remote, and those go over the UPI links: at most 2 x the links' read rate
    link, _ = machine.socket_link_cap(hw, 2, 2)
    assert one.bw_cpu_bytes_per_s.value <= 2 * link * LINK_READ * (1 + 1e-9)
    assert "remote reads" in one.numa_note


def test_pool_count_follows_the_plans_numa():
    assert machine.kt_pool_count("distribute", 2) == 2
    assert machine.kt_pool_count("bind", 2) == 2
    assert machine.kt_pool_count("none", 2) == 1
    assert machine.kt_pool_count("interleave", 4) == 1
    assert machine.kt_pool_count("distribute", 1) == 1


def test_pools_split_the_experts_between_nodes_ram_counted_once():
    m, hw, pr = toy_model(), toy_hw(nodes=2), kt_priors()
    p = Placement(backend="ktransformers", cpu_moe_layers=(0, 1, 2, 3), n_threads=16, numa="distribute",
                  numa_nodes=(0, 1))
    e = estimate(m, p, hw, pr)
    mem = estimate_memory(m, p, memory_constants(hw, pr.name))
    experts = int(mem.get("weights_experts_cpu"))
    assert experts == 4 * 3 * 1024 * 1024 * 8 * 2
    assert e.ram_bytes == mem.ram_bytes  # no per-node copies (kt-kernel moe-tp.hpp splits)
    per = dict(e.ram_bytes_per_node)
    assert per[1] == experts // 2
    assert per[0] == mem.ram_bytes - experts // 2
    one = estimate(m, p.with_(numa="none", numa_nodes=()), hw, pr)
    assert one.ram_bytes_per_node == ((0, one.ram_bytes),)
    assert any("one KTransformers thread pool" in n for n in one.notes)


def test_tune_plans_per_node_pools_for_kt_on_two_nodes():
    m, hw, pr = toy_model(), toy_hw(nodes=2, vram_gib=2.0), kt_priors()
    res = choose_plan(m, hw, pr, Request(backend="ktransformers", n_ctx=4096))
    p = res.best.placement
    assert p.numa == "distribute" and p.numa_nodes == (0, 1)
    assert machine.kt_pool_count(p.numa, len(p.numa_nodes)) == 2
    asked = choose_plan(m, hw, pr, Request(backend="ktransformers", n_ctx=4096, numa_policies=("none",))).best
    assert asked.placement.numa == "none"
    assert res.best.estimate.decode_tok_s > asked.estimate.decode_tok_s


# ---- prefill: the layer-wise GPU threshold -------------------------------------------------

def _kt_case(h2d: float):
    m, hw, pr = toy_model(), toy_hw(h2d=h2d), kt_priors(cpu_mm_eff={"avx2": 0.05})
    p = Placement(backend="ktransformers", cpu_moe_layers=(0, 1, 2, 3), n_threads=16)
    f = resolve_factors(hw, pr, p)
    return m, hw, pr, p, f


def _t(m, hw, pr, p, f, n, layerwise):
    return sum(t.seconds for t in estimate_prefill_terms(m, p, hw, pr, f, n, layerwise=layerwise)[0])


def test_crossover_is_where_the_layerwise_path_gets_faster():
    m, hw, pr, p, f = _kt_case(25e9)
    n = kt_prefill_crossover_tokens(m, p, hw, pr, f)
    assert 1 < n < 4096  # within one chunk of `kt run`'s --chunked-prefill-size
    assert _t(m, hw, pr, p, f, n, True) < _t(m, hw, pr, p, f, n, False)
    assert _t(m, hw, pr, p, f, n - 1, True) >= _t(m, hw, pr, p, f, n - 1, False)


def test_crossover_falls_as_the_link_gets_faster():
    def crossover(h2d):
        m, hw, pr, p, f = _kt_case(h2d)
        return kt_prefill_crossover_tokens(m, p, hw, pr, f)

    thresholds = [crossover(h2d) for h2d in (2e9, 8e9, 25e9, 64e9)]
    live = [t for t in thresholds if t]
    assert live == sorted(live, reverse=True) and len(set(live)) == len(live) >= 3
    # a link so slow that even a full chunk is faster on the CPU: the path is off
    assert crossover(0.05e9) == 0


def test_the_plans_threshold_selects_the_prefill_path():
    m, hw, pr, p, _ = _kt_case(25e9)
    at = p.with_(options=PlanOptions(kt_gpu_prefill_token_threshold=1000))
    names = lambda n, q: {t.name for t in estimate(m, q, hw, pr, n_prompt=n).prefill_terms}  # noqa: E731
    assert "cpu_experts" in names(999, at) and "h2d_experts" not in names(999, at)
    assert "h2d_experts" in names(1000, at)
    assert "h2d_experts" not in names(8192, p.with_(options=PlanOptions(kt_gpu_prefill_token_threshold=0)))  # 0 = off
    with pytest.raises(Exception, match=KEY):
        PlanOptions.from_pairs(((KEY, "many"),))


def test_a_longer_prefill_chunk_uploads_the_experts_fewer_times():
    """SGLang's --chunked-prefill-size (the plan's n_batch): every chunk uploads every CPU layer's
    experts, so per prompt token the upload is the experts over the chunk."""
    m, hw, pr, p, _ = _kt_case(25e9)
    on = PlanOptions(kt_gpu_prefill_token_threshold=1)
    est = {b: estimate(m, p.with_(n_batch=b, options=on), hw, pr, n_prompt=16384) for b in (2048, 4096, 16384)}
    h2d = {b: sum(t.seconds for t in e.prefill_terms if t.name == "h2d_experts") for b, e in est.items()}
    assert h2d[2048] == pytest.approx(2 * h2d[4096]) and h2d[4096] == pytest.approx(4 * h2d[16384])
    assert est[16384].prefill_tok_s > est[4096].prefill_tok_s > est[2048].prefill_tok_s
    assert any("16384-token chunk" in n for n in est[16384].notes)


def test_gpu_experts_of_every_layer_cost_as_the_layers_of_the_same_bytes():
    from moeplan.commands.placement_opts import resolve_placement
    from moeplan.errors import InputError

    m = toy_model()  # 8 MoE layers of 8 experts
    cpu = lambda g: resolve_placement(m, backend="ktransformers", kt_gpu_experts=g).cpu_moe_layers  # noqa: E731
    assert len(cpu(0)) == 8 and len(cpu(2)) == 6 and len(cpu(8)) == 0  # 2 of 8 experts: 2 of 8 layers' bytes
    with pytest.raises(InputError, match="out of range"):
        cpu(9)
    with pytest.raises(InputError, match="KTransformers"):
        resolve_placement(m, backend="llama.cpp", kt_gpu_experts=2)
    with pytest.raises(InputError, match="only one of"):
        resolve_placement(m, backend="ktransformers", kt_gpu_experts=2, all_cpu_moe=True)
    # every layer keeps CPU experts and hands over to the pools; emit passes G as given
    from types import SimpleNamespace

    from moeplan.launch.ktransformers import gpu_experts_per_layer

    p = resolve_placement(m, backend="ktransformers", kt_gpu_experts=3)
    assert p.options.kt_num_gpu_experts == 3
    hw, pr = toy_hw(), kt_priors()
    syncs = lambda q: next(t for t in estimate(m, q, hw, pr).decode_terms if t.name == "sync").formula  # noqa: E731
    assert syncs(p).startswith("8 ") and syncs(p.with_(options=PlanOptions())).startswith(f"{len(p.cpu_moe_layers)} ")
    assert gpu_experts_per_layer(SimpleNamespace(model=m, placement=p)) == (3, 24)


def test_the_batch_flag_is_the_chunk_and_defaults_per_backend():
    from moeplan.commands.placement_opts import resolve_placement

    m = toy_model()
    assert resolve_placement(m, backend="ktransformers").n_batch == 4096  # kt run: resolve(..., 4096)
    assert resolve_placement(m, backend="llama.cpp").n_batch == 2048
    assert resolve_placement(m, backend="ktransformers", batch=32768).n_batch == 32768
    assert resolve_placement(m, backend="llama.cpp", batch=256, ubatch=1024).n_batch == 1024  # -b >= -ub
    from moeplan.errors import InputError

    with pytest.raises(InputError, match="--batch 0"):
        resolve_placement(m, backend="ktransformers", batch=0)


def test_layerwise_prefill_holds_one_cpu_layers_experts_in_vram():
    """kt-kernel README: the layer-wise path "requires one MoE layer extra VRAM" (~3.6 GB for
    MiniMax-M2.1: its 62 layers' 225 GB of FP8 experts / 62)."""
    m = toy_model()
    p = Placement(backend="ktransformers", cpu_moe_layers=(0, 1, 2, 3), n_threads=16)
    gpu = lambda q: {i.name: i.n_bytes for i in estimate_memory(m, q).items if i.device == "gpu"}  # noqa: E731
    layer = m.moe_layers[0].expert_bytes
    assert gpu(p)["kt_prefill_layer"] == layer  # the planner's candidates reserve it
    assert gpu(p.with_(options=PlanOptions(kt_gpu_prefill_token_threshold=500)))["kt_prefill_layer"] == layer
    assert "kt_prefill_layer" not in gpu(p.with_(options=PlanOptions(kt_gpu_prefill_token_threshold=0)))  # the path is off
    assert "kt_prefill_layer" not in gpu(p.with_(op_offload=False))
    assert "kt_prefill_layer" not in gpu(p.with_(backend="llama.cpp"))


# ---- the emitter ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return write_models(tmp_path_factory.mktemp("models"))


def test_emitter_pools_and_threshold_flag(models):
    m = models["qwen3moe"]
    p = Placement(backend="ktransformers", cpu_moe_layers=m.moe_layer_indices[:3], n_ctx=8192, n_threads=32,
                  numa="distribute", numa_nodes=(0, 1), n_batch=4096, options=PlanOptions(kt_gpu_prefill_token_threshold=700))
    stock = emit_launch(make_plan(m, p), m, "ktransformers")
    argv = list(stock.script("launch.sh").command.argv)
    assert argv[argv.index("--kt-threadpool-count") + 1] == "2"
    # SGLang 0.5.23's launch_server --help has no threshold flag: not emitted, said in the notes
    assert THRESHOLD_FLAG not in argv
    assert any(THRESHOLD_FLAG in n and "700" in n for n in stock.notes)
    # a build that lists it (kvcache-ai SGLang) gets the plan's value
    progs = release_programs("ktransformers")
    server = progs.flags["server"]
    flags = {**progs.flags, "server": dataclasses.replace(server, flags={**server.flags, THRESHOLD_FLAG: "N"})}
    fork = emit_launch(make_plan(m, p), m, "ktransformers", programs=Programs(progs.programs, flags))
    argv = list(fork.script("launch.sh").command.argv)
    assert argv[argv.index(THRESHOLD_FLAG) + 1] == "700"
    one = list(emit_launch(make_plan(m, p.with_(numa="none", numa_nodes=())), m, "ktransformers")
               .script("launch.sh").command.argv)
    assert one[one.index("--kt-threadpool-count") + 1] == "1"
