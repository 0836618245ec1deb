"""The placement a run really used, recovered from its log (pure).

Evidence, strongest first, for each field:
  CPU experts   the loader's override lines (printed with -v / --verbose), else the -ot /
                --n-cpu-moe / --cpu-moe flags echoed in the log, else llama-bench's
                tensor_buft_overrides / n_cpu_moe fields, else unknown.
  context       llama_context's n_ctx / n_seq_max / n_batch / n_ubatch / flash_attn / kv_unified /
                n_outputs_max lines, the KV size line's K/V types; else the flags.
  threads       the system_info line; else -t / -tb.
  devices       'using device' lines, the memory breakdown's device rows, device buffers.
  load mode     a *_Mapped model buffer means mmap; else the flags.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from moeplan.check.parse import RunLog, is_host_buffer
from moeplan.planner import backends
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement, layers_from_last

# common/arg.cpp: --n-cpu-moe N adds "blk\\.%d\\.ffn_(up|down|gate|gate_up)_(ch|)exps" for i < N, --cpu-moe
# adds "\\.ffn_(up|down|gate|gate_up)_(ch|)exps" (LLM_FFN_EXPS_REGEX)
_EXPS_RE = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"

_BOOL = {"true": True, "false": False, "1": True, "0": False, "on": True, "off": False, "enabled": True,
         "disabled": False, "yes": True, "no": False}

# flags that take a value (common/arg.cpp spellings), to walk an echoed argv
_VALUE_FLAGS = {
    "-m", "--model", "-c", "--ctx-size", "-b", "--batch-size", "-ub", "--ubatch-size", "-t", "--threads", "-tb",
    "--threads-batch", "-ngl", "--gpu-layers", "--n-gpu-layers", "-ot", "--override-tensor", "-ts", "--tensor-split",
    "-ctk", "--cache-type-k", "-ctv", "--cache-type-v", "-np", "--parallel", "-fa", "--flash-attn", "-lm",
    "--load-mode", "--n-cpu-moe", "-ncmoe", "--numa", "--override-kv", "-sm", "--split-mode", "-mg", "--main-gpu",
    "--rpc", "-dev", "--device", "-p", "--prompt", "-n", "--n-predict", "-o", "-r", "-pg", "-d", "--port",
    "--host", "-a", "--alias", "-md", "--model-draft", "--draft-max", "--draft", "-fit", "--fit", "-fitt",
    "-nr", "--repack", "-mla", "-amb", "-ser", "-fmoe", "-cuda",
}


@dataclass(frozen=True)
class Recovered:
    """The run's placement and, for each field, where it was read (or why it was not)."""

    placement: Placement
    evidence: dict = field(default_factory=dict)  # field -> 'log' / 'flags' / 'llama-bench' / 'plan' / 'default'
    notes: tuple[str, ...] = ()
    layer_devices: dict = field(default_factory=dict)  # block index -> device name (with -v)
    program: str = ""


def flag_values(args: tuple[str, ...]) -> dict[str, list[str]]:
    """argv -> {flag: [values]} ('' for switches); repeated flags keep every value."""
    out: dict[str, list[str]] = {}
    i = 1
    while i < len(args):
        a = args[i]
        if a.startswith("-"):
            if "=" in a and a.startswith("--"):
                k, v = a.split("=", 1)
                out.setdefault(k, []).append(v)
            elif a in _VALUE_FLAGS and i + 1 < len(args):
                out.setdefault(a, []).append(args[i + 1])
                i += 1
            else:
                out.setdefault(a, []).append("")
        i += 1
    return out


def _first(flags: dict, *names: str) -> str | None:
    for n in names:
        if n in flags and flags[n]:
            return flags[n][-1]
    return None


