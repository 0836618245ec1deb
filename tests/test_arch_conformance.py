"""Every architecture of the registry through every reader: one parametrised suite.

Per architecture, a bundled profile (its published config.json) is
  - written as a Hugging Face folder (config.json verbatim, sparse safetensors headers for the
    routed experts) and read back (probes/hf.py): the same architecture, experts, experts per
    token, expert width and MoE blocks as the profile, the expert bytes written;
  - written as a GGUF by the `gguf` package (every hyper-parameter under `{arch}.`, every
    tensor of the profile's Q4_K_M index, data left sparse) and read back
    (probes/gguf_model.py): the same ModelSpec, block by block, tensor by tensor;
  - planned: memory (estimate_memory) and cost (estimate) are the same for the profile and the
    GGUF, the KV cache is what accounting counts, decode and prefill speeds are finite;
  - listed (`moeplan models`): experts and experts per token as the GGUF keys say.
qwen2moe, the one record without a tensor builder (no profile), goes through a Hugging Face
folder of Qwen1.5-MoE-A2.7B's config and a small GGUF, and through memory and cost.

The architecture-specific checks that used to live in seven copied modules (test_dots1,
test_ernie4_5_moe, test_gemma4, test_hunyuan_moe, test_kimi_k3, test_nemotron_h, test_step35)
follow as tables (tensor lists against fixtures llama.cpp loads, buffers against what
llama.cpp printed, barriers, backends that refuse) and, for what only one model has (its
published parameter counts and layouts), one test each below the tables.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from arch_fixtures import write_sparse_gguf, write_sparse_hf_folder, write_sparse_safetensors
from gguf import GGUFWriter
from gguf_fixtures import Q, _add
from gguf_fixtures import nbytes as gf_nbytes
from llama_fixtures import write_fixture
from llama_memlog import LlamaCase, case_placement, predict_buffers
from model_builders import toy_hw, unit_priors

from moeplan.commands.placement_opts import resolve_placement
from moeplan.errors import InputError
from moeplan.planner.cost import graph
from moeplan.planner.cost.estimate import estimate
from moeplan.planner.memory import compute_buffer as cb
from moeplan.planner.memory.accounting import estimate_memory, kv_cache_bytes, kv_layer_bytes
from moeplan.planner.model import archs, registry
from moeplan.planner.model.synth import gguf_hparams, tensor_specs
from moeplan.planner.placement import Placement
from moeplan.probes.gguf_file import read_gguf_header
from moeplan.probes.gguf_model import read_gguf_model
from moeplan.probes.hf import read_hf_model
from moeplan.profiles.model_profiles import find_profile, list_profiles, load_profile, profile_config

MIB = 2 ** 20
GIB = 2 ** 30
DATA = Path(__file__).parent / "data"

# one bundled profile per architecture (the registry's records with a tensor builder)
PROFILE = {
    "deepseek2": "deepseek-coder-v2", "deepseek4": "deepseek-v4-flash", "glm-dsa": "glm-5.1",
    "deepseek32": "deepseek-v3.2", "qwen3moe": "qwen3-235b-a22b", "qwen3next": "qwen3-next-80b-a3b",
    "qwen35moe": "qwen3.5-122b-a10b", "gpt-oss": "gpt-oss-120b", "glm4moe": "glm-4.5", "llama4": "llama-4-maverick",
    "llama": "mixtral-8x7b", "nemotron_h_moe": "nemotron-3-nano-30b-a3b", "minimax-m2": "minimax-m2",
    "kimi-k3": "kimi-k3", "gemma4": "gemma-4-26b-a4b", "step35": "step-3.5-flash", "hunyuan-moe": "hunyuan-a13b",
    "dots1": "dots.llm1", "ernie4_5-moe": "ernie-4.5-21b-a3b",
}
# qwen2moe has no tensor builder (moeplan reads it from GGUF files and HF folders only):
# Qwen1.5-MoE-A2.7B's config.json as Qwen/Qwen1.5-MoE-A2.7B-Chat-GPTQ-Int4 publishes it (a
# public dump of that file); shared_expert_intermediate_size and vocab_size are
# transformers' Qwen2MoeConfig defaults, which that file leaves to them
QWEN2_MOE = {
    "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "decoder_sparse_step": 1,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5632, "max_position_embeddings": 32768,
    "max_window_layers": 21, "moe_intermediate_size": 1408, "norm_topk_prob": False, "num_attention_heads": 16,
    "num_experts": 60, "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 16,
    "shared_expert_intermediate_size": 5632, "vocab_size": 151936,
}
ARCHS = sorted(registry.ARCHS)
SYNTH = sorted(PROFILE)


def test_every_architecture_has_a_case():
    assert set(PROFILE) | {"qwen2moe"} == set(ARCHS)
    assert {a for a in ARCHS if registry.get(a).tensors is None} == {"qwen2moe"}
    for arch, name in PROFILE.items():
        assert gguf_hparams(profile_config(find_profile(name)))[0] == arch


def _profile_hp(name: str) -> dict:
    """The hyper-parameters load_profile's GGUF recipes use (spec_from_profile)."""
    prof = find_profile(name)
    return gguf_hparams(profile_config(prof), n_mtp=prof.get("conversion", {}).get("mtp_layers"))[1]


@pytest.fixture(scope="module")
def profiles():
    return {arch: load_profile(name, "Q4_K_M") for arch, name in PROFILE.items()}


# ---- Hugging Face folder ------------------------------------------------------------------------

