"""Read what a llama.cpp-family run printed: flags, placement, buffers, memory, speed (pure).

Every pattern follows the format string that prints it; file:line refer to llama.cpp at commit
0c1e570 (the vendored source moeplan's flags are checked against) unless another project is
named. ik_llama.cpp (github.com/ikawrakow/ik_llama.cpp) keeps llama.cpp's older function names
(llm_load_tensors, llama_kv_cache_init, llama_new_context_with_model, llama_print_timings) and
its own override line; both are read.

  tensor override    src/llama-model-loader.cpp:1253  "tensor %s (%zu MiB %s) buffer type overridden to %s"
                     ik_llama.cpp src/llama-load-tensors.cpp "Tensor %s buffer type overriden to %s"
  model buffers      src/llama-model.cpp:1930  "%s: %12s model buffer size = %8.2f MiB"
                     ik_llama.cpp "llm_load_tensors: %10s buffer size = %8.2f MiB"
  layer devices      src/llama-model.cpp:1594,1599 (debug) "load_tensors: layer %3d assigned to device %s, is_swa = %d"
  offloaded layers   src/llama-model.cpp:1924  "%s: offloaded %d/%d layers to GPU"
  KV buffers         src/llama-kv-cache.cpp:291 "%s: %10s KV buffer size = %8.2f MiB"
  KV size / types    src/llama-kv-cache.cpp:301 "%s: size = %7.2f MiB (%6u cells, %3d layers, %2u/%u seqs), K (%s): ..."
  recurrent state    src/llama-memory-recurrent.cpp:124 "%s: %10s RS buffer size = %8.2f MiB"
  output buffer      src/llama-context.cpp:381 "%s: %10s  output buffer size = %8.2f MiB"
  compute buffers    src/llama-context.cpp:740 "%s: %10s compute buffer size = %8.2f MiB"
  context params     src/llama-context.cpp:308-315 "%s: n_ctx                 = %u" ...
  devices            src/llama.cpp:306 "%s: using device %s (%s) (%s) - %zu MiB free"
  model file / meta  src/llama-model-loader.cpp:722 "loaded meta data with %d key-value pairs and %d tensors from %s";
                     src/llama-model.cpp:2067-2169 print_info "%s: arch = %s", n_layer, n_expert, general.name
  threads, CPU ISA   common/common.cpp:423 "system_info: n_threads = %d (n_threads_batch = %d) / %d | ..."
  memory breakdown   common/fit.cpp:921-923 (templates), printed by common_memory_breakdown_print
  --fit dry runs     common/fit.cpp:58-66 common_get_device_memory_data_impl: with -fit on (the default)
                     common/common.cpp:1225 first loads the model with no_alloc = true and creates a
                     context, logging through a callback that demotes every line to DEBUG, so with -v
                     the whole load (devices, overrides, buffers) is printed once per dry run and then
                     again for the real load (common.cpp:1234). A load starts at "loaded meta data
                     ... from PATH" (or at "using device" lines printed just before it by older
                     builds); when the same PATH is loaded again, only the last load of it is read
                     (`RunLog.superseded_loads` counts the dry runs skipped). A draft model (another
                     PATH) is kept. The dry run's figures differ from the real load's (0c1e570 on
                     two RPC devices: model and KV 0.00 MiB, one compute buffer 17.80 for 17.30).
                     "%s: | %s | %s = %s + (%s = %s + %s + %s) + %s |" per device,
                     "%s: | %s | %s   %s    %s = %s + %s + %s    %s |" host
  speeds             src/llama-context.cpp:4434-4436 llama_perf_context_print, common/sampling.cpp:574-576
                     common_perf_print, tools/server/server-context.cpp:613-617 print_timings:
                     "prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)"
                     "       eval time = %10.2f ms / %5d runs   (...)"; tools/cli/cli-context.cpp:657
                     "[ Prompt: %.1f t/s | Generation: %.1f t/s ]"
  llama-bench        tools/llama-bench/llama-bench.cpp:1802-1829 json, 1832-1846 jsonl,
                     1850-2115 markdown ("| model | size | ... | test | t/s |", "pp%d", "tg%d", " @ d%d", "%.2f ± %.2f")
  KTransformers      ktransformers/util/utils.py prefill_and_generate (kvcache-ai/ktransformers 038bc30):
                     "prompt eval count:    {n} token(s)", "prompt eval rate:     {x} tokens/s", "eval rate: ..."
  SGLang             python/sglang/srt/managers/scheduler*.py: "Decode batch. #running-req: N, ... gen throughput
                     (token/s): X", "Prefill batch. ... input throughput (token/s): X"; python/sglang/bench_one_batch.py
                     "Prefill. latency: %f s, throughput: %f token/s",
                     "Decode.  median latency: ..., median throughput: %f token/s"

Tolerance: CRLF and ANSI colour codes are stripped; every pattern is searched anywhere in its
line (log prefixes, timestamps), extra columns in llama-bench tables are ignored, and a line that
names one of these figures but does not fit its pattern is listed in `RunLog.unread`.
"""
from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import asdict, dataclass, field

