"""Issue 32 item 6: validation a user can read. llama-bench trials that separate the factors run
in one llama-bench process with comma lists; Ctrl-C during `tune --validate` exits 130; the
trial figures name their runtime; what was learned comes with what to do next; progress is
printed as plain lines without a terminal. Item 28.4: the tuner gets its trial placements and
never searches."""
from __future__ import annotations

import ast
import json
import stat
import sys
from pathlib import Path

from test_tuner import HELP, PR, _gguf_plan
from typer.testing import CliRunner

from moeplan.cli import app
from moeplan.commands.validation import trial_placements
from moeplan.tuner.runners import RunSettings, sweep_argv
from moeplan.tuner.validate import RunnerView, ValidationReport, run_bench_sweep, sweep_points

FAKE = r'''
import json, sys
args = sys.argv[1:]
open(sys.argv[0] + ".calls", "a").write(json.dumps(args) + "\n")
def vals(flag):
    out = []
    for i, a in enumerate(args):
        if a == flag:
            out += args[i + 1].split(",") if flag != "-ot" else [args[i + 1]]
    return out
recs = []
for ot in vals("-ot") or ["none"]:
    for t in vals("-t"):
        for p in vals("-p"):
            recs.append({"n_prompt": int(p), "n_gen": 0, "n_threads": int(t), "tensor_buft_overrides": ot,
                         "avg_ts": 100.0 * int(t), "stddev_ts": 1.0, "samples_ts": [1, 2, 3]})
        recs.append({"n_prompt": 0, "n_gen": int(vals("-n")[0]), "n_threads": int(t), "tensor_buft_overrides": ot,
                     "avg_ts": 10.0 * int(t) - len(ot) / 100, "stddev_ts": 0.1, "samples_ts": [1, 2, 3]})
print(json.dumps(recs, indent=2))
'''


def _fake_bench(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fake.py").write_text(FAKE)
    for name in ("llama-bench", "llama-server", "llama-completion"):
        exe = folder / name
        help_file = next(HELP.glob(f"{name}*"))
        run = f'exec {sys.executable} {folder / "fake.py"} "$@"\n' if name == "llama-bench" else "exit 0\n"
        exe.write_text(f'#!/usr/bin/env bash\nif [ "$1" = "--help" ]; then cat {help_file}; exit 0; fi\n'
                       f'if [ "$1" = "--version" ]; then echo "version: 1 (0c1e570)"; exit 0; fi\n{run}')
        exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return folder


def test_sweep_argv_uses_comma_lists():
    argv = ["llama-bench", "-m", "m.gguf", "-ot", "A=CPU", "-t", "8", "-p", "512", "-n", "128", "-r", "3", "-o", "json"]
    out = sweep_argv(argv, [4, 8], ["A=CPU", "B=CPU"], [16, 512], 32)
    assert out[:3] == ["llama-bench", "-m", "m.gguf"] and "-o" in out
    assert out[out.index("-t") + 1] == "4,8" and out[out.index("-p") + 1] == "16,512"
    assert [out[i + 1] for i, a in enumerate(out) if a == "-ot"] == ["A=CPU", "B=CPU"]
    assert out.count("-t") == 1 and out.count("-n") == 1


def test_one_llama_bench_process_separates_the_factors(tmp_path):
    from test_tuner import toy_hw

    model, plan, path = _gguf_plan(tmp_path)
    hw = toy_hw(vram_gib=4)
    cands = trial_placements(plan, model, hw, PR)
    points = sweep_points(plan, cands)
    labels = [lab for lab, _ in points]
    assert labels[0] == "plan" and len(points) == 4  # plan, CPU layers, threads, both
    assert len({q.n_threads for _, q in points}) == 2 and len({q.cpu_moe_layers for _, q in points}) == 2
    folder = _fake_bench(tmp_path / "bin")
    s = RunSettings(binary=str(folder), model_path=path, prompt=512, tokens=32)
    rep = run_bench_sweep(plan, model, s, cands, RunnerView(model, hw, PR), 240.0, tmp_path / "r.json")
    calls = (folder / "fake.py.calls").read_text().splitlines()
    assert len(calls) == 1  # one process for every trial
    args = json.loads(calls[0])
    assert args[args.index("-p") + 1] == "16,512" and args.count("-ot") == 2
    assert isinstance(rep, ValidationReport) and rep.n_runs == 1 and rep.runner == "llama-bench"
    # every placement at both prompt lengths; decode on the long-prompt trial
    assert len(rep.trials) == 8 and all(t.ok for t in rep.trials)
    long = [t for t in rep.trials if t.n_prompt == 512]
    assert len(long) == 4 and all(t.measured_decode_tok_s for t in long)
    assert {t.placement.n_threads for t in long} == {q.n_threads for _, q in points}


def test_tuner_never_searches():
    src = Path(__file__).resolve().parents[1] / "moeplan" / "tuner"
    for f in src.glob("*.py"):
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "moeplan.planner.search":
                raise AssertionError(f"{f.name} imports the search: {[a.name for a in node.names]}")


def test_ctrl_c_during_validate_exits_130(monkeypatch, tmp_path):
    from moeplan.tuner import validate as v

    def interrupted(*a, **k):
        return ValidationReport(trials=[], stopped="interrupted; the runs so far are kept", runner="executor",
                                results_path=str(tmp_path / "r.json"))

    monkeypatch.setenv("MOEPLAN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(v, "run_trials", interrupted)
    monkeypatch.setattr(v, "runner_view", lambda runner, model, hw, pr, dev, dtype: RunnerView(model, hw, PR))
    r = CliRunner().invoke(app, ["tune", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--validate", "--json"])
    assert r.exit_code == 130, r.stdout
    assert json.loads(r.stdout)["error"]["kind"] == "interrupted"


def test_plain_progress_lines_without_a_terminal(capsys):
    from moeplan.ui.console import progress

    with progress("validate", total=10, enabled=True) as bar:
        bar.update(description="validate: plan (run 1)", completed=1)
    err = capsys.readouterr().err
    assert "validate: plan (run 1) [1/10]" in err


def test_figures_name_their_runtime_and_next_steps():
    from moeplan.planner.placement import Placement
    from moeplan.tuner.trials import Trial
    from moeplan.ui.tuner_tables import next_steps, trial_row, trials_table

    t = Trial(label="plan", placement=Placement(), runner="executor", measured_decode_tok_s=0.1,
              predicted_decode_tok_s=1.4, wall_s=120, n_repeats=1)
    assert "[executor]" in trial_row(t).plain and "predicted for the executor" in trial_row(t).plain
    assert "measured by the executor" in trials_table([t]).title
    rep = ValidationReport(trials=[t], stopped="wall-time budget of 240 s spent (a run takes about 120 s)",
                           runner="executor")
    steps = next_steps(rep)
    assert any("--budget" in s for s in steps) and any("--runner llama-bench" in s for s in steps)
