"""`moeplan emit` through the CLI: files, JSON, the digest check, errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from launch_plans import make_plan, write_models
from typer.testing import CliRunner

from moeplan.cli import app
from moeplan.planner.placement import Placement

runner = CliRunner()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return write_models(tmp_path_factory.mktemp("models"))


@pytest.fixture
def plan_file(models, tmp_path, monkeypatch):
    # no llama.cpp on PATH: the release table decides (the test must not depend on this machine)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    m = models["deepseek2"]
    plan = make_plan(m, Placement(cpu_moe_layers=(3, 4, 5), n_ctx=8192, n_threads=8))
    p = tmp_path / "plan.json"
    p.write_text(plan.to_json())
    return p, plan


def test_emit_writes_the_files_and_prints_json(plan_file, tmp_path):
    path, plan = plan_file
    out = tmp_path / "out dir"
    r = runner.invoke(app, ["emit", str(path), "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["plan_digest"] == plan.inputs_digest() and doc["model_matches_plan"] is True
    assert doc["backend"] == "llama.cpp" and doc["cpu_layers"] == [3, 4, 5]
    assert sorted(Path(f).name for f in doc["files"]) == ["bench.sh", "complete.sh", "launch.json", "launch.sh",
                                                          "plan.json"]
    argv = doc["scripts"]["launch.sh"]["argv"]
    assert argv[argv.index("-m") + 1] == plan.model.path
    assert "0c1e570" in doc["target"]
    assert (out / "launch.sh").read_text().count(plan.inputs_digest()) == 1


def test_emit_table_for_people(plan_file, tmp_path):
    path, _ = plan_file
    r = runner.invoke(app, ["emit", str(path), "--out", str(tmp_path / "o"), "--backend", "ik_llama.cpp"])
    assert r.exit_code == 0, r.output
    assert "launch.sh" in r.stdout and "note: op offload" in r.stdout


def test_emit_says_when_the_model_changed(plan_file, models, tmp_path):
    path, plan = plan_file
    other = models["deepseek2"].path.replace("deep seek", "changed")
    from gguf_fixtures import write_deepseek2

    write_deepseek2(Path(other), n_layer=8, n_dense=2, nextn=1, n_ff_exp=128)
    r = runner.invoke(app, ["emit", str(path), "--out", str(tmp_path / "o"), "--model", other, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["model_matches_plan"] is False and "changed since the plan" in doc["model_check"]
    assert any("changed since the plan" in n for n in doc["notes"])
    r = runner.invoke(app, ["emit", str(path), "--out", str(tmp_path / "o2"), "--model", other])
    assert "warning: the model changed" in r.output


def test_emit_errors_are_one_line_with_a_hint(plan_file, tmp_path):
    path, _ = plan_file
    r = runner.invoke(app, ["emit", str(tmp_path / "nope.json")])
    assert r.exit_code == 2 and "no such plan file" in r.output and "hint:" in r.output
    bad = tmp_path / "bad.json"
    bad.write_text('{"x": 1}')
    r = runner.invoke(app, ["emit", str(bad), "--json"])
    assert r.exit_code == 2 and json.loads(r.stdout)["error"]["kind"] == "input"
    r = runner.invoke(app, ["emit", str(path), "--backend", "exllama"])
    assert r.exit_code == 2 and "unknown backend" in r.output
    r = runner.invoke(app, ["emit", str(path), "--backend", "vllm", "--out", str(tmp_path / "v"), "--json"])
    assert r.exit_code == 2 and "cannot compute routed experts on the CPU" in json.loads(r.stdout)["error"]["message"]
    assert not (tmp_path / "v").exists()  # nothing half-written
    moved = json.loads(path.read_text())
    moved["model"]["path"] = str(tmp_path / "gone.gguf")
    path.write_text(json.dumps(moved))
    r = runner.invoke(app, ["emit", str(path)])
    assert r.exit_code == 3 and "--model" in r.output


def test_emit_multi_node_sglang(plan_file, tmp_path):
    path, _ = plan_file
    plan = json.loads(path.read_text())
    plan["placement"]["cpu_moe_layers"] = []
    plan["placement"]["n_gpus"] = 8
    path.write_text(json.dumps(plan))
    out = tmp_path / "sg"
    r = runner.invoke(app, ["emit", str(path), "--backend", "sglang", "--nodes", "2", "--gpu-vram", "80G",
                            "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert (out / "launch-node1.sh").exists()
    assert "--node-rank 1" in (out / "launch-node1.sh").read_text().replace(" \\\n    ", " ")


def test_emit_reads_a_profile_plan_with_its_quant_and_size(plan_file, models, tmp_path, monkeypatch):
    """A profile plan is read back with the plan's --quant and --size (probes.models seam)."""
    from dataclasses import replace

    import moeplan.probes.models as pm

    path, _ = plan_file
    m = replace(models["deepseek2"], source="profile", path="")
    seen = {}

    def fake_resolve(arg, quant=None, size=None):
        seen.update(arg=arg, quant=quant, size=size)
        return m

    monkeypatch.setattr(pm, "resolve_model", fake_resolve)
    plan = json.loads(path.read_text())
    plan["model"].update(source="profile", path="deepseek-v3", quant="native (FP8)", size_arg="700GB")
    path.write_text(json.dumps(plan))
    r = runner.invoke(app, ["emit", str(path), "--out", str(tmp_path / "p"), "--json"])
    assert r.exit_code == 0, r.output
    assert seen == {"arg": "deepseek-v3", "quant": "native", "size": "700GB"}
    assert ': "${MODEL:?set MODEL to the GGUF file of' in (tmp_path / "p" / "launch.sh").read_text()