@pytest.mark.parametrize("arch", SYNTH)
def test_hf_folder(arch, profiles, tmp_path):
    """The published config.json, read as a folder, gives the profile's MoE facts: catches an
    architecture whose keys one reader does not know (ERNIE-4.5 and Step-3.5 folders refused as
    dense, Hunyuan-A13B's per-layer moe_intermediate_size refused as a bad number)."""
    m = profiles[arch]
    written = write_sparse_hf_folder(tmp_path / arch, profile_config(find_profile(PROFILE[arch])), m)
    h = read_hf_model(tmp_path / arch)
    assert (h.arch, h.source) == (arch, "hf")
    assert (h.n_experts, h.n_experts_used, h.n_ff_exp) == (m.n_experts, m.n_experts_used, m.n_ff_exp)
    assert h.n_experts_shared == m.n_experts_shared
    assert h.moe_layer_indices == m.moe_layer_indices
    assert h.expert_bytes == written and h.n_ctx_train == m.n_ctx_train


def test_hf_folder_qwen2moe(tmp_path):
    n_embd, n_ff, n_exp = 2048, 1408, 60
    tensors = {}
    for il in range(24):
        for proj, shape in (("gate_proj", (n_exp, n_ff, n_embd)), ("up_proj", (n_exp, n_ff, n_embd)),
                            ("down_proj", (n_exp, n_embd, n_ff))):
            tensors[f"model.layers.{il}.mlp.experts.{proj}"] = ("BF16", shape, math.prod(shape) * 2)
    (tmp_path / "config.json").write_text(json.dumps(QWEN2_MOE))
    written = write_sparse_safetensors(tmp_path / "model.safetensors", tensors)
    h = read_hf_model(tmp_path)
    assert (h.arch, h.n_experts, h.n_experts_used, h.n_ff_exp, h.n_layers) == ("qwen2moe", 60, 4, 1408, 24)
    assert h.expert_bytes == written and dict(h.extra)["expert_shared_feed_forward_length"] == 5632


# ---- GGUF ---------------------------------------------------------------------------------------

def write_qwen2moe(path: Path, *, n_layer=3, n_embd=64, n_head=4, n_ff_exp=32, n_ff_shexp=64, n_expert=6,
                   n_used=2, n_vocab=96) -> tuple[Path, list]:
    """A qwen2moe GGUF as llama.cpp's qwen2moe.cpp load_arch_tensors wants it: q/k/v biases,
    every block MoE beside a gated shared expert (ffn_gate_inp_shexp)."""
    w = GGUFWriter(str(path), "qwen2moe")
    written: list = []
    w.add_name("tiny-qwen2moe")
    w.add_block_count(n_layer)
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(4 * n_ff_exp)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_used)
    w.add_expert_feed_forward_length(n_ff_exp)
    w.add_expert_shared_feed_forward_length(n_ff_shexp)
    w.add_layer_norm_rms_eps(1e-6)
    _add(w, written, "token_embd.weight", (n_embd, n_vocab), Q.Q8_0)
    _add(w, written, "output_norm.weight", (n_embd,))
    _add(w, written, "output.weight", (n_embd, n_vocab), Q.Q8_0)
    for i in range(n_layer):
        b = f"blk.{i}."
        _add(w, written, b + "attn_norm.weight", (n_embd,))
        for t in ("q", "k", "v"):
            _add(w, written, b + f"attn_{t}.weight", (n_embd, n_embd), Q.Q8_0)
            _add(w, written, b + f"attn_{t}.bias", (n_embd,))
        _add(w, written, b + "attn_output.weight", (n_embd, n_embd), Q.Q8_0)
        _add(w, written, b + "ffn_norm.weight", (n_embd,))
        _add(w, written, b + "ffn_gate_inp.weight", (n_embd, n_expert))
        for t in ("gate", "up"):
            _add(w, written, b + f"ffn_{t}_exps.weight", (n_embd, n_ff_exp, n_expert), Q.Q8_0)
            _add(w, written, b + f"ffn_{t}_shexp.weight", (n_embd, n_ff_shexp), Q.Q8_0)
        _add(w, written, b + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), Q.Q8_0)
        _add(w, written, b + "ffn_down_shexp.weight", (n_ff_shexp, n_embd), Q.Q8_0)
        _add(w, written, b + "ffn_gate_inp_shexp.weight", (n_embd,))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, written


def test_gguf_memory_and_cost_qwen2moe(tmp_path):
    """The architecture without a tensor builder, from a GGUF alone."""
    path, written = write_qwen2moe(tmp_path / "qwen2moe.gguf")
    m = read_gguf_model(path)
    assert (m.arch, m.n_experts, m.n_experts_used, m.n_ff_exp, m.n_experts_shared) == ("qwen2moe", 6, 2, 32, 1)
    assert m.moe_layer_indices == (0, 1, 2) and m.attention_kind == "GQA"
    assert m.tensor_bytes == sum(gf_nbytes(shape, q) for _, shape, q in written)
    p = _cpu_experts(m)
    assert estimate_memory(m, p).get("kv_cache") == kv_cache_bytes(m, 8192) == 3 * 2 * 64 * 2 * 8192
    e = estimate(m, p, toy_hw(), unit_priors())
    assert 0 < e.decode_tok_s < math.inf and 0 < e.prefill_tok_s < math.inf


def _layout(m):
    return [(layer.index, layer.kind, layer.attention, layer.kv) for layer in m.layers]


@pytest.fixture(scope="module")
def ggufs(profiles, tmp_path_factory):
    folder = tmp_path_factory.mktemp("arch-gguf")
    return {arch: read_gguf_model(write_sparse_gguf(folder / f"{arch}.gguf", m, _profile_hp(PROFILE[arch])))
            for arch, m in profiles.items()}