from moeplan.planner import backends

MIB = 1024 * 1024

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+|inf|nan)"

# buffer types that live in host memory (ggml_backend_buft_is_host); the others are devices
HOST_BUFFER_PREFIXES = ("CPU", "AMX", "CUDA_Host", "ROCm_Host", "SYCL_Host", "Vulkan_Host", "CANN_Host",
                        "MUSA_Host", "Metal_Mapped_Host", "Host")
PROGRAMS = ("llama-server", "llama-cli", "llama-completion", "llama-bench", "llama-sweep-bench", "llama-mtmd-cli",
            "llama-perplexity", "main", "server")


def is_host_buffer(name: str) -> bool:
    return name.startswith(HOST_BUFFER_PREFIXES) or name.lower() == "host"


@dataclass(frozen=True)
class Buffer:
    """One `<buffer type> <kind> buffer size = X MiB` line. kind: model, KV, RS, compute, output."""

    kind: str
    buffer_type: str
    mib: float
    line_no: int

    @property
    def bytes(self) -> int:
        return round(self.mib * MIB)

    @property
    def host(self) -> bool:
        return is_host_buffer(self.buffer_type)


@dataclass(frozen=True)
class DeviceMemory:
    """One row of the memory breakdown table (integer MiB; total/free/unaccounted only for devices)."""

    name: str
    description: str
    self_mib: int
    model_mib: int
    context_mib: int
    compute_mib: int
    total_mib: int | None = None
    free_mib: int | None = None
    unaccounted_mib: int | None = None
    line_no: int = 0

    @property
    def host(self) -> bool:
        return self.total_mib is None


@dataclass(frozen=True)
class Override:
    tensor: str
    buffer_type: str
    size_mib: int | None = None
    ggml_type: str = ""


@dataclass(frozen=True)
class Device:
    name: str
    description: str
    free_mib: int | None


@dataclass(frozen=True)
class Speed:
    """One speed figure. metric: 'prefill' (prompt tokens/s) or 'decode' (generated tokens/s).
    n_tokens: prompt tokens (prefill) or generated tokens (decode); depth: tokens in context
    before (llama-bench n_depth)."""

    metric: str
    tok_s: float
    source: str
    n_tokens: int = 0
    depth: int = 0
    ms: float | None = None
    n_parallel: int = 1  # requests decoded together (SGLang #running-req)
    stddev_tok_s: float | None = None
    line_no: int = 0


