"""tune --validate: runners, early stop, interruption, the whole loop on a small model."""
from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from gguf_fixtures import write_qwen3moe
from model_builders import toy_hw, toy_model, unit_priors
from test_validate_loop import Meter
from typer.testing import CliRunner

from moeplan.cli import app
from moeplan.errors import InputError, RunnerError
from moeplan.planner.cost.estimate import estimate
from moeplan.planner.placement import Placement
from moeplan.planner.plan import Plan, model_ref
from moeplan.planner.search import validation_trials as neighbours
from moeplan.probes.gguf_model import read_gguf_model
from moeplan.tuner.calibrate import Trial
from moeplan.tuner.runners import RunSettings, run_llama_bench
from moeplan.tuner.validate import parse_budget, run_trials

MODEL = toy_model(n_layers=8, n_experts=16, k=4, n_embd=1024, n_ff_exp=512)
PR = unit_priors(s_sync_s=100e-6, t_token_s=1e-3)


def _plan(model=MODEL, hw=None, p=None) -> Plan:
    hw = hw or toy_hw(vram_gib=4)
    p = p or Placement(cpu_moe_layers=model.moe_layer_indices[:4], n_threads=8)
    return Plan(model=model_ref(model), hardware_name=hw.name, hardware_digest="x", placement=p,
                estimate=estimate(model, p, hw, PR))


def test_parse_budget():
    assert parse_budget("5m") == 300 and parse_budget("90s") == 90 and parse_budget("2") == 2
    with pytest.raises(InputError, match="cannot read --budget"):
        parse_budget("soon")


def test_neighbours_are_informative_and_fit():
    hw = toy_hw(vram_gib=4, nodes=2, cores=16)
    p = Placement(cpu_moe_layers=MODEL.moe_layer_indices[:4], n_threads=8, numa="none")
    labels = [lab for lab, _ in neighbours(MODEL, p, hw, PR, 4 * 1024**3, 64 * 1024**3)]
    assert labels[0] == "plan"
    assert "+2 CPU layers" in labels and "ubatch 2048" in labels and "4 threads" in labels
    assert any(lab.startswith("bind node") for lab in labels)


def _cands(hw):
    """The trial placements the planner gives the tuner (planner/search.py validation_trials)."""
    vram = sum(g.vram_bytes for g in hw.gpus)
    return neighbours(MODEL, _plan(hw=hw).placement, hw, PR, vram, hw.ram_bytes)


def _fake_trial(ok_err: float):
    """A runner whose measurement is the prediction times (1 + ok_err)."""
    calls = []

    def run_one(trial_plan: Plan, label: str, timeout_s: float) -> Trial:
        calls.append(label)
        e = trial_plan.estimate
        return Trial(label=label, placement=trial_plan.placement, runner="fake",
                     measured_decode_tok_s=e.decode_tok_s / (1 + ok_err),
                     measured_prefill_tok_s=e.prefill_tok_s / (1 + ok_err),
                     predicted_decode_tok_s=e.decode_tok_s, predicted_prefill_tok_s=e.prefill_tok_s)
    return run_one, calls


def test_early_stop_when_predictions_hold(tmp_path):
    hw = toy_hw(vram_gib=4)
    run_one, calls = _fake_trial(0.03)
    rep = run_trials(_plan(hw=hw), MODEL, hw, PR, runner="fake", candidates=_cands(hw), trials=6, budget_s=60,
                     settings=RunSettings(), results_path=tmp_path / "r.json",
                     predict=lambda p: estimate(MODEL, p, hw, PR), run_one=run_one,
                     load_meter=Meter(lambda i: 0.0))  # an idle machine: these tests are not about load
    # a warm-up, then three trials of two runs each
    assert len(calls) == 1 + 3 * 2 and len(rep.trials) == 3 and "held" in rep.stopped
    saved = json.loads((tmp_path / "r.json").read_text())["validations"][-1]
    assert len(saved["trials"]) == 3 and saved["stopped"] == rep.stopped


