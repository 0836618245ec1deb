"""Regression gate: every public row's predicted figures (decode, prefill, their ranges, VRAM,
every term and memory item) equal the committed fixture. A change of figures is made on purpose
by regenerating the fixture (python benchmarks/accuracy_rows.py --write
tests/data/accuracy_rows.json) and reviewing its diff; a refactor leaves it unchanged."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import accuracy_rows  # noqa: E402


def test_every_public_row_matches_the_fixture():
    want = json.loads(accuracy_rows.FIXTURE.read_text())
    got = accuracy_rows.compute()
    diff = accuracy_rows.differences(want, got)
    assert not diff, (f"{len(diff)} figures changed (first: {diff[:10]}); if on purpose, regenerate with "
                      "python benchmarks/accuracy_rows.py --write tests/data/accuracy_rows.json and review the diff")
    # the gate covers the rows: most are estimated, with decode terms and a VRAM figure
    estimated = [v for v in want.values() if "decode_tok_s" in v]
    assert len(estimated) >= 150 and all(v["decode_terms"] for v in estimated)


def test_differences_sees_a_changed_figure():
    want = {"r": {"decode_tok_s": 10.0, "decode_terms": [["cpu", "cpu-mem", 0.05]], "skip": {}}}
    same = {"r": {"decode_tok_s": 10.0 * (1 + 1e-12), "decode_terms": [["cpu", "cpu-mem", 0.05]], "skip": {}}}
    moved = {"r": {"decode_tok_s": 10.0, "decode_terms": [["cpu", "cpu-mem", 0.0500001]], "skip": {}}}
    assert accuracy_rows.differences(want, same) == []
    assert accuracy_rows.differences(want, moved) == ["/r/decode_terms[0][2]: 0.05 -> 0.0500001"]
    assert accuracy_rows.differences(want, {"r": {**want["r"], "skip": {"vram": "x"}}}) == \
        ["/r/skip/vram: new"]
