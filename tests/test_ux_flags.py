"""Issue 32 items 8 and 10: click's own usage errors come in the documented `error:`/`hint:`
form (and as {"error": ...} under --json), exit 2; shell completion is offered."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from moeplan.cli import app


def run(*args):
    return CliRunner().invoke(app, list(args))


def test_unknown_flag_error_and_hint():
    r = run("tune", "qwen3-30b-a3b", "--cpu-onyl")
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and "has no option --cpu-onyl" in lines[0]
    assert lines[1].startswith("hint: did you mean") and "--cpu-only" in lines[1]
    assert "No such option" not in r.stderr and "Usage:" not in r.stderr


def test_unknown_flag_json():
    r = run("estimate", "qwen3-30b-a3b", "--bogus", "--json")
    assert r.exit_code == 2
    err = json.loads(r.stdout)["error"]
    assert err["kind"] == "input" and err["exit_code"] == 2 and "--bogus" in err["message"]
    assert "--help" in err["hint"]


def test_unknown_command_and_missing_argument():
    r = run("tunex")
    assert r.exit_code == 2 and r.stderr.startswith("error: ") and "hint: " in r.stderr
    r = run("tune")
    assert r.exit_code == 2 and "Missing argument" in r.stderr and "hint: see" in r.stderr
    r = run("tune", "qwen3-30b-a3b", "--trials", "many")
    assert r.exit_code == 2 and r.stderr.startswith("error: ")


def test_shell_completion_offered():
    r = run("--help")
    assert "--install-completion" in r.stdout and "--show-completion" in r.stdout