def override_patterns(flags: dict) -> list[tuple[str, str]]:
    """(-ot pattern, buffer type) in the order llama.cpp tries them (first match wins,
    src/llama-model-loader.cpp:1234-1256); --n-cpu-moe / --cpu-moe add theirs after (common/arg.cpp)."""
    pats = []
    for v in flags.get("-ot", []) + flags.get("--override-tensor", []):
        for item in v.split(","):
            if "=" in item:
                p, b = item.rsplit("=", 1)
                pats.append((p, b))
    return pats


def _expert_tensors(model: ModelSpec) -> list[tuple[str, int]]:
    return [(t.name, layer.index) for layer in model.moe_layers for t in layer.tensors if t.group == "experts"]


def cpu_layers_from_patterns(model: ModelSpec, pats: list[tuple[str, str]]) -> tuple[tuple[int, ...], list[str]]:
    """The MoE blocks whose every expert tensor the patterns send to a host buffer."""
    hits: dict[int, list[bool]] = {}
    notes = []
    for name, layer in _expert_tensors(model):
        host = False
        for p, buft in pats:
            try:
                if re.search(p, name):
                    host = is_host_buffer(buft)
                    break
            except re.error:
                notes.append(f"-ot pattern {p!r} is not a valid regular expression")
                break
        hits.setdefault(layer, []).append(host)
    partial = sorted(i for i, v in hits.items() if any(v) and not all(v))
    if partial:
        notes.append(f"blocks {partial} have only some expert tensors on the CPU; counted as GPU blocks")
    return tuple(sorted(i for i, v in hits.items() if all(v))), notes


def cpu_layers_from_overrides(model: ModelSpec, run: RunLog) -> tuple[tuple[int, ...], list[str]]:
    """The MoE blocks whose every expert tensor the loader logged as overridden to a host buffer."""
    host_names = {o.tensor for o in run.overrides if is_host_buffer(o.buffer_type)}
    notes = []
    experts = _expert_tensors(model)
    known = {n for n, _ in experts}
    other = sorted(n for n in host_names if n not in known)
    if other:
        notes.append(f"{len(other)} overridden tensors are not routed experts of this model (e.g. {other[0]}): "
                     "the plan does not place those")
    by_layer: dict[int, list[bool]] = {}
    for name, layer in experts:
        by_layer.setdefault(layer, []).append(name in host_names)
    partial = sorted(i for i, v in by_layer.items() if any(v) and not all(v))
    if partial:
        notes.append(f"blocks {partial} have only some expert tensors on the CPU; counted as GPU blocks")
    return tuple(sorted(i for i, v in by_layer.items() if all(v))), notes


def _bench_patterns(rec: dict) -> list[tuple[str, str]]:
    # mainline: tensor_buft_overrides, items joined by ';'; ik_llama.cpp: override_tensor, joined by ','
    ik = "override_tensor" in rec and "tensor_buft_overrides" not in rec
    s = str(rec.get("override_tensor" if ik else "tensor_buft_overrides") or "none")
    if s == "none":
        return []
    pairs = (item.rsplit("=", 1) for item in s.split("," if ik else ";") if "=" in item)
    return [(pat, buft) for pat, buft in pairs]


def _cpu_layer_count_from_buffers(run: RunLog, model: ModelSpec) -> int | None:
    """How many MoE layers' experts the host model buffers of a GPU run hold: the n whose first n
    MoE blocks' expert bytes equal (host weights - token_embd) within 0.5% (MoE blocks of one
    model differ little, so n is what the bytes say even when other blocks were chosen)."""
    if not any(not b.host for b in run.buffers if b.kind == "model"):
        return None
    host = sum(b.bytes for b in run.buffers if b.kind == "model" and b.host and "REPACK" not in b.buffer_type)
    moe = model.moe_layers
    if not host or not moe:
        return None
    embd = sum(t.n_bytes for t in model.globals if t.group == "embed")
    want = host - embd
    acc, best = 0, None
    for n in range(len(moe) + 1):
        if n:
            acc += moe[n - 1].expert_bytes
        if abs(acc - want) <= 0.005 * host + 64 * 1024 and (best is None or abs(acc - want) < best[1]):
            best = (n, abs(acc - want))
    return best[0] if best else None