@dataclass(frozen=True)
class RunLog:
    source: str  # file name or '-'
    tool: str  # llama.cpp, ik_llama.cpp, llama-bench, ktransformers, sglang, unknown
    program: str = ""  # llama-server, llama-completion, llama-bench, ... when the log shows it
    args: tuple[str, ...] = ()
    model_path: str = ""
    model_meta: dict = field(default_factory=dict)
    context: dict = field(default_factory=dict)  # n_ctx, n_ubatch, type_k, ... as printed
    threads: dict = field(default_factory=dict)  # n_threads, n_threads_batch, n_cpus
    cpu_features: dict = field(default_factory=dict)
    devices: tuple[Device, ...] = ()
    offloaded_layers: tuple[int, int] | None = None
    layer_devices: dict = field(default_factory=dict)  # block index -> device (printed with -v)
    overrides: tuple[Override, ...] = ()
    buffers: tuple[Buffer, ...] = ()
    memory: tuple[DeviceMemory, ...] = ()
    speeds: tuple[Speed, ...] = ()
    bench: tuple[dict, ...] = ()
    unread: tuple[tuple[int, str], ...] = ()
    n_lines: int = 0
    superseded_loads: int = 0  # loads of the same model file before the last one (--fit dry runs)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["buffers"] = [dict(asdict(b), bytes=b.bytes, host=b.host) for b in self.buffers]
        d["unread"] = [{"line": n, "text": t} for n, t in self.unread]
        return d

    def buffer_total(self, kind: str, host: bool | None = None) -> int | None:
        """Bytes of every `kind` buffer (host only, device only, or all); None when none was printed."""
        bs = [b for b in self.buffers if b.kind == kind and (host is None or b.host == host)]
        return sum(b.bytes for b in bs) if bs else None


# ---- patterns -------------------------------------------------------------------------------

_OVERRIDE = re.compile(r"tensor (\S+) \((\d+) MiB (\w+)\) buffer type overridden to (\S+)")
# ik_llama.cpp: "Tensor %s buffer type overriden to %s" (older), and at 8337e4cd3
# "Tensor %s (size = %.2f MiB) buffer type overridden to %s" (src/llama-load-tensors.cpp:466)
_OVERRIDE_IK = re.compile(r"Tensor (\S+)(?: \(size = " + _NUM + r" MiB\))? buffer type overrid?den to (\S+)")
_BUFFER = re.compile(r"(\w+):\s+(\S.*?)\s+buffer size\s*=\s*(" + _NUM + r")\s*MiB")
_BUFFER_KINDS = {"model": "model", "kv": "KV", "rs": "RS", "compute": "compute", "output": "output"}
_LAYER_DEV = re.compile(r"layer\s+(\d+) assigned to device (\S+?),? is_swa")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_KV_SIZE = re.compile(r"size =\s*(" + _NUM + r") MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/(\d+) seqs\), "
                      r"K \((\w+)\):\s*(" + _NUM + r") MiB, V \((\w+)\):\s*(" + _NUM + r") MiB")
_KV_SELF_IK = re.compile(r"KV self size\s*=\s*(" + _NUM + r") MiB, (?:K \((\w+)\):\s*" + _NUM + r" MiB, V \((\w+)\)|"
                         r"c\^KV \((\w+)\))")
_CPARAM = re.compile(r"(?:llama_context|llama_new_context_with_model|llama_init_from_model):\s+(\w+)\s*=\s*(\S.*?)\s*$")
_META = re.compile(r"(?:print_info|llm_load_print_meta):\s+([\w.]+(?: [\w.]+)?)\s*=\s*(\S.*?)\s*$")
_LOADED = re.compile(r"loaded meta data with \d+ key-value pairs and (\d+) tensors from (.+?) \(version")
_DEVICE = re.compile(r"using device (\S+) \((.*?)\)(?: \((.*?)\))? - (\d+) MiB free")
_SYSINFO = re.compile(r"system_info: n_threads = (\d+)(?: \(n_threads_batch = (\d+)\))? / (\d+) \|(.*)$")
_FEATURE = re.compile(r"(\w+) = (\w+)")
_PROMPT_T = re.compile(r"prompt eval time =\s*(" + _NUM + r") ms /\s*(\d+) tokens \(\s*(" + _NUM + r") ms per token,\s*("
                       + _NUM + r") tokens per second\)")
