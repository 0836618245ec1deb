"""The backend settings a plan may carry, as one typed record (PlanOptions, `Placement.options`).

Every reader and writer uses the record's fields; only this module knows the settings by name
(`OPTION_KEYS`, the names a backend's record lists in `options`, planner/runtimes/). A plan
file holds them as the object `placement.options` with the set fields only; plan files written
before that held `placement.extra`, (key, text) pairs, which `Placement.from_dict` still reads
(`PlanOptions.from_pairs`). An unknown name or a value of the wrong kind is a one-line error.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

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
# ik_llama.cpp -amb N (cparams.attn_max_batch, MiB): MLA's K*Q without flash attention is computed
# in head chunks of at most about N MiB (planner/memory/compute_buffer.py ik_kq_heads); absent = the default
AMB_KEY = "amb"
# the build's GGML_SCHED_MAX_COPIES (a CMake option: the input copies ggml_backend_sched keeps under
# pipeline parallelism) where it is not the runtime's (planner/runtimes/): ik_llama.cpp built 4 before
# #751 (d29c21ecb, 2025-09-02), 1 since; absent = the runtime's (compute_buffer.pipeline_copies)
SCHED_COPIES_KEY = "sched_max_copies"
# the llama.cpp build a plan is costed for (`llama-server --version`: "version: 6263 (...)"):
# kernels that changed between builds run as that build runs them; absent = the vendored build's
LLAMA_BUILD_KEY = "llama_build"

_OMIT = {"omit_default": True}  # planner/serde.py writes a field only when it is set


@dataclass(frozen=True)
class PlanOptions:
    """Backend settings of a plan (all optional; launch/__init__.py lists what each emits)."""

    kt_gpu_prefill_token_threshold: int | None = field(default=None, metadata=_OMIT)  # KT_THRESHOLD_KEY
    kt_num_gpu_experts: int | None = field(default=None, metadata=_OMIT)  # KT_GPU_EXPERTS_KEY
    rtr: bool = field(default=False, metadata=_OMIT)  # RTR_KEY
    amb: int | None = field(default=None, metadata=_OMIT)  # AMB_KEY
    llama_build: int | None = field(default=None, metadata=_OMIT)  # LLAMA_BUILD_KEY
    sched_max_copies: int | None = field(default=None, metadata=_OMIT)  # SCHED_COPIES_KEY
    tensor_split: str = field(default="", metadata=_OMIT)  # llama.cpp/ik -ts with several GPUs
    devices: str = field(default="", metadata=_OMIT)  # llama.cpp/ik -dev
    op_offload_min_batch: str = field(default="", metadata=_OMIT)  # GGML_OP_OFFLOAD_MIN_BATCH for the run
    draft_model: str = field(default="", metadata=_OMIT)  # speculative decoding's draft model
    spec_type: str = field(default="", metadata=_OMIT)
    kt_method: str = field(default="", metadata=_OMIT)  # KTransformers' --kt-method
    kt_weight_path: str = field(default="", metadata=_OMIT)
    kt_max_deferred_experts_per_token: str = field(default="", metadata=_OMIT)
    hf_bytes_per_param: str = field(default="", metadata=_OMIT)  # vLLM/SGLang memory check of a GGUF plan
    win_affinity_mask: str = field(default="", metadata=_OMIT)  # launch.cmd's start /AFFINITY (planner/search.py)
    # the llama.cpp build the launch files are written for (planner/hardware/vendors.py build_options):
    gpu_build: str = field(default="", metadata=_OMIT)  # "rocm" | "vulkan"; "" = CUDA or no GPU
    gfx_target: str = field(default="", metadata=_OMIT)  # the AMD GPU's LLVM target (gfx1151)
    unified_memory: bool = field(default=False, metadata=_OMIT)  # the GPU shares the host's memory

    def with_(self, **changes: Any) -> PlanOptions:
        return replace(self, **changes)

    @classmethod
    def from_pairs(cls, pairs: Any) -> PlanOptions:
        """The record of the (key, text) pairs plan files held as `placement.extra` before the
        typed form; an unknown key or a bad number is an InputError."""
        if not isinstance(pairs, (list, tuple)) or not all(
                isinstance(kv, (list, tuple)) and len(kv) == 2 and isinstance(kv[0], str) for kv in pairs):
            raise InputError(f"placement.extra = {str(pairs)[:40]!r} is not a list of [key, value] pairs",
                             "write the plan's settings as placement.options, or re-plan with moeplan tune")
        vals: dict[str, object] = {}
        for k, v in pairs:
            _known(k)
            if k not in vals:  # the first pair wins, as the readers of the pairs did
                vals[k] = _value(k, str(v))
        return cls(**vals)  # type: ignore[arg-type]

    @classmethod
    def from_json_doc(cls, doc: Any) -> PlanOptions:
        """The record of a plan file's `placement.options` object: names from OPTION_KEYS,
        values of the field's type (planner/serde.py check_types has checked the types)."""
        if not isinstance(doc, dict):
            raise InputError(f"placement.options = {str(doc)[:40]!r} is not an object",
                             "write the plan's settings as {name: value}, or re-plan with moeplan tune")
        for k in doc:
            _known(k)
        vals = {k: v for k, v in doc.items() if v is not None}
        for k, v in vals.items():
            if isinstance(v, int) and not isinstance(v, bool):
                _value(k, str(v))  # the same range checks as the pairs
        return cls(**vals)

    def legacy_pairs(self) -> list[list[str]]:
        """The set fields as the (key, text) pairs of the old `extra` form, in the order `tune`
        wrote them (_LEGACY_ORDER): what Plan.inputs_digest hashes, so that a plan's digest
        (launch files' headers, tuner stamps) stayed what it was before the typed form."""
        out = []
        for name in _LEGACY_ORDER:
            v = getattr(self, name)
            if v != _DEFAULTS[name]:
                out.append([name, "1" if v is True else str(v)])
        return out


OPTION_KEYS: tuple[str, ...] = tuple(f.name for f in fields(PlanOptions))
_DEFAULTS = {f.name: f.default for f in fields(PlanOptions)}
# planner/search.py put the -ts, then the KTransformers threshold; resolve.py the backend's own
# settings; commands/plan.py appended -dev and the build; then the settings added by hand, and
# the Windows mask last (tests/test_windows.py adds it to a placement that has others; a plan
# that also has a -ts gets another digest than before: search.py set the mask first)
_FIRST = ("tensor_split", KT_GPU_EXPERTS_KEY, KT_THRESHOLD_KEY, LLAMA_BUILD_KEY, RTR_KEY,
          "devices", "gpu_build", "gfx_target", "unified_memory")
_LEGACY_ORDER = (_FIRST + tuple(k for k in OPTION_KEYS if k not in _FIRST and k != "win_affinity_mask")
                 + ("win_affinity_mask",))


def _known(key: str) -> None:
    if key not in OPTION_KEYS:
        raise InputError(f"unknown plan option {key!r}", "known: " + ", ".join(sorted(OPTION_KEYS)))


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
    if key == AMB_KEY:
        return _whole(key, v, "a size in MiB", "give ik_llama.cpp's -amb in MiB (0 turns the splitting off)")
    if key == SCHED_COPIES_KEY:
        return _whole(key, v, "a copy count", "give the build's GGML_SCHED_MAX_COPIES, e.g. 4", positive=True)
    if key == LLAMA_BUILD_KEY:
        return _whole(key, v, "a build number", "give the number `llama-server --version` prints, e.g. 6263",
                      positive=True)
    if key in ("rtr", "unified_memory"):
        return v == "1"
    return v