def program_of(run: RunLog) -> str:
    if run.program:
        return run.program
    b = backends.of_log(run.tool)
    return b.log_program if b else ""


def _int(v) -> int | None:
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        return None


def _recover_cpu_experts(run: RunLog, model: ModelSpec, p: Placement, base: Placement | None, flags: dict,
                         rec: dict, backend: str, ch: dict, ev: dict[str, str], notes: list[str]) -> None:
    """Which MoE blocks kept their experts on the CPU."""
    moe = model.moe_layer_indices
    if run.offloaded_layers is not None and run.offloaded_layers[0] == 0:
        # -ngl 0: every block, experts included, stays on the CPU
        ch["cpu_moe_layers"], ev["cpu_moe_layers"] = moe, "log"
    elif run.overrides:
        cpu, n = cpu_layers_from_overrides(model, run)
        ch["cpu_moe_layers"], ev["cpu_moe_layers"] = cpu, "log"
        notes += n
    elif flags and (override_patterns(flags) or any(k in flags for k in ("--n-cpu-moe", "-ncmoe", "--cpu-moe", "-cmoe"))):
        pats = override_patterns(flags)
        if "--cpu-moe" in flags or "-cmoe" in flags:
            pats.append((_EXPS_RE, "CPU"))
        cpu, n = cpu_layers_from_patterns(model, pats)
        ncm = _int(_first(flags, "--n-cpu-moe", "-ncmoe"))
        if ncm:
            extra = (layers_from_last(moe, ncm) if backends.behaviour(backend).n_cpu_moe_from == "last"
                     else tuple(i for i in moe if i < ncm))
            cpu = tuple(sorted(set(cpu) | set(extra)))
        ch["cpu_moe_layers"], ev["cpu_moe_layers"] = cpu, "flags"
        notes += n
    elif flags:
        ch["cpu_moe_layers"], ev["cpu_moe_layers"] = (), "flags"
    elif rec and ("tensor_buft_overrides" in rec or "override_tensor" in rec or "n_cpu_moe" in rec):
        cpu, n = cpu_layers_from_patterns(model, _bench_patterns(rec))
        ncm = _int(rec.get("n_cpu_moe")) or 0
        cpu = tuple(sorted(set(cpu) | {i for i in moe if i < ncm}))
        ch["cpu_moe_layers"], ev["cpu_moe_layers"] = cpu, "llama-bench"
        notes += n
    elif (n_cpu := _cpu_layer_count_from_buffers(run, model)) is not None:
        # only how many: the first n MoE blocks stand for them (their bytes are what the buffers show)
        ch["cpu_moe_layers"], ev["cpu_moe_layers"] = moe[:n_cpu], "buffer sizes"
        notes.append(f"the host model buffer holds the experts of {n_cpu} MoE layers; which ones is not logged "
                     "(run with -v so the loader logs each overridden tensor): the first are assumed")
    else:
        ev["cpu_moe_layers"] = "plan" if base else "default"
        notes.append("the log does not show where the experts were: run with -v (--verbose) so the loader logs "
                     "each overridden tensor, or keep the command line in the log")


