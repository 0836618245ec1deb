"""ModelSpec: what a MoE model is made of, to the byte.

A ModelSpec is built by `probes/` from a GGUF file (tensor index), a Hugging Face folder
(config.json + safetensors headers) or a bundled profile (synthesised tensor index), and is
plain data from then on. Tensor names follow llama.cpp's GGUF names (`blk.3.ffn_up_exps.weight`)
whatever the source, so launch patterns can be checked against them.

Shapes are in ggml order: ne0 (the row length, the input dimension of a matrix) first.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

# Tensor groups. `experts` are the routed-expert matrices that a placement moves between GPU
# and CPU (what `-ot blk\.N\.ffn_.*_exps\.weight=CPU` matches); `expert_aux` are the other
# tensors of routed experts (biases, per-expert scales), which such patterns leave on the GPU.
GROUPS = ("embed", "output", "attn", "norm", "ffn", "shared", "router", "experts",
          "expert_aux", "other")

LAYER_KINDS = ("moe", "dense", "nextn")

_BLK_RE = re.compile(r"^blk\.(\d+)\.(.+)$")
_EXPS_RE = re.compile(r"^ffn_(gate_up|gate|up|down)_(ch)?exps\.(.+)$")


def hp_at(hp: dict, key: str, il: int, default=None):
    """A key that may be a scalar or a per-layer array (llama.cpp get_key_or_arr)."""
    v = hp.get(key, default)
    if isinstance(v, (list, tuple)):
        return v[il] if il < len(v) else default
    return v


def kv_head_dims(hp: dict, n_head: int) -> tuple[int, int]:
    """(d_k, d_v) as llama.cpp's hparams resolve them: attention.key_length / value_length,
    else n_embd / n_head (llama-model.cpp: n_embd_head_k = n_embd / n_head by default)."""
    def first(key: str) -> int:
        v = hp.get(key)
        if isinstance(v, (list, tuple)):
            v = v[0] if v else None
        return int(v or 0)

    default = first("embedding_length") // max(1, n_head)
    return first("attention.key_length") or default, first("attention.value_length") or default


def classify_tensor(name: str) -> tuple[int | None, str]:
    """Return (layer index or None, group) of a GGUF tensor name."""
    m = _BLK_RE.match(name)
    if not m:
        if name.startswith("token_embd") or name.startswith("per_layer_token_embd"):
            return None, "embed"
        if name.startswith("output_norm"):
            return None, "norm"
        if name.startswith("output"):
            return None, "output"
        return None, "other"
    layer, rest = int(m.group(1)), m.group(2)
    e = _EXPS_RE.match(rest)
    if e:
        return layer, "experts" if e.group(3) == "weight" else "expert_aux"
    if "shexp" in rest:
        return layer, "shared"
    if rest.startswith("ffn_gate_inp") or rest.startswith("exp_probs_b") or rest.startswith("ffn_gate_tid2eid"):
        return layer, "router"
    if rest.endswith("norm.weight") or rest.endswith("norm.bias") or "_norm" in rest.split(".")[0]:
        return layer, "norm"
    if rest.startswith("ffn_"):
        return layer, "ffn"
    return layer, "attn"


@dataclass(frozen=True)
class Tensor:
    """One tensor of the model file. `n_bytes` is exact (from type and shape)."""

    name: str
    shape: tuple[int, ...]
    ggml_type: str
    n_bytes: int
    layer: int | None
    group: str

    @cached_property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class KvComponent:
    """One cache tensor of a layer, as llama.cpp allocates it.

    bytes = row_size(dtype, n_embd) * cells, where cells is:
      'ctx'   : the context size padded to 256 (a full-attention or MLA cache)
      'swa'   : min(ctx, pad256(window * n_seq + n_ubatch)) (sliding-window layers)
      'swa-seq': pad256(min(ctx_seq, window + n_ubatch)) per sequence, never unified (DeepSeek V4 raw)
      'seq'   : one row per sequence (recurrent conv/ssm state; always f32)
      'ratio' : pad256(max(1, ceil(ctx / ratio))) per sequence (DeepSeek V4 compressed caches)
      'fixed' : `window` rows, whatever the context (compressor state buffers)
    dtype 'k' / 'v' means the user's -ctk / -ctv type; otherwise a fixed ggml type name.
    """

    name: str
    n_embd: int
    cells: str = "ctx"
    dtype: str = "k"
    ratio: int = 1
    window: int = 0


@dataclass(frozen=True)
class LayerSpec:
    """One block of the model: its kind, attention, KV components and tensors."""

    index: int
    kind: str  # 'moe' | 'dense' | 'nextn'
    attention: str  # label: 'full', 'swa', 'mla', 'recurrent', 'csa', 'hca', ...
    kv: tuple[KvComponent, ...]
    tensors: tuple[Tensor, ...]

    def bytes_of(self, *groups: str) -> int:
        return sum(t.n_bytes for t in self.tensors if t.group in groups)

    @cached_property
    def n_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)

    @cached_property
    def expert_bytes(self) -> int:
        """Routed-expert matrices: what moves to the CPU when this layer's experts do."""
        return self.bytes_of("experts")

    @cached_property
    def resident_bytes(self) -> int:
        """Everything else of the layer (attention, norms, router, shared expert, biases)."""
        return self.n_bytes - self.expert_bytes

    @cached_property
    def expert_types(self) -> tuple[str, ...]:
        return tuple(sorted({t.ggml_type for t in self.tensors if t.group == "experts"}))

    @cached_property
    def expert_elements(self) -> int:
        return sum(t.n_elements for t in self.tensors if t.group == "experts")

    def bytes_by_group(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tensors:
            out[t.group] = out.get(t.group, 0) + t.n_bytes
        return out


@dataclass(frozen=True)
class ModelSpec:
    """A MoE model: hyper-parameters plus the exact tensor index, grouped by layer.

    `layers` holds every block in the file, including NextN/MTP blocks (kind 'nextn') that
    llama.cpp loads with TENSOR_SKIP: they count in the file size but not in memory.
    """

    name: str
    arch: str  # llama.cpp architecture name (general.architecture)
    source: str  # 'gguf', 'hf' or 'profile'
    quant: str  # file type label ('Q4_K_M', 'mixed', 'BF16', ...)
    n_embd: int
    n_vocab: int
    n_ctx_train: int
    n_head: int
    n_experts: int
    n_experts_used: int
    n_experts_shared: int
    n_ff_exp: int
    layers: tuple[LayerSpec, ...]
    globals: tuple[Tensor, ...]
    file_bytes: int  # bytes on disk (all shards); >= sum of tensor bytes (header, padding)
    path: str = ""  # the file or folder read ('' for profiles)
    shards: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    attention_kind: str = ""  # one-line description: 'MLA', 'GQA + SWA', ...
    needs_flash_attn_for_v_quant: bool = True
    mla: bool = False  # K and V cache types must match (llama.cpp MLA)
    extra: tuple[tuple[str, object], ...] = field(default=())
    # bytes of NextN blocks llama.cpp loads although the blocks are skipped (the architecture
    # record's nextn_probs_bias_loaded; set by build_model_spec)
    nextn_loaded_bytes: int = 0

    # ---- derived views (computed once per instance: the search asks for them thousands
    # of times; the dataclass is frozen, so they cannot go stale) -----------------------------
    @cached_property
    def head_dims(self) -> tuple[int, int]:
        """(d_k, d_v) of the attention heads (kv_head_dims)."""
        return kv_head_dims({"embedding_length": self.n_embd, **dict(self.extra)}, self.n_head)

    @property
    def head_dim_k(self) -> int:
        return self.head_dims[0]

    @property
    def head_dim_v(self) -> int:
        return self.head_dims[1]

    @cached_property
    def trunk_layers(self) -> tuple[LayerSpec, ...]:
        return tuple(layer for layer in self.layers if layer.kind != "nextn")

    @cached_property
    def moe_layers(self) -> tuple[LayerSpec, ...]:
        return tuple(layer for layer in self.layers if layer.kind == "moe")

    @cached_property
    def moe_layer_indices(self) -> tuple[int, ...]:
        return tuple(layer.index for layer in self.moe_layers)

    @cached_property
    def n_layers(self) -> int:
        """Trunk blocks (what llama.cpp calls n_layer; NextN blocks excluded)."""
        return len(self.trunk_layers)

    @cached_property
    def tensors(self) -> tuple[Tensor, ...]:
        out = list(self.globals)
        for layer in self.layers:
            out.extend(layer.tensors)
        return tuple(out)

    @cached_property
    def tensor_bytes(self) -> int:
        """Sum over the tensor index (what the checker compares with)."""
        return sum(t.n_bytes for t in self.globals) + sum(layer.n_bytes for layer in self.layers)

    @cached_property
    def loaded_bytes(self) -> int:
        """Bytes llama.cpp loads: everything but skipped NextN blocks, plus what of those
        blocks it loads anyway (nextn_loaded_bytes: glm-dsa.cpp and deepseek32.cpp create a
        NextN block's exp_probs_b without the block's TENSOR_SKIP flag, n_expert * 4 bytes;
        measured on a glm-dsa fixture)."""
        total = sum(t.n_bytes for t in self.globals) + sum(layer.n_bytes for layer in self.trunk_layers)
        return total + self.nextn_loaded_bytes

    @cached_property
    def expert_bytes(self) -> int:
        return sum(layer.expert_bytes for layer in self.trunk_layers)

    @cached_property
    def gpu_resident_bytes(self) -> int:
        """Bytes that stay on the GPU under full expert offload (all but routed experts)."""
        return self.loaded_bytes - self.expert_bytes

    def bytes_by_group(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.globals:
            out[t.group] = out.get(t.group, 0) + t.n_bytes
        for layer in self.trunk_layers:
            for g, b in layer.bytes_by_group().items():
                out[g] = out.get(g, 0) + b
        return out

    @cached_property
    def expert_bytes_per_expert(self) -> float:
        """S_exp: bytes of one routed expert of an average MoE layer."""
        moe = self.moe_layers
        if not moe or not self.n_experts:
            return 0.0
        return sum(layer.expert_bytes for layer in moe) / len(moe) / self.n_experts

    @cached_property
    def expert_params_per_expert(self) -> float:
        """P_exp: parameters of one routed expert (gate + up + down)."""
        moe = self.moe_layers
        if not moe or not self.n_experts:
            return 0.0
        return sum(layer.expert_elements for layer in moe) / len(moe) / self.n_experts

    @cached_property
    def dense_bytes_read_per_token(self) -> int:
        """R_dense: non-expert weight bytes read per decoded token: every resident weight of
        the trunk and the output, and one row of the embedding table."""
        total = sum(t.n_bytes // max(1, self.n_vocab) if t.group == "embed" else t.n_bytes for t in self.globals)
        return total + sum(layer.resident_bytes for layer in self.trunk_layers)

    def bytes_read_per_token(self) -> int:
        """Weight bytes touched to decode one token: R_dense plus k routed experts per MoE
        layer. KV reads are extra and grow with depth (see cost.py)."""
        experts = sum(layer.expert_bytes * self.n_experts_used // self.n_experts
                      for layer in self.trunk_layers if layer.kind == "moe" and self.n_experts)
        return self.dense_bytes_read_per_token + experts

    def digest(self) -> str:
        """Short content hash of everything that decides memory and speed."""
        h = hashlib.sha256()
        h.update(json.dumps([self.arch, self.n_embd, self.n_experts, self.n_experts_used,
                             self.n_ctx_train], sort_keys=True).encode())
        for layer in self.layers:
            h.update(f"{layer.index}:{layer.kind}:{layer.attention}:{layer.kv}".encode())
            for t in layer.tensors:
                h.update(f"{t.name}:{t.shape}:{t.ggml_type}:{t.n_bytes};".encode())
        for t in self.globals:
            h.update(f"{t.name}:{t.shape}:{t.ggml_type}:{t.n_bytes};".encode())
        return h.hexdigest()[:16]

    def summary_dict(self) -> dict:
        return {
            "name": self.name,
            "arch": self.arch,
            "source": self.source,
            "path": self.path,
            "quant": self.quant,
            "attention_kind": self.attention_kind,
            "n_layers": self.n_layers,
            "n_moe_layers": len(self.moe_layers),
            "n_nextn_layers": len(self.layers) - self.n_layers,
            "n_experts": self.n_experts,
            "n_experts_used": self.n_experts_used,
            "n_experts_shared": self.n_experts_shared,
            "n_embd": self.n_embd,
            "n_ff_exp": self.n_ff_exp,
            "n_vocab": self.n_vocab,
            "n_ctx_train": self.n_ctx_train,
            "digest": self.digest(),
        }


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a synthesised index (planner/model/synth.py). `shape` is ggml order
    (ne0 = row length)."""

    name: str
    shape: tuple[int, ...]
    role: str  # see ROLES
    layer: int | None = None

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)


# Roles quants.py keys on. 'vector' = any 1-D tensor or bias, always kept F32 by the converter.
ROLES = ("embed", "output", "vector", "attn", "router", "tid2eid", "experts", "expert_bias",
         "shexp", "ffn", "hc", "compressor", "indexer", "indexer_proj", "ssm", "ssm_conv",
         "nextn_proj", "nextn_embed", "nextn_head")


def group_tensors(tensors: Iterable[Tensor]) -> tuple[tuple[Tensor, ...], dict[int, list[Tensor]]]:
    """Split a flat tensor list into model-level tensors and per-layer lists."""
    globals_: list[Tensor] = []
    per_layer: dict[int, list[Tensor]] = {}
    for t in tensors:
        if t.layer is None:
            globals_.append(t)
        else:
            per_layer.setdefault(t.layer, []).append(t)
    return tuple(globals_), per_layer


def make_tensor(name: str, shape: tuple[int, ...], ggml_type: str, n_bytes: int) -> Tensor:
    layer, group = classify_tensor(name)
    return Tensor(name=name, shape=tuple(int(d) for d in shape), ggml_type=ggml_type,
                  n_bytes=int(n_bytes), layer=layer, group=group)