_EVAL_T = re.compile(r"(?<!prompt )\beval time =\s*(" + _NUM + r") ms /\s*(\d+) (?:runs|tokens)\s*\(\s*(" + _NUM
                     + r") ms per token,\s*(" + _NUM + r") tokens per second\)")
_SAMPLE_T = re.compile(r"sample time =\s*" + _NUM + r" ms")
_CLI_T = re.compile(r"\[ Prompt: (" + _NUM + r") t/s \| Generation: (" + _NUM + r") t/s \]")
_BREAKDOWN = re.compile(r"\|\s*-\s+(.+?)\s*\|\s*(.*?)\s*\|\s*$")
_BD_DEVICE = re.compile(r"^(\d+)\s*=\s*(\d+)\s*\+\s*\(\s*(\d+)\s*=\s*(\d+)\s*\+\s*(\d+)\s*\+\s*(\d+)\s*\)\s*\+\s*(-?\d+)$")
_BD_OTHER = re.compile(r"^(\d+)\s*=\s*(\d+)\s*\+\s*(\d+)\s*\+\s*(\d+)$")
_KT_PROMPT_N = re.compile(r"^\s*prompt eval count:\s*(\d+) token\(s\)")
_KT_PROMPT_R = re.compile(r"^\s*prompt eval rate:\s*(" + _NUM + r")\s*tokens/s")
_KT_EVAL_N = re.compile(r"^\s*eval count:\s*(\d+) token\(s\)")
_KT_EVAL_R = re.compile(r"^\s*eval rate:\s*(" + _NUM + r")\s*tokens/s")
_SGL_DECODE = re.compile(r"Decode batch[.,] #running-req: (\d+),.*?gen throughput \(token/s\): (" + _NUM + ")")
_SGL_PREFILL = re.compile(r"Prefill batch[.,] #new-seq: (\d+), #new-token: (\d+),.*?input throughput \(token/s\): ("
                          + _NUM + ")")
_SGL_BENCH_PREFILL = re.compile(r"Prefill\. latency: (" + _NUM + r") s, throughput:\s*(" + _NUM + r") token/s")
_SGL_BENCH_DECODE = re.compile(r"Decode\.\s+median latency: (" + _NUM + r") s, median throughput:\s*(" + _NUM
                               + r") token/s")
_SERVER = re.compile(r"^(?:srv|slot)\s+\w+: |server is listening on")
_BENCH_TEST = re.compile(r"^(?:pp(\d+))?(?:\+?tg(\d+))?(?: @ d(\d+))?$")
_BENCH_TS = re.compile(r"^(" + _NUM + r")(?:\s*±\s*(" + _NUM + r"))?$")
_SIZE_MIB = re.compile(r"(" + _NUM + r")\s*(MiB|GiB)")

# words that mark a line as one that should have been read (reported when no pattern fits)
_TRIGGERS = ("buffer size =", "buffer type overrid", "eval time =", "tokens per second", "gen throughput",
             "input throughput", "eval rate:", "using device", "system_info:", "offloaded ", "memory breakdown")


def _f(text: str) -> float:
    return float(text)


def _clean(line: str) -> str:
    return _ANSI.sub("", line.rstrip("\r\n").replace("\r", ""))


