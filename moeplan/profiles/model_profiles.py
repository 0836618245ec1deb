"""Bundled model profiles (moeplan/profiles/models/*.toml) -> ModelSpec.

A profile holds a model's published Hugging Face config (the `[config]` table, keys verbatim)
and where each value came from. Loading one runs the same pure pipeline as a Hugging Face
folder: config -> GGUF hyper-parameters -> tensor index (planner/model/synth.py) -> per-tensor types
of the chosen recipe (planner/model/quants.py) -> build_model_spec.
"""
from __future__ import annotations

import difflib
import functools
import tomllib
from pathlib import Path
from typing import Any

from moeplan.errors import InputError, ModelFormatError
from moeplan.planner.model import registry
from moeplan.planner.model.build import build_model_spec
from moeplan.planner.model.hf_config import HfKeys
from moeplan.planner.model.native import FP8_CHECKPOINT, FP8_FROM, NativeFormat
from moeplan.planner.model.quants import apply_recipe, canonical_quant, quant_families, resolve_quant, scale_to_size
from moeplan.planner.model.spec import ModelSpec, make_tensor
from moeplan.planner.model.synth import gguf_hparams, layout_options, merged_config, tensor_specs

PROFILE_DIR = Path(__file__).resolve().parent / "models"


@functools.lru_cache(maxsize=64)
def _read_profile(path: str) -> dict[str, Any]:
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ModelFormatError(f"{path}: bad profile: {exc}", "reinstall moeplan") from None
    data["_path"] = path
    return data