def test_no_early_stop_when_they_do_not(tmp_path):
    hw = toy_hw(vram_gib=4)
    run_one, calls = _fake_trial(0.4)
    rep = run_trials(_plan(hw=hw), MODEL, hw, PR, runner="fake", candidates=_cands(hw), trials=4, budget_s=60,
                     settings=RunSettings(), results_path=tmp_path / "r.json",
                     predict=lambda p: estimate(MODEL, p, hw, PR), run_one=run_one,
                     load_meter=Meter(lambda i: 0.0))  # an idle machine: these tests are not about load
    assert len(calls) == 1 + 4 * 2 and len(rep.trials) == 4 and rep.stopped == "all planned runs done"


def test_interruption_keeps_the_runs_so_far(tmp_path):
    hw = toy_hw(vram_gib=4)
    inner, calls = _fake_trial(0.4)

    def run_one(trial_plan, label, timeout_s):
        if len(calls) == 5:  # the warm-up and two trials of two runs
            raise KeyboardInterrupt
        return inner(trial_plan, label, timeout_s)

    rep = run_trials(_plan(hw=hw), MODEL, hw, PR, runner="fake", candidates=_cands(hw), trials=6, budget_s=60,
                     settings=RunSettings(), results_path=tmp_path / "r.json",
                     predict=lambda p: estimate(MODEL, p, hw, PR), run_one=run_one,
                     load_meter=Meter(lambda i: 0.0))  # an idle machine: these tests are not about load
    assert len(rep.trials) == 2 and "interrupted" in rep.stopped
    assert len(json.loads((tmp_path / "r.json").read_text())["validations"][-1]["trials"]) == 2


# ---- llama-bench runner against a fake binary that prints llama-bench's documented JSON ----

BENCH_JSON = """[
  {"build_commit": "0c1e570", "model_type": "qwen3moe 30B.A3B Q8_0", "n_prompt": 512, "n_gen": 0,
   "n_threads": 8, "n_ubatch": 512, "tensor_buft_overrides": %s, "avg_ns": 1000000, "avg_ts": 512.5,
   "stddev_ts": 3.1, "samples_ts": [510.0, 515.0]},
  {"build_commit": "0c1e570", "model_type": "qwen3moe 30B.A3B Q8_0", "n_prompt": 0, "n_gen": 32,
   "n_threads": 8, "n_ubatch": 512, "tensor_buft_overrides": %s, "avg_ns": 2000000, "avg_ts": 21.25,
   "stddev_ts": 0.2, "samples_ts": [21.0, 21.5]}
]"""


HELP = Path(__file__).parent / "data" / "help" / "llama.cpp-0c1e570"


