"""ERNIE 4.5 MoE (llama.cpp ernie4_5-moe): the profiles against their published sizes, the
synthesised tensor index against a GGUF llama.cpp loads, the keys the converter writes, the KV
cache and compute buffer against what llama-completion allocated for that GGUF, the barrier
count of the dense lead block, and the backend that cannot run it refusing it."""
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
    return write_fixture("ernie4_5-moe", tmp_path_factory.mktemp("ernie"))


def _params(m) -> int:
    return sum(t.n_elements for t in m.globals) + sum(t.n_elements for layer in m.trunk_layers for t in layer.tensors)


def _active(m) -> float:
    k, n = m.n_experts_used, m.n_experts
    return _params(m) - m.n_vocab * m.n_embd - sum(layer.expert_elements for layer in m.trunk_layers) * (1 - k / n)


def test_21b_against_bartowskis_files():
    # bartowski/baidu_ERNIE-4.5-21B-A3B-PT-GGUF: bf16 43.66 GB, Q8_0 23.21 GB. With an untied
    # output head (0.27B more) the bf16 file would be 44.19 GB, without the shared FFN 42.39 GB
    bf16 = load_profile("baidu/ERNIE-4.5-21B-A3B-PT", "BF16")
    assert bf16.loaded_bytes / 1e9 == pytest.approx(43.66, abs=0.02)
    assert load_profile("ernie-4.5-21b-a3b", "Q8_0").loaded_bytes / 1e9 == pytest.approx(23.21, rel=0.002)
    assert _params(bf16) / 1e9 == pytest.approx(21, rel=0.05)
    assert 2.9e9 < _active(bf16) < 3.3e9  # "A3B"
    assert [layer.kind for layer in bf16.layers[:2]] == ["dense", "moe"] and len(bf16.layers) == 28


def test_300b_against_its_published_totals():
    m = load_profile("baidu/ERNIE-4.5-300B-A47B-PT", "BF16")
    assert _params(m) / 1e9 == pytest.approx(300, rel=0.005)
    # 47B active (the untied output head counted, the embedding lookup not); turboderp's 597.1
    # GB of safetensors without the embedding (tied: 595.58 GB, outside 0.1%)
    assert _active(m) / 1e9 == pytest.approx(47, rel=0.01)
    assert (_params(m) - m.n_vocab * m.n_embd) * 2 / 1e9 == pytest.approx(597.1, rel=0.001)
    assert [layer.kind for layer in m.layers[:4]] == ["dense"] * 3 + ["moe"] and len(m.layers) == 54
    # no shared experts in the 300B (moe_num_shared_experts 0): no shexp tensors
    assert not any("shexp" in t.name for layer in m.layers for t in layer.tensors)


def test_converter_keys():
    arch, hp = gguf_hparams(profile_config(find_profile("ernie-4.5-21b-a3b")))
    assert arch == "ernie4_5-moe" and hp["block_count"] == 28 and "nextn_predict_layers" not in hp
    assert (hp["expert_count"], hp["expert_used_count"], hp["leading_dense_block_count"]) == (64, 6, 1)
    # conversion/ernie.py: intermediate_size // num_key_value_heads = 12288 // 4 = 2 x 1536
    assert (hp["expert_shared_count"], hp["expert_shared_feed_forward_length"]) == (2, 3072)
    assert hp["interleave_moe_layer_step"] == 1 and hp["feed_forward_length"] == 12288
    _, hp300 = gguf_hparams(profile_config(find_profile("ernie-4.5-300b-a47b")))
    assert hp300["expert_shared_count"] == 0 and "expert_shared_feed_forward_length" not in hp300


def test_synthesised_tensors_are_the_ones_llama_cpp_loads(fixture_gguf):
    """llama-completion loads and runs the fixture (ernie4-5.cpp creates exactly its tensors);
    the list moeplan synthesises from its header must be that list."""
    header = read_gguf_header(fixture_gguf)
    p = "ernie4_5-moe."
    hp = {k[len(p):]: v for k, v in header.metadata.items() if k.startswith(p)}
    specs = tensor_specs("ernie4_5-moe", hp, n_vocab=32000, options={"tied": True})
    assert sorted((s.name, s.shape) for s in specs) == sorted((t.name, tuple(t.shape)) for t in header.tensors)


