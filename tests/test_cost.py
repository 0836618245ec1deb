"""The cost model on hand-worked cases: every expected figure is computed in a comment."""
from __future__ import annotations

import pytest
from model_builders import toy_hw, toy_model, unit_priors

from moeplan.planner.cost.estimate import DECODE_OVERLAP_P, cache_hit_rate, distinct_experts, estimate
from moeplan.planner.placement import Placement

# toy_model(): 8 MoE layers, 8 experts, k=2, n_embd=n_ff_exp=1024, F16 experts.
#   expert bytes per layer  E = 3 * 1024 * 1024 * 8 * 2      = 50,331,648
#   read per token per layer k/N * E = E / 4                  = 12,582,912
#   resident per layer: norms 2*4096, q,o 2*2,097,152, k,v 2*524,288, router 32,768 = 5,283,840
#   R_dense = 8 * 5,283,840 + output 67,108,864 + output_norm 4,096 + one embedding row 2,048
#           = 109,385,728
R_DENSE = 109_385_728
E_TOK = 12_582_912


def _overlap(read: float, dot: float) -> float:
    """A CPU read and its dot products overlapped: (read^p + dot^p)^(1/p) with p = 1.75, the
    exponent benchmarks/overlap_fit.py fits on the train split's thread sweeps (docs/cost-model.md)."""
    return (read**1.75 + dot**1.75) ** (1 / 1.75)


def test_all_gpu_decode_is_bytes_over_bandwidth():
    m, hw, pr = toy_model(), toy_hw(), unit_priors()
    e = estimate(m, Placement(n_threads=16), hw, pr)
    # (R_dense + 8 * E_TOK) / 1000 GB/s = 210,049,024 B / 1e12 B/s = 210.049 us
    t = (R_DENSE + 8 * E_TOK) / 1e12
    assert e.decode_tok_s == pytest.approx(1 / t, rel=1e-9)
    assert e.bottleneck == "gpu-mem"
    lo, hi = e.decode_tok_s_range
    assert lo < e.decode_tok_s < hi


def test_cpu_layers_add_dram_time():
    m, hw, pr = toy_model(), toy_hw(), unit_priors()
    e = estimate(m, Placement(cpu_moe_layers=(0, 1, 2, 3), n_threads=16), hw, pr)
    # GPU: (R_dense + 4 * E_TOK) / 1e12 = 159.717 us; CPU: 4 * E_TOK / 80 GB/s = 629.146 us
    # dot compute: 4 * 6,291,456 weights / (16 threads * 1e12 x 0.75 AVX2) = 2.1 us, far below the
    # read: the overlap (read^p + dot^p)^(1/p) adds next to nothing
    read, dot = 4 * E_TOK / 80e9, 4 * 6_291_456 / (16 * 0.75e12)
    t = (R_DENSE + 4 * E_TOK) / 1e12 + _overlap(read, dot)
    assert e.decode_tok_s == pytest.approx(1 / t, rel=1e-9)
    terms = {x.name: x.seconds for x in e.decode_terms}
    assert terms["cpu_experts_read"] == pytest.approx(read)
    assert terms["cpu_compute_excess"] == pytest.approx(_overlap(read, dot) - read)
    assert 0 < terms["cpu_compute_excess"] < 1e-3 * read
    assert e.bottleneck == "cpu-mem"


def test_compute_bound_type_adds_excess():
    m, hw = toy_model(), toy_hw()
    # 1 core at 1e9 weights/s x 0.75 (mainline's AVX2 kernels without VNNI, the backend record's isa_dot_scale):
    # 4 layers * 6,291,456 weights = 25,165,824 -> 33.55 ms, more than the 0.629 ms read: the
    # excess is what the overlapped time (read^p + dot^p)^(1/p) adds to the read
    pr = unit_priors(cpu_dot_weights_per_cycle=1.0)
    e = estimate(m, Placement(cpu_moe_layers=(0, 1, 2, 3), n_threads=1), hw, pr)
    terms = {x.name: x.seconds for x in e.decode_terms}
    read, dot = 4 * E_TOK / 80e9, 25_165_824 / 0.75e9
    assert terms["cpu_compute_excess"] == pytest.approx(_overlap(read, dot) - read)
    assert dot - read < terms["cpu_compute_excess"] < dot
    assert e.bottleneck == "cpu-compute"


