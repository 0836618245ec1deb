"""The fitted term-group scales, held-out ranges, and the leave-one-source-out scoring."""
from __future__ import annotations

import importlib.util
import math
import statistics
import sys
from pathlib import Path

import pytest

from moeplan.planner.cost.estimate import dominant_group, fitted_term_scales, held_out_range
from moeplan.planner.cost.ranges import range_tier
from moeplan.planner.plan import Term
from moeplan.profiles import backends

ROOT = Path(__file__).resolve().parent.parent


def _bench():
    spec = importlib.util.spec_from_file_location("accuracy_bench", ROOT / "benchmarks" / "accuracy.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["accuracy_bench"] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


TERMS = [Term("cpu_experts_read", 0.06, "cpu-mem", "x"), Term("cpu_compute_excess", 0.01, "cpu-compute", "x"),
         Term("gpu_weights_read", 0.02, "gpu-mem", "x"), Term("sync", 0.01, "sync", "x")]


def test_fitted_scales_multiply_their_group_only():
    out = fitted_term_scales(TERMS, {"cpu": 0.5, "gpu": 2.0})
    secs = {t.name: t.seconds for t in out}
    assert secs == pytest.approx({"cpu_experts_read": 0.03, "cpu_compute_excess": 0.005,
                                  "gpu_weights_read": 0.04, "sync": 0.01})
    assert "fitted cpu scale" in out[0].formula and out[3].formula == "x"


def test_held_out_range_uses_the_range_tier():
    # the CPU's terms carry 0.07 of 0.10 s: below CPU_BOUND_SHARE, so 'shared'
    assert dominant_group(TERMS) == "cpu" and range_tier(TERMS) == "shared"
    lo, hi = held_out_range(10.0, TERMS, {"shared": math.log(1.5), "cpu-bound": 0.9, "all": math.log(3.0)})
    assert lo == pytest.approx(10 / 1.5) and hi == pytest.approx(15.0)
    # a tier fit.json has no width for takes the pooled one
    lo, hi = held_out_range(10.0, TERMS, {"cpu-bound": 0.1, "all": math.log(2.0)})
    assert (lo, hi) == pytest.approx((5.0, 20.0))
    # a centre c moves the range to value x exp(-c -/+ w): further down than up for c > 0
    lo, hi = held_out_range(10.0, TERMS, {"shared": 0.3}, centers={"shared": 0.1})
    assert (lo, hi) == pytest.approx((10 * math.exp(-0.4), 10 * math.exp(0.2)))
    assert held_out_range(10.0, TERMS, {}) is None


def test_fitted_terms_pick_the_backend_cpu_scale(monkeypatch):
    monkeypatch.setattr(backends, "_fit", lambda: {
        "scales": {"decode": {"decode.cpu.llama.cpp": 0.8, "decode.cpu.ktransformers": 1.3, "decode.gpu": 1.1}},
        "range_log_half_width": {"decode": {"all": 0.3}}})
    assert backends.fitted_terms("llama.cpp")["scales"]["decode"] == {"cpu": 0.8, "gpu": 1.1}
    assert backends.fitted_terms("ktransformers")["scales"]["decode"] == {"cpu": 1.3, "gpu": 1.1}
    assert backends.read_priors("llama.cpp").term_range_log == {"decode": {"all": 0.3}}
    monkeypatch.setattr(backends, "_fit", lambda: {})
    assert backends.read_priors("llama.cpp").term_scale == {}


def _row(bench, rid, src, backend, cpu_s, gpu_s, measured):
    x = bench.Row({"id": rid, "source_url": src, "machine_class": "desktop"}, backend=backend)
    x.measured = {"decode": measured}
    x.groups = {"decode": {"cpu": cpu_s, "gpu": gpu_s}}
    x.prior = {"decode": 1 / (cpu_s + gpu_s)}
    x.prior_range = {"decode": (0.0, 1e9)}
    return x


def test_fit_recovers_a_cpu_scale_and_loso_hides_the_own_source():
    bench = _bench()
    # every source says the CPU terms take 0.5x the model's time, except one wild source
    rows = [_row(bench, f"r{i}", f"s{i}", "llama.cpp", 0.1, 0.01, 1 / (0.05 + 0.01)) for i in range(8)]
    rows.append(_row(bench, "wild", "s-wild", "llama.cpp", 0.1, 0.01, 1 / (0.4 + 0.01)))
    s = bench.fit(rows, "decode")
    assert s["decode.cpu.llama.cpp"] == pytest.approx(0.5, rel=0.08)
    ev = bench.evaluate(rows)["decode"]
    # the wild row is predicted from the others only: far from its own figure, outside its range
    w = ev["wild"]
    assert w["loso"] > 3 * w["measured"]
    assert not (w["loso_range"][0] <= w["measured"] <= w["loso_range"][1])
    # a typical row is predicted well and inside its held-out range
    r = ev["r0"]
    assert r["loso"] == pytest.approx(r["measured"], rel=0.1)
    assert r["loso_range"][0] <= r["measured"] <= r["loso_range"][1]


def test_user_inputs_from_rows():
    bench = _bench()
    assert bench._quant({"quant": "Q4_K_M"}) == ("Q4_K_M", "")
    assert bench._quant({"quant": "4bit (Q4, exact GGUF type not stated)"})[0] is None
    assert bench._backend("llama.cpp (llama-bench)") == "llama.cpp"
    assert bench._backend("llama.cpp fork (AtomicBot-ai atomic-llama-cpp-turboquant)") is None
    assert bench._backend("KTransformers (kt-kernel + SGLang)") == "ktransformers"
    args, why = bench.hardware_args({"id": "x", "cpu_model": None, "gpu_model": None, "offload_method": "cpu-only"})
    assert args is None and why == "CPU not stated"
    # the data set's "as written" marks are not what a user types; an unnamed CPU of stated size
    # is described by its numbers
    assert bench._as_typed("NVIDIA GeForce RTX 3070 (16 GB, as written)") == "NVIDIA GeForce RTX 3070 (16 GB)"
    assert bench._as_typed("NVIDIA GeForce RTX 4060 (8 GB; as written)") == "NVIDIA GeForce RTX 4060 (8 GB)"
    assert bench._as_typed("Intel Xeon Platinum 8480 (engineering sample QYFS, as written)") == \
        "Intel Xeon Platinum 8480 (engineering sample QYFS)"
    args, _ = bench.hardware_args({"id": "x", "cpu_model": None, "cpu_cores_total": 64, "cpu_sockets": 1,
                                   "gpu_model": "NVIDIA GeForce RTX 3090", "gpu_count": 3, "offload_method": "ot",
                                   "ram_total_gb": 256, "ram_channels_total": 8, "ram_type": "DDR4"})
    assert args[args.index("--cores") + 1] == "64" and "--cpu" not in args


def test_range_width_is_the_source_weighted_conformal_quantile_of_enough_sources():
    from moeplan.planner.cost.ranges import weighted_conformal_quantile, weighted_median

    b = _bench()
    # a group's own width needs MIN_GROUP_ROWS rows from MIN_GROUP_SOURCES sources: 9 at 80%,
    # the fewest whose weighted conformal quantile is not forced to the largest score
    assert b.MIN_GROUP_SOURCES == 9
    many = [("cpu", 0.1 * i, False, f"s{i % 10}") for i in range(1, 13)]
    one_source = [("gpu", 0.05, False, "solo")] * 12
    eight = [("pcie", 0.1 * i, False, f"p{i % 8}") for i in range(1, 13)]
    w = b.range_widths(many + one_source + eight)
    assert "cpu" in w and "gpu" not in w and "pcie" not in w
    # the centre is the source-weighted median residual, the width the weighted conformal
    # quantile of the rows' distances from the centre the other sources set (ten sources; s1 and
    # s2 hold two rows each, weighing 1/2)
    c, hw = w["cpu"]
    srcs = [f"s{i % 10}" for i in range(1, 13)]
    e = [0.1 * i for i in range(1, 13)]
    assert c == pytest.approx(weighted_median(e, srcs))
    assert c == pytest.approx(0.65)
    without = {s: weighted_median([v for v, t in zip(e, srcs) if t != s], [t for t in srcs if t != s]) for s in srcs}
    assert hw == pytest.approx(weighted_conformal_quantile([abs(v - without[s]) for v, s in zip(e, srcs)], srcs, 0.8))
    w = b.range_widths(many + one_source)
    # pooled: the 12 rows of 'solo' weigh as much as one source of the seven, not half the rows,
    # so the centre is not pulled to its 0.05 (row-weighted: the median of 24 rows, 0.1)
    allc = w["all"][0]
    assert allc == pytest.approx(weighted_median([e for _, e, _, _ in many + one_source],
                                                 [s for _, _, _, s in many + one_source]))
    assert allc > statistics.median([e for _, e, _, _ in many + one_source])


def test_a_skewed_residual_set_gives_a_range_reaching_further_down():
    b = _bench()
    # rows spread +/-0.3 in log about 0.1 (the model mostly too fast): the range reaches further
    # down than up, and is no wider in log terms than the spread needs
    res = [("all", 0.1 + 0.05 * k, False, f"s{k}") for k in range(-6, 7)]
    cw = b.range_widths(res)["all"]
    # the 12th smallest of 13 |e - c of the other rows|: 0.4 - 0.075 and 0.125 - (-0.2)
    assert cw[0] == pytest.approx(0.1) and cw[1] == pytest.approx(0.325)
    lo, hi = b._range(10.0, cw, 0.0)
    assert (lo, hi) == pytest.approx((10 * math.exp(-0.425), 10 * math.exp(0.225)))
    assert 10.0 - lo > hi - 10.0 > 0
    covered = [lo <= 10.0 / math.exp(e) <= hi for _, e, _, _ in res]
    assert sum(covered) >= 8
    # a row the estimate's floor covers scores only against the upper end
    assert b._score(2.0, True, 0.1) == 0.0 and b._score(-0.3, True, 0.1) == pytest.approx(0.4)
    assert b._score(2.0, False, 0.1) == pytest.approx(1.9)


def test_a_figure_above_the_stated_machines_roofline_is_not_estimable(tmp_path):
    """DeepSeek-V2-Lite Q6_K with -ngl 0 on dual-channel DDR4-2133 (34.1 GB/s peak) reads ~2.2 GB
    a token (the -ngl 0 blocks' dense weights included): 20 tok/s cannot come from that machine."""
    import json

    from typer.testing import CliRunner

    b = _bench()
    rows = {json.loads(x)["id"]: json.loads(x) for x in b.DEFAULT_DATA.read_text().splitlines() if x.strip()}
    row = rows["llamacpp12922-3070-5800x-ddr4-2133-dscv2lite-ngl0"]
    ok = b.run_row(row, CliRunner(), tmp_path)
    assert "decode" not in ok.skip
    assert ok.baseline["active"] == pytest.approx(15.3, rel=0.05)
    fast = b.run_row({**row, "tg_tps": 20.13}, CliRunner(), tmp_path)
    assert "roofline" in fast.skip["decode"] and "prefill" not in fast.skip


def test_the_llama_build_of_a_row():
    b = _bench()
    assert b._llama_build({"software_version": "b8125"}) == 8125
    assert b._llama_build({"software_version": "llama.cpp build 7973 (39bf692af)"}) == 7973
    assert b._llama_build({"software_version": "build: b730706a (6263)"}) == 6263
    # no number: a row dated before the split-KV change cannot have run it
    assert b._llama_build({"software_version": "early Aug 2025", "date": "2025-08-05"}) == b.LAST_BUILD_BEFORE
    assert b._llama_build({"date": "2026-05-09"}) is None and b._llama_build({"date": "2026"}) is None


def test_rows_run_with_rtr_pass_it():
    b = _bench()
    row = {"id": "x", "model_name": "Qwen3-30B-A3B", "quant": "IQ4_XS", "offload_method": "cpu-only"}
    for flags, want in (("-fa -rtr -fmoe", True), ("-rtr 1 -fmoe 1", True), ("--run-time-repack", True),
                        ("-rtr 0 -mmp 0", False), ("-fa --no-mmap", False)):
        args, _ = b.estimate_args({**row, "flags": flags}, "ik_llama.cpp", Path("/hw.json"))
        assert ("--rtr" in args) == want, flags
    args, _ = b.estimate_args({**row, "flags": "-fa -rtr"}, "llama.cpp", Path("/hw.json"))
    assert "--rtr" not in args


def test_kt_run_rows_take_the_cli_defaults(tmp_path):
    """`kt run` without thread or pool flags: --kt-cpuinfer 0.8 x the logical CPUs and one pool per
    NUMA node (kt-kernel/python/cli/commands/run.py)."""
    import json

    b = _bench()
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps({"cpu": {"n_threads": 128}}))
    row = {"id": "x", "model_name": "MiniMax-M2.1", "quant": "FP8", "offload_method": "ktransformers",
           "cpu_sockets": 2, "flags": "kt run m2.1 (CLI auto-config)", "software": "KTransformers (kt-kernel + SGLang)"}
    args, _ = b.estimate_args(row, "ktransformers", hw)
    assert args[args.index("--threads") + 1] == "102" and args[args.index("--numa") + 1] == "distribute"
    args, _ = b.estimate_args({**row, "flags": "--kt-cpuinfer 60"}, "ktransformers", hw)
    assert "--threads" not in args and "--numa" not in args
    # asked for its prefill settings in a terminal, `kt run` proposes a threshold of 500 and a
    # 32768-token chunk (kt-kernel/python/cli/utils/run_interactive.py); stated flags win
    args, _ = b.estimate_args(row, "ktransformers", hw)
    assert args[args.index("--kt-prefill-threshold") + 1] == "500" and args[args.index("--batch") + 1] == "32768"
    args, _ = b.estimate_args({**row, "flags": "--kt-gpu-prefill-token-threshold 2048 --chunked-prefill-size 8192"},
                              "ktransformers", hw)
    assert args[args.index("--kt-prefill-threshold") + 1] == "2048" and args[args.index("--batch") + 1] == "8192"
    # --kt-num-gpu-experts G: G experts of every layer on the GPU, not all experts on the CPU
    args, _ = b.estimate_args({**row, "flags": "--kt-num-gpu-experts 28"}, "ktransformers", hw)
    assert args[args.index("--kt-gpu-experts") + 1] == "28" and "--all-cpu-moe" not in args


