"""Gemma 4 26B-A4B (llama.cpp arch gemma4): the profile against its published parameter
counts, the synthesised tensor index against a GGUF llama.cpp loads, and the KV cache,
output and compute buffers against what a real llama.cpp allocated for that GGUF
(tests/data/gemma4_llama_memory.json, recorded with --no-repack: the file says why)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from llama_fixtures import write_fixture
from llama_memlog import LlamaCase, case_placement, predict_buffers

from moeplan.planner.memory import compute_buffer as cb
from moeplan.planner.model import archs, synth
from moeplan.probes.gguf_file import read_gguf_header
from moeplan.probes.gguf_model import read_gguf_model
from moeplan.profiles.model_profiles import find_profile, load_profile, profile_config

RECORD = json.loads((Path(__file__).parent / "data" / "gemma4_llama_memory.json").read_text())


@pytest.fixture(scope="module")
def fixture_path(tmp_path_factory):
    return write_fixture("gemma4", tmp_path_factory.mktemp("gemma4"))


def test_profile_matches_published_parameter_counts():
    prof = find_profile("google/gemma-4-26B-A4B-it")
    m = load_profile("gemma-4-26b-a4b", quant="BF16")
    total = sum(t.n_elements for t in m.globals) + sum(t.n_elements for layer in m.layers for t in layer.tensors)
    experts = sum(t.n_elements for layer in m.layers for t in layer.tensors if t.group == "experts")
    active = total - experts + experts * m.n_experts_used // m.n_experts
    # model card: 25.2B total, 3.8B active (the vision tower is in the mmproj, not counted)
    assert total / 1e9 == pytest.approx(prof["total_params_b"], abs=0.05)
    assert active / 1e9 == pytest.approx(prof["active_params_b"], abs=0.05)
    # llama.cpp prints 25.97B for a published GGUF: the tied output is a second copy of token_embd
    embd = next(t for t in m.globals if t.name == "token_embd.weight")
    assert (total + embd.n_elements) / 1e9 == pytest.approx(25.97, abs=0.005)
    assert not any(t.name == "output.weight" for t in m.globals)


def test_layers_sliding_and_global():
    m = load_profile("gemma-4-26b-a4b")
    kinds = [layer.attention for layer in m.trunk_layers]
    assert kinds == (["swa"] * 5 + ["full"]) * 5 and all(layer.kind == "moe" for layer in m.trunk_layers)
    swa, full = m.trunk_layers[0], m.trunk_layers[5]
    # sliding: 8 KV heads x 256, window 1024; global: 2 KV heads x 512, K = V (no attn_v) but
    # llama.cpp still caches V (the fixture's run: K 2.00 MiB, V 2.00 MiB for its global layer)
    assert {c.name: (c.n_embd, c.cells, c.window) for c in swa.kv} == {"k": (2048, "swa", 1024),
                                                                       "v": (2048, "swa", 1024)}
    assert {c.name: (c.n_embd, c.cells) for c in full.kv} == {"k": (1024, "ctx"), "v": (1024, "ctx")}
    assert not any("attn_v" in t.name for t in full.tensors) and any("attn_v" in t.name for t in swa.tensors)
    # the dense MLP beside the experts stays with the resident weights
    assert any(t.name.endswith("ffn_gate.weight") and t.group == "ffn" for t in swa.tensors)
    assert m.n_ff_exp == 704 and m.n_experts == 128 and m.n_experts_used == 8


def test_converter_keys():
    arch, hp = synth.gguf_hparams(profile_config(find_profile("gemma-4-26b-a4b")))
    assert arch == "gemma4"
    assert hp["attention.key_length"] == 512 and hp["attention.key_length_swa"] == 256
    assert hp["attention.head_count_kv"][:6] == [8, 8, 8, 8, 8, 2]
    assert hp["feed_forward_length"] == 2112 and hp["expert_feed_forward_length"] == 704
    assert hp["attention.sliding_window"] == 1024 and hp["final_logit_softcapping"] == 30.0
    assert hp["attention.sliding_window_pattern"][5] is False and hp["attention.sliding_window_pattern"][4] is True


def test_synthesised_index_is_the_loadable_file(fixture_path):
    """The builder, fed the fixture's keys, lists exactly the fixture's tensors (names and
    shapes): a file llama.cpp 0c1e570 loads and runs (--no-repack)."""
    hdr = read_gguf_header(fixture_path)
    hp = {k.split(".", 1)[1]: v for k, v in hdr.metadata.items() if k.startswith("gemma4.")}
    specs = synth.tensor_specs("gemma4", hp, n_vocab=32000, options={"tied": True, "k_eq_v": True})
    assert {(s.name, s.shape) for s in specs} == {(t.name, tuple(t.shape)) for t in hdr.tensors}


def test_shared_kv_layers_keep_no_cache():
    hp = {"block_count": 35, "attention.shared_kv_layers": 20}
    assert archs.has_kv(hp, 14) and not archs.has_kv(hp, 15)


@pytest.mark.parametrize("run", RECORD["runs"], ids=lambda r: r["name"])
def test_buffers_against_llama_cpp(fixture_path, run):
    m = read_gguf_model(fixture_path)
    case = LlamaCase(**run["case"])
    pred = predict_buffers(m, case, ())
    meas: dict[str, int] = {}
    for b in run["buffers"]:
        meas[b["kind"]] = meas.get(b["kind"], 0) + b["bytes"]
    # KV exact, flash attention or not (without it every V row is the widest layer's,
    # llama-kv-cache.cpp n_embd_v_gqa_max), and the logits buffer exact
    assert pred["kv"] == meas["kv"]
    assert pred["output"] == meas["output"]
    err = (pred["compute"] - meas["compute"]) / meas["compute"]
    assert abs(err) <= 0.10 or 0 < meas["compute"] - pred["compute"] <= cb.fragmentation_allowance(
        m, case_placement(case))