def _recover_context(run: RunLog, model: ModelSpec, p: Placement, base: Placement | None, flags: dict,
                     rec: dict, backend: str, ch: dict, ev: dict[str, str], notes: list[str]) -> None:
    """Context, batches, cache types, flash attention, threads."""
    c = run.context

    def take(fieldname: str, log_val, flag_val, bench_val=None, conv=int):
        for src, v in (("log", log_val), ("flags", flag_val), ("llama-bench", bench_val)):
            if v is None or v == "":
                continue
            try:
                ch[fieldname] = conv(v)
            except (TypeError, ValueError):
                continue
            ev[fieldname] = src
            return
        ev.setdefault(fieldname, "plan" if base else "default")

    take("n_ctx", c.get("n_ctx"), _first(flags, "-c", "--ctx-size"))
    take("n_seq", c.get("n_seq_max"), _first(flags, "-np", "--parallel"))
    take("n_batch", c.get("n_batch"), _first(flags, "-b", "--batch-size"), rec.get("n_batch"))
    take("n_ubatch", c.get("n_ubatch"), _first(flags, "-ub", "--ubatch-size"), rec.get("n_ubatch"))
    take("cache_type_k", c.get("type_k"), _first(flags, "-ctk", "--cache-type-k"), rec.get("type_k"), str.lower)
    take("cache_type_v", c.get("type_v"), _first(flags, "-ctv", "--cache-type-v"), rec.get("type_v"), str.lower)

    def boolish(v):
        s = str(v).strip().lower()
        if s in _BOOL:
            return _BOOL[s]
        raise ValueError(v)

    fa_log = c.get("flash_attn")
    if fa_log is not None and str(fa_log).lower() == "auto":
        fa_log = None  # resolved later in the log ('Flash Attention was auto, set to enabled')
    take("flash_attn", fa_log, _first(flags, "-fa", "--flash-attn"), rec.get("flash_attn"), boolish)
    take("kv_unified", c.get("kv_unified"), "true" if "-kvu" in flags or "--kv-unified" in flags else
         ("false" if "-no-kvu" in flags else None), None, boolish)
    # llama-server and llama-cli (which runs the server) reserve n_seq outputs
    # (tools/server/server-context.cpp server_output_limits); the others keep n_batch
    prog = program_of(run)
    take("n_outputs_max", c.get("n_outputs_max"),
         (c.get("n_seq_max") or _first(flags, "-np", "--parallel") or 1) if prog in ("llama-server", "llama-cli")
         else None)
    take("n_threads", run.threads.get("n_threads"), _first(flags, "-t", "--threads"), rec.get("n_threads"))
    take("n_threads_batch", run.threads.get("n_threads_batch"), _first(flags, "-tb", "--threads-batch"))
    if "n_outputs_max" in ch and ch["n_outputs_max"] == ch.get("n_batch", p.n_batch):
        ch["n_outputs_max"] = 0  # the library default (Placement: 0 = n_batch)


def _recover_switches(run: RunLog, model: ModelSpec, p: Placement, base: Placement | None, flags: dict,
                      rec: dict, backend: str, ch: dict, ev: dict[str, str], notes: list[str]) -> None:
    """Op offload, KV offload, NUMA policy, experts used."""
    if "--no-op-offload" in flags or str(rec.get("no_op_offload", "")).lower() in ("1", "true"):
        ch["op_offload"], ev["op_offload"] = False, "flags" if flags else "llama-bench"
    elif flags or rec:
        ch["op_offload"], ev["op_offload"] = True, "flags" if flags else "llama-bench"
    if "-nkvo" in flags or "--no-kv-offload" in flags:
        ch["kv_offload"], ev["kv_offload"] = False, "flags"
    numa = _first(flags, "--numa")
    if numa:
        ch["numa"], ev["numa"] = numa, "flags"
    for v in flags.get("--override-kv", []):
        m = re.match(r"[\w.]+\.expert_used_count=int:(\d+)$", v)
        if m:
            ch["n_experts_used"], ev["n_experts_used"] = int(m.group(1)), "flags"


