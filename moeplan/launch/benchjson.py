"""Read llama-bench's `-o json` / `-o jsonl` output and check that it ran the plan's overrides.

llama-bench, given an unknown buffer type in -ot, prints "error: unrecognized buffer type"
and the list of buffer types on *stdout* and sets an error flag that later options may clear
(`-o json` assigns it) or act on (`-fa`, `-ctk` ... stop with "invalid parameter"). When it is
cleared, llama-bench runs the tests without that override and exits 0 (seen on llama.cpp
0c1e570, 2026-10-01). So the JSON may follow a few lines of text, and a run is only the
plan's when every test reports the expected `tensor_buft_overrides`.
"""
from __future__ import annotations

import json

from moeplan.errors import RunnerError


def parse_bench_json(text: str) -> list[dict]:
    """The test records of a llama-bench JSON (array) or JSONL output; text before it is skipped."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        s = line.strip()
        if s == "[":
            try:
                data = json.loads("\n".join(lines[i:]))
            except json.JSONDecodeError as exc:
                raise RunnerError(f"llama-bench JSON is cut or malformed: {exc}",
                                  "rerun bench.sh; a crash mid-run leaves an incomplete file") from None
            if not isinstance(data, list):
                break
            return [r for r in data if isinstance(r, dict)]
        if s.startswith("{"):
            out = []
            for rest in lines[i:]:
                rest = rest.strip()
                if rest.startswith("{"):
                    try:
                        out.append(json.loads(rest))
                    except json.JSONDecodeError as exc:
                        raise RunnerError(f"llama-bench JSONL line is malformed: {exc}", "rerun bench.sh") from None
            return out
    raise RunnerError("no JSON in llama-bench's output", "run llama-bench with -o json (bench.sh does)")


def check_bench_overrides(records: list[dict], expected: str) -> tuple[str, ...]:
    """Problems when a test did not run with `expected` overrides (Launch.bench_overrides).

    `expected` is llama-bench's own rendering: 'pattern=CPU;pattern=CPU', or 'none'.
    """
    if not records:
        return ("llama-bench reported no tests",)
    problems = []
    for i, r in enumerate(records):
        if "tensor_buft_overrides" not in r:
            problems.append(f"test {i} has no tensor_buft_overrides field (an older llama-bench?)")
        elif r["tensor_buft_overrides"] != expected:
            problems.append(f"test {i} ran with tensor_buft_overrides={r['tensor_buft_overrides']!r}, "
                            f"not the plan's {expected!r}")
    return tuple(problems)
