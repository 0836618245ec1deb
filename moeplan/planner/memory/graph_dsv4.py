"""DeepSeek V4's compute graph, shapes only, as src/models/deepseek4.cpp builds it (pure).

`build_dsv4_graph` mirrors llama_model_deepseek4::graph (the main graph; llama.cpp 0c1e570)
op by op for the worst-case ubatch that llama_context::sched_reserve reserves, so that
ggml_graph.allocate can replay ggml-alloc on it. With E = n_embd, T tokens in S streams (one
per sequence: DeepSeek V4's caches are never unified), H heads of D = 512, hc = 4 streams:

inputs (llama-graph.cpp build_inp_embd / build_inp_pos / build_inp_out_ids / build_inp_dsv4)
  inp_tokens, inp_embd (E x T, the unused embeddings branch of build_forward_select), inp_pos,
  out_ids; raw: K row ids, the SWA mask [n_raw, T] (f16 with flash attention, else f32),
  k_rot 512x512 f32 when -ctk is quantized; per compressor (csa ratio 4 with overlap, hca 128,
  lid = the indexer's ratio-4 compressor): state_pos [T], persist ids [min(T, rows*S)] x 2,
  read ids [(2 if overlap else 1) * ratio * B], write ids (i64) and positions [B] with
  B = T / ratio + S (llama-kv-cache-dsv4.cpp dsv4_build_reserve_comp_plan), and its mask
  [cells, T] (csa/hca: f16 with flash attention else f32; lid: f16, the fused lightning
  indexer wants f16); lid k_rot 128x128 f32 (always), csa/hca k_rot when -ctk is quantized.
  Every ratio-4 block also adds a constant leaf [1, top_k, T] (build_top_k_mask's zeros).

each block (hyper-connections fused: ggml_dsv4_hc_pre / _comb / _post)
  hc_pre: rms_norm of the hc*E streams (a new [hc*E, T]), mixes [24, T], pre/post/comb weights
  compressor (ratio 4 and 128): kv and gate projections [c*D, T] (c = 2 for ratio 4), the
    state rows concatenated in front, gathered, softmax-pooled, normed, roped and written to
    the compressed cache; the indexer compressor the same with D = 128
  attention: qr [q_lora, T], Q [H*D, T] and its rms_norm copy, kv [D, T] and its rope copy,
    - ratio 4: indexer q [n_idx*128, T], its rope copy and Hadamard product, fused indexer
      scores [n_lid, T] f32, top-k ids [k, T] (+ a copy), the CSA mask filled to -inf, the
      top-k mask added to the CSA mask, keys = concat(raw, csa) [D, n_raw + n_csa] of the
      cache type, mask = concat(raw mask, top-k mask) [n_raw + n_csa, T];
    - ratio 128: keys = concat(raw, hca), mask = concat(raw mask, hca mask);
    - ratio 0: the raw cache and mask directly;
    flash attention: output [D, H, T]; without: scores [n_kv, T, H] f32 (softmax in place),
    the keys transposed into a contiguous V, output [D, T, H] and its contiguous copy;
    a quantized -ctk adds the Hadamard rotations of q, kv and the output (each as big);
    de-rope copy [D, H, T], grouped wo_a [o_lora, T, groups] (+ contiguous copy), wo_b [E, T]
  hc_post: the new residual [E, hc, T]
  MoE (llama-graph.cpp build_moe_ffn): router logits / probabilities, selection, weights,
    gate and up [F, k, T], swiglu, down [E, k, T]; the shared expert [F_sh, T] x 3; hash-routed
    blocks (the first hash_layer_count) take the experts from token ids (no argsort)
output: the hc streams of the output rows [hc*E, O], their rms_norm, the non-fused hc head
  (hc products [E, O] summed), result_norm and logits [V, O] (graph outputs, never freed).
Tensors under a few KiB are kept too: they decide which holes the large ones fall into.
"""
from __future__ import annotations

from dataclasses import dataclass

from moeplan.planner.memory.ggml_graph import F16, F32, I32, I64, Graph, Tensor
from moeplan.planner.memory.graph_llm import build_ffn, build_moe_experts, build_norm

CSA_RATIO, HCA_RATIO = 4, 128


