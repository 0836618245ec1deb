"""The test split of the public measurements: fixed by its rule, listed, and never tuned on.

No prior may name a test row or a test source as its anchor, and moeplan/profiles/fit.json must
come from train rows only (benchmarks/split.py, issue 29)."""
from __future__ import annotations

import importlib.util
import json
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
# where the priors write their anchors, and what they name (benchmarks/anchors.py: row ids, URLs, threads)
anchors = _load("moeplan_bench_anchors", ROOT / "benchmarks" / "anchors.py")


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


def test_no_prior_names_a_test_row_or_source():
    """No anchor in backends.toml, the parts catalog, the cost code or the fitted data files names
    a test row or a test source, however it is written (a row id or pattern, a URL, a repository's
    thread): tests/test_range_anchors.py shows the check failing on one that does."""
    found = anchors.scan(ROWS)
    assert found, "the scanner finds the priors' anchors"
    bad = anchors.on_test_split(found)
    assert not bad, "a prior is anchored on the test split (re-anchor it on train rows or hardware):\n" + \
        "\n".join(bad)


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
