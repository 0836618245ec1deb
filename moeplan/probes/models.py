"""Resolve the MODEL argument: a GGUF file (any shard), a Hugging Face folder, or a profile."""
from __future__ import annotations

import os
from pathlib import Path

from moeplan.errors import InputError, ModelFormatError
from moeplan.planner.model.spec import ModelSpec
from moeplan.units import parse_size


def resolve_model(arg: str, quant: str | None = None, size: str | None = None) -> ModelSpec:
    """Read MODEL as a file, a folder or a bundled profile name.

    `quant` and `size` apply to profiles only (a file says its own types and size).
    """
    p = Path(os.path.expanduser(arg))
    if p.exists():
        if quant or size:
            raise InputError(f"--quant/--size apply to bundled profiles, not to {arg}",
                             "a model file says its own tensor types and size; drop --quant/--size")
        if p.is_dir():
            if (p / "config.json").exists():
                from moeplan.probes.hf import read_hf_model

                return read_hf_model(p)
            ggufs = sorted(p.glob("*.gguf"))
            if ggufs:
                from moeplan.probes.gguf_model import read_gguf_model

                return read_gguf_model(ggufs[0])
            raise ModelFormatError(f"{arg}: folder has neither config.json nor .gguf files",
                                   "give a .gguf file, a Hugging Face model folder or a profile name")
        from moeplan.probes.gguf_model import read_gguf_model

        return read_gguf_model(p)
    from moeplan.planner.model.quants import FP8_NAMES
    from moeplan.profiles.model_profiles import load_profile

    if arg.endswith(".gguf") or os.sep in arg:
        # a Hugging Face repository id ("Qwen/Qwen3.5-35B-A3B") names a bundled profile too, and
        # its "-FP8" release (Qwen/Qwen3.5-122B-A10B-FP8) the same profile's FP8 checkpoint
        if not _is_profile(arg):
            stem = arg[:-4] if arg.upper().endswith("-FP8") else ""
            if not stem or not _is_profile(stem):
                raise ModelFormatError(f"{arg}: no such file", "check the path (for a split model give any shard), "
                                       "or name a bundled profile (`moeplan models`)")
            if quant and quant.strip().upper() not in FP8_NAMES:
                raise InputError(f"{arg} is the FP8 checkpoint; --quant {quant} names another file",
                                 f"drop --quant, or name the model {stem}")
            arg, quant = stem, "FP8"

    size_bytes = parse_size(size, "--size") if size else None
    return load_profile(arg, quant=quant, size_bytes=size_bytes)


def _is_profile(name: str) -> bool:
    from moeplan.profiles.model_profiles import find_profile

    try:
        find_profile(name)
    except InputError:
        return False
    return True
