"""Which ggml type every tensor gets under llama.cpp's common quants (pure).

A recipe turns the synthesised tensor index (synth.py) into (type, bytes) per tensor:

* BF16     convert_hf_to_gguf.py --outtype bf16: 1-D tensors, *_norm.weight, biases, routers
           (ffn_gate_inp), ssm_conv1d and the DSA indexer.proj are F32, the rest BF16. Where the
           converter keeps the checkpoint's own format it does so (gpt-oss MXFP4 experts;
           DeepSeek V4: MXFP4 experts, FP8 -> Q8_0, BF16 / F32 kept, I32 hash table).
* Q8_0 ... llama-quantize from that BF16 file (src/llama-quant.cpp llama_tensor_get_type), every
  F32      file type of tools/quantize QUANT_OPTIONS: tensors it may quantize get the ftype's
           default type, adjusted by
           llama_tensor_get_type_impl (output.weight Q6_K / Q5_K / Q8_0, token_embd for IQ
           quants, attn_v and ffn_down 'use_more_bits' layers, the 8-expert (Mixtral) rules),
           then tensor_type_fallback when a row (ne0) is not a multiple of the block size.
           Tensors it may not quantize keep the converter's type. I-quants assume an importance
           matrix, as published files are made (llama-quantize requires one for IQ2_XXS and
           IQ1_S; for IQ4_XS it only removes the Q5_K bump of the first n/8 ffn_down).
* MXFP4    llama-quantize MXFP4_MOE: 3-D tensors MXFP4, everything else it may quantize Q8_0.
* native   the published checkpoint (native.py): FP8 with block scales, MXFP4, BF16.
* IQ2_KS ... ik_llama.cpp types: its type table (ggml.py) and an approximation of its rules.
* UD-Q2_K_XL, Q4_K_XL, Q4_K_L ...: a base recipe with floors for the tensors such mixes keep at
           higher bits (resolve_quant; an approximation, said in the notes).
* mix-IQ3_K, IQ4_KS-mix ...: ik_llama.cpp users' custom mixes (llama-quantize --custom-q),
           named after the routed experts' type: that type, the other tensors floored at 6 bits.

Counters follow llama-quantize: tensors are visited in llama_model_loader order (model-level
tensors, then block by block, names sorted within a block); n_layer of the ffn_down rules is
block_count (NextN blocks included).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TypedDict

from moeplan.planner.model.ggml import TYPE_SIZES, row_bytes
from moeplan.planner.model.synth import TensorSpec

# llama-quantize file types (tools/quantize/quantize.cpp QUANT_OPTIONS at the vendored commit)
# -> default ggml type (src/llama-quant.cpp llama_ftype_get_default_type). 'MXFP4' is MXFP4_MOE.
FTYPE_DEFAULT: dict[str, str] = {
    "Q1_0": "Q1_0", "Q2_0": "Q2_0", "Q4_0": "Q4_0", "Q4_1": "Q4_1", "MXFP4": "MXFP4", "Q5_0": "Q5_0",
    "Q5_1": "Q5_1", "IQ2_XXS": "IQ2_XXS", "IQ2_XS": "IQ2_XS", "IQ2_S": "IQ2_XS", "IQ2_M": "IQ2_S",
    "IQ1_S": "IQ1_S", "IQ1_M": "IQ1_M", "TQ1_0": "TQ1_0", "TQ2_0": "TQ2_0", "Q2_K": "Q2_K", "Q2_K_S": "Q2_K",
    "IQ3_XXS": "IQ3_XXS", "IQ3_S": "IQ3_S", "IQ3_M": "IQ3_S", "IQ3_XS": "IQ3_S", "Q3_K_S": "Q3_K",
    "Q3_K_M": "Q3_K", "Q3_K_L": "Q3_K", "IQ4_NL": "IQ4_NL", "IQ4_XS": "IQ4_XS", "Q4_K_S": "Q4_K",
    "Q4_K_M": "Q4_K", "Q5_K_S": "Q5_K", "Q5_K_M": "Q5_K", "Q6_K": "Q6_K", "Q8_0": "Q8_0",
    "F16": "F16", "F32": "F32",
}
# ik_llama.cpp's llama-quantize types that mainline's lacks (examples/quantize/quantize.cpp
# QUANT_OPTIONS at 8337e4cd; src/llama-quantize.cpp: default_type = the type of the same name but
# for IK_FTYPE_DEFAULT's mixes); their bytes per block come from ik_llama.cpp's ggml type table
IK_FTYPES: tuple[str, ...] = (
    "IQ1_KT", "IQ2_KS", "IQ2_K", "IQ2_KL", "IQ2_KT", "IQ3_KS", "IQ3_K", "IQ3_KL", "IQ3_KT", "IQ4_KSS",
    "IQ4_KS", "IQ4_K", "IQ4_KT", "IQ5_KS", "IQ5_K", "IQ6_K", "Q6_0", "Q4_0_R8", "Q5_0_R4", "Q6_0_R4",
    "Q8_0_R8", "Q2_K_R4", "Q3_K_R4", "Q4_K_R4", "Q5_K_R4", "Q6_K_R4", "Q8_K_R8", "IQ1_S_R4", "IQ1_M_R4",
    "IQ2_XXS_R4", "IQ2_XS_R4", "IQ2_S_R4", "IQ2_M_R4", "IQ3_XXS_R4", "IQ3_S_R4", "IQ4_NL_R4", "IQ4_XS_R8",
    "IQ2_K_R4", "IQ3_K_R4", "IQ4_K_R4", "IQ5_K_R4", "IQ4_KS_R4", "IQ5_KS_R4", "MXFP4_R8", "Q8_KV",
    "Q8_KV_R8", "BF16_R16", "IQ1_BN", "IQ2_BN", "IQ2_BN_R4", "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8",
)
# the ik_llama.cpp file types whose default tensor type is not their namesake
IK_FTYPE_DEFAULT = {"IQ3_KL": "IQ3_K", "IQ2_M_R4": "IQ2_S_R4"}
QUANTS = tuple(FTYPE_DEFAULT) + ("BF16", "native", "FP8")
FP8_NAMES = ("FP8", "F8_E4M3")  # --quant spellings of a BF16 model's -FP8 checkpoint
# QUANT_OPTIONS aliases ("Q4_K" = Q4_K_M ...) and moeplan's own names
ALIASES = {"MXFP4_MOE": "MXFP4", "NATIVE": "native", "BF16": "BF16", "Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M",
           "Q5_K": "Q5_K_M", "FP16": "F16", "FP32": "F32"}

# Unsloth's dynamic quants: 'UD-' prefix and/or '_XL' suffix (UD-Q2_K_XL, UD-IQ1_S, Q4_K_XL). The
# routed experts follow the base recipe; the tensors Unsloth documents keeping at higher bits
# (unsloth.ai/blog/deepseekr1-dynamic: "attention 4 or 6 bit, the first 3 dense layers 4 or 6 bit,
# shared experts 6 bit, embedding 4 bit, lm_head 6 bit"; docs.unsloth.ai "Unsloth Dynamic 2.0
# GGUFs": the layer choice varies per model) are raised to at least these types. An
# approximation of a per-model choice: `--size` with the real file size scales it to the bytes.
UNSLOTH_FLOOR = {"attn": "Q4_K", "ffn": "Q4_K", "shexp": "Q6_K", "embed": "Q4_K", "output": "Q6_K"}
# '_L' files (bartowski's Q3_K_XL ... naming, llama-quantize --output-tensor-type q8_0
# --token-embedding-type q8_0): the base recipe with embedding and output in Q8_0
LARGE_FLOOR = {"embed": "Q8_0", "output": "Q8_0"}

# custom mixes named after their routed experts' type (the 'mix-IQ3_K' files of ik_llama.cpp
# users, made with llama-quantize --custom-q): the rest of the model is kept at 6-8 bits by such
# recipes; taken as at least Q6_K, an approximation that `--size` turns into the real bytes
MIX_FLOOR = {"attn": "Q6_K", "ffn": "Q6_K", "shexp": "Q6_K", "embed": "Q6_K", "output": "Q6_K"}

_IQ_LOW = ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M")  # the IQ2/IQ1 branch of get_type_impl
_IQ_OUT_Q5K = ("IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M")


@dataclass(frozen=True)
class QuantName:
    """A --quant name resolved: the llama-quantize / ik_llama.cpp ftype whose rules give the
    types (`base`), the floor types of a dynamic mix, and what the recipe approximates."""

    label: str  # canonical spelling
    base: str  # a key of FTYPE_DEFAULT, an IK_FTYPES entry, 'BF16' or 'native'
    family: str  # llama.cpp / ik_llama.cpp / unsloth / large / moeplan
    floor: tuple[tuple[str, str], ...] = ()  # role -> lowest type of a dynamic mix
    note: str = ""


def _plain(up: str) -> str | None:
    up = ALIASES.get(up, up)
    if up in FTYPE_DEFAULT or up in ("BF16", "native") or up in IK_FTYPES:
        return up
    return None


def resolve_quant(name: str) -> QuantName:
    """'q4_k_m' -> Q4_K_M; 'UD-Q2_K_XL' -> Q2_K with Unsloth's floors; 'IQ3_KS' -> ik_llama.cpp.
    Raises KeyError for names it does not know."""
    raw = name.strip()
    up = raw.upper().replace("-", "_") if not raw.upper().startswith("UD-") else raw.upper()
    if raw.lower() == "native":
        return QuantName("native", "native", "moeplan")
    if up in FP8_NAMES:
        return QuantName("FP8", "FP8", "moeplan",
                         note="FP8: the model's published -FP8 checkpoint (block-128 e4m3 linear layers, float32 "
                              "scales; embeddings, lm_head and routers bf16), what KTransformers, vLLM and SGLang load")
    base = _plain(up)
    if base is not None:
        ik = base in IK_FTYPES
        fam = "ik_llama.cpp" if ik else "moeplan" if base in ("BF16", "native") else "llama.cpp"
        note = ""
        if ik:
            note = (f"{base}: ik_llama.cpp type; bytes per weight from its ggml type table, tensor choice "
                    "after ik_llama.cpp's output / embedding / attention rules, the rest in the base type "
                    "(published ik_llama.cpp files are often custom mixes: give --size)")
        return QuantName(base, base, fam, note=note)
    mix = re.fullmatch(r"MIX_(.+)|(.+)_MIX", up)
    if mix:
        cand = _plain(mix.group(1) or mix.group(2))
        if cand is None or cand in ("BF16", "native"):
            raise KeyError(name)
        label = f"mix-{cand}"
        return QuantName(label, cand, "mix", tuple(sorted(MIX_FLOOR.items())),
                         f"{label}: a custom mix approximated as {cand} for the routed experts and at least Q6_K for "
                         "every other tensor (such recipes keep attention, shared experts, dense layers and output "
                         "at 6-8 bits): give --size for the real bytes")
    ud = up.startswith("UD-") or up.startswith("UD_")
    stem = up[3:] if ud else up
    xl = stem.endswith("_XL")
    large = not xl and stem.endswith("_L")
    if xl:
        stem = stem[:-3]
    elif large:
        stem = stem[:-2]
    if not (ud or xl or large):
        raise KeyError(name)
    # Q3_K_XL -> Q3_K_M, Q4_K_XL -> Q4_K_M, Q8_K_XL -> Q8_0; IQ2_XXS / IQ1_S / Q2_K as they are
    cand = {"Q8_K": "Q8_0", "Q6_K": "Q6_K"}.get(stem) or _plain(stem) or _plain(stem + "_M")
    if cand is None or cand in ("BF16", "native"):
        raise KeyError(name)
    if ud or xl:
        label = ("UD-" if ud else "") + stem + ("_XL" if xl else "_L" if large else "")
        return QuantName(label, cand, "unsloth", tuple(sorted(UNSLOTH_FLOOR.items())),
                         f"{label}: Unsloth dynamic quant approximated as {cand} for the routed experts with "
                         "attention and dense FFN at least Q4_K, shared experts and output at least Q6_K, "
                         "embedding at least Q4_K (Unsloth's documented choice; per-model details differ: "
                         "give --size for the real bytes)")
    label = stem + "_L"
    return QuantName(label, cand, "large", tuple(sorted(LARGE_FLOOR.items())),
                     f"{label}: {cand} with token embedding and output in Q8_0 (the '_L' convention)")


def canonical_quant(name: str) -> str:
    """'q4_k_m' -> 'Q4_K_M', 'mxfp4_moe' -> 'MXFP4', 'ud-q2_k_xl' -> 'UD-Q2_K_XL'.
    Raises KeyError for unknown names."""
    return resolve_quant(name).label


def quant_families() -> str:
    """The accepted names, for an error hint."""
    return ("llama-quantize types (" + ", ".join(n for n in FTYPE_DEFAULT if n != "MXFP4") + ", MXFP4_MOE), "
            "BF16, native, FP8 (a BF16 model's -FP8 checkpoint); "
            "Unsloth UD-<type> and <type>_XL (UD-Q2_K_XL, UD-IQ1_S, Q4_K_XL); <type>_L; mix-<type> (custom mixes); "
            "ik_llama.cpp types (" + ", ".join(IK_FTYPES[:15]) + ", ... _R4)")


@dataclass(frozen=True)
class Typed:
    """A tensor with the type a recipe gives it and its exact bytes."""

    spec: TensorSpec
    ggml_type: str
    n_bytes: int


def tensor_bytes(type_name: str, shape: tuple[int, ...]) -> int:
    """ggml_nbytes of a contiguous tensor: rows x row_size(type, ne0)."""
    rows = 1
    for d in shape[1:]:
        rows *= d
    return row_bytes(type_name, shape[0]) * rows


def n_dims(shape: tuple[int, ...]) -> int:
    """ggml_n_dims: trailing dimensions of 1 do not count."""
    n = len(shape)
    while n > 1 and shape[n - 1] == 1:
        n -= 1
    return n


# ---- the converter ---------------------------------------------------------------------------

def converter_type(spec: TensorSpec, native_dtype: str, keeps: str) -> str:
    """convert_hf_to_gguf.py --outtype bf16 (ModelBase.prepare_tensors + tensor_force_quant).

    keeps: what the model's converter keeps of the checkpoint format:
      'mxfp4' gpt-oss: MXFP4 experts are repacked as they are (GptOssModel.repack_mxfp4);
      'dsv4'  DeepSeek V4 (DeepseekV4Model.tensor_force_quant): MXFP4 experts, FP8 -> Q8_0,
              nextn eh_proj Q8_0, checkpoint-F32 tensors F32, BF16 matrices BF16, hash table I32;
      ''      nothing: the generic rules below.
    """
    if keeps in ("mxfp4", "dsv4") and native_dtype == "MXFP4":
        return "MXFP4"
    forced: str | None = None
    if keeps == "dsv4":
        if native_dtype == "I64" or spec.role == "tid2eid":
            return "I32"
        if native_dtype == "F8_E4M3" and n_dims(spec.shape) >= 2 or spec.role == "nextn_proj":
            forced = "Q8_0"
        elif native_dtype == "F32":
            forced = "F32"
        elif native_dtype == "BF16" and n_dims(spec.shape) >= 2:
            forced = "BF16"
    # 1-D tensors and norms are F32 whatever was forced
    if n_dims(spec.shape) <= 1 or spec.name.endswith("_norm.weight"):
        return "F32"
    if forced is not None:
        return forced
    if spec.role in ("router", "ssm_conv", "indexer_proj") or not spec.name.endswith(".weight"):
        return "F32"
    if spec.role == "tid2eid":
        return "I32"
    return "BF16"


# ---- llama-quantize --------------------------------------------------------------------------

def _category(name: str) -> str:
    """tensor_get_category (llama-quant.cpp): first substring that matches."""
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for key, cat in (("attn_qkv.weight", "attn_qkv"), ("attn_kv_b.weight", "attn_kv_b"),
                     ("attn_v.weight", "attn_v"), ("attn_k.weight", "attn_k"),
                     ("attn_q.weight", "attn_q"), ("attn_output.weight", "attn_output"),
                     ("ffn_up", "ffn_up"), ("ffn_gate", "ffn_gate"), ("ffn_down", "ffn_down")):
        if key in name:
            return cat
    return "other"


def allows_quantization(name: str, shape: tuple[int, ...]) -> bool:
    """tensor_allows_quantization for the architectures moeplan bundles."""
    if n_dims(shape) < 2 or not name.endswith("weight") or "_norm.weight" in name:
        return False
    blocked = ("ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "ssm_conv1d", "altup", "laurel",
               "per_layer_model_proj", "shortconv.conv.weight", "indexer.k_proj.weight",
               "indexer.q_proj.weight", "attn_rel_b.weight")
    return not any(b in name for b in blocked) and not name.startswith(("position_embd", "token_types"))


def _use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _fallback(target: str, ne0: int) -> str:
    """tensor_type_fallback: a row that is not a whole number of blocks."""
    block = TYPE_SIZES[target][0]
    if ne0 % block == 0:
        return target
    table = {"IQ1_S": "IQ4_NL", "IQ1_M": "IQ4_NL", "IQ2_XXS": "IQ4_NL", "IQ2_XS": "IQ4_NL",
             "IQ2_S": "IQ4_NL", "IQ3_XXS": "IQ4_NL", "IQ3_S": "IQ4_NL", "IQ4_XS": "IQ4_NL",
             "Q2_0": "Q4_0", "Q2_K": "Q4_0", "Q3_K": "Q4_0", "TQ1_0": "Q4_0", "TQ2_0": "Q4_0",
             "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}
    ret = table.get(target, target)
    if ne0 % TYPE_SIZES[ret][0]:
        ret = "F16"
    return ret


@dataclass
class _State:
    """quantize_state_impl: the model facts and counters the rules read."""

    ftype: str
    n_gqa: int
    n_expert: int
    n_layer_all: int
    imatrix: bool = True
    tied: bool = False  # no output.weight: token_embd is quantized as the output
    n_attention_wv: int = 0
    i_attention_wv: int = 0
    i_ffn_down: int = 0


def _layer_of(name: str) -> int:
    return int(name.split(".")[1]) if name.startswith("blk.") else 0


def _ffn_layer(qs: _State, name: str, counter: int) -> int:
    """layer_info: the block number parsed from the name for MoE models, else the counter."""
    return _layer_of(name) if qs.n_expert > 1 else counter


def _impl(qs: _State, new: str, spec: TensorSpec, cat: str) -> str:
    """llama_tensor_get_type_impl (src/llama-quant.cpp at the vendored commit), every ftype of
    FTYPE_DEFAULT; the Falcon, 70B, GLM5-next and BailingMoE3 branches are left out (no
    bundled model takes them)."""
    ft = qs.ftype
    attn_v_like = cat in ("attn_v", "attn_qkv", "attn_kv_b")
    if cat == "output" or (qs.tied and cat == "token_embd"):
        nx = spec.shape[0]
        if ft == "MXFP4" or nx % TYPE_SIZES[new][0]:
            return "Q8_0"
        if ft in _IQ_OUT_Q5K:
            return "Q5_K"
        return new if new == "Q8_0" else "Q6_K"
    if ft == "MXFP4":
        return "MXFP4" if len(spec.shape) > 2 and spec.shape[2] > 1 else "Q8_0"
    if cat == "token_embd":
        if ft in ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M"):
            return "Q2_K"
        if ft in ("IQ2_S", "IQ2_M", "IQ3_XXS"):
            return "IQ3_S"
        if ft in ("TQ1_0", "TQ2_0", "Q2_0"):
            return "Q4_K"
        return new
    if ft in _IQ_LOW:
        iq2_sm = ft in ("IQ2_S", "IQ2_M")
        if attn_v_like:
            qs.i_attention_wv += 1
            if qs.n_gqa >= 4 or qs.n_expert >= 4:
                return "Q4_K"
            return "IQ3_S" if iq2_sm else "Q2_K"
        if qs.n_expert == 8 and cat == "attn_k":
            return "Q4_K"
        if cat == "ffn_down":
            bump = qs.i_ffn_down < qs.n_layer_all // 8
            qs.i_ffn_down += 1
            if bump:
                return "IQ3_S" if iq2_sm else "Q2_K"
            return new
        if cat == "attn_output":
            if qs.n_expert == 8:
                return "Q5_K"
            if ft in ("IQ1_S", "IQ1_M"):
                return "IQ2_XXS"
            return "IQ3_S" if iq2_sm else new
        return new
    if attn_v_like:
        i, n = qs.i_attention_wv, qs.n_attention_wv
        qs.i_attention_wv += 1
        if ft == "Q2_K":
            new = "Q4_K" if qs.n_gqa >= 4 else "Q3_K"
        elif ft == "Q2_K_S" and qs.n_gqa >= 4:
            new = "Q4_K"
        elif ft == "IQ3_XXS":
            new = "Q4_K" if qs.n_gqa >= 4 else "IQ3_XXS" if qs.imatrix else "IQ3_S"
        elif ft in ("IQ3_XS", "IQ3_S") and qs.n_gqa >= 4 or ft == "IQ3_M":
            new = "Q4_K"
        elif ft == "Q3_K_M":
            new = "Q5_K" if i < 2 else "Q4_K"
        elif ft == "Q3_K_L" or ft in ("IQ4_NL", "IQ4_XS") and qs.n_gqa >= 4:
            new = "Q5_K"
        elif ft in ("Q4_K_M", "Q5_K_M") and _use_more_bits(i, n):
            new = "Q6_K"
        elif ft == "Q4_K_S" and i < 4:
            new = "Q5_K"
        if qs.n_expert == 8:
            new = "Q8_0"
        return new
    if cat == "attn_k":
        if qs.n_expert == 8:
            return "Q8_0"
        return {"IQ3_XS": "IQ3_XXS", "IQ3_XXS": "IQ2_S"}.get(ft, new)
    if cat == "attn_q":
        return {"IQ3_XS": "IQ3_XXS", "IQ3_XXS": "IQ2_S"}.get(ft, new)
    if cat == "ffn_down":
        il, n = _ffn_layer(qs, spec.name, qs.i_ffn_down), qs.n_layer_all
        qs.i_ffn_down += 1
        if ft == "Q2_K":
            return "Q3_K"
        if ft == "Q2_K_S":
            return "Q4_K" if il < n // 8 else new
        if ft == "IQ3_XXS" and not qs.imatrix:
            return "Q4_K" if il < n // 8 else "Q3_K"
        if ft == "Q3_K_M":
            return "Q5_K" if il < n // 16 else "Q4_K"  # non-Falcon: use_more_bits or not, Q4_K
        if ft == "IQ3_M" and (il < n // 8 or (qs.n_expert == 8 and _use_more_bits(il, n))):
            return "Q4_K"
        if ft == "Q3_K_L":
            return "Q5_K"
        if ft == "Q4_K_M":
            return "Q6_K" if _use_more_bits(il, n) else new
        if il < n // 8 and ft in ("IQ4_NL", "IQ4_XS") and not qs.imatrix:
            return "Q5_K"
        if ft == "Q5_K_M" and _use_more_bits(il, n):
            return "Q6_K"
        if ft == "Q4_K_S" and il < n // 8:
            return "Q5_K"
        if ft in ("Q4_0", "Q5_0") and qs.imatrix and il < n // 8:
            return "Q4_1" if ft == "Q4_0" else "Q5_1"
        return new
    if cat == "attn_output":
        if qs.n_expert == 8:
            bumped = ("Q2_K", "IQ3_XS", "IQ3_XXS", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M", "IQ3_S",
                      "IQ3_M", "IQ4_XS")
            return "Q5_K" if ft in bumped else new
        return {"Q2_K": "Q3_K", "IQ3_XXS": "IQ3_S", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K", "IQ3_M": "Q4_K"}.get(ft, new)
    if cat in ("ffn_gate", "ffn_up"):
        il = _layer_of(spec.name)
        n = qs.n_layer_all
        if ft == "IQ3_XS" and n // 8 <= il < 7 * n // 8:
            return "IQ3_XXS"
        return new
    return new


# ik_llama.cpp (src/llama-quantize.cpp llama_tensor_get_type, commit 8337e4cd): the output /
# embedding rules, the low-bit branches (IQ2_KS and the _R4 I-quants, IQ1_*_R4, IQ2_KT) and the
# generic attention rule for MoE models (n_expert >= 4: attn_v and every attn_k* tensor Q8_0).
_IK_OUT_Q5K = ("IQ2_K", "IQ3_K", "IQ2_KS", "IQ3_K_R4", "IQ3_KS", "IQ2_K_R4", "IQ3_XXS_R4", "IQ2_KL",
               "IQ2_M_R4", "IQ1_S_R4", "IQ1_M_R4", "IQ2_KT", "IQ3_KT", "IQ1_KT")
_IK_OUT_KEEP = ("Q8_0", "Q8_0_R8", "IQ6_K", "Q6_K_R4", "Q8_K_R8", "Q8_KV", "Q8_KV_R8")
# attn_output of a model with >= 4 experts under these ftypes: Q5_K (IQ2_KL: IQ4_KS)
_IK_ATTN_OUT_Q5K = ("IQ4_K", "IQ4_KSS", "IQ4_KS", "IQ4_KS_R4", "IQ5_KS", "IQ5_KS_R4", "IQ2_K", "IQ3_K",
                    "IQ3_KL", "Q4_K_R4", "IQ4_NL_R4", "IQ4_XS_R8", "Q3_K_R4", "IQ3_KT", "IQ3_KS", "Q2_K_R4",
                    "IQ4_K_R4", "IQ3_K_R4", "IQ2_K_R4", "IQ3_XXS_R4", "IQ3_S_R4")


def _impl_ik(qs: _State, new: str, spec: TensorSpec, cat: str) -> str:
    ft, name = qs.ftype, spec.name
    if cat == "output" or (qs.tied and cat == "token_embd"):
        if spec.shape[0] % 256:
            return "Q8_0"
        if ft in _IK_OUT_Q5K:
            return "IQ4_K" if qs.tied else "Q5_K"
        if ft in ("IQ2_XXS_R4", "IQ2_XS_R4"):
            return "IQ4_K_R4" if qs.tied else "Q5_K_R4"
        if ft in ("IQ3_S_R4", "IQ3_KL", "IQ4_KS", "IQ4_KSS", "IQ4_KS_R4") and qs.tied:
            return "IQ5_K"
        return new if new in _IK_OUT_KEEP else "Q6_K"
    if cat == "token_embd":
        if ft in ("IQ2_XXS_R4", "IQ2_XS_R4", "IQ1_S_R4", "IQ1_M_R4"):
            return "Q2_K"
        if ft == "IQ3_KT":
            return "IQ3_S"
        if ft == "IQ3_XXS_R4":
            return "IQ3_K"
        if ft == "IQ2_M_R4":
            return "IQ3_S"
        if ft in ("IQ1_BN", "IQ2_BN", "IQ2_BN_R4"):
            return "IQ4_NL"
        return new
    low = {"IQ2_KS": "", "IQ2_XXS_R4": "", "IQ2_XS_R4": "", "IQ2_M_R4": "", "IQ1_S_R4": "_R4", "IQ1_M_R4": "_R4",
           "IQ2_KT": ""}
    if ft in low:
        r4 = low[ft]
        if "attn_v.weight" in name:
            qs.i_attention_wv += 1
            if qs.n_expert >= 4 or qs.n_gqa >= 4:
                return "IQ4_K" + r4
            if qs.n_gqa >= 2 or (ft in ("IQ2_KS", "IQ2_M_R4") and qs.n_expert >= 2):
                return "IQ3_K" + r4
            return "IQ3_S" if ft == "IQ2_M_R4" else new
        if qs.n_expert >= 8 and ("attn_k" in name or "attn_q" in name):
            return "Q4_K" + r4
        if "attn_qkv.weight" in name:
            return {"IQ2_KT": "IQ3_K", "IQ2_M_R4": "IQ3_XXS"}.get(ft, "IQ2_K" + r4)
        if "_shexp.weight" in name and ft in ("IQ1_S_R4", "IQ1_M_R4", "IQ2_KT"):
            return "IQ4_K" + r4
        if "ffn_down" in name:
            il = _ffn_layer(qs, name, qs.i_ffn_down)
            bump = (il < qs.n_layer_all // 8) if ft in ("IQ1_S_R4", "IQ1_M_R4", "IQ2_KT") else \
                qs.i_ffn_down < qs.n_layer_all // 8
            qs.i_ffn_down += 1
            if bump:
                return {"IQ2_KT": "IQ3_K", "IQ1_S_R4": "Q2_K_R4", "IQ1_M_R4": "Q2_K_R4",
                        "IQ2_M_R4": "IQ3_S"}.get(ft, "Q2_K")
            return new
        if "attn_output.weight" in name:
            if qs.n_expert >= 4:
                return "Q5_K" + r4
            return "IQ3_S" if ft == "IQ2_M_R4" else new
        return new
    if "attn_v.weight" in name and qs.n_expert >= 4:
        return "Q8_0"
    if "attn_k" in name and "attn_v.weight" not in name and qs.n_expert >= 4:
        return "Q8_0"
    if cat == "attn_output" and qs.n_expert >= 4:
        return "IQ4_KS" if ft == "IQ2_KL" else "Q5_K" if ft in _IK_ATTN_OUT_Q5K else new
    if ft == "IQ3_KL" and cat in ("ffn_gate", "ffn_up", "ffn_down"):
        # use_more_bits layers of the three FFN tensors (experts and shared) take IQ4_KS
        return "IQ4_KS" if _use_more_bits(_ffn_layer(qs, name, 0), qs.n_layer_all) else new
    return new


def loader_order(specs: list[TensorSpec]) -> list[TensorSpec]:
    """llama_model_loader's weights_map order: model-level first, then by block, then name."""
    return sorted(specs, key=lambda t: (-1 if t.layer is None else t.layer, t.name))


