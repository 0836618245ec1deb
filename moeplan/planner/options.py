"""The backend settings a plan may carry, as one typed record (PlanOptions).

A Placement stores them as `extra`, (key, text) pairs, so plan files keep their format;
`Placement.options` reads them into this record, refusing a key it does not know and a value
of the wrong kind with a one-line error. Which backend takes which setting is its record's
`options` (planner/runtimes/). The cost model reads the record, never the pairs.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from moeplan.errors import InputError

# KTransformers' --kt-gpu-prefill-token-threshold: prompts of at least this many tokens are
# prefilled layer by layer on the GPU (0 = off; cost/prefill_path.py picks it when the plan has none)
KT_THRESHOLD_KEY = "kt_gpu_prefill_token_threshold"
# KTransformers --kt-num-gpu-experts G as the plan was given it (estimate --kt-gpu-experts): the
# plan keeps the GPU layers of the same bytes; every MoE layer still has CPU experts and hands
# over to the CPU pools, and `emit` passes G itself
KT_GPU_EXPERTS_KEY = "kt_num_gpu_experts"
# ik_llama.cpp -rtr: the CPU weights repacked to row-interleaved types at load (launch/ikllama.py)
RTR_KEY = "rtr"
# the llama.cpp build a plan is costed for (`llama-server --version`: "version: 6263 (...)"):
# kernels that changed between builds run as that build runs them; absent = the vendored build's
LLAMA_BUILD_KEY = "llama_build"


@dataclass(frozen=True)
class PlanOptions:
    """Backend settings of a plan (all optional; launch/__init__.py lists what each emits)."""

    kt_gpu_prefill_token_threshold: int | None = None  # KT_THRESHOLD_KEY
    kt_num_gpu_experts: int | None = None  # KT_GPU_EXPERTS_KEY
    rtr: bool = False  # RTR_KEY
    llama_build: int | None = None  # LLAMA_BUILD_KEY
    tensor_split: str = ""  # llama.cpp/ik -ts with several GPUs
    devices: str = ""  # llama.cpp/ik -dev
    op_offload_min_batch: str = ""  # GGML_OP_OFFLOAD_MIN_BATCH for the run
    draft_model: str = ""  # speculative decoding's draft model
    spec_type: str = ""
    kt_method: str = ""  # KTransformers' --kt-method
    kt_weight_path: str = ""
    kt_max_deferred_experts_per_token: str = ""
    hf_bytes_per_param: str = ""  # vLLM/SGLang memory check of a GGUF plan
    win_affinity_mask: str = ""  # launch.cmd's start /AFFINITY (planner/search.py)
    gpu_build: str = ""  # llama.cpp's GPU build for an AMD GPU: "rocm" | "vulkan" (hardware/vendors.py)
    gfx_target: str = ""  # the AMD GPU's LLVM target (-DGPU_TARGETS=gfx...)
    unified_memory: str = ""  # "1": an APU's iGPU maps the host's DRAM

    @classmethod
    def parse(cls, extra: tuple[tuple[str, str], ...]) -> PlanOptions:
        """The record of a placement's pairs; an unknown key or a bad number is an InputError."""
        known = {f.name for f in fields(cls)}
        vals: dict[str, object] = {}
        for k, v in extra:
            if k not in known:
                raise InputError(f"unknown plan option {k!r}", "known: " + ", ".join(sorted(known)))
            if k in vals:
                continue  # the first pair wins, as the readers of the pairs did
            vals[k] = _value(k, str(v))
        return cls(**vals)  # type: ignore[arg-type]


def _whole(key: str, v: str, what: str, hint: str, positive: bool = False) -> int:
    if not v.strip().isdigit() or (positive and int(v) <= 0):
        raise InputError(f"{key} {v!r} is not {what}", hint)
    return int(v)


def _value(key: str, v: str) -> object:
    if key == KT_THRESHOLD_KEY:
        return _whole(key, v, "a token count",
                      "give a whole number of prompt tokens (0 turns the layer-wise GPU prefill off)")
    if key == KT_GPU_EXPERTS_KEY:
        return _whole(key, v, "an expert count", "give a whole number of experts per layer")
    if key == LLAMA_BUILD_KEY:
        return _whole(key, v, "a build number", "give the number `llama-server --version` prints, e.g. 6263",
                      positive=True)
    if key == RTR_KEY:
        return v == "1"
    return v