@dataclass(frozen=True)
class Dsv4Dims:
    """Hyper-parameters of the main graph (GGUF keys in brackets)."""

    n_embd: int  # embedding_length
    n_head: int  # attention.head_count
    head_dim: int  # attention.key_length (512)
    q_lora: int  # attention.q_lora_rank
    o_groups: int  # attention.output_group_count
    o_lora: int  # attention.output_lora_rank
    hc: int  # hyper_connection.count
    n_idx_head: int  # attention.indexer.head_count
    idx_dim: int  # attention.indexer.key_length
    top_k: int  # attention.indexer.top_k
    ratios: tuple[int, ...]  # attention.compress_ratios of the trunk blocks
    n_hash: int  # hash_layer_count
    n_expert: int
    n_used: int
    n_ff_exp: int
    n_ff_shexp: int  # n_ff_exp * expert_shared_count
    n_vocab: int
    # router weights normalised / scaled (expert_weights_norm / _scale != 1); DeepSeek V4's
    # converter writes both from the config; a profile without them keeps these defaults
    # (together k * T * 8 bytes: they only move small holes)
    weights_norm: bool = True
    weights_scale: bool = True


@dataclass(frozen=True)
class Dsv4Shape:
    """The reserved ubatch: T tokens (O outputs) over S streams; cache cells per stream."""

    n_tokens: int
    n_outputs: int
    n_stream: int
    n_raw: int  # SWA cells per stream: pad256(min(n_ctx_seq, n_swa + n_ubatch))
    n_csa: int  # pad256(ceil(n_ctx_seq / 4))
    n_hca: int  # pad256(ceil(n_ctx_seq / 128))
    n_top_k: int  # keys the indexer keeps: min(n_csa, top_k)
    flash_attn: bool
    type_k: str  # -ctk as a ggml type name ('F16', 'Q8_0', ...)

    @property
    def quantized_k(self) -> bool:
        return self.type_k not in ("F16", "F32", "BF16")


