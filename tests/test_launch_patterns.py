"""-ot patterns: exact layer sets, checked against the real tensor names of GGUF files."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from launch_plans import write_models

from moeplan.errors import InputError
from moeplan.launch.patterns import (
    PatternError,
    check_patterns,
    checked_expert_patterns,
    expert_patterns,
    first_match,
    layer_alternations,
    range_pieces,
)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return write_models(tmp_path_factory.mktemp("models"))


@given(st.integers(0, 400), st.integers(0, 400))
def test_range_pieces_match_exactly_the_range(a, b):
    lo, hi = min(a, b), max(a, b)
    rx = re.compile("^(" + "|".join(range_pieces(lo, hi)) + ")$")
    # leading zeros never occur in GGUF block names, so '03' must not match either
    assert {i for i in range(0, 1200) if rx.match(str(i))} == set(range(lo, hi + 1))
    assert not rx.match("0" + str(lo))


@settings(max_examples=200)
@given(st.sets(st.integers(0, 160), min_size=1, max_size=90))
def test_alternations_cover_exactly_the_set(layers):
    alts = layer_alternations(layers, max_chars=40)
    matched = {i for i in range(0, 400) if any(re.match("^(" + a + ")$", str(i)) for a in alts)}
    assert matched == layers


def test_contiguous_runs_compress_to_one_short_pattern():
    # DeepSeek V3: 3 dense blocks, MoE 3..60; the plan keeps 3..40 on the CPU
    (p,) = expert_patterns(range(3, 41))
    assert p == r"^blk\.([3-9]|[1-3][0-9]|40)\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$"
    (p,) = expert_patterns([3, 4, 5])
    assert p == r"^blk\.(3|4|5)\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$"
    (p,) = expert_patterns([7])
    assert p.startswith(r"^blk\.7\.ffn_")
    # every other layer of a 94-layer model still fits one pattern
    assert len(expert_patterns(range(0, 94, 2))) == 1
    assert expert_patterns([]) == ()


def test_patterns_hold_no_separator_of_ot_or_llama_bench():
    for p in expert_patterns(list(range(0, 200, 3)) + [7, 8, 9]):
        assert "," not in p and ";" not in p and "=" not in p


@pytest.mark.parametrize("name", ["qwen3moe", "deepseek2", "gpt-oss"])
def test_every_cpu_subset_places_exactly_the_expert_weights(models, name):
    m = models[name]
    moe = m.moe_layer_indices
    subsets = [moe, moe[:1], moe[-1:], moe[1::2], moe[: len(moe) // 2], tuple(i for i in moe if i % 3)]
    for cpu in subsets:
        pats = checked_expert_patterns(m, cpu)
        for t in m.tensors:
            hit = first_match(pats, t.name) is not None
            assert hit == (t.group == "experts" and t.layer in cpu), (cpu, t.name)


def test_expert_biases_stay_on_the_gpu(models):
    m = models["gpt-oss"]
    pats = checked_expert_patterns(m, m.moe_layer_indices)
    biases = [t.name for t in m.tensors if t.name.endswith("_exps.bias")]
    assert len(biases) == 3 * len(m.moe_layer_indices)
    assert all(first_match(pats, b) is None for b in biases)
    weights = [t.name for t in m.tensors if t.name.endswith("_exps.weight")]
    assert all(first_match(pats, w) is not None for w in weights)


def test_dense_leading_and_nextn_blocks_are_never_matched(models):
    m = models["deepseek2"]
    assert m.moe_layer_indices[0] == 2  # blocks 0 and 1 are dense
    pats = checked_expert_patterns(m, m.moe_layer_indices)
    nextn = [layer for layer in m.layers if layer.kind == "nextn"]
    assert nextn, "the fixture has a NextN block"
    for t in nextn[0].tensors:
        assert first_match(pats, t.name) is None, t.name
    for t in m.tensors:
        if t.layer in (0, 1):
            assert first_match(pats, t.name) is None


def test_a_dense_block_in_the_plan_is_refused(models):
    m = models["deepseek2"]
    with pytest.raises(InputError, match="block 0 of tiny-deepseek2 has no routed experts"):
        checked_expert_patterns(m, (0, 2, 3))
    with pytest.raises(InputError, match="block 99"):
        checked_expert_patterns(m, (2, 99))
    assert not issubclass(PatternError, InputError)  # a mismatch of exact patterns is a bug, exit 1


def test_check_reports_a_pattern_that_matches_too_much(models):
    m = models["qwen3moe"]
    loose = (r"blk\.1\.ffn_.*_exps",)  # mainline's --n-cpu-moe style also catches biases and scales
    assert check_patterns(m, (1,), loose) == ()  # qwen3moe has no expert biases: still exact
    g = models["gpt-oss"]
    problems = check_patterns(g, (1,), loose)
    assert any("ffn_gate_exps.bias" in p for p in problems)
    assert any("contains ','" in p for p in check_patterns(m, (1,), (r"blk\.(1,2)\.x",)))


def test_written_fixture_names_match_what_llama_cpp_names(models):
    names = {t.name for t in models["qwen3moe"].tensors}
    assert "blk.3.ffn_gate_exps.weight" in names and "blk.3.ffn_down_exps.weight" in names