def _fake_bench(folder: Path, body: str) -> Path:
    """llama-bench/-server/-completion stand-ins: --help prints the real build's recorded help,
    any other call of llama-bench runs `body`."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("llama-bench", "llama-server", "llama-completion"):
        exe = folder / name
        help_file = next(HELP.glob(f"{name}*"))
        run = body if name == "llama-bench" else "exit 0\n"
        exe.write_text(f'#!/usr/bin/env bash\nif [ "$1" = "--help" ]; then cat {help_file}; exit 0; fi\n'
                       f'if [ "$1" = "--version" ]; then echo "version: 1 (0c1e570)"; exit 0; fi\n{run}')
        exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return folder


def _gguf_plan(tmp_path):
    path, _ = write_qwen3moe(tmp_path / "m.gguf")
    model = read_gguf_model(path)
    hw = toy_hw(vram_gib=4)
    p = Placement(cpu_moe_layers=(0, 1), n_threads=2)
    return model, Plan(model=model_ref(model), hardware_name="toy", hardware_digest="x", placement=p,
                       estimate=estimate(model, p, hw, PR)), str(path)


def test_llama_bench_json_is_parsed_and_overrides_checked(tmp_path):
    from moeplan.launch import emit_launch

    model, plan, path = _gguf_plan(tmp_path)
    expected = emit_launch(plan, model, "llama.cpp", model_path=path).bench_overrides
    doc = BENCH_JSON % (json.dumps(expected), json.dumps(expected))
    folder = _fake_bench(tmp_path / "bin", f"cat <<'EOF'\n{doc}\nEOF\n")
    t = run_llama_bench(plan, model, "plan", RunSettings(binary=str(folder), model_path=path, timeout_s=30))
    assert t.ok, t.error
    assert t.measured_prefill_tok_s == 512.5 and t.measured_decode_tok_s == 21.25 and t.n_prompt == 512
    # the same output with the overrides dropped (llama-bench's silent failure) is an error
    dropped = BENCH_JSON % (json.dumps("none"), json.dumps("none"))
    folder = _fake_bench(tmp_path / "bin2", f"cat <<'EOF'\n{dropped}\nEOF\n")
    t = run_llama_bench(plan, model, "plan", RunSettings(binary=str(folder), model_path=path, timeout_s=30))
    assert not t.ok and "tensor_buft_overrides" in t.error


def test_llama_bench_crash_timeout_and_missing(tmp_path):
    model, plan, path = _gguf_plan(tmp_path)
    crash = _fake_bench(tmp_path / "crash", "echo 'GGML_ASSERT failed' >&2; exit 134\n")
    t = run_llama_bench(plan, model, "plan", RunSettings(binary=str(crash), model_path=path, timeout_s=30))
    assert not t.ok and "134" in t.error and "GGML_ASSERT" in t.error
    slow = _fake_bench(tmp_path / "slow", "sleep 10\n")
    t = run_llama_bench(plan, model, "plan", RunSettings(binary=str(slow), model_path=path, timeout_s=0.5))
    assert not t.ok and "timed out" in t.error
    with pytest.raises(RunnerError):
        run_llama_bench(plan, model, "plan", RunSettings(binary=None, model_path=str(tmp_path / "none.gguf")))


def test_validate_loop_with_the_executor_end_to_end(tmp_path, monkeypatch):
    """tune --validate on a tiny GGUF: real executor subprocesses, calibration, re-plan."""
    pytest.importorskip("torch")
    monkeypatch.setenv("MOEPLAN_CACHE_DIR", str(tmp_path / "cache"))
    path, _ = write_qwen3moe(tmp_path / "tiny.gguf", n_layer=4, n_embd=256, n_head=4, n_head_kv=2, head_dim=64,
                             n_expert=8, n_used=2, n_ff_exp=128, n_vocab=512)
    hw_path = tmp_path / "hw.json"
    hw = replace(toy_hw(vram_gib=2.0, ram_gib=16, cores=2), name="ci machine")
    hw_path.write_text(json.dumps(hw.to_dict()))
    out = CliRunner().invoke(app, ["tune", str(path), "--hw", str(hw_path), "--validate", "--trials", "2",
                                   "--budget", "4m", "--json"])
    assert out.exit_code == 0, out.output
    plan = json.loads(out.stdout)["plan"]
    results = list((tmp_path / "cache" / "validate").glob("results-*.json"))
    assert results, "the runs are kept in the cache"
    doc = json.loads(results[0].read_text())["validations"][-1]
    # a warm-up, then at least one trial (a loaded machine may spend the budget on fewer)
    assert len(doc["trials"]) >= 1
    ok = [t for t in doc["trials"] if not t["error"]]
    assert ok and all(t["measured_decode_tok_s"] > 0 and t["n_repeats"] >= 1 for t in ok)
    val = json.loads(out.stdout)["validation"]
    assert len(val["trials"]) == len(doc["trials"]) and isinstance(val["calibration_accepted"], bool)
    assert plan["placement"] == json.loads(out.stdout)["plan"]["placement"]
    # and calibrate reads the same results back
    out2 = CliRunner().invoke(app, ["calibrate", "--from", str(results[0]), "--hw", str(hw_path),
                                    "--out", str(tmp_path / "cal.json"), "--json"])
    assert out2.exit_code == 0, out2.output
    res = json.loads(out2.stdout)
    # kept only when it predicts held-out trials better; the profile is written only then
    assert res["calibration_accepted"] == os.path.exists(tmp_path / "cal.json")
    if res["calibration_accepted"]:
        cal = json.loads((tmp_path / "cal.json").read_text())["calibration"]
        assert cal and cal[0]["backend"] == "executor" and cal[0]["factors"]
    else:
        assert res["reason"]
