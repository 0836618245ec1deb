"""Bundled profiles: loading, quant recipes, --size, KV rules, published sizes, the CLI.

Published figures come from the profiles' sources: llama.cpp's own llama-bench tables
(benches/dgx-spark/dgx-spark.md: model size and parameter count of the GGUF it ran) and the
safetensors counts in benchmarks/data/model-configs.json.
"""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from moeplan.cli import app
from moeplan.errors import InputError
from moeplan.planner.memory.accounting import kv_bytes_per_token, kv_cache_bytes
from moeplan.planner.model import archs
from moeplan.planner.model.ggml import TYPE_SIZES
from moeplan.planner.model.quants import QUANTS, canonical_quant
from moeplan.planner.model.synth import gguf_hparams
from moeplan.profiles.model_profiles import find_profile, list_profiles, load_profile, profile_config
from moeplan.units import parse_size

GIB = 1024**3
PROFILES = [r["name"] for r in list_profiles()]


def types_of(m, name):
    return {t.name: t.ggml_type for t in m.tensors}[name]


def trunk_params(m) -> int:
    return sum(t.n_elements for t in m.globals) + sum(t.n_elements for l in m.trunk_layers for t in l.tensors)


# ---- the catalogue ------------------------------------------------------------------------

def test_catalogue_has_every_model_of_issue_2():
    want = {"deepseek-v3", "deepseek-v4-flash", "deepseek-v4-pro", "kimi-k2", "glm-4.5", "glm-4.5-air",
            "glm-4.7-flash", "glm-5.1", "qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-next-80b-a3b",
            "qwen3.5-35b-a3b", "gpt-oss-20b", "gpt-oss-120b", "llama-4-scout", "llama-4-maverick",
            "deepseek-coder-v2", "deepseek-coder-v2-lite", "mixtral-8x7b", "minimax-m2"}
    assert want <= set(PROFILES)
    for alias, name in (("DeepSeek-R1", "deepseek-v3"), ("glm-4.6", "glm-4.5"), ("GLM-4.7", "glm-4.5"),
                        ("glm-5", "glm-5.1"), ("Qwen3.6-35B-A3B", "qwen3.5-35b-a3b")):
        assert find_profile(alias)["name"] == name


@pytest.mark.parametrize("name", PROFILES)
def test_profile_data_is_sourced_and_consistent(name):
    p = find_profile(name)
    assert p["name"] == name == name.lower()
    assert p["status"] in ("verified", "partial") and p["sources"] and p["params_source"]
    assert gguf_hparams(profile_config(p))[0] == p["arch"]
    keys = [k for q in PROFILES for k in [find_profile(q)["name"]] + [a.lower() for a in find_profile(q)["aliases"]]]
    assert len(keys) == len(set(keys)), "an alias names two profiles"


@pytest.mark.parametrize("name", PROFILES)
def test_every_profile_loads_for_every_quant(name):
    from moeplan.planner.model.native import FP8_FROM

    for q in QUANTS:
        if q == "FP8" and find_profile(name).get("native", {}).get("scheme", "bf16") not in FP8_FROM:
            with pytest.raises(InputError, match="FP8"):  # no -FP8 release of a BF16 original
                load_profile(name, q)
            continue
        m = load_profile(name, q)
        assert m.source == "profile" and m.moe_layers and m.n_experts and m.n_experts_used
        # `moeplan models` reads the same counts from the config's own keys
        row = next(r for r in list_profiles() if r["name"] == name)
        assert (row["n_experts"], row["n_experts_used"]) == (m.n_experts, m.n_experts_used), q
        assert m.file_bytes >= m.tensor_bytes > 0
        if q not in ("native", "FP8"):
            assert m.quant == q
            assert all(t.ggml_type in TYPE_SIZES for t in m.tensors), q


@pytest.mark.parametrize("name", PROFILES)
def test_parameter_count_matches_the_published_total(name):
    """Shapes are right if the synthesised tensor index counts the published parameters.

    Tolerance 3%: published totals are rounded (Kimi K2 '1T' is 1026.4B counted, +2.6%;
    DeepSeek-V4-Pro '1.6T' is 1573B, -1.7%) and some include a vision tower (Llama 4 Scout's
    109B, -1.1%). NextN/MTP blocks are not counted (llama.cpp skips them)."""
    p = find_profile(name)
    m = load_profile(name, "BF16")
    assert trunk_params(m) / 1e9 == pytest.approx(p["total_params_b"], rel=0.03)