def quantize_types(specs: list[TensorSpec], source: dict[str, str], ftype: str, *,
                   n_gqa: int, n_expert: int, n_layer_all: int, imatrix: bool = True) -> dict[str, str]:
    """llama-quantize `ftype` (a key of FTYPE_DEFAULT, or an ik_llama.cpp type of IK_FTYPES)
    applied to a file whose tensor types are `source` (name -> type)."""
    ik = ftype in IK_FTYPES
    default = IK_FTYPE_DEFAULT.get(ftype, ftype) if ik else FTYPE_DEFAULT[ftype]
    quantized = TYPE_SIZES[default][0] > 1  # ggml_is_quantized: F16 / F32 take no rules
    order = loader_order(specs)
    tied = not any(t.name == "output.weight" for t in specs)
    qs = _State(ftype, n_gqa, n_expert, n_layer_all, imatrix, tied)
    qs.n_attention_wv = sum(1 for t in order if _category(t.name) in ("attn_v", "attn_qkv", "attn_kv_b"))
    out: dict[str, str] = {}
    for t in order:
        if not allows_quantization(t.name, t.shape):
            out[t.name] = source[t.name]
            continue
        if not quantized:
            out[t.name] = default
            continue
        new = (_impl_ik if ik else _impl)(qs, default, t, _category(t.name))
        out[t.name] = _fallback(new, t.shape[0])
    return out


