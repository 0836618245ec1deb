"""Issue 32 item 8: the README's commands are read from it and run. Every `moeplan ...` line of
its bash blocks parses (each flag exists, each value converts); every `--flag` its prose names
is an option of some command; the commands that need only bundled models and presets run to
exit 0 in a scratch folder."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from moeplan.cli import app

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_commands() -> list[list[str]]:
    text = README.read_text()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            for part in re.split(r"&&|\|", line):
                part = part.split(">")[0].strip()
                if part.startswith("moeplan "):
                    out.append(shlex.split(part)[1:])
    return out


COMMANDS = readme_commands()
GROUP = typer.main.get_command(app)


def _options(cmd) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}


def test_readme_has_commands():
    assert len(COMMANDS) >= 25


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a)[:60] for a in COMMANDS])
def test_every_readme_command_parses(args):
    cmd = GROUP.commands[args[0]]  # a KeyError: the README names a command that does not exist
    cmd.make_context(args[0], list(args[1:]), parent=GROUP.make_context("moeplan", [args[0]]))


def test_every_flag_the_readme_names_exists():
    known = {"--help"} | _options(GROUP)  # --version, --debug, --install-completion ...
    for cmd in GROUP.commands.values():
        known |= _options(cmd)
    # a line about a benchmark or script (`accuracy.py --check`) names that script's flags, not moeplan's
    text = "\n".join(line for line in README.read_text().splitlines()
                     if not re.search(r"\b[\w/]+\.py\b", line))
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", text))
    # flags of the programs moeplan launches, which the README quotes as theirs
    theirs = {"--n-cpu-moe", "--cpu-moe", "--chunked-prefill-size", "--kt-num-gpu-experts",
              "--kt-gpu-prefill-token-threshold", "--numa", "--fit", "--version", "--override-kv",
              "--cpu-offload-gb", "--interleave", "--membind", "--cpunodebind"}
    missing = sorted(f for f in named - known if f not in theirs)
    assert not missing, f"the README names flags no command has: {missing}"


RUNNABLE = [a for a in COMMANDS
            if a[0] in ("models", "inspect", "estimate", "tune", "hardware", "emit")
            and not any(x.startswith("~") or x.endswith(".gguf") for x in a)
            and "--validate" not in a and "--plot" not in a and "hw.json" not in a and "--bin" not in a]


def test_runnable_readme_commands_exit_0(tmp_path, monkeypatch):
    """In order, as a user pastes them: `hardware --out x.json` makes the profiles later lines use."""
    assert len(RUNNABLE) >= 12
    monkeypatch.chdir(tmp_path)
    for args in RUNNABLE:
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 0, f"moeplan {' '.join(args)}: {r.stdout[-400:]} {r.stderr[-400:]}"