def _args_of(line: str) -> tuple[str, ...] | None:
    """An echoed command line (`+ llama-server -m ...` from bash -x, `$ ...`, or plain)."""
    s = line.strip()
    for pre in ("+ ", "$ ", "> ", "Command: ", "command: ", "cmd: "):
        if s.startswith(pre):
            s = s[len(pre):].strip()
    try:
        words = shlex.split(s)
    except ValueError:
        return None
    # a wrapper (exec, numactl ..., env, taskset ...) may come first: start at the program
    at = next((i for i, w in enumerate(words) if w.split("/")[-1] in PROGRAMS), None)
    if at is None:
        return None
    words = words[at:]
    if not words:
        return None
    prog = words[0].split("/")[-1]
    if prog in PROGRAMS and len(words) > 1 and any(w in ("-m", "--model", "-hf", "--hf-repo") for w in words[1:]):
        return tuple(words)
    return None


def _read_buffer(m: re.Match, line_no: int) -> Buffer | None:
    func, head, mib = m.group(1), m.group(2).split(), m.group(3)
    kind = _BUFFER_KINDS.get(head[-1].lower()) if head else None
    if kind is not None:
        head = head[:-1]
    elif func in ("llm_load_tensors", "load_tensors"):
        kind = "model"  # ik_llama.cpp: "llm_load_tensors: CUDA0 buffer size = ..."
    else:
        kind = head[-1] if head else ""
        head = head[:-1]
    if not head or not kind:
        return None
    return Buffer(kind=kind, buffer_type=" ".join(head), mib=_f(mib), line_no=line_no)


def _breakdown_row(line: str, line_no: int) -> DeviceMemory | None | bool:
    """A memory breakdown row; True for the header row; None when the line is not a row."""
    if "memory breakdown [MiB]" in line:
        return True
    m = _BREAKDOWN.search(line)
    if not m:
        return None
    label, cells = m.group(1), " ".join(m.group(2).split())
    name, _, desc = label.partition(" (")
    desc = desc[:-1] if desc.endswith(")") else desc
    d = _BD_DEVICE.match(cells)
    if d:
        t, fr, s, mo, c, co, u = (int(x) for x in d.groups())
        return DeviceMemory(name=name.strip(), description=desc, total_mib=t, free_mib=fr, self_mib=s, model_mib=mo,
                            context_mib=c, compute_mib=co, unaccounted_mib=u, line_no=line_no)
    o = _BD_OTHER.match(cells)
    if o:
        s, mo, c, co = (int(x) for x in o.groups())
        return DeviceMemory(name=name.strip(), description=desc, self_mib=s, model_mib=mo, context_mib=c,
                            compute_mib=co, line_no=line_no)
    return False  # a row that does not fit


def _bench_records(text: str) -> list[dict] | None:
    """llama-bench -o json (an array) or -o jsonl (one object a line); None when there is none."""
    s = text.lstrip()
    start = text.find("[\n")
    if s.startswith("[") or start >= 0:
        body = s if s.startswith("[") else text[start:]
        end = body.rfind("]")
        try:
            data = json.loads(body[:end + 1])
            if isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
                return data
        except json.JSONDecodeError:
            pass
    recs = []
    for line in text.splitlines():
        t = line.strip()
        if t.startswith("{") and t.endswith("}"):
            try:
                r = json.loads(t)
            except json.JSONDecodeError:
                continue
            if isinstance(r, dict) and ("avg_ts" in r or "n_prompt" in r):
                recs.append(r)
    return recs or None


def speeds_from_bench(records: list[dict]) -> list[Speed]:
    """llama-bench test records -> speeds: pp tests are prefill, tg tests decode (pp+tg tests mix both
    and are skipped)."""
    out = []
    for r in records:
        try:
            n_p, n_g, ts = int(r.get("n_prompt", 0)), int(r.get("n_gen", 0)), float(r["avg_ts"])
        except (KeyError, TypeError, ValueError):
            continue
        depth = int(r.get("n_depth", 0) or 0)
        sd = r.get("stddev_ts")
        sd = float(sd) if isinstance(sd, (int, float)) else None
        no = int(r.get("line_no", 0) or 0)
        if n_p and not n_g:
            out.append(Speed("prefill", ts, "llama-bench", n_tokens=n_p, depth=depth, stddev_tok_s=sd, line_no=no))
        elif n_g and not n_p:
            out.append(Speed("decode", ts, "llama-bench", n_tokens=n_g, depth=depth, stddev_tok_s=sd, line_no=no))
    return out


