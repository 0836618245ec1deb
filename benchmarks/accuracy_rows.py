"""Every public row's predicted figures, as benchmarks/accuracy.py computes them: the
regression fixture of the cost and memory model (tests/test_accuracy_rows.py).

For each row of benchmarks/data/measurements.jsonl that accuracy.py can estimate, the fixture
holds what `moeplan estimate` predicted with the mechanism priors alone (accuracy.py's
"prior" column, no fitted scale): decode and prefill tok/s with their ranges, the paging
floor, VRAM bytes, every decode and prefill term (name, resource, seconds), the memory items
and the two roofline baselines; rows it cannot estimate keep their reasons.

    python benchmarks/accuracy_rows.py --check                         # compare (exit 1 on a change)
    python benchmarks/accuracy_rows.py --write tests/data/accuracy_rows.json   # regenerate

Regenerating is a deliberate act: a change of figures is reviewed in the fixture's diff.
A refactor must leave it unchanged (tests/test_accuracy_rows.py compares at 1e-9 relative).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import typer.main
import typer.testing
from typer.testing import CliRunner

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import accuracy  # noqa: E402

FIXTURE = HERE.parent / "tests" / "data" / "accuracy_rows.json"
REL_TOL = 1e-9


@contextlib.contextmanager
def _one_command() -> Iterator[None]:
    """typer's CliRunner rebuilds the whole click command tree from the functions' signatures
    on every invoke (typer.main.get_command: ~0.2 s, half of a row's time); build it once."""
    old = typer.testing._get_command
    typer.testing._get_command = functools.lru_cache(maxsize=None)(typer.main.get_command)
    try:
        yield
    finally:
        typer.testing._get_command = old


class _Recorder(CliRunner):
    """A CliRunner that keeps the JSON of each `estimate` it runs (the row's full prediction)."""

    def __init__(self) -> None:
        super().__init__()
        self.last_estimate: dict | None = None

    def invoke(self, app, args=None, **kw):  # type: ignore[no-untyped-def, override]
        out = super().invoke(app, args, **kw)
        if args and args[0] == "estimate" and not out.exit_code:
            self.last_estimate = json.loads(out.stdout)
        return out


def _terms(d: dict, key: str) -> list[list]:
    return [[t["name"], t["resource"], t["seconds"]] for t in d.get(key, [])]


def row_figures(r: dict, runner: _Recorder, tmp: Path) -> dict:
    runner.last_estimate = None
    x = accuracy.run_row(r, runner, tmp)
    out: dict = {"backend": x.backend, "skip": dict(sorted(x.skip.items()))}
    d = runner.last_estimate
    if d is None:
        return out
    out.update({
        "decode_tok_s": d["decode_tok_s"], "decode_tok_s_range": list(d["decode_tok_s_range"]),
        "decode_tok_s_paging": d.get("decode_tok_s_paging"),
        "prefill_tok_s": d["prefill_tok_s"], "prefill_tok_s_range": list(d["prefill_tok_s_range"]),
        "vram_bytes": d["vram_bytes"], "ram_bytes": d.get("ram_bytes"),
        "decode_terms": _terms(d, "decode_terms"), "prefill_terms": _terms(d, "prefill_terms"),
        "memory_items": sorted([i["name"], i["device"], i["bytes"]] for i in d["memory"]["items"]),
        "groups": x.groups, "baseline": x.baseline,
    })
    return out


def compute(data: Path = accuracy.DEFAULT_DATA) -> dict[str, dict]:
    """{row id: figures} for every row of `data`, without any fitted scale (as accuracy.py scores)."""
    rows = [json.loads(s) for s in data.read_text().splitlines() if s.strip()]
    saved = accuracy.backends_mod.fitted_terms
    accuracy.backends_mod.fitted_terms = lambda backend: {}
    runner = _Recorder()
    try:
        with _one_command(), tempfile.TemporaryDirectory() as tmp:
            return {r["id"]: row_figures(r, runner, Path(tmp)) for r in rows}
    finally:
        accuracy.backends_mod.fitted_terms = saved


def differences(want, got, path: str = "") -> list[str]:
    """Where `got` differs from `want` (floats at REL_TOL relative), as 'path: want -> got'."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{path}/{k}: missing" for k in want if k not in got]
        out += [f"{path}/{k}: new" for k in got if k not in want]
        for k in want:
            if k in got:
                out += differences(want[k], got[k], f"{path}/{k}")
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{path}: {len(want)} items -> {len(got)}"]
        return [e for i, (a, b) in enumerate(zip(want, got)) for e in differences(a, b, f"{path}[{i}]")]
    if isinstance(want, (int, float)) and isinstance(got, (int, float)) \
            and not isinstance(want, bool) and not isinstance(got, bool):
        if math.isclose(want, got, rel_tol=REL_TOL, abs_tol=0.0) or want == got:
            return []
        return [f"{path}: {want!r} -> {got!r}"]
    return [] if want == got else [f"{path}: {want!r} -> {got!r}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=accuracy.DEFAULT_DATA)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", type=Path, metavar="PATH", help="write the fixture (review its diff)")
    g.add_argument("--check", nargs="?", type=Path, const=FIXTURE, metavar="PATH",
                   help=f"compare against the fixture (default {FIXTURE.relative_to(HERE.parent)})")
    a = ap.parse_args(argv)
    got = compute(a.data)
    if a.write:
        from moeplan.io import write_text_atomic
        write_text_atomic(a.write, json.dumps(got, indent=1, sort_keys=True) + "\n")
        n = sum(1 for v in got.values() if "decode_tok_s" in v)
        print(f"wrote {a.write}: {len(got)} rows, {n} estimated")
        return 0
    if not a.check.exists():
        print(f"error: {a.check} not found\nhint: write it with --write {a.check}", file=sys.stderr)
        return 2
    diff = differences(json.loads(a.check.read_text()), got)
    for line in diff[:50]:
        print(line)
    print(f"{len(diff)} differences" if diff else "no differences")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