@pytest.mark.parametrize("arch", SYNTH)
def test_gguf(arch, profiles, ggufs):
    """The profile's hyper-parameters and tensors as a GGUF the `gguf` package writes read
    back as the same model: the GGUF keys and the config keys describe one architecture."""
    m, g = profiles[arch], ggufs[arch]
    assert (g.arch, g.source) == (arch, "gguf")
    assert _layout(g) == _layout(m)
    assert g.tensors == m.tensors and g.loaded_bytes == m.loaded_bytes
    for f in ("n_embd", "n_vocab", "n_ctx_train", "n_head", "n_experts", "n_experts_used", "n_experts_shared",
              "n_ff_exp", "attention_kind", "mla"):
        assert getattr(g, f) == getattr(m, f), f
    assert g.file_bytes >= g.tensor_bytes


# ---- profile ------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", SYNTH)
def test_profile(arch, profiles):
    """`moeplan models` reads experts and experts per token under the architecture's own
    config names (its record's HfKeys), as the GGUF keys have them."""
    m, hp = profiles[arch], _profile_hp(PROFILE[arch])
    row = next(r for r in list_profiles() if r["name"] == PROFILE[arch])
    assert (row["arch"], row["n_experts"], row["n_experts_used"]) == (arch, hp["expert_count"], hp["expert_used_count"])
    assert (m.n_experts, m.n_experts_used) == (hp["expert_count"], hp["expert_used_count"])
    lead = int(hp.get("leading_dense_block_count", 0) or 0)
    assert all(layer.kind == "dense" for layer in m.trunk_layers[:lead]) and m.moe_layers


# ---- memory and cost ----------------------------------------------------------------------------

def _cpu_experts(m) -> Placement:
    return Placement(n_ctx=8192, cpu_moe_layers=m.moe_layer_indices)


@pytest.mark.parametrize("arch", SYNTH)
def test_memory_and_cost(arch, profiles, ggufs):
    """What the planner makes of a model does not depend on which reader built it."""
    m, g = profiles[arch], ggufs[arch]
    p = _cpu_experts(m)
    mem = estimate_memory(m, p)
    assert mem == estimate_memory(g, p)
    assert mem.get("kv_cache") == kv_cache_bytes(m, 8192) > 0
    hw, pr = toy_hw(vram_gib=4096, ram_gib=4096), unit_priors()
    a, b = estimate(m, p, hw, pr), estimate(g, p, hw, pr)
    assert (a.decode_tok_s, a.prefill_tok_s) == (b.decode_tok_s, b.prefill_tok_s)
    assert 0 < a.decode_tok_s < math.inf and 0 < a.prefill_tok_s < math.inf


# ---- tensor lists against fixtures llama.cpp loads ------------------------------------------------
# each fixture loads and runs in llama-completion (llama.cpp 0c1e570): <arch>.cpp
# load_arch_tensors creates exactly its tensors; the list moeplan synthesises from its header
# must be that list. (fixture, layout options, NextN extras)
NEXTN = ("eh_proj", "enorm", "hnorm", "shared_head_norm")
FIXTURE_TENSORS = {
    "dots1": ({}, NEXTN),
    "ernie4_5-moe": ({"tied": True}, NEXTN),
    "gemma4": ({"tied": True, "k_eq_v": True}, NEXTN),
    "hunyuan-moe": ({"tied": True}, NEXTN),
    "kimi-k3": ({}, NEXTN),
    "nemotron_h_moe": ({}, NEXTN),
    "step35": ({"rope_freqs": True}, NEXTN + ("shared_head_head",)),
}


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama-fixtures")
    return {name: write_fixture(name, folder) for name in FIXTURE_TENSORS}


@pytest.mark.parametrize("arch", sorted(FIXTURE_TENSORS))
def test_synthesised_tensors_are_the_ones_llama_cpp_loads(arch, fixtures):
    options, extras = FIXTURE_TENSORS[arch]
    header = read_gguf_header(fixtures[arch])
    pre = arch + "."
    hp = {k[len(pre):]: v for k, v in header.metadata.items() if k.startswith(pre)}
    specs = tensor_specs(arch, hp, n_vocab=32000, options=options, mtp_tensors=extras)
    assert sorted((s.name, s.shape) for s in specs) == sorted((t.name, tuple(t.shape)) for t in header.tensors)


