"""Read the per-backend priors bundled in moeplan/profiles/backends.toml."""
from __future__ import annotations

import tomllib
from functools import lru_cache
from importlib import resources

from moeplan.errors import InputError
from moeplan.planner.cost.factors import check_priors
from moeplan.planner.cost.priors import BackendPriors

_KEYS = {"llama.cpp": "llama_cpp", "ik_llama.cpp": "ik_llama_cpp", "ktransformers": "ktransformers",
         "vllm": "vllm", "sglang": "sglang", "executor": "executor"}


@lru_cache(maxsize=1)
def _data() -> dict:
    text = resources.files("moeplan.profiles").joinpath("backends.toml").read_text()
    return tomllib.loads(text)


def read_priors(backend: str) -> BackendPriors:
    """BackendPriors for `backend` (llama.cpp, ik_llama.cpp, ktransformers, vllm, sglang)."""
    key = _KEYS.get(backend)
    data = _data()
    if key is None or key not in data:
        raise InputError(f"no priors for backend {backend!r}", "use one of " + ", ".join(_KEYS))
    d = dict(data[key])
    # the ggml kernels' per-type costs, with the backend's own where it has them
    d["type_cost"] = {**data.get("type_cost", {}), **d.get("type_cost", {})}
    d["sources"] = tuple(d.get("sources", ()))
    known = set(BackendPriors.__dataclass_fields__)
    pr = BackendPriors(**{k: v for k, v in d.items() if k in known})
    problems = check_priors(pr)
    if problems:  # the bundled file disagrees with the factor table (planner/cost/factors.py)
        raise ValueError("backends.toml: " + "; ".join(problems))
    return pr
