"""Per-architecture rules: which blocks are MoE, dense or NextN, and what each caches.

Input is the GGUF hyper-parameters of an architecture as a dict keyed by the GGUF key
without the `{arch}.` prefix ('block_count', 'attention.head_count_kv', ...), whatever
the model came from (a GGUF header, a Hugging Face config mapped to GGUF keys, a profile).
The rules mirror llama.cpp (src/models/<arch>.cpp load_arch_hparams, llama-hparams.cpp,
llama-kv-cache*.cpp, llama-memory-recurrent.cpp) as of its 2026-10 sources.
"""
from __future__ import annotations

from typing import Any

from moeplan.planner.model import registry
from moeplan.planner.model.spec import KvComponent, hp_at, kv_head_dims

SUPPORTED_ARCHS = registry.supported()


def n_nextn(hp: dict[str, Any]) -> int:
    return int(hp.get("nextn_predict_layers", 0) or 0)


def n_trunk(hp: dict[str, Any]) -> int:
    """llama.cpp n_layer(): blocks in the file minus NextN/MTP blocks."""
    return int(hp["block_count"]) - n_nextn(hp)


def is_swa_layer(arch: str, hp: dict[str, Any], il: int) -> bool:
    """llama_model_base::load_swa_pattern: a per-layer bool array if the GGUF has one, else
    set_swa_pattern(n) with the key's scalar or the arch default: SWA when il % n < n - 1
    (n == 0: every layer). NextN blocks are never SWA."""
    if il >= n_trunk(hp):
        return False
    rec = registry.get(arch)
    if rec.chunked_window and hp.get("attention.sliding_window") == 0:
        return False  # llama4.cpp: a GGUF with sliding_window 0 has no chunked attention
    pattern = hp.get("attention.sliding_window_pattern")
    if isinstance(pattern, (list, tuple)):
        return bool(pattern[il]) if il < len(pattern) else False
    default = rec.swa_pattern  # openai-moe.cpp / llama4.cpp load_swa_pattern(ml, n)
    if default is None:
        return False
    n = default if pattern is None else int(pattern)
    return n == 0 or (il % n < n - 1)


def swa_window(arch: str, hp: dict[str, Any]) -> int:
    chunked = registry.get(arch).chunked_window
    if chunked:
        return chunked  # llama4.cpp sets n_swa = 8192 (chunked attention) whatever the GGUF says
    return int(hp.get("attention.sliding_window") or 0)


# GLM-5.2's indexer layout (llama.cpp src/models/glm-dsa.cpp GLM_5_2_DEFAULT_INDEXER_TYPES):
# full lightning indexers on blocks 0, 1, then on the first block of every group of four
GLM_5_2_INDEXER_FULL = (True, True) + (True, False, False, False) * 19


def is_indexer_full(arch: str, hp: dict[str, Any], il: int) -> bool:
    """Whether trunk block il keeps DSA indexer keys (llama_hparams::is_indexer_full).

    deepseek32: every trunk block. glm-dsa (glm-dsa.cpp load_arch_hparams): the GGUF's
    attention.indexer.types array if present; else every block for GLM 5 / 5.1
    (n_ctx_train < 1048576) and GLM_5_2_INDEXER_FULL for GLM-5.2."""
    if not registry.get(arch).indexer_types:
        return True
    types = hp.get("attention.indexer.types")
    if isinstance(types, (list, tuple)) and il < len(types):
        return bool(types[il])
    if int(hp.get("context_length", 0) or 0) < 1048576:
        return True
    return GLM_5_2_INDEXER_FULL[il] if il < len(GLM_5_2_INDEXER_FULL) else False


