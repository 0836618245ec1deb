"""Real ik_llama.cpp output, recorded, checked on every run (CI cannot build ik_llama.cpp).

tests/data/ik_runs/<case>.log and .json: moeplan's emitted complete.sh / bench.sh run by an
ik_llama.cpp CPU build with -DGGML_RPC=ON on two local `rpc-server` devices, with the tensor
shim (tests/ik_runs.py --record; the header names the build, its commit and the command). For
each recording the tests regenerate the fixture, check it is the file that ran (digest), and
check that
  * every tensor was where the plan puts it (each device and the CPU, from the shim's lines);
  * `moeplan check` parses the log, recovers the plan's placement (the CPU experts from ik's
    override lines) and finds no difference from the plan, through the command as well;
  * each device's weights and KV buffers are moeplan's accounting to the byte, and the
    attn_kv_b ik computes for the MLA model (no buffer line names it) is the emitted note's
    figure to the byte; the compute buffer is held to the llama.cpp checks' bounds (below ik's
    by no more than ggml-alloc's fragmentation allowance, at most 15% above);
  * llama-bench's JSON carries the plan's -ot in every test, and `check` reads the CPU blocks
    back from it.
The live run of the same cases is tests/test_launch_ik_real.py.
"""
from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from ik_runs import CASES, DATA, check_run, compute_outside_bounds, write_model
from launch_plans import make_plan
from typer.testing import CliRunner

from moeplan.check.parse import parse_log
from moeplan.check.placement import recover_placement
from moeplan.cli import app
from moeplan.launch import emit_launch
from moeplan.launch.ikllama import BENCH_OVERRIDE_FIELD, IK_COMMIT

COMPLETE = [c for c in CASES if c.script == "complete.sh"]
BENCH = [c for c in CASES if c.script == "bench.sh"]


def _recorded(case, tmp_path):
    log = (DATA / f"{case.name}.log").read_text()
    head = log.split("\n", 3)
    assert head[0].startswith("# RECORDED: ik_llama.cpp") and f"commit {IK_COMMIT}" in head[0], head[0]
    rpc = " --rpc RPC0,RPC1 -dev RPC0[RPC0],RPC0[RPC1]" if case.rpc == 2 else ""
    assert head[1].startswith(f"# run: moeplan's emitted {case.script}{rpc} "), head[1]
    _, model = write_model(case.fixture, tmp_path)
    assert head[2] == f"# fixture digest {model.digest()}", "the fixture changed since the recording: re-record"
    return model, log


def test_every_case_is_recorded():
    for case in CASES:
        assert (DATA / f"{case.name}.log").is_file(), f"record {case.name} with tests/ik_runs.py --record"
    for case in BENCH:
        assert (DATA / f"{case.name}.json").is_file()


@pytest.mark.parametrize("case", COMPLETE, ids=lambda c: c.name)
def test_recorded_run_places_the_plan_and_matches_the_accounting(case, tmp_path):
    model, log = _recorded(case, tmp_path)
    rows = check_run(case, model, log)
    assert {r[0] for r in rows} == {"RPC0", "RPC1"}
    extra = [r for r in rows if r[1] == "computed wkv_b"]
    if model.mla:  # emitted -mla 3, and ik keeps it: it computes attn_kv_b from attn_k_b/attn_v_b
        argv = emit_launch(make_plan(model, case.placement), model, "ik_llama.cpp").script("complete.sh").command.argv
        assert argv[argv.index("-mla") + 1] == "3"
        assert "mla_attn      = 3" in log and "missing wkv_b" not in log
        assert log.count("Computed blk.") == len(model.layers)
        assert all(r[2] == r[3] > 0 for r in extra), extra
    else:
        assert all(r[2] == r[3] == 0 for r in extra), extra


