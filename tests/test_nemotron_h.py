"""Nemotron 3 (llama.cpp nemotron_h_moe): hybrid Mamba-2 + attention + MoE blocks.

The tensor list and caches are checked against a fixture llama.cpp loads and runs
(tests/llama_fixtures.py write_nemotron_h_moe_llama), the parameter counts against the
published totals, and the backends that cannot load the architecture refuse it.
"""
from __future__ import annotations

import pytest
from llama_fixtures import write_fixture

from moeplan.commands.placement_opts import resolve_placement
from moeplan.errors import InputError
from moeplan.planner.cost import graph
from moeplan.planner.memory.accounting import kv_layer_bytes
from moeplan.planner.model import archs
from moeplan.planner.model.synth import gguf_hparams, tensor_specs
from moeplan.probes.gguf_file import read_gguf_header
from moeplan.probes.gguf_model import read_gguf_model
from moeplan.profiles.model_profiles import find_profile, load_profile, profile_config

MIB = 2 ** 20


def _params(m, trunk_only=True) -> int:
    layers = m.trunk_layers if trunk_only else m.layers
    return sum(t.n_elements for t in m.globals) + sum(t.n_elements for layer in layers for t in layer.tensors)


def _active(m) -> float:
    k, n = m.n_experts_used, m.n_experts
    return _params(m) - sum(layer.expert_elements for layer in m.trunk_layers) * (1 - k / n)


@pytest.fixture(scope="module")
def fixture_gguf(tmp_path_factory):
    return write_fixture("nemotron_h_moe", tmp_path_factory.mktemp("nemotron"))


def test_nano_blocks_follow_the_hybrid_pattern():
    m = load_profile("nemotron-3-nano-30b-a3b", "Q4_K_M")
    pattern = profile_config(find_profile("nemotron-3-nano-30b-a3b"))["hybrid_override_pattern"]
    want = {"M": ("dense", "recurrent"), "*": ("dense", "full"), "E": ("moe", "none")}
    assert [(layer.kind, layer.attention) for layer in m.layers] == [want[c] for c in pattern]
    assert (pattern.count("M"), pattern.count("*"), pattern.count("E")) == (23, 6, 23)
    assert m.n_ctx_train == 2 ** 20  # GraniteHybridModel: no rope, context_length 2**20
    # Mamba-2 state per sequence (llama-hparams.cpp n_embd_r / n_embd_s): conv (4 - 1) x
    # (4096 + 2 x 8 x 128) and ssm 128 x 4096, f32
    rec = [c for c in m.layers[0].kv]
    assert [(c.name, c.n_embd, c.cells) for c in rec] == [("r", 3 * 6144, "seq"), ("s", 128 * 4096, "seq")]
    # only the 6 attention blocks keep K/V: 2 heads of 128
    assert sum(1 for layer in m.layers for c in layer.kv if c.cells == "ctx") == 12


def test_parameter_counts_match_the_published_figures():
    nano = load_profile("nemotron-3-nano-30b-a3b", "BF16")
    # model card: 31.6B total; ~3.2B active, 3.6B with embeddings
    assert _params(nano) / 1e9 == pytest.approx(31.6, abs=0.05)
    assert _active(nano) / 1e9 == pytest.approx(3.6, abs=0.05)
    assert (_active(nano) - nano.n_vocab * nano.n_embd) / 1e9 == pytest.approx(3.2, abs=0.05)
    sup = load_profile("nemotron-3-super-120b-a12b", "BF16")
    # the BF16 safetensors headers: 123,611,012,096 weights, 2,942,324,736 of them the MTP
    # block (search-index id 70181782850); the converter keeps that block, llama.cpp skips it
    assert _params(sup) == pytest.approx(123_611_012_096 - 2_942_324_736, rel=1e-6)
    assert _params(sup, trunk_only=False) == pytest.approx(123_611_012_096, rel=1e-6)
    assert len(sup.layers) == 89 and sup.layers[-1].kind == "nextn"
    assert _active(sup) / 1e9 == pytest.approx(12.77, abs=0.01)
    # LatentMoE: the experts run in 1024 dims between ffn_latent_down and ffn_latent_up
    t = {x.name: x.shape for x in sup.layers[1].tensors}
    assert t["blk.1.ffn_up_exps.weight"] == (1024, 2688, 512)
    assert t["blk.1.ffn_latent_down.weight"] == (4096, 1024)