class _Dsv4Builder:
    def __init__(self, d: Dsv4Dims, s: Dsv4Shape, ):
        self.d, self.s, self.g = d, s, Graph()
        # id(MUL_MAT_ID) -> (block, 0 gate / 1 up / 2 down): where op-offload stages a copy
        self.staged: dict[int, tuple[int, int]] = {}
        self.mask_type = F16 if s.flash_attn else F32

    # ---- inputs ---------------------------------------------------------------------------
    def comp_inputs(self, name: str, ratio: int, overlap: bool, state_rows: int, cells: int, mask_type: str):
        g, s = self.g, self.s
        t, n_seq = s.n_tokens, s.n_stream
        n_blocks = t // ratio + n_seq
        n_persist = min(t, state_rows * n_seq)
        return {
            "state_pos": g.new_tensor(f"dsv4_{name}_state_pos", t, type=I32),
            "persist_src": g.new_tensor(f"dsv4_{name}_state_persist_src_idxs", n_persist, type=I32),
            "persist_dst": g.new_tensor(f"dsv4_{name}_state_persist_dst_idxs", n_persist, type=I32),
            "read_idxs": g.new_tensor(f"dsv4_{name}_state_read_idxs", (2 if overlap else 1) * ratio * n_blocks,
                                      type=I32),
            "write_idxs": g.new_tensor(f"dsv4_{name}_state_write_idxs", n_blocks, type=I64),
            "write_pos": g.new_tensor(f"dsv4_{name}_state_write_pos", n_blocks, type=I32),
            "kq_mask": g.new_tensor(f"dsv4_{name}_kq_mask", cells, t // n_seq, 1, n_seq, type=mask_type),
            "n_blocks": n_blocks,
            "state_rows": state_rows * n_seq,
        }

    def k_rot(self, n: int) -> Tensor:
        return self.g.new_tensor("attn_inp_k_rot", n, n)

    # ---- helpers mirroring llama-graph / deepseek4.cpp --------------------------------------
    def norm(self, x: Tensor) -> Tensor:
        return build_norm(self.g, x)

    def hadamard(self, x: Tensor, rot: Tensor) -> Tensor:
        """llama_mul_mat_hadamard: reshape (or cont) to rows of the rotation size, multiply."""
        g = self.g
        n = rot.ne[0]
        rows = x.n_elements // n
        r = g.reshape(x, n, rows) if x.contiguous else g.cont(x, n, rows)
        r = g.mul_mat(rot, r)
        return g.reshape(r, *x.ne)

    def hc_pre(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """build_hc_pre with the fused pre and comb: (result [E, T], post [hc, T], comb)."""
        g, d = self.g, self.d
        hc, t = d.hc, x.ne[2]
        flat = g.reshape(x, hc * d.n_embd, t)
        mixes = g.mul_mat(g.external("hc_fn", hc * d.n_embd, (2 + hc) * hc), g.unary("RMS_NORM", flat))

        def affine(offset: int) -> Tensor:
            v = g.view(mixes, hc, t, contiguous=False)
            v = g.unary("MUL", v, g.external("hc_scale", 1))
            v = g.unary("ADD", v, g.external("hc_base", hc))
            v = g.unary("UNARY", v)  # sigmoid
            return g.unary("SCALE", v)

        pre = affine(0)
        post = affine(hc)
        comb = g.op("DSV4_HC_COMB", (hc, hc, t), F32, mixes, g.external("hc_scale", 3),
                    g.external("hc_base", (2 + hc) * hc))
        result = g.op("DSV4_HC_PRE", (d.n_embd, t), F32, x, pre)
        return result, post, comb

    def comp_from_state(self, source_kv: Tensor, source_score: Tensor, inp: dict, ratio: int, dim: int,
                        overlap: bool) -> Tensor:
        """build_overlap_compressed_kv_from_state (ratio 4) / build_hca_compressed_kv_from_state."""
        g = self.g
        n_blocks = inp["n_blocks"]
        if overlap:
            def zero_row(t: Tensor) -> Tensor:
                row = g.view(t, t.ne[0])
                row = g.unary("SCALE", row)  # ggml_scale / ggml_scale_bias: a new 1-row tensor
                return g.concat(t, g.reshape(row, t.ne[0], 1), 1)

            kv_rows = g.get_rows(zero_row(source_kv), inp["read_idxs"])
            score_rows = g.get_rows(zero_row(source_score), inp["read_idxs"])
            n_read = ratio * n_blocks

            def half(rows: Tensor) -> Tensor:
                return g.reshape(g.cont(g.view(rows, dim, n_read, contiguous=False), dim, n_read), dim, ratio, n_blocks)

            kv_prev, score_prev = half(kv_rows), half(score_rows)
            kv_cur, score_cur = half(kv_rows), half(score_rows)
            values = g.concat(kv_prev, kv_cur, 1)
            scores = g.concat(score_prev, score_cur, 1)
        else:
            values = g.reshape(g.get_rows(source_kv, inp["read_idxs"]), dim, ratio, n_blocks)
            scores = g.reshape(g.get_rows(source_score, inp["read_idxs"]), dim, ratio, n_blocks)
        values = g.cont(g.permute(values, 1, 0, 2, 3))
        scores = g.cont(g.permute(scores, 1, 0, 2, 3))
        weights = g.unary("SOFT_MAX", scores)
        comp = g.unary("MUL", values, weights)
        comp = g.op("SUM_ROWS", (1, comp.ne[1], comp.ne[2], comp.ne[3]), F32, comp)
        comp = g.cont(g.permute(comp, 1, 0, 2, 3))
        comp = self.norm(comp)
        return g.unary("ROPE", comp, inp["write_pos"])

    def compressor(self, cur: Tensor, inp: dict, ratio: int, dim: int, overlap: bool, k_rot: Tensor | None,
                   cache_cells: int) -> None:
        """One compressor of build_attention_impl: state projections, the compressed key written
        to its cache, the tail rows persisted to the state (both expanded into the graph)."""
        g = self.g
        width = (2 if overlap else 1) * dim
        state_kv = g.mul_mat(g.external("comp_wkv", self.d.n_embd, width), cur)
        state_score = g.mul_mat(g.external("comp_wgate", self.d.n_embd, width), cur)
        ape_rows = g.get_rows(g.external("comp_ape", width, ratio), inp["state_pos"])
        state_score = g.unary("ADD", state_score, ape_rows)
        state = g.external("dsv4_state", width, inp["state_rows"])
        source_kv = g.concat(g.view(state, width, inp["state_rows"]), state_kv, 1)
        source_score = g.concat(g.view(state, width, inp["state_rows"]), state_score, 1)
        comp = self.comp_from_state(source_kv, source_score, inp, ratio, dim, overlap)
        if k_rot is not None:
            comp = self.hadamard(comp, k_rot)
        cache = g.external("comp_cache", dim, cache_cells * self.s.n_stream, type=self.s.type_k)
        g.expand(g.set_rows(cache, g.view(comp, dim, comp.ne[2]), inp["write_idxs"]))
        for src in (state_kv, state_score):
            persist = g.get_rows(src, inp["persist_src"])
            g.expand(g.set_rows(state, persist, inp["persist_dst"]))

    def attn_mha(self, q: Tensor, k: Tensor, mask: Tensor) -> Tensor:
        """llm_graph_context::build_attn_mha with v = k (DeepSeek V4's K-only caches)."""
        g, s, d = self.g, self.s, self.d
        t, ns, h, dh = s.n_tokens, s.n_stream, d.n_head, d.head_dim
        q = g.permute(g.view(q, dh, h, t // ns, ns), 0, 2, 1, 3)
        kp = g.permute(k, 0, 2, 1, 3)
        vp = g.permute(k, 0, 2, 1, 3)
        sinks = g.external("attn_sinks", h)
        if s.flash_attn:
            cur = g.op("FLASH_ATTN_EXT", (dh, h, t // ns, ns), F32, q, kp, vp, mask, sinks)
            cur = g.reshape(cur, dh * h, t)
        else:
            kq = g.op("MUL_MAT", (k.ne[2], t // ns, h, ns), F32, kp, q)
            kq = g.unary("SOFT_MAX", kq, mask, sinks)
            v = g.cont(g.transpose(vp))
            kqv = g.op("MUL_MAT", (dh, t // ns, h, ns), F32, v, kq)
            cur = g.cont(g.permute(kqv, 0, 2, 1, 3), dh * h, t)
        g.expand(cur)
        return cur

    def top_k_mask(self, kq_mask: Tensor, top_k: Tensor) -> Tensor:
        """build_top_k_mask: the compressed mask with only the indexer's top-k cells open."""
        g = self.g
        kq_all = g.unary("FILL", kq_mask)
        kq_all_v = g.view(kq_all, 1, kq_mask.ne[0], kq_mask.ne[1], kq_mask.ne[3])
        top_k_3d = g.view(top_k, top_k.ne[0], top_k.ne[1], top_k.ne[3], 1)
        zeros = g.new_tensor("zeros", 1, top_k.ne[0], top_k.ne[1], top_k.ne[3], type=self.mask_type, input=False)
        zeros = g.unary("FILL", zeros)
        masked = g.set_rows(kq_all_v, zeros, top_k_3d)
        masked = g.view(masked, *kq_mask.ne)
        return g.unary("ADD", masked, kq_mask)

    def lid_top_k(self, qr: Tensor, cur: Tensor, lid: dict, lid_rot: Tensor) -> Tensor:
        """build_lid_top_k with the fused lightning indexer."""
        g, s, d = self.g, self.s, self.d
        t, ns = s.n_tokens, s.n_stream
        iq = g.mul_mat(g.external("indexer_attn_q_b", d.q_lora, d.n_idx_head * d.idx_dim), qr)
        iq = g.reshape(iq, d.idx_dim, d.n_idx_head, t)
        iq = g.unary("ROPE", iq, self.inp_pos)
        iq = self.hadamard(iq, lid_rot)
        w = g.mul_mat(g.external("indexer_proj", d.n_embd, d.n_idx_head), cur)
        w = g.unary("SCALE", w)
        n_lid = lid["kq_mask"].ne[0]
        k = g.external("lid_cache", d.idx_dim, 1, n_lid, ns, type=s.type_k)
        iq = g.view(iq, d.idx_dim, d.n_idx_head, t // ns, ns)
        w = g.view(w, d.n_idx_head, t // ns, 1, ns)
        score = g.op("LIGHTNING_INDEXER", (n_lid, t // ns, 1, ns), F32, iq, k, w, lid["kq_mask"])
        return g.cont(g.op("TOP_K", (s.n_top_k, t // ns, 1, ns), I32, score))

    def attention(self, il: int, cur: Tensor, ratio: int) -> Tensor:
        g, s, d = self.g, self.s, self.d
        t, ns, h, dh = s.n_tokens, s.n_stream, d.n_head, d.head_dim
        qr = self.norm(g.mul_mat(g.external("wq_a", d.n_embd, d.q_lora), cur))
        q = g.reshape(g.mul_mat(g.external("wq_b", d.q_lora, h * dh), qr), dh, h, t)
        q = g.unary("ROPE", g.unary("RMS_NORM", q), self.inp_pos)
        kv = g.reshape(self.norm(g.mul_mat(g.external("wkv", d.n_embd, dh), cur)), dh, 1, t)
        kv = g.unary("ROPE", kv, self.inp_pos)
        if ratio == HCA_RATIO:
            self.compressor(cur, self.hca, HCA_RATIO, dh, False, self.hca_rot, s.n_hca)
        elif ratio == CSA_RATIO:
            self.compressor(cur, self.csa, CSA_RATIO, dh, True, self.csa_rot, s.n_csa)
            self.compressor(cur, self.lid, CSA_RATIO, d.idx_dim, True, self.lid_rot, s.n_csa)
        top_k = self.lid_top_k(qr, cur, self.lid, self.lid_rot) if ratio == CSA_RATIO else None
        if self.raw_rot is not None:
            q = self.hadamard(q, self.raw_rot)
            kv = self.hadamard(kv, self.raw_rot)
        g.expand(q)
        g.expand(kv)
        raw_cache = g.external("raw_cache", dh, s.n_raw * ns, type=s.type_k)
        g.expand(g.set_rows(raw_cache, g.view(kv, dh, t), self.raw_k_idxs))
        raw_k = g.external("raw_k", dh, 1, s.n_raw, ns, type=s.type_k)
        if ratio == CSA_RATIO:
            assert top_k is not None  # computed above for CSA layers
            comp_k = g.external("csa_k", dh, 1, s.n_csa, ns, type=s.type_k)
            k_all = g.concat(raw_k, comp_k, 2)
            mask = g.concat(self.raw_mask, self.top_k_mask(self.csa["kq_mask"], top_k), 0)
        elif ratio == HCA_RATIO:
            comp_k = g.external("hca_k", dh, 1, s.n_hca, ns, type=s.type_k)
            k_all = g.concat(raw_k, comp_k, 2)
            mask = g.concat(self.raw_mask, self.hca["kq_mask"], 0)
        else:
            k_all, mask = raw_k, self.raw_mask
        out = self.attn_mha(q, k_all, mask)
        if self.raw_rot is not None:
            out = self.hadamard(out, self.raw_rot)
        out = g.unary("ROPE_BACK", g.reshape(out, dh, h, t), self.inp_pos)
        group_dim = h // d.o_groups * dh
        out = g.permute(g.reshape(out, group_dim, d.o_groups, t), 0, 2, 1, 3)
        oa = g.op("MUL_MAT", (d.o_lora, t, d.o_groups), F32,
                  g.external("wo_a", group_dim, d.o_lora, d.o_groups), out)
        oa = g.cont(g.permute(oa, 0, 2, 1, 3), d.o_lora * d.o_groups, t)
        return g.mul_mat(g.external("wo_b", d.o_groups * d.o_lora, d.n_embd), oa)

    def moe(self, il: int, cur: Tensor) -> Tensor:
        """build_moe_ffn (sqrt-softplus gating, hash routing on the first blocks) + shared expert."""
        g, d = self.g, self.d
        e, t, n, k = d.n_embd, self.s.n_tokens, d.n_expert, d.n_used
        logits = g.mul_mat(g.external("ffn_gate_inp", e, n), cur)
        probs = g.unary("SQRT", g.unary("UNARY", logits))  # sqrt(softplus(logits))
        if il < d.n_hash:
            selected = g.get_rows(g.external("ffn_gate_tid2eid", k, d.n_vocab, type=I32), self.tokens)
        else:
            biased = g.unary("ADD", probs, g.external("exp_probs_b", n))
            selected = g.view(g.op("ARGSORT", biased.ne, I32, biased), k, t, contiguous=False)
        moe_out = build_moe_experts(g, cur, probs, selected, il=il, n_expert=n, n_used=k, n_ff_exp=d.n_ff_exp,
                                    weights_norm=d.weights_norm, weights_scale=d.weights_scale,
                                    act="SWIGLU_CLAMP", staged=self.staged)
        return g.unary("ADD", moe_out, build_ffn(g, cur, e, d.n_ff_shexp, act="SWIGLU_CLAMP"))

    def hc_head(self, x: Tensor) -> Tensor:
        """build_hc_head: il = -1, so build_hc_pre runs unfused (hc products summed)."""
        g, d = self.g, self.d
        hc, o = d.hc, x.ne[2]
        flat = g.reshape(x, hc * d.n_embd, o)
        mixes = g.mul_mat(g.external("output_hc_fn", hc * d.n_embd, hc), g.unary("RMS_NORM", flat))
        pre = g.unary("MUL", mixes, g.external("output_hc_scale", 1))
        pre = g.unary("SCALE", g.unary("UNARY", g.unary("ADD", pre, g.external("output_hc_base", hc))))
        result = None
        for _ in range(hc):
            xh = g.view(x, d.n_embd, o, contiguous=False)
            wh = g.view(pre, 1, o, contiguous=False)
            cur = g.op("MUL", (d.n_embd, o), F32, xh, wh)
            result = cur if result is None else g.unary("ADD", result, cur)
        assert result is not None  # hc >= 1 streams
        return result

    # ---- the graph ------------------------------------------------------------------------
    def build(self) -> Graph:
        g, s, d = self.g, self.s, self.d
        t, o, ns, e, hc = s.n_tokens, s.n_outputs, s.n_stream, d.n_embd, d.hc
        self.tokens = g.new_tensor("inp_tokens", t, type=I32)
        embd_in = g.new_tensor("inp_embd", e, t)
        inp = g.get_rows(g.external("token_embd", e, d.n_vocab), self.tokens)
        g.expand(inp)
        g.expand(embd_in)  # ggml_build_forward_select keeps the unused branch in the graph
        self.inp_pos = g.new_tensor("inp_pos", t, type=I32)
        out_ids = g.new_tensor("out_ids", o, type=I32)
        self.raw_k_idxs = g.new_tensor("attn_inp_k_idxs", t, type=I64)
        self.raw_mask = g.new_tensor("attn_inp_kq_mask", s.n_raw, t // ns, 1, ns, type=self.mask_type)
        self.raw_rot = self.k_rot(d.head_dim) if s.quantized_k else None
        self.csa = self.comp_inputs("csa", CSA_RATIO, True, 2 * CSA_RATIO, s.n_csa, self.mask_type)
        self.hca = self.comp_inputs("hca", HCA_RATIO, False, HCA_RATIO, s.n_hca, self.mask_type)
        self.lid = self.comp_inputs("lid", CSA_RATIO, True, 2 * CSA_RATIO, s.n_csa, F16)
        self.csa_rot = self.k_rot(d.head_dim) if s.quantized_k else None
        self.hca_rot = self.k_rot(d.head_dim) if s.quantized_k else None
        self.lid_rot = self.k_rot(d.idx_dim)
        g.expand(self.raw_mask)
        inp_l = g.op("REPEAT", (e, hc, t), F32, g.reshape(inp, e, 1, t))
        for il, ratio in enumerate(d.ratios):
            residual = inp_l
            cur, post, comb = self.hc_pre(inp_l)
            cur = self.attention(il, self.norm(cur), ratio)
            inp_l = g.op("DSV4_HC_POST", (e, hc, t), F32, cur, residual, post, comb)
            residual = inp_l
            cur, post, comb = self.hc_pre(inp_l)
            g.expand(residual)
            g.expand(post)
            g.expand(comb)
            cur = self.moe(il, self.norm(cur))
            inp_l = g.op("DSV4_HC_POST", (e, hc, t), F32, cur, residual, post, comb)
        flat_out = g.get_rows(g.reshape(inp_l, e * hc, t), out_ids)
        cur = self.hc_head(g.reshape(flat_out, e, hc, o))
        cur = self.norm(cur)
        cur.output = True  # result_norm (t_embd)
        logits = g.mul_mat(g.external("output", e, d.n_vocab), cur)
        logits.output = True
        g.expand(logits)
        return g


def build_dsv4_graph(d: Dsv4Dims, s: Dsv4Shape) -> tuple[Graph, dict[int, tuple[int, int]]]:
    """The main graph for the reserved ubatch, and where op-offload may stage expert copies:
    id(MUL_MAT_ID) -> (block, 0 gate / 1 up / 2 down) (see ggml_graph.plan_allocation)."""
    b = _Dsv4Builder(d, s)
    graph = b.build()
    return graph, b.staged