# ---- buffers against what llama-completion printed for the fixture ---------------------------------
# llama-completion (llama.cpp 0c1e570, CPU build) on the fixture, -fa on -fit off -v
# --no-repack (-nr where the fixture is recurrent or ISWA): (arch, flags, KV MiB, CPU compute
# MiB) as llama_kv_cache / llama_kv_cache_iswa (non-SWA + SWA) and sched_reserve print them
LLAMA_PRINTED = [
    ("dots1", {"n_ctx": 4096}, 96.00, 68.5020),                                        # -c 4096
    ("dots1", {"n_ctx": 4096, "n_seq": 4}, 96.00, 71.5137),                            # -np 4
    ("dots1", {"n_ctx": 4096, "type_k": "q8_0", "type_v": "q8_0"}, 51.00, 68.5020),     # -ctk/-ctv q8_0
    ("dots1", {"n_ctx": 512}, 12.00, 71.0137),                                         # -c 512
    ("dots1", {"n_ctx": 4096, "flash_attn": False}, 96.00, 86.0098),                   # -fa off
    ("dots1", {"n_ctx": 4096, "n_ubatch": 128, "n_batch": 128}, 96.00, 17.1255),       # -ub 128 -b 128
    ("ernie4_5-moe", {"n_ctx": 4096}, 24.00, 78.6895),
    ("ernie4_5-moe", {"n_ctx": 4096, "n_seq": 4}, 24.00, 79.5137),
    ("ernie4_5-moe", {"n_ctx": 8192, "type_k": "q8_0", "type_v": "q8_0"}, 25.50, 78.6895),
    ("ernie4_5-moe", {"n_ctx": 512}, 3.00, 79.0137),
    ("ernie4_5-moe", {"n_ctx": 4096, "flash_attn": False}, 24.00, 89.1973),
    ("ernie4_5-moe", {"n_ctx": 4096, "n_ubatch": 128, "n_batch": 128}, 24.00, 19.6724),
    ("hunyuan-moe", {"n_ctx": 4096}, 24.00, 78.6270),
    ("hunyuan-moe", {"n_ctx": 4096, "n_seq": 4}, 24.00, 79.5137),
    ("hunyuan-moe", {"n_ctx": 8192, "type_k": "q8_0", "type_v": "q8_0"}, 25.50, 78.6270),
    ("hunyuan-moe", {"n_ctx": 512}, 3.00, 79.0137),
    ("hunyuan-moe", {"n_ctx": 4096, "flash_attn": False}, 24.00, 89.1348),
    ("hunyuan-moe", {"n_ctx": 4096, "n_ubatch": 128, "n_batch": 128}, 24.00, 19.6567),
    ("step35", {"n_ctx": 4096}, 4.00 + 2.25, 71.2715),
    ("step35", {"n_ctx": 4096, "n_seq": 4}, 4.00 + 9.00, 76.2715),
    ("step35", {"n_ctx": 8192, "type_k": "q8_0", "type_v": "q8_0"}, 4.25 + 1.20, 75.4277),
    ("step35", {"n_ctx": 512}, 0.50 + 1.50, 75.5215),
    ("step35", {"n_ctx": 4096, "flash_attn": False}, 4.00 + 2.25, 84.5137),
    ("step35", {"n_ctx": 4096, "n_ubatch": 128, "n_batch": 128}, 4.00 + 0.75, 17.6929),
]


def _ids(row) -> str:
    return row[0] + ":" + ",".join(f"{k}={v}" for k, v in row[1].items())


@pytest.mark.parametrize("row", LLAMA_PRINTED, ids=_ids)
def test_kv_against_llama_cpp(row, fixtures):
    arch, case, kv_mib, _ = row
    pred = predict_buffers(read_gguf_model(fixtures[arch]), LlamaCase(fixture=arch, **case), ())
    assert round(pred["kv"] / MIB, 2) == pytest.approx(kv_mib, abs=0.006)


# ERNIE: moeplan's live-set phases put the peak at the output phase (logits 62.5 MiB + 4 MiB)
# and miss ~12.2 MiB of what llama.cpp allocates at n_ubatch 512 (3.05 MiB at 128: it scales
# with the ubatch); the gap stays 12.19 MiB with the dense lead block's n_ff at 2048 or 8192
# and with an untied output, so it is not the dense MLP nor the tied head. Cause not found: a
# known miss, strict so that the test reports when it is fixed.
ERNIE_COMPUTE = pytest.mark.xfail(strict=True, reason="compute buffer ~15% under llama.cpp's on the ERNIE "
                                  "fixture (cause not found)")


def _compute_rows():
    for row in LLAMA_PRINTED:
        if row[0] == "hunyuan-moe":
            continue  # its own bound below
        if row[0] == "ernie4_5-moe":
            if row[1].get("flash_attn", True):
                yield pytest.param(row, marks=ERNIE_COMPUTE, id=_ids(row))
            continue
        yield pytest.param(row, id=_ids(row))


@pytest.mark.parametrize("row", list(_compute_rows()))
def test_compute_against_llama_cpp(row, fixtures):
    """Within 10%, or under by no more than the fragmentation allowance."""
    arch, case, _, compute_mib = row
    m = read_gguf_model(fixtures[arch])
    c = LlamaCase(fixture=arch, **case)
    pred = predict_buffers(m, c, ())
    meas = compute_mib * MIB
    err = (pred["compute"] - meas) / meas
    assert abs(err) <= 0.10 or 0 < meas - pred["compute"] <= cb.fragmentation_allowance(m, case_placement(c))


@pytest.mark.parametrize("row", [r for r in LLAMA_PRINTED if r[0] == "hunyuan-moe"], ids=_ids)
def test_hunyuan_compute_is_bounded_by_llama_cpp(row, fixtures):
    """The live-set peak (the logits phase here) is a lower bound of what llama.cpp reserved.
    qwen3moe's fixture (same vocabulary, no shared expert) reserves exactly it (66.50 MiB at
    -c 4096, also with --no-repack); this one 12.1 MiB more at -ub 512 and 3.0 MiB more at
    -ub 128, the same with 3, 6 or 12 blocks and with an untied output: about the MoE's gate +
    up slabs (2 x 4*n_ff*k*T = 12 MiB at T = 512), consistent with ggml-alloc placing the
    logits above that freed region. Not verified with an allocation log and not modelled: the
    bound is those two slabs plus fragmentation_allowance."""
    arch, case, _, compute_mib = row
    m = read_gguf_model(fixtures[arch])
    c = LlamaCase(fixture=arch, **case)
    pred = predict_buffers(m, c, ())
    meas = compute_mib * MIB
    assert pred["compute"] <= meas
    p = case_placement(c)
    t = cb.reserve_shape(p).n_tokens
    gate_up = 2 * 4 * m.n_ff_exp * m.n_experts_used * t
    assert meas - pred["compute"] <= gate_up + cb.fragmentation_allowance(m, p)