# ---- figures published for llama.cpp's own GGUFs (llama-bench size / params) --------------

@pytest.mark.parametrize("name,quant,gib,params_b", [
    ("gpt-oss-20b", "MXFP4", 11.27, 20.91),     # ggml-org/gpt-oss-20b-GGUF
    ("gpt-oss-120b", "MXFP4", 59.02, 116.83),   # ggml-org/gpt-oss-120b-GGUF
    ("qwen3-30b-a3b", "Q8_0", 30.25, 30.53),    # qwen3moe 30B.A3B Q8_0
    ("glm-4.7-flash", "Q8_0", 29.65, 29.94),    # deepseek2 30B.A3B Q8_0 (file without the MTP block)
])
def test_llama_bench_model_size_and_params(name, quant, gib, params_b):
    m = load_profile(name, quant)
    assert round(m.loaded_bytes / GIB, 2) == gib
    assert round(trunk_params(m) / 1e9, 2) == params_b


def test_qwen3_30b_q4_k_m_matches_the_published_file_within_2pct():
    m = load_profile("qwen3-30b-a3b", "Q4_K_M")
    assert m.file_bytes == pytest.approx(18.6e9, rel=0.02)


def test_native_checkpoints_match_their_safetensors():
    # GLM-5.1: 753,864,139,008 tensor elements counted in the bf16 safetensors
    assert sum(t.n_elements for t in load_profile("glm-5.1", "native").tensors) == 753_864_139_008
    # GLM-5.2 (indexers on 21 of 78 blocks + the MTP block): index total_size to the byte
    assert load_profile("glm-5.2", "native").tensor_bytes == 1_506_659_919_872
    # sums of the safetensors files (headers included): Kimi K2 958.51 GiB, gpt-oss-20b 12.82 GiB
    assert load_profile("kimi-k2", "native").tensor_bytes / GIB == pytest.approx(958.51, abs=0.05)
    assert load_profile("gpt-oss-20b", "native").tensor_bytes / GIB == pytest.approx(12.82, abs=0.01)
    # Kimi-K2-Thinking: INT4 routed experts (18 bytes per 32) and bf16 elsewhere, Kimi K2's shapes:
    # the published repository's 594 GB
    thinking = load_profile("kimi-k2-thinking", "native")
    assert thinking.tensor_bytes == pytest.approx(594e9, rel=0.005)
    exp = [t for layer in thinking.moe_layers for t in layer.tensors if "_exps" in t.name]
    assert exp and {t.ggml_type for t in exp} == {"INT4"}
    assert find_profile("moonshotai/Kimi-K2-Thinking")["name"] == "kimi-k2-thinking"
    assert find_profile("kimi-k2-instruct")["name"] == "kimi-k2"
    # DeepSeek-V4-Flash: llama.cpp print_info reports 284.33 B parameters
    assert round(trunk_params(load_profile("deepseek-v4-flash")) / 1e9, 2) == 284.33


# ---- quant recipes (llama-quant.cpp) ------------------------------------------------------

def test_q4_k_m_rules_on_qwen3_30b():
    m = load_profile("qwen3-30b-a3b", "Q4_K_M")
    assert types_of(m, "output.weight") == "Q6_K"
    assert types_of(m, "token_embd.weight") == "Q4_K"
    assert types_of(m, "blk.0.attn_norm.weight") == "F32"
    assert types_of(m, "blk.0.ffn_gate_inp.weight") == "F32"  # routers are never quantized
    # use_more_bits(i, 48): i < 6, i >= 42, or (i - 6) % 3 == 2
    assert [types_of(m, f"blk.{i}.ffn_down_exps.weight") for i in (0, 5, 6, 7, 8, 42)] == \
        ["Q6_K", "Q6_K", "Q4_K", "Q4_K", "Q6_K", "Q6_K"]
    assert types_of(m, "blk.8.attn_v.weight") == "Q6_K" and types_of(m, "blk.9.attn_v.weight") == "Q4_K"
    assert types_of(m, "blk.9.ffn_gate_exps.weight") == "Q4_K"


