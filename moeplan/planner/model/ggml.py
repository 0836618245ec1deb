"""GGML tensor types: block size and bytes per block (pure data).

Taken from gguf-py's `GGML_QUANT_SIZES` (the same table llama.cpp's ggml.c uses), so a
tensor's bytes are `n_elements / block_size * type_size` exactly as `ggml_nbytes` computes
for a contiguous tensor; plus the types gguf-py lacks (EXTRA_TYPES: Q2_0 and ik_llama.cpp's).
"""
from __future__ import annotations

import functools
from typing import Any

# Types gguf-py does not know yet: name -> (type id, elements per block, bytes per block, bytes
# of per-row metadata). Q2_0 from the vendored llama.cpp (ggml/include/ggml.h GGML_TYPE_Q2_0 = 42,
# ggml-common.h block_q2_0: QK2_0 = 64, 2 + 64/4 bytes). The others are ik_llama.cpp's weight
# types (commit 8337e4cd, ggml/include/ggml.h enum ggml_type and ggml/src/ggml.c type_traits
# .blck_size / .type_size = sizeof(block_*) / .row_meta_size); ik_llama.cpp's ggml_row_size is
# row_meta_size + type_size * ne / blck_size (one float or fp16 row scale for the *_KS, *_KT,
# *_BN and IQ1_*_R4 types; Q8_KV a float scale and an int sum per row). Besides Q2_0, only ids
# no mainline type holds are listed: ik_llama.cpp's own range (>= 133, 202+) and the ARM
# interleaved Q4_0_4_4 / Q4_0_4_8 / Q4_0_8_8 (31-33), which mainline removed (its ggml.h keeps
# the ids unused) and ik_llama.cpp still quantizes to.
EXTRA_TYPES: dict[str, tuple[int, int, int, int]] = {
    "Q2_0": (42, 64, 18, 0),
    "Q4_0_4_4": (31, 32, 18, 0),
    "Q4_0_4_8": (32, 32, 18, 0),
    "Q4_0_8_8": (33, 32, 18, 0),
    "Q6_0": (133, 32, 26, 0),
    "IQ1_BN": (134, 64, 13, 2),
    "IQ2_BN": (135, 64, 16, 4),
    "IQ2_K": (137, 256, 76, 0),
    "IQ3_K": (138, 256, 110, 0),
    "IQ4_K": (139, 256, 144, 0),
    "IQ5_K": (140, 256, 176, 0),
    "IQ6_K": (141, 256, 212, 0),
    "IQ4_KS": (144, 256, 136, 4),
    "IQ2_KS": (145, 256, 70, 2),
    "IQ4_KSS": (146, 256, 128, 4),
    "IQ5_KS": (152, 256, 168, 4),
    "IQ2_KT": (153, 256, 68, 4),
    "IQ3_KT": (154, 256, 100, 4),
    "IQ4_KT": (155, 256, 128, 4),
    "IQ3_KS": (156, 256, 102, 2),
    "IQ2_KL": (157, 256, 86, 2),
    "IQ1_KT": (158, 256, 56, 4),
    "Q8_KV": (151, 32, 32, 8),
    "Q4_0_R8": (202, 32, 18, 0),
    "Q5_0_R4": (206, 32, 22, 0),
    "Q8_0_R8": (208, 32, 34, 0),
    "Q2_K_R4": (210, 256, 84, 0),
    "Q3_K_R4": (211, 256, 110, 0),
    "Q4_K_R4": (212, 256, 144, 0),
    "Q5_K_R4": (213, 256, 176, 0),
    "Q6_K_R4": (214, 256, 210, 0),
    "IQ2_XXS_R4": (216, 256, 66, 0),
    "IQ2_XS_R4": (217, 256, 74, 0),
    "IQ3_XXS_R4": (218, 256, 98, 0),
    "IQ1_S_R4": (219, 32, 6, 2),
    "IQ4_NL_R4": (220, 32, 18, 0),
    "IQ3_S_R4": (221, 256, 110, 0),
    "IQ2_S_R4": (222, 256, 82, 0),
    "IQ4_XS_R8": (223, 256, 136, 0),
    "IQ1_M_R4": (229, 32, 7, 2),
    "BF16_R16": (230, 1, 2, 0),
    "Q6_0_R4": (233, 32, 26, 0),
    "IQ2_BN_R4": (335, 64, 16, 4),
    "IQ2_K_R4": (337, 256, 76, 0),
    "IQ3_K_R4": (338, 256, 110, 0),
    "IQ4_K_R4": (339, 256, 144, 0),
    "IQ5_K_R4": (340, 256, 176, 0),
    "IQ4_KS_R4": (344, 256, 136, 4),
    "IQ5_KS_R4": (352, 256, 168, 4),
    "MXFP4_R8": (353, 32, 17, 0),
    "Q8_KV_R8": (398, 32, 32, 4),
    "Q8_K_R8": (399, 256, 258, 0),
}
ROW_META_BYTES: dict[str, int] = {k: v[3] for k, v in EXTRA_TYPES.items() if v[3]}
# the types only ik_llama.cpp loads: all of the above but mainline's Q2_0
IK_TYPES = frozenset(k for k in EXTRA_TYPES if k != "Q2_0")

# KV cache types llama.cpp accepts for -ctk / -ctv (common/arg.cpp kv_cache_types)
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


@functools.cache
def _tables() -> dict[str, Any]:
    # gguf-py's tables, generated into ggml_table.py (scripts/gen_ggml_table.py; checked against
    # the installed gguf by tests/test_ggml_table.py): importing gguf loads numpy and yaml
    from moeplan.planner.model.ggml_table import GGML_TYPES

    by_id = {tid: name for name, (tid, _block, _size) in GGML_TYPES.items()}
    sizes = {name: (block, size) for name, (_tid, block, size) in GGML_TYPES.items()}  # name -> (block, bytes)
    for name, (type_id, block, size, _meta) in EXTRA_TYPES.items():
        if name not in sizes and type_id not in by_id:
            sizes[name] = (block, size)
            by_id[type_id] = name
    return {"TYPE_SIZES": sizes, "TYPE_BY_ID": by_id, "ID_BY_TYPE": {v: k for k, v in by_id.items()}}


def __getattr__(name: str) -> Any:
    """TYPE_SIZES, TYPE_BY_ID and ID_BY_TYPE, built from gguf-py's (generated) tables when first asked for."""
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
    name = canonical_type(type_name)
    block, size = _tables()["TYPE_SIZES"][name]
    meta = ROW_META_BYTES.get(name, 0)  # ik_llama.cpp's per-row scales
    if n_elements % block:
        # ggml asserts this for quantized rows; round up the way a padded row would be stored
        return meta + -(-n_elements // block) * size
    return meta + n_elements // block * size


def bits_per_weight(type_name: str) -> float:
    block, size = _tables()["TYPE_SIZES"][canonical_type(type_name)]
    return size * 8 / block
