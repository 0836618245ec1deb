"""Predicted against observed: each device buffer and each speed figure of a run (pure).

The prediction is the planner's own: estimate_memory for the buffers (at the placement the log
shows, so the figures compare like with like) and cost.estimate for the speeds. When a plan is
given and its placement differs from the log's, each difference is listed with what it changes in
the plan's own prediction (the plan's estimate with only that field set to the log's value).

Observed buffers (bytes from llama.cpp's MiB lines, 2 decimals, so +-5 KiB):
  device rows  model / KV / compute buffers of each device (CUDA0, RPC0[...], ...), summed over
               devices against the planner's single-GPU items weights_dense + weights_experts,
               kv_cache, compute; per device when the loader logged each layer's device (-v)
  host rows    host model buffers (CPU, CPU_Mapped, CUDA_Host) against the host weights,
               CPU_REPACK against `repack`, the host compute buffer against compute_cpu,
               output buffers against `output`
  breakdown    common_memory_breakdown_print's `unaccounted` per GPU (total - free - self)
               against cuda_context (+ the pool term); RPC devices report the remote host's
               memory there, so theirs is not compared
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from moeplan.check.parse import MIB, RunLog
from moeplan.check.placement import Recovered
from moeplan.planner.cost.estimate import estimate
from moeplan.planner.cost.priors import BackendPriors
from moeplan.planner.hardware.profile import HardwareProfile
from moeplan.planner.memory.accounting import (
    CPU_REPACK_TYPES_X86_AVX2,
    CPU_REPACK_TYPES_X86_AVX512,
    MemoryConstants,
    estimate_memory,
    kv_layer_bytes,
    pad,
)
from moeplan.planner.memory.compute_buffer import reserve_shape
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement

# Placement fields a user sets, with how to print them
COMPARED_FIELDS = ("backend", "cpu_moe_layers", "n_ctx", "n_seq", "cache_type_k", "cache_type_v", "flash_attn",
                   "n_ubatch", "n_batch", "n_threads", "n_threads_batch", "op_offload", "load_mode", "n_gpus",
                   "kv_unified", "n_experts_used", "kv_offload")


@dataclass(frozen=True)
class Row:
    """One figure: predicted and observed (bytes for memory, tokens/s for speed)."""

    section: str  # 'memory' | 'speed'
    device: str
    item: str
    predicted: float | None
    observed: float | None
    terms: str = ""
    source: str = ""  # where the observed figure was read

    @property
    def error(self) -> float | None:
        """predicted / observed - 1 (None when either is missing or observed is 0)."""
        if self.predicted is None or self.observed is None or self.observed == 0:
            return None
        return self.predicted / self.observed - 1.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["error"] = self.error
        d["unit"] = "bytes" if self.section == "memory" else "tok/s"
        return d


@dataclass(frozen=True)
class Difference:
    field: str
    plan: str
    log: str
    effect: str


@dataclass(frozen=True)
class CheckResult:
    source: str
    tool: str
    program: str
    placement: Placement
    evidence: dict
    rows: tuple[Row, ...]
    differences: tuple[Difference, ...] = ()
    notes: tuple[str, ...] = ()
    plan_placement: Placement | None = None
    repack_types: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"source": self.source, "tool": self.tool, "program": self.program,
                "placement": self.placement.to_dict(), "evidence": dict(self.evidence),
                "plan_placement": self.plan_placement.to_dict() if self.plan_placement else None,
                "same_as_plan": not self.differences if self.plan_placement else None,
                "differences": [asdict(d) for d in self.differences],
                "rows": [r.to_dict() for r in self.rows], "notes": list(self.notes),
                "repack_types": list(self.repack_types)}


def fmt_value(field_name: str, v) -> str:
    if field_name == "cpu_moe_layers":
        return _ranges(v) if v else "none"
    return str(v)


def _ranges(idx) -> str:
    idx = sorted(idx)
    out, i = [], 0
    while i < len(idx):
        j = i
        while j + 1 < len(idx) and idx[j + 1] == idx[j] + 1:
            j += 1
        out.append(str(idx[i]) if i == j else f"{idx[i]}-{idx[j]}")
        i = j + 1
    return ",".join(out)


def repack_types_of(run: RunLog, p: Placement) -> tuple[str, ...]:
    """Types the CPU backend repacks in this run (accounting.CPU_REPACK_TYPES_*): the build has the
    repack buffer (system_info 'REPACK = 1', ggml/src/ggml-cpu/ggml-cpu.cpp:644), the run did not turn it
    off (-nr / --repack 0), and no GPU host buffer takes the CPU weights first (a '*_Host' buffer type
    in the log means the GPU build's host buffer heads the CPU buffer list: no repack)."""
    f = run.cpu_features
    if f.get("REPACK") != "1":
        return ()
    if any(b.buffer_type.endswith("_Host") for b in run.buffers):
        return ()
    from moeplan.check.placement import _first, flag_values

    flags = flag_values(run.args) if run.args else {}
    if "-nr" in flags or "--no-repack" in flags or _first(flags, "--repack") in ("0", "off", "false"):
        return ()
    if f.get("AVX512") == "1":
        return CPU_REPACK_TYPES_X86_AVX512
    if f.get("AVX2") == "1":
        return CPU_REPACK_TYPES_X86_AVX2
    return ()


def _dev_of(buffer_type: str, devices) -> str:
    """The device of a buffer type. RPC buffer types are 'RPC0[host:port]' for every remote
    (ggml-rpc.cpp names the buffer type after the first device): the endpoint says which device
    ('using device RPC1 (host:port)')."""
    if buffer_type.endswith("]") and "[" in buffer_type:
        endpoint = buffer_type[buffer_type.index("[") + 1:-1]
        for d in devices:
            if d.description == endpoint:
                return d.name
    for d in devices:
        if buffer_type == d.name or buffer_type.startswith(d.name + "[") or buffer_type.startswith(d.name + " "):
            return d.name
    return buffer_type


def _observed_device_buffers(run: RunLog) -> dict[str, dict[str, int]]:
    """device -> kind -> bytes for non-host buffers."""
    out: dict[str, dict[str, int]] = {}
    for b in run.buffers:
        if b.host:
            continue
        d = _dev_of(b.buffer_type, run.devices)
        out.setdefault(d, {})
        out[d][b.kind] = out[d].get(b.kind, 0) + b.bytes
    return out


def _per_device_predicted(model: ModelSpec, p: Placement, layer_devices: dict) -> dict[str, dict[str, int]]:
    """Weights and KV of the blocks the loader assigned to each device (load_tensors 'layer N assigned
    to device D'); block n_layer is the output layer."""
    cpu = set(p.cpu_moe_layers)
    n_ub = reserve_shape(p).n_tokens
    out: dict[str, dict[str, int]] = {}
    for layer in model.trunk_layers:
        d = layer_devices.get(layer.index)
        if d is None or d == "CPU":
            continue
        e = out.setdefault(d, {"model": 0, "KV": 0})
        e["model"] += layer.resident_bytes + (0 if layer.index in cpu else layer.expert_bytes)
        e["KV"] += kv_layer_bytes(layer, p.n_ctx, p.cache_type_k, p.cache_type_v, p.n_seq, n_ub,
                                  kv_unified=p.kv_unified)
    d_out = layer_devices.get(model.n_layers)
    if d_out and d_out != "CPU":
        e = out.setdefault(d_out, {"model": 0, "KV": 0})
        e["model"] += sum(t.n_bytes for t in model.globals if t.group != "embed")
    return out


def run_gpu_build(run: RunLog) -> str:
    """The llama.cpp build a log comes from, by its device buffers: 'cuda' (CUDA0...), 'rocm'
    (ROCm0...), '' otherwise (CPU, RPC, Vulkan, Metal: no pool or FA copies counted)."""
    names = [b.buffer_type for b in run.buffers if not b.host]
    if any(n.startswith("CUDA") for n in names):
        return "cuda"
    if any(n.startswith("ROCm") for n in names):
        return "rocm"
    return ""


def context_and_pool(mem, device: str) -> int:
    """What a device's `unaccounted` is predicted to hold: the CUDA context prior and, on a
    CUDA/ROCm build, that device's memory-pool high-water (memory/cuda_runtime.py)."""
    digits = "".join(ch for ch in device if ch.isdigit())
    if mem.devices and digits and int(digits) < len(mem.devices):
        d = mem.devices[int(digits)]
        return d.context_bytes + d.pool_bytes
    return mem.get("cuda_context") + mem.get("cuda_pool")


def memory_rows(run: RunLog, model: ModelSpec, p: Placement, consts: MemoryConstants,
                repack_types: tuple[str, ...]) -> tuple[list[Row], list[str]]:
    mem = estimate_memory(model, p, consts, repack_types=repack_types)
    notes: list[str] = []
    items = {i.name: i for i in mem.items}

    def it(*names: str) -> int:
        return sum(items[n].n_bytes for n in names if n in items)

    def formula(*names: str) -> str:
        return "; ".join(f"{n}: {items[n].formula}" for n in names if n in items and items[n].n_bytes)

    rows: list[Row] = []
    cpu_only = p.n_gpus == 0
    dev = _observed_device_buffers(run)
    if not cpu_only and dev:
        if run.layer_devices and len(dev) > 1:
            per = _per_device_predicted(model, p, run.layer_devices)
            for d in sorted(dev):
                for kind, label in (("model", "weights"), ("KV", "KV cache")):
                    if kind in dev[d]:
                        rows.append(Row("memory", d, label, per.get(d, {}).get(kind), dev[d][kind],
                                        "blocks the loader assigned to this device", "buffer lines"))
        elif len(dev) > 1:
            for d in sorted(dev):
                for kind, label in (("model", "weights"), ("KV", "KV cache"), ("compute", "compute")):
                    if kind in dev[d]:
                        rows.append(Row("memory", d, label, None, dev[d][kind], "", "buffer lines"))
            notes.append("per-device weights and KV are predicted only when the loader logs each layer's device "
                         "(run with -v); the totals over the devices are compared")
        label = "all devices" if len(dev) > 1 else next(iter(dev))

        def total(kind: str) -> int | None:
            vals = [v[kind] for v in dev.values() if kind in v]
            return sum(vals) if vals else None

        rows.append(Row("memory", label, "weights", it("weights_dense", "weights_experts", "expert_cache"),
                        total("model"), formula("weights_dense", "weights_experts", "expert_cache"), "buffer lines"))
        if p.kv_offload:
            rows.append(Row("memory", label, "KV cache", it("kv_cache"), total("KV"), formula("kv_cache"),
                            "buffer lines"))
        rs = total("RS")
        if rs is not None:
            rows.append(Row("memory", label, "recurrent state", None, rs, "counted in the KV cache prediction",
                            "buffer lines"))
        comp_terms = formula("compute")
        if len(dev) > 1:
            comp_terms += "; the planner reserves one GPU's compute buffer, each further device reserves its own"
        rows.append(Row("memory", label, "compute", it("compute"), total("compute"), comp_terms, "buffer lines"))
    elif not cpu_only:
        notes.append("no device buffer lines in the log: the GPU side is not compared")

    # the breakdown table: unaccounted = total - free - self per GPU
    gpu_rows = [m for m in run.memory if not m.host and not m.name.startswith("RPC")]
    for m in gpu_rows:
        rows.append(Row("memory", m.name, "context + pool (unaccounted)", context_and_pool(mem, m.name),
                        (m.unaccounted_mib or 0) * MIB, formula("cuda_context", "cuda_pool") +
                        "; observed = total - free - self, which also holds other processes' memory",
                        "memory breakdown"))
    if gpu_rows and len(gpu_rows) > 1:
        notes.append("the planner counts one CUDA context; each device shows its own")

    # host side
    host_model = [b for b in run.buffers if b.host and b.kind == "model"]
    plain = [b for b in host_model if "REPACK" not in b.buffer_type and b.buffer_type != "AMX"]
    repack = [b for b in host_model if "REPACK" in b.buffer_type or b.buffer_type == "AMX"]
    host_w = ("weights_dense", "weights_embed", "weights_experts_cpu") if cpu_only else ("weights_embed",
                                                                                        "weights_experts_cpu")
    if plain:
        # ggml_backend_alloc_ctx_tensors places each tensor at the buffer's alignment (32 bytes on the CPU)
        cpu = set(p.cpu_moe_layers)
        if cpu_only:
            host_t = list(model.globals) + [t for layer in model.trunk_layers for t in layer.tensors]
        else:
            host_t = [t for t in model.globals if t.group == "embed"] + [
                t for layer in model.trunk_layers if layer.index in cpu for t in layer.tensors if t.group == "experts"]
        pad_b = sum(-t.n_bytes % 32 for t in host_t)
        pred = it(*host_w) + pad_b
        mapped = any(b.buffer_type.endswith("_Mapped") for b in plain)
        span = ("; with mmap the mapped buffer is the file span from the first to the last host tensor "
                "(src/llama-model-loader.cpp:1449-1464 get_mapping_range), so device tensors stored between them "
                "count too: observed >= predicted" if mapped and not cpu_only else "")
        rows.append(Row("memory", "host", "weights (mapped file span)" if span else "weights", pred,
                        sum(b.bytes for b in plain),
                        formula(*host_w) + ("; + 32-byte alignment of each tensor" if pad_b else "") + span,
                        ", ".join(sorted({b.buffer_type for b in plain}))))
        if any(b.buffer_type.endswith("_Mapped") for b in plain) and repack:
            notes.append("with mmap the CPU_Mapped buffer spans the whole file, repacked tensors included")
    if repack or "repack" in items:
        rows.append(Row("memory", "host", "repack", it("repack"), sum(b.bytes for b in repack) if repack else 0,
                        formula("repack") or "no repackable CPU weights", "CPU_REPACK buffer"))
    kv_host = run.buffer_total("KV", host=True)
    if kv_host is not None or cpu_only:
        if kv_host is not None:
            rows.append(Row("memory", "host", "KV cache", it("kv_cache") if (cpu_only or not p.kv_offload) else 0,
                            kv_host, formula("kv_cache"), "buffer lines"))
    c_host = run.buffer_total("compute", host=True)
    if c_host is not None:
        rows.append(Row("memory", "host", "compute", it("compute_cpu"), c_host, formula("compute_cpu"), "buffer lines"))
    out_b = run.buffer_total("output")
    if out_b is not None:
        rows.append(Row("memory", "host", "output", it("output"), out_b, formula("output"), "buffer lines"))
    return rows, notes


def _top_terms(terms) -> str:
    tot = sum(t.seconds for t in terms) or 1.0
    best = sorted(terms, key=lambda t: -t.seconds)[:3]
    return ", ".join(f"{t.name} {t.seconds / tot:.0%}" for t in best if t.seconds > 0)


def speed_rows(run: RunLog, model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors,
               consts: MemoryConstants, repack_types: tuple[str, ...]) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    notes: list[str] = []
    if not run.speeds:
        return rows, notes
    if p.n_gpus and not hw.gpus:
        notes.append(f"the run used {p.n_gpus} device(s) but the hardware profile has no GPU: speeds are "
                     "predicted for a CPU-only run (pass --hw with the machine that ran it)")
    prompt_n = next((s.n_tokens for s in run.speeds if s.metric == "prefill" and s.source == "timings"), 0)
    cache: dict = {}
    for s in run.speeds:
        if s.n_parallel > 1:
            notes.append(f"{s.source} line {s.line_no}: {s.n_parallel} requests decoded together; not compared "
                         "(moeplan predicts one stream)")
            continue
        n_prompt = s.n_tokens or 512
        if s.metric == "decode":
            depth = s.depth + (prompt_n if s.source in ("timings", "llama-cli") else 0) + max(s.n_tokens, 1) // 2
        else:
            depth = s.depth
        key = (depth, n_prompt)
        if key not in cache:
            cache[key] = estimate(model, p, hw, pr, depth=depth, n_prompt=n_prompt, consts=consts,
                                  repack_types=repack_types)
        e = cache[key]
        if s.metric == "decode":
            pred, terms = e.decode_tok_s, f"at depth {depth}: " + _top_terms(e.decode_terms)
            label = f"decode (tg{s.n_tokens}{f' @ d{s.depth}' if s.depth else ''})" if s.n_tokens else "decode"
        else:
            pred, terms = e.prefill_tok_s, f"{n_prompt}-token prompt: " + _top_terms(e.prefill_terms)
            label = f"prefill (pp{s.n_tokens}{f' @ d{s.depth}' if s.depth else ''})" if s.n_tokens else "prefill"
        rows.append(Row("speed", "", label, pred, s.tok_s, terms, s.source + (f" line {s.line_no}" if s.line_no else "")))
    return rows, sorted(set(notes))


def _norm(field_name: str, v):
    if field_name == "n_ctx":
        return pad(max(int(v), 1), 256)  # llama.cpp pads the context to 256 (llama-context.cpp)
    if field_name in ("cache_type_k", "cache_type_v"):
        return str(v).lower()
    if field_name == "cpu_moe_layers":
        return tuple(sorted(v))
    return v


def _effect(model: ModelSpec, plan_p: Placement, field_name: str, log_v, hw: HardwareProfile, pr: BackendPriors,
            consts: MemoryConstants, base_e) -> str:
    q = plan_p.with_(**{field_name: log_v})
    try:
        e = estimate(model, q, hw, pr, consts=consts)
    except (ValueError, KeyError, ZeroDivisionError) as exc:
        return f"cannot estimate the log's value ({exc})"
    parts = []
    dv = e.vram_bytes - base_e.vram_bytes
    dr = e.ram_bytes - base_e.ram_bytes
    if abs(dv) >= MIB:
        a = {i.name: i.bytes for i in base_e.memory.items}
        b = {i.name: i.bytes for i in e.memory.items}
        items = [f"{n} {(b.get(n, 0) - a.get(n, 0)) / MIB:+.0f}" for n in sorted(set(a) | set(b))
                 if abs(b.get(n, 0) - a.get(n, 0)) >= MIB]
        parts.append(f"VRAM {dv / MIB:+.0f} MiB ({', '.join(items)})")
    if abs(dr) >= MIB:
        parts.append(f"RAM {dr / MIB:+.0f} MiB")
    for name, x, y in (("decode", base_e.decode_tok_s, e.decode_tok_s), ("prefill", base_e.prefill_tok_s,
                                                                        e.prefill_tok_s)):
        if x > 0 and abs(y / x - 1) >= 0.005:
            parts.append(f"{name} {y / x - 1:+.0%}")
    return "; ".join(parts) or "no change to the predicted figures"


def differences(model: ModelSpec, plan_p: Placement, rec: Recovered, hw: HardwareProfile, pr: BackendPriors,
                consts: MemoryConstants) -> tuple[Difference, ...]:
    """Fields the log shows with another value than the plan's, and what each changes in the plan's
    prediction."""
    out = []
    base_e = None
    for f in COMPARED_FIELDS:
        if rec.evidence.get(f) in (None, "plan", "default"):
            continue
        a, b = getattr(plan_p, f), getattr(rec.placement, f)
        if f == "n_threads_batch":
            a, b = plan_p.threads_batch, rec.placement.threads_batch
        if f == "cpu_moe_layers" and plan_p.n_gpus == 0 and rec.placement.n_gpus == 0:
            continue  # a CPU-only run keeps every expert on the CPU whatever the list says
        if f == "kv_unified" and plan_p.n_seq <= 1 and rec.placement.n_seq <= 1:
            continue  # one sequence: one stream either way (llama-context.cpp n_ctx_seq)
        if _norm(f, a) == _norm(f, b):
            continue
        if base_e is None:
            base_e = estimate(model, plan_p, hw, pr, consts=consts)
        eff = _effect(model, plan_p, f, b, hw, pr, consts, base_e) if f not in ("backend", "n_gpus") else \
            "a different runtime or device count: the plan's figures do not apply"
        out.append(Difference(f, fmt_value(f, a), fmt_value(f, b), eff))
    return tuple(out)


def compare_run(run: RunLog, model: ModelSpec, rec: Recovered, hw: HardwareProfile, pr: BackendPriors,
                consts: MemoryConstants | None = None, plan_placement: Placement | None = None) -> CheckResult:
    """Everything `moeplan check` shows for one log."""
    c = consts or MemoryConstants()
    # the log's build, not the profile's: a CUDA/ROCm log is priced with that build's pool and FA
    # copies, a CPU/RPC log without them (exact to the byte)
    c = replace(c, gpu_build=run_gpu_build(run))
    p = rec.placement
    rt = repack_types_of(run, p) if p.n_gpus == 0 or not any(b.buffer_type.endswith("_Host") for b in run.buffers) \
        else ()
    notes = list(rec.notes)
    mrows, mnotes = memory_rows(run, model, p, c, rt)
    srows, snotes = speed_rows(run, model, p, hw, pr, c, rt)
    notes += mnotes + snotes
    diffs = differences(model, plan_placement, rec, hw, pr, c) if plan_placement is not None else ()
    if run.unread:
        notes.append(f"{len(run.unread)} line(s) looked like figures but could not be read: "
                     + "; ".join(f"line {n}" for n, _ in run.unread[:5]) + (" ..." if len(run.unread) > 5 else ""))
    return CheckResult(source=run.source, tool=run.tool, program=rec.program, placement=p, evidence=dict(rec.evidence),
                       rows=tuple(mrows + srows), differences=diffs, notes=tuple(notes),
                       plan_placement=plan_placement, repack_types=rt)