def test_fallback_when_rows_are_not_whole_blocks():
    # gpt-oss rows are 2880 wide: Q4_K (256 per block) falls back to Q5_0, Q6_K to Q8_0
    m = load_profile("gpt-oss-20b", "Q4_K_M")
    assert types_of(m, "blk.3.ffn_up_exps.weight") == "Q5_0"
    assert types_of(m, "blk.0.ffn_down_exps.weight") == "Q8_0"
    # GLM-4.7-Flash's attn_k_b rows are qk_nope = 192 wide
    assert types_of(load_profile("glm-4.7-flash", "Q4_K_M"), "blk.5.attn_k_b.weight") == "Q5_0"


def test_eight_expert_rules_for_mixtral():
    m = load_profile("mixtral-8x7b", "Q4_K_M")
    assert types_of(m, "blk.3.attn_v.weight") == "Q8_0"
    assert types_of(m, "blk.3.attn_k.weight") == "Q8_0"
    assert types_of(m, "blk.3.attn_output.weight") == "Q5_K"


def test_mxfp4_moe_and_iq_rules():
    m = load_profile("deepseek-v3", "MXFP4")
    assert types_of(m, "blk.5.ffn_up_exps.weight") == "MXFP4"
    assert types_of(m, "blk.5.attn_k_b.weight") == "MXFP4"  # 3-D: MXFP4_MOE takes every ne[2] > 1
    assert types_of(m, "blk.5.attn_q_b.weight") == "Q8_0"
    assert types_of(m, "token_embd.weight") == types_of(m, "output.weight") == "Q8_0"
    iq = load_profile("qwen3-30b-a3b", "IQ2_XXS")
    assert types_of(iq, "token_embd.weight") == "Q2_K" and types_of(iq, "output.weight") == "Q5_K"
    assert types_of(iq, "blk.0.attn_v.weight") == "Q4_K"  # n_gqa 8 >= 4
    # the first n/8 ffn_down tensors (a counter, not a layer number) get Q2_K
    assert types_of(iq, "blk.5.ffn_down_exps.weight") == "Q2_K"
    assert types_of(iq, "blk.6.ffn_down_exps.weight") == "IQ2_XXS"


def test_quant_names():
    assert canonical_quant("q4_k_m") == "Q4_K_M" and canonical_quant("mxfp4_moe") == "MXFP4"
    with pytest.raises(InputError, match="unknown quant") as err:
        load_profile("qwen3-30b-a3b", "Q9_K")
    assert "Q4_K_M" in err.value.hint


# ---- --size ------------------------------------------------------------------------------

def test_size_scales_routed_experts_to_the_exact_file_size():
    base = load_profile("qwen3-30b-a3b", "Q4_K_M")
    m = load_profile("qwen3-30b-a3b", "Q4_K_M", size_bytes=parse_size("17GB"))
    assert m.file_bytes == 17_000_000_000
    assert m.file_bytes - m.tensor_bytes == base.file_bytes - base.tensor_bytes  # the metadata estimate
    assert m.gpu_resident_bytes == base.gpu_resident_bytes  # non-expert tensors keep the recipe
    assert m.expert_bytes < base.expert_bytes
    assert "scaled" in m.quant and any("routed-expert bytes scaled" in n for n in m.notes)


