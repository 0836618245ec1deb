"""--quant names users download (issue 16): every llama-quantize file type, Unsloth dynamic
names, ik_llama.cpp types, and --size below the part a recipe keeps."""
from __future__ import annotations

import json
import os
import re

import pytest
from typer.testing import CliRunner

from moeplan.cli import app
from moeplan.errors import InputError
from moeplan.planner.model.ggml import ID_BY_TYPE, TYPE_BY_ID, row_bytes
from moeplan.planner.model.quants import IK_FTYPES, canonical_quant, resolve_quant
from moeplan.profiles.model_profiles import load_profile
from moeplan.units import parse_size

# tools/quantize/quantize.cpp QUANT_OPTIONS at the vendored llama.cpp (COPY aside)
LLAMA_QUANTIZE = ("Q1_0", "Q2_0", "Q4_0", "Q4_1", "MXFP4_MOE", "Q5_0", "Q5_1", "IQ2_XXS", "IQ2_XS", "IQ2_S",
                  "IQ2_M", "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0", "Q2_K", "Q2_K_S", "IQ3_XXS", "IQ3_S", "IQ3_M",
                  "Q3_K", "IQ3_XS", "Q3_K_S", "Q3_K_M", "Q3_K_L", "IQ4_NL", "IQ4_XS", "Q4_K", "Q4_K_S", "Q4_K_M",
                  "Q5_K", "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0", "F16", "BF16", "F32")
QUANTIZE_CPP = "/work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp/tools/quantize/quantize.cpp"


def types_of(m, name):
    return next(t.ggml_type for t in m.tensors if t.name == name)


def bytes_of(m, name):
    return next(t.n_bytes for t in m.tensors if t.name == name)


@pytest.mark.parametrize("q", LLAMA_QUANTIZE)
def test_every_llama_quantize_type_is_accepted(q):
    m = load_profile("qwen3-30b-a3b", q.lower())
    assert m.file_bytes > 0 and resolve_quant(q).family in ("llama.cpp", "moeplan")


@pytest.mark.skipif(not os.path.exists(QUANTIZE_CPP), reason="vendored llama.cpp source not on this machine")
def test_the_list_is_llama_quantizes():
    with open(QUANTIZE_CPP, encoding="utf-8") as f:
        names = re.findall(r'\{\s*"(\w+)",\s*LLAMA_FTYPE', f.read())
    assert set(names) - {"COPY"} == set(LLAMA_QUANTIZE)


def test_mainline_rules_of_the_new_ftypes():
    m = load_profile("qwen3-30b-a3b", "Q3_K_S")
    assert types_of(m, "blk.0.attn_v.weight") == "Q3_K" and types_of(m, "output.weight") == "Q6_K"
    sizes = [load_profile("qwen3-30b-a3b", q).tensor_bytes for q in ("Q3_K_S", "Q3_K_M", "Q3_K_L")]
    assert sizes[0] < sizes[1] < sizes[2]
    l = load_profile("qwen3-30b-a3b", "Q3_K_L")
    assert types_of(l, "blk.20.ffn_down_exps.weight") == "Q5_K" and types_of(l, "blk.0.attn_v.weight") == "Q5_K"
    q40 = load_profile("qwen3-30b-a3b", "Q4_0")  # imatrix: the first n/8 ffn_down take Q4_1
    assert types_of(q40, "blk.5.ffn_down_exps.weight") == "Q4_1"
    assert types_of(q40, "blk.6.ffn_down_exps.weight") == "Q4_0"
    ks = load_profile("qwen3-30b-a3b", "Q4_K_S")
    assert [types_of(ks, f"blk.{i}.attn_v.weight") for i in (3, 4)] == ["Q5_K", "Q4_K"]
    assert types_of(ks, "blk.5.ffn_down_exps.weight") == "Q5_K"
    m1 = load_profile("qwen3-30b-a3b", "IQ1_M")
    assert types_of(m1, "token_embd.weight") == "Q2_K" and types_of(m1, "output.weight") == "Q5_K"
    assert types_of(m1, "blk.20.attn_output.weight") == "IQ2_XXS"
    s2 = load_profile("qwen3-30b-a3b", "IQ2_S")  # default type IQ2_XS, IQ3_S bumps
    assert types_of(s2, "blk.20.ffn_up_exps.weight") == "IQ2_XS" and types_of(s2, "token_embd.weight") == "IQ3_S"
    xs = load_profile("qwen3-30b-a3b", "IQ3_XS")
    assert types_of(xs, "blk.20.ffn_up_exps.weight") == "IQ3_XXS"
    assert types_of(xs, "blk.0.ffn_up_exps.weight") == "IQ3_S"
    t1 = load_profile("qwen3-30b-a3b", "TQ1_0")
    assert types_of(t1, "token_embd.weight") == "Q4_K" and types_of(t1, "blk.20.ffn_up_exps.weight") == "TQ1_0"
    f16 = load_profile("qwen3-30b-a3b", "F16")
    assert {types_of(f16, n) for n in ("output.weight", "blk.3.ffn_up_exps.weight")} == {"F16"}
    assert types_of(f16, "blk.3.attn_norm.weight") == "F32"
    assert canonical_quant("q4_k") == "Q4_K_M" and canonical_quant("Q3_K") == "Q3_K_M"
    assert canonical_quant("fp16") == "F16"


