"""Step-3.5-Flash (llama.cpp step35): the profile against its published parameter count and
GGUF size, the synthesised tensor index against a GGUF llama.cpp loads, the per-block heads
and SWA pattern the converter writes, the KV cache and compute buffer against what
llama-completion allocated for that GGUF, the barrier count of its dense block, and the
backend that cannot run it refusing it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from llama_fixtures import write_fixture
from llama_memlog import LlamaCase, case_placement, predict_buffers

from moeplan.commands.placement_opts import resolve_placement
from moeplan.errors import InputError
from moeplan.planner.cost import graph
from moeplan.planner.memory import compute_buffer as cb
from moeplan.planner.model import archs
from moeplan.planner.model.synth import gguf_hparams, tensor_specs
from moeplan.probes.gguf_file import read_gguf_header
from moeplan.probes.gguf_model import read_gguf_model
from moeplan.profiles.model_profiles import find_profile, load_profile, profile_config

MIB = 2 ** 20


@pytest.fixture(scope="module")
def fixture_gguf(tmp_path_factory):
    return write_fixture("step35", tmp_path_factory.mktemp("step35"))


def _params(m) -> int:
    return sum(t.n_elements for t in m.globals) + sum(t.n_elements for layer in m.trunk_layers for t in layer.tensors)


def test_parameters_and_published_gguf_size():
    m = load_profile("stepfun-ai/Step-3.5-Flash", "BF16")
    # README 4.1: 196.81B total; the trunk llama.cpp runs counts 196.96B (SWA blocks at 64
    # heads would give 195.85B, no shared expert 196.30B: both outside 0.2%)
    assert _params(m) / 1e9 == pytest.approx(196.81, rel=0.002)
    # ~11B active: attention, dense blocks, output, 8 of 288 experts plus the shared expert
    k, n = m.n_experts_used, m.n_experts
    active = _params(m) - m.n_vocab * m.n_embd - sum(layer.expert_elements for layer in m.trunk_layers) * (1 - k / n)
    assert 10.5e9 < active < 11.5e9
    # StepFun's step3.5_flash_Q4_K_S.gguf (no MTP blocks): 111.5 GB; what llama.cpp loads of
    # the Q4_K_S recipe's file is the same file without its MTP blocks
    q = load_profile("step-3.5-flash", "Q4_K_S")
    assert q.loaded_bytes / 1e9 == pytest.approx(111.5, rel=0.01)
    assert len(q.layers) == 48 and [layer.kind for layer in q.layers[45:]] == ["nextn"] * 3


def test_converter_writes_per_block_heads_and_swa_pattern():
    arch, hp = gguf_hparams(profile_config(find_profile("step-3.5-flash")))
    assert arch == "step35" and hp["block_count"] == 48 and hp["nextn_predict_layers"] == 3
    assert hp["attention.head_count"][:5] == [64, 96, 96, 96, 64]
    assert set(hp["attention.head_count_kv"]) == {8}
    assert hp["attention.sliding_window_pattern"][:5] == [False, True, True, True, False]
    assert hp["attention.sliding_window_pattern"][44:] == [False, True, True, True]
    assert (hp["leading_dense_block_count"], hp["expert_count"], hp["expert_used_count"]) == (3, 288, 8)
    m = load_profile("step-3.5-flash", "Q4_K_S")
    assert [layer.kind for layer in m.trunk_layers[:4]] == ["dense"] * 3 + ["moe"]
    assert [layer.attention for layer in m.trunk_layers].count("full") == 12
    # every block caches 8 KV heads of 128; sliding blocks keep window 512
    swa = m.trunk_layers[1].kv[0]
    assert (swa.n_embd, swa.cells, swa.window) == (1024, "swa", 512)
    t = {x.name: x.shape for x in m.layers[1].tensors}
    assert t["blk.1.attn_q.weight"] == (4096, 96 * 128) and t["blk.1.attn_gate.weight"] == (4096, 96)
    assert {x.name: x.shape for x in m.layers[4].tensors}["blk.4.attn_q.weight"] == (4096, 64 * 128)


def test_synthesised_tensors_are_the_ones_llama_cpp_loads(fixture_gguf):
    """llama-completion loads and runs the fixture (step35.cpp creates exactly its tensors,
    the MTP block's included); the list moeplan synthesises from its header must be that list."""
    header = read_gguf_header(fixture_gguf)
    hp = {k[len("step35."):]: v for k, v in header.metadata.items() if k.startswith("step35.")}
    specs = tensor_specs("step35", hp, n_vocab=32000, options={"rope_freqs": True},
                         mtp_tensors=("eh_proj", "enorm", "hnorm", "shared_head_norm", "shared_head_head"))
    assert sorted((s.name, s.shape) for s in specs) == sorted((t.name, tuple(t.shape)) for t in header.tensors)


# llama-completion (llama.cpp 0c1e570, CPU build) on the fixture, -fa on -fit off -nr -v
# --no-repack: the two KV buffers llama_kv_cache_iswa prints (non-SWA + SWA, MiB) and the CPU
# compute buffer (MiB)
LLAMA_PRINTED = [
    ({"n_ctx": 4096}, 4.00 + 2.25, 71.2715),                                    # -c 4096
    ({"n_ctx": 4096, "n_seq": 4}, 4.00 + 9.00, 76.2715),                        # -c 4096 -np 4
    ({"n_ctx": 8192, "type_k": "q8_0", "type_v": "q8_0"}, 4.25 + 1.20, 75.4277),  # -ctk/-ctv q8_0
    ({"n_ctx": 512}, 0.50 + 1.50, 75.5215),                                     # -c 512
    ({"n_ctx": 4096, "flash_attn": False}, 4.00 + 2.25, 84.5137),               # -fa off
    ({"n_ctx": 4096, "n_ubatch": 128, "n_batch": 128}, 4.00 + 0.75, 17.6929),   # -ub 128 -b 128
]


@pytest.mark.parametrize("case,kv_mib,compute_mib", LLAMA_PRINTED)
def test_kv_and_compute_against_llama_cpp(fixture_gguf, case, kv_mib, compute_mib):
    m = read_gguf_model(fixture_gguf)
    c = LlamaCase(fixture="step35", **case)
    pred = predict_buffers(m, c, ())
    assert round(pred["kv"] / MIB, 2) == pytest.approx(kv_mib, abs=0.006)
    meas = compute_mib * MIB
    err = (pred["compute"] - meas) / meas
    assert abs(err) <= 0.10 or 0 < meas - pred["compute"] <= cb.fragmentation_allowance(m, case_placement(c))


def test_sliding_blocks_queries_use_their_own_head_count():
    m = load_profile("step-3.5-flash", "Q4_K_S")
    p = case_placement(LlamaCase(fixture="step35", n_ctx=4096))
    layers = cb._attention_layers(m, p, cb.reserve_shape(p))
    assert sorted(a["n_head"] for a in layers) == [64, 96]


def test_dense_lead_block_barriers_as_counted():
    counted = json.loads((Path(__file__).parent / "data" / "graph_barriers.json").read_text())["blocks"]["step35"]
    m = load_profile("step-3.5-flash", "Q4_K_S")
    assert graph.block_barriers(m, m.trunk_layers[:1], "llama.cpp") == counted[0]
    # a MoE block: the fixture's 40 plus one ADD per routed expert beyond its 4 (8 routed)
    assert graph.block_barriers(m, (m.trunk_layers[3],), "llama.cpp") == counted[1] + 4


def test_ktransformers_refuses_and_ik_llama_cpp_runs_it():
    m = load_profile("step-3.5-flash", "Q4_K_S")
    with pytest.raises(InputError) as e:
        resolve_placement(m, backend="ktransformers", cpu_moe_layers=10)
    assert "step35" in str(e.value)
    assert resolve_placement(m, backend="ik_llama.cpp", cpu_moe_layers=10).cpu_moe_layers
    assert archs.is_swa_layer("step35", {"block_count": 48, "nextn_predict_layers": 3,
                                         "attention.sliding_window_pattern": [True] * 48}, 46) is False
