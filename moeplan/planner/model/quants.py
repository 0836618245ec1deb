"""Which ggml type every tensor gets under llama.cpp's common quants (pure).

A recipe turns the synthesised tensor index (synth.py) into (type, bytes) per tensor:

* BF16     convert_hf_to_gguf.py --outtype bf16: 1-D tensors, *_norm.weight, biases, routers
           (ffn_gate_inp), ssm_conv1d and the DSA indexer.proj are F32, the rest BF16. Where the
           converter keeps the checkpoint's own format it does so (gpt-oss MXFP4 experts;
           DeepSeek V4: MXFP4 experts, FP8 -> Q8_0, BF16 / F32 kept, I32 hash table).
* Q8_0 ... llama-quantize from that BF16 file (src/llama-quant.cpp llama_tensor_get_type):
  IQ1_S    tensors it may quantize get the ftype's default type, adjusted by
           llama_tensor_get_type_impl (output.weight Q6_K / Q5_K / Q8_0, token_embd for IQ
           quants, attn_v and ffn_down 'use_more_bits' layers, the 8-expert (Mixtral) rules),
           then tensor_type_fallback when a row (ne0) is not a multiple of the block size.
           Tensors it may not quantize keep the converter's type. I-quants assume an importance
           matrix, as published files are made (llama-quantize requires one for IQ2_XXS and
           IQ1_S; for IQ4_XS it only removes the Q5_K bump of the first n/8 ffn_down).
* MXFP4    llama-quantize MXFP4_MOE: 3-D tensors MXFP4, everything else it may quantize Q8_0.
* native   the published checkpoint (native.py): FP8 with block scales, MXFP4, BF16.

Counters follow llama-quantize: tensors are visited in llama_model_loader order (model-level
tensors, then block by block, names sorted within a block); n_layer of the ffn_down rules is
block_count (NextN blocks included).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from moeplan.planner.model.ggml import TYPE_SIZES, row_bytes
from moeplan.planner.model.synth import TensorSpec

# llama-quantize ftype -> default ggml type (llama_ftype_get_default_type)
FTYPE_DEFAULT: dict[str, str] = {
    "Q8_0": "Q8_0", "Q6_K": "Q6_K", "Q5_K_M": "Q5_K", "Q4_K_M": "Q4_K", "Q3_K_M": "Q3_K",
    "Q2_K": "Q2_K", "IQ4_XS": "IQ4_XS", "IQ2_M": "IQ2_S", "IQ2_XXS": "IQ2_XXS", "IQ1_S": "IQ1_S",
    "MXFP4": "MXFP4",
}
QUANTS = tuple(FTYPE_DEFAULT) + ("BF16", "native")
ALIASES = {"MXFP4_MOE": "MXFP4", "NATIVE": "native", "BF16": "BF16"}

_IQ_LOW = ("IQ2_XXS", "IQ1_S", "IQ2_M")  # the IQ2/IQ1 branch of llama_tensor_get_type_impl


def canonical_quant(name: str) -> str:
    """'q4_k_m' -> 'Q4_K_M', 'mxfp4_moe' -> 'MXFP4'. Raises KeyError for unknown names."""
    up = name.strip().upper()
    if up in ALIASES:
        return ALIASES[up]
    if up in FTYPE_DEFAULT:
        return up
    raise KeyError(name)


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
        if native_dtype == "F8_E4M3" and n_dims(spec.shape) >= 2:
            forced = "Q8_0"
        elif spec.role == "nextn_proj":
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
             "Q2_K": "Q4_0", "Q3_K": "Q4_0", "TQ1_0": "Q4_0", "TQ2_0": "Q4_0",
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
    n_attention_wv: int = 0
    i_attention_wv: int = 0
    i_ffn_down: int = 0


def _layer_of(name: str) -> int:
    return int(name.split(".")[1]) if name.startswith("blk.") else 0


def _impl(qs: _State, new: str, spec: TensorSpec, cat: str) -> str:
    """llama_tensor_get_type_impl, for the ftypes in FTYPE_DEFAULT."""
    ft = qs.ftype
    attn_v_like = cat in ("attn_v", "attn_qkv", "attn_kv_b")
    if cat == "output":
        nx = spec.shape[0]
        if ft == "MXFP4" or nx % TYPE_SIZES[new][0]:
            return "Q8_0"
        if ft in _IQ_LOW:
            return "Q5_K"
        return new if new == "Q8_0" else "Q6_K"
    if ft == "MXFP4":
        return "MXFP4" if len(spec.shape) > 2 and spec.shape[2] > 1 else "Q8_0"
    if cat == "token_embd":
        if ft in ("IQ2_XXS", "IQ1_S"):
            return "Q2_K"
        if ft == "IQ2_M":
            return "IQ3_S"
        return new
    if ft in _IQ_LOW:
        if attn_v_like:
            qs.i_attention_wv += 1
            if qs.n_gqa >= 4 or qs.n_expert >= 4:
                return "Q4_K"
            return "IQ3_S" if ft == "IQ2_M" else "Q2_K"
        if qs.n_expert == 8 and cat == "attn_k":
            return "Q4_K"
        if cat == "ffn_down":
            bump = qs.i_ffn_down < qs.n_layer_all // 8
            qs.i_ffn_down += 1
            if bump:
                return "IQ3_S" if ft == "IQ2_M" else "Q2_K"
            return new
        if cat == "attn_output":
            if qs.n_expert == 8:
                return "Q5_K"
            return {"IQ1_S": "IQ2_XXS", "IQ2_M": "IQ3_S"}.get(ft, new)
        return new
    if attn_v_like:
        i, n = qs.i_attention_wv, qs.n_attention_wv
        qs.i_attention_wv += 1
        if ft == "Q2_K":
            new = "Q4_K" if qs.n_gqa >= 4 else "Q3_K"
        elif ft == "Q3_K_M":
            new = "Q5_K" if i < 2 else "Q4_K"
        elif ft == "IQ4_XS" and qs.n_gqa >= 4:
            new = "Q5_K"
        elif ft in ("Q4_K_M", "Q5_K_M") and _use_more_bits(i, n):
            new = "Q6_K"
        if qs.n_expert == 8:
            new = "Q8_0"
        return new
    if cat == "attn_k":
        return "Q8_0" if qs.n_expert == 8 else new
    if cat == "ffn_down":
        il, n = _layer_of(spec.name), qs.n_layer_all
        if ft == "Q2_K":
            return "Q3_K"
        if ft == "Q3_K_M":
            return "Q5_K" if il < n // 16 else "Q4_K"
        if ft in ("Q4_K_M", "Q5_K_M") and _use_more_bits(il, n):
            return "Q6_K"
        if ft == "IQ4_XS" and il < n // 8 and not qs.imatrix:
            return "Q5_K"
        return new
    if cat == "attn_output":
        if qs.n_expert == 8:
            return "Q5_K" if ft in ("Q2_K", "Q3_K_M", "Q4_K_M", "IQ4_XS") else new
        return {"Q2_K": "Q3_K", "Q3_K_M": "Q4_K"}.get(ft, new)
    return new


def loader_order(specs: list[TensorSpec]) -> list[TensorSpec]:
    """llama_model_loader's weights_map order: model-level first, then by block, then name."""
    return sorted(specs, key=lambda t: (-1 if t.layer is None else t.layer, t.name))


