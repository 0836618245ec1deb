"""dots.llm1 (llama.cpp dots1): the profile against its published parameter counts, the
converter's keys, the synthesised tensor index against a GGUF llama.cpp loads, the KV cache and
compute buffer against what llama-completion allocated for that GGUF, the barrier count of its
dense lead block, and the backend that cannot run it refusing it."""
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
from moeplan.planner.model.synth import gguf_hparams, tensor_specs
from moeplan.probes.gguf_file import read_gguf_header
from moeplan.probes.gguf_model import read_gguf_model
from moeplan.profiles.model_profiles import find_profile, load_profile, profile_config

MIB = 2 ** 20


@pytest.fixture(scope="module")
def fixture_gguf(tmp_path_factory):
    return write_fixture("dots1", tmp_path_factory.mktemp("dots1"))


def _params(m) -> int:
    return sum(t.n_elements for t in m.globals) + sum(t.n_elements for layer in m.trunk_layers for t in layer.tensors)


def test_parameters_match_the_published_counts():
    m = load_profile("rednote-hilab/dots.llm1.inst", "BF16")
    # README: 142B total (llama.cpp: LLM_TYPE_142B); the index counts 142.77B (without the 2
    # shared experts it would be 140.67B, with 8 KV heads instead of 32 139.88B: both > 1% off)
    assert _params(m) / 1e9 == pytest.approx(142, rel=0.01)
    # 14B activated: attention, the dense block, embeddings and output, 6 of 128 experts and
    # the shared experts
    k, n = m.n_experts_used, m.n_experts
    active = _params(m) - sum(layer.expert_elements for layer in m.trunk_layers) * (1 - k / n)
    assert active / 1e9 == pytest.approx(14, rel=0.02)
    assert len(m.layers) == 62 and [layer.kind for layer in m.layers[:2]] == ["dense", "moe"]


def test_converter_keys():
    arch, hp = gguf_hparams(profile_config(find_profile("dots.llm1")))
    assert arch == "dots1" and hp["block_count"] == 62 and "nextn_predict_layers" not in hp
    assert (hp["attention.head_count"], hp["attention.head_count_kv"]) == (32, 32)
    assert (hp["expert_count"], hp["expert_used_count"], hp["expert_shared_count"]) == (128, 6, 2)
    assert (hp["leading_dense_block_count"], hp["expert_feed_forward_length"], hp["feed_forward_length"]) == (1, 1408, 10944)
    assert (hp["expert_weights_scale"], hp["expert_weights_norm"], hp["expert_gating_func"]) == (2.5, True, 2)
    m = load_profile("dots.llm1", "Q4_K_M")
    t = {x.name: x.shape for x in m.layers[1].tensors}
    # the shared experts fused: n_ff_exp x n_expert_shared
    assert t["blk.1.ffn_up_shexp.weight"] == (4096, 2816) and t["blk.1.attn_k.weight"] == (4096, 4096)
    # MHA: every block caches 32 KV heads of 128 for K and V
    assert [(c.name, c.n_embd) for c in m.trunk_layers[1].kv] == [("k", 4096), ("v", 4096)]


def test_synthesised_tensors_are_the_ones_llama_cpp_loads(fixture_gguf):
    """llama-completion loads and runs the fixture (dots1.cpp creates exactly its tensors); the
    list moeplan synthesises from its header must be that list."""
    header = read_gguf_header(fixture_gguf)
    hp = {k[len("dots1."):]: v for k, v in header.metadata.items() if k.startswith("dots1.")}
    specs = tensor_specs("dots1", hp, n_vocab=32000)
    assert sorted((s.name, s.shape) for s in specs) == sorted((t.name, tuple(t.shape)) for t in header.tensors)


# llama-completion (llama.cpp 0c1e570, CPU build) on the fixture, -fa on -fit off -v
# --no-repack: the KV buffer llama_kv_cache prints (MiB) and the CPU compute buffer (MiB, the
# 4-decimal figure ~llama_context prints)
LLAMA_PRINTED = [
    ({"n_ctx": 4096}, 96.00, 68.5020),                                      # -c 4096
    ({"n_ctx": 4096, "n_seq": 4}, 96.00, 71.5137),                          # -c 4096 -np 4
    ({"n_ctx": 4096, "type_k": "q8_0", "type_v": "q8_0"}, 51.00, 68.5020),   # -ctk/-ctv q8_0
    ({"n_ctx": 512}, 12.00, 71.0137),                                       # -c 512
    ({"n_ctx": 4096, "flash_attn": False}, 96.00, 86.0098),                 # -fa off
    ({"n_ctx": 4096, "n_ubatch": 128, "n_batch": 128}, 96.00, 17.1255),     # -ub 128 -b 128
]


@pytest.mark.parametrize("case,kv_mib,compute_mib", LLAMA_PRINTED)
def test_kv_and_compute_against_llama_cpp(fixture_gguf, case, kv_mib, compute_mib):
    m = read_gguf_model(fixture_gguf)
    c = LlamaCase(fixture="dots1", **case)
    pred = predict_buffers(m, c, ())
    assert round(pred["kv"] / MIB, 2) == pytest.approx(kv_mib, abs=0.006)
    meas = compute_mib * MIB
    err = (pred["compute"] - meas) / meas
    assert abs(err) <= 0.10 or 0 < meas - pred["compute"] <= cb.fragmentation_allowance(m, case_placement(c))


@pytest.mark.xfail(strict=True, reason="at -c 8192 llama.cpp's compute buffer of this fixture is 8 MiB "
                   "larger (76.51 MiB f16, 78.59 q8_0) while -c 4096 and -c 16384 both give 68.50: "
                   "ggml-alloc's placement, which moeplan does not model")
def test_compute_at_8192_cells_is_a_known_gap(fixture_gguf):
    m = read_gguf_model(fixture_gguf)
    c = LlamaCase(fixture="dots1", n_ctx=8192, type_k="q8_0", type_v="q8_0")
    pred = predict_buffers(m, c, ())
    assert round(pred["kv"] / MIB, 2) == pytest.approx(102.00, abs=0.006)  # llama_kv_cache printed 102.00
    assert abs(pred["compute"] / (78.5918 * MIB) - 1) <= 0.10


def test_dense_lead_block_barriers_as_counted():
    counted = json.loads((Path(__file__).parent / "data" / "graph_barriers.json").read_text())["blocks"]["dots1"]
    m = load_profile("dots.llm1", "Q4_K_M")
    assert graph.block_barriers(m, m.trunk_layers[:1], "llama.cpp") == counted[0]
    # a MoE block routes 6 experts as the fixture
    assert graph.block_barriers(m, (m.trunk_layers[1],), "llama.cpp") == counted[1]


def test_ktransformers_refuses_and_ik_llama_cpp_runs_it():
    m = load_profile("dots.llm1", "Q4_K_M")
    with pytest.raises(InputError) as e:
        resolve_placement(m, backend="ktransformers", cpu_moe_layers=10)
    assert "dots1" in str(e.value)
    assert resolve_placement(m, backend="ik_llama.cpp", cpu_moe_layers=10).cpu_moe_layers