@pytest.mark.parametrize("name, base", [("UD-Q2_K_XL", "Q2_K"), ("UD-IQ1_S", "IQ1_S"), ("ud-iq2_xxs", "IQ2_XXS"),
                                        ("Q4_K_XL", "Q4_K_M"), ("UD-Q3_K_XL", "Q3_K_M"), ("UD-Q8_K_XL", "Q8_0"),
                                        ("UD-TQ1_0", "TQ1_0"), ("UD-IQ3_XXS", "IQ3_XXS")])
def test_unsloth_dynamic_names(name, base):
    q = resolve_quant(name)
    assert q.family == "unsloth" and q.base == base and "approximated" in q.note
    m = load_profile("qwen3-30b-a3b", name)
    plain = load_profile("qwen3-30b-a3b", base)
    assert types_of(m, "blk.7.ffn_up_exps.weight") == types_of(plain, "blk.7.ffn_up_exps.weight")
    for t in ("blk.7.attn_q.weight", "blk.7.attn_output.weight"):
        assert bytes_of(m, t) >= bytes_of(plain, t)
        assert row_bytes(types_of(m, t), 256) >= row_bytes("Q4_K", 256)
    assert row_bytes(types_of(m, "output.weight"), 256) >= row_bytes("Q6_K", 256)
    assert any(n.startswith("quant: ") and "Unsloth" in n for n in m.notes)


def test_unsloth_raises_shared_experts_to_q6_k():
    m = load_profile("deepseek-v3", "UD-IQ1_S")
    assert types_of(m, "blk.5.ffn_down_shexp.weight") == "Q6_K"
    assert types_of(m, "blk.5.ffn_up_exps.weight") == "IQ1_S"
    assert types_of(m, "blk.0.ffn_up.weight") == "Q4_K"  # a dense layer
    assert load_profile("deepseek-v3", "UD-IQ1_S").file_bytes > load_profile("deepseek-v3", "IQ1_S").file_bytes


def test_large_names_keep_embedding_and_output_in_q8_0():
    m = load_profile("qwen3-30b-a3b", "Q4_K_L")
    assert types_of(m, "token_embd.weight") == types_of(m, "output.weight") == "Q8_0"
    assert types_of(m, "blk.9.ffn_gate_exps.weight") == "Q4_K"
    assert canonical_quant("Q3_K_L") == "Q3_K_L" and resolve_quant("Q3_K_L").family == "llama.cpp"


