"""GLM-5.x (glm-dsa) compute graph, shapes only, as src/models/glm-dsa.cpp builds it (pure).

`build_glm_dsa_graph` mirrors llama_model_glm_dsa::graph (llama.cpp 0c1e570) and the DSA
branch of llm_graph_context::build_attn (llama-graph.cpp) for the reserved ubatch, for
ggml_graph.allocate. With E = n_embd, T tokens in S streams (1 when the cache is unified),
H heads, MLA latent L = kv_lora_rank (+ R rope dims), n_kv = cache cells per stream:

inputs: inp_tokens, inp_embd (unused branch), inp_pos; MLA K row ids and mask [n_kv, T]
  (f16 with flash attention, else f32); indexer K row ids, mask [n_kv, T] f16 (the fused
  lightning indexer's) and k_rot 128x128 f32; out_ids [O]; one [1, top_k, T] f32 zeros leaf
  per block (build_attn's top-k mask).
each block
  attn_norm [E, T] (a copy: the residual still needs inpL), qr [q_lora, T]
  indexer (blocks that attention.indexer.types marks full; 'shared' blocks reuse the
    previous top-k ids, which stay alive until their last user): q [n_idx*128, T] and its
    rope copy and Hadamard product, k [128, T] with its layer-norm, rope and Hadamard
    copies (written to the indexer cache), weights [n_idx, T] (+ a scaled copy), fused
    scores [n_kv, T] f32, top-k ids [k, T] (+ a copy)
  MLA: q [H*(nope+R), T], kv_cmpr_pe [L+R, T], q_pe/k_pe rope copies, kv_cmpr normed copy,
    q absorbed by wk_b [L, T, H], Q = concat [(L+R), H, T], K = concat [L+R, T]
  top-k mask: the MLA mask filled with -inf, the top-k cells zeroed, the mask added [n_kv, T]
  attention: flash: output [L, H, T], v_b applied [v, T, H] and made contiguous;
    without: scores [n_kv, T, H] f32 (softmax in place), V = the latent transposed and made
    contiguous [n_kv, L] (cache type), output [L, T, H], v_b [v, T, H], contiguous copy
  wo [E, T]; the last block keeps only the output rows; ffn_norm copy; dense FFN or
    router + routed experts (sigmoid gating, selection bias) + shared expert (plain swiglu)
output: output_norm in place; it is both h_nextn (t_h_nextn, the MTP head's input) and
  result_norm, a graph output; logits [V, O].
"""
from __future__ import annotations

from dataclasses import dataclass

from moeplan.planner.memory.ggml_graph import F16, F32, I32, I64, Graph, Tensor
from moeplan.planner.memory.graph_llm import build_ffn, build_moe_experts, build_norm


@dataclass(frozen=True)
class GlmDsaDims:
    n_embd: int
    n_head: int
    q_lora: int  # attention.q_lora_rank
    kv_lora: int  # attention.kv_lora_rank
    rope: int  # rope.dimension_count
    nope: int  # attention.key_length_mla - rope
    v_dim: int  # attention.value_length_mla
    n_idx_head: int  # attention.indexer.head_count
    idx_dim: int  # attention.indexer.key_length
    top_k: int  # attention.indexer.top_k
    indexer_full: tuple[bool, ...]  # per trunk block (is_indexer_full)
    n_dense: int  # leading_dense_block_count
    n_ff: int  # feed_forward_length (dense blocks)
    n_expert: int
    n_used: int
    n_ff_exp: int
    n_ff_shexp: int
    n_vocab: int
    weights_norm: bool = True  # expert_weights_norm
    weights_scale: bool = True  # expert_weights_scale not 0 or 1


@dataclass(frozen=True)
class GlmDsaShape:
    n_tokens: int
    n_outputs: int
    n_stream: int  # 1 with a unified cache, else one per sequence
    n_kv: int  # cells per stream (the whole cache at reserve)
    n_top_k: int  # keys the indexer keeps: min(n_kv, top_k)
    flash_attn: bool
    type_k: str


