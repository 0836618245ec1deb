"""GGUF header(s) -> ModelSpec."""
from __future__ import annotations

import os
from typing import Any

from moeplan.errors import ModelFormatError
from moeplan.planner.limits import check_hparams
from moeplan.planner.model.build import build_model_spec
from moeplan.planner.model.ggml_table import LLAMA_FILE_TYPES
from moeplan.planner.model.spec import ModelSpec, Tensor, make_tensor
from moeplan.probes.gguf_file import ArrayInfo, GGUFHeader, read_gguf_set


def arch_hparams(meta: dict[str, Any], arch: str) -> dict[str, Any]:
    """The `{arch}.*` keys without their prefix."""
    pre = arch + "."
    return {k[len(pre):]: v for k, v in meta.items() if k.startswith(pre)}


def file_type_label(meta: dict[str, Any]) -> str:
    ft = meta.get("general.file_type")
    if ft is None:
        return "unknown"
    try:
        name = LLAMA_FILE_TYPES[int(ft)]  # gguf-py's LlamaFileType names (generated table)
    except (KeyError, ValueError, TypeError, OverflowError):
        return f"ftype{ft}"
    for pre in ("MOSTLY_", "ALL_"):
        if name.startswith(pre):
            name = name[len(pre):]
    return name


def vocab_size(meta: dict[str, Any], hp: dict[str, Any], tensors: list[Tensor]) -> int:
    if hp.get("vocab_size"):
        return int(hp["vocab_size"])
    toks = meta.get("tokenizer.ggml.tokens")
    if isinstance(toks, (list, ArrayInfo)) and len(toks):
        return len(toks)
    for t in tensors:
        if t.name == "token_embd.weight" and len(t.shape) >= 2:
            return int(t.shape[1])
    return 0


def model_from_headers(headers: list[GGUFHeader]) -> ModelSpec:
    meta = headers[0].metadata
    path = headers[0].path
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise ModelFormatError(f"{path}: general.architecture missing from the header",
                               "the file was not written by llama.cpp's converter; re-convert it")
    hp = arch_hparams(meta, arch)
    check_hparams(hp, path, prefix=f"{arch}.")
    tensors = [make_tensor(t.name, t.shape, t.type_name, t.n_bytes) for h in headers for t in h.tensors]
    names = [t.name for t in tensors]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ModelFormatError(f"{path}: tensor {dup!r} appears twice", "the split set mixes two downloads")
    name = str(meta.get("general.name") or os.path.basename(path))
    n_vocab = vocab_size(meta, hp, tensors)
    return build_model_spec(
        arch, hp, tensors, name=name, source="gguf", quant=file_type_label(meta), n_vocab=n_vocab,
        file_bytes=sum(h.file_bytes for h in headers), path=os.path.abspath(path),
        shards=tuple(os.path.abspath(h.path) for h in headers),
    )


def read_gguf_model(path: str | os.PathLike) -> ModelSpec:
    """ModelSpec of a GGUF file (any shard of a split set: all shards are read and summed)."""
    return model_from_headers(read_gguf_set(path))
