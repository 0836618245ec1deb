"""Placement: every knob of one way to run a model (what llama.cpp's flags set).

Plain data shared by memory.py, cost.py, search.py, launch/, executor/ and tuner/.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from moeplan.errors import InputError
from moeplan.planner import backends
from moeplan.planner.options import PlanOptions
from moeplan.planner.serde import from_jsonable, to_jsonable

BACKENDS = backends.NAMES
NUMA_POLICIES = ("none", "bind", "interleave", "distribute")
LOAD_MODES = ("mmap", "no-mmap", "mlock")


@dataclass(frozen=True)
class Placement:
    """Where each part of the model lives and how it runs.

    cpu_moe_layers: indices (GGUF block numbers) of the MoE layers whose routed-expert
        matrices stay in host RAM and are computed by the CPU in decode.
    n_ctx: the context size asked for (llama.cpp pads it to a multiple of 256).
    numa: 'bind' = numactl --cpunodebind/--membind to `numa_nodes`; 'interleave' = pages
        interleaved over `numa_nodes`; 'distribute' = llama.cpp --numa distribute;
        'none' = no policy (first touch).
    n_gpu_layers: llama.cpp's -ngl N, the plain layer split: the last N layers (the output
        layer counts as layer n_layer_all, so N = n_layer_all + 1 includes it) are on the GPUs,
        the blocks before them entirely on the CPU (weights, KV cache, compute); None = every
        block and the output on the GPUs (what moeplan emits: -ngl n_layer_all + 1).
        planner/memory/devices.py assign_blocks mirrors the rule.
    gpu_expert_cache_bytes: size of a GPU cache of hot experts of CPU layers (llama.cpp
        --moe-cache-mib, KTransformers' GPU experts); 0 = none.
    n_draft / draft_accept: speculative decoding, drafted tokens per step and acceptance rate.
    kv_unified: one KV stream shared by the n_seq sequences (llama-server -kvu, its default
        when the slot count is automatic); False gives each sequence its own stream of
        pad256(n_ctx / n_seq) cells and its own SWA window (llama-completion, -np N).
    n_outputs_max: most logits rows one ubatch can return; llama.cpp reserves its compute
        buffer for min(n_ubatch, this) of them. 0 = n_batch, the library default that
        llama-completion and llama-bench keep; llama-server and llama-cli (which runs the
        server) set n_seq * (1 + drafted tokens) (tools/server/server-context.cpp
        server_output_limits).
    """

    backend: str = "llama.cpp"
    cpu_moe_layers: tuple[int, ...] = ()
    n_ctx: int = 4096
    n_seq: int = 1
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    flash_attn: bool = True
    n_ubatch: int = 512
    n_batch: int = 2048
    n_threads: int = 1
    n_threads_batch: int = 0  # 0 = same as n_threads
    numa: str = "none"
    numa_nodes: tuple[int, ...] = ()
    op_offload: bool = True
    gpu_expert_cache_bytes: int = 0
    load_mode: str = "mmap"
    kv_offload: bool = True
    kv_unified: bool = True
    n_outputs_max: int = 0
    n_draft: int = 0
    draft_accept: float = 0.0
    n_gpus: int = 1
    n_gpu_layers: int | None = field(default=None, metadata={"omit_default": True})
    # experts used per token if not the model's own (llama.cpp --override-kv
    # ARCH.expert_used_count=int:6, KTransformers' reduced-expert runs); 0 = the model's
    n_experts_used: int = 0
    # backend settings (-ts, -dev, -rtr, KTransformers' threshold ...), planner/options.py
    options: PlanOptions = field(default_factory=PlanOptions)

    @property
    def threads_batch(self) -> int:
        return self.n_threads_batch or self.n_threads

    def with_(self, **changes) -> Placement:
        return replace(self, **changes)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["cpu_moe_layers"] = list(self.cpu_moe_layers)
        d["numa_nodes"] = list(self.numa_nodes)
        d["options"] = to_jsonable(self.options)
        if self.n_gpu_layers is None:  # omitted at its default, as serde.to_jsonable does
            del d["n_gpu_layers"]
        return d

    def digest_doc(self) -> dict:
        """The placement as Plan.inputs_digest hashes it: its JSON form with the options as
        the `extra` pairs plan files held before the typed record (PlanOptions.legacy_pairs),
        so that a plan's digest did not change with the plan-file format."""
        d = to_jsonable(self)
        del d["options"]
        d["extra"] = self.options.legacy_pairs()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Placement:
        """A placement from its JSON form: the settings from `options` ({name: value}) or, in a
        plan written before the typed record, from `extra` ([key, text] pairs); an unknown
        setting is an InputError. Other unknown keys are ignored."""
        d = dict(d)
        if "extra" in d and "options" in d:
            raise InputError("the placement has both `options` and the older `extra`",
                             "keep one of them (moeplan writes `options`), or re-plan with moeplan tune")
        options = PlanOptions.from_pairs(d.pop("extra")) if "extra" in d else PlanOptions.from_json_doc(d.pop("options", {}))
        p = from_jsonable(cls, d)
        return replace(p, options=options)

    @classmethod
    def from_json_doc(cls, d: dict) -> Placement:
        """planner/serde.py's hook: a Plan's placement is read by from_dict."""
        return cls.from_dict(d)


def layers_from_last(moe_indices: tuple[int, ...], n_cpu: int) -> tuple[int, ...]:
    """ik_llama.cpp -ncmoe N and llama.cpp --fit: the last N MoE layers spill to the CPU."""
    if n_cpu <= 0:
        return ()
    return tuple(moe_indices[-n_cpu:])


def parse_layer_list(text: str) -> tuple[int, ...]:
    """'0-19,40' -> (0, 1, ..., 19, 40). Raises ValueError on junk."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            lo, hi = int(a), int(b)
            if hi < lo:
                raise ValueError(part)
            out.update(range(lo, hi + 1))
        else:
            out.add(int(part))
    return tuple(sorted(out))