# llama-completion (llama.cpp 0c1e570, CPU build) on the fixture, -p 'hello world' -n 2 -t 2
# -no-cnv -fit off -v --no-repack: the KV buffer and the CPU compute buffer it prints (MiB)
LLAMA_PRINTED = [
    ({"n_ctx": 4096}, 24.00, 78.6895),                                    # -fa on -c 4096
    ({"n_ctx": 4096, "n_seq": 4}, 24.00, 79.5137),                        # -c 4096 -np 4
    ({"n_ctx": 8192, "type_k": "q8_0", "type_v": "q8_0"}, 25.50, 78.6895),  # -c 8192 -ctk/-ctv q8_0
    ({"n_ctx": 512}, 3.00, 79.0137),                                      # -c 512
    ({"n_ctx": 4096, "flash_attn": False}, 24.00, 89.1973),               # -fa off
    ({"n_ctx": 4096, "n_ubatch": 128, "n_batch": 128}, 24.00, 19.6724),   # -ub 128 -b 128
]


@pytest.mark.parametrize("case,kv_mib,compute_mib", LLAMA_PRINTED)
def test_kv_against_llama_cpp(fixture_gguf, case, kv_mib, compute_mib):
    m = read_gguf_model(fixture_gguf)
    pred = predict_buffers(m, LlamaCase(fixture="ernie4_5-moe", **case), ())
    assert round(pred["kv"] / MIB, 2) == pytest.approx(kv_mib, abs=0.006)


# moeplan's live-set phases put the peak at the output phase (logits 62.5 MiB + 4 MiB) and miss
# ~12.2 MiB of what llama.cpp allocates at n_ubatch 512 (3.05 MiB at 128: it scales with the
# ubatch); the gap stays 12.19 MiB with the dense lead block's n_ff at 2048 or 8192 and with an
# untied output, so it is not the dense MLP nor the tied head. Cause not found: a known miss,
# strict so that the test reports when it is fixed.
@pytest.mark.xfail(strict=True, reason="compute buffer ~15% under llama.cpp's on the ERNIE fixture (cause not found)")
@pytest.mark.parametrize("case,kv_mib,compute_mib", [c for c in LLAMA_PRINTED if c[0].get("flash_attn", True)])
def test_compute_against_llama_cpp(fixture_gguf, case, kv_mib, compute_mib):
    m = read_gguf_model(fixture_gguf)
    c = LlamaCase(fixture="ernie4_5-moe", **case)
    pred = predict_buffers(m, c, ())
    meas = compute_mib * MIB
    err = (pred["compute"] - meas) / meas
    assert abs(err) <= 0.10 or 0 < meas - pred["compute"] <= cb.fragmentation_allowance(m, case_placement(c))


def test_dense_lead_and_moe_block_barriers_as_counted():
    counted = json.loads((Path(__file__).parent / "data" / "graph_barriers.json").read_text())["blocks"]["ernie4_5-moe"]
    m = load_profile("ernie-4.5-21b-a3b", "Q4_K_M")
    assert graph.block_barriers(m, m.trunk_layers[:1], "llama.cpp") == counted[0]
    # a MoE block: the fixture's 34 plus one ADD per routed expert beyond its 4 (6 routed)
    assert graph.block_barriers(m, (m.trunk_layers[1],), "llama.cpp") == counted[1] + 2


def test_ktransformers_refuses_and_ik_llama_cpp_runs_it():
    m = load_profile("ernie-4.5-300b-a47b", "Q4_K_M")
    with pytest.raises(InputError) as e:
        resolve_placement(m, backend="ktransformers", cpu_moe_layers=10)
    assert "ernie4_5-moe" in str(e.value)
    assert resolve_placement(m, backend="ik_llama.cpp", cpu_moe_layers=10).cpu_moe_layers