def test_rows_pass_k_and_v_types_flash_attention_and_snc_off():
    b = _bench()
    row = {"id": "x", "model_name": "Qwen3-30B-A3B", "quant": "IQ4_XS", "offload_method": "cpu-only",
           "kv_cache_type": "K q8_0 / V f16", "flash_attn": False}
    args, _ = b.estimate_args(row, "llama.cpp", Path("/hw.json"))
    assert args[args.index("--kv-type") + 1] == "q8_0" and args[args.index("--kv-type-v") + 1] == "f16"
    assert "--no-flash-attn" in args
    args, _ = b.estimate_args({**row, "kv_cache_type": "q8_0", "flash_attn": None}, "llama.cpp", Path("/hw.json"))
    assert args[args.index("--kv-type") + 1] == "q8_0" and "--kv-type-v" not in args and "--no-flash-attn" not in args
    # the BIOS's sub-NUMA clustering switched off: one node per socket, not the part's SNC default
    hw_row = {"id": "x", "cpu_model": "Intel Xeon 6980P", "cpu_sockets": 1, "gpu_model": None,
              "offload_method": "cpu-only", "ram_total_gb": 768}
    for numa, nodes in (("numactl -N 0 -m 0 (SNC disabled per discussion)", "1"), ("SNC3", "3"), (None, None)):
        args, _ = b.hardware_args({**hw_row, "numa": numa})
        assert (args[args.index("--numa-nodes") + 1] if "--numa-nodes" in args else None) == nodes, numa


