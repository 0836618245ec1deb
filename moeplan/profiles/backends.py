"""Read the per-backend priors bundled in moeplan/profiles/backends.toml."""
from __future__ import annotations

import json
import tomllib
from functools import lru_cache
from importlib import resources

from moeplan.errors import InputError
from moeplan.planner.backends import BACKENDS
from moeplan.planner.cost.factors import check_priors
from moeplan.planner.cost.priors import BackendPriors

# backends.toml section of each backend, and of the bundled executor's stand-in priors
_KEYS = {**{b.name: b.priors_key for b in BACKENDS.values()}, "executor": "executor"}


@lru_cache(maxsize=1)
def _fit() -> dict:
    """moeplan/profiles/fit.json: term-group scales and range widths fitted on the train split of the public
    measurement set by benchmarks/accuracy.py --write-fit (absent: none)."""
    path = resources.files("moeplan.profiles").joinpath("fit.json")
    if not path.is_file():
        return {}
    return json.loads(path.read_text())


def fitted_terms(backend: str) -> dict:
    """{'scales': {metric: {group: x}}, 'range_log_half_width' / 'range_log_center': {metric:
    {group: w / c}}} for backend:
    the CPU group's scale is per backend, the other groups' are shared."""
    d = _fit()
    if not d:
        return {}
    scales: dict[str, dict[str, float]] = {}
    for metric, table in d.get("scales", {}).items():
        out = {}
        for key, v in table.items():
            parts = key.split(".", 2)  # metric.group[.backend]
            if len(parts) == 2 or parts[2] == backend:
                out[parts[1]] = float(v)
        scales[metric] = out
    return {"scales": scales, "range_log_half_width": d.get("range_log_half_width", {}),
            "range_log_center": d.get("range_log_center", {})}


@lru_cache(maxsize=1)
def _data() -> dict:
    text = resources.files("moeplan.profiles").joinpath("backends.toml").read_text()
    return tomllib.loads(text)


# BackendPriors fields that backends.toml may set: the fitted term scales and ranges come from
# fit.json (fitted_terms), never from the TOML
_TOML_FIELDS = frozenset(BackendPriors.__dataclass_fields__) - {"term_scale", "term_range_log", "term_range_center"}


def unknown_keys(data: dict) -> list[str]:
    """Problems of a backends.toml document: a section that is no backend's (nor [type_cost]),
    or a key no BackendPriors field has (a misspelt prior would otherwise be dropped silently)."""
    problems = []
    for section, table in data.items():
        if section == "type_cost":
            continue
        if section not in _KEYS.values():
            problems.append(f"[{section}] is no backend's section (known: type_cost, {', '.join(_KEYS.values())})")
            continue
        for k in table:
            if k not in _TOML_FIELDS:
                problems.append(f"[{section}] {k} is no prior (known: {', '.join(sorted(_TOML_FIELDS))})")
    return problems


def priors_from(data: dict, backend: str) -> BackendPriors:
    """BackendPriors of `backend` from a parsed backends.toml (with the fitted terms of fit.json)."""
    key = _KEYS.get(backend)
    if key is None or key not in data:
        raise InputError(f"no priors for backend {backend!r}", "use one of " + ", ".join(_KEYS))
    problems = unknown_keys(data)
    if problems:
        raise ValueError("backends.toml: " + "; ".join(problems))
    d = dict(data[key])
    # the ggml kernels' per-type costs, with the backend's own where it has them
    d["type_cost"] = {**data.get("type_cost", {}), **d.get("type_cost", {})}
    d["sources"] = tuple(d.get("sources", ()))
    fit = fitted_terms(backend)
    d["term_scale"] = fit.get("scales", {})
    d["term_range_log"] = fit.get("range_log_half_width", {})
    d["term_range_center"] = fit.get("range_log_center", {})
    pr = BackendPriors(**d)
    problems = check_priors(pr)
    if problems:  # the bundled file disagrees with the factor table (planner/cost/factors.py)
        raise ValueError("backends.toml: " + "; ".join(problems))
    return pr


def read_priors(backend: str) -> BackendPriors:
    """BackendPriors for `backend` (a name of planner/backends.py, or 'executor')."""
    return priors_from(_data(), backend)
