"""Memory constants only a GPU run shows, with their priors and bounds, and the calibrated
values a hardware profile carries (pure).

  cuda_context_bytes          per device: CUDA context, cuBLAS workspace and the driver's own
                              allocations. Seen in llama.cpp's memory breakdown as the device's
                              `unaccounted` (total - free - self, common/fit.cpp:982-983) of a run
                              that is alone on the GPU. Prior 640 MiB (MemoryConstants), bounds
                              0-4 GiB (a CUDA 12 context is 300-600 MiB; cuBLAS adds its workspace).
  cuda_pool_bytes_per_ubatch  per ubatch token, by K cache type: the ggml CUDA pool's high-water
                              (ggml/src/ggml-cuda/ggml-cuda.cu ggml_cuda_pool_leg/vmm: temporaries of
                              matmuls and flash attention, e.g. the f16 copies of quantized operands)
                              that stays reserved after the first batch; also in `unaccounted`.
                              Prior 0 (not known before a run), bounds 0-1 MiB per token.
  compute_extra_bytes         additive correction of the GPU compute buffer (the `compute buffer size`
                              line) for what the graph mirror misses; prior 0, bounds +-2 GiB.

gpu_build (not fitted): 'cuda' or 'rocm' when the profile's GPUs run that llama.cpp build
(gpu_build_of), so that the pool and FA's F16 copies of memory/cuda_runtime.py are counted;
`moeplan calibrate --from LOG` fits them and stores them as a Calibration named
'<backend> memory' in the profile; estimate() and the search read them from there.
`moeplan calibrate --fit-params` stores compute_factor_gpu / compute_factor_host (the compute
buffers x these, learned from llama.cpp's own dry run; tuner/fitcal.py) as '<backend> memory
(llama-fit-params)'.
"""
from __future__ import annotations

from dataclasses import replace

from moeplan.planner.hardware.profile import HardwareProfile
from moeplan.planner.memory.accounting import MemoryConstants
from moeplan.units import GIB, MIB

# name -> (prior, lower bound, upper bound, prior sigma), bytes (per ubatch token for the pool)
MEMORY_PRIORS: dict[str, tuple[float, float, float, float]] = {
    "cuda_context_bytes": (float(MemoryConstants().cuda_context_bytes), 0.0, 4.0 * GIB, 256.0 * MIB),
    "cuda_pool_bytes_per_ubatch": (0.0, 0.0, 1.0 * MIB, 64.0 * 1024),
    "compute_extra_bytes": (0.0, -2.0 * GIB, 2.0 * GIB, 256.0 * MIB),
}


def memory_calibration_name(backend: str) -> str:
    return f"{backend} memory"


def fit_params_calibration_name(backend: str) -> str:
    """The calibration `moeplan calibrate --fit-params` stores: kept apart from the log fit's."""
    return f"{backend} memory (llama-fit-params)"


def gpu_build_of(hw: HardwareProfile, backend: str) -> str:
    """The llama.cpp build a plan for this machine runs on, for what it allocates beyond the CPU/RPC
    build (memory/cuda_runtime.py): 'cuda' for NVIDIA GPUs, 'rocm' for AMD ones with a ROCm build,
    '' for Vulkan, for runtimes that do not run llama.cpp's CUDA backend, and without a GPU."""
    from moeplan.planner import backends
    from moeplan.planner.hardware.vendors import profile_build

    build = profile_build(hw) if hw.gpus else ""
    return build if build in ("cuda", "rocm") and backends.behaviour(backend).gguf_runner else ""


def memory_constants(hw: HardwareProfile | None, backend: str, base: MemoryConstants | None = None) -> MemoryConstants:
    """MemoryConstants with the profile's calibrated values for `backend` (the priors otherwise).

    Factor names: cuda_context_bytes, compute_extra_bytes, and cuda_pool_bytes_per_ubatch or
    cuda_pool_bytes_per_ubatch:<K cache type>."""
    c = base or MemoryConstants()
    if base is None and hw is not None and hw.gpus:
        c = replace(c, gpu_build=gpu_build_of(hw, backend))
    fit = hw.calibration_for(fit_params_calibration_name(backend)) if hw is not None else None
    if fit is not None:  # compute-buffer factors learned from llama-fit-params (tuner/fitcal.py)
        c = replace(c, compute_factor_gpu=float(fit.factors.get("compute_factor_gpu", c.compute_factor_gpu)),
                    compute_factor_host=float(fit.factors.get("compute_factor_host", c.compute_factor_host)))
    cal = hw.calibration_for(memory_calibration_name(backend)) if hw is not None else None
    if cal is None:
        return c
    f = cal.factors
    pool = tuple(sorted((k.partition(":")[2], float(v)) for k, v in f.items()
                        if k.startswith("cuda_pool_bytes_per_ubatch")))
    return replace(c, cuda_context_bytes=int(round(f.get("cuda_context_bytes", c.cuda_context_bytes))),
                   compute_extra_bytes=int(round(f.get("compute_extra_bytes", c.compute_extra_bytes))),
                   cuda_pool_bytes_per_ubatch=pool or c.cuda_pool_bytes_per_ubatch)
