"""The rows the priors are anchored on (benchmarks/anchors.py) are found where the anchors are
written, may not be test rows, and set no range (benchmarks/accuracy.py, issue 29 items 1 and 4)."""
from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, file: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / file)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


split = _load("moeplan_bench_split", "split.py")
anchors = _load("moeplan_bench_anchors", "anchors.py")
ROWS = split.rows()
INDEX = anchors.Index(ROWS)
GH = "https://github.com/"


def _sources(text: str) -> set[str]:
    return {s for a in anchors.scan_text(text, INDEX) for s in a.sources}


def test_the_scanner_finds_the_known_anchors():
    """The priors' anchors as backends.toml, memory_measurements.toml and the cost code write
    them: row ids and id patterns, a measurement's source URL, a repository's thread."""
    found = set(anchors.anchor_sources(ROWS))
    want = {GH + "ikawrakow/ik_llama.cpp/issues/1075",  # eta_cpu, cpu_mm_eff: 'rows ik1075-*'
            GH + "ikawrakow/ik_llama.cpp/issues/380",  # 'ik380-*-mainline-*', 'ik380-7950x-cpuonly-*'
            GH + "ikawrakow/ik_llama.cpp/issues/1752",  # kernel_x vec_dot_batch: 'ik1752-*'
            GH + "ikawrakow/ik_llama.cpp/issues/2199",  # ik_llama.cpp sources: 'ik2199-i9-9900t-*'
            GH + "kvcache-ai/ktransformers/blob/main/doc/en/DeepseekR1_V3_tutorial.md",  # 'kt-v02-*'
            GH + "kvcache-ai/ktransformers/issues/726",  # machine.py: 'KTransformers #726'
            GH + "ikawrakow/ik_llama.cpp/discussions/258",  # memory_measurements.toml source = URL
            "seed-document (project seed, translated; no public URL)"}  # 'seed-dsv4flash-q8-*'
    assert want <= found, sorted(want - found)
    n_rows = sum(1 for r in ROWS if split.source_key(r["source_url"]) in found)
    assert n_rows >= 41


def test_how_an_anchor_may_be_written():
    assert _sources("eta_cpu = 0.78   # rows ik1075-*") == {GH + "ikawrakow/ik_llama.cpp/issues/1075"}
    # a glob inside the id, a trailing full stop
    assert _sources("predicted 0.87-0.93 (ik380-*-mainline-*).") == {GH + "ikawrakow/ik_llama.cpp/issues/380"}
    assert _sources('source = "https://github.com/ikawrakow/ik_llama.cpp/discussions/258#x"') == \
        {GH + "ikawrakow/ik_llama.cpp/discussions/258"}
    assert _sources("# a slice (KTransformers #726: --cpu_infer 30)") == {GH + "kvcache-ai/ktransformers/issues/726"}
    assert _sources("ik_llama.cpp issues #1075, #2199") == {GH + "ikawrakow/ik_llama.cpp/issues/1075",
                                                            GH + "ikawrakow/ik_llama.cpp/issues/2199"}
    # a bare number takes its TOML table's backend; another repository's thread of the same number
    # is not that source; a comment's '# 16 threads' is no thread
    assert _sources("[ik_llama_cpp.kernel_x]\n# PR 1075 and PR 380") == {
        GH + "ikawrakow/ik_llama.cpp/issues/1075", GH + "ikawrakow/ik_llama.cpp/issues/380"}
    assert _sources("[llama_cpp.kernel_x]\n# PR 1075") == set()
    assert _sources("llama.cpp PR #1075") == set()
    assert _sources("# 1075 threads, # 16 threads, kt-kernel, eta_cpu-x") == set()


def test_a_prior_naming_a_test_row_fails(tmp_path):
    """The check of tests/test_accuracy_split.py catches a prior anchored on the test split,
    however the anchor is written."""
    test_row = sorted(split.test_ids(ROWS))[0]
    test_src = split.source_key(next(r["source_url"] for r in ROWS if r["id"] == test_row))
    for text in (f"eta_cpu = 0.5   # rows {test_row}", f'source = "{test_src}"'):
        p = tmp_path / "backends.toml"
        p.write_text(text + "\n")
        bad = anchors.on_test_split(anchors.scan(ROWS, [p]))
        assert bad and test_src in bad[0], text
    assert anchors.on_test_split(anchors.scan(ROWS, [])) == []  # the train sweeps of DECODE_OVERLAP_P


def _row(acc, rid: str, src: str, measured: float, anchor: bool):
    x = acc.Row({"id": rid, "source_url": src})
    x.measured = {"decode": measured}
    x.groups = {"decode": {"cpu": 0.1}}  # 10 tok/s predicted
    x.prior = {"decode": 10.0}
    x.backend = "llama.cpp"
    x.anchor = anchor
    return x


def test_ranges_are_not_set_from_anchor_rows():
    """An anchor row's residual moves no range: the widths shipped and those a held-out row gets
    are what the other train rows give, whatever the anchor rows measured."""
    acc = _load("accuracy_bench_anchors", "accuracy.py")
    train = [s for s in sorted({split.source_key(r["source_url"]) for r in ROWS}) if split.side(s) == "train"]

    def rows(anchor_measured: float, anchor: bool = True):
        out = [_row(acc, f"r{i}", train[i], 10.0 * math.exp(0.05 * (i % 7) - 0.1), False) for i in range(20)]
        out += [_row(acc, f"a{i}", train[20 + i], anchor_measured, anchor) for i in range(4)]
        return out
    tight, wild = acc.evaluate(rows(10.0)), acc.evaluate(rows(1.0))
    assert tight["decode"]["_prior_widths"] == wild["decode"]["_prior_widths"]
    assert tight["decode"]["r3"]["prior_range"] == wild["decode"]["r3"]["prior_range"]
    assert tight["decode"]["_range_sources"] == train[:20]
    # the same rows as calibration rows do move it: the check can fail
    assert acc.evaluate(rows(1.0, anchor=False))["decode"]["_prior_widths"] != tight["decode"]["_prior_widths"]


def test_fit_json_ranges_come_from_no_anchor_source():
    fit = json.loads((ROOT / "moeplan" / "profiles" / "fit.json").read_text())
    found = set(anchors.anchor_sources(ROWS))
    assert set(fit["anchor_sources"]) == found
    for m, used in fit["range_set_on_sources"].items():
        assert used and not set(used) & found, m
        assert all(split.side(s) == "train" for s in used), m


def test_each_row_is_scored_about_the_centre_the_other_sources_set():
    """The centre is fitted on the calibration rows too: a row's score is its distance from the
    centre of the other sources' rows (leave-one-source-out), so one source far out widens the
    range by its distance from where the rest sit, not from a centre it pulled towards itself."""
    from moeplan.planner.cost.ranges import weighted_conformal_quantile, weighted_median

    acc = _load("accuracy_bench_anchors", "accuracy.py")
    res = [(0.02 * k, False, f"s{k}") for k in range(10)] + [(1.0, False, "far")] * 3
    c, w = acc._center_width(res)
    srcs = [s for _, _, s in res]
    assert c == pytest.approx(weighted_median([e for e, _, _ in res], srcs))
    without = {s: weighted_median([e for e, _, t in res if t != s], [t for _, _, t in res if t != s]) for s in srcs}
    assert w == pytest.approx(weighted_conformal_quantile([abs(e - without[s]) for e, _, s in res], srcs, 0.8))
    # one source alone: no other source sets a centre, so its rows score about 0 (the model's figure)
    assert acc._center_width([(0.3, False, "a"), (0.5, False, "a")]) == (pytest.approx(0.4), pytest.approx(0.5))
