"""Each placement evaluated once: memoised, counted estimates and memory breakdowns (pure).

The search asks for the same placement more than once (the binary search over CPU layers and
the Pareto front meet at the chosen count; `shortfall` and `estimate` both need a placement's
memory; the front, the one-more-GiB note and the thread pass re-estimate the best plan). Inside
an open plan_cache (memory/cache.py: the search opens one) the first answer is kept and every
later ask returns it. `evaluation_counts()` counts the asks, the evaluations that ran and the
distinct placements, which benchmarks/planning_speed.py prints and tests/test_planning_speed.py
checks (runs == distinct: no placement evaluated twice).
"""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from moeplan.planner.memory.cache import memo

T = TypeVar("T")


class EvaluationCounts(dict):
    """{kind: asks, kind_runs: evaluations that ran, kind_distinct: distinct keys} per kind."""

    def __init__(self) -> None:
        super().__init__()
        self._keys: dict[str, set] = {}

    def ask(self, kind: str, key: Any) -> None:
        self[kind] = self.get(kind, 0) + 1
        seen = self._keys.setdefault(kind, set())
        seen.add(key)
        self[kind + "_distinct"] = len(seen)

    def ran(self, kind: str) -> None:
        self[kind + "_runs"] = self.get(kind + "_runs", 0) + 1


_COUNTS: contextvars.ContextVar[EvaluationCounts | None] = contextvars.ContextVar("moeplan_eval_counts",
                                                                                  default=None)


@contextlib.contextmanager
def evaluation_counts() -> Iterator[EvaluationCounts]:
    """Count the evaluations asked for and run inside (a fresh count; nested counts shadow)."""
    counts = EvaluationCounts()
    token = _COUNTS.set(counts)
    try:
        yield counts
    finally:
        _COUNTS.reset(token)


def memoised(model: Any, kind: str, key: tuple, refs: tuple, compute: Callable[[], T]) -> T:
    """compute() once per (kind, key) for `model` within the open plan_cache. `refs` are objects
    that enter the key by identity (hardware, priors: unhashable); they are held with the result
    and compared with `is`, so a recycled id never returns another object's answer."""
    full = (kind, key, tuple(id(r) for r in refs))
    counts = _COUNTS.get()
    if counts is not None:
        counts.ask(kind, (id(model), full))
    cache = memo(model)
    hit = cache.get(full)
    if hit is not None and all(a is b for a, b in zip(hit[0], refs)):
        return hit[1]
    value = compute()
    if counts is not None:
        counts.ran(kind)
    cache[full] = (refs, value)
    return value