def test_size_for_mxfp4_models_scales_the_non_expert_tensors():
    """DeepSeek-V4-Flash 'Q8' 151G files: MXFP4 experts (3.1875 GiB a layer) + 16-bit rest."""
    m = load_profile("deepseek-v4-flash", size_bytes=parse_size("151G"))
    assert m.file_bytes == 151 * GIB
    assert {layer.expert_bytes for layer in m.moe_layers} == {3 * 256 * 2048 * 4096 * 17 // 32}
    assert m.gpu_resident_bytes / GIB == pytest.approx(13.93, abs=0.01)


def test_size_that_cannot_fit_is_an_input_error():
    with pytest.raises(InputError, match="does not fit"):
        load_profile("qwen3-30b-a3b", size_bytes=parse_size("1G"))


# ---- KV cache rules ------------------------------------------------------------------------

def test_qwen3_30b_kv_at_4096_f16_is_384_mib():
    assert kv_cache_bytes(load_profile("qwen3-30b-a3b"), 4096, "f16", "f16") == 384 * 1024**2


def test_deepseek_v3_mla_kv_is_70272_bytes_per_token():
    assert kv_bytes_per_token(load_profile("deepseek-v3"), "f16", "f16") == 70_272


def test_deepseek_v4_flash_caches():
    """llama-kv-cache-dsv4.cpp at ctx 4096, f16, one sequence, ubatch 512, per block:
    raw SWA K 768 cells x 1024 B; CSA blocks add csa K 1024 x 1024 B + indexer K 1024 x 256 B
    + F32 states 2 x 8 x 4096 B and 2 x 8 x 1024 B; HCA blocks add hca K 256 x 1024 B + F32
    states 2 x 128 x 2048 B."""
    m = load_profile("deepseek-v4-flash")
    labels = [layer.attention for layer in m.layers]
    assert labels.count("csa") == 21 and labels.count("hca") == 20 and labels.count("swa-only") == 2
    raw, csa, hca = 768 * 1024, 1024 * 1024 + 1024 * 256 + 2 * 8 * 4096 + 2 * 8 * 1024, 256 * 1024 + 2 * 128 * 2048
    assert kv_cache_bytes(m, 4096) == 43 * raw + 21 * csa + 20 * hca
    # compressed caches grow in 256-cell steps of ctx / ratio
    assert kv_cache_bytes(m, 8192) - kv_cache_bytes(m, 4096) == 21 * (1024 * 1024 + 1024 * 256)


def test_dsa_indexer_cache_only_on_full_indexer_blocks():
    g51, g52 = load_profile("glm-5.1"), load_profile("glm-5.2")
    assert kv_bytes_per_token(g51) == 78 * (576 + 128) * 2
    assert kv_bytes_per_token(g52) == 78 * 576 * 2 + 21 * 128 * 2
    hp = {"block_count": 78, "context_length": 1048576}
    assert [archs.is_indexer_full("glm-dsa", hp, i) for i in (0, 1, 2, 3, 6, 7, 74, 77)] == \
        [True, True, True, False, True, False, True, False]
    assert archs.is_indexer_full("glm-dsa", {**hp, "attention.indexer.types": [False] * 78}, 0) is False
    assert archs.is_indexer_full("glm-dsa", {"context_length": 202752}, 5) is True
    assert archs.is_indexer_full("deepseek32", hp, 5) is True


def test_llama4_chunked_layers_use_8192_whatever_the_gguf_says():
    hp = {"block_count": 48, "attention.sliding_window": 1024}
    assert [archs.is_swa_layer("llama4", hp, i) for i in range(8)] == [True, True, True, False] * 2
    assert archs.swa_window("llama4", hp) == 8192
    assert not archs.is_swa_layer("llama4", {"block_count": 48, "attention.sliding_window": 0}, 0)
    assert archs.is_swa_layer("llama4", {"block_count": 48, "attention.sliding_window_pattern": 0}, 3)
    m = load_profile("llama-4-scout")
    assert [layer.attention for layer in m.layers[:4]] == ["chunked", "chunked", "chunked", "full"]


def test_gpt_oss_swa_on_even_layers():
    m = load_profile("gpt-oss-20b")
    assert [layer.attention for layer in m.layers[:4]] == ["swa", "full", "swa", "full"]
    swa = next(c for c in m.layers[0].kv if c.name == "k")
    assert (swa.cells, swa.window) == ("swa", 128)


def test_qwen_hybrid_recurrent_layers():
    m = load_profile("qwen3-next-80b-a3b")
    assert [layer.attention for layer in m.layers[:4]] == ["recurrent"] * 3 + ["full"]
    assert m.layers[-1].kind == "nextn"
    r = {c.name: c.n_embd for c in m.layers[0].kv}
    assert r == {"r": 3 * (4096 + 2 * 16 * 128), "s": 128 * 4096}
    hp = {"block_count": 9, "nextn_predict_layers": 1, "attention.recurrent_layers": [1, 0] * 4 + [0]}
    assert [archs.is_recurrent_layer("qwen35moe", hp, i) for i in range(3)] == [True, False, True]


# ---- names and the CLI -------------------------------------------------------------------

def test_unknown_name_suggests_close_names():
    with pytest.raises(InputError) as err:
        find_profile("qwen3-31b-a3b")
    assert "qwen3-30b-a3b" in err.value.hint and "moeplan models" in err.value.hint


def test_cli_inspect_profile_json():
    res = CliRunner().invoke(app, ["inspect", "qwen3-30b-a3b", "--quant", "Q4_K_M", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["model"]["quant"] == "Q4_K_M" and data["model"]["n_moe_layers"] == 48
    assert data["totals"]["kv_bytes"] == 384 * 1024**2
    assert data["totals"]["tensor_bytes"] == sum(data["groups"].values())  # no NextN block here
    assert data["totals"]["file_bytes"] == pytest.approx(18.6e9, rel=0.02)


def test_cli_models_json_and_errors():
    runner = CliRunner()
    res = runner.invoke(app, ["models", "--json"])
    assert res.exit_code == 0
    rows = {r["name"]: r for r in json.loads(res.stdout)["models"]}
    assert rows["deepseek-v3"]["n_experts"] == 256 and rows["deepseek-v3"]["arch"] == "deepseek2"
    assert rows["qwen3.5-35b-a3b"]["n_layers"] == 40 and "qwen3.6-35b-a3b" in rows["qwen3.5-35b-a3b"]["aliases"]
    bad = runner.invoke(app, ["inspect", "glm-4.5-ari", "--json"])
    assert bad.exit_code == 2 and "glm-4.5-air" in json.loads(bad.stdout)["error"]["hint"]


# ---- profiles added for issue 16 (models people run that were not bundled) ----------------

def test_deepseek_v32_native_checkpoint_matches_its_safetensors():
    # model_inspector report of the published checkpoint (search-index id 62736905881):
    # 685,396,921,376 elements (the FP8 scale tensors, ~0.006%, included) in 642.12 GiB of tensors
    m = load_profile("deepseek-v3.2", "native")
    assert sum(t.n_elements for t in m.tensors) == pytest.approx(685_396_921_376, rel=1e-4)
    assert m.tensor_bytes / GIB == pytest.approx(642.12, rel=1e-3)
    # DSA: every block carries a lightning indexer (wq_b 1536 -> 64 x 128, wk, weights_proj)
    assert all(any("indexer" in t.name for t in layer.tensors) for layer in m.trunk_layers)
    # MLA latent (576) plus the indexer key (128) per block, f16
    assert kv_bytes_per_token(load_profile("deepseek-v3.2"), "f16", "f16") == 61 * (576 + 128) * 2
    assert find_profile("deepseek-v3.2-exp")["name"] == "deepseek-v3.2"
    assert find_profile("deepseek-v3.1")["name"] == "deepseek-v3"


def test_qwen3_coder_480b_counts_the_published_480b():
    m = load_profile("qwen3-coder-480b-a35b", "BF16")
    assert round(trunk_params(m) / 1e9) == 480          # model card: 480B total
    assert find_profile("Qwen/Qwen3-Coder-480B-A35B-Instruct")["name"] == "qwen3-coder-480b-a35b"


def test_qwen35_122b_counts_122b_and_caches_12_attention_blocks():
    m = load_profile("qwen3.5-122b-a10b")
    assert round(trunk_params(m) / 1e9) == 122          # model card: 122B total
    # 12 full-attention blocks x K and V x 2 KV heads x 256 x f16: 24,576 bytes per token, the
    # figure a reader of the config.json derived (search-index id 66841050899)
    assert kv_bytes_per_token(m, "f16", "f16") == 24_576


def test_qwen35_397b_counts_the_published_397b():
    m = load_profile("qwen3.5-397b-a17b", "BF16")
    assert trunk_params(m) / 1e9 == pytest.approx(397, rel=0.005)
    assert m.n_experts == 512 and m.n_experts_used == 10


def test_kimi_k25_matches_its_published_tensor_table_and_parameter_count():
    """Kimi-K2.5's safetensors (model-inspector report, search-index id 62530201892): tensors 554.27
    GiB in 64 files, the MoonViT tower and projector included; Xinference lists 1058.59B parameters
    (search-index id 22933776286): every weight, one bf16 scale per 32 INT4 expert weights, the tower."""
    m = load_profile("kimi-k2.5", "native")
    # the tower and projector from the report's table (bf16): in the checkpoint, not in the text
    # GGUF (llama.cpp's mmproj file), so not in the profile
    tower = (27 * (2 * 1152 * 4304 + 4304 + 1152 + 1152 * 1152 + 1152 + 3456 * 1152 + 3456 + 4 * 1152)
             + 2 * 1152 + 64 * 64 * 1152 + 1152 * 3 * 14 * 14 + 1152)
    projector = 2 * 1152 + 4608 * 4608 + 4608 + 7168 * 4608 + 7168
    assert (m.tensor_bytes + 2 * (tower + projector)) / GIB == pytest.approx(554.27, abs=0.01)
    weights = trunk_params(load_profile("kimi-k2.5", "BF16"))
    experts = [t for layer in m.moe_layers for t in layer.tensors if "_exps" in t.name]
    assert experts and {t.ggml_type for t in experts} == {"INT4"}
    scales = sum(t.n_elements for t in experts) // 32
    assert round((weights + scales + tower + projector) / 1e9, 2) == 1058.59
    # Kimi K2's text shapes (its weights, its MLA cache), the context raised to 262144
    k2 = load_profile("kimi-k2", "BF16")
    assert weights == trunk_params(k2)
    assert kv_bytes_per_token(m, "f16", "f16") == kv_bytes_per_token(k2, "f16", "f16")
    assert m.n_ctx_train == 262_144
    # Unsloth's guide: UD-Q2_K_XL 375 GB; the recipe approximation lands within 3%
    assert load_profile("kimi-k2.5", "UD-Q2_K_XL").file_bytes == pytest.approx(375e9, rel=0.03)
    for alias in ("moonshotai/Kimi-K2.5", "Kimi-K2.5", "kimi-k25", "Kimi-K2.6", "moonshotai/Kimi-K2.6"):
        assert find_profile(alias)["name"] == "kimi-k2.5"


def test_fp8_checkpoint_of_a_bf16_model():
    """--quant FP8: the published -FP8 release of a BF16 model (block-128 e4m3 linear layers with
    a float32 scale per 128x128 block; embeddings, lm_head, routers and vectors bf16)."""
    m = load_profile("qwen3-30b-a3b", "FP8")
    assert m.quant.startswith("FP8")
    by = {t.name: t for t in m.tensors}
    # one layer's gate experts {2048, 768, 128}: 2048*768*128 bytes + 16*6*128 blocks x 4 B
    gate = by["blk.0.ffn_gate_exps.weight"]
    assert gate.ggml_type == "F8_E4M3" and gate.n_bytes == 2048 * 768 * 128 + 16 * 6 * 128 * 4
    assert by["token_embd.weight"].ggml_type == "BF16" and by["output.weight"].ggml_type == "BF16"
    assert by["blk.0.ffn_gate_inp.weight"].ggml_type == "BF16"
    # about one byte per linear weight: half the BF16 checkpoint's experts
    bf16 = load_profile("qwen3-30b-a3b", "native")
    assert m.expert_bytes == pytest.approx(bf16.expert_bytes / 2, rel=0.01)
    # a model published in FP8 already: the same bytes as its native checkpoint
    assert load_profile("deepseek-v3", "FP8").file_bytes == load_profile("deepseek-v3", "native").file_bytes
    # a model without an -FP8 release of a BF16 original is refused with a hint
    with pytest.raises(InputError, match="MXFP4"):
        load_profile("gpt-oss-120b", "FP8")
    assert "FP8" in QUANTS and canonical_quant("fp8") == "FP8"


def test_hf_fp8_repository_id_names_the_profile_fp8_checkpoint():
    from moeplan.probes.models import resolve_model

    m = resolve_model("Qwen/Qwen3-30B-A3B-FP8")
    assert m.quant.startswith("FP8") and m.file_bytes == load_profile("qwen3-30b-a3b", "FP8").file_bytes
    with pytest.raises(InputError, match="FP8 checkpoint"):
        resolve_model("Qwen/Qwen3-30B-A3B-FP8", quant="Q4_K_M")
