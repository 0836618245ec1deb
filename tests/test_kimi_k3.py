"""Kimi-K3 (llama.cpp kimi-k3): KDA linear-attention blocks beside MLA blocks, latent MoE.

The profile is checked against the published tensor table (parameter count and checkpoint
bytes), the tensor list against a fixture llama.cpp loads and runs (tests/llama_fixtures.py
write_kimi_k3_llama), the MLA cache, the KDA state and the compute buffer against what
llama-completion printed for that fixture, the barriers against the counted decode graph, and
the backends without the architecture refuse it.
"""
from __future__ import annotations

import math

import pytest
from llama_fixtures import write_fixture
from llama_memlog import LlamaCase, predict_buffers

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
GIB = 2 ** 30
E, V = 7168, 163840

# the published tensor table of moonshotai/Kimi-K3 (search-index id 62826164383), text part:
# (HF shape, how many); MXFP4 experts as values (two per packed byte), their scales left out
KDA, MLA, LAYERS, MOE = 69, 24, 93, 92
PUBLISHED_TEXT = [
    ((V, E), 2),                                              # embed_tokens, lm_head
    ((128,), KDA), ((96, E), KDA), ((12288,), KDA),           # A_log, b_proj, dt_bias
    ((128, E), KDA), ((12288, 128), KDA),                     # f_a_proj, f_b_proj
    ((12288, 1, 4), KDA * 3), ((12288, E), KDA * 3),          # q/k/v conv1d, q/k/v proj
    ((128,), KDA),                                            # o_norm
    ((E,), LAYERS * 4), ((1, E), LAYERS * 2),                 # 2 layernorms, 2 res_norm; 2 res_proj
    ((12288, E), LAYERS * 2),                                 # g_proj, o_proj
    ((E, 33792), 3),                                          # the dense MLP of block 0
    ((3072, 3584), MOE * 896 * 3),                            # routed experts w1, w2, w3
    ((896,), MOE), ((896, E), MOE),                           # e_score_correction_bias, gate
    ((3584, E), MOE), ((3584,), MOE), ((E, 3584), MOE),       # routed_expert_down / norm / up
    ((E, 6144), MOE * 3),                                     # shared experts
    ((512,), MLA), ((576, E), MLA), ((24576, 512), MLA),      # kv_a norm, kv_a_mqa, kv_b
    ((1536,), MLA), ((1536, E), MLA), ((18432, 1536), MLA),   # q_a norm, q_a, q_b
    ((E,), 2), ((1, E), 1),                                   # norm, output_attn_res_norm / _proj
]
# the table's vision tower and projector (bf16), not in the text GGUF
PUBLISHED_VISION = (7168 + 4096 * 4096 + 7168 * 4096 + 1024 + 64 * 64 * 1024 + 1024 * 3 * 14 * 14
                    + 27 * (4096 * 1024 * 2 + 1024 * 2 + 1024 * 1536 + 4608 * 1024))


def _params(m) -> int:
    return sum(t.n_elements for t in m.globals) + sum(t.n_elements for layer in m.trunk_layers for t in layer.tensors)


@pytest.fixture(scope="module")
def fixture_gguf(tmp_path_factory):
    return write_fixture("kimi-k3", tmp_path_factory.mktemp("kimik3"))


def test_weights_match_the_published_tensor_table():
    published = sum(math.prod(shape) * n for shape, n in PUBLISHED_TEXT)
    assert published == 2_779_484_478_208
    m = load_profile("kimi-k3", "BF16")
    # conversion/kimi_k3.py fuses each res_norm x res_proj pair into one vector (two per block
    # and the output's) and keeps num_attention_heads = 96 of A_log's 128 values
    fused = 2 * LAYERS * E + E
    assert _params(m) == published - fused - KDA * (128 - 96)
    prof = find_profile("kimi-k3")
    assert _params(m) / 1e9 == pytest.approx(prof["total_params_b"], abs=0.05)
    active = _params(m) - sum(layer.expert_elements for layer in m.trunk_layers) * (1 - 16 / 896)
    assert active / 1e9 == pytest.approx(prof["active_params_b"], abs=0.05)


def test_native_bytes_are_the_published_checkpoint():
    # the table: tensors 1453.66 GiB; MXFP4 experts are 17 bytes per 32 values (weight_packed
    # + one uint8 scale), the rest bf16 save the f32 conv1d, A_log, dt_bias, o_norm and bias
    m = load_profile("kimi-k3", "native")
    total = m.file_bytes - _metadata_allowance(m)
    assert round((total + 2 * PUBLISHED_VISION) / GIB, 2) == pytest.approx(1453.66, abs=0.01)
    # --quant MXFP4 keeps the checkpoint's expert bytes
    mx = load_profile("kimi-k3", "MXFP4")
    exps = lambda spec: sum(t.n_bytes for layer in spec.trunk_layers for t in layer.tensors if t.group == "experts")
    assert exps(mx) == exps(m)


def _metadata_allowance(m) -> int:
    """The GGUF header bytes file_bytes includes beyond the tensors."""
    return m.file_bytes - sum(t.n_bytes for t in m.globals) - sum(
        t.n_bytes for layer in m.layers for t in layer.tensors)