def test_threads_limit_cpu_bandwidth():
    m, hw = toy_model(), toy_hw()
    # b_core = core_read_share * node BW / cores = 1.0 * 80e9 / 16 = 5 GB/s; 4 threads -> 20 GB/s
    pr = unit_priors(core_read_share=1.0)
    e = estimate(m, Placement(cpu_moe_layers=(0,), n_threads=4), hw, pr)
    terms = {x.name: x.seconds for x in e.decode_terms}
    assert terms["cpu_experts_read"] == pytest.approx(E_TOK / 20e9)


def test_kv_read_grows_with_depth():
    m, hw, pr = toy_model(), toy_hw(), unit_priors()
    e0 = estimate(m, Placement(n_threads=16), hw, pr, depth=0)
    e1 = estimate(m, Placement(n_threads=16), hw, pr, depth=4096)
    # K+V: 2 heads * 128 * 2 bytes * 2 = 1024 B per token per layer, 8 layers: 8192 B/token
    kv = {x.name: x.seconds for x in e1.decode_terms}["kv_read"]
    assert kv == pytest.approx(4096 * 8192 / 1e12)
    assert e1.decode_tok_s < e0.decode_tok_s


def test_prefill_op_offload_copies_used_experts():
    m, hw, pr = toy_model(), toy_hw(), unit_priors()
    p = Placement(cpu_moe_layers=(0, 1, 2, 3), n_threads=16, n_ubatch=512)
    e = estimate(m, p, hw, pr, n_prompt=4096)
    terms = {x.name: x.seconds for x in e.prefill_terms}
    # u = 512 >= 32: every used expert of the 4 CPU layers crosses PCIe once per ubatch;
    # U(512) = 8 * (1 - 0.75**512) ~ 8: whole layers, 4 * 50,331,648 B / 25 GB/s = 8.053 ms
    # per ubatch of 512 -> per prompt token / 512
    share = distinct_experts(8, 2, 512) / 8
    assert terms["h2d_experts"] == pytest.approx(4 * 50_331_648 * share / 25e9 / 512)
    assert "cpu_experts" not in terms
    # a small ubatch (< 32) keeps the experts on the CPU
    e2 = estimate(m, p.with_(n_ubatch=16), hw, pr, n_prompt=4096)
    assert "cpu_experts" in {x.name for x in e2.prefill_terms}
    assert "h2d_experts" not in {x.name for x in e2.prefill_terms}


def test_no_op_offload_computes_on_cpu():
    m, hw, pr = toy_model(), toy_hw(), unit_priors(cpu_dot_weights_per_cycle=1.0)
    p = Placement(cpu_moe_layers=(0, 1, 2, 3), n_threads=16, n_ubatch=512, op_offload=False)
    terms = {x.name: x.seconds for x in estimate(m, p, hw, pr, n_prompt=512).prefill_terms}
    # the toy's F16 experts are a MUL_MAT_ID, which mainline runs through vec_dot per (row,
    # token) (cost/kernels.py): 512 tokens * 4 layers * 6,291,456 weights * cost 1.0 / (1
    # weight/cycle * 0.75 (llama.cpp's avx2 dot kernels, the backend record's isa_dot_scale) * 1 GHz * 16
    # threads) = 1.07 s, more than reading 4 whole layers (201 MB / 80 GB/s = 2.5 ms)
    assert terms["cpu_experts"] == pytest.approx(512 * 4 * 6_291_456 / 1.2e10 / 512)