@pytest.mark.xfail(strict=True, reason="at -c 8192 llama.cpp's compute buffer of this fixture is 8 MiB "
                   "larger (76.51 MiB f16, 78.59 q8_0) while -c 4096 and -c 16384 both give 68.50: "
                   "ggml-alloc's placement, which moeplan does not model")
def test_dots1_compute_at_8192_cells_is_a_known_gap(fixtures):
    m = read_gguf_model(fixtures["dots1"])
    c = LlamaCase(fixture="dots1", n_ctx=8192, type_k="q8_0", type_v="q8_0")
    pred = predict_buffers(m, c, ())
    assert round(pred["kv"] / MIB, 2) == pytest.approx(102.00, abs=0.006)  # llama_kv_cache printed 102.00
    assert abs(pred["compute"] / (78.5918 * MIB) - 1) <= 0.10


# recurrent hybrids: (arch, flags, KV MiB of the attention blocks, RS MiB of the recurrent
# ones, CPU compute MiB or None) as llama_kv_cache / llama_memory_recurrent / sched_reserve
# printed them (-fa on -fit off -nr --no-repack -v)
LLAMA_PRINTED_HYBRID = [
    ("kimi-k3", "mla", {"n_ctx": 4096}, 9.00, 3.21, 70.51),
    ("kimi-k3", "mla", {"n_ctx": 4096, "n_seq": 4}, 9.00, 12.84, 67.51),
    ("kimi-k3", "mla", {"n_ctx": 8192, "type_k": "q8_0", "type_v": "q8_0"}, 9.56, 3.21, 74.51),
    ("kimi-k3", "mla", {"n_ctx": 512}, 1.12, 3.21, 67.01),
    ("nemotron_h_moe", "full", {"n_ctx": 4096}, 8.00, 1.61, None),
    ("nemotron_h_moe", "full", {"n_ctx": 4096, "n_seq": 4}, 8.00, 6.42, None),
    ("nemotron_h_moe", "full", {"n_ctx": 8192, "type_k": "q8_0", "type_v": "q8_0"}, 8.50, 1.61, None),
    ("nemotron_h_moe", "full", {"n_ctx": 512}, 1.00, 1.61, None),
]


@pytest.mark.parametrize("row", LLAMA_PRINTED_HYBRID, ids=lambda r: r[0] + ":" + ",".join(map(str, r[2].values())))
def test_hybrid_caches_and_compute_match_llama_cpp(row, fixtures):
    arch, attn, case, kv_mib, rs_mib, compute_mib = row
    m = read_gguf_model(fixtures[arch])
    args = {"type_k": "f16", "type_v": "f16", **case}
    kv = sum(kv_layer_bytes(layer, **args) for layer in m.trunk_layers if layer.attention == attn)
    rs = sum(kv_layer_bytes(layer, **args) for layer in m.trunk_layers if layer.attention == "recurrent")
    assert round(kv / MIB, 2) == kv_mib
    assert round(rs / MIB, 2) == rs_mib
    if compute_mib is not None:
        # the generic phases (compute_buffer.py) for a graph they were not written from: the
        # residual checkpoint stack and the KDA scan are not modelled term by term
        pred = predict_buffers(m, LlamaCase(fixture=arch, **case), ())
        assert pred["compute"] / MIB == pytest.approx(compute_mib, rel=0.03)
        assert pred["output"] == 32000 * 4 * case.get("n_seq", 1)


GEMMA4_RECORD = json.loads((DATA / "gemma4_llama_memory.json").read_text())


@pytest.mark.parametrize("run", GEMMA4_RECORD["runs"], ids=lambda r: r["name"])
def test_gemma4_buffers_against_llama_cpp(run, fixtures):
    """tests/data/gemma4_llama_memory.json, recorded with --no-repack (the file says why)."""
    m = read_gguf_model(fixtures["gemma4"])
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


# ---- graph barriers (tests/data/graph_barriers.json: counted on each fixture's decode graph) -------
COUNTED = json.loads((DATA / "graph_barriers.json").read_text())["blocks"]
# (profile, quant, block, expected): a dense lead block as counted; a MoE block as counted plus
# one ADD per routed expert beyond the fixture's
BARRIERS = [
    ("dots.llm1", "Q4_K_M", 0, COUNTED["dots1"][0]),
    ("dots.llm1", "Q4_K_M", 1, COUNTED["dots1"][1]),                   # routes 6 as the fixture
    ("ernie-4.5-21b-a3b", "Q4_K_M", 0, COUNTED["ernie4_5-moe"][0]),
    ("ernie-4.5-21b-a3b", "Q4_K_M", 1, COUNTED["ernie4_5-moe"][1] + 2),  # 34 + (6 - 4)
    ("hunyuan-a13b", "Q4_K_M", 0, COUNTED["hunyuan-moe"][0] + 4),        # 35 + (8 - 4)
    ("step-3.5-flash", "Q4_K_S", 0, COUNTED["step35"][0]),
    ("step-3.5-flash", "Q4_K_S", 3, COUNTED["step35"][1] + 4),           # 40 + (8 - 4)
]


@pytest.mark.parametrize("name,quant,block,expected", BARRIERS)
def test_block_barriers_as_counted(name, quant, block, expected):
    m = load_profile(name, quant)
    assert graph.block_barriers(m, (m.trunk_layers[block],), "llama.cpp") == expected