def test_synthesised_tensors_are_the_ones_llama_cpp_loads(fixture_gguf):
    """The fixture loads and runs in llama.cpp (nemotron-h.cpp load_arch_tensors accepts it);
    the tensor list moeplan synthesises from its header must be that list."""
    header = read_gguf_header(fixture_gguf)
    prefix = "nemotron_h_moe."
    hp = {k[len(prefix):]: v for k, v in header.metadata.items() if k.startswith(prefix)}
    specs = tensor_specs("nemotron_h_moe", hp, n_vocab=32000)
    assert sorted((s.name, s.shape) for s in specs) == sorted((t.name, tuple(t.shape)) for t in header.tensors)


def test_converter_writes_the_pattern_as_per_block_arrays():
    arch, hp = gguf_hparams(profile_config(find_profile("nemotron-3-nano-30b-a3b")))
    assert arch == "nemotron_h_moe"
    assert hp["attention.head_count_kv"][:6] == [0, 0, 0, 0, 0, 2]
    assert hp["feed_forward_length"][:3] == [0, 1856, 0]
    assert (hp["ssm.inner_size"], hp["ssm.time_step_rank"], hp["ssm.group_count"]) == (4096, 64, 8)
    assert [archs.is_recurrent_layer(arch, hp, i) for i in range(6)] == [True, False, True, False, True, False]


# llama-completion (llama.cpp 0c1e570, CPU build) on the fixture, -fa on -fit off -nr -v:
# (flags, KV buffer MiB, RS buffer MiB) as printed by llama_kv_cache / llama_memory_recurrent
LLAMA_PRINTED = [
    ({"n_ctx": 4096}, 8.00, 1.61),                            # -c 4096
    ({"n_ctx": 4096, "n_seq": 4}, 8.00, 6.42),                # -c 4096 -np 4
    ({"n_ctx": 8192, "type_k": "q8_0", "type_v": "q8_0"}, 8.50, 1.61),  # -c 8192 -ctk q8_0 -ctv q8_0
    ({"n_ctx": 512}, 1.00, 1.61),                             # -c 512
]


@pytest.mark.parametrize("case,kv_mib,rs_mib", LLAMA_PRINTED)
def test_cache_and_recurrent_state_match_llama_cpp(fixture_gguf, case, kv_mib, rs_mib):
    m = read_gguf_model(fixture_gguf)
    args = {"type_k": "f16", "type_v": "f16", **case}
    kv = sum(kv_layer_bytes(layer, **args) for layer in m.trunk_layers if layer.attention == "full")
    rs = sum(kv_layer_bytes(layer, **args) for layer in m.trunk_layers if layer.attention == "recurrent")
    assert round(kv / MIB, 2) == kv_mib
    assert round(rs / MIB, 2) == rs_mib


def test_barriers_per_block_kind():
    m = load_profile("nemotron-3-nano-30b-a3b", "Q4_K_M")
    by_kind = {layer.attention: graph.block_barriers(m, (layer,), "llama.cpp") for layer in m.trunk_layers}
    assert by_kind == {"recurrent": 25, "full": 9, "none": 26}  # Nano routes 6 experts, as the fixture
    sup = load_profile("nemotron-3-super-120b-a12b", "Q4_K_M")
    moe = sup.moe_layers[0]
    assert graph.block_barriers(sup, (moe,), "llama.cpp") == 26 + 22 - 6  # one ADD per routed expert


@pytest.mark.parametrize("backend", ["ik_llama.cpp", "ktransformers"])
def test_backends_without_the_architecture_refuse_it(backend):
    m = load_profile("nemotron-3-nano-30b-a3b", "Q4_K_M")
    with pytest.raises(InputError) as e:
        resolve_placement(m, backend=backend, cpu_moe_layers=10)
    assert "nemotron_h_moe" in str(e.value) and "llama.cpp" in e.value.hint
    assert resolve_placement(m, backend="llama.cpp", cpu_moe_layers=10).cpu_moe_layers == m.moe_layer_indices[:10]
