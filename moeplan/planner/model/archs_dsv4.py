"""DeepSeek V4 caches, as llama.cpp's llama_kv_cache_dsv4 allocates them (pure).

src/llama-kv-cache-dsv4.cpp (llama.cpp 2026-10) builds, for the trunk blocks of the main
context, with kv_size = n_ctx_seq (llama-model.cpp create_memory: the padded context, divided
by n_seq unless -kvu) and one stream per sequence whatever -kvu says (unified_raw =
unified_compressed = false):

  raw   llama_kv_cache_iswa, K only (dsv4_make_k_only), every block SWA
        (set_swa_pattern(0)): row n_embd_head_k (key_length, 512) x 1 KV head, type -ctk;
        cells pad256(min(kv_size, n_swa + n_ubatch)) per sequence            -> rule 'swa-seq'
  csa   llama_kv_cache, K only, blocks with compress ratio 4: row 512, type -ctk,
        cells pad256(max(1, ceil(kv_size / 4))) per sequence                 -> rule 'ratio'
  hca   the same for ratio 128: cells pad256(max(1, ceil(kv_size / 128)))   -> rule 'ratio'
  lid   lightning-indexer keys on the ratio-4 blocks: row indexer key_length (128) x 1 head,
        type -ctk, cells as csa                                              -> rule 'ratio'
  compressor state (llama_dsv4_comp_state), F32, two tensors (kv, score) per block, each
  n_embd_state x state_size x n_stream*(1 + n_rs_seq) rows                  -> rule 'fixed'
        csa_state: ratio-4 blocks,   n_embd_state 2*512, state_size 2*4 = 8
        hca_state: ratio-128 blocks, n_embd_state 512,   state_size 128
        lid_state: ratio-4 blocks,   n_embd_state 2*128, state_size 8
Checked to the byte against llama.cpp for 1 and 4 sequences, split and unified (-kvu), f16,
q8_0 and q4_0 keys, contexts 4k to 1M (tests/data/llama_memory/deepseek4.json).

n_rs_seq is 0 unless speculative decoding asks for rollback snapshots (common_params
need_n_rs_seq), so the states hold n_seq x state_size rows. A NextN block present in the file
is not in the main context's caches (moeplan gives NextN blocks no cache).
"""
from __future__ import annotations

from typing import Any

from moeplan.planner.model.spec import KvComponent

CSA_RATIO = 4
HCA_RATIO = 128


def _int(hp: dict[str, Any], key: str, default: int = 0) -> int:
    v = hp.get(key, default)
    return int(v if v is not None else default)


def dsv4_layer_kv(hp: dict[str, Any], il: int) -> tuple[str, tuple[KvComponent, ...]]:
    """(label, cache components) of trunk block `il` of a deepseek4 GGUF."""
    d_head = _int(hp, "attention.key_length_swa", _int(hp, "attention.key_length"))
    n_swa = _int(hp, "attention.sliding_window")
    idx_dim = _int(hp, "attention.indexer.key_length")
    ratios = hp.get("attention.compress_ratios") or []
    ratio = int(ratios[il]) if il < len(ratios) else 0
    comps = [KvComponent("raw_k", d_head, "swa-seq", "k", window=n_swa)]
    if ratio == CSA_RATIO:
        comps += [
            KvComponent("csa_k", d_head, "ratio", "k", ratio=CSA_RATIO),
            KvComponent("lid_k", idx_dim, "ratio", "k", ratio=CSA_RATIO),
            KvComponent("csa_state_kv", 2 * d_head, "fixed", "F32", window=2 * CSA_RATIO),
            KvComponent("csa_state_score", 2 * d_head, "fixed", "F32", window=2 * CSA_RATIO),
            KvComponent("lid_state_kv", 2 * idx_dim, "fixed", "F32", window=2 * CSA_RATIO),
            KvComponent("lid_state_score", 2 * idx_dim, "fixed", "F32", window=2 * CSA_RATIO),
        ]
        return "csa", tuple(comps)
    if ratio == HCA_RATIO:
        comps += [
            KvComponent("hca_k", d_head, "ratio", "k", ratio=HCA_RATIO),
            KvComponent("hca_state_kv", d_head, "fixed", "F32", window=HCA_RATIO),
            KvComponent("hca_state_score", d_head, "fixed", "F32", window=HCA_RATIO),
        ]
        return "hca", tuple(comps)
    return "swa-only", tuple(comps)
