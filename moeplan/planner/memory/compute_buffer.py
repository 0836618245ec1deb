"""Compute buffers: the activation memory llama.cpp reserves for one ubatch, term by term.

How llama.cpp sizes them (2026-10 sources):
  * llama_context::sched_reserve (src/llama-context.cpp) builds the worst-case graph for
    n_tokens = T = min(n_ctx, n_ubatch) tokens with every token an output (n_outputs =
    min(T, n_outputs_max = n_batch)), the single-token graph, and the T graph again; the
    buffer keeps the largest size (ggml-alloc reallocates only to grow).
  * ggml_gallocr (ggml/src/ggml-alloc.c) walks the graph in execution order: graph inputs
    (the KQ masks, positions, KV row indices, out_ids, inp_embd) are allocated first and live
    until their last consumer; every other tensor is allocated when computed and freed after
    its last consumer; elementwise ops (norm, mul, add, rope, softmax, unary) reuse their
    parent's memory in place; graph outputs (logits, result_norm, the MTP hidden state
    t_h_nextn) are never freed. The buffer is the high-water mark of that walk.
So the buffer is the largest of three phases, each the sum of the tensors alive in it:

  inputs     = 4*T (token ids) + 4*E*T (inp_embd) + 4*T (positions) + 4*O (out_ids)
               + per KV cache: mask n_kv*T*(2 with flash attention (f16) | 4 (f32))
                               + 8*T (K row ids) + 8*T or, V transposed (no FA), 8*T*n_embd_v_gqa
  attention  = inputs + 4*E*T (residual) + 4*E*T (attn_norm, freed below Q)
               GQA, FA:    + 2 * 4*H*d_k*T (Q before and after its norm/rope) + 4*H*d_v*T (output)
               GQA, no FA: + 2 * 4*H*d_k*T + 4*n_kv*T*H (KQ; softmax runs in place)
               MLA:        + 4*H*T*((nope+rope) + kv_lora + rope + (kv_lora+rope)) (q from wq_b, its
                             nope part absorbed by wk_b, q_pe roped, Q = [q_absorbed, q_pe])
                 no FA:    + 4*n_kv*T*H (KQ) + n_kv*kv_lora*s_k (the V latent made contiguous)
  moe        = inputs + 4*E*T (residual) + 4*E*T (attn_norm) + max(4*E*T, Q) (the floor the
               attention block leaves under ffn_inp) + 8*N*T (router probs, argsort ids)
               + 3*G (gate, up, activation) + (D if D > 2*G: the down projection does not fit
               in the freed gate+up slot), G = 4*F*k*T, D = 4*E*k*T
               (+ staging on a GPU, see below)
  output     = 4*T + 4*E*T (inp_embd) + 4*E*(T or O) (t_h_nextn, where the architecture keeps it)
               + 4*E*O (result_norm) + 4*V*O (logits)
with E = n_embd, V = n_vocab, H = n_head, F = n_ff_exp, N = n_expert, k = n_expert_used and
n_kv the cells of one KV stream. Checked against llama.cpp's allocation log on a CPU build
(tests/data/llama_memory/, tests/test_memory_llamacpp.py): the phases are exact live sets;
what remains is ggml-alloc's fragmentation (a tensor kept alive is placed above a large
input that is freed later, so the next large tensor cannot use its hole) - see the README's
"Memory accounting".

DeepSeek V4 and GLM-5.x DSA are not phases of a few live tensors: their attention reserves
several [n_kv, T] masks (the SWA, compressed and indexer caches'), the fused lightning
indexer's scores [n_ctx/4, T] f32, a top-k mask built from a filled copy of the mask and the
concatenated keys and masks of each compressed block, and ggml-alloc's holes between them
decide the peak (a live-set sum misses it by up to 30%). For them compute_phases returns one
phase, 'graph': the graph of src/models/deepseek4.cpp / glm-dsa.cpp mirrored op by op
(graph_dsv4.py, graph_glm_dsa.py) with ggml-alloc replayed on it (ggml_graph.py), exact to
the byte on every recorded run (graph_buffers.py says how).

Staging (GPU only, op-offload, T >= 32), from ggml/src/ggml-backend.cpp at llama.cpp 0c1e570:
  * L969: an op whose weight is in a host buffer is moved to the GPU when the GPU's
    offload_op agrees; CUDA's (ggml-cuda.cu L5651) wants a MUL_MAT_ID with ne[2] = n_tokens
    >= GGML_OP_OFFLOAD_MIN_BATCH (32, L5825).
  * L1324-1341: a node whose weight lives on another backend starts a new split once the
    current split has inputs, so gate, up and down each get their own split.
  * L1376-1392: the split's input is `ggml_dup_tensor_layout(src)`, a full-size copy of the
    expert weight [n_embd, n_ff, n_expert] ("CUDA0#blk.N.ffn_up_exps.weight#0"); with
    n_copies > 1 (pipeline parallelism, L1888, GGML_SCHED_MAX_COPIES 4 at L772) the copies are
    flagged input+output and never freed (L1382-1385), but llama-context.cpp L430-435 turns
    pipeline parallelism off whenever tensor overrides (-ot, --n-cpu-moe) are used.
  * L1514-1531: graph_copy puts each split's input copies at the start of the split, so
    ggml-alloc allocates the copy there and frees it after its only consumer, the MUL_MAT_ID;
    the next split's copy reuses the memory.
  * L1709-1790: compute_splits fills only the rows of the experts the ubatch selected
    (`copy_experts`), but the tensor is allocated full size.
So one copy is alive at a time, during the MoE block:
  staging = the largest single expert weight tensor (gate, up, down or fused gate_up) among
            the MoE layers whose experts are on the CPU, added to the moe phase only
            (not gate+up+down of a layer, and not alive at the attention or output peak).
"""
from __future__ import annotations

