"""ModelSpec -> the executor's view of each block: which tensor plays which role, with what shape.

Pure (no torch): every decision about how a block is computed is made here from tensor names
and shapes, so it can be tested and printed without allocating anything.

Shapes: ModelSpec keeps ggml order (ne0 first); torch wants the reverse. A ggml matrix
(ne0=in, ne1=out) is the torch Linear weight (out, in); a ggml expert tensor
(n_embd, n_ff, n_expert) is the torch tensor (n_expert, n_ff, n_embd), so one expert's matrix
is contiguous in memory (what `ggml_mul_mat_id` reads).

Attention of a block is one of
  gqa      attn_q/k/v/output (+ biases, q/k norms, sinks, an output gate folded into attn_q),
           full, sliding-window or chunked, cache K and V per kv head
  mla      attn_q_a/q_b (or attn_q), attn_kv_a_mqa, attn_k_b/v_b (or attn_kv_b), attn_output,
           cache the latent (kv_lora + rope) only, computed absorbed as llama.cpp does
  generic  anything else (recurrent/linear attention, DeepSeek V4's compressed caches):
           every attention tensor is applied as a projection and the cache state is read and
           written with the sizes of the block's KvComponents. Bytes and cache traffic are
           those of the model; the arithmetic is a stand-in, and the output says so.
Tensors of a block that no role claims ("side" tensors) are still read once per step as
projections, so the bytes a step touches are the model's.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from moeplan.planner.model import registry
from moeplan.planner.model.spec import KvComponent, LayerSpec, ModelSpec, Tensor

# llama.cpp's expert gating functions (LLAMA_EXPERT_GATING_FUNC_TYPE_*, src/llama-hparams.h)
GATING_BY_ID = {1: "softmax", 2: "sigmoid", 3: "softmax_weight", 4: "sqrt_softplus"}

def torch_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(reversed(shape))


@dataclass(frozen=True)
class Gating:
    """How the router turns logits into k expert ids and weights (llama.cpp build_moe_ffn)."""

    func: str = "softmax"
    norm_weights: bool = False
    scale: float = 1.0
    select_on_logits: bool = False  # llama4: top-k on the raw logits, sigmoid after
    weight_before_ffn: bool = False  # llama4: scale the input, not the output
    n_groups: int = 1  # DeepSeek V3 group-limited routing
    n_groups_used: int = 1
    activation: str = "silu"  # 'silu' (SwiGLU) or 'swiglu_oai' (gpt-oss)


@dataclass(frozen=True)
class Weight:
    """One tensor as the executor allocates it: GGUF name, torch shape, file bytes and type."""

    name: str
    shape: tuple[int, ...]
    file_bytes: int
    ggml_type: str

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def _w(t: Tensor) -> Weight:
    return Weight(t.name, torch_shape(t.shape), t.n_bytes, t.ggml_type)


@dataclass(frozen=True)
class AttnLayout:
    kind: str  # 'gqa' | 'mla' | 'generic'
    label: str  # the ModelSpec attention label ('full', 'swa', 'mla', 'recurrent', ...)
    weights: dict[str, Weight]  # role -> weight
    kv: tuple[KvComponent, ...]  # every cache component of the block; gqa/mla own 'k' (and 'v'),
    # the rest (a DSA indexer's keys) is kept by the generic state path
    n_head: int = 0
    n_head_kv: int = 0
    d_k: int = 0
    d_v: int = 0
    window: int = 0  # swa window / llama4 chunk (tokens); 0 = full
    chunked: bool = False
    gated: bool = False  # attn_q holds query and an output gate (Qwen3-Next full attention)
    kv_lora: int = 0  # MLA
    d_rope: int = 0
    d_nope: int = 0
    kv_b_fused: bool = False  # MLA with attn_kv_b instead of attn_k_b / attn_v_b
    rope_base: float = 10000.0


@dataclass(frozen=True)
class ExpertLayout:
    """Routed experts of one MoE block. `gate_up` is fused in the executor (same bytes)."""

    n_expert: int
    n_used: int
    n_embd: int
    n_ff: int
    names: dict[str, str]  # 'gate','up','down' or 'gate_up','down' -> GGUF name
    bias_names: dict[str, str]  # 'gate','up','gate_up','down' -> GGUF name of the bias
    file_types: dict[str, str]  # same keys as names -> ggml type
    file_bytes_per_expert: int  # bytes of one expert's matrices in the model file
    fused_in_file: bool

    @property
    def n_elements_per_expert(self) -> int:
        return 3 * self.n_ff * self.n_embd


@dataclass(frozen=True)
class FfnLayout:
    kind: str  # 'dense' | 'moe' | 'none'
    weights: dict[str, Weight]  # dense: gate/up/down; moe: router, router_bias, probs_bias, shexp_*
    experts: ExpertLayout | None = None
    gating: Gating = field(default_factory=Gating)

    @property
    def routed(self) -> ExpertLayout:
        """The routed experts of a 'moe' block (an error on a block without them)."""
        if self.experts is None:
            raise ValueError(f"a {self.kind!r} block has no routed experts")
        return self.experts


@dataclass(frozen=True)
class LayerLayout:
    index: int
    kind: str  # ModelSpec kind: 'moe' | 'dense'
    attn_norm: Weight | None
    ffn_norm: Weight | None
    attn: AttnLayout
    ffn: FfnLayout
    side: tuple[Weight, ...]  # tensors no role claims, read once per step

    @property
    def expert_tier_key(self) -> str:
        return "moe" if self.ffn.kind == "moe" else "dense"


@dataclass(frozen=True)
class ModelLayout:
    name: str
    arch: str
    n_embd: int
    n_vocab: int
    layers: tuple[LayerLayout, ...]
    token_embd: Weight
    output: Weight | None  # None: tied to token_embd
    output_norm: Weight | None
    notes: tuple[str, ...] = ()

    def layer(self, index: int) -> LayerLayout:
        for lay in self.layers:
            if lay.index == index:
                return lay
        raise KeyError(index)


def _extra(model: ModelSpec) -> dict:
    return dict(model.extra)


def _short(layer: LayerSpec, t: Tensor) -> str:
    return t.name[len(f"blk.{layer.index}."):]


def choose_gating(model: ModelSpec, has_probs_bias: bool) -> Gating:
    hp = _extra(model)
    arch = registry.get(model.arch)
    func, norm = arch.gating  # build_moe_ffn's default where the GGUF has no key
    gid = int(hp.get("expert_gating_func", 0) or 0)
    if gid in GATING_BY_ID:
        func = GATING_BY_ID[gid]
    elif model.arch == "deepseek2" and has_probs_bias:
        func = "sigmoid"  # a V3-style file (selection bias) without the key
    if "expert_weights_norm" in hp:
        norm = bool(hp["expert_weights_norm"])
    scale = float(hp.get("expert_weights_scale", 0.0) or 0.0) or 1.0
    return Gating(
        func=func, norm_weights=norm, scale=scale,
        select_on_logits=arch.router_on_logits, weight_before_ffn=arch.router_on_logits,
        n_groups=int(hp.get("expert_group_count", 1) or 1),
        n_groups_used=int(hp.get("expert_group_used_count", 1) or 1),
        activation=arch.activation,
    )


def _expert_layout(model: ModelSpec, layer: LayerSpec, by_short: dict[str, Tensor]) -> ExpertLayout:
    names: dict[str, str] = {}
    bias: dict[str, str] = {}
    types: dict[str, str] = {}
    n_bytes = 0
    n_expert = n_ff = n_embd = 0
    for part in ("gate_up", "gate", "up", "down"):
        for ch in ("", "ch"):
            t = by_short.get(f"ffn_{part}_{ch}exps.weight")
            if t is not None:
                names[part] = t.name
                types[part] = t.ggml_type
                n_bytes += t.n_bytes
                n_expert = t.shape[2] if len(t.shape) == 3 else 1
                if part == "down":
                    n_ff, n_embd = t.shape[0], t.shape[1]
            b = by_short.get(f"ffn_{part}_{ch}exps.bias")
            if b is not None:
                bias[part] = b.name
    where = f"{model.name} block {layer.index}"
    if "down" not in names or not ("gate_up" in names or ("gate" in names and "up" in names)):
        raise ValueError(f"{where}: routed experts without gate/up/down matrices: {sorted(names)}")
    return ExpertLayout(
        n_expert=n_expert, n_used=model.n_experts_used, n_embd=n_embd, n_ff=n_ff, names=names,
        bias_names=bias, file_types=types, file_bytes_per_expert=n_bytes // max(1, n_expert),
        fused_in_file="gate_up" in names,
    )


def _gqa(model: ModelSpec, layer: LayerSpec, by_short: dict[str, Tensor], used: set[str]) -> AttnLayout | None:
    need = ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight")
    if not all(n in by_short for n in need):
        return None
    hp = _extra(model)
    q, k, v, o = (by_short[n] for n in need)
    kv_k = next((c for c in layer.kv if c.name == "k"), None)
    d_k = int(hp.get("attention.key_length", 0) or 0)
    d_v = int(hp.get("attention.value_length", 0) or 0)
    if not d_k:
        d_k = (q.shape[1] // model.n_head) if model.n_head else 0
    if not d_v:
        d_v = d_k
    if not d_k or k.shape[1] % d_k or v.shape[1] % d_v:
        return None
    n_head_kv = k.shape[1] // d_k
    n_head = o.shape[0] // d_v
    gated = q.shape[1] == 2 * n_head * d_k
    if q.shape[1] != n_head * d_k and not gated:
        return None
    if not n_head_kv or n_head % n_head_kv or v.shape[1] != n_head_kv * d_v:
        return None
    if kv_k is not None and kv_k.n_embd != n_head_kv * d_k:
        return None
    weights = {"q": _w(q), "k": _w(k), "v": _w(v), "o": _w(o)}
    for role, short in (("q_b", "attn_q.bias"), ("k_b", "attn_k.bias"), ("v_b", "attn_v.bias"),
                        ("o_b", "attn_output.bias"), ("q_norm", "attn_q_norm.weight"),
                        ("k_norm", "attn_k_norm.weight"), ("sinks", "attn_sinks.weight")):
        if short in by_short:
            weights[role] = _w(by_short[short])
    used.update(t.name for t in weights.values())
    window = max((c.window for c in layer.kv if c.name in ("k", "v")), default=0)
    return AttnLayout(
        kind="gqa", label=layer.attention, weights=weights, kv=layer.kv, n_head=n_head, n_head_kv=n_head_kv,
        d_k=d_k, d_v=d_v, window=window if layer.attention in ("swa", "chunked") else 0,
        chunked=layer.attention == "chunked", gated=gated,
        rope_base=float(hp.get("rope.freq_base", 10000.0) or 10000.0),
    )


def _mla(model: ModelSpec, layer: LayerSpec, by_short: dict[str, Tensor], used: set[str]) -> AttnLayout | None:
    kv_a = by_short.get("attn_kv_a_mqa.weight")
    out = by_short.get("attn_output.weight")
    kv_norm = by_short.get("attn_kv_a_norm.weight")
    if kv_a is None or out is None or kv_norm is None:
        return None
    hp = _extra(model)
    weights = {"kv_a": _w(kv_a), "kv_norm": _w(kv_norm), "o": _w(out)}
    if "attn_q_a.weight" in by_short and "attn_q_b.weight" in by_short:
        weights["q_a"] = _w(by_short["attn_q_a.weight"])
        weights["q_b"] = _w(by_short["attn_q_b.weight"])
        if "attn_q_a_norm.weight" in by_short:
            weights["q_a_norm"] = _w(by_short["attn_q_a_norm.weight"])
        q_out = by_short["attn_q_b.weight"].shape[1]
    elif "attn_q.weight" in by_short:
        weights["q"] = _w(by_short["attn_q.weight"])
        q_out = by_short["attn_q.weight"].shape[1]
    else:
        return None
    kv_lora = kv_norm.shape[0]
    d_rope = kv_a.shape[1] - kv_lora
    if "attn_k_b.weight" in by_short and "attn_v_b.weight" in by_short:
        kb, vb = by_short["attn_k_b.weight"], by_short["attn_v_b.weight"]
        d_nope, n_head = kb.shape[0], kb.shape[2] if len(kb.shape) == 3 else 1
        d_v = vb.shape[1]
        weights["k_b"], weights["v_b"] = _w(kb), _w(vb)
        fused = False
    elif "attn_kv_b.weight" in by_short:
        kvb = by_short["attn_kv_b.weight"]
        n_head = out.shape[0] // max(1, int(hp.get("attention.value_length_mla", 0) or 0) or 1)
        per_head = kvb.shape[1] // max(1, n_head)
        d_nope = q_out // max(1, n_head) - d_rope
        d_v = per_head - d_nope
        weights["kv_b"] = _w(kvb)
        fused = True
    else:
        return None
    if n_head <= 0 or q_out != n_head * (d_nope + d_rope) or out.shape[0] != n_head * d_v:
        return None
    used.update(t.name for t in weights.values())
    return AttnLayout(
        kind="mla", label=layer.attention, weights=weights, kv=layer.kv, n_head=n_head, n_head_kv=1,
        d_k=d_nope + d_rope, d_v=d_v, kv_lora=kv_lora, d_rope=d_rope, d_nope=d_nope, kv_b_fused=fused,
        rope_base=float(hp.get("rope.freq_base", 10000.0) or 10000.0),
    )


def _ffn(model: ModelSpec, layer: LayerSpec, by_short: dict[str, Tensor], used: set[str]) -> FfnLayout:
    w: dict[str, Weight] = {}
    for role, short in (("shexp_gate", "ffn_gate_shexp.weight"), ("shexp_up", "ffn_up_shexp.weight"),
                        ("shexp_down", "ffn_down_shexp.weight"), ("shexp_inp", "ffn_gate_inp_shexp.weight")):
        if short in by_short:
            w[role] = _w(by_short[short])
    dense = {role: by_short.get(f"ffn_{role}.weight") for role in ("gate", "up", "down")}
    if layer.kind == "moe":
        router = by_short.get("ffn_gate_inp.weight")
        if router is None:
            raise ValueError(f"{model.name} block {layer.index}: routed experts but no router (ffn_gate_inp)")
        w["router"] = _w(router)
        for role, short in (("router_bias", "ffn_gate_inp.bias"), ("probs_bias", "exp_probs_b.bias"),
                            ("tid2eid", "ffn_gate_tid2eid.weight")):
            if short in by_short:
                w[role] = _w(by_short[short])
        experts = _expert_layout(model, layer, by_short)
        used.update(t.name for t in w.values())
        used.update(experts.names.values())
        used.update(experts.bias_names.values())
        if all(dense.values()):  # a dense FFN next to the experts (rare): run it as a shared expert
            for role in ("gate", "up", "down"):
                w[f"dense_{role}"] = _w(dense[role])  # type: ignore[arg-type]
                used.add(dense[role].name)  # type: ignore[union-attr]
        return FfnLayout("moe", w, experts, choose_gating(model, "probs_bias" in w))
    if all(dense.values()):
        for role in ("gate", "up", "down"):
            w[role] = _w(dense[role])  # type: ignore[arg-type]
        used.update(t.name for t in w.values())
        return FfnLayout("dense", w)
    if dense["up"] is not None and dense["down"] is not None:  # no gate: plain MLP with SiLU
        w["up"], w["down"] = _w(dense["up"]), _w(dense["down"])
        used.update(t.name for t in w.values())
        return FfnLayout("dense", w)
    return FfnLayout("none", w)


def _norm(by_short: dict[str, Tensor], used: set[str], *shorts: str) -> Weight | None:
    for s in shorts:
        t = by_short.get(s)
        if t is not None and len(t.shape) == 1:
            used.add(t.name)
            return _w(t)
    return None


def layer_layout(model: ModelSpec, layer: LayerSpec) -> LayerLayout:
    by_short = {_short(layer, t): t for t in layer.tensors}
    used: set[str] = set()
    attn_norm = _norm(by_short, used, "attn_norm.weight")
    ffn_norm = _norm(by_short, used, "ffn_norm.weight", "post_attention_norm.weight")
    ffn = _ffn(model, layer, by_short, used)
    attn = None
    if layer.attention in ("full", "swa", "chunked"):
        attn = _gqa(model, layer, by_short, used)
    elif layer.attention.startswith("mla"):
        attn = _mla(model, layer, by_short, used)
    if attn is None:
        weights = {t.name: _w(t) for t in layer.tensors
                   if t.group == "attn" and t.name not in used and len(t.shape) >= 1}
        used.update(weights)
        attn = AttnLayout(kind="generic", label=layer.attention, weights=weights, kv=layer.kv)
    side = tuple(_w(t) for t in layer.tensors if t.name not in used)
    return LayerLayout(layer.index, layer.kind, attn_norm, ffn_norm, attn, ffn, side)


def model_layout(model: ModelSpec) -> ModelLayout:
    """Layouts of every trunk block (NextN blocks are skipped, as llama.cpp does)."""
    notes: list[str] = []
    layers = []
    for layer in model.trunk_layers:
        try:
            layers.append(layer_layout(model, layer))
        except ValueError as exc:
            from moeplan.errors import ModelFormatError

            raise ModelFormatError(str(exc), "the executor needs router and gate/up/down expert tensors "
                                             "named as llama.cpp writes them") from None
    g = {t.name: t for t in model.globals}
    if "token_embd.weight" not in g:
        from moeplan.errors import ModelFormatError

        raise ModelFormatError(f"{model.name}: no token_embd.weight", "the model index is incomplete")
    generic = sorted({lay.attn.label for lay in layers if lay.attn.kind == "generic"})
    if generic:
        notes.append("attention of " + ", ".join(generic) + " blocks runs as a stand-in (generic "
                     "projections and a cache of the model's size): bytes are exact, arithmetic is not")
    n_side = sum(len(lay.side) for lay in layers)
    if n_side:
        notes.append(f"{n_side} tensors without an executor role are read once per step as projections")
    return ModelLayout(
        name=model.name, arch=model.arch, n_embd=model.n_embd, n_vocab=model.n_vocab, layers=tuple(layers),
        token_embd=_w(g["token_embd.weight"]),
        output=_w(g["output.weight"]) if "output.weight" in g else None,
        output_norm=_w(g["output_norm.weight"]) if "output_norm.weight" in g else None,
        notes=tuple(notes),
    )
