"""Emit -> run -> check on a real llama.cpp CPU build (with local RPC devices for several-device
runs): the placement `moeplan check` reads back from the log is the plan's, and the buffers the
log prints are the planner's.

The recorded logs (tests/data/logs/cpu-*, recorded by tests/llama_runs.py) are checked always;
the live round trip runs when MOEPLAN_LLAMA_BIN names a build/bin with llama-completion,
llama-bench and rpc-server."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from launch_plans import write_runnable
from llama_rpc import rpc_server_path
from llama_runs import CASES, DATA, WRITERS, Case, run_case
from typer.testing import CliRunner

from moeplan.check.compare import compare_run, differences
from moeplan.check.parse import parse_log
from moeplan.check.placement import recover_placement
from moeplan.cli import app
from moeplan.planner.memory.accounting import MemoryConstants
from moeplan.probes.hwprofile import load_hardware
from moeplan.probes.models import resolve_model
from moeplan.profiles.backends import read_priors

BIN = os.environ.get("MOEPLAN_LLAMA_BIN", "")
HAVE_BIN = bool(BIN) and all((Path(BIN) / n).is_file() for n in ("llama-completion", "llama-bench")) \
    and rpc_server_path(Path(BIN)) is not None
MIB = 1024 * 1024


def _recorded(case: Case) -> Path:
    return DATA / (case.name + (".json" if case.script == "bench.sh" else ".log"))


def _model(case: Case, tmp_path: Path):
    writer, kw = WRITERS[case.fixture]
    path, _ = write_runnable(writer, tmp_path / f"{case.fixture}.gguf", **kw)
    return resolve_model(str(path))


def _assert_plans_run(case: Case, text: str, m) -> dict:
    run = parse_log(text, case.name)
    assert run.unread == (), run.unread
    rec = recover_placement(run, m)
    hw = load_hardware("desktop-4090-ddr5")
    pr = read_priors("llama.cpp")
    diffs = differences(m, case.placement, rec, hw, pr, MemoryConstants())
    assert diffs == (), diffs
    assert rec.placement.cpu_moe_layers == case.placement.cpu_moe_layers
    assert rec.evidence["cpu_moe_layers"] in ("log", "llama-bench")
    res = compare_run(run, m, rec, hw, pr)
    return {(r.device, r.item): r for r in res.rows}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_recorded_log_gives_back_the_plans_placement(case, tmp_path):
    f = _recorded(case)
    assert f.is_file(), f"{f} is missing: record it with tests/llama_runs.py"
    m = _model(case, tmp_path)
    rows = _assert_plans_run(case, f.read_text(), m)
    if case.script != "bench.sh":
        _assert_buffers(case, rows)


def _assert_buffers(case: Case, rows: dict) -> None:
    """What the planner predicts for these buffers, against what llama.cpp printed (MiB, 2 decimals)."""
    kv = [r for k, r in rows.items() if k[1] == "KV cache"]
    assert kv and all(abs(r.predicted - r.observed) <= 0.0051 * MIB for r in kv if r.predicted is not None), \
        [(r.device, r.predicted, r.observed) for r in kv]
    # llama.cpp prints MiB with two decimals: +-0.005 MiB, plus 0.5% for alignment the planner leaves out
    span = [r for k, r in rows.items() if k[1] == "weights (mapped file span)"]
    assert all(r.observed >= r.predicted - 0.0051 * MIB for r in span)
    w = [r for k, r in rows.items() if k[1] == "weights" and r.predicted is not None]
    assert w and all(abs(r.predicted - r.observed) <= 0.0051 * MIB + 0.005 * r.observed for r in w), \
        [(r.device, r.predicted, r.observed) for r in w]
    if case.rpc:
        per_dev = [k for k in rows if k[0].startswith("RPC") and k[1] == "weights"]
        assert len(per_dev) == case.rpc  # each device's own blocks, from the loader's layer lines


@pytest.mark.skipif(not HAVE_BIN, reason="set MOEPLAN_LLAMA_BIN to a llama.cpp build/bin with llama-completion, "
                                         "llama-bench and rpc-server")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_emit_run_check_round_trip(case, tmp_path):
    m, plan, text, _ = run_case(case, Path(BIN), tmp_path)
    rows = _assert_plans_run(case, text, m)
    if case.script != "bench.sh":
        _assert_buffers(case, rows)
    # and through the command, against the plan file it was emitted from
    log = tmp_path / "run.log"
    log.write_text(text)
    r = CliRunner().invoke(app, ["check", str(log), "--plan", str(tmp_path / case.name / "plan.json"),
                                 "--hw", "desktop-4090-ddr5", "--json"])
    assert r.exit_code == 0, r.output
    c = json.loads(r.output)["logs"][0]["check"]
    assert c["same_as_plan"] is True, c["differences"]