from dataclasses import dataclass

from moeplan.planner.memory.cache import memo
from moeplan.planner.memory.graph_buffers import (
    GRAPH_ARCHS,
    graph_buffer_terms,
    graph_cpu_side_terms,
)
from moeplan.planner.memory.split import layer_split
from moeplan.planner.model import registry
from moeplan.planner.model.ggml import canonical_type, row_bytes
from moeplan.planner.model.spec import KvComponent, LayerSpec, ModelSpec
from moeplan.planner.placement import Placement
from moeplan.units import MIB

F32 = 4
I32 = 4
I64 = 8
IK_AMB_DEFAULT_MIB = 256  # ik_llama.cpp -amb default (common/common.h:424 at 8337e4cd3)
IK_AMB_MIN_MIB = 128  # common/common.cpp:1967-1970: a smaller -amb (but not 0) becomes 128

# Architectures whose graph marks the last hidden state as an output for MTP drafting
# (res->t_h_nextn in src/models/<arch>.cpp): it is never freed, so it is alive next to the
# logits. The DeepSeek/GLM graphs select the output rows inside the last block (n_outputs
# rows); gpt-oss and the Qwen3-Next family select them after t_h_nextn (all n_tokens rows,
# embeddings_nextn_masked defaults to false).
# (registry: Arch.nextn_hidden_rows "output" / "all")


def _hp(model: ModelSpec, key: str, default: float = 0) -> float:
    for k, v in model.extra:
        if k == key:
            return v  # type: ignore[return-value]
    return default


@dataclass(frozen=True)
class ReserveShape:
    """What llama.cpp reserves the graph for: T tokens, O outputs, n_kv cells per stream."""

    n_tokens: int
    n_outputs: int
    n_ctx: int  # padded total context
    n_ctx_seq: int  # cells of one KV stream


