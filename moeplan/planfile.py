"""Reading a plan file: the one place emit, bench and calibrate read plans from disk."""
from __future__ import annotations

import json
import os
from pathlib import Path

from moeplan.errors import InputError
from moeplan.planner.plan import PLAN_HINT, Plan, plan_from_doc

# a plan.json is a few hundred kB at most (alternatives and Pareto front included)
MAX_PLAN_BYTES = 64 * 1024 * 1024


def read_json_file(path: str | os.PathLike, what: str = "plan", max_bytes: int = MAX_PLAN_BYTES):
    """Decoded JSON of a small file the user named; InputError (exit 2) when it is missing,
    unreadable, too large or not JSON."""
    p = Path(os.path.expanduser(str(path)))
    try:
        size = p.stat().st_size
        if p.is_dir():
            raise InputError(f"{p} is a folder, not a {what} file", PLAN_HINT if what == "plan" else "give the file")
        if size > max_bytes:
            raise InputError(f"{p}: {size:,} bytes is above the limit {max_bytes:,} for a {what} file",
                             f"give the {what} file moeplan wrote")
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{p}: no such {what} file",
                         "write one with `moeplan tune MODEL --emit DIR` (or --out plan.json)") from None
    except UnicodeDecodeError:
        raise InputError(f"{p} is not a text file", PLAN_HINT if what == "plan" else "give the JSON file") from None
    except OSError as exc:
        raise InputError(f"cannot read {p}: {exc.strerror}", "check the path and its permissions") from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{p} is not valid JSON ({str(exc)[:80]})", PLAN_HINT if what == "plan" else "") from None


def read_plan(path: str | os.PathLike) -> Plan:
    """The plan at `path` (a plan.json, or `tune --json` output), schema and fields checked."""
    return plan_from_doc(read_json_file(path), str(path))