def _raise_to_floor(specs: list[TensorSpec], types: dict[str, str], floor: dict[str, str]) -> dict[str, str]:
    """A dynamic mix: each tensor of a floored role (attn / ffn / shexp / embed / output) that
    llama-quantize may quantize gets at least the floor type's bits per weight."""
    from moeplan.planner.model.ggml import bits_per_weight

    out = dict(types)
    for t in specs:
        f = floor.get(t.role)
        if f is None or not allows_quantization(t.name, t.shape):
            continue
        cur = out[t.name]
        if bits_per_weight(cur) < bits_per_weight(f):
            out[t.name] = _fallback(f, t.shape[0])
    return out


class QuantFacts(TypedDict):
    n_gqa: int
    n_expert: int
    n_layer_all: int


def quant_facts(hp: dict[str, Any]) -> QuantFacts:
    """The hparams llama-quantize reads: n_gqa of block 0, n_expert, n_layer_all."""
    def first(v: Any, default: int) -> int:
        if isinstance(v, (list, tuple)):
            v = v[0] if v else default
        return int(v if v is not None else default)

    n_head = first(hp.get("attention.head_count"), 1)
    n_head_kv = first(hp.get("attention.head_count_kv"), n_head)
    return {"n_gqa": n_head // n_head_kv if n_head_kv else 0,
            "n_expert": int(hp.get("expert_count", 0) or 0),
            "n_layer_all": int(hp["block_count"])}