def test_ik_offload_threshold():
    m, hw = toy_model(), toy_hw()
    pr = unit_priors(op_offload="ik")
    p = Placement(cpu_moe_layers=(0,), n_threads=16, n_ubatch=64)
    # ik_llama.cpp offloads when ubatch * k >= 32 * N: 64 * 2 = 128 < 256 -> CPU
    assert "cpu_experts" in {x.name for x in estimate(m, p, hw, pr).prefill_terms}
    # 128 * 2 = 256 >= 256 -> offloaded
    assert "h2d_experts" in {x.name for x in estimate(m, p.with_(n_ubatch=128), hw, pr).prefill_terms}


def test_no_policy_reads_one_node_with_dynamic_chunking():
    m = toy_model()
    hw = toy_hw(nodes=2, dram_bw=160e9, cores=32)
    cpu = (0, 1, 2, 3)

    def reads(pr, p):
        return {x.name: x.seconds for x in estimate(m, p, hw, pr).decode_terms}["cpu_experts_read"]

    none = Placement(cpu_moe_layers=cpu, n_threads=32, numa="none")
    bind = Placement(cpu_moe_layers=cpu, n_threads=16, numa="bind", numa_nodes=(0,))
    # fast cores: the 16 threads on the page node alone fill its DRAM (80 GB/s); without --numa
    # ggml hands chunks out dynamically, so the far threads only take what is left: none = bind
    pr = unit_priors(rho_remote=0.25)
    assert reads(pr, none) == pytest.approx(4 * E_TOK / 80e9)
    assert reads(pr, bind) == pytest.approx(4 * E_TOK / 80e9)
    # slow cores (0.5 x the node's fair share: 2.5 GB/s each): 16 near threads read 40 GB/s, the
    # 16 far ones 0.25 x 40 = 10 GB/s over the link, side by side: 50 GB/s; a bind has 40
    pr = unit_priors(rho_remote=0.25, core_read_share=0.5)
    assert reads(pr, none) == pytest.approx(4 * E_TOK / 50e9)
    assert reads(pr, bind) == pytest.approx(4 * E_TOK / 40e9)


def test_interleave_waits_for_remote_lines_and_distribute_reads_locally():
    m = toy_model()
    hw = toy_hw(nodes=2, dram_bw=160e9, cores=32)
    pr = unit_priors(rho_remote=0.25)
    cpu = (0, 1, 2, 3)
    t = {}
    for numa in ("interleave", "distribute"):
        e = estimate(m, Placement(cpu_moe_layers=cpu, n_threads=32, numa=numa, numa_nodes=(0, 1)), hw, pr)
        t[numa] = {x.name: x.seconds for x in e.decode_terms}["cpu_experts_read"]
    # interleave: half of every thread's lines remote at 0.25 x 160: 160 / (0.5 + 0.5 / 0.25) = 64 GB/s
    assert t["interleave"] == pytest.approx(4 * E_TOK / 64e9)
    # distribute (page cache dropped, static chunks): every page local to its reader: 160 GB/s
    assert t["distribute"] == pytest.approx(4 * E_TOK / 160e9)


def test_one_node_over_two_sockets_reads_like_interleaved_pages():
    """NPS0 / node interleaving: one NUMA node spans both sockets and the memory controllers
    interleave every page over both sockets' channels, so half of any thread's lines are remote
    whatever the policy; the interleave policy over two socket nodes reads the same."""
    from dataclasses import replace

    m = toy_model()
    pr = unit_priors(rho_remote=0.25)
    cpu = (0, 1, 2, 3)
    two = toy_hw(nodes=2, dram_bw=160e9, cores=32)
    nps0 = replace(toy_hw(nodes=1, dram_bw=160e9, cores=32), cpu=replace(two.cpu, n_sockets=2))
    def read(hw, **kw):
        e = estimate(m, Placement(cpu_moe_layers=cpu, n_threads=32, **kw), hw, pr)
        return {x.name: x.seconds for x in e.decode_terms}["cpu_experts_read"], e.factors
    t0, f0 = read(nps0, numa="none")
    assert t0 == pytest.approx(4 * E_TOK / 64e9)  # 160 / (0.5 + 0.5 / 0.25)
    assert t0 == pytest.approx(read(two, numa="interleave", numa_nodes=(0, 1))[0])
    assert "NPS0" in f0.bw_cpu_bytes_per_s.note
    # one socket, one node: every read local
    one = toy_hw(nodes=1, dram_bw=160e9, cores=32)
    assert read(one, numa="none")[0] == pytest.approx(4 * E_TOK / 160e9)


