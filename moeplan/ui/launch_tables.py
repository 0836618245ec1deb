"""Render what `moeplan emit` wrote: the files, the server command, the notes."""
from __future__ import annotations

from pathlib import Path

from rich.table import Table

from moeplan.launch.common import Launch


def launch_data(launch: Launch, paths: list[Path], plan_digest: str, same_model: bool, model_note: str) -> dict:
    """The JSON document of `moeplan emit --json`."""
    return {
        "plan_digest": plan_digest,
        "model_matches_plan": same_model,
        "model_check": model_note,
        "files": [str(p) for p in paths],
        **launch.to_dict(),
    }


def launch_table(launch: Launch, paths: list[Path]) -> Table:
    t = Table(title=f"{launch.backend} launch files  ({launch.target})", title_justify="left")
    t.add_column("file")
    t.add_column("what it does")
    purposes = {s.name: s.purpose for s in launch.scripts}
    purposes.update({c.name: c.purpose for c in launch.configs})
    purposes.setdefault("plan.json", "the plan these files run")
    purposes.setdefault("launch.json", "every command as an argv list (for programs)")
    # Windows scripts (launch/winscripts.py): the same server command as launch.sh
    purposes.setdefault("launch.cmd", "Windows: the server, from cmd.exe (binds the NUMA node with start /NODE when "
                                      "the plan does)")
    purposes.setdefault("launch.ps1", "Windows: the server, from PowerShell (the same argv as launch.cmd)")
    for name in ("bench.cmd", "bench.ps1", "complete.cmd", "complete.ps1"):
        unix = name.split(".")[0] + ".sh"
        if unix in purposes:
            purposes.setdefault(name, f"Windows: {purposes[unix]}")
    for p in paths:
        t.add_row(str(p), purposes.get(p.name, ""))
    return t