@pytest.mark.parametrize("case", COMPLETE, ids=lambda c: c.name)
def test_recorded_compute_buffers_within_the_llama_cpp_bound(case, tmp_path):
    from moeplan.planner.memory import compute_buffer as cb

    model, log = _recorded(case, tmp_path)
    rows = check_run(case, model, log)
    assert compute_outside_bounds(rows, cb.fragmentation_allowance(model, case.placement)) == []


def test_recorded_mla_compute_buffer_is_iks_absorbed_graph(tmp_path):
    """ik's -mla 3 graph at T < 128 (compute_buffer._ik_mla_terms): wq_a's and wkv_a_mqa's
    outputs lie under Q where mainline's graph keeps the residual and q_pe. The live set is
    836,224 B per device, ik's buffer 837,632 B (1,408 B of ggml-alloc holes: the CPU experts'
    result comes back as a split input); mainline's terms predicted 819,840 B (-2.1%)."""
    from moeplan.planner.memory import compute_buffer as cb

    case = next(c for c in COMPLETE if c.fixture == "deepseek2")
    model, log = _recorded(case, tmp_path)
    rows = [r for r in check_run(case, model, log) if r[1] == "compute"]
    assert [(r[2], r[3]) for r in rows] == [(836_224, 837_632)] * 2
    p = case.placement
    shape = cb.reserve_shape(p)
    terms = cb.attention_bytes(model, p, shape)
    assert {"q_a", "kv_a"} <= set(terms) and "residual" not in terms and "q_pe" not in terms
    e, t = model.n_embd, shape.n_tokens
    assert terms["q_a"] == 4 * 64 * t and terms["kv_a"] == 4 * (512 + 64) * t and terms["attn_norm"] == 4 * e * t
    # the same plan on mainline llama.cpp keeps mainline's graph
    main = cb.attention_bytes(model, replace(p, backend="llama.cpp"), shape)
    assert "residual" in main and "q_pe" in main and "q_a" not in main


@pytest.mark.parametrize("case", COMPLETE, ids=lambda c: c.name)
def test_moeplan_check_reads_the_recorded_run_as_the_plan(case, tmp_path):
    model, log = _recorded(case, tmp_path)
    plan = make_plan(model, case.placement)
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_dict()))
    (tmp_path / "run.log").write_text(log)
    r = CliRunner().invoke(app, ["check", str(tmp_path / "run.log"), "--plan", str(tmp_path / "plan.json"),
                                 "--hw", "desktop-4090-ddr5", "--json"])
    assert r.exit_code == 0, r.output
    c = json.loads(r.output)["logs"][0]["check"]
    assert c["same_as_plan"] is True, c["differences"]


@pytest.mark.parametrize("case", BENCH, ids=lambda c: c.name)
def test_recorded_bench_reports_the_plans_overrides(case, tmp_path):
    model, log = _recorded(case, tmp_path)
    js = (DATA / f"{case.name}.json").read_text()
    launch = emit_launch(make_plan(model, case.placement), model, "ik_llama.cpp")
    argv = launch.script("bench.sh").command.argv
    expected = argv[argv.index("-ot") + 1]
    run = parse_log(js, case.name)
    assert run.bench and all(rec[BENCH_OVERRIDE_FIELD] == expected for rec in run.bench), run.bench
    assert all(rec["avg_ts"] > 0 for rec in run.bench)
    assert {s.metric for s in run.speeds} == {"prefill", "decode"}
    rec = recover_placement(run, model)
    assert rec.placement.cpu_moe_layers == case.placement.cpu_moe_layers
    assert rec.evidence["cpu_moe_layers"] == "llama-bench"


# ---- ik_llama.cpp's own behaviours, as docs/launch.md states them (recorded probes) -------------

def _probe(name: str) -> tuple[str, str]:
    text = (DATA / f"probe-{name}.log").read_text()
    head, _, body = text.partition("\n# run: ")
    assert f"commit {IK_COMMIT}" in head
    return body.split("\n", 1)[0], body


