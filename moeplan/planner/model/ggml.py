"""GGML tensor types: block size and bytes per block (pure data).

Taken from gguf-py's `GGML_QUANT_SIZES` (the same table llama.cpp's ggml.c uses), so a
tensor's bytes are `n_elements / block_size * type_size` exactly as `ggml_nbytes` computes
for a contiguous tensor.
"""
from __future__ import annotations

import functools
from typing import Any


# KV cache types llama.cpp accepts for -ctk / -ctv (common/arg.cpp kv_cache_types)
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


@functools.cache
def _tables() -> dict[str, Any]:
    # gguf (and numpy behind it) is imported on first use, not when a command module loads
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    by_id = {int(t): t.name for t in GGMLQuantizationType}
    return {"TYPE_SIZES": {t.name: GGML_QUANT_SIZES[t] for t in GGML_QUANT_SIZES},  # name -> (block, bytes)
            "TYPE_BY_ID": by_id, "ID_BY_TYPE": {v: k for k, v in by_id.items()}}


def __getattr__(name: str) -> Any:
    """TYPE_SIZES, TYPE_BY_ID and ID_BY_TYPE, built from gguf-py's tables when first asked for."""
    if name in ("TYPE_SIZES", "TYPE_BY_ID", "ID_BY_TYPE"):
        return _tables()[name]
    raise AttributeError(name)


def canonical_type(name: str) -> str:
    """'q8_0' -> 'Q8_0', 'f16' -> 'F16'. Raises KeyError for unknown names."""
    up = name.strip().upper()
    if up not in _tables()["TYPE_SIZES"]:
        raise KeyError(name)
    return up


def row_bytes(type_name: str, n_elements: int) -> int:
    """Bytes of `n_elements` of a type, as ggml_row_size (n must be a multiple of the block)."""
    block, size = _tables()["TYPE_SIZES"][canonical_type(type_name)]
    if n_elements % block:
        # ggml asserts this for quantized rows; round up the way a padded row would be stored
        return -(-n_elements // block) * size
    return n_elements // block * size


def bits_per_weight(type_name: str) -> float:
    block, size = _tables()["TYPE_SIZES"][canonical_type(type_name)]
    return size * 8 / block