@functools.lru_cache(maxsize=1)
def read_profiles(root: str = str(PROFILE_DIR)) -> dict[str, dict[str, Any]]:
    """name -> parsed TOML of every bundled profile."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(Path(root).glob("*.toml")):
        data = _read_profile(str(path))
        out[data["name"]] = data
    return out


def _keys(profile: dict[str, Any]) -> list[str]:
    return [profile["name"].lower()] + [a.lower() for a in profile.get("aliases", [])]


def find_profile(name: str, root: str = str(PROFILE_DIR)) -> dict[str, Any]:
    """The profile whose name or alias matches `name` case-insensitively."""
    want = name.strip().lower()
    own = Path(root) / f"{want}.toml"
    if want and "/" not in want and "\\" not in want and own.is_file():
        # a profile's file is named after it (tests/test_profiles.py): read that one alone
        # rather than parse every profile (a third of a plan's time, issue 31)
        data = _read_profile(str(own))
        if data.get("name", "").lower() == want:
            return data
    profiles = read_profiles(root)
    for p in profiles.values():
        if want in _keys(p):
            return p
    every = [k for p in profiles.values() for k in _keys(p)]
    close = difflib.get_close_matches(want, every, n=3, cutoff=0.5)
    hint = (f"did you mean {', '.join(close)}? " if close else "") + "`moeplan models` lists the bundled profiles"
    raise InputError(f"unknown model {name!r}: not a file, folder or bundled profile", hint)


def profile_config(profile: dict[str, Any]) -> dict[str, Any]:
    """The [config] table as a config.json dict (TOML cannot hold null: absent keys are null)."""
    return dict(profile["config"])


def _n_params(profile: dict[str, Any]) -> tuple[int, int, int]:
    """(experts, experts per token, blocks), the first two under the architecture's own config
    names (its record's HfKeys; a per-layer list gives its one value)."""
    cfg = merged_config(profile_config(profile))
    found = registry.of_config(cfg)
    keys = found[0].hf if found else HfKeys()
    return (int(keys.value(cfg, "expert_count") or 0), int(keys.value(cfg, "expert_used_count") or 0),
            int(cfg.get("num_hidden_layers", 0)))


def list_profiles(root: str = str(PROFILE_DIR)) -> list[dict[str, Any]]:
    """Rows for `moeplan models`."""
    rows = []
    for p in sorted(read_profiles(root).values(), key=lambda p: p["name"]):
        n_exp, n_used, n_layers = _n_params(p)
        arch, _ = gguf_hparams(profile_config(p))
        rows.append({
            "name": p["name"], "aliases": list(p.get("aliases", [])), "display_name": p.get("display_name", p["name"]),
            "hf_repo": p.get("hf_repo", ""), "arch": arch,
            "total_params_b": p.get("total_params_b"), "active_params_b": p.get("active_params_b"),
            "n_experts": n_exp, "n_experts_used": n_used, "n_layers": n_layers,
            "native_format": p.get("native_format", ""), "status": p.get("status", ""),
            "default_quant": p.get("default_quant", "Q4_K_M"),
        })
    return rows


def _native(profile: dict[str, Any]) -> NativeFormat:
    nat = profile.get("native", {})
    return NativeFormat(nat.get("scheme", "bf16"), tuple(sorted(nat.get("dtypes", {}).items())))


def _checkpoint_format(profile: dict[str, Any], quant: str) -> NativeFormat:
    """The checkpoint a 'native' or 'FP8' plan loads: the published one, or for FP8 the
    block-128 FP8 release of a BF16 model (native.FP8_CHECKPOINT)."""
    nat = _native(profile)
    if quant != "FP8" or nat.scheme == FP8_CHECKPOINT:
        return nat
    if nat.scheme not in FP8_FROM:
        raise InputError(f"--quant FP8: {profile.get('display_name', profile['name'])} is published as "
                         f"{profile.get('native_format', nat.scheme)}, not as a BF16 model with an -FP8 release",
                         "use --quant native for its own checkpoint, or a GGUF type")
    return NativeFormat(FP8_CHECKPOINT)


# prefix of the model notes about the file's bytes (a recipe approximation, --size scaling) that
# `estimate` / `plan` print with their own notes
QUANT_NOTE = "quant: "


def load_profile(name: str, quant: str | None = None, size_bytes: int | None = None,
                 root: str = str(PROFILE_DIR)) -> ModelSpec:
    """ModelSpec of a bundled profile under a quant recipe, optionally scaled to a file size.

    quant: a name resolve_quant accepts (case-insensitive); default the profile's `default_quant`.
    size_bytes: the real file size; routed-expert bytes are scaled so the file comes to it
    (quants.scale_to_size)."""
    profile = find_profile(name, root)
    q_name = quant or profile.get("default_quant", "Q4_K_M")
    try:
        q = canonical_quant(q_name)
    except KeyError:
        raise InputError(f"unknown quant {q_name!r}", "use " + quant_families()) from None
    return spec_from_profile(profile, q, size_bytes)


def spec_from_profile(profile: dict[str, Any], quant: str, size_bytes: int | None) -> ModelSpec:
    config = profile_config(profile)
    conv = profile.get("conversion", {})
    native = quant in ("native", "FP8")  # a checkpoint, not a GGUF
    arch, hp = gguf_hparams(config, keep_mtp=True if native else None, n_mtp=conv.get("mtp_layers"))
    n_vocab = int(merged_config(config)["vocab_size"])
    extras = tuple(conv.get("mtp_tensors", ("eh_proj", "enorm", "hnorm", "shared_head_norm")))
    specs = tensor_specs(arch, hp, n_vocab=n_vocab, mtp_tensors=extras, options=layout_options(config))
    typed = apply_recipe(specs, hp, "native" if native else quant, _checkpoint_format(profile, quant),
                         conv.get("keeps", ""))
    notes = [f"profile {profile['name']} ({profile.get('status', '?')}): tensor index synthesised from the "
             f"published config; types from the {quant} recipe"]
    notes += list(profile.get("notes", []))
    if quant != "native" and resolve_quant(quant).note:
        notes.append(QUANT_NOTE + resolve_quant(quant).note)
    label = {"native": f"native ({profile.get('native_format', '')})", "FP8": "FP8 (block-128 checkpoint)"}.get(quant, quant)
    result = scale_to_size(typed, n_vocab, size_bytes, native=native,
                           scales=profile.get("size", {}).get("scales", "experts"))
    notes += [QUANT_NOTE + n if size_bytes is not None else n for n in result.notes]
    if size_bytes is not None:
        label = f"{label} scaled to {size_bytes / 1e9:.2f} GB"
    tensors = [make_tensor(t.spec.name, t.spec.shape, t.ggml_type, t.n_bytes) for t in result.typed]
    return build_model_spec(arch, hp, tensors, name=profile.get("display_name", profile["name"]),
                            source="profile", quant=label, n_vocab=n_vocab,
                            file_bytes=result.file_bytes, notes=tuple(notes))