# ---- recipes ---------------------------------------------------------------------------------

def apply_recipe(specs: list[TensorSpec], hp: dict[str, Any], quant: str, native: Any,
                 keeps: str = "") -> list[Typed]:
    """(type, bytes) of every tensor under `quant` (any name resolve_quant accepts).

    `native` is a native.NativeFormat: the checkpoint dtype of each tensor, which the
    converter keeps for some models (`keeps`, see converter_type) and which
    `quant == 'native'` reports."""
    from moeplan.planner.model.native import native_bytes

    q = resolve_quant(quant)
    by_name = {t.name: t for t in specs}
    if q.base == "native":
        out = []
        for t in specs:
            dt = native.dtype(t)
            out.append(Typed(t, dt, native_bytes(t, dt, native.scale_bytes, by_name)))
        return out
    source = {t.name: converter_type(t, native.dtype(t), keeps) for t in specs}
    if q.base == "BF16":
        types = source
    else:
        types = quantize_types(specs, source, q.base, **quant_facts(hp))
    if q.floor:
        types = _raise_to_floor(specs, types, dict(q.floor))
    return [Typed(t, types[t.name], tensor_bytes(types[t.name], t.shape)) for t in specs]


# ---- file size ---------------------------------------------------------------------------------

# GGUF metadata besides the tensor index, for a profile (no file to read it from): the
# tokenizer arrays take about 40 bytes per vocabulary entry (token string with its 8-byte
# length, its 4-byte type, one BPE merge string), the other keys (chat template, rope and
# expert settings) under 64 KiB. Alignment pads each tensor's data to 32 bytes (16 on average).
GGUF_VOCAB_BYTES_PER_TOKEN = 40
GGUF_OTHER_KV_BYTES = 64 * 1024
GGUF_ALIGN_PAD_MEAN = 16


