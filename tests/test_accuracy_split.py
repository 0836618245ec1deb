"""The test split of the public measurements: fixed by its rule, listed, and never tuned on.

No prior may name a test row or a test source as its anchor, and moeplan/profiles/fit.json must
come from train rows only (benchmarks/split.py, issue 29)."""
from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


split = _load("moeplan_bench_split", ROOT / "benchmarks" / "split.py")
ROWS = split.rows()
TEST_IDS = split.test_ids(ROWS)
TRAIN_IDS = {r["id"] for r in ROWS} - TEST_IDS
TEST_SOURCES = {split.source_key(r["source_url"]) for r in ROWS if r["id"] in TEST_IDS}
# the files that hold the cost model's priors and hardware facts: where an anchor is stated
PRIOR_FILES = [ROOT / "moeplan" / "profiles" / "backends.toml", *sorted((ROOT / "moeplan" / "profiles" / "parts").glob(
    "*.toml")), *sorted((ROOT / "moeplan" / "planner" / "cost").glob("*.py"))]
# a row id or an id pattern as the priors name them: 'ik1075-*', 'kt-v02-llamacpp-baseline'
ID_TOKEN = re.compile(r"(?<![\w/.-])([a-z][a-z0-9]*(?:-[a-z0-9.]+)*-(?:[a-z0-9.]+|\*))(?![\w-])")
# a thread of a repository as the comments name it: 'PR 534', 'issue 1593', 'discussion 357', '#1593'
THREAD_REF = re.compile(r"\b(?:PRs?|pull|issues?|discussions?)\s*#?\s*(\d{2,6})\b|#(\d{2,6})\b")


def test_the_listing_is_the_rule_applied_to_the_data():
    """split.json lists every source on the side its hash gives (rows added later included:
    `python benchmarks/split.py --write` after adding rows)."""
    listed = json.loads(split.LISTING.read_text())
    assert listed == split.listing(ROWS), "run: python benchmarks/split.py --write"
    assert split.main([]) == 0


def test_the_rule_is_frozen():
    # the rule's own outcome on sources it was fixed with: a change to the rule fails here
    assert split.side("https://github.com/ikawrakow/ik_llama.cpp/pull/1593") == "test"
    assert split.side("https://github.com/ikawrakow/ik_llama.cpp/issues/1075") == "train"
    assert split.side("https://github.com/ikawrakow/ik_llama.cpp/issues/1075#issuecomment-1") == "train"
    assert split.side("https://github.com/kvcache-ai/ktransformers/blob/main/doc/en/DeepseekR1_V3_tutorial.md") \
        == "train"
    listed = json.loads(split.LISTING.read_text())
    n_test, n = len(listed["test"]), len(listed["test"]) + len(listed["train"])
    assert 0.2 * n <= n_test <= 0.45 * n  # about a third of the sources


def _anchors(text: str) -> set[str]:
    return set(ID_TOKEN.findall(text))


def test_the_id_scanner_finds_anchors():
    text = "eta_cpu = 0.78   # rows ik1075-*\n  'measurements.jsonl: kt-v02-llamacpp-baseline (2x Xeon)'"
    found = _anchors(text)
    assert {"ik1075-*", "kt-v02-llamacpp-baseline"} <= found
    assert any(fnmatch.fnmatch(i, "ik1075-*") for i in TRAIN_IDS)
    assert {m.group(1) or m.group(2) for m in THREAD_REF.finditer("PR 534's TG, issue #1593, see #357")} == \
        {"534", "1593", "357"}


def test_no_prior_names_a_test_row():
    bad = []
    for p in PRIOR_FILES:
        for tok in _anchors(p.read_text(encoding="utf-8")):
            hit = sorted(i for i in TEST_IDS if fnmatch.fnmatch(i, tok))
            if hit:
                bad.append(f"{p.relative_to(ROOT)}: {tok!r} names test rows {hit[:3]}")
    assert not bad, "a prior is anchored on the test split (re-anchor it on train rows or hardware):\n" + \
        "\n".join(bad)


def test_no_prior_cites_a_test_source_thread():
    """A test source's thread (its repository and number) is not cited in backends.toml or the
    parts catalog, where the priors' anchors are written."""
    test_threads = {}
    for s in TEST_SOURCES:
        m = re.search(r"github\.com/([^/]+/[^/]+)/(?:issues|pull|discussions)/(\d+)", s)
        if m:
            test_threads[m.group(2)] = m.group(1)
    bad = []
    for p in PRIOR_FILES:
        if p.suffix != ".toml":
            continue  # the cost code cites llama.cpp's own PRs by number, too many to tell apart
        for ln, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            for m in THREAD_REF.finditer(line):
                n = m.group(1) or m.group(2)
                if n in test_threads:
                    bad.append(f"{p.relative_to(ROOT)}:{ln}: '{m.group(0)}' ({test_threads[n]} #{n} is a test source)")
    assert not bad, "\n".join(bad)


def test_fit_json_comes_from_train_rows_only():
    fit = json.loads((ROOT / "moeplan" / "profiles" / "fit.json").read_text())
    assert fit["split_rule"] == split.RULE
    used = set(fit["fitted_on_sources"])
    assert used, "fit.json names the sources it was fitted on"
    assert not used & TEST_SOURCES, sorted(used & TEST_SOURCES)
    train_sources = {split.source_key(r["source_url"]) for r in ROWS if r["id"] in TRAIN_IDS}
    assert used <= train_sources
    assert all(n <= len(TRAIN_IDS) for n in fit["n_rows"].values())


@pytest.mark.slow
def test_fit_json_and_the_docs_figures_are_what_the_data_gives(capsys):
    """CI regenerates fit.json and the generated blocks of docs/cost-model.md and
    docs/benchmarks.md from the data and the model and fails when the committed ones differ
    (`python benchmarks/accuracy.py --write-fit --write-docs` after a change that moves them)."""
    acc = _load("accuracy_bench_check", ROOT / "benchmarks" / "accuracy.py")
    rc = acc.main(["--check"])
    assert rc == 0, capsys.readouterr().err