class _GlmDsaBuilder:
    def __init__(self, d: GlmDsaDims, s: GlmDsaShape, ):
        self.d, self.s, self.g = d, s, Graph()
        # id(MUL_MAT_ID) -> (block, 0 gate / 1 up / 2 down): where op-offload stages a copy
        self.staged: dict[int, tuple[int, int]] = {}

    def norm(self, x: Tensor, op: str = "RMS_NORM", bias: bool = False) -> Tensor:
        return build_norm(self.g, x, op, bias)

    def indexer_top_k(self, cur: Tensor, qr: Tensor) -> Tensor:
        g, d, s = self.g, self.d, self.s
        t, ns = s.n_tokens, s.n_stream
        iq = g.mul_mat(g.external("indexer.attn_q_b", d.q_lora, d.n_idx_head * d.idx_dim), qr)
        iq = g.unary("ROPE", g.reshape(iq, d.idx_dim, d.n_idx_head, t), self.inp_pos)
        ik = g.mul_mat(g.external("indexer.attn_k", d.n_embd, d.idx_dim), cur)
        ik = self.norm(ik, op="NORM", bias=True)
        ik = g.unary("ROPE", g.reshape(ik, d.idx_dim, 1, t), self.inp_pos)
        iq = g.mul_mat(self.lid_rot, iq)
        ik = g.mul_mat(self.lid_rot, ik)
        lid_cache = g.external("lid_cache", d.idx_dim, s.n_kv * ns, type=s.type_k)
        g.expand(g.set_rows(lid_cache, g.view(ik, d.idx_dim, t), self.lid_k_idxs))
        w = g.mul_mat(g.external("indexer.proj", d.n_embd, d.n_idx_head), cur)
        k = g.external("lid_k", d.idx_dim, 1, s.n_kv, ns, type=s.type_k)
        iq = g.view(iq, d.idx_dim, d.n_idx_head, t // ns, ns)
        w = g.unary("SCALE", g.view(w, d.n_idx_head, t // ns, 1, ns, contiguous=False))
        score = g.op("LIGHTNING_INDEXER", (s.n_kv, t // ns, 1, ns), F32, iq, k, w, self.lid_mask)
        return g.cont(g.op("TOP_K", (s.n_top_k, t // ns, 1, ns), I32, score))

    def attention(self, cur: Tensor, qr: Tensor, top_k: Tensor) -> Tensor:
        g, d, s = self.g, self.d, self.s
        t, ns, h = s.n_tokens, s.n_stream, d.n_head
        lat, r = d.kv_lora, d.rope
        q = g.mul_mat(g.external("wq_b", d.q_lora, h * (d.nope + r)), qr)
        q_nope = g.view(q, d.nope, h, t, contiguous=False)
        q_pe = g.view(q, r, h, t, contiguous=False)
        kv_pe = g.mul_mat(g.external("wkv_a_mqa", d.n_embd, lat + r), cur)
        kv_cmpr = g.view(kv_pe, lat, t, contiguous=False)
        k_pe = g.view(kv_pe, r, 1, t, contiguous=False)
        q_pe = g.unary("ROPE", q_pe, self.inp_pos)
        k_pe = g.unary("ROPE", k_pe, self.inp_pos)
        kv_cmpr = self.norm(kv_cmpr)
        q_abs = g.op("MUL_MAT", (lat, t, h), F32, g.external("wk_b", d.nope, lat, h),
                     g.permute(q_nope, 0, 2, 1, 3))
        q_cur = g.concat(g.permute(q_abs, 0, 2, 1, 3), q_pe, 0)
        kv_cmpr = g.reshape(kv_cmpr, lat, 1, t)
        k_cur = g.concat(kv_cmpr, k_pe, 0)
        # llm_graph_context::build_attn (DSA): q, v, k expanded together, K written to the cache
        g.expand(q_cur)
        g.expand(kv_cmpr)
        g.expand(k_cur)
        mla_cache = g.external("mla_cache", lat + r, s.n_kv * ns, type=s.type_k)
        g.expand(g.set_rows(mla_cache, g.view(k_cur, lat + r, t), self.mla_k_idxs))
        kq_all = g.unary("FILL", self.mla_mask)
        kq_all_v = g.view(kq_all, 1, s.n_kv, t // ns, ns)
        top_k_3d = g.view(top_k, top_k.ne[0], top_k.ne[1], top_k.ne[3], 1)
        zeros = g.unary("FILL", g.new_tensor("zeros", 1, top_k.ne[0], top_k.ne[1], top_k.ne[3], input=False))
        mask = g.view(g.set_rows(kq_all_v, zeros, top_k_3d), s.n_kv, t // ns, 1, ns)
        mask = g.unary("ADD", mask, self.mla_mask)
        k = g.external("mla_k", lat + r, 1, s.n_kv, ns, type=s.type_k)
        v = g.view(k, lat, 1, s.n_kv, ns, contiguous=False)
        # build_attn_mha with v_mla = wv_b
        qv = g.permute(g.view(q_cur, lat + r, h, t // ns, ns), 0, 2, 1, 3)
        kp, vp = g.permute(k, 0, 2, 1, 3), g.permute(v, 0, 2, 1, 3)
        wv_b = g.external("wv_b", lat, d.v_dim, h)
        if s.flash_attn:
            out = g.op("FLASH_ATTN_EXT", (lat, h, t // ns, ns), F32, qv, kp, vp, mask)
            out = g.op("MUL_MAT", (d.v_dim, t // ns, h, ns), F32, wv_b, g.permute(out, 0, 2, 1, 3))
            out = g.reshape(g.cont(g.permute(out, 0, 2, 1, 3)), d.v_dim * h, t)
        else:
            kq = g.unary("SOFT_MAX", g.op("MUL_MAT", (s.n_kv, t // ns, h, ns), F32, kp, qv), mask)
            vc = g.cont(g.transpose(vp))
            kqv = g.op("MUL_MAT", (lat, t // ns, h, ns), F32, vc, kq)
            kqv = g.op("MUL_MAT", (d.v_dim, t // ns, h, ns), F32, wv_b, kqv)
            out = g.cont(g.permute(kqv, 0, 2, 1, 3), d.v_dim * h, t)
        g.expand(out)
        return g.mul_mat(g.external("wo", d.v_dim * h, d.n_embd), out)

    def ffn(self, cur: Tensor, n_ff: int) -> Tensor:
        """build_ffn with a parallel gate (swiglu, no clamp)."""
        return build_ffn(self.g, cur, self.d.n_embd, n_ff)

    def moe(self, il: int, cur: Tensor) -> Tensor:
        """build_moe_ffn: sigmoid gating with the selection bias, normalised and scaled weights."""
        g, d = self.g, self.d
        e, t, n, k = d.n_embd, self.s.n_tokens, d.n_expert, d.n_used
        probs = g.unary("UNARY", g.mul_mat(g.external("ffn_gate_inp", e, n), cur))  # sigmoid
        biased = g.unary("ADD", probs, g.external("exp_probs_b", n))
        selected = g.view(g.op("ARGSORT", biased.ne, I32, biased), k, t, contiguous=False)
        moe_out = build_moe_experts(g, cur, probs, selected, il=il, n_expert=n, n_used=k, n_ff_exp=d.n_ff_exp,
                                    weights_norm=d.weights_norm, weights_scale=d.weights_scale, act="GLU",
                                    staged=self.staged)
        return g.unary("ADD", moe_out, self.ffn(cur, d.n_ff_shexp))

    def build(self) -> Graph:
        g, d, s = self.g, self.d, self.s
        t, o, ns, e = s.n_tokens, s.n_outputs, s.n_stream, d.n_embd
        self.tokens = g.new_tensor("inp_tokens", t, type=I32)
        embd_in = g.new_tensor("inp_embd", e, t)
        inp_l = g.expand(g.get_rows(g.external("token_embd", e, d.n_vocab), self.tokens))
        g.expand(embd_in)
        self.inp_pos = g.new_tensor("inp_pos", t, type=I32)
        self.mla_k_idxs = g.new_tensor("attn_inp_k_idxs", t, type=I64)
        self.mla_mask = g.new_tensor("attn_inp_kq_mask", s.n_kv, t // ns, 1, ns,
                                     type=F16 if s.flash_attn else F32)
        self.lid_k_idxs = g.new_tensor("attn_inp_k_idxs", t, type=I64)
        self.lid_mask = g.new_tensor("attn_inp_kq_mask", s.n_kv, t // ns, 1, ns, type=F16)
        self.lid_rot = g.new_tensor("attn_inp_k_rot", d.idx_dim, d.idx_dim)
        out_ids = g.new_tensor("out_ids", o, type=I32)
        n_layer = len(d.indexer_full)
        prev_top_k = None
        for il in range(n_layer):
            inp_sa = inp_l
            cur = self.norm(inp_l)
            qr = self.norm(g.mul_mat(g.external("wq_a", e, d.q_lora), cur))
            if d.indexer_full[il]:
                prev_top_k = self.indexer_top_k(cur, qr)
            if prev_top_k is None:
                raise ValueError("a shared indexer block must follow a full one (glm-dsa.cpp asserts it)")
            cur = self.attention(cur, qr, prev_top_k)
            if il == n_layer - 1:
                cur = g.get_rows(cur, out_ids)
                inp_sa = g.get_rows(inp_sa, out_ids)
            ffn_inp = g.unary("ADD", cur, inp_sa)
            cur = self.norm(ffn_inp)
            cur = self.ffn(cur, d.n_ff) if il < d.n_dense else self.moe(il, cur)
            inp_l = g.unary("ADD", cur, ffn_inp)
        cur = self.norm(inp_l)
        cur.output = True  # t_h_nextn and t_embd (result_norm)
        logits = g.mul_mat(g.external("output", e, d.n_vocab), cur)
        logits.output = True
        g.expand(logits)
        return g


def build_glm_dsa_graph(d: GlmDsaDims, s: GlmDsaShape) -> tuple[Graph, dict[int, tuple[int, int]]]:
    """The main graph for the reserved ubatch and where op-offload may stage expert copies
    (see graph_dsv4.build_dsv4_graph)."""
    b = _GlmDsaBuilder(d, s)
    graph = b.build()
    return graph, b.staged
