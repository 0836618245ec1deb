"""Plan: the hand-off from the planner to launch/, executor/ and tuner/.

A Plan is placement + estimate + alternatives + a digest of its inputs. It is written as
stable JSON (sorted keys, no clock) so identical inputs give byte-identical files; the
executor and tuner read a Plan and never call the search.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from moeplan.planner.placement import Placement
from moeplan.planner.serde import from_jsonable, to_jsonable

PLAN_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Term:
    """One named part of a predicted time: `seconds` per token (decode) or per prompt token
    (prefill), the resource it occupies, and the formula with its inputs filled in."""

    name: str
    seconds: float
    resource: str  # 'gpu-mem', 'cpu-mem', 'cpu-compute', 'pcie', 'sync', 'nvme', 'gpu-compute'
    formula: str = ""


@dataclass(frozen=True)
class MemoryLine:
    """One item of a memory breakdown: bytes on a device and the formula that gave them."""

    name: str
    device: str  # 'gpu' or 'host'
    bytes: int
    formula: str = ""
    page_cache: bool = False  # host bytes that are file-backed page cache (mmap)


@dataclass(frozen=True)
class GpuMemory:
    """One GPU of a layer split (memory/devices.py): its blocks and VRAM term by term, and its
    budget (free VRAM, else its size)."""

    device: int
    blocks: str  # block ranges on this GPU, '0-11,40'
    output: bool  # the output layer is here (the last device)
    gpu_expert_blocks: str  # blocks whose routed experts this GPU holds
    weights_dense_bytes: int
    weights_experts_bytes: int
    kv_bytes: int
    compute_bytes: int
    context_bytes: int
    vram_bytes: int
    margin_bytes: int
    vram_required_bytes: int
    name: str = ""
    budget_bytes: int | None = None
    # a CUDA/ROCm build's memory-pool high-water (memory/cuda_runtime.py); 0 = not counted
    pool_bytes: int = field(default=0, metadata={"omit_default": True})


@dataclass(frozen=True)
class MemoryReport:
    """The memory breakdown an estimate carries (memory/accounting.py MemoryBreakdown, as data)."""

    vram_bytes: int = 0
    vram_required_bytes: int = 0
    ram_bytes: int = 0
    ram_anon_bytes: int = 0
    margin_bytes: int = 0
    items: tuple[MemoryLine, ...] = ()
    per_gpu: tuple[GpuMemory, ...] = ()  # several GPUs: each device, in device order


@dataclass(frozen=True)
class FactorFigure:
    """A resolved efficiency figure of the cost model: value (unit in the factor's name), where
    it came from, and its relative uncertainty (1 sigma)."""

    value: float
    source: str
    rel_err: float
    note: str = ""


@dataclass(frozen=True)
class FactorsUsed:
    """The efficiency factors an estimate was computed with (cost/resolve.py resolves them)."""

    bw_gpu_bytes_per_s: FactorFigure
    gpu_flop_per_s: FactorFigure
    h2d_bytes_per_s: FactorFigure
    bw_cpu_bytes_per_s: FactorFigure
    cpu_dot_elem_per_s: FactorFigure
    cpu_flop_per_s: FactorFigure
    s_sync_s: FactorFigure
    s_layer_gpu_s: FactorFigure
    t_token_s: FactorFigure
    nvme_bytes_per_s: FactorFigure
    remote_share: float
    cross_socket: bool
    cpu_only: bool
    numa_note: str
    barrier_x: float = 1.0  # cost of a thread barrier across the sockets used, x one socket's
    oversub_s_per_barrier: float = 0.0  # threads beyond the logical CPUs (cost/machine.py)
    barrier_s: float = 0.0  # one barrier of the decode thread pool: T x core hand-over x sockets + oversub
    cpu_dot_batch_x: float = 1.0  # dot rate of the prefill threads (-tb) / of the decode threads (-t)


@dataclass(frozen=True)
class Estimate:
    """A placement's predicted decode and prefill speeds, their ranges and the terms behind them."""

    decode_tok_s: float
    decode_tok_s_range: tuple[float, float]
    prefill_tok_s: float
    prefill_tok_s_range: tuple[float, float]
    decode_terms: tuple[Term, ...]
    prefill_terms: tuple[Term, ...]
    bottleneck: str
    prefill_bottleneck: str
    vram_bytes: int
    vram_required_bytes: int
    ram_bytes: int
    memory: MemoryReport = field(default_factory=MemoryReport)
    ram_bytes_per_node: tuple[tuple[int, int], ...] = ()
    depth: int = 0  # context depth the decode figure is for
    factors: FactorsUsed | None = None  # efficiency factors used, with their source
    notes: tuple[str, ...] = ()
    # mmap with a file that does not fit in RAM beside the rest: decode if every CPU expert
    # read comes from the disk (cost/report.py page_cache_short_bytes); 0 when it fits
    decode_tok_s_paging: float = 0.0
    # the widths' entry each range took (cost/ranges.py range_key): 'cpu-bound' / 'shared' (the
    # range tier), 'all' (the pooled width), '' (no fit.json: the priors' uncertainties)
    decode_range_tier: str = ""
    prefill_range_tier: str = ""


@dataclass(frozen=True)
class ModelRef:
    """Enough to find the model again and to check it is the same one."""

    name: str
    arch: str
    source: str  # gguf / hf / profile
    path: str  # file, folder or profile name
    quant: str
    digest: str
    file_bytes: int
    size_arg: str = ""  # --size given for a profile

    def reopen_args(self) -> tuple[str, str | None, str | None]:
        """(MODEL, --quant, --size) that read the same model again. A profile's quant label
        starts with the recipe it was read with: 'Q4_K_M', 'native (FP8)', 'MXFP4 scaled to ...'."""
        if self.source != "profile":
            return self.path, None, None
        return self.path, (self.quant.split(" ")[0] or None), (self.size_arg or None)


@dataclass(frozen=True)
class Alternative:
    """Another placement the search found, with its speeds and memory."""

    label: str
    placement: Placement
    decode_tok_s: float
    prefill_tok_s: float
    vram_bytes: int
    ram_bytes: int


@dataclass(frozen=True)
class Workload:
    """The request a plan is chosen for: `prompt_tokens` new tokens prefilled after `depth`
    tokens already in the context (a conversation's history, an agent's files), then
    `gen_tokens` generated. Its time is what `tune` minimises by default."""

    name: str
    prompt_tokens: int
    gen_tokens: int
    depth: int = 0

    @property
    def decode_depth(self) -> int:
        """The context depth of the average generated token."""
        return self.depth + self.prompt_tokens + self.gen_tokens // 2

    def seconds(self, prefill_tok_s: float, decode_tok_s: float) -> float:
        return self.prompt_tokens / max(prefill_tok_s, 1e-9) + self.gen_tokens / max(decode_tok_s, 1e-9)

    def describe(self) -> str:
        at = f" after {self.depth:,} cached tokens" if self.depth else ""
        return f"{self.name}: {self.prompt_tokens:,}-token prompt{at}, {self.gen_tokens:,} tokens generated"


@dataclass(frozen=True)
class Plan:
    """What the planner chose: the model, the hardware, the placement and its estimate."""

    model: ModelRef
    hardware_name: str
    hardware_digest: str
    placement: Placement
    estimate: Estimate
    objective: str = "decode"
    alternatives: tuple[Alternative, ...] = ()
    pareto: tuple[Alternative, ...] = ()
    notes: tuple[str, ...] = ()
    moeplan_version: str = ""
    schema_version: int = PLAN_SCHEMA_VERSION
    hardware_os: str = "linux"  # the profile's OS family: emit's default for which launch files to write
    workload: Workload | None = None  # the request the plan was chosen for (tune's --workload)

    def to_dict(self) -> dict:
        d = to_jsonable(self)
        d["inputs_digest"] = self.inputs_digest()
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=2) + "\n"

    def inputs_digest(self) -> str:
        blob = json.dumps([self.model.digest, self.hardware_digest, self.placement.digest_doc(),
                           self.objective], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, data: dict) -> Plan:
        return from_jsonable(cls, data)