def _cpu_blocks(log: str) -> set[int]:
    return {int(b) for b in re.findall(r"Tensor blk\.(\d+)\.ffn_\w+_exps\.weight \(size = [^)]*\) buffer type "
                                      r"overridden to CPU", log)}


def _layer_devices(log: str) -> dict[int, int]:
    return {int(a): int(b) for a, b in re.findall(r"Setting default device in layer +(\d+) to (\d+)", log)}


def test_ncmoe_takes_the_last_blocks_with_one_device():
    cmd, log = _probe("ncmoe-1dev")
    assert "-ncmoe 2" in cmd and "exit code 0" in cmd
    assert _cpu_blocks(log) == {4, 5}  # of blocks 0-5


def test_ncmoe_takes_each_devices_last_blocks_with_several():
    cmd, log = _probe("ncmoe-2dev")
    assert "-ncmoe 2" in cmd and "-dev RPC0[RPC0],RPC0[RPC1]" in cmd
    devs = _layer_devices(log)
    last = {d: max(i for i, x in devs.items() if x == d and i < 6) for d in (0, 1)}
    assert _cpu_blocks(log) == set(last.values()) == {2, 5}


def test_llama_bench_n_cpu_moe_takes_the_first_blocks():
    cmd, log = _probe("bench-ncmoe")
    assert "--n-cpu-moe 2" in cmd
    run = parse_log(log[log.index("["):], "bench")
    assert run.bench and {r[BENCH_OVERRIDE_FIELD] for r in run.bench} == {
        r"blk\.0\.(ffn_(up|down|gate)_exps\.weight)=CPU,blk\.1\.(ffn_(up|down|gate)_exps\.weight)=CPU"}


@pytest.mark.parametrize("name, message", [("fit-ot", "Manual tensor overrides cannot be used with --fit"),
                                           ("fit-ncmoe", "-ncmoe | --n-cpu-moe cannot be used with --fit")])
def test_fit_refuses_overrides_and_ncmoe(name, message):
    cmd, log = _probe(name)
    assert "--fit" in cmd and "exit code 1" in cmd
    assert f"error loading model: {message}" in log


def test_split_mode_graph_aborts_without_cuda():
    cmd, log = _probe("sm-graph")
    assert "-sm graph" in cmd and "exit code -6" in cmd
    assert "Setting the split mode has no effect" in log and "GGML_ASSERT(nhave > 1) failed" in log


def test_defaults_of_mla_amb_fmoe():
    cmd, log = _probe("defaults-mla")
    assert " -mla" not in cmd and "-amb" not in cmd and "fmoe" not in cmd
    assert re.search(r"mla_attn += 3\n", log) and re.search(r"attn_max_b += 256\n", log)
    assert re.search(r"fused_moe += 1\n", log)
    _, bench = _probe("bench-ncmoe")  # llama-bench's own -amb default is 0
    assert '"attn_max_batch": 0,' in bench and '"mla_attn": 3,' in bench


def test_rpc_servers_without_dev_are_listed_twice():
    cmd, log = _probe("rpc-no-dev")
    assert " -dev " not in cmd and "-ts 1,1" in cmd
    assert set(_layer_devices(log).values()) == {0}  # -ts 1,1 does not split the blocks over the two
    assert "exit code -6" in cmd
    cmd, log = _probe("bench-rpc-exit")
    assert '"avg_ts"' in log and "corrupted size vs. prev_size" in log and "exit code -6" in cmd


def test_ts_is_divided_by_bytes_not_blocks():
    """A plain -ts 1,5 (llama.cpp: blocks 0-1 on the first device) leaves ik's first device
    empty; moeplan's emitted -ts for the same plan puts blocks 0-1 there (case ts15)."""
    from moeplan.planner.memory.devices import assign_blocks

    cmd, log = _probe("ts-block-counts")
    assert "-ts 1,5" in cmd and "-dev RPC0[RPC0],RPC0[RPC1]" in cmd
    assert assign_blocks(6, (1.0, 5.0))[0] == (0, 0, 1, 1, 1, 1)
    assert set(_layer_devices(log).values()) == {1}
    rec = (DATA / "ik-qwen3moe-rpc2-ts15-complete.log").read_text()
    assert _layer_devices(rec) == {0: 0, 1: 0, 2: 1, 3: 1, 4: 1, 5: 1, 6: 1}