def is_recurrent_layer(arch: str, hp: dict[str, Any], il: int) -> bool:
    rec = registry.get(arch)
    if not rec.recurrent_hybrid:
        return False
    if rec.recurrent_rule == "mixer":
        # nemotron-h.cpp load_arch_hparams: recurrent iff n_head_kv(il) == 0 and n_ff(il) == 0
        return (il < n_trunk(hp) and not int(hp_at(hp, "attention.head_count_kv", il, 0) or 0)
                and not int(hp_at(hp, "feed_forward_length", il, 0) or 0))
    if rec.recurrent_rule == "no_kv":
        # kimi-k3.cpp load_arch_hparams: is_recr_impl[i] = n_head_kv(i) == 0
        return il < n_trunk(hp) and not int(hp_at(hp, "attention.head_count_kv", il, 0) or 0)
    arr = hp.get("attention.recurrent_layers")
    if isinstance(arr, (list, tuple)):
        return bool(arr[il]) if il < len(arr) else False
    interval = int(hp.get("full_attention_interval", 4) or 4)
    return il < n_trunk(hp) and (il + 1) % interval != 0


def recurrent_state_sizes(hp: dict[str, Any]) -> tuple[int, int]:
    """(n_embd_r, n_embd_s) in f32 elements per sequence (llama-hparams.cpp).

    Kimi KDA layers (kda.head_dim set): conv state 3 x (d_conv - 1) x d_inner for Q, K and V,
    recurrent state head_dim x head_dim x n_head, d_inner = n_head x head_dim."""
    kda = int(hp.get("kda.head_dim", 0) or 0)
    if kda:
        n_head = int(hp_at(hp, "attention.head_count", 0, 0) or 0)
        d_conv = int(hp.get("ssm.conv_kernel", 0) or 0)
        return 3 * (d_conv - 1 if d_conv > 0 else 3) * n_head * kda, kda * kda * n_head
    d_conv = int(hp.get("ssm.conv_kernel", 0) or 0)
    d_inner = int(hp.get("ssm.inner_size", 0) or 0)
    d_state = int(hp.get("ssm.state_size", 0) or 0)
    n_group = int(hp.get("ssm.group_count", 0) or 0)
    n_r = (d_conv - 1 if d_conv > 0 else 0) * (d_inner + 2 * n_group * d_state)
    n_s = d_state * d_inner
    return n_r, n_s


def head_dims(hp: dict[str, Any], il: int, swa: bool = False) -> tuple[int, int, int]:
    """(n_head_kv, d_k, d_v) of layer il as llama.cpp's hparams resolve them; a sliding-window
    layer takes attention.key_length_swa / value_length_swa where the GGUF has them
    (llama-model.cpp load_hparams: n_embd_head_k_swa defaults to the full layers' size;
    llama_hparams::n_embd_head_k(il))."""
    n_head = int(hp_at(hp, "attention.head_count", il, 1) or 1)
    n_head_kv = hp_at(hp, "attention.head_count_kv", il, None)
    n_head_kv = n_head if n_head_kv is None else int(n_head_kv)
    d_k, d_v = kv_head_dims(hp, n_head)
    if swa:
        d_k = int(hp.get("attention.key_length_swa") or d_k)
        d_v = int(hp.get("attention.value_length_swa") or d_v)
    return n_head_kv, d_k, d_v


def has_kv(hp: dict[str, Any], il: int) -> bool:
    """llama_hparams::has_kv: with attention.shared_kv_layers = S (Gemma 3n / 4) the last S
    layers keep no cache of their own; they read the last earlier layer of their kind
    (llama-model.cpp create_memory, the 'reuse' callback)."""
    shared = int(hp.get("attention.shared_kv_layers", 0) or 0)
    return not shared or il < int(hp["block_count"]) - shared


