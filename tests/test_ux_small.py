"""Issue 32 item 10: the smaller items."""
from __future__ import annotations

import json

from rich.console import Console
from typer.testing import CliRunner

from moeplan.cli import app


def run(*args):
    return CliRunner().invoke(app, list(args))


def _render80(renderables) -> str:
    con = Console(width=80, record=True)
    with con.capture() as cap:
        for r in renderables:
            con.print(r)
    return cap.get()


def test_tables_at_80_columns_keep_their_words():
    from moeplan.profiles.model_profiles import list_profiles
    from moeplan.ui.hardware_tables import numa_tables
    from moeplan.ui.model_tables import models_table

    rows = list_profiles()
    text = _render80([models_table(rows)])
    for line in text.splitlines()[3:]:
        assert line.rstrip().endswith(("partial", "verified")), line
    from moeplan.planner.hardware.profile import HardwareProfile
    from moeplan.ui.hardware_tables import gpu_tables

    doc = json.loads(run("hardware", "--gpu", "RTX 3090", "--cpu", "Ryzen 9 5950X", "--ram", "128G", "--json").stdout)
    hw = HardwareProfile.from_dict(doc)
    assert "spec-sheet" in _render80(numa_tables(hw)) and "spec-sheet" in _render80(gpu_tables(hw))


def test_one_more_layer_grammar():
    from moeplan.planner.search import Request, choose_plan
    from moeplan.probes.hwprofile import load_hardware
    from moeplan.probes.models import resolve_model
    from moeplan.profiles.backends import read_priors

    res = choose_plan(resolve_model("glm-4.5-air"), load_hardware("desktop-4090-ddr5"), read_priors("llama.cpp"),
                      Request(n_ctx=32768))
    assert "layer' experts" not in res.one_more_gib


def test_vram_on_a_machine_without_gpu_is_a_what_if_gpu(tmp_path):
    hw = tmp_path / "cpu.json"
    assert run("hardware", "--cpu", "Ryzen 9 5950X", "--ram", "128G", "--out", str(hw)).exit_code == 0
    r = run("tune", "deepseek-v4-flash", "--hw", str(hw), "--vram", "96G", "--json")
    assert r.exit_code == 0, r.stdout
    plan = json.loads(r.stdout)["plan"]
    assert plan["placement"]["n_gpus"] == 1 and "what-if 96 GiB GPU" in plan["hardware_name"]
    note = plan["notes"][0]
    assert note.startswith("--vram 96 GiB on") and "PCIe 4.0 x16" in note and "GB/s assumed" in note
    r = run("estimate", "qwen3-30b-a3b", "--hw", str(hw), "--vram", "24G", "--all-cpu-moe", "--json")
    assert r.exit_code == 0 and "what-if GPU" in r.stderr


def test_emit_says_what_the_windows_scripts_do(tmp_path):
    hw = tmp_path / "win.json"
    assert run("hardware", "--gpu", "RTX 4090", "--cpu", "Ryzen 9 7950X", "--ram", "128G", "--os", "windows",
               "--out", str(hw)).exit_code == 0
    r = run("tune", "qwen3-30b-a3b", "--hw", str(hw), "--emit", str(tmp_path / "run"))
    assert r.exit_code == 0, r.stdout
    r = run("emit", str(tmp_path / "run" / "plan.json"), "--out", str(tmp_path / "run2"))
    assert r.exit_code == 0, r.stdout
    text = " ".join(r.stdout.split())
    for name in ("launch.cmd", "launch.ps1"):
        assert name in text
    assert "Windows: the server, from cmd.exe" in text and "Windows: the server, from PowerShell" in text


def test_plot_has_the_vram_budget_line(tmp_path):
    import pytest

    pytest.importorskip("matplotlib")
    out = tmp_path / "p.svg"
    r = run("tune", "glm-4.5-air", "--hw", "desktop-4090-ddr5", "--plot", str(out))
    assert r.exit_code == 0, r.stdout
    assert "VRAM budget 24.0 GiB less the 1 GiB margin" in out.read_text()