# ik_llama.cpp's examples/quantize/quantize.cpp QUANT_OPTIONS at 8337e4cd, less mainline's names
# and its "MXFP4" (the name mainline gives MXFP4_MOE, read with mainline's rules)
IK_QUANTIZE = ("BF16_R16", "IQ1_BN", "IQ1_KT", "IQ1_M_R4", "IQ1_S_R4", "IQ2_BN", "IQ2_BN_R4", "IQ2_K", "IQ2_KL",
               "IQ2_KS", "IQ2_KT", "IQ2_K_R4", "IQ2_M_R4", "IQ2_XS_R4", "IQ2_XXS_R4", "IQ3_K", "IQ3_KL", "IQ3_KS",
               "IQ3_KT", "IQ3_K_R4", "IQ3_S_R4", "IQ3_XXS_R4", "IQ4_K", "IQ4_KS", "IQ4_KSS", "IQ4_KS_R4", "IQ4_KT",
               "IQ4_K_R4", "IQ4_NL_R4", "IQ4_XS_R8", "IQ5_K", "IQ5_KS", "IQ5_KS_R4", "IQ5_K_R4", "IQ6_K", "MXFP4_R8",
               "Q2_K_R4", "Q3_K_R4", "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "Q4_0_R8", "Q4_K_R4", "Q5_0_R4", "Q5_K_R4",
               "Q6_0", "Q6_0_R4", "Q6_K_R4", "Q8_0_R8", "Q8_KV", "Q8_KV_R8", "Q8_K_R8")


@pytest.mark.parametrize("q", IK_QUANTIZE)
def test_every_ik_llama_quantize_type_is_accepted(q):
    m = load_profile("qwen3-30b-a3b", q)
    assert resolve_quant(q).family == "ik_llama.cpp" and m.file_bytes > 0
    bits = 8 * m.file_bytes / sum(t.n_elements for t in m.tensors)
    assert 1.5 < bits < 17