def gguf_metadata_bytes(specs: list[TensorSpec], n_vocab: int) -> int:
    """Estimated bytes of a GGUF besides tensor data: header, key/values, tensor infos."""
    infos = sum(8 + len(t.name) + 4 + 8 * len(t.shape) + 4 + 8 + GGUF_ALIGN_PAD_MEAN for t in specs)
    return 24 + GGUF_OTHER_KV_BYTES + n_vocab * GGUF_VOCAB_BYTES_PER_TOKEN + infos


@dataclass(frozen=True)
class Sized:
    """Typed tensors fitted to a file size, the file's bytes and notes."""

    typed: tuple[Typed, ...]
    file_bytes: int
    notes: tuple[str, ...]


def scale_to_size(typed: list[Typed], n_vocab: int, size_bytes: int | None, *,
                  native: bool = False, scales: str = "experts") -> Sized:
    """Fit a recipe to a real file size S (bytes on disk).

    Without S: file = tensor bytes + metadata estimate M (gguf_metadata_bytes; none for a
    native checkpoint, whose safetensors headers are not counted).
    With S, one part of the model absorbs the difference and the rest keeps the recipe's
    types and bytes (K bytes kept, M metadata):
      scales='experts' (default): the routed-expert matrices (X bytes);
      scales='dense'  : the non-expert tensors llama-quantize may quantize (embeddings,
                        output, attention, shared experts, dense FFN, ...), for models whose
                        published GGUFs keep the checkpoint's expert format (MXFP4) and
                        differ in the rest;
        f = (S - M - K) / X,   bytes_i' = floor(bytes_i * f), +1 byte for the first r of them
    (r the rounding remainder): the tensors sum to exactly S - M and file_bytes == S. Scaled
    tensors keep their recipe type label; the note gives the effective bits per weight.
    Raises InputError when the scaled part would fall under 1 or over 32 bits per weight.
    """
    from moeplan.errors import InputError

    specs = [t.spec for t in typed]
    meta = 0 if native else gguf_metadata_bytes(specs, n_vocab)
    total = sum(t.n_bytes for t in typed)
    if size_bytes is None:
        note = () if native else (f"file size = tensors + {meta / 1e6:.1f} MB of estimated GGUF metadata (tokenizer, keys)",)
        return Sized(tuple(typed), total + meta, note)
    if scales == "dense":
        part = [i for i, t in enumerate(typed)
                if t.spec.role != "experts" and allows_quantization(t.spec.name, t.spec.shape)]
        what = "non-expert tensors"
    else:
        part = [i for i, t in enumerate(typed) if t.spec.role == "experts"]
        what = "routed-expert bytes"
    p_bytes = sum(typed[i].n_bytes for i in part)
    p_elems = sum(typed[i].spec.n_elements for i in part)
    kept = total - p_bytes
    target = size_bytes - meta - kept
    bpw = 8 * target / p_elems if p_elems else 0.0
    below = ""
    if part and bpw < 1.0:
        # the file is smaller than what the recipe keeps: the publisher requantized the kept part
        # too (a 2-bit DeepSeek V4 Flash file is 81 GB while its MXFP4 experts alone take 147 GB),
        # so every tensor llama-quantize may quantize is scaled by one factor
        all_q = [i for i, t in enumerate(typed) if allows_quantization(t.spec.name, t.spec.shape)]
        a_bytes = sum(typed[i].n_bytes for i in all_q)
        a_target = size_bytes - meta - (total - a_bytes)
        kept_what = "routed experts" if scales == "dense" else "non-expert tensors"
        below = (f"the file is smaller than the {(kept + meta) / 1e9:.2f} GB of {kept_what} (and metadata) this "
                 "recipe keeps: the routed experts are scaled down too; ")
        part, p_bytes, target, what = all_q, a_bytes, a_target, "experts and the other quantizable tensors"
        p_elems = sum(typed[i].spec.n_elements for i in part)
        kept = total - p_bytes
        bpw = 8 * target / p_elems if p_elems else 0.0
    if not part or bpw < 1.0 or bpw > 32.0:
        raise InputError(
            f"--size {size_bytes / 1e9:.2f} GB does not fit this model: the tensors it keeps take "
            f"{(kept + meta) / 1e9:.2f} GB, leaving the {what} {bpw:.2f} bits per weight",
            "give the real file size (151GB decimal, 151G binary) or pick the file's recipe with --quant")
    out = list(typed)
    acc = 0
    for i in part:
        nb = typed[i].n_bytes * target // p_bytes
        out[i] = Typed(typed[i].spec, typed[i].ggml_type, nb)
        acc += nb
    for i in part[: target - acc]:
        out[i] = Typed(out[i].spec, out[i].ggml_type, out[i].n_bytes + 1)
    bpw0 = 8 * p_bytes / p_elems
    notes = (f"--size {size_bytes / 1e9:.2f} GB ({size_bytes / 2**30:.2f} GiB): {below}{what} scaled "
             f"x{target / p_bytes:.4f} "
             f"({bpw0:.2f} -> {bpw:.2f} bits per weight); the other tensors keep the recipe's types; "
             f"{meta / 1e6:.1f} MB of GGUF metadata estimated",)
    return Sized(tuple(out), size_bytes, notes)