@pytest.mark.parametrize("case", COMPLETE, ids=lambda c: c.name)
def test_ik_layer_sizes_are_the_ones_ik_prints(case, tmp_path):
    """The sizes moeplan's ik -ts is computed from (launch/ikllama.py ik_layer_sizes) against
    ik's own "Layer N: weights, kv, total  compute MiB" table (printed with two decimals)."""
    from moeplan.launch.ikllama import ik_layer_sizes

    model, log = _recorded(case, tmp_path)
    table = re.findall(r"^Layer +(\d+): +[\d.]+, +[\d.]+, +([\d.]+)(?: +([\d.]+)  MiB| MiB \(output layer\))$", log,
                       re.M)
    sizes, out, reserve = ik_layer_sizes(model, case.placement)
    assert len(table) == len(sizes) + 1
    mib = 1024 * 1024
    for (i, total, comp), want in zip(table, [*sizes, out]):
        assert abs(float(total) - want / mib) <= 0.0051, (i, total, want / mib)
        if comp:
            assert float(comp) <= reserve / mib + 0.0051
    assert max(float(c) for _, _, c in table if c) == pytest.approx(reserve / mib, abs=0.0051)


def test_planner_counts_the_attn_kv_b_ik_computes(tmp_path):
    """An ik plan's memory counts the attn_kv_b ik computes at load for a mainline MLA GGUF
    (the runtime record's computes_mla_kv_b): per device exactly the recorded allocations no
    buffer line names, in the breakdown as weights_computed; a llama.cpp plan has none."""
    from moeplan.planner.memory.accounting import estimate_memory
    from moeplan.planner.memory.devices import device_memory, parse_tensor_split

    case = next(c for c in COMPLETE if c.fixture == "deepseek2")
    model, log = _recorded(case, tmp_path)
    p = case.placement
    measured = {r[0]: r[3] for r in check_run(case, model, log) if r[1] == "computed wkv_b"}
    assert measured == {"RPC0": 1_671_168, "RPC1": 1_114_112}
    ts = parse_tensor_split("1,1", 2)
    ik = device_memory(model, p, ts, 0, 0)
    main = device_memory(model, replace(p, backend="llama.cpp"), ts, 0, 0)
    assert {f"RPC{d.index}": d.weights_dense_bytes - m.weights_dense_bytes for d, m in zip(ik, main)} == measured
    mem = estimate_memory(model, p)
    assert mem.get("weights_computed") == sum(measured.values())
    assert estimate_memory(model, replace(p, backend="llama.cpp")).get("weights_computed") == 0
    one = replace(p, n_gpus=1, options=replace(p.options, tensor_split=""))
    assert estimate_memory(model, one).get("weights_computed") == sum(measured.values())


def test_compute_terms_cache_tells_the_backends_apart(tmp_path):
    """The per-model cache of compute_buffer_terms keys on the backend: ik's MLA graph and
    mainline's give different terms for the same placement fields."""
    from moeplan.planner.memory.accounting import MemoryConstants, compute_buffer_terms

    case = next(c for c in COMPLETE if c.fixture == "deepseek2")
    model, _ = _recorded(case, tmp_path)
    p = replace(case.placement, n_gpus=1, options=replace(case.placement.options, tensor_split=""))
    ik = compute_buffer_terms(model, p, True, MemoryConstants())
    main = compute_buffer_terms(model, replace(p, backend="llama.cpp"), True, MemoryConstants())
    assert "q_a" in ik and "q_a" not in main