def test_expert_cache_hits_move_reads_to_the_gpu():
    m, hw = toy_model(), toy_hw()
    pr = unit_priors(zipf_s=0.0)  # uniform routing: hit rate = cached share
    cpu = (0, 1, 2, 3)
    # 4 experts per CPU layer cached (half of 8): 4 * 4 * 6,291,456 B = 100,663,296 B
    p = Placement(cpu_moe_layers=cpu, n_threads=16, gpu_expert_cache_bytes=4 * 4 * 6_291_456)
    e = estimate(m, p, hw, pr)
    terms = {x.name: x.seconds for x in e.decode_terms}
    assert terms["cpu_experts_read"] == pytest.approx(0.5 * 4 * E_TOK / 80e9)
    assert cache_hit_rate(4, 8, 0.0) == pytest.approx(0.5)
    assert cache_hit_rate(2, 8, 0.5) == pytest.approx((2 / 8) ** 0.5)
    assert e.memory.items[2].name == "expert_cache"


def test_speculation_reads_the_union_of_experts():
    m, hw, pr = toy_model(), toy_hw(), unit_priors()
    cpu = tuple(range(8))
    base = estimate(m, Placement(cpu_moe_layers=cpu, n_threads=16), hw, pr)
    # 4 drafted tokens: a step verifies 5 tokens, CPU reads U(5)/k times the experts of one token;
    # with acceptance 0 it yields 1 token per step, so it must be slower
    bad = estimate(m, Placement(cpu_moe_layers=cpu, n_threads=16, n_draft=4, draft_accept=0.0), hw, pr)
    assert bad.decode_tok_s < base.decode_tok_s
    good = estimate(m, Placement(cpu_moe_layers=cpu, n_threads=16, n_draft=4, draft_accept=0.9), hw, pr)
    u5 = distinct_experts(8, 2, 5)
    cpu_read = 8 * 50_331_648 * u5 / 8 / 80e9
    gpu_read = R_DENSE / 1e12
    kv_read = 4 * 8192 / 1e12  # attention of the 5 verified tokens reads 4 cells of KV
    tokens = (1 - 0.9 ** 5) / (1 - 0.9)
    # the dot products (~0.3% of the CPU read) add ~(0.003)^2 / 2 of it under the overlap
    assert good.decode_tok_s == pytest.approx(tokens / (cpu_read + gpu_read + kv_read), rel=1e-4)


def test_mmap_spills_to_nvme_when_ram_is_short():
    m = toy_model()
    hw = toy_hw(ram_gib=2.2)  # ~0.2 GiB after the OS reserve: not all 8 CPU layers (384 MiB) fit
    pr = unit_priors()
    e = estimate(m, Placement(cpu_moe_layers=tuple(range(8)), n_threads=16), hw, pr)
    assert "nvme_read" in {x.name for x in e.decode_terms}
    assert any("NVMe" in n for n in e.notes)


