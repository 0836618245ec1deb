"""KV cache (and recurrent state) sizes as llama.cpp allocates them (pure).

src/llama-kv-cache.cpp, llama-kv-cache-iswa.cpp, llama-memory-recurrent.cpp and
llama-kv-cache-dsv4.cpp at 0c1e570; see each function. Split from accounting.py so that
devices.py reads per-block KV without importing accounting.py (which imports devices.py).
"""
from __future__ import annotations

from moeplan.planner.memory.cache import memo
from moeplan.planner.model.ggml import canonical_type, row_bytes
from moeplan.planner.model.spec import KvComponent, LayerSpec, ModelSpec


def pad(n: int, to: int) -> int:
    return -(-n // to) * to


def kv_cells(comp: KvComponent, n_ctx: int, n_seq: int, n_ubatch: int, swa_full: bool = False,
             kv_pad: int = 256, kv_unified: bool = True) -> int:
    """Cells (rows) llama.cpp allocates for one cache component, over all its streams.

    llama_context pads n_ctx to 256; a unified cache (one stream) has n_ctx cells, otherwise
    each of the n_seq streams has n_ctx_seq = pad256(n_ctx / n_seq) cells (llama-context.cpp);
    with a unified cache n_ctx_seq = n_ctx. DeepSeek V4's caches (rules 'swa-seq', 'ratio',
    'fixed') keep one stream per sequence even under -kvu, each sized from n_ctx_seq
    (llama-kv-cache-dsv4.cpp: unified_raw = unified_compressed = false, kv_size = n_ctx_seq).
    """
    kv_size = pad(max(n_ctx, 1), kv_pad)
    n_stream = 1 if kv_unified or n_seq <= 1 else n_seq
    per_stream = kv_size if n_stream == 1 else pad(kv_size // n_stream, kv_pad)
    n_seq_streams = max(1, n_seq)
    if comp.cells == "ctx":
        return per_stream * n_stream
    if comp.cells == "swa":
        if swa_full:
            return per_stream * n_stream
        # llama-kv-cache-iswa.cpp: GGML_PAD(min(size_base, n_swa*(unified ? n_seq_max : 1) + n_ubatch), 256)
        window = comp.window * (n_seq if n_stream == 1 else 1)
        return pad(min(per_stream, window + n_ubatch), kv_pad) * n_stream
    if comp.cells == "swa-seq":
        # the same iswa cache built with unified = false: the window of one sequence per stream
        cells = per_stream if swa_full else pad(min(per_stream, comp.window + n_ubatch), kv_pad)
        return cells * n_seq_streams
    if comp.cells == "seq":
        return n_seq_streams
    if comp.cells == "ratio":
        # llama-kv-cache-dsv4.cpp: GGML_PAD(max(1, ceil(n_ctx_seq / ratio)), 256) cells per stream
        return pad(max(1, -(-per_stream // comp.ratio)), kv_pad) * n_seq_streams
    if comp.cells == "fixed":
        return comp.window * n_seq_streams
    raise ValueError(f"unknown KV cell rule {comp.cells!r}")


def kv_row_bytes(comp: KvComponent, type_k: str, type_v: str, v_width: int = 0) -> int:
    """Bytes of one cell of a cache component: the user's -ctk/-ctv type, or its fixed type.
    v_width: the row every V cache takes when V is stored transposed (see v_trans_width)."""
    dtype = type_k if comp.dtype == "k" else type_v if comp.dtype == "v" else comp.dtype
    n_embd = max(comp.n_embd, v_width) if comp.name == "v" and comp.dtype == "v" else comp.n_embd
    return row_bytes(canonical_type(dtype), n_embd)


def v_trans_width(model: ModelSpec, flash_attn: bool) -> int:
    """llama-kv-cache.cpp (constructor, L210): without flash attention V is stored transposed
    and every layer's V cache is hparams.n_embd_v_gqa_max() wide, the widest V of any layer
    (it warns when they differ). Only Gemma 4 among the bundled models has V widths that
    differ by layer (sliding 8 x 256, global 2 x 512); 0 with flash attention."""
    if flash_attn:
        return 0
    return max((c.n_embd for layer in model.layers for c in layer.kv if c.name == "v" and c.dtype == "v"), default=0)


def kv_component_bytes(comp: KvComponent, n_ctx: int, type_k: str, type_v: str, n_seq: int = 1,
                       n_ubatch: int = 512, swa_full: bool = False, kv_unified: bool = True, v_width: int = 0) -> int:
    return kv_row_bytes(comp, type_k, type_v, v_width) * kv_cells(comp, n_ctx, n_seq, n_ubatch, swa_full,
                                                                   kv_unified=kv_unified)


def kv_layer_bytes(layer: LayerSpec, n_ctx: int, type_k: str = "f16", type_v: str = "f16",
                   n_seq: int = 1, n_ubatch: int = 512, swa_full: bool = False, kv_unified: bool = True,
                   v_width: int = 0) -> int:
    return sum(kv_component_bytes(c, n_ctx, type_k, type_v, n_seq, n_ubatch, swa_full, kv_unified, v_width)
               for c in layer.kv)


def _kv_groups(model: ModelSpec) -> tuple[tuple[KvComponent, int], ...]:
    """Distinct cache components and how many layers have each (cached): the trunk's, and a
    NextN block's where the main context caches it (DeepSeek V4's raw cache)."""
    cache = memo(model)
    groups = cache.get("kv_groups")
    if groups is None:
        counts: dict[KvComponent, int] = {}
        for layer in model.layers:
            for c in layer.kv:
                counts[c] = counts.get(c, 0) + 1
        groups = cache["kv_groups"] = tuple(counts.items())
    return groups


def kv_cache_bytes(model: ModelSpec, n_ctx: int, type_k: str = "f16", type_v: str = "f16",
                   n_seq: int = 1, n_ubatch: int = 512, swa_full: bool = False, kv_unified: bool = True,
                   v_width: int = 0) -> int:
    """Total KV cache (plus recurrent state) of the main context, in bytes."""
    return sum(n * kv_component_bytes(c, n_ctx, type_k, type_v, n_seq, n_ubatch, swa_full, kv_unified, v_width)
               for c, n in _kv_groups(model))


def kv_bytes_per_token(model: ModelSpec, type_k: str = "f16", type_v: str = "f16") -> int:
    """Bytes one more token of context adds to the full-context caches of the trunk."""
    return sum(kv_row_bytes(c, type_k, type_v) for layer in model.trunk_layers for c in layer.kv if c.cells == "ctx")


def kv_layer_bytes_per_token(layer: LayerSpec, type_k: str = "f16", type_v: str = "f16") -> int:
    """Bytes one token adds to a layer's full-context and sliding-window caches (the row of
    one cell; a sliding window stops growing at its size, compressed caches add 1/ratio)."""
    return sum(kv_row_bytes(c, type_k, type_v) for c in layer.kv if c.cells in ("ctx", "swa", "swa-seq"))


def kv_read_bytes(model: ModelSpec, depth: int, type_k: str = "f16", type_v: str = "f16",
                  n_ubatch: int = 1, blocks: set[int] | None = None) -> int:
    """KV bytes attention reads to decode one token at context depth `depth` (of `blocks` only
    when given: one device's share of a layer split). Cached per model: the search asks the
    same depth for every placement it estimates."""
    cache = memo(model)
    key = ("kv_read_bytes", depth, type_k, type_v, None if blocks is None else frozenset(blocks))
    hit = cache.get(key)
    if hit is not None:
        return hit
    total = 0
    for layer in model.trunk_layers:
        if blocks is not None and layer.index not in blocks:
            continue
        for c in layer.kv:
            row = kv_row_bytes(c, type_k, type_v)
            if c.cells == "ctx":
                total += row * depth
            elif c.cells in ("swa", "swa-seq"):
                total += row * min(depth, c.window)
            elif c.cells == "ratio":
                total += row * (depth // max(1, c.ratio))
            else:  # recurrent state: read once per token
                total += row
    cache[key] = total
    return total
