"""A memo of pure functions of a model, owned by whoever opens it (pure: it changes no result).

The search evaluates thousands of placements of one model: the compute-buffer terms, the
compiled graph replays and per-device buffers depend on a few placement fields only, so it
opens one `plan_cache()` around the whole search and every call inside shares it. One
`estimate()` opens its own when none is open. Outside any open cache nothing is kept.
"""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

_ACTIVE: contextvars.ContextVar[PlanCache | None] = contextvars.ContextVar("moeplan_plan_cache", default=None)


class PlanCache:
    """Per-model dictionaries of memoised results (keyed by the model object itself)."""

    def __init__(self) -> None:
        self._by_model: dict[int, tuple[Any, dict]] = {}

    def for_model(self, model: Any) -> dict:
        entry = self._by_model.get(id(model))
        if entry is None or entry[0] is not model:  # holding the model keeps its id unique
            entry = self._by_model[id(model)] = (model, {})
        return entry[1]


@contextlib.contextmanager
def plan_cache(cache: PlanCache | None = None) -> Iterator[PlanCache]:
    """Make `cache` (default: the one already open, else a new one) the memo of the calls inside."""
    active = _ACTIVE.get()
    if cache is None and active is not None:
        yield active
        return
    cache = cache or PlanCache()
    token = _ACTIVE.set(cache)
    try:
        yield cache
    finally:
        _ACTIVE.reset(token)


def memo(model: Any) -> dict:
    """The open cache's dictionary for `model`, or a throwaway one when no cache is open."""
    active = _ACTIVE.get()
    return active.for_model(model) if active is not None else {}
