"""`moeplan check`: parsing of every log format in tests/data/logs, the placement a log shows,
predicted against observed, the plan-vs-log differences, and calibration from logs."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cuda_logs import GpuRun, GpuTruth, render
from launch_plans import make_plan
from typer.testing import CliRunner

from moeplan.check.parse import parse_log
from moeplan.check.placement import recover_placement
from moeplan.cli import app
from moeplan.planner.memory.accounting import MemoryConstants, estimate_memory
from moeplan.planner.memory.constants import memory_calibration_name, memory_constants
from moeplan.planner.placement import Placement
from moeplan.planner.serde import from_jsonable
from moeplan.probes.models import resolve_model
from moeplan.tuner.logcal import calibrate_memory, memory_observations

LOGS = Path(__file__).parent / "data" / "logs"
MIB = 1024 * 1024
HW = "desktop-4090-ddr5"
QWEN = ["--model", "qwen3-30b-a3b", "--quant", "Q4_K_M"]


@pytest.fixture(scope="module")
def qwen():
    return resolve_model("qwen3-30b-a3b", quant="Q4_K_M")


def _text(name: str) -> str:
    return (LOGS / name).read_bytes().decode()


def _check_json(*args: str) -> dict:
    r = CliRunner().invoke(app, ["check", *args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


# ---- parsing --------------------------------------------------------------------------------

def test_cuda_format_log_parses_every_figure():
    run = parse_log(_text("cuda-llama-server-qwen3moe.log"), "cuda")
    assert run.tool == "llama.cpp" and run.program == "llama-server"
    assert run.args[0] == "llama-server" and "-ot" in run.args
    assert [(d.name, d.free_mib) for d in run.devices] == [("CUDA0", 23668)]
    assert run.model_path == "/models/Qwen3-30B-A3B-Q4_K_M.gguf" and run.model_meta["arch"] == "qwen3moe"
    assert len(run.overrides) == 36 and {o.buffer_type for o in run.overrides} == {"CPU"}
    assert run.offloaded_layers == (49, 49) and len(run.layer_devices) == 49
    kinds = sorted((b.kind, b.buffer_type) for b in run.buffers)
    assert kinds == [("KV", "CUDA0"), ("compute", "CUDA0"), ("compute", "CUDA_Host"), ("model", "CPU_Mapped"),
                     ("model", "CUDA0"), ("output", "CUDA_Host")]
    assert run.context["n_ctx"] == "32768" and run.context["type_k"] == "q8_0"
    assert run.threads == {"n_threads": 16, "n_threads_batch": 16, "n_cpus": 32}
    assert run.cpu_features["REPACK"] == "1"
    gpu, host = run.memory
    # 412 + 0.25 x 512 + the 12 MiB pool moeplan derives for this CUDA run (tests/cuda_logs.py)
    assert (gpu.name, gpu.description, gpu.total_mib, gpu.unaccounted_mib) == ("CUDA0", "RTX 4090", 24080, 552)
    assert gpu.self_mib == gpu.model_mib + gpu.context_mib + gpu.compute_mib or gpu.self_mib - (
        gpu.model_mib + gpu.context_mib + gpu.compute_mib) in (1, 2)  # each column is floored to MiB
    assert host.host and host.total_mib is None and host.model_mib == 4450
    assert [(s.metric, s.tok_s, s.n_tokens) for s in run.speeds] == [("prefill", 612.4, 1843), ("decode", 38.7, 256)]
    assert run.unread == ()


def test_crlf_log_without_verbose_lines():
    text = _text("cuda-llama-server-qwen3moe-quiet.log")
    assert "\r\n" in text
    run = parse_log(text, "quiet")
    assert run.program == "llama-server" and not run.args and not run.overrides and run.unread == ()
    assert run.context["n_ubatch"] == "1024"
    assert all(not b.buffer_type.endswith("\r") for b in run.buffers)


def test_ik_llama_log():
    run = parse_log(_text("ik-llama-server-deepseek.log"), "ik")
    assert run.tool == "ik_llama.cpp"
    assert [o.tensor for o in run.overrides][:2] == ["blk.3.ffn_gate_exps.weight", "blk.3.ffn_down_exps.weight"]
    assert len(run.overrides) == 6
    assert sorted(b.mib for b in run.buffers if b.kind == "model") == [938.98, 16706.99, 358335.85]
    assert run.context["type_k"] == "q8_0" and run.context["n_ctx"] == "32768"
    assert run.buffer_total("compute", host=False) == round(3588.00 * MIB)
    # the 'sample time' line (inf tokens per second) is no speed figure
    assert [(s.metric, s.tok_s) for s in run.speeds] == [("prefill", 328.91), ("decode", 10.08)]
    assert len(run.unread) == 1 and run.unread[0][1].endswith("compute buffer size = ")


def test_ik_override_line_of_current_ik():
    # ik_llama.cpp 8337e4cd3 src/llama-load-tensors.cpp:466 prints the size and spells "overridden"
    text = ("Tensor blk.3.ffn_up_exps.weight (size = 1512.00 MiB) buffer type overridden to CPU\n"
            "Tensor blk.3.ffn_down_exps.weight buffer type overriden to CPU\n")
    run = parse_log(text, "ik-current")
    assert [(o.tensor, o.buffer_type) for o in run.overrides] == [("blk.3.ffn_up_exps.weight", "CPU"),
                                                           ("blk.3.ffn_down_exps.weight", "CPU")]
    assert run.tool == "ik_llama.cpp"


def test_ktransformers_output():
    run = parse_log(_text("ktransformers-local-chat.log"), "kt")
    assert run.tool == "ktransformers"
    assert [(s.metric, s.tok_s, s.n_tokens) for s in run.speeds] == [("prefill", 22.739, 27), ("decode", 14.404, 19)]


def test_sglang_output():
    run = parse_log(_text("sglang-server.log"), "sgl")
    assert run.tool == "sglang"
    got = [(s.metric, s.tok_s, s.n_parallel) for s in run.speeds]
    assert got == [("prefill", 1843.22, 1), ("decode", 61.37, 1), ("decode", 203.1, 4), ("prefill", 4966.9, 1),
                   ("decode", 60.57, 1)]


MARKDOWN = """\
| model                          |       size |     params | backend    | threads | n_ubatch | fa | ot                   |            test |                  t/s | extra |
| ------------------------------ | ---------: | ---------: | ---------- | ------: | -------: | -: | -------------------- | --------------: | -------------------: | ----: |
| qwen3moe 30B.A3B Q4_K - Medium |  17.28 GiB |    30.53 B | CUDA       |      16 |     2048 |  1 | exps=CPU             |          pp2048 |      1201.04 ± 12.10 |     x |
| qwen3moe 30B.A3B Q4_K - Medium |  17.28 GiB |    30.53 B | CUDA       |      16 |     2048 |  1 | exps=CPU             |   tg128 @ d4096 |         41.33 ± 0.21 |     x |
| qwen3moe 30B.A3B Q4_K - Medium |  17.28 GiB |    30.53 B | CUDA       |      16 |     2048 |  1 | exps=CPU             |   tg128 |
\r
build: 0c1e570 (8123)
"""


def test_llama_bench_markdown_with_extra_column_and_a_cut_row():
    run = parse_log(MARKDOWN, "md")
    assert run.tool == "llama-bench"
    assert [(s.metric, s.tok_s, s.n_tokens, s.depth, s.stddev_tok_s) for s in run.speeds] == [
        ("prefill", 1201.04, 2048, 0, 12.1), ("decode", 41.33, 128, 4096, 0.21)]
    assert run.bench[0]["n_threads"] == "16" and run.bench[0]["extra"] == "x"
    assert [n for n, _ in run.unread] == [5]


def test_llama_bench_json_and_jsonl():
    rec = {"model_filename": "m.gguf", "n_threads": 2, "n_batch": 128, "n_ubatch": 64, "type_k": "f16",
           "type_v": "f16", "flash_attn": True, "n_gpu_layers": 99, "tensor_buft_overrides": "none",
           "n_prompt": 64, "n_gen": 0, "n_depth": 0, "avg_ts": 512.5, "stddev_ts": 3.0}
    tg = dict(rec, n_prompt=0, n_gen=16, avg_ts=40.25)
    for text in ("warning: something\n" + json.dumps([rec, tg], indent=2), json.dumps(rec) + "\n" + json.dumps(tg)):
        run = parse_log(text, "b")
        assert run.tool == "llama-bench" and len(run.bench) == 2
        assert [(s.metric, s.tok_s) for s in run.speeds] == [("prefill", 512.5), ("decode", 40.25)]


def test_unknown_input_is_a_one_line_error(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("nothing to see\n")
    r = CliRunner().invoke(app, ["check", str(f), "--hw", HW, *QWEN])
    assert r.exit_code == 2 and "no llama.cpp" in r.output
    r = CliRunner().invoke(app, ["check", str(tmp_path / "missing.log"), "--hw", HW])
    assert r.exit_code == 2 and "no such file" in r.output


# ---- placement and comparison ----------------------------------------------------------------

def test_check_recovers_the_placement_and_compares(qwen):
    doc = _check_json(str(LOGS / "cuda-llama-server-qwen3moe.log"), "--hw", HW, *QWEN)
    c = doc["logs"][0]["check"]
    assert c["placement"]["cpu_moe_layers"] == list(range(12)) and c["evidence"]["cpu_moe_layers"] == "log"
    assert (c["placement"]["n_ctx"], c["placement"]["cache_type_k"], c["placement"]["n_ubatch"]) == (32768, "q8_0", 512)
    rows = {(r["device"], r["item"]): r for r in c["rows"]}
    # the fixture's buffers are the planner's own figures printed with %8.2f: equal to 5 KiB
    for key in (("CUDA0", "weights"), ("CUDA0", "KV cache"), ("CUDA0", "compute"), ("host", "weights (mapped file span)"),
                ("host", "compute")):
        assert abs(rows[key]["predicted"] - rows[key]["observed"]) <= 6 * 1024, key
    un = rows[("CUDA0", "context + pool (unaccounted)")]
    # 412 + 0.25 * 512 + the pool a CUDA build grows (memory/cuda_runtime.py, the fixture adds the
    # pool moeplan derives) against the context prior + that pool
    p = from_jsonable(Placement, c["placement"])
    pool = estimate_memory(qwen, p, MemoryConstants(gpu_build="cuda")).get("cuda_pool")
    assert pool > 0 and pool % (2 * MIB) == 0
    assert un["observed"] == 540 * MIB + pool and un["predicted"] == 640 * MIB + pool
    speeds = [r for r in c["rows"] if r["section"] == "speed"]
    assert [r["observed"] for r in speeds] == [612.4, 38.7] and all(r["predicted"] > 0 for r in speeds)
    assert doc["logs"][0]["parsed"]["tool"] == "llama.cpp"


def test_buffer_sizes_say_how_many_layers_when_the_overrides_are_not_logged():
    doc = _check_json(str(LOGS / "cuda-llama-server-qwen3moe-quiet.log"), "--hw", HW, *QWEN)
    c = doc["logs"][0]["check"]
    assert c["placement"]["cpu_moe_layers"] == list(range(12))
    assert c["evidence"]["cpu_moe_layers"] == "buffer sizes"
    assert any("which ones is not logged" in n for n in c["notes"])


def test_check_says_when_the_log_is_not_the_plans_run(qwen, tmp_path):
    plan = make_plan(qwen, Placement(cpu_moe_layers=tuple(range(10)), n_ctx=8192, cache_type_k="q8_0",
                                     cache_type_v="q8_0", n_ubatch=512, n_threads=16), path="qwen3-30b-a3b")
    pf = tmp_path / "plan.json"
    pf.write_text(plan.to_json())
    doc = _check_json(str(LOGS / "cuda-llama-server-qwen3moe.log"), "--plan", str(pf), "--hw", HW)
    c = doc["logs"][0]["check"]
    assert c["same_as_plan"] is False
    diffs = {d["field"]: d for d in c["differences"]}
    assert set(diffs) == {"cpu_moe_layers", "n_ctx"}
    assert diffs["n_ctx"]["plan"] == "8192" and diffs["n_ctx"]["log"] == "32768"
    assert "kv_cache +" in diffs["n_ctx"]["effect"] and "VRAM +" in diffs["n_ctx"]["effect"]
    assert diffs["cpu_moe_layers"]["log"] == "0-11" and "VRAM -" in diffs["cpu_moe_layers"]["effect"]
    # the same log against its own plan: no differences
    same = make_plan(qwen, Placement(cpu_moe_layers=tuple(range(12)), n_ctx=32768, cache_type_k="q8_0",
                                     cache_type_v="q8_0", n_ubatch=512, n_batch=2048, n_threads=16),
                     path="qwen3-30b-a3b")
    pf.write_text(same.to_json())
    doc = _check_json(str(LOGS / "cuda-llama-server-qwen3moe.log"), "--plan", str(pf), "--hw", HW)
    assert doc["logs"][0]["check"]["same_as_plan"] is True


def test_table_output(qwen):
    r = CliRunner().invoke(app, ["check", str(LOGS / "cuda-llama-server-qwen3moe.log"), "--hw", HW, *QWEN],
                           env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "predicted (at the log's placement) against observed" in r.output and "context + pool" in r.output


# ---- calibration from logs -------------------------------------------------------------------

def _gpu_logs(qwen, truth: GpuTruth, ubatches=(256, 512, 1024, 2048)) -> list:
    out = []
    for ub in ubatches:
        p = Placement(cpu_moe_layers=tuple(range(12)), n_ctx=16384, cache_type_k="q8_0", cache_type_v="q8_0",
                      n_ubatch=ub, n_batch=max(2048, ub), n_threads=8, n_outputs_max=1)
        out.append(parse_log(render(GpuRun(qwen, p, truth)), f"ub{ub}"))
    return out


def test_calibration_from_logs_recovers_known_constants(qwen):
    truth = GpuTruth(context_mib=412.0, pool_mib_per_ubatch=0.25, compute_extra_mib=37.0)
    obs = []
    for run in _gpu_logs(qwen, truth):
        o, _ = memory_observations(run, qwen, recover_placement(run, qwen).placement)
        obs += o
    assert len(obs) == 8
    cal, guard = calibrate_memory(obs, "llama.cpp")
    assert guard.accepted and guard.loo_error_after < guard.loo_error_before / 4 and len(guard.groups) == 4
    f = cal.factors
    assert f["cuda_context_bytes"] / MIB == pytest.approx(412.0, rel=0.05)
    assert f["cuda_pool_bytes_per_ubatch:q8_0"] / MIB == pytest.approx(0.25, rel=0.1)
    assert f["compute_extra_bytes"] / MIB == pytest.approx(37.0, abs=0.05)
    # the planner then uses them
    hw = __import__("moeplan.probes.hwprofile", fromlist=["load_hardware"]).load_hardware(HW)
    hw = hw.with_(calibration=hw.calibration + (cal,))
    c = memory_constants(hw, "llama.cpp")
    assert c.cuda_context_bytes == round(f["cuda_context_bytes"]) and c.pool_per_ubatch("q8_0") > 0
    assert cal.backend == memory_calibration_name("llama.cpp")


def test_calibration_matching_the_priors_is_refused(qwen):
    # a GPU that shows exactly the priors: nothing to learn, the guard keeps the priors
    truth = GpuTruth(context_mib=640.0, pool_mib_per_ubatch=0.0, compute_extra_mib=0.0)
    obs = []
    for run in _gpu_logs(qwen, truth):
        o, _ = memory_observations(run, qwen, recover_placement(run, qwen).placement)
        obs += o
    cal, guard = calibrate_memory(obs, "llama.cpp")
    assert cal is None and not guard.accepted and "priors stay" in guard.reason


def test_calibrate_from_logs_cli_writes_the_profile(qwen, tmp_path):
    truth = GpuTruth(context_mib=300.0, pool_mib_per_ubatch=0.125, compute_extra_mib=20.0)
    files = []
    for run_ub in (256, 512, 1024, 2048):
        p = Placement(cpu_moe_layers=tuple(range(12)), n_ctx=16384, cache_type_k="q8_0", cache_type_v="q8_0",
                      n_ubatch=run_ub, n_batch=max(2048, run_ub), n_threads=8, n_outputs_max=1)
        f = tmp_path / f"ub{run_ub}.log"
        f.write_text(render(GpuRun(qwen, p, truth, prompt_tokens=2048, prompt_tok_s=700.0 + run_ub / 8,
                                   gen_tokens=128, gen_tok_s=40.0)))
        files.append(str(f))
    hw = tmp_path / "hw.json"
    hw.write_text((Path(__file__).parents[1] / "moeplan/profiles/hardware/desktop-4090-ddr5.json").read_text())
    r = CliRunner().invoke(app, ["calibrate", "--from", *files, "--hw", str(hw), *QWEN, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["memory"]["guard"]["accepted"] is True and doc["profile_path"] == str(hw)
    saved = json.loads(hw.read_text())
    names = [c["backend"] for c in saved["calibration"]]
    assert "llama.cpp memory" in names
    # check with the calibrated profile predicts the unaccounted memory it saw
    doc = _check_json(files[1], "--hw", str(hw), *QWEN)
    un = next(r for r in doc["logs"][0]["check"]["rows"] if r["item"].startswith("context"))
    assert abs(un["predicted"] - un["observed"]) < 16 * MIB
    assert math.isfinite(doc["logs"][0]["check"]["rows"][0]["error"])
