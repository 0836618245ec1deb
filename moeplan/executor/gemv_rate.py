"""The executor's own matrix-vector rate on this CPU (torch.mv weights per second, one thread).

The executor's CPU tier computes every expert with torch.mv in its dtype, so the rate of that
kernel on this machine is what its batch-1 compute costs. It differs by host far more than a
spec sheet says (torch's bf16 kernel ran at about 2.2 G weights/s per core on one 2-core VM and
6.6-8.3 on another with AVX512-BF16/AMX), so the validate loop measures it instead of assuming
it. The matrix (1024 x 2048) stays in the L2/L3 caches: the figure is compute, not DRAM.
"""
from __future__ import annotations

import time

DTYPES = ("bf16", "fp16", "fp32")


def mv_weights_per_s(dtype: str, threads: int = 1, rows: int = 1024, cols: int = 2048,
                     repeats: int = 100, rounds: int = 3) -> float:
    """Best of `rounds` timings of `repeats` torch.mv calls on a rows x cols matrix."""
    import torch

    if dtype not in DTYPES:
        raise ValueError(dtype)
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        gen = torch.Generator().manual_seed(0)
        w = torch.randn(rows, cols, generator=gen).to(tdt)
        x = torch.randn(cols, generator=gen).to(tdt)
        for _ in range(10):
            torch.mv(w, x)
        best = float("inf")
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(repeats):
                torch.mv(w, x)
            best = min(best, time.perf_counter() - t0)
    finally:
        torch.set_num_threads(before)
    return rows * cols * repeats / best