def test_barriers_per_block_kind():
    m = load_profile("kimi-k3")
    by_kind = {(layer.kind, layer.attention): graph.block_barriers(m, (layer,), "llama.cpp") for layer in m.trunk_layers}
    # counted on the fixture, which routes 16 experts as K3
    assert by_kind == {("dense", "recurrent"): 76, ("moe", "recurrent"): 123, ("moe", "mla"): 94}
    assert graph.expert_split_barriers(m, "llama.cpp") == 12  # gate, up, 9 situ nodes, down
    nano = load_profile("nemotron-3-nano-30b-a3b", "Q4_K_M")
    by_label = {layer.attention: graph.block_barriers(nano, (layer,), "llama.cpp") for layer in nano.trunk_layers}
    assert by_label == {"recurrent": 25, "full": 9, "none": 26}  # Nano routes 6 experts, as the fixture
    sup = load_profile("nemotron-3-super-120b-a12b", "Q4_K_M")
    assert graph.block_barriers(sup, (sup.moe_layers[0],), "llama.cpp") == 26 + 22 - 6  # one ADD per routed expert


# ---- backends that cannot run an architecture refuse it -------------------------------------------
# (profile, quant, backend, placement flags, the backend that runs it instead)
REFUSED = [
    ("dots.llm1", "Q4_K_M", "ktransformers", {"cpu_moe_layers": 10}, "ik_llama.cpp"),
    ("ernie-4.5-300b-a47b", "Q4_K_M", "ktransformers", {"cpu_moe_layers": 10}, "ik_llama.cpp"),
    ("hunyuan-a13b", "Q4_K_M", "ktransformers", {"cpu_moe_layers": 10}, "ik_llama.cpp"),
    ("step-3.5-flash", "Q4_K_S", "ktransformers", {"cpu_moe_layers": 10}, "ik_llama.cpp"),
    ("kimi-k3", None, "ik_llama.cpp", {"all_cpu_moe": True}, "llama.cpp"),
    ("kimi-k3", None, "ktransformers", {"all_cpu_moe": True}, "llama.cpp"),
    ("nemotron-3-nano-30b-a3b", "Q4_K_M", "ik_llama.cpp", {"cpu_moe_layers": 10}, "llama.cpp"),
    ("nemotron-3-nano-30b-a3b", "Q4_K_M", "ktransformers", {"cpu_moe_layers": 10}, "llama.cpp"),
]


@pytest.mark.parametrize("name,quant,backend,flags,runs_it", REFUSED)
def test_backends_without_the_architecture_refuse_it(name, quant, backend, flags, runs_it):
    m = load_profile(name, quant)
    with pytest.raises(InputError) as e:
        resolve_placement(m, backend=backend, **flags)
    assert m.arch in str(e.value)
    if runs_it == "llama.cpp":
        assert "llama.cpp" in e.value.hint
    placed = resolve_placement(m, backend=runs_it, **flags)
    assert placed.cpu_moe_layers
    if name == "kimi-k3":
        assert len(placed.cpu_moe_layers) == 92
    if name.startswith("nemotron"):
        assert placed.cpu_moe_layers == m.moe_layer_indices[:10]


# ---- what one model alone has ---------------------------------------------------------------------

def _params(m, trunk_only: bool = True) -> int:
    layers = m.trunk_layers if trunk_only else m.layers
    return sum(t.n_elements for t in m.globals) + sum(t.n_elements for layer in layers for t in layer.tensors)


def _active(m, embed: bool = True) -> float:
    """Everything but the idle routed experts (the embedding lookup counted unless embed is False)."""
    k, n = m.n_experts_used, m.n_experts
    idle = sum(layer.expert_elements for layer in m.trunk_layers) * (1 - k / n)
    return _params(m) - idle - (0 if embed else m.n_vocab * m.n_embd)


def test_dots1_parameters_match_the_published_counts():
    m = load_profile("rednote-hilab/dots.llm1.inst", "BF16")
    # README: 142B total (llama.cpp: LLM_TYPE_142B); the index counts 142.77B (without the 2
    # shared experts it would be 140.67B, with 8 KV heads instead of 32 139.88B: both > 1% off)
    assert _params(m) / 1e9 == pytest.approx(142, rel=0.01)
    # 14B activated: attention, the dense block, embeddings and output, 6 of 128 experts and
    # the shared experts
    assert _active(m) / 1e9 == pytest.approx(14, rel=0.02)
    assert len(m.layers) == 62 and [layer.kind for layer in m.layers[:2]] == ["dense", "moe"]


def test_dots1_converter_keys():
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


def test_ernie_21b_against_bartowskis_files():
    # bartowski/baidu_ERNIE-4.5-21B-A3B-PT-GGUF: bf16 43.66 GB, Q8_0 23.21 GB. With an untied
    # output head (0.27B more) the bf16 file would be 44.19 GB, without the shared FFN 42.39 GB
    bf16 = load_profile("baidu/ERNIE-4.5-21B-A3B-PT", "BF16")
    assert bf16.loaded_bytes / 1e9 == pytest.approx(43.66, abs=0.02)
    assert load_profile("ernie-4.5-21b-a3b", "Q8_0").loaded_bytes / 1e9 == pytest.approx(23.21, rel=0.002)
    assert _params(bf16) / 1e9 == pytest.approx(21, rel=0.05)
    assert 2.9e9 < _active(bf16, embed=False) < 3.3e9  # "A3B"
    assert [layer.kind for layer in bf16.layers[:2]] == ["dense", "moe"] and len(bf16.layers) == 28