def test_page_cache_pressure_puts_the_disk_bound_under_the_range():
    from moeplan.planner.hardware.profile import OS_RESERVE_BYTES

    m, pr = toy_model(), unit_priors()
    cpu = (0, 1, 2, 3)
    roomy = estimate(m, Placement(cpu_moe_layers=cpu, n_threads=16), toy_hw(), pr)
    assert roomy.decode_tok_s_paging == 0
    # RAM for the OS, the CPU experts (4 x 48 MiB) and half the file: the file does not fit
    ram = (OS_RESERVE_BYTES + m.file_bytes / 2 + 4 * 50_331_648) / 2**30
    hw = toy_hw(ram_gib=ram)
    e = estimate(m, Placement(cpu_moe_layers=cpu, n_threads=16), hw, pr)
    # the CPU experts themselves fit: the figure is the roomy one, no NVMe term
    assert e.decode_tok_s == pytest.approx(roomy.decode_tok_s, rel=1e-12)
    assert "nvme_read" not in {x.name for x in e.decode_terms}
    # every CPU expert byte from the disk instead of DRAM: 4 * E_TOK / nvme (toy: 2 GB/s prior)
    terms = {x.name: x.seconds for x in e.decode_terms}
    nvme = e.factors.nvme_bytes_per_s.value
    t = sum(terms.values()) - terms["cpu_experts_read"] - terms["cpu_compute_excess"] + 4 * E_TOK / nvme
    assert e.decode_tok_s_paging == pytest.approx(1 / t, rel=1e-9)
    assert e.decode_tok_s_range[0] == pytest.approx(e.decode_tok_s_paging)
    assert e.decode_tok_s_range[1] == pytest.approx(roomy.decode_tok_s_range[1])
    assert any("--no-mmap" in n for n in e.notes)
    # read into anonymous memory, or loaded by a backend that does not map the file: no floor
    assert estimate(m, Placement(cpu_moe_layers=cpu, n_threads=16, load_mode="no-mmap"), hw, pr).decode_tok_s_paging == 0
    kt = unit_priors(name="ktransformers")
    assert estimate(m, Placement(backend="ktransformers", cpu_moe_layers=cpu, n_threads=16), hw, kt).decode_tok_s_paging == 0


def test_cpu_only_machine():
    from dataclasses import replace

    m = toy_model()
    hw = replace(toy_hw(), gpus=())
    e = estimate(m, Placement(n_threads=16), hw, unit_priors())
    # everything read from DRAM: (R_dense + 8 * E_TOK) / 80 GB/s
    t = (R_DENSE + 8 * E_TOK) / 80e9
    assert e.decode_tok_s == pytest.approx(1 / t, rel=1e-4)  # the dot products overlap the read
    assert e.vram_bytes == 0


def test_reads_and_dot_products_overlap_imperfectly():
    from moeplan.planner.cost.estimate import compute_excess

    # equal times cost 2^(1/p) of either; a dot time half the read adds ((1 + 0.5^p)^(1/p) - 1),
    # worked by hand at p = 1.75 (the train split's fit)
    assert compute_excess(1.0, 1.0) == pytest.approx(0.48599429)  # 2^(1/1.75) - 1
    assert compute_excess(0.5, 1.0) == pytest.approx(0.16036565)  # (1 + 0.5^1.75)^(1/1.75) - 1
    # never below the roofline max(read, dot), never above their sum
    for dot in (0.01, 0.3, 1.0, 3.0, 100.0):
        total = 1.0 + compute_excess(dot, 1.0)
        assert max(1.0, dot) < total < 1.0 + dot
    assert compute_excess(0.0, 1.0) == 0.0 and compute_excess(2.0, 0.0) == 2.0


def test_the_overlap_exponent_is_what_the_published_thread_sweeps_say():
    """benchmarks/overlap_fit.py on benchmarks/data/thread-sweeps.json: DECODE_OVERLAP_P fits the
    train split's sweeps (benchmarks/split.py) better than a quarter step either side (a rounder
    or a sharper knee)."""
    import importlib.util
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("overlap_fit", root / "benchmarks" / "overlap_fit.py")
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    spec = importlib.util.spec_from_file_location("moeplan_bench_split", root / "benchmarks" / "split.py")
    split = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(split)
    groups: dict[str, list[dict]] = {}
    for s in json.loads((root / "benchmarks" / "data" / "thread-sweeps.json").read_text())["sweeps"]:
        if split.side(s["source_url"]) == "train":
            groups.setdefault(s["ceiling_group"], []).append(s)
    err = {p: sum(fit.group_error(ss, p) for ss in groups.values())
           for p in (DECODE_OVERLAP_P - 0.25, DECODE_OVERLAP_P, DECODE_OVERLAP_P + 0.25)}
    assert err[DECODE_OVERLAP_P] < min(err[DECODE_OVERLAP_P - 0.25], err[DECODE_OVERLAP_P + 0.25])