def reserve_shape(p: Placement, kv_pad: int = 256) -> ReserveShape:
    """llama_context: n_ctx padded to 256; without a unified cache each of n_seq streams has
    pad256(n_ctx / n_seq) cells; n_batch = min(n_ctx, n_batch); n_ubatch = min(n_batch,
    n_ubatch); sched_reserve uses T = min(n_ctx, n_ubatch) and O = min(T, n_outputs_max),
    n_outputs_max = n_batch unless the tool sets it (llama-server: n_seq * (1 + n_draft))."""
    n_ctx = -(-max(p.n_ctx, 1) // kv_pad) * kv_pad
    n_ctx_seq = n_ctx
    if not p.kv_unified and p.n_seq > 1:
        n_ctx_seq = -(-(n_ctx // p.n_seq) // kv_pad) * kv_pad
        n_ctx = n_ctx_seq * p.n_seq
    n_batch = min(n_ctx, max(1, p.n_batch))
    n_ubatch = min(n_batch, max(1, p.n_ubatch))
    t = min(n_ctx, n_ubatch)
    n_out = min(n_batch, p.n_outputs_max) if p.n_outputs_max > 0 else n_batch
    return ReserveShape(n_tokens=t, n_outputs=min(t, n_out), n_ctx=n_ctx, n_ctx_seq=n_ctx_seq)


def _swa_cells(window: int, p: Placement, shape: ReserveShape, kv_pad: int = 256) -> int:
    """Cells of one SWA stream (llama-kv-cache-iswa.cpp)."""
    n_ub = min(shape.n_ctx, max(1, p.n_batch), max(1, p.n_ubatch))
    w = window * (p.n_seq if p.kv_unified else 1) + n_ub
    return -(-min(shape.n_ctx_seq, w) // kv_pad) * kv_pad


def _layer_heads(layer, d_v: int, default: int) -> int:
    """Query heads of a GQA block from its output projection (attn_output is n_embd_head_v x
    n_head rows wide in every GQA builder): Step-3.5's sliding blocks have 96 heads, its
    full blocks 64 (llama_hparams::n_head(il)); `default` where the block has no such tensor."""
    for t in layer.tensors:
        if t.name.endswith(".attn_output.weight") and len(t.shape) == 2 and d_v > 0 and t.shape[0] % d_v == 0:
            return max(1, int(t.shape[0]) // d_v)
    return default


def _attention_kinds(model: ModelSpec) -> tuple[tuple[str, KvComponent, KvComponent | None, LayerSpec], ...]:
    """(attention label, K component, V component, first layer) of each distinct attention kind
    of the trunk, first layer of each kind; cached on the model (the search asks thousands of times)."""
    cache = memo(model)
    kinds = cache.get("attention_kinds")
    if kinds is None:
        seen: dict[str, tuple[str, KvComponent, KvComponent | None, LayerSpec]] = {}
        for layer in model.trunk_layers:
            if layer.attention in ("none", "recurrent", "skipped") or not layer.kv:
                continue
            k = next((c for c in layer.kv if c.name == "k"), layer.kv[0])
            v = next((c for c in layer.kv if c.name == "v"), None)
            key = "mla" if layer.attention.startswith("mla") else ("swa" if k.cells in ("swa", "swa-seq") else "full")
            seen[key] = (layer.attention, k, v, layer)
        kinds = cache["attention_kinds"] = tuple(seen.values())
    return kinds


def _attention_layers(model: ModelSpec, p: Placement, shape: ReserveShape) -> list[dict]:
    """One entry per distinct attention kind in the trunk: its geometry and n_kv."""
    n_head = max(1, model.n_head)
    d_k = int(_hp(model, "attention.key_length", model.n_embd // n_head) or model.n_embd // n_head)
    d_v = int(_hp(model, "attention.value_length", model.n_embd // n_head) or model.n_embd // n_head)
    out: list[dict] = []
    for attention, k, v, layer in _attention_kinds(model):
        if attention.startswith("mla"):
            kv_lora = int(_hp(model, "attention.kv_lora_rank", 0)) or k.n_embd
            rope = k.n_embd - kv_lora
            nope = int(_hp(model, "attention.key_length_mla", 0) or 0) - rope
            out.append({"kind": "mla", "n_kv": shape.n_ctx_seq, "kv_lora": kv_lora, "rope": rope,
                        "nope": max(nope, 0), "n_embd_v": 0, "k_type": p.cache_type_k,
                        "q_lora": int(_hp(model, "attention.q_lora_rank", 0) or 0)})
            continue
        swa = k.cells in ("swa", "swa-seq")
        cells = _swa_cells(k.window, p, shape) if swa else shape.n_ctx_seq
        # gated attention (qwen3next, qwen35moe): the q projection carries the output gate
        q_mult = 2 if registry.get(model.arch).gated_q else 1
        # sliding layers' own head size where the GGUF has one (gemma4: 256 vs 512 global)
        dk = int(_hp(model, "attention.key_length_swa", 0) or d_k) if swa else d_k
        dv = int(_hp(model, "attention.value_length_swa", 0) or d_v) if swa else d_v
        out.append({"kind": "gqa", "n_kv": cells, "d_k": dk, "d_v": dv, "q_mult": q_mult,
                    "n_embd_v": v.n_embd if v is not None else 0,
                    "n_head": _layer_heads(layer, dv, n_head)})
    return out


def input_bytes(model: ModelSpec, p: Placement, shape: ReserveShape) -> dict[str, int]:
    """Graph inputs alive through every layer (allocated first by ggml-alloc)."""
    t, o, e = shape.n_tokens, shape.n_outputs, model.n_embd
    mask_el = 2 if p.flash_attn else 4
    out = {"tokens": I32 * t, "inp_embd": F32 * e * t, "positions": I32 * t, "out_ids": I32 * o,
           "kq_mask": 0, "kv_idxs": 0}
    for a in _attention_layers(model, p, shape):
        out["kq_mask"] += a["n_kv"] * t * mask_el
        out["kv_idxs"] += I64 * t  # K rows
        if a["kind"] == "gqa":
            # a transposed V cache (no flash attention) is scattered one element at a time
            out["kv_idxs"] += I64 * t * (1 if p.flash_attn else a["n_embd_v"])
    return out


def attention_bytes(model: ModelSpec, p: Placement, shape: ReserveShape) -> dict[str, int]:
    """Activations of the largest attention block beyond the inputs (see module docstring)."""
    t, e, h = shape.n_tokens, model.n_embd, max(1, model.n_head)
    best: dict[str, int] = {}
    for a in _attention_layers(model, p, shape):
        terms = {"residual": F32 * e * t, "attn_norm": F32 * e * t}
        if a["kind"] == "mla" and _ik_absorbed_mla(p, t):
            terms = _ik_mla_terms(a, t, e, h)
        elif a["kind"] == "mla":
            # q = wq_b(q_a), its nope part absorbed by wk_b, then Q = [q_absorbed, q_pe]
            terms["q"] = F32 * h * t * (a["nope"] + a["rope"])
            terms["q_absorbed"] = F32 * h * t * a["kv_lora"]
            terms["q_pe"] = F32 * h * t * a["rope"]
            terms["q_mqa"] = F32 * h * t * (a["kv_lora"] + a["rope"])
            if not p.flash_attn:
                terms["kq"] = F32 * a["n_kv"] * t * h
                terms["v_latent"] = row_bytes(canonical_type(a["k_type"]), a["kv_lora"]) * a["n_kv"]
                terms.update(_ik_kq_chunk_terms(p, a, t, h))
        else:
            hh = a.get("n_head", h)
            q = F32 * hh * a["d_k"] * t
            terms["q"] = q * (a["q_mult"] + 1)
            if p.flash_attn:
                terms["attn_out"] = F32 * hh * a["d_v"] * t
            else:
                terms["kq"] = F32 * a["n_kv"] * t * hh
        if sum(terms.values()) > sum(best.values()):
            best = terms
    return best


def _ik_absorbed_mla(p: Placement, n_tokens: int) -> bool:
    """Whether ik_llama.cpp's absorbed MLA graph sizes the buffer: a runtime whose record says it
    expands the MLA heads for prompt batches (ik_llama.cpp), -mla 3 with flash attention, and a
    reserve batch below that expansion's threshold (build_deepseek2.cpp L1299: pp_opt = n_tokens
    >= 128 && mla_attn > 1; the expanded graph of larger batches is not modelled here)."""
    from moeplan.planner import backends
    from moeplan.planner.cost.attention import IK_MLA_PP_MIN_TOKENS

    return (backends.behaviour(p.backend).mla_expanded_prompt and p.flash_attn
            and n_tokens < IK_MLA_PP_MIN_TOKENS)


def ik_amb_mib(p: Placement) -> int:
    """ik_llama.cpp's -amb in MiB as the run uses it: the plan's (Placement.options.amb) or the
    default, 256 in common/common.h:424 at 8337e4cd3 (0, no splitting, before #2312, 37d82c231);
    common/common.cpp:1967-1970 raises a value of 1 to 127 to 128."""
    amb = IK_AMB_DEFAULT_MIB if p.options.amb is None else p.options.amb
    return IK_AMB_MIN_MIB if 0 < amb < IK_AMB_MIN_MIB else amb


def ik_kq_heads(n_kv: int, n_tokens: int, n_head: int, amb_mib: int) -> int:
    """Heads in one K*Q chunk of ik_llama.cpp's MLA attention without flash attention
    (src/graphs/build_deepseek2.cpp at 8337e4cd3, L1089-1127; the same since #237, e787c0014):
    kq_size = n_kv * n_tokens * n_head * 4 / MiB (integer MiB); when -amb is set and below it,
    n_step = min(ceil(kq_size / amb), n_head) and each chunk takes ceil(n_head / n_step) heads;
    otherwise one K*Q of every head."""
    kq_mib = n_kv * n_tokens * n_head * F32 // MIB
    if amb_mib <= 0 or amb_mib >= kq_mib:
        return n_head
    n_step = min(-(-kq_mib // amb_mib), n_head)
    return -(-n_head // n_step)


def _ik_kq_chunk_terms(p: Placement, a: dict, t: int, h: int) -> dict[str, int]:
    """ik_llama.cpp's K*Q of an MLA block without flash attention, where -amb splits it
    (build_deepseek2.cpp L1123-1140): each chunk computes kq_i = K x Q_i ([n_kv, T, heads] f32,
    softmax in place) and kqv_i = V^T x kq_i ([kv_lora, T, heads] f32), and ggml_concat appends
    kqv_i to the chunks before it along the heads. At the last chunk's kqv_i the earlier
    chunks' H - heads rows, kq_i and kqv_i are alive: one chunk's K*Q plus the latent output of
    every head. {} where the runtime is not ik_llama.cpp or -amb does not split."""
    from moeplan.planner import backends

    if not backends.behaviour(p.backend).mla_expanded_prompt:  # ik_llama.cpp's MLA graph
        return {}
    heads = ik_kq_heads(a["n_kv"], t, h, ik_amb_mib(p))
    if heads >= h:
        return {}
    return {"kq": F32 * a["n_kv"] * t * heads, "kqv_compressed": F32 * a["kv_lora"] * t * h}


def _ik_mla_terms(a: dict, t: int, e: int, h: int) -> dict[str, int]:
    """ik_llama.cpp 8337e4cd3, src/graphs/build_deepseek2.cpp build_deepseek2_layer_attention,
    -mla 3 with flash attention and T < 128 (the absorbed path, L1025-1060): its live set at
    the peak, the allocation of Q = concat(q_rope, q_nope2) (L1040), in ggml-alloc's order:
      attn_norm (4*E*T; its slot then holds the roped q_rope, L872),
      q_a = wq_a(cur) (4*q_lora*T, L787) and kv_rope_compressed = wkv_a_mqa(cur)
      (4*(kv_lora+rope)*T, L790), both computed before q's norm and freed only once the roped
      k_rope and kvr reuse their place: a hole Q does not fit in,
      q = wq_b(q_a) (4*H*(nope+rope)*T, L831), freed after q_nope2: Q does not fit there either,
      q_nope2 = wk_b x q_nope (4*H*kv_lora*T, L1036) and Q (4*H*(kv_lora+rope)*T).
    Unlike mainline's graph no separate residual or q_pe slot stays under Q (the residual is
    the graph input or sits in a freed hole; q_rope is in attn_norm's slot). Replayed with
    ggml-alloc's best fit (ggml_graph.py) this is the peak of a block whose input is a graph
    input; a block after CPU-resident experts sits a little higher (the experts' result is a
    new split input, ggml-backend.cpp graph_copy): fragmentation_allowance covers it. Checked
    on the recorded run tests/data/ik_runs/ik-deepseek2-rpc2-complete.log."""
    return {
        "attn_norm": F32 * e * t,
        "q_a": F32 * a["q_lora"] * t,
        "kv_a": F32 * (a["kv_lora"] + a["rope"]) * t,
        "q": F32 * h * t * (a["nope"] + a["rope"]),
        "q_absorbed": F32 * h * t * a["kv_lora"],
        "q_mqa": F32 * h * t * (a["kv_lora"] + a["rope"]),
    }


def _q_bytes(model: ModelSpec, p: Placement, shape: ReserveShape) -> int:
    """The first query projection of the widest attention block (what sits below ffn_inp)."""
    t, h = shape.n_tokens, max(1, model.n_head)
    q = 0
    for a in _attention_layers(model, p, shape):
        if a["kind"] == "mla":
            q = max(q, F32 * h * t * (a["nope"] + a["rope"]))
        else:
            q = max(q, F32 * a.get("n_head", h) * a["d_k"] * t * a["q_mult"])
    return q


def moe_bytes(model: ModelSpec, p: Placement, shape: ReserveShape, staging: int = 0) -> dict[str, int]:
    """Activations of one MoE FFN beyond the inputs; `staging` is the GPU copy of an expert
    weight that is alive during its MUL_MAT_ID.

    The attention output becomes ffn_inp in place, and it is allocated while the attention
    block's residual, attn_norm and query are still alive, so the MoE block stacks on that
    floor. gate and up (4*F*k*T each) are freed once the activation is computed; the down
    projection (4*E*k*T) reuses their slot when it fits (D <= 2G) and lands above the
    activation otherwise.
    """
    if not model.n_experts:
        return {}
    t, e = shape.n_tokens, model.n_embd
    k, f, n = p.n_experts_used or model.n_experts_used, model.n_ff_exp, model.n_experts
    g, d = F32 * f * k * t, F32 * e * k * t
    return {
        "residual": F32 * e * t,
        "attn_norm": F32 * e * t,
        "attn_q": max(F32 * e * t, _q_bytes(model, p, shape)),
        "router": F32 * n * t + I32 * n * t,
        "experts": 3 * g + (d if d > 2 * g else 0),
        "staging": staging,
    }


def output_bytes(model: ModelSpec, shape: ReserveShape) -> dict[str, int]:
    """Tensors alive while the lm_head runs (the graph outputs are never freed)."""
    t, o, e = shape.n_tokens, shape.n_outputs, model.n_embd
    return {
        "tokens": I32 * t,  # freed after the embedding lookup, but its slot at the bottom stays
        "inp_embd": F32 * e * t,
        "nextn_hidden": F32 * e * {"all": t, "output": o}.get(registry.get(model.arch).nextn_hidden_rows, 0),
        "result_norm": F32 * e * o,
        "logits": F32 * model.n_vocab * o,
    }


def staging_bytes(model: ModelSpec, p: Placement, min_batch: int) -> int:
    """Largest single expert weight tensor of a CPU-resident MoE layer (0 without op-offload).

    With -ngl N and blocks wholly on the CPU, every matmul weight of those blocks (and the
    output matrix when the output layer is on the CPU) is a host weight the scheduler hands
    to the GPU at n_ubatch >= 32 (ggml-cuda.cu ggml_backend_cuda_device_offload_op: MUL_MAT
    with ne[1] >= GGML_OP_OFFLOAD_MIN_BATCH), one staged copy alive at a time: the largest."""
    if not p.op_offload or reserve_shape(p).n_tokens < min_batch:
        return 0
    block_max = 0
    if p.n_gpu_layers is not None and p.n_gpus:
        cpu_blocks, out_gpu = layer_split(model, p)
        block_max = max((t.n_bytes for layer in model.layers if layer.index in cpu_blocks and layer.kind != "nextn"
                         for t in layer.tensors if len(t.shape) >= 2), default=0)
        if not out_gpu:
            block_max = max([block_max] + [t.n_bytes for t in model.globals if t.group == "output"
                                           and len(t.shape) >= 2])
    if not p.cpu_moe_layers:
        return block_max
    cache = memo(model)
    per_layer = cache.get("max_expert_tensor")
    if per_layer is None:
        per_layer = cache["max_expert_tensor"] = {
            layer.index: max((tt.n_bytes for tt in layer.tensors if tt.group == "experts"), default=0)
            for layer in model.moe_layers}
    return max([block_max] + [per_layer.get(i, 0) for i in p.cpu_moe_layers])


def pipeline_copies(model: ModelSpec, p: Placement) -> int:
    """Input copies the scheduler keeps: GGML_SCHED_MAX_COPIES when llama.cpp turns pipeline
    parallelism on, else 1. src/llama-context.cpp L430-435 (0c1e570): more than one device,
    n_gpu_layers > n_layer_all (every block and the output offloaded), -sm layer, KV offload
    and no tensor override (-ot, --n-cpu-moe: moeplan's CPU experts); L438-453 also want
    async compute and events of every device, which CUDA and RPC devices have. An -ngl N of
    n_layer_all + 1 or more counts as every layer."""
    if p.n_gpus <= 1 or not p.kv_offload or p.cpu_moe_layers:
        return 1
    if p.n_gpu_layers is not None and p.n_gpu_layers <= len(model.layers):
        return 1
    from moeplan.planner import backends

    # GGML_SCHED_MAX_COPIES of the plan's build (Placement.options.sched_max_copies: ik_llama.cpp
    # built 4 before #751, ggml/CMakeLists.txt:106 at e787c0014) or of the runtime's current one
    # (its record: 4 in llama.cpp, 1 in ik_llama.cpp)
    return p.options.sched_max_copies or backends.behaviour(p.backend).sched_max_copies


def pipeline_copy_terms(model: ModelSpec, p: Placement, device: bool, has_output: bool = False) -> dict[str, int]:
    """The tensors ggml_backend_sched keeps one more copy of for each extra pipeline copy
    (ggml-backend.cpp at 0c1e570):
      * L1376-1385: a split input (a tensor another backend computed) gets n_copies
        duplicates on the split's backend, flagged input+output, so ggml-alloc never frees them;
      * L1411-1437 and L1563-1590: every graph input leaf gets n_copies duplicates on its own
        backend (the CPU: the scheduler puts graph inputs there), also never freed, the
        embeddings input of a text batch included although no node reads it.
    device=True: a device's split inputs: the KQ masks, KV row ids and positions from the
      CPU, the hidden state from the previous backend (inp_embd's size), out_ids on the
      device of the output layer; not the token ids (the embedding lookup runs on the CPU).
    device=False: the CPU's graph inputs: token ids, embeddings input, positions, masks,
      row ids, out_ids."""
    inputs = input_bytes(model, p, reserve_shape(p))
    if not device:
        return dict(inputs)
    return {k: v for k, v in inputs.items() if k != "tokens" and (has_output or k != "out_ids")}


def compute_phases(model: ModelSpec, p: Placement, staging: int = 0, gpu: bool = False) -> dict[str, dict[str, int]]:
    """Every phase with its terms; the buffer is the largest phase total.

    DeepSeek V4 and GLM-5.x DSA have a single phase, 'graph': their graph is mirrored op by
    op and ggml-alloc replayed on it (graph_buffers.py); `staging` > 0 there only says that
    op-offload is active (each CPU layer's expert tensors are staged at their own op), and
    `gpu` with p.n_gpus > 0 selects the GPU buffer's alignment (a CPU-only run's device
    buffer is the CPU's)."""
    shape = reserve_shape(p)
    if model.arch in GRAPH_ARCHS:
        terms = graph_buffer_terms(model, p, shape.n_tokens, shape.n_outputs, shape.n_ctx_seq, shape.n_tokens,
                                   gpu and p.n_gpus > 0, staged=staging > 0)
        if terms is not None:
            return {"graph": terms}
    inputs = input_bytes(model, p, shape)
    phases = {
        "attention": {**inputs, **attention_bytes(model, p, shape)},
        "moe": {**inputs, **moe_bytes(model, p, shape, staging)},
        "output": output_bytes(model, shape),
    }
    return phases


def peak_phase(phases: dict[str, dict[str, int]]) -> tuple[str, dict[str, int]]:
    name = max(phases, key=lambda k: sum(phases[k].values()))
    return name, phases[name]


def cpu_side_bytes(model: ModelSpec, p: Placement) -> dict[str, int]:
    """The CPU compute buffer of a run whose layers are on a GPU: ggml_backend_sched assigns
    every graph input to the CPU backend (ggml-backend.cpp, "graph input" -> last backend)
    and the token-embedding lookup runs where token_embd is (the CPU); both are then copied
    to the GPU as split inputs. The single-token decode graph adds the CPU-resident experts'
    activations, which are smaller than this."""
    shape = reserve_shape(p)
    if model.arch in GRAPH_ARCHS:
        terms = graph_cpu_side_terms(model, p, shape.n_tokens, shape.n_outputs, shape.n_ctx_seq, shape.n_tokens)
        if terms is not None:
            return terms
    inputs = input_bytes(model, p, shape)
    return {**inputs, "embd_rows": F32 * model.n_embd * shape.n_tokens}


def fragmentation_allowance(model: ModelSpec, p: Placement) -> int:
    """Upper bound on what ggml-alloc's fragmentation adds above the live-set peak, in bytes.

    ggml-alloc is a best-fit allocator over one address range. A tensor that stays alive
    (a graph output, the MTP hidden state t_h_nextn) can be placed above the hole of a freed
    input, and then the logits cannot use that hole. Measured (tests/data/llama_memory) the
    waste was at most one 4*E*T slab, plus, for architectures that keep t_h_nextn, the holes
    it can sit above: the KQ masks and the last block's MoE down-projection output (4*E*k*T).
    Use it for the uncertainty range of a compute-buffer prediction, not as an expectation.
    """
    shape = reserve_shape(p)
    t, e = shape.n_tokens, model.n_embd
    allowance = F32 * e * t
    if registry.get(model.arch).nextn_hidden_rows:
        allowance += input_bytes(model, p, shape)["kq_mask"] + F32 * e * model.n_experts_used * t
    return allowance