def quantize_types(specs: list[TensorSpec], source: dict[str, str], ftype: str, *,
                   n_gqa: int, n_expert: int, n_layer_all: int, imatrix: bool = True) -> dict[str, str]:
    """llama-quantize `ftype` applied to a file whose tensor types are `source` (name -> type)."""
    default = FTYPE_DEFAULT[ftype]
    order = loader_order(specs)
    qs = _State(ftype, n_gqa, n_expert, n_layer_all, imatrix)
    qs.n_attention_wv = sum(1 for t in order if _category(t.name) in ("attn_v", "attn_qkv", "attn_kv_b"))
    out: dict[str, str] = {}
    for t in order:
        if not allows_quantization(t.name, t.shape):
            out[t.name] = source[t.name]
            continue
        new = _impl(qs, default, t, _category(t.name))
        out[t.name] = _fallback(new, t.shape[0])
    return out


def quant_facts(hp: dict[str, Any]) -> dict[str, int]:
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
    """(type, bytes) of every tensor under `quant` (a name of QUANTS).

    `native` is a native.NativeFormat: the checkpoint dtype of each tensor, which the
    converter keeps for some models (`keeps`, see converter_type) and which
    `quant == 'native'` reports."""
    from moeplan.planner.model.native import native_bytes

    by_name = {t.name: t for t in specs}
    if quant == "native":
        out = []
        for t in specs:
            dt = native.dtype(t)
            out.append(Typed(t, dt, native_bytes(t, dt, native.scale_bytes, by_name)))
        return out
    source = {t.name: converter_type(t, native.dtype(t), keeps) for t in specs}
    if quant == "BF16":
        types = source
    else:
        types = quantize_types(specs, source, quant, **quant_facts(hp))
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
    notes = (f"--size {size_bytes / 1e9:.2f} GB ({size_bytes / 2**30:.2f} GiB): {what} scaled x{target / p_bytes:.4f} "
             f"({bpw0:.2f} -> {bpw:.2f} bits per weight); the other tensors keep the recipe's types; "
             f"{meta / 1e6:.1f} MB of GGUF metadata estimated",)
    return Sized(tuple(out), size_bytes, notes)
