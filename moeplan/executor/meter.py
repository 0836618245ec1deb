"""Time and bytes per (phase, block, tier), with device syncs at tier boundaries.

Tiers (time): 'gpu' (everything the compute device does: attention, norms, router, shared and
dense FFN, GPU-resident and cached experts, the output head, and the Python that drives them),
'cpu' (CPU-resident experts computed from host RAM, with the activation copies around them),
'mmap' (CPU-resident experts computed from the model file's pages), 'transfer' (expert uploads
host -> device). A block's 'gpu' time is its wall time minus its other tiers, so the tiers of
a block add up to its wall time; block -1 holds the embedding, output head and sampling.

Bytes: 'gpu' (device weights read), 'gpu_cache' (cached experts read on the device), 'kv'
(cache rows read by attention), 'cpu', 'mmap', 'transfer' (host -> device expert bytes),
'activations' (hidden states crossing between host and device). Each is counted twice: in the
executor's dtype (what was really moved) and in the model file's types (what llama.cpp would
move for the same work).

On CUDA the meter synchronises the device at each tier and block boundary so every second is
attributed to the right place; llama.cpp also synchronises at each CPU-resident layer.
"""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

GLOBAL = -1


class Meter:
    def __init__(self, sync: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.perf_counter) -> None:
        """`clock` is wall time; tests on a shared machine pass time.thread_time (CPU time of
        the calling thread, which with one torch thread is where all the work happens)."""
        self.sync = sync
        self.clock = clock
        self.phase = "warmup"
        self.seconds: dict[tuple[str, int, str], float] = defaultdict(float)
        self.bytes_exec: dict[tuple[str, int, str], int] = defaultdict(int)
        self.bytes_model: dict[tuple[str, int, str], int] = defaultdict(int)
        self.steps: dict[str, int] = defaultdict(int)  # decode tokens / prefill ubatches
        self.tokens: dict[str, int] = defaultdict(int)
        self.wall: dict[str, float] = defaultdict(float)
        self._block = GLOBAL
        self._block_t0 = 0.0
        self._block_other = 0.0

    # ---- structure ----------------------------------------------------------------------
    @contextmanager
    def step(self, n_tokens: int) -> Iterator[None]:
        """One forward pass (a decode token or a prefill ubatch) of the current phase."""
        self.sync()
        t0 = self.clock()
        self._block_other = 0.0
        inner_before = self._inner_total()
        yield
        self.sync()
        dt = self.clock() - t0
        self.wall[self.phase] += dt
        self.steps[self.phase] += 1
        self.tokens[self.phase] += n_tokens
        # what no block claimed (embedding, output head, argmax) is block -1's 'gpu' time
        claimed = self._inner_total() - inner_before
        self.seconds[(self.phase, GLOBAL, "gpu")] += max(0.0, dt - claimed)

    def _inner_total(self) -> float:
        return sum(v for (ph, blk, _), v in self.seconds.items() if ph == self.phase and blk != GLOBAL)

    @contextmanager
    def block(self, index: int) -> Iterator[None]:
        self.sync()
        self._block, self._block_other = index, 0.0
        t0 = self.clock()
        yield
        self.sync()
        dt = self.clock() - t0
        self.seconds[(self.phase, index, "gpu")] += max(0.0, dt - self._block_other)
        self._block = GLOBAL

    @contextmanager
    def tier(self, name: str) -> Iterator[None]:
        self.sync()
        t0 = self.clock()
        yield
        self.sync()
        dt = self.clock() - t0
        self.seconds[(self.phase, self._block, name)] += dt
        if self._block != GLOBAL:
            self._block_other += dt

    def add_bytes(self, tier: str, exec_bytes: int, model_bytes: int) -> None:
        key = (self.phase, self._block, tier)
        self.bytes_exec[key] += int(exec_bytes)
        self.bytes_model[key] += int(model_bytes)

    # ---- summaries -------------------------------------------------------------------------
    def blocks(self, phase: str) -> set[int]:
        return {blk for (ph, blk, _) in self.seconds if ph == phase}

    def per_block(self, phase: str, table: dict) -> dict[int, dict[str, float]]:
        out: dict[int, dict[str, float]] = defaultdict(dict)
        for (ph, blk, tier), v in table.items():
            if ph == phase:
                out[blk][tier] = out[blk].get(tier, 0) + v
        return out