def test_blocks_and_caches_follow_full_attn_layers():
    m = load_profile("kimi-k3")
    full = profile_config(find_profile("kimi-k3"))["text_config"]["linear_attn_config"]["full_attn_layers"]
    assert [layer.attention for layer in m.layers] == ["mla" if il + 1 in full else "recurrent" for il in range(93)]
    assert [layer.kind for layer in m.layers] == ["dense"] + ["moe"] * 92
    # KDA (llama-hparams.cpp n_embd_r / n_embd_s): conv 3 x (4 - 1) x 96 x 128, state 128 x 128 x 96
    assert [(c.name, c.n_embd, c.cells) for c in m.layers[0].kv] == [("r", 110592, "seq"), ("s", 1572864, "seq")]
    # MLA: one latent of kv_lora_rank + qk_rope_head_dim, K only
    assert [(c.name, c.n_embd, c.cells) for c in m.layers[3].kv] == [("k", 576, "ctx")]
    assert kv_layer_bytes(m.layers[3], n_ctx=4096, type_k="f16", type_v="f16") == 4096 * 1152
    assert m.n_experts == 896 and m.n_experts_used == 16
    t = {x.name: x.shape for x in m.layers[1].tensors}
    assert t["blk.1.ffn_up_exps.weight"] == (3584, 3072, 896)  # experts in the 3584-wide latent
    assert t["blk.1.ffn_routed_down.weight"] == (7168, 3584)
    assert t["blk.1.ffn_gate_shexp.weight"] == (7168, 6144)    # two shared experts of 3072


def test_converter_routes_on_the_container_class():
    """conversion/base.py get_model_architecture routes Kimi-K3 on its top-level class: its
    text_config names KimiLinearForCausalLM, the Kimi-Linear-48B architecture."""
    cfg = profile_config(find_profile("moonshotai/Kimi-K3"))
    assert cfg["text_config"]["architectures"] == ["KimiLinearForCausalLM"]
    arch, hp = gguf_hparams(cfg)
    assert arch == "kimi-k3"
    assert hp["attention.head_count_kv"][:8] == [0, 0, 0, 1, 0, 0, 0, 1]
    assert hp["attention.head_count_kv"][91:] == [1, 1]  # 92 and 93 both MLA
    assert (hp["attention.key_length"], hp["attention.value_length"]) == (576, 512)
    assert (hp["kda.head_dim"], hp["ssm.conv_kernel"], hp["expert_latent_length"]) == (128, 4, 3584)
    assert hp["context_length"] == 1048576 and hp["expert_used_count"] == 16
    assert sum(archs.is_recurrent_layer(arch, hp, il) for il in range(93)) == 69


def test_synthesised_tensors_are_the_ones_llama_cpp_loads(fixture_gguf):
    """The fixture loads and runs in llama.cpp 0c1e570 (kimi-k3.cpp load_arch_tensors accepts
    it); the tensor list moeplan synthesises from its header must be that list."""
    header = read_gguf_header(fixture_gguf)
    prefix = "kimi-k3."
    hp = {k[len(prefix):]: v for k, v in header.metadata.items() if k.startswith(prefix)}
    specs = tensor_specs("kimi-k3", hp, n_vocab=32000)
    assert sorted((s.name, s.shape) for s in specs) == sorted((t.name, tuple(t.shape)) for t in header.tensors)


# llama-completion (llama.cpp 0c1e570, CPU build) on the fixture, -fa on -fit off -nr --no-repack
# -v -t 2 -n 2: (flags, KV buffer MiB, RS buffer MiB, CPU compute buffer MiB) as printed by
# llama_kv_cache, llama_memory_recurrent and sched_reserve
LLAMA_PRINTED = [
    ({"n_ctx": 4096}, 9.00, 3.21, 70.51),                                  # -c 4096
    ({"n_ctx": 4096, "n_seq": 4}, 9.00, 12.84, 67.51),                     # -c 4096 -np 4
    ({"n_ctx": 8192, "type_k": "q8_0", "type_v": "q8_0"}, 9.56, 3.21, 74.51),  # -c 8192 -ctk/-ctv q8_0
    ({"n_ctx": 512}, 1.12, 3.21, 67.01),                                   # -c 512
]


@pytest.mark.parametrize("case,kv_mib,rs_mib,compute_mib", LLAMA_PRINTED)
def test_caches_and_compute_match_llama_cpp(fixture_gguf, case, kv_mib, rs_mib, compute_mib):
    m = read_gguf_model(fixture_gguf)
    args = {"type_k": "f16", "type_v": "f16", **case}
    kv = sum(kv_layer_bytes(layer, **args) for layer in m.trunk_layers if layer.attention == "mla")
    rs = sum(kv_layer_bytes(layer, **args) for layer in m.trunk_layers if layer.attention == "recurrent")
    assert round(kv / MIB, 2) == kv_mib
    assert round(rs / MIB, 2) == rs_mib
    # the generic phases (compute_buffer.py) for a graph they were not written from: the
    # residual checkpoint stack and the KDA scan are not modelled term by term
    pred = predict_buffers(m, LlamaCase(fixture="kimi-k3", **case), ())
    assert pred["compute"] / MIB == pytest.approx(compute_mib, rel=0.03)
    assert pred["output"] == 32000 * 4 * case.get("n_seq", 1)


def test_barriers_per_block_kind():
    m = load_profile("kimi-k3")
    by_kind = {(layer.kind, layer.attention): graph.block_barriers(m, (layer,), "llama.cpp") for layer in m.trunk_layers}
    # counted on the fixture, which routes 16 experts as K3
    assert by_kind == {("dense", "recurrent"): 76, ("moe", "recurrent"): 123, ("moe", "mla"): 94}
    assert graph.expert_split_barriers(m, "llama.cpp") == 12  # gate, up, 9 situ nodes, down


@pytest.mark.parametrize("backend", ["ik_llama.cpp", "ktransformers"])
def test_backends_without_the_architecture_refuse_it(backend):
    m = load_profile("kimi-k3")
    with pytest.raises(InputError) as e:
        resolve_placement(m, backend=backend, all_cpu_moe=True)
    assert "kimi-k3" in str(e.value) and "llama.cpp" in e.value.hint
    assert len(resolve_placement(m, backend="llama.cpp", all_cpu_moe=True).cpu_moe_layers) == 92
