"""The executor's compute dtype and matrix-vector kernel, chosen by what this CPU runs natively.

Decode on the CPU tier is a stream of matrix-vector products over expert weights, so the dtype
that reads fastest per byte is the one whose kernel keeps up with DRAM. Measured with torch
2.13 on one thread of an AMD EPYC (Zen 4: AVX-512 with AVX512_BF16), 48 Qwen3-30B-A3B experts
(2 x 768 x 2048 + 2048 x 768 weights each), numpy's read of 1 GiB at 25.7 GB/s beside it
(benchmarks/executor_roofline.py; ATEN_CPU_CAPABILITY=avx2 for the AVX2 column):

  weights  kernel           AVX-512 GB/s   AVX2 GB/s
  fp16     torch.mv         16.9           15.1      F16C converts, fp32 accumulates
  fp32     torch.mv / MKL   11.8           10.3
  bf16     F.linear (oneDNN) 7.3            6.3
  bf16     torch.mv          3.6            3.6

With oneDNN and MKL held to AVX2 as well (benchmarks/executor_kernels.py --emulate-avx2,
2026-12-05) bf16 rows stream like fp16 (21.5 vs 20.6 GB/s: oneDNN's AVX2 path converts bf16 by
shifts), fp32 at 15-17 and int8 weights (torch._weight_int8pack_mm) at 1.2-7.6: fp16 is within
noise of the fastest there, so the rule below holds on both ISAs (docs/executor.md has the figures).

So where the CPU has F16C (every AVX2 and AVX-512 x86 CPU) synthetic weights are kept in fp16:
fp16 is a storage format there, converted in the kernel's registers, and the sums run in fp32.
bf16 is chosen only where the CPU computes it natively (AVX512_BF16 or AMX-BF16) and fp16 is
unsafe: weights read from a GGUF (`--weights gguf`) may carry activations past fp16's 65504,
so they run in bf16 on a native-bf16 CPU and in fp32 elsewhere. On CUDA the executor keeps bf16.
"""
from __future__ import annotations

import functools
import os

CPU_DTYPE_NOTE = ("CPU tier dtype chosen by the CPU's native formats (executor/native.py): fp16 weights where F16C "
                  "converts them (fp32 sums), bf16 only with AVX512_BF16/AMX, else fp32")


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (/proc/cpuinfo; empty where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def torch_capability() -> str:
    """The vector ISA torch's own kernels dispatch to ('AVX512', 'AVX2', 'DEFAULT'...), which
    ATEN_CPU_CAPABILITY lowers (how benchmarks/executor_roofline.py emulates an AVX2 host)."""
    import torch

    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except AttributeError:  # pragma: no cover - an old torch
        return "unknown"


def native_bf16(flags: frozenset[str] | None = None) -> bool:
    """The CPU multiplies bf16 natively (AVX512_BF16 dot products or AMX-BF16 tiles), and torch's
    own kernels may use them (an AVX2 dispatch, real or forced, has no bf16 instructions)."""
    flags = cpu_flags() if flags is None else flags
    if not ({"avx512_bf16", "amx_bf16"} & flags):
        return False
    cap = os.environ.get("ATEN_CPU_CAPABILITY", "").lower()
    return cap in ("", "avx512", "avx512_vnni", "avx512_bf16", "amx")


def f16c(flags: frozenset[str] | None = None) -> bool:
    """The CPU converts fp16 to fp32 in hardware (x86 F16C; every ARMv8.2+ core with fphp)."""
    flags = cpu_flags() if flags is None else flags
    return bool({"f16c", "fphp", "asimdhp"} & flags)


def choose_dtype(device: str, weights: str = "synthetic", flags: frozenset[str] | None = None) -> str:
    """The executor's dtype for `device` (module docstring): 'bf16' on CUDA; on the CPU fp16 for
    synthetic weights where F16C converts them, bf16 for a file's weights on a native-bf16 CPU,
    else fp32."""
    if device == "cuda":
        return "bf16"
    if weights == "synthetic" and f16c(flags):
        return "fp16"
    return "bf16" if native_bf16(flags) else "fp32"


def resolve_dtype(dtype: str, device: str, weights: str = "synthetic") -> str:
    """`dtype` itself, or for 'auto' the choice above."""
    return choose_dtype(device, weights) if dtype == "auto" else dtype


def mv_prefers_linear(dtype: str) -> bool:
    """One row on the CPU: torch.mv for fp16 and fp32 (its fp16 kernel streams 15-17 GB/s), F.linear
    for bf16 (oneDNN's path, twice torch.mv's bf16 rate on both ISAs above)."""
    return dtype == "bf16"
