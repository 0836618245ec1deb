"""Dense float32 matmul rate of the CPU (F_cpu in the cost model), per physical core.

numpy's matmul runs the BLAS numpy was built with (OpenBLAS in the wheels) on all cores; the
per-core figure is the total divided by the physical cores, since SMT siblings share the FMA
units. Samples are (FLOP, seconds); the summariser in timing.py turns them into a Figure.
"""
from __future__ import annotations

import time

import numpy as np


def measure_matmul(n: int, reps: int, warmup: int = 1) -> list[tuple[float, float]]:
    """`reps` timed float32 (n x n) @ (n x n) products: 2 n^3 FLOP each."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), np.float32)
    for _ in range(warmup):
        np.matmul(a, b, out=out)
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.matmul(a, b, out=out)
        samples.append((2.0 * n**3, time.perf_counter() - t0))
    return samples


def blas_name() -> str:
    try:
        cfg = np.show_config(mode="dicts")  # numpy >= 1.25
        return str(cfg["Build Dependencies"]["blas"]["name"])
    except Exception:
        return "numpy's BLAS"
