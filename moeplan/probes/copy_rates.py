"""Host<->GPU copy rates with torch (imported only here, only when NVML found a GPU).

Host buffers are allocated and first touched from a thread bound to the GPU's NUMA node, so
pinned pages sit next to the GPU's root port, as they should for expert uploads.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any


def torch_cuda() -> Any | None:
    """The torch module when it is installed and sees CUDA, else None (never raises)."""
    try:
        import torch  # lazy: torch is optional and slow to import
    except Exception:
        return None
    try:
        return torch if torch.cuda.is_available() else None
    except Exception:
        return None


def measure_copy_rates(torch: Any, device_index: int, cpus: tuple[int, ...], n_bytes: int, reps: int,
                       read_link: Callable[[], tuple[int | None, int | None]] | None = None) -> dict[str, Any]:
    """Timed copies of `n_bytes`, `reps` times each direction and kind, after one warm-up.

    Returns {'h2d_pinned': [(bytes, s)], 'h2d_pageable': [...], 'd2h_pinned': [...],
    'link_loaded': (gen, width) read while pinned uploads were in flight}.
    """
    out: dict[str, Any] = {}
    err: list[BaseException] = []

    def work() -> None:
        try:
            if cpus and hasattr(os, "sched_setaffinity"):  # Windows: the host buffers are not node-placed
                os.sched_setaffinity(0, set(cpus))
            dev = torch.device("cuda", device_index)
            torch.cuda.set_device(dev)
            pinned = torch.empty(n_bytes, dtype=torch.uint8, pin_memory=True)
            pinned.fill_(1)
            pageable = torch.empty(n_bytes, dtype=torch.uint8)
            pageable.fill_(1)
            gpu = torch.empty(n_bytes, dtype=torch.uint8, device=dev)

            def timed(dst: Any, src: Any) -> tuple[float, float]:
                torch.cuda.synchronize(dev)
                t0 = time.perf_counter()
                dst.copy_(src, non_blocking=True)
                torch.cuda.synchronize(dev)
                return float(n_bytes), time.perf_counter() - t0

            for key, dst, src in (("h2d_pinned", gpu, pinned), ("h2d_pageable", gpu, pageable),
                                  ("d2h_pinned", pinned, gpu)):
                timed(dst, src)
                out[key] = [timed(dst, src) for _ in range(reps)]
            if read_link is not None:
                for _ in range(8):  # keep the link busy while NVML reads its state
                    gpu.copy_(pinned, non_blocking=True)
                out["link_loaded"] = read_link()
                torch.cuda.synchronize(dev)
            del gpu, pinned, pageable
            torch.cuda.empty_cache()
        except BaseException as exc:  # CUDA errors, out of memory: reported by the caller
            err.append(exc)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join()
    if err:
        raise err[0]
    return out
