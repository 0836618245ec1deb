"""Shape-only mirrors of llama-graph.cpp's shared builders, for graph_dsv4 and graph_glm_dsa (pure).

Each follows llm_graph_context's function of the same name (llama.cpp 0c1e570) closely enough
that the ops, their sources and their order are the same: what ggml-alloc's replay needs.
"""
from __future__ import annotations

from moeplan.planner.memory.ggml_graph import F32, Graph, Tensor


def build_norm(g: Graph, x: Tensor, op: str = "RMS_NORM", bias: bool = False) -> Tensor:
    """build_norm(x, weight[, bias]): the norm (ggml_rms_norm or ggml_norm), then the weight
    multiply and the bias add, both in place when the norm's result has no other consumer."""
    x = g.unary(op, x)
    x = g.unary("MUL", x, g.external("norm.weight", x.ne[0]))
    return g.unary("ADD", x, g.external("norm.bias", x.ne[0])) if bias else x


def build_ffn(g: Graph, cur: Tensor, n_embd: int, n_ff: int, act: str = "GLU") -> Tensor:
    """build_ffn with a parallel gate: up and gate projections, the gated activation (a GLU op:
    swiglu, or DeepSeek V4's swiglu_clamp), the down projection."""
    up = g.mul_mat(g.external("ffn_up", n_embd, n_ff), cur)
    gate = g.mul_mat(g.external("ffn_gate", n_embd, n_ff), cur)
    return g.mul_mat(g.external("ffn_down", n_ff, n_embd), g.op(act, gate.ne, F32, gate, up))


def build_moe_experts(g: Graph, cur: Tensor, probs: Tensor, selected: Tensor, *, il: int, n_expert: int,
                      n_used: int, n_ff_exp: int, weights_norm: bool, weights_scale: bool, act: str,
                      staged: dict[int, tuple[int, int]]) -> Tensor:
    """build_moe_ffn from the selected experts on: router weights gathered (normalised and
    scaled), gate and up [F, k, T], the gated activation, down [E, k, T] times the weights, the k
    expert rows summed. Registers each expert MUL_MAT_ID in `staged` as (block, 0 gate / 1 up /
    2 down): under op-offload a host-resident expert tensor is copied to the GPU for that op
    (ggml-backend.cpp: its own split, the weight as the split's input)."""
    e, t, n, k = cur.ne[0], cur.ne[1], n_expert, n_used
    weights = g.get_rows(g.reshape(probs, 1, n, t), selected)
    if weights_norm:
        w2 = g.reshape(weights, k, t)
        wsum = g.unary("CLAMP", g.op("SUM_ROWS", (1, t), F32, w2))
        weights = g.reshape(g.unary("DIV", w2, wsum), 1, k, t)
    if weights_scale:
        weights = g.unary("SCALE", weights)
    g.expand(weights)
    x = g.reshape(cur, e, 1, t)
    up = g.mul_mat_id(g.external("ffn_up_exps", e, n_ff_exp, n), x, selected)
    gate = g.mul_mat_id(g.external("ffn_gate_exps", e, n_ff_exp, n), x, selected)
    down = g.mul_mat_id(g.external("ffn_down_exps", n_ff_exp, e, n), g.op(act, gate.ne, F32, gate, up), selected)
    staged.update({id(gate): (il, 0), id(up): (il, 1), id(down): (il, 2)})
    experts = g.expand(g.unary("MUL", down, weights))
    views = [g.expand(g.view(experts, e, t, contiguous=False)) for _ in range(k)]
    moe_out = views[0]
    for v in views[1:]:
        moe_out = g.expand(g.op("ADD", (e, t), F32, moe_out, v))
    return g.cont(moe_out) if k == 1 else moe_out
