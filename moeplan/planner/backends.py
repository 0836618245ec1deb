"""The registry of runtimes moeplan plans for: one Backend record per module of
moeplan/planner/runtimes/ (found there, not listed here), looked up by name.

Adding a backend is its module under planner/runtimes/, its priors section in
profiles/backends.toml, its emitter module under launch/ (named by `emitter`) and their tests
(README: "Adding a backend"). No other module compares backend names: ask the record.
"""
from __future__ import annotations

import importlib
import pkgutil

from moeplan.planner import runtimes
from moeplan.planner.runtimes import Backend


def _discover() -> dict[str, Backend]:
    found = []
    for info in pkgutil.iter_modules(runtimes.__path__):
        name = f"{runtimes.__name__}.{info.name}"
        b = getattr(importlib.import_module(name), "BACKEND", None)
        if isinstance(b, Backend):
            found.append(Backend(**{**vars(b), "module": name}))
    return {b.name: b for b in sorted(found, key=lambda b: (b.order, b.name))}


BACKENDS: dict[str, Backend] = _discover()
NAMES: tuple[str, ...] = tuple(BACKENDS)
DEFAULT: str = NAMES[0]  # the backend of a plan that names none

# what a runner that is no backend (the bundled executor, which stands in for llama.cpp's
# mainline kernels when it calibrates) is costed as: mainline kernels, no GGUF loader of its own
STAND_IN = Backend("executor", "executor", "", gguf_runner=False, n_cpu_moe_from="first",
                   op_offload_rule="mainline", windows_native=False, order=100)


def unsupported_reason(name: str, arch: str) -> str:
    """Why backend `name` cannot run a model of llama.cpp architecture `arch` ('' if it can)."""
    if name not in BACKENDS:
        return ""
    return BACKENDS[name].unsupported_reason(arch)


def get(name: str) -> Backend:
    """The record of a backend. Raises KeyError for any other name."""
    return BACKENDS[name]


def behaviour(name: str) -> Backend:
    """The record of a backend, or STAND_IN for a runner that is none (the executor's priors)."""
    return BACKENDS.get(name, STAND_IN)


def of_log(tool: str) -> Backend | None:
    """The backend whose logs check/parse.py names `tool`, None if none."""
    for b in BACKENDS.values():
        if tool in b.log_tools:
            return b
    return None