def _recover_load_mode(run: RunLog, model: ModelSpec, p: Placement, base: Placement | None, flags: dict,
                       rec: dict, backend: str, ch: dict, ev: dict[str, str], notes: list[str]) -> None:
    """mmap, no-mmap or mlock."""
    model_bufs = [b for b in run.buffers if b.kind == "model"]
    lm = _first(flags, "-lm", "--load-mode")
    if "--mlock" in flags or lm == "mlock":
        ch["load_mode"], ev["load_mode"] = "mlock", "flags"
    elif "--no-mmap" in flags or lm in ("none", "no-mmap", "read"):
        ch["load_mode"], ev["load_mode"] = "no-mmap", "flags"
    elif any(b.buffer_type.endswith("_Mapped") for b in model_bufs):
        ch["load_mode"], ev["load_mode"] = "mmap", "log"
    elif any(b.host for b in model_bufs) and not getattr(backends.of_log(run.tool), "mapped_buffer_named_cpu", False):
        # ik_llama.cpp names its mapped buffer plain "CPU" (ggml_backend_cpu_buffer_from_ptr), so
        # its buffers do not tell mmap from --no-mmap
        ch["load_mode"], ev["load_mode"] = "no-mmap", "log"
    elif lm == "mmap":
        ch["load_mode"], ev["load_mode"] = "mmap", "flags"
    elif str(rec.get("load_mode", "")) in ("none", "mmap", "mlock", "mmap+mlock"):
        # llama-bench's load_mode field (tools/llama-bench/llama-bench.cpp -lm, llama_load_mode_name)
        v = str(rec["load_mode"])
        ch["load_mode"] = "no-mmap" if v == "none" else ("mlock" if "mlock" in v else "mmap")
        ev["load_mode"] = "llama-bench"


def _recover_devices(run: RunLog, model: ModelSpec, p: Placement, base: Placement | None, flags: dict,
                     rec: dict, backend: str, ch: dict, ev: dict[str, str], notes: list[str]) -> None:
    """How many GPUs ran it, and a partial -ngl."""
    gpus = [d.name for d in run.devices if not is_host_buffer(d.name)]
    if not gpus:
        gpus = [m.name for m in run.memory if not m.host]
    if not gpus:
        gpus = sorted({b.buffer_type for b in run.buffers if not b.host})
    ngl = _first(flags, "-ngl", "--gpu-layers", "--n-gpu-layers")
    if run.offloaded_layers is not None and run.offloaded_layers[0] == 0:
        ch["n_gpus"], ev["n_gpus"] = 0, "log"
    elif gpus:
        ch["n_gpus"], ev["n_gpus"] = len(gpus), "log"
    elif run.buffers or run.devices:
        ch["n_gpus"], ev["n_gpus"] = 0, "log"  # a CPU-only build or run
    elif ngl is not None and _int(ngl) == 0:
        ch["n_gpus"], ev["n_gpus"] = 0, "flags"
    if run.offloaded_layers is not None and gpus:
        n_off, n_all = run.offloaded_layers
        if n_off < n_all:
            notes.append(f"only {n_off} of {n_all} layers were offloaded (-ngl {n_off}): the rest run whole on the "
                         "CPU, which moeplan's placements do not do")


def recover_placement(run: RunLog, model: ModelSpec, base: Placement | None = None) -> Recovered:
    """The Placement the log's run used, on top of `base` (the plan's, or the defaults) for what
    the log does not state."""
    p = base or Placement()
    ev: dict[str, str] = {}
    notes: list[str] = []
    flags = flag_values(run.args) if run.args else {}
    rec = run.bench[0] if run.bench else {}
    ch: dict = {}
    from_log = backends.of_log(run.tool)
    backend = from_log.name if from_log else p.backend
    ch["backend"] = backend
    ev["backend"] = "log" if run.tool != "unknown" else "default"

    _recover_cpu_experts(run, model, p, base, flags, rec, backend, ch, ev, notes)
    _recover_context(run, model, p, base, flags, rec, backend, ch, ev, notes)
    _recover_switches(run, model, p, base, flags, rec, backend, ch, ev, notes)
    _recover_load_mode(run, model, p, base, flags, rec, backend, ch, ev, notes)
    _recover_devices(run, model, p, base, flags, rec, backend, ch, ev, notes)
    if "cpu_moe_layers" in ch:
        ch["cpu_moe_layers"] = tuple(ch["cpu_moe_layers"])
    placement = p.with_(**ch)
    return Recovered(placement=placement, evidence=ev, notes=tuple(notes),
                     layer_devices=dict(run.layer_devices), program=program_of(run))