def _markdown_bench(lines: list[tuple[int, str]]) -> tuple[list[dict], list[tuple[int, str]]]:
    """llama-bench's markdown table -> records with the fields it shows (test/t/s parsed)."""
    recs: list[dict] = []
    bad: list[tuple[int, str]] = []
    header: list[str] | None = None
    for no, line in lines:
        s = line.strip()
        if not (s.startswith("|") and s.endswith("|")):
            header = None if not s else header
            continue
        cells = [c.strip() for c in s.strip("|").split("|")]
        if "test" in cells and "t/s" in cells:
            header = cells
            continue
        if header is None or all(set(c) <= set("-: ") for c in cells):
            continue
        if len(cells) != len(header):
            bad.append((no, line))
            continue
        row = dict(zip(header, cells))
        t, v = _BENCH_TEST.match(row["test"]), _BENCH_TS.match(row["t/s"])
        if not t or not v or not (t.group(1) or t.group(2)):
            bad.append((no, line))
            continue
        rec: dict[str, object] = {k: row[k] for k in header if k not in ("test", "t/s")}
        rec.update(n_prompt=int(t.group(1) or 0), n_gen=int(t.group(2) or 0), n_depth=int(t.group(3) or 0),
                   avg_ts=_f(v.group(1)), stddev_ts=_f(v.group(2)) if v.group(2) else None, line_no=no)
        if "threads" in rec:
            rec["n_threads"] = rec.pop("threads")
        if "ngl" in rec:
            rec["n_gpu_layers"] = rec.pop("ngl")
        recs.append(rec)
    return recs, bad


def superseded_load_lines(lines: list[tuple[int, str]]) -> tuple[set[int], int]:
    """Line numbers of model loads that a later load of the same file replaced (the dry runs of
    llama.cpp's --fit, see the module docstring), and how many such loads there were.

    A load starts at its "loaded meta data" line, or at the "using device" lines just before it
    when they come first (builds that print the devices before reading the file); device lines
    after a load's header and before its buffers (0c1e570: llama_prepare_model_devices) belong
    to that load. It ends where the next load starts."""
    starts: list[tuple[int, str]] = []  # (index into lines where a load starts, model path)
    pending: int | None = None  # first "using device" line not yet followed by a buffer line
    for idx, (_, line) in enumerate(lines):
        if _DEVICE.search(line):
            if pending is None:
                pending = idx
        elif (m := _LOADED.search(line)):
            starts.append((idx if pending is None else pending, m.group(2)))
            pending = None
        elif _BUFFER.search(line):
            pending = None
    last = {path: i for i, (_, path) in enumerate(starts)}
    skip: set[int] = set()
    n = 0
    for i, (start, path) in enumerate(starts):
        if last[path] == i:
            continue
        end = starts[i + 1][0] if i + 1 < len(starts) else len(lines)
        skip.update(lines[j][0] for j in range(start, end))
        n += 1
    return skip, n