def test_ik_mixes_whose_default_type_is_not_their_name():
    """IQ3_KL: IQ3_K with IQ4_KS in the use_more_bits FFN layers; IQ2_M_R4: IQ2_S_R4 under the
    IQ2_M rules of ik_llama.cpp (src/llama-quantize.cpp at 8337e4cd)."""
    kl = load_profile("qwen3-30b-a3b", "IQ3_KL")  # 48 layers: use_more_bits for 0-5, 42-47, 8, 11 ...
    assert [types_of(kl, f"blk.{i}.ffn_up_exps.weight") for i in (0, 7, 8, 9, 47)] == \
        ["IQ4_KS", "IQ3_K", "IQ4_KS", "IQ3_K", "IQ4_KS"]
    assert types_of(kl, "blk.9.attn_output.weight") == "Q5_K" and types_of(kl, "output.weight") == "Q6_K"
    m4 = load_profile("qwen3-30b-a3b", "IQ2_M_R4")
    assert types_of(m4, "blk.20.ffn_up_exps.weight") == "IQ2_S_R4"
    assert types_of(m4, "blk.0.attn_v.weight") == "IQ4_K" and types_of(m4, "blk.0.attn_q.weight") == "Q4_K"
    assert types_of(m4, "blk.0.ffn_down_exps.weight") == "IQ3_S" and types_of(m4, "token_embd.weight") == "IQ3_S"
    kv = load_profile("qwen3-30b-a3b", "Q8_KV")  # 32 B per 32 weights + 8 B per row (ik ggml.c)
    t = next(t for t in kv.tensors if t.name == "blk.3.ffn_up_exps.weight")
    assert t.n_bytes == t.n_elements + 8 * (t.n_elements // t.shape[0])
    out = CliRunner().invoke(app, ["estimate", "qwen3-30b-a3b", "--quant", "Q4_0_4_4", "--backend", "llama.cpp",
                                   "--hw", "desktop-4090-ddr5"])
    assert out.exit_code != 0 and "ik_llama.cpp's own types" in out.output  # mainline dropped Q4_0_4_4


@pytest.mark.parametrize("q", ["IQ2_KS", "IQ2_K", "IQ2_KL", "IQ3_KS", "IQ3_K", "IQ4_KS", "IQ4_KSS", "IQ4_K",
                               "IQ5_KS", "IQ5_K", "IQ6_K", "IQ2_K_R4", "IQ4_KS_R4", "Q4_K_R4", "IQ1_S_R4"])
def test_ik_llama_types(q):
    assert q in IK_FTYPES and resolve_quant(q.lower()).family == "ik_llama.cpp"
    m = load_profile("qwen3-30b-a3b", q)
    assert types_of(m, "blk.20.ffn_up_exps.weight") == q
    assert any("ik_llama.cpp" in n for n in m.notes)


def test_ik_bytes_follow_its_type_table_with_row_scales():
    m = load_profile("qwen3-30b-a3b", "IQ3_KS")
    t = next(t for t in m.tensors if t.name == "blk.20.ffn_up_exps.weight")
    ne0, rows = t.shape[0], t.n_elements // t.shape[0]
    assert t.n_bytes == rows * (2 + ne0 // 256 * 102)  # ik ggml.c: IQ3_KS 102 B / 256, fp16 row scale
    assert TYPE_BY_ID[156] == "IQ3_KS" and ID_BY_TYPE["IQ2_KS"] == 145 and ID_BY_TYPE["Q2_0"] == 42
    ik = load_profile("qwen3-30b-a3b", "IQ2_KS")
    assert types_of(ik, "blk.0.attn_v.weight") == "IQ4_K" and types_of(ik, "output.weight") == "Q5_K"
    gen = load_profile("qwen3-30b-a3b", "IQ4_K")  # generic MoE rule: attn_v and attn_k Q8_0
    assert types_of(gen, "blk.0.attn_v.weight") == types_of(gen, "blk.0.attn_k.weight") == "Q8_0"


@pytest.mark.parametrize("name", ["mix-IQ3_K", "IQ3_K-mix", "MIX-IQ3_K", "iq3_k_mix"])
def test_ik_custom_mixes_are_their_experts_type_with_six_bit_floors(name):
    q = resolve_quant(name)
    assert q.label == "mix-IQ3_K" and q.base == "IQ3_K" and q.family == "mix" and "--size" in q.note
    m = load_profile("qwen3-235b-a22b", name)
    plain = load_profile("qwen3-235b-a22b", "IQ3_K")
    assert types_of(m, "blk.30.ffn_up_exps.weight") == "IQ3_K"
    for t in ("blk.30.attn_q.weight", "output.weight", "token_embd.weight"):
        assert row_bytes(types_of(m, t), 256) >= row_bytes("Q6_K", 256) and bytes_of(m, t) >= bytes_of(plain, t)
    assert m.file_bytes > plain.file_bytes
    for bad in ("mix-BF16", "mix-Q9_K", "mix"):
        with pytest.raises(KeyError):
            resolve_quant(bad)


def test_unknown_names_list_the_families():
    for bad in ("Q9_K", "UD-Q9_K_XL", "Q4_K_XXL"):
        with pytest.raises(InputError, match="unknown quant") as err:
            load_profile("qwen3-30b-a3b", bad)
        assert "UD-Q2_K_XL" in err.value.hint and "IQ3_KS" in err.value.hint and "Q4_K_M" in err.value.hint


def test_size_below_the_kept_part_scales_the_experts_too():
    """A published 2-bit DeepSeek V4 Flash file is 81 GB; its recipe keeps the MXFP4 experts."""
    with_kept = load_profile("deepseek-v4-flash", size_bytes=parse_size("151G"))
    m = load_profile("deepseek-v4-flash", size_bytes=parse_size("81GB"))
    assert m.file_bytes == 81_000_000_000
    assert m.expert_bytes < with_kept.expert_bytes / 1.8
    assert any(n.startswith("quant: ") and "scaled down too" in n for n in m.notes)
    with pytest.raises(InputError, match="does not fit"):
        load_profile("deepseek-v4-flash", size_bytes=parse_size("20GB"))


def test_estimate_prints_the_quant_notes():
    r = CliRunner().invoke(app, ["estimate", "deepseek-v4-flash", "--size", "81GB", "--hw", "desktop-4090-ddr5",
                                 "--json"])
    assert r.exit_code == 0, r.output
    notes = json.loads(r.stdout)["notes"]
    assert any("scaled down too" in n for n in notes)
    r = CliRunner().invoke(app, ["estimate", "qwen3-30b-a3b", "--quant", "UD-Q2_K_XL", "--hw", "desktop-4090-ddr5"])
    assert r.exit_code == 0 and "Unsloth" in r.stdout
