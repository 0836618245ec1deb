"""The emitted ik_llama.cpp commands, run for real on tiny MoE GGUFs with two local RPC devices.

Runs only when MOEPLAN_IK_BIN names an ik_llama.cpp build/bin with llama-server, llama-cli,
llama-bench and rpc-server (a CPU build with -DGGML_RPC=ON; how to make one: docs/launch.md,
"ik_llama.cpp"). Builds nothing but the tensor shim. The recorded runs of the same cases
(tests/data/ik_runs/) are checked on every run by tests/test_check_ik_real.py.

For a GQA model (qwen3moe-like) and an MLA model (deepseek2-like with DeepSeek's attention head
sizes, the only ones ik's conversion of mainline MLA files accepts) it emits with `--bin` (every
flag from the build's own --help) and runs the scripts on two `rpc-server` devices
(tests/ik_runs.py):
  * complete.sh: every tensor is on the device the plan puts it on (the emitted -ts and -ot),
    the plan's experts on the CPU, ik's override lines name exactly those, `check` reads the
    plan's placement back, and each device's weights and KV buffers are moeplan's accounting
    to the byte (tests/ik_runs.py check_run);
  * the MLA model runs with -mla 3: the fixture has no attn_kv_b (as GGUFs converted by
    mainline), so ik computes it at load, one extra buffer per block on the block's device,
    of the size the emitted note gives (launch/ikllama.py computed_wkv_b_bytes);
  * bench.sh with one repetition completes, its own override check passes, and every test in
    the JSON reports the plan's `override_tensor` and a positive speed.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from ik_runs import CASES, build_shim, check_run, compute_outside_bounds, have_build, run_case

from moeplan.launch import emit_launch, find_programs
from moeplan.launch.benchjson import parse_bench_json
from moeplan.launch.ikllama import BENCH_OVERRIDE_FIELD

BIN = os.environ.get("MOEPLAN_IK_BIN", "")
pytestmark = pytest.mark.skipif(
    not have_build(BIN),
    reason="set MOEPLAN_IK_BIN to an ik_llama.cpp build/bin with llama-server, llama-cli, llama-bench and rpc-server")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_emitted_ik_commands_place_the_plan(case, tmp_path):
    programs = find_programs("ik_llama.cpp", BIN)
    assert all(fs.from_help for fs in programs.flags.values()), "flags must come from the binaries' --help"
    shim = build_shim(tmp_path)
    model, plan, log, _ = run_case(case, Path(BIN), tmp_path, shim)
    script = (tmp_path / case.name / case.script).read_text()
    if case.script == "complete.sh":
        rows = check_run(case, model, log)
        assert {r[0] for r in rows} == {"RPC0", "RPC1"}
        if model.mla:
            assert "    -mla 3 \\\n" in script
            assert "mla_attn      = 3" in log and "need to compute" in log and "missing wkv_b" not in log
        else:  # ik's MLA compute buffer: see test_check_ik_real.py
            assert compute_outside_bounds(rows) == []
        return
    js = (tmp_path / case.name / "bench.json").read_text()
    records = parse_bench_json(js)
    argv = emit_launch(plan, model, "ik_llama.cpp").script("bench.sh").command.argv
    expected = argv[argv.index("-ot") + 1]
    assert records and all(rec.get(BENCH_OVERRIDE_FIELD) == expected for rec in records), records
    assert all(rec["avg_ts"] > 0 for rec in records)
