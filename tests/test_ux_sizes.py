"""Issue 32 item 1: a memory size without a unit is refused everywhere it is read (flags,
hardware profiles, plans), with a hint naming both readings (`128G`? `128GB`?)."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from moeplan.cli import app
from moeplan.errors import InputError
from moeplan.units import parse_rate, parse_size


def run(*args):
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize("text", ["128", "24", "0.5", " 96 "])
def test_bare_size_refused_with_both_readings(text):
    with pytest.raises(InputError) as exc:
        parse_size(text, "--ram")
    n = text.strip()
    assert "no unit" in exc.value.message and f"{n}G " in exc.value.hint and f"{n}GB" in exc.value.hint


def test_bytes_and_units_still_read():
    assert parse_size("1024B") == 1024
    assert parse_size("128G") == 128 * 1024**3 and parse_size("128GB") == 128 * 1000**3
    assert parse_rate("900GB/s") == 900e9
    with pytest.raises(InputError, match="no unit"):
        parse_rate("900", "--gpu-bw")


@pytest.mark.parametrize("flag,value", [("--ram", "128"), ("--gpu-vram", "24")])
def test_hardware_flags(flag, value):
    args = ["hardware", "--gpu", "RTX 3090", "--ram", "64G"] if flag == "--gpu-vram" else ["hardware", "--gpu", "RTX 3090"]
    r = run(*args, flag, value)
    assert r.exit_code == 2, r.stdout
    assert f"error: {flag} '{value}' has no unit" in r.stderr and f"hint: {value}G" in r.stderr


def test_tune_vram_flag_json_error():
    r = run("tune", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--vram", "24", "--json")
    assert r.exit_code == 2
    err = json.loads(r.stdout)["error"]
    assert "no unit" in err["message"] and "24GB" in err["hint"]


def test_profile_with_unitless_ram_refused(tmp_path):
    r = run("hardware", "--gpu", "RTX 3090", "--ram", "64G", "--json")
    doc = json.loads(r.stdout)
    doc["system"]["ram_total_bytes"] = 128
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps(doc))
    r = run("tune", "qwen3-30b-a3b", "--hw", str(hw))
    assert r.exit_code == 4, r.stdout
    assert "ram_total_bytes = 128 bytes" in r.stderr and "137438953472" in r.stderr


def test_plan_with_unitless_size_refused(tmp_path):
    r = run("tune", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--size", "17GB", "--json")
    assert r.exit_code == 0, r.stdout
    doc = json.loads(r.stdout)
    doc["plan"]["model"]["size_arg"] = "17"
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    r = run("emit", str(plan), "--out", str(tmp_path / "run"))
    assert r.exit_code == 2, r.stdout
    assert "'17' has no unit" in r.stderr