def test_ernie_300b_against_its_published_totals():
    m = load_profile("baidu/ERNIE-4.5-300B-A47B-PT", "BF16")
    assert _params(m) / 1e9 == pytest.approx(300, rel=0.005)
    # 47B active (the untied output head counted, the embedding lookup not); turboderp's 597.1
    # GB of safetensors without the embedding (tied: 595.58 GB, outside 0.1%)
    assert _active(m, embed=False) / 1e9 == pytest.approx(47, rel=0.01)
    assert (_params(m) - m.n_vocab * m.n_embd) * 2 / 1e9 == pytest.approx(597.1, rel=0.001)
    assert [layer.kind for layer in m.layers[:4]] == ["dense"] * 3 + ["moe"] and len(m.layers) == 54
    # no shared experts in the 300B (moe_num_shared_experts 0): no shexp tensors
    assert not any("shexp" in t.name for layer in m.layers for t in layer.tensors)


def test_ernie_converter_keys():
    arch, hp = gguf_hparams(profile_config(find_profile("ernie-4.5-21b-a3b")))
    assert arch == "ernie4_5-moe" and hp["block_count"] == 28 and "nextn_predict_layers" not in hp
    assert (hp["expert_count"], hp["expert_used_count"], hp["leading_dense_block_count"]) == (64, 6, 1)
    # conversion/ernie.py: intermediate_size // num_key_value_heads = 12288 // 4 = 2 x 1536
    assert (hp["expert_shared_count"], hp["expert_shared_feed_forward_length"]) == (2, 3072)
    assert hp["interleave_moe_layer_step"] == 1 and hp["feed_forward_length"] == 12288
    _, hp300 = gguf_hparams(profile_config(find_profile("ernie-4.5-300b-a47b")))
    assert hp300["expert_shared_count"] == 0 and "expert_shared_feed_forward_length" not in hp300


def test_gemma4_profile_matches_published_parameter_counts():
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


def test_gemma4_layers_sliding_and_global():
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


def test_gemma4_converter_keys():
    arch, hp = gguf_hparams(profile_config(find_profile("gemma-4-26b-a4b")))
    assert arch == "gemma4"
    assert hp["attention.key_length"] == 512 and hp["attention.key_length_swa"] == 256
    assert hp["attention.head_count_kv"][:6] == [8, 8, 8, 8, 8, 2]
    assert hp["feed_forward_length"] == 2112 and hp["expert_feed_forward_length"] == 704
    assert hp["attention.sliding_window"] == 1024 and hp["final_logit_softcapping"] == 30.0
    assert hp["attention.sliding_window_pattern"][5] is False and hp["attention.sliding_window_pattern"][4] is True


def test_gemma4_shared_kv_layers_keep_no_cache():
    hp = {"block_count": 35, "attention.shared_kv_layers": 20}
    assert archs.has_kv(hp, 14) and not archs.has_kv(hp, 15)


def test_hunyuan_parameters_and_published_gguf_size():
    m = load_profile("tencent/Hunyuan-A13B-Instruct", "BF16")
    # README: 'a total of 80 billion parameters with 13 billion active'. moeplan counts 80.39B;
    # without the shared expert it would be 79.19B, with an untied output head 80.92B
    assert round(_params(m) / 1e9) == 80
    # active: everything but the 56 idle experts of 64 per block (the tied embedding once: 12.75B;
    # without the shared expert 11.54B)
    assert round(_active(m) / 1e9) == 13
    assert (m.n_experts_used, m.n_experts, len(m.layers)) == (8, 64, 32)
    # bartowski's Q4_K_M: 49.3 GB; the llama-quantize Q4_K_M recipe gives 48.78 GB (-1.1%: his
    # file's own tensor mix is not published beside it)
    q = load_profile("hunyuan-a13b", "Q4_K_M")
    assert q.loaded_bytes / 1e9 == pytest.approx(49.3, rel=0.015)
    # `moeplan models` reads experts per token from the per-layer moe_topk list
    row = next(r for r in list_profiles() if r["name"] == "hunyuan-a13b")
    assert (row["arch"], row["n_experts"], row["n_experts_used"], row["n_layers"]) == ("hunyuan-moe", 64, 8, 32)
    names = {t.name for t in q.globals}
    assert names == {"token_embd.weight", "output_norm.weight"}  # tied: no output.weight


def test_hunyuan_converter_keys():
    arch, hp = gguf_hparams(profile_config(find_profile("hunyuan-a13b")))
    assert arch == "hunyuan-moe" and hp["block_count"] == 32
    assert (hp["expert_count"], hp["expert_used_count"], hp["expert_shared_count"]) == (64, 8, 1)
    assert hp["expert_shared_feed_forward_length"] == hp["expert_feed_forward_length"] == 3072
    # dynamic (NTK-alpha) rope: 256K context and base 10000 * 1000^(128/126) (conversion/hunyuan.py)
    assert hp["context_length"] == 262144
    assert hp["rope.freq_base"] == pytest.approx(11158839.9251, rel=1e-9)
    cfg = dict(profile_config(find_profile("hunyuan-a13b")))
    cfg["moe_topk"] = [8] * 31 + [4]
    with pytest.raises(ValueError, match="moe_topk"):
        gguf_hparams(cfg)


def test_hunyuan_kv_cache_of_the_published_model():
    # 32 blocks x 8 KV heads x 128 x (K + V) x f16 = 128 KiB per token
    m = load_profile("hunyuan-a13b", "Q4_K_M")
    per_token = sum(c.n_embd for layer in m.trunk_layers for c in layer.kv) * 2
    assert per_token == 32 * 8 * 128 * 2 * 2