def digest_of(obj) -> str:
    """Digest of any dataclass or JSON-able value (used for hardware profiles)."""
    blob = json.dumps(to_jsonable(obj), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def model_ref(model, size_arg: str = "") -> ModelRef:
    """How a Plan names its model: the path for files, the profile name for profiles."""
    path = model.path if model.source != "profile" else model.name
    return ModelRef(name=model.name, arch=model.arch, source=model.source, path=path, quant=model.quant,
                    digest=model.digest(), file_bytes=model.file_bytes, size_arg=size_arg)


PLAN_HINT = "give the plan.json that `moeplan tune --emit DIR` or `--out FILE` wrote, or what `tune --json` printed"


def plan_from_doc(data, where: str) -> Plan:
    """A Plan from a decoded JSON document, checked (pure): a plan.json, or the document
    `moeplan tune --json` prints ({"plan": {...}, "moeplan_version": ...}). Refuses a schema
    newer than this moeplan reads, fields of the wrong type and placements out of range
    (InputError naming the field)."""
    from moeplan.errors import InputError
    from moeplan.planner.limits import check_placement
    from moeplan.planner.serde import SchemaError, check_types

    if isinstance(data, dict) and "placement" not in data and isinstance(data.get("plan"), dict):
        data = data["plan"]  # `tune --json` wraps the plan
    if isinstance(data, dict) and "error" in data and "placement" not in data:
        raise InputError(f"{where} holds an error report, not a plan", "rerun the command that wrote it")
    if not isinstance(data, dict) or not isinstance(data.get("placement"), dict) or not isinstance(data.get("model"), dict):
        raise InputError(f"{where} is not a moeplan plan (no model or placement)", PLAN_HINT)
    version = data.get("schema_version", PLAN_SCHEMA_VERSION)
    if isinstance(version, bool) or not isinstance(version, int):
        raise InputError(f"{where}: schema_version = {version!r} is not a whole number", PLAN_HINT)
    if version > PLAN_SCHEMA_VERSION:
        raise InputError(f"{where}: plan schema_version = {version}; this moeplan reads up to {PLAN_SCHEMA_VERSION}",
                         "upgrade moeplan (pip install -U moeplan), or re-plan with this one")
    if version < 1:
        raise InputError(f"{where}: plan schema_version = {version} is unknown (1..{PLAN_SCHEMA_VERSION})", PLAN_HINT)
    try:
        check_types(Plan, data)
        if not isinstance(data.get("estimate"), dict):
            raise SchemaError("estimate", data.get("estimate"), "an object")
        plan = Plan.from_dict(data)
    except SchemaError as exc:
        raise InputError(f"{where}: {exc}", PLAN_HINT) from None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InputError(f"{where} is not a moeplan plan ({type(exc).__name__}: {exc})", PLAN_HINT) from None
    check_placement(plan.placement, where=where)
    return plan