def parse_log(text: str, source: str = "-") -> RunLog:
    """Everything a llama.cpp / ik_llama.cpp / llama-bench / KTransformers / SGLang output states."""
    raw = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = [(i + 1, _clean(s)) for i, s in enumerate(raw.split("\n"))]
    superseded, n_superseded = superseded_load_lines(lines)
    if superseded:
        lines = [(no, line) for no, line in lines if no not in superseded]
    bench = _bench_records(raw)
    args: tuple[str, ...] = ()
    meta: dict = {}
    ctx: dict = {}
    threads: dict = {}
    feats: dict = {}
    devices: list[Device] = []
    overrides: list[Override] = []
    buffers: list[Buffer] = []
    memory: list[DeviceMemory] = []
    speeds: list[Speed] = []
    unread: list[tuple[int, str]] = []
    model_path = ""
    offloaded = None
    layer_devices: dict[int, str] = {}
    ik = False
    kt_prompt_n = kt_eval_n = 0
    tool_hits: set[str] = set()
    in_json = bench is not None and raw.lstrip().startswith(("[", "{"))
    for no, line in lines:
        if not line.strip() or in_json or line.lstrip().startswith("#"):
            continue  # '#' lines are comments (a header saying where the log came from)
        read = True
        if (m := _OVERRIDE.search(line)):
            overrides.append(Override(m.group(1), m.group(4), int(m.group(2)), m.group(3)))
        elif (m := _OVERRIDE_IK.search(line)):
            ik = True
            overrides.append(Override(m.group(1), m.group(2)))
        elif (m := _BUFFER.search(line)):
            b = _read_buffer(m, no)
            if b is None:
                unread.append((no, line))
            elif b.kind in ("model", "KV", "RS", "compute", "output"):
                buffers.append(b)
                ik = ik or m.group(1) in ("llm_load_tensors", "llama_kv_cache_init", "llama_new_context_with_model")
        elif (m := _LAYER_DEV.search(line)):
            layer_devices[int(m.group(1))] = m.group(2)
        elif (m := _OFFLOADED.search(line)):
            offloaded = (int(m.group(1)), int(m.group(2)))
        elif (m := _KV_SIZE.search(line)):
            ctx.update(kv_cells=int(m.group(2)), kv_layers=int(m.group(3)), type_k=m.group(6), type_v=m.group(8))
        elif (m := _KV_SELF_IK.search(line)):
            ik = True
            if m.group(4):
                ctx.update(type_k=m.group(4), type_v=m.group(4))
            else:
                ctx.update(type_k=m.group(2), type_v=m.group(3))
        elif (m := _LOADED.search(line)):
            model_path = m.group(2)
            meta["n_tensors"] = int(m.group(1))
        elif (m := _DEVICE.search(line)):
            devices.append(Device(m.group(1), m.group(2), int(m.group(4))))
        elif (m := _SYSINFO.search(line)):
            threads.update(n_threads=int(m.group(1)), n_cpus=int(m.group(3)))
            if m.group(2):
                threads["n_threads_batch"] = int(m.group(2))
            feats.update({k: v for k, v in _FEATURE.findall(m.group(4))})
        elif (m := _PROMPT_T.search(line)):
            speeds.append(Speed("prefill", _f(m.group(4)), "timings", n_tokens=int(m.group(2)), ms=_f(m.group(1)),
                                line_no=no))
            tool_hits.add("llama_print_timings" if "llama_print_timings" in line else "")
        elif (m := _EVAL_T.search(line)):
            if "sample time" not in line:
                speeds.append(Speed("decode", _f(m.group(4)), "timings", n_tokens=int(m.group(2)),
                                    ms=_f(m.group(1)), line_no=no))
        elif _SAMPLE_T.search(line):
            read = True  # sampling time: read, but no throughput figure of the model
        elif (m := _CLI_T.search(line)):
            speeds.append(Speed("prefill", _f(m.group(1)), "llama-cli", line_no=no))
            speeds.append(Speed("decode", _f(m.group(2)), "llama-cli", line_no=no))
        elif (m := _CPARAM.search(line)):
            ctx[m.group(1)] = m.group(2)
            ik = ik or "llama_new_context_with_model" in line
        elif (m := _META.search(line)):
            meta[m.group(1)] = m.group(2)
            ik = ik or "llm_load_print_meta" in line
        elif (m := _KT_PROMPT_N.search(line)):
            kt_prompt_n = int(m.group(1))
        elif (m := _KT_PROMPT_R.search(line)):
            speeds.append(Speed("prefill", _f(m.group(1)), "ktransformers", n_tokens=kt_prompt_n, line_no=no))
            tool_hits.add("ktransformers")
        elif (m := _KT_EVAL_N.search(line)):
            kt_eval_n = int(m.group(1))
        elif (m := _KT_EVAL_R.search(line)):
            speeds.append(Speed("decode", _f(m.group(1)), "ktransformers", n_tokens=kt_eval_n, line_no=no))
            tool_hits.add("ktransformers")
        elif (m := _SGL_DECODE.search(line)):
            speeds.append(Speed("decode", _f(m.group(2)), "sglang", n_parallel=int(m.group(1)), line_no=no))
            tool_hits.add("sglang")
        elif (m := _SGL_PREFILL.search(line)):
            speeds.append(Speed("prefill", _f(m.group(3)), "sglang", n_tokens=int(m.group(2)),
                                n_parallel=int(m.group(1)), line_no=no))
            tool_hits.add("sglang")
        elif (m := _SGL_BENCH_PREFILL.search(line)):
            speeds.append(Speed("prefill", _f(m.group(2)), "sglang", ms=_f(m.group(1)) * 1e3, line_no=no))
            tool_hits.add("sglang")
        elif (m := _SGL_BENCH_DECODE.search(line)):
            speeds.append(Speed("decode", _f(m.group(2)), "sglang", ms=_f(m.group(1)) * 1e3, line_no=no))
            tool_hits.add("sglang")
        else:
            read = False
        if read:
            continue
        row = _breakdown_row(line, no)
        if row is True:
            continue
        if isinstance(row, DeviceMemory):
            memory.append(row)
            continue
        if row is False:
            unread.append((no, line))
            continue
        if not args and (a := _args_of(line)):
            args = a
            continue
        if any(t in line for t in _TRIGGERS) and not line.lstrip().startswith(("|", "#")):
            unread.append((no, line))
    md_recs, md_bad = ([], []) if bench is not None else _markdown_bench(lines)
    unread.extend(md_bad)
    records = list(bench or md_recs)
    speeds.extend(speeds_from_bench(records))
    # a run of 0 tokens prints inf / nan tokens per second: no figure
    speeds = [s for s in speeds if math.isfinite(s.tok_s) and s.tok_s > 0]
    program = args[0].split("/")[-1] if args else ""
    if not program:
        if records:
            program = "llama-bench"
        elif any(_SERVER.search(t) for _, t in lines):
            program = "llama-server"  # tools/server/server-common.h:28-37 SLT_/SRV_ prefixes
        elif any("common_perf_print:" in t for _, t in lines):
            program = "llama-completion"  # common/sampling.cpp:574, printed by llama-completion
    if ik or "llama_print_timings" in tool_hits:
        tool = "ik_llama.cpp"
    elif records:
        tool = "llama-bench"
    elif serving := [b.log_program for b in backends.BACKENDS.values() if b.log_program and b.log_program in tool_hits]:
        tool = serving[0]  # KTransformers' lines before SGLang's (it serves through SGLang)
    elif buffers or overrides or meta or speeds or memory:
        tool = "llama.cpp"
    else:
        tool = "unknown"
    return RunLog(source=source, tool=tool, program=program, args=args, model_path=model_path, model_meta=meta, context=ctx,
                  threads=threads, cpu_features=feats, devices=tuple(devices), offloaded_layers=offloaded,
                  layer_devices=layer_devices,
                  overrides=tuple(overrides), buffers=tuple(buffers), memory=tuple(memory), speeds=tuple(speeds),
                  bench=tuple(records), unread=tuple(sorted(set(unread))), n_lines=len(lines) + len(superseded),
                  superseded_loads=n_superseded)


def size_bytes(text: str) -> int | None:
    """llama-bench's `size` column ('1.23 GiB') in bytes."""
    m = _SIZE_MIB.search(text or "")
    if not m:
        return None
    return round(_f(m.group(1)) * (MIB if m.group(2) == "MiB" else 1024 * MIB))