def layer_kv(arch: str, hp: dict[str, Any], il: int) -> tuple[str, tuple[KvComponent, ...]]:
    """Attention label and cache components of trunk layer `il`."""
    rec = registry.get(arch)
    if rec.kv_layout == "dsv4":
        from moeplan.planner.model.archs_dsv4 import dsv4_layer_kv

        return dsv4_layer_kv(hp, il)
    if is_recurrent_layer(arch, hp, il):
        n_r, n_s = recurrent_state_sizes(hp)
        return "recurrent", (KvComponent("r", n_r, "seq", "F32"), KvComponent("s", n_s, "seq", "F32"))
    n_head_kv, d_k, d_v = head_dims(hp, il, is_swa_layer(arch, hp, il))
    if not has_kv(hp, il):
        return "shared", ()
    if rec.mla and hp.get("attention.key_length_mla"):
        # MLA: only the latent (kv_lora_rank + rope dims) is cached, as K; V is a view of it
        comps = [KvComponent("k", d_k * n_head_kv, "ctx", "k")]
        label = "mla"
        idx_dim = int(hp.get("attention.indexer.key_length", 0) or 0)
        if rec.indexer_cache and idx_dim and is_indexer_full(arch, hp, il):
            # llama-kv-cache-dsa.cpp: the lightning indexer keeps its own key cache, one head of
            # attention.indexer.key_length, K only (the MLA hparams make it V-less), type -ctk,
            # on the blocks llama-model.cpp's filter_lid selects (is_indexer_full)
            comps.append(KvComponent("idx_k", idx_dim, "ctx", "k"))
            label = "mla+dsa"
        return label, tuple(comps)
    if n_head_kv == 0:
        return "none", ()
    if is_swa_layer(arch, hp, il):
        w = swa_window(arch, hp)
        label = "chunked" if rec.chunked_window else "swa"
        return label, (KvComponent("k", d_k * n_head_kv, "swa", "k", window=w),
                       KvComponent("v", d_v * n_head_kv, "swa", "v", window=w))
    return "full", (KvComponent("k", d_k * n_head_kv, "ctx", "k"),
                    KvComponent("v", d_v * n_head_kv, "ctx", "v"))


def nextn_layer_kv(arch: str, hp: dict[str, Any], il: int) -> tuple[KvComponent, ...]:
    """Caches the main context allocates for NextN/MTP block `il` (present in the file).

    Usually none: the trunk never attends the block (llama-model.cpp filters it out of the
    main caches). DeepSeek V4's caches are built from hparams with n_layer_nextn = 0 and no
    layer filter (llama-kv-cache-dsv4.cpp), so the block gets a raw SWA cache, and the
    compressed caches its compress ratio asks for (0 in DeepSeek-V4-Flash's config).
    Measured: an MTP block adds a ninth layer to an 8-block fixture's raw cache."""
    if registry.get(arch).kv_layout == "dsv4":
        from moeplan.planner.model.archs_dsv4 import dsv4_layer_kv

        return dsv4_layer_kv(hp, il)[1]
    return ()


def attention_kind(arch: str, hp: dict[str, Any], labels: list[str]) -> str:
    """One-line description for tables: 'GQA', 'MLA', 'GQA + SWA(128)', ..."""
    kinds = sorted(set(labels))
    if "recurrent" in kinds and registry.get(arch).recurrent_rule == "no_kv":
        return (f"hybrid: {labels.count('mla')} MLA (latent KV) + {labels.count('recurrent')} "
                f"KDA linear-attention layers")
    if "mla" in kinds or "mla+dsa" in kinds:
        return "MLA + DSA indexer" if "mla+dsa" in kinds else "MLA (latent KV)"
    if "recurrent" in kinds and registry.get(arch).recurrent_rule == "mixer":
        return (f"hybrid: {labels.count('full')} GQA + {labels.count('recurrent')} Mamba-2 blocks "
                f"(+ {labels.count('none')} MoE blocks without attention)")
    if "recurrent" in kinds:
        return f"hybrid: {labels.count('full')} GQA + {labels.count('recurrent')} linear-attention layers"
    if "swa" in kinds:
        return f"GQA + SWA({swa_window(arch, hp)}) on {labels.count('swa')} of {len(labels)} layers"
    if "chunked" in kinds:
        return f"GQA + chunked({swa_window(arch, hp)}) on {labels.count('chunked')} of {len(labels)} layers"
    if any(k in ("csa", "hca", "swa-only") for k in kinds):
        return "DeepSeek V4: SWA + compressed (CSA/HCA) caches"
    return "GQA" if kinds == ["full"] else "/".join(kinds)