# the published tensor table of moonshotai/Kimi-K3 (search-index id 62826164383), text part:
# (HF shape, how many); MXFP4 experts as values (two per packed byte), their scales left out
E, V = 7168, 163840
KDA, MLA, LAYERS, MOE = 69, 24, 93, 92
KIMI_K3_PUBLISHED_TEXT = [
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
KIMI_K3_PUBLISHED_VISION = (7168 + 4096 * 4096 + 7168 * 4096 + 1024 + 64 * 64 * 1024 + 1024 * 3 * 14 * 14
                            + 27 * (4096 * 1024 * 2 + 1024 * 2 + 1024 * 1536 + 4608 * 1024))


def test_kimi_k3_weights_match_the_published_tensor_table():
    published = sum(math.prod(shape) * n for shape, n in KIMI_K3_PUBLISHED_TEXT)
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


def test_kimi_k3_native_bytes_are_the_published_checkpoint():
    # the table: tensors 1453.66 GiB; MXFP4 experts are 17 bytes per 32 values (weight_packed
    # + one uint8 scale), the rest bf16 save the f32 conv1d, A_log, dt_bias, o_norm and bias
    m = load_profile("kimi-k3", "native")
    header = m.file_bytes - sum(t.n_bytes for t in m.globals) - sum(
        t.n_bytes for layer in m.layers for t in layer.tensors)
    total = m.file_bytes - header
    assert round((total + 2 * KIMI_K3_PUBLISHED_VISION) / GIB, 2) == pytest.approx(1453.66, abs=0.01)
    # --quant MXFP4 keeps the checkpoint's expert bytes
    mx = load_profile("kimi-k3", "MXFP4")

    def exps(spec) -> int:
        return sum(t.n_bytes for layer in spec.trunk_layers for t in layer.tensors if t.group == "experts")

    assert exps(mx) == exps(m)


def test_kimi_k3_blocks_and_caches_follow_full_attn_layers():
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


def test_kimi_k3_converter_routes_on_the_container_class():
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


def test_nemotron_nano_blocks_follow_the_hybrid_pattern():
    m = load_profile("nemotron-3-nano-30b-a3b", "Q4_K_M")
    pattern = profile_config(find_profile("nemotron-3-nano-30b-a3b"))["hybrid_override_pattern"]
    want = {"M": ("dense", "recurrent"), "*": ("dense", "full"), "E": ("moe", "none")}
    assert [(layer.kind, layer.attention) for layer in m.layers] == [want[c] for c in pattern]
    assert (pattern.count("M"), pattern.count("*"), pattern.count("E")) == (23, 6, 23)
    assert m.n_ctx_train == 2 ** 20  # GraniteHybridModel: no rope, context_length 2**20
    # Mamba-2 state per sequence (llama-hparams.cpp n_embd_r / n_embd_s): conv (4 - 1) x
    # (4096 + 2 x 8 x 128) and ssm 128 x 4096, f32
    assert [(c.name, c.n_embd, c.cells) for c in m.layers[0].kv] == [("r", 3 * 6144, "seq"), ("s", 128 * 4096, "seq")]
    # only the 6 attention blocks keep K/V: 2 heads of 128
    assert sum(1 for layer in m.layers for c in layer.kv if c.cells == "ctx") == 12


def test_nemotron_parameter_counts_match_the_published_figures():
    nano = load_profile("nemotron-3-nano-30b-a3b", "BF16")
    # model card: 31.6B total; ~3.2B active, 3.6B with embeddings
    assert _params(nano) / 1e9 == pytest.approx(31.6, abs=0.05)
    assert _active(nano) / 1e9 == pytest.approx(3.6, abs=0.05)
    assert _active(nano, embed=False) / 1e9 == pytest.approx(3.2, abs=0.05)
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


def test_nemotron_converter_writes_the_pattern_as_per_block_arrays():
    arch, hp = gguf_hparams(profile_config(find_profile("nemotron-3-nano-30b-a3b")))
    assert arch == "nemotron_h_moe"
    assert hp["attention.head_count_kv"][:6] == [0, 0, 0, 0, 0, 2]
    assert hp["feed_forward_length"][:3] == [0, 1856, 0]
    assert (hp["ssm.inner_size"], hp["ssm.time_step_rank"], hp["ssm.group_count"]) == (4096, 64, 8)
    assert [archs.is_recurrent_layer(arch, hp, i) for i in range(6)] == [True, False, True, False, True, False]


def test_step35_parameters_and_published_gguf_size():
    m = load_profile("stepfun-ai/Step-3.5-Flash", "BF16")
    # README 4.1: 196.81B total; the trunk llama.cpp runs counts 196.96B (SWA blocks at 64
    # heads would give 195.85B, no shared expert 196.30B: both outside 0.2%)
    assert _params(m) / 1e9 == pytest.approx(196.81, rel=0.002)
    # ~11B active: attention, dense blocks, output, 8 of 288 experts plus the shared expert
    assert 10.5e9 < _active(m, embed=False) < 11.5e9
    # StepFun's step3.5_flash_Q4_K_S.gguf (no MTP blocks): 111.5 GB; what llama.cpp loads of
    # the Q4_K_S recipe's file is the same file without its MTP blocks
    q = load_profile("step-3.5-flash", "Q4_K_S")
    assert q.loaded_bytes / 1e9 == pytest.approx(111.5, rel=0.01)
    assert len(q.layers) == 48 and [layer.kind for layer in q.layers[45:]] == ["nextn"] * 3


def test_step35_converter_writes_per_block_heads_and_swa_pattern():
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


def test_step35_sliding_blocks_queries_use_their_own_head_count():
    m = load_profile("step-3.5-flash", "Q4_K_S")
    p = case_placement(LlamaCase(fixture="step35", n_ctx=4096))
    layers = cb._attention_layers(m, p, cb.reserve_shape(p))
    assert sorted(a["n_head"] for a in layers) == [64, 96]
    assert archs.is_swa_layer("step35", {"block_count": 48, "nextn_predict_layers": 3,
                                         "attention.sliding_window_pattern": [True] * 48}, 46) is False