def test_mixed_gpus_are_typed_once_per_kind():
    b = _bench()
    assert b._mixed_gpus("2x NVIDIA GeForce RTX 3090 24GB + NVIDIA RTX A4500 20GB") == \
        [("NVIDIA GeForce RTX 3090 24GB", 2), ("NVIDIA RTX A4500 20GB", 1)]
    assert b._mixed_gpus("2x RTX 5090, 2x RTX 4090, 1x RTX A6000") == [("RTX 5090", 2), ("RTX 4090", 2),
                                                                      ("RTX A6000", 1)]
    # one kind, commas inside a parenthesis included
    assert b._mixed_gpus("NVIDIA GeForce RTX 3070 (16 GB, as written)") == [] == b._mixed_gpus("RTX 3090")
    args, _ = b.hardware_args({"id": "x", "cpu_model": "AMD Ryzen 7 7800X3D", "gpu_model": "2x RTX 3090 + RTX A4500",
                               "gpu_count": 3, "offload_method": "ot", "ram_total_gb": 192})
    assert [args[i + 1] for i, a in enumerate(args) if a == "--gpu"] == ["RTX 3090:2", "RTX A4500"]
    assert "--gpu-count" not in args


def test_llama_cpp_python_rows_take_its_default_threads(tmp_path):
    """llama-cpp-python's Llama() runs max(cpu_count() // 2, 1) threads unless told
    (llama_cpp/llama.py); a row that names it and no thread count runs with that."""
    import json

    b = _bench()
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps({"cpu": {"n_threads": 24}}))
    row = {"id": "x", "model_name": "gpt-oss-20b", "quant": "MXFP4", "offload_method": "cpu-only",
           "software": "llama.cpp (via llama-cpp-python)"}
    args, _ = b.estimate_args(row, "llama.cpp", hw)
    assert args[args.index("--threads") + 1] == "12"
    args, _ = b.estimate_args({**row, "threads": 8}, "llama.cpp", hw)
    assert args[args.index("--threads") + 1] == "8"
    args, _ = b.estimate_args({**row, "software": "llama.cpp (llama-bench)"}, "llama.cpp", hw)
    assert "--threads" not in args
