"""Bytes of a model in its published checkpoint format (pure).

A scheme maps each tensor role (synth.ROLES) to a storage dtype; a profile may override roles
(`[native] dtypes = {...}` in its TOML, with the source that says so). Bytes per element:

  BF16 2, F32 4, I64 8, I32 4
  MXFP4    4-bit values + one 8-bit scale per 32 (gpt-oss *_blocks/*_scales, DeepSeek V4 FP4
           experts with float8_e8m0 scales): 17 bytes per 32 elements, the same as ggml MXFP4
  F8_E4M3  1 byte per element plus one scale per 128x128 block of each matrix (DeepSeek-style
           `weight_scale_inv` float32 = 4 bytes; DeepSeek V4 float8_e8m0 = 1 byte)
  INT4     compressed-tensors "pack-quantized" W4A16, symmetric, group_size 32 (Kimi-K2-Thinking's
           routed experts): 4-bit integers packed 8 per int32 plus one bf16 `weight_scale` per
           32: 18 bytes per 32 elements (4.5 bits per weight, Q4_0's block size)

MLA's kv_b_proj is one matrix in the checkpoint but two GGUF tensors (attn_k_b, attn_v_b): its
block scales are counted on the merged [n_head*(nope+v), kv_lora] matrix and split between the
two in proportion to their elements, so the sum is the checkpoint's.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from moeplan.planner.model.synth import TensorSpec

FP8 = "F8_E4M3"

SCHEMES: dict[str, dict[str, str]] = {
    # everything bf16 except the routing-correction bias (kept float32 in the checkpoints)
    "bf16": {"*": "BF16", "probs_bias": "F32"},
    # DeepSeek V3 / Kimi K2 / MiniMax M2 style: linear layers FP8 (weight_block_size 128x128,
    # float32 scales); embeddings, lm_head, routers and vectors unquantized
    "fp8_block128": {"*": FP8, "embed": "BF16", "output": "BF16", "router": "BF16",
                     "vector": "BF16", "probs_bias": "F32", "nextn_embed": "BF16",
                     "nextn_head": "BF16", "indexer_proj": "BF16", "tid2eid": "I64", "ssm_conv": "BF16"},
    # DeepSeek V4: FP4 experts (e8m0 scale per 32), FP8 attention / shared experts (e8m0
    # 128x128 scales), bf16 embeddings / compressors / indexer, float32 hyper-connections
    "dsv4": {"*": FP8, "experts": "MXFP4", "embed": "BF16", "output": "BF16", "compressor": "BF16",
             "indexer": "BF16", "router": "BF16", "vector": "BF16", "probs_bias": "F32",
             "hc": "F32", "sink": "F32", "tid2eid": "I64", "nextn_embed": "BF16", "nextn_head": "BF16"},
    # gpt-oss: MXFP4 experts (*_blocks uint8 + *_scales uint8 per 32), everything else bf16
    "gpt_oss": {"*": "BF16", "experts": "MXFP4", "probs_bias": "BF16"},
    # Kimi-K2-Thinking: routed experts INT4 (quantization_config targets Linear and ignores
    # lm_head, self_attn, shared_experts and the dense MLP), everything else bf16
    "int4_g32": {"*": "BF16", "experts": "INT4", "probs_bias": "F32"},
    # Kimi-K3: routed experts MXFP4 (compressed-tensors mxfp4-pack-quantized, uint8 scale per 32;
    # the quantization_config ignores self_attn, shared_experts, the dense MLP and lm_head), the
    # rest bf16; the KDA conv1d weights and the routing bias float32 in the tensor table
    "kimi_k3": {"*": "BF16", "experts": "MXFP4", "probs_bias": "F32", "ssm_conv": "F32"},
}
SCALE_BYTES = {"fp8_block128": 4, "dsv4": 1}
# a BF16 model's published "-FP8" checkpoint (Qwen/Qwen3-*-FP8, zai-org/GLM-*-FP8 ...): transformers'
# FineGrainedFP8 format, quant_method fp8, weight_block_size [128, 128], float32 weight_scale_inv,
# modules_to_not_convert ["gate", "lm_head"] (the format as TensorRT-LLM's auto_deploy
# QuantizeFineGrainedFP8MOE documents it, search-index id 51922325736): nn.Linear layers FP8, the
# embeddings, lm_head, routers, vectors and convolutions bf16 -- the fp8_block128 scheme
FP8_CHECKPOINT = "fp8_block128"
FP8_FROM = ("bf16", "fp8_block128")  # native schemes whose models publish such a checkpoint


@dataclass(frozen=True)
class NativeFormat:
    """A checkpoint's native weight format: its scheme and per-tensor overrides."""

    scheme: str
    overrides: tuple[tuple[str, str], ...] = field(default=())

    def dtype(self, spec: TensorSpec) -> str:
        role = native_role(spec)
        over = dict(self.overrides)
        if role in over:
            return over[role]
        table = SCHEMES[self.scheme]
        if role in table:
            return table[role]
        if spec.role in table:
            return table[spec.role]
        return table["*"]

    @property
    def scale_bytes(self) -> int:
        return SCALE_BYTES.get(self.scheme, 4)


def native_role(spec: TensorSpec) -> str:
    """The role with the few vector kinds the schemes tell apart."""
    if "exp_probs_b" in spec.name:
        return "probs_bias"
    if "attn_sinks" in spec.name:
        return "sink"
    if spec.name.startswith("output_hc_") or ".hc_" in spec.name:
        return "hc"
    return spec.role


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _blocks(shape: tuple[int, ...]) -> int:
    """128x128 scale blocks of a (stack of) matrices in ggml order {in, out, n}."""
    ne0 = shape[0]
    ne1 = shape[1] if len(shape) > 1 else 1
    stack = 1
    for d in shape[2:]:
        stack *= d
    return _ceil(ne0, 128) * _ceil(ne1, 128) * stack


def _kv_b_blocks(specs_by_name: dict[str, TensorSpec], spec: TensorSpec) -> int:
    """Share of the merged kv_b_proj scale blocks that falls to attn_k_b or attn_v_b."""
    pre = spec.name.rsplit(".", 2)[0]
    k = specs_by_name[pre + ".attn_k_b.weight"]
    v = specs_by_name[pre + ".attn_v_b.weight"]
    nope, kv_lora, n_head = k.shape
    d_v = v.shape[1]
    total = _ceil(n_head * (nope + d_v), 128) * _ceil(kv_lora, 128)
    k_share = total * k.n_elements // (k.n_elements + v.n_elements)
    return k_share if spec is k or spec.name == k.name else total - k_share


def native_bytes(spec: TensorSpec, dtype: str, scale_bytes: int,
                 specs_by_name: dict[str, TensorSpec]) -> int:
    n = spec.n_elements
    if dtype == "MXFP4":
        return _ceil(n, 32) * 17
    if dtype == "INT4":
        return _ceil(n, 32) * 18
    if dtype == FP8:
        if len(spec.shape) < 2:
            return n
        if spec.name.endswith((".attn_k_b.weight", ".attn_v_b.weight")):
            return n + _kv_b_blocks(specs_by_name, spec) * scale_bytes
        return n + _blocks(spec.shape) * scale_bytes
    return n * {"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "I32": 4, "U8": 1, "I8": 1}[dtype]
