"""Run a real llama.cpp on a GGUF and read back what it allocated.

Used by tests/test_memory_llamacpp.py (live check, only with MOEPLAN_LLAMA_BIN set) and by
benchmarks/memory_vs_llamacpp.py (which records tests/data/llama_memory/*.json).

Two sources, cross-checked:
  * llama.cpp's own log lines (load_tensors / llama_context / llama_kv_cache /
    llama_memory_recurrent / sched_reserve), printed in MiB with two decimals;
  * the exact byte size of every backend buffer, printed by tests/llama_alloc_shim.c
    (LD_PRELOAD) as `moeplan-alloc <buffer type> <bytes>`.
Each logged figure is paired with the allocation of the same buffer type whose size prints
as the same MiB figure, in allocation order, so every recorded number is exact and is the
one llama.cpp itself reported.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

MIB = 1024 * 1024
SHIM_SOURCE = Path(__file__).with_name("llama_alloc_shim.c")


@dataclass(frozen=True)
class LlamaCase:
    """One llama.cpp run: the fixture and the context flags that decide its buffers.

    tool 'completion' runs `llama-completion -no-cnv -n 1` (its KV cache is never unified:
    -np N gives N streams of n_ctx/N cells); tool 'server' starts `llama-server`, waits for
    the model to load and stops it (the only tool here that takes -kvu)."""

    fixture: str
    n_ctx: int = 4096
    n_ubatch: int = 512
    n_batch: int = 2048
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: bool = True
    n_seq: int = 1
    kv_unified: bool = False
    load_mode: str = "mmap"
    tool: str = "completion"

    @property
    def name(self) -> str:
        fa = "fa" if self.flash_attn else "nofa"
        kv = self.type_k if self.type_k == self.type_v else f"{self.type_k}-{self.type_v}"
        tail = f"-np{self.n_seq}{'u' if self.kv_unified else ''}" if self.n_seq > 1 else ""
        lm = "" if self.load_mode == "mmap" else f"-{self.load_mode}"
        tool = "-server" if self.tool == "server" else ""
        return f"{self.fixture}-c{self.n_ctx}-ub{self.n_ubatch}-{kv}-{fa}{tail}{lm}{tool}"

    def to_dict(self) -> dict:
        return asdict(self)


def llama_args(case: LlamaCase, model: Path, n_threads: int = 2) -> list[str]:
    """The flags of `case` (without the program name), as llama.cpp's common/arg.cpp spells them."""
    args = ["-m", str(model), "-c", str(case.n_ctx), "-b", str(case.n_batch), "-ub", str(case.n_ubatch),
            "-ctk", case.type_k, "-ctv", case.type_v, "-fa", "on" if case.flash_attn else "off",
            "-np", str(case.n_seq), "-t", str(n_threads), "-lm", case.load_mode,
            "-fit", "off", "--no-warmup", "-v"]
    if case.tool == "server":
        args += ["-kvu" if case.kv_unified else "-no-kvu"]
    else:
        args += ["-no-cnv", "-n", "1", "-p", "hello world"]
    return args


def build_alloc_shim(out_dir: Path, cc: str = "cc") -> Path | None:
    """Compile the allocation-logging shim; None when no C compiler is available."""
    if shutil.which(cc) is None:
        return None
    out = Path(out_dir) / "llama_alloc_shim.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(SHIM_SOURCE), "-ldl"],
                   check=True, capture_output=True)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_llama(bin_dir: Path, model: Path, case: LlamaCase, shim: Path | None,
              timeout_s: float = 600) -> tuple[list[str], str]:
    """Run `case`; return (argv, the combined log). Raises RuntimeError if llama.cpp failed."""
    env = dict(os.environ)
    if shim is not None:
        env["LD_PRELOAD"] = str(shim)
    exe = Path(bin_dir) / ("llama-server" if case.tool == "server" else "llama-completion")
    argv = [str(exe)] + llama_args(case, model)
    if case.tool == "server":
        argv += ["--host", "127.0.0.1", "--port", str(_free_port())]
        return argv, _run_server(argv, env, timeout_s)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"{exe.name} exited {proc.returncode}:\n{log[-3000:]}")
    return argv, log


def _run_server(argv: list[str], env: dict, timeout_s: float) -> str:
    """Start llama-server, wait until its model is loaded (all buffers reserved), stop it."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "model loaded" in line or "listening on" in line:
                break
            if time.monotonic() > deadline:
                break
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            rest, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rest, _ = proc.communicate()
        lines.append(rest or "")
    log = "".join(lines)
    if "model loaded" not in log and "listening on" not in log:
        raise RuntimeError(f"llama-server did not load the model:\n{log[-3000:]}")
    return log


# ---- parsing ----------------------------------------------------------------------------

_F = r"([0-9]+(?:\.[0-9]+)?)"
_PATTERNS = {
    "model": re.compile(r"load_tensors:\s+(\S+) model buffer size =\s+" + _F + " MiB"),
    "output": re.compile(r"llama_context:\s+(\S+)\s+output buffer size =\s+" + _F + " MiB"),
    "kv": re.compile(r"llama_kv_cache:\s+(\S+) KV buffer size =\s+" + _F + " MiB"),
    "rs": re.compile(r"llama_memory_recurrent:\s+(\S+) RS buffer size =\s+" + _F + " MiB"),
    "compute": re.compile(r"sched_reserve:\s+(\S+) compute buffer size =\s+" + _F + " MiB"),
    # DeepSeek V4 compressor state (llama-kv-cache-dsv4.cpp llama_dsv4_comp_state)
    "state": re.compile(r"llama_dsv4_comp_state:\s+(\S+) DSV4 \w+ state buffer size =\s+" + _F + " MiB"),
}
_KV_SIZE = re.compile(r"llama_kv_cache: size =\s+" + _F + r" MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/(\d+) seqs\), "
                      r"K \((\w+)\):\s+" + _F + r" MiB, V \((\w+)\):\s+" + _F + " MiB")
_RS_SIZE = re.compile(r"llama_memory_recurrent: size =\s+" + _F
                      + r" MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+) seqs\s+(\d+) rs_seq\), "
                      r"R \((\w+)\):\s+" + _F + r" MiB, S \((\w+)\):\s+" + _F + " MiB")
_DSV4_STATE = re.compile(r"llama_dsv4_comp_state: (\w+) ratio = (\d+), state = (\d+) x (\d+), streams = (\d+), "
                         r"rs_seq = (\d+), layers = (\d+), size =\s+" + _F + " MiB")
# what each `llama_kv_cache: size = ...` line that follows belongs to
_CACHE_LABEL = re.compile(r"llama_kv_cache_iswa: creating\s+(non-SWA|SWA) KV cache|"
                          r"llama_kv_cache_dsv4: creating DSV4 (\S+)(?: compressed)? KV cache|"
                          r"llama_kv_cache_dsa: creating (main|indexer) KV cache")
_ISWA = re.compile(r"llama_kv_cache_iswa: creating\s+(non-SWA|SWA) KV cache, size = (\d+) cells")
_CPARAM = re.compile(r"llama_context: (n_seq_max|n_ctx|n_ctx_seq|n_batch|n_ubatch|kv_unified|flash_attn)\s+= (\S+)")
_GRAPH = re.compile(r"sched_reserve: graph.*: nodes = (\d+(?: / \d+)?), splits = (\d+(?: / \d+)?)")
_FA = re.compile(r"resolve_fused_ops: Flash Attention (enabled|not supported)")
_ALLOC = re.compile(r"moeplan-alloc (\S+) (\d+)\n")


def parse_allocations(text: str) -> list[tuple[str, int]]:
    """Exact buffers from the shim, in allocation order, without the inner CPU allocation an
    extra buffer type (CPU_REPACK) makes for its own storage."""
    raw = [(m.group(1), int(m.group(2))) for m in _ALLOC.finditer(text)]
    out: list[tuple[str, int]] = []
    for i, (name, size) in enumerate(raw):
        nxt = raw[i + 1] if i + 1 < len(raw) else None
        if name == "CPU" and nxt is not None and nxt[1] == size and nxt[0] not in ("CPU", "CPU_Mapped"):
            continue
        out.append((name, size))
    return out


def _mib(text: str) -> float:
    return float(text)


def parse_llama_log(text: str) -> dict:
    """The memory figures of one llama.cpp run.

    Returns {'buffers': [{'kind', 'buffer_type', 'mib', 'bytes'}...], 'kv_caches': [...],
    'recurrent': [...], 'iswa_cells': {...}, 'context': {...}, 'graph': {...}}; 'bytes' is the
    exact size when the allocation shim ran, else None.
    """
    found: list[tuple[int, str, str, str]] = []
    for kind, pat in _PATTERNS.items():
        for m in pat.finditer(text):
            found.append((m.start(), kind, m.group(1), m.group(2)))
    found.sort()
    allocs = parse_allocations(text)
    cursor = 0
    buffers = []
    for _, kind, buft, mib in found:
        exact = None
        for j in range(cursor, len(allocs)):
            name, size = allocs[j]
            if name == buft and f"{size / MIB:.2f}" == mib:
                exact, cursor = size, j + 1
                break
        buffers.append({"kind": kind, "buffer_type": buft, "mib": _mib(mib), "bytes": exact})
    labels = [(m.start(), "/".join(g for g in m.groups() if g)) for m in _CACHE_LABEL.finditer(text)]
    kv = [{"cache": next((lab for pos, lab in reversed(labels) if pos < m.start()), ""),
           "mib": _mib(m.group(1)), "cells": int(m.group(2)), "layers": int(m.group(3)),
           "n_seq_max": int(m.group(4)), "n_stream": int(m.group(5)), "type_k": m.group(6),
           "k_mib": _mib(m.group(7)), "type_v": m.group(8), "v_mib": _mib(m.group(9))}
          for m in _KV_SIZE.finditer(text)]
    states = [{"name": m.group(1), "ratio": int(m.group(2)), "rows": int(m.group(3)), "n_embd": int(m.group(4)),
               "n_stream": int(m.group(5)), "n_rs_seq": int(m.group(6)), "layers": int(m.group(7)),
               "mib": _mib(m.group(8))}
              for m in _DSV4_STATE.finditer(text)]
    rs = [{"mib": _mib(m.group(1)), "cells": int(m.group(2)), "layers": int(m.group(3)),
           "n_seq_max": int(m.group(4)), "n_rs_seq": int(m.group(5)), "type_r": m.group(6),
           "r_mib": _mib(m.group(7)), "type_s": m.group(8), "s_mib": _mib(m.group(9))}
          for m in _RS_SIZE.finditer(text)]
    ctx: dict = {}
    for m in _CPARAM.finditer(text):
        key, val = m.group(1), m.group(2)
        if key not in ctx:
            ctx[key] = int(val) if val.isdigit() else val
    fa = _FA.search(text)
    if fa:
        ctx["flash_attn_resolved"] = fa.group(1) == "enabled"
    g = _GRAPH.search(text)
    return {
        "buffers": buffers,
        "kv_caches": kv,
        "recurrent": rs,
        "dsv4_states": states,
        "iswa_cells": {m.group(1): int(m.group(2)) for m in _ISWA.finditer(text)},
        "context": ctx,
        "graph": {"nodes": g.group(1), "splits": g.group(2)} if g else {},
        "exact": bool(allocs),
    }


def buffer_total(parsed: dict, kind: str, buffer_type: str | None = None) -> int | None:
    """Exact bytes of all buffers of `kind` (None if any of them has no exact size)."""
    sizes = [b["bytes"] for b in parsed["buffers"]
             if b["kind"] == kind and (buffer_type is None or b["buffer_type"] == buffer_type)]
    if any(s is None for s in sizes):
        return None
    return sum(sizes)


def llama_build_info(bin_dir: Path) -> str:
    """`llama-cli --version` (or llama-completion's, in a build without llama-cli) first line
    pair: version and commit."""
    prog = next((Path(bin_dir) / n for n in ("llama-cli", "llama-completion") if (Path(bin_dir) / n).is_file()),
                Path(bin_dir) / "llama-cli")
    proc = subprocess.run([str(prog), "--version"], capture_output=True, text=True, timeout=60)
    return " ".join(line.strip() for line in (proc.stdout + proc.stderr).splitlines() if line.strip())


# ---- the matrix and the comparison with moeplan -------------------------------------------

def memory_matrix(fixture: str, mla: bool = False) -> list[LlamaCase]:
    """The runs recorded per fixture: ctx x ubatch x flash attention with f16 KV (llama-completion,
    logits for every ubatch token), quantized KV types, four sequences with split and unified
    caches, llama-server (logits for one token per sequence) and a load without mmap.
    `mla`: the model caches an MLA latent, whose K and V types must match."""
    cases = [LlamaCase(fixture, n_ctx=c, n_ubatch=u, flash_attn=fa)
             for c in (512, 4096, 32768) for u in (32, 512, 2048) for fa in (True, False)]
    cases += [
        LlamaCase(fixture, type_k="q8_0", type_v="q8_0"),
        LlamaCase(fixture, type_k="q4_0", type_v="q4_0"),
        # a quantized K with an f16 V runs without flash attention; an MLA cache needs K and V
        # of one type, and a quantized V needs flash attention
        LlamaCase(fixture, n_ctx=32768, type_k="q8_0", type_v="q8_0") if mla else
        LlamaCase(fixture, type_k="q8_0", type_v="f16", flash_attn=False),
        LlamaCase(fixture, n_seq=4),
        LlamaCase(fixture, n_seq=4, flash_attn=False),
        LlamaCase(fixture, n_seq=4, kv_unified=True, tool="server"),
        LlamaCase(fixture, n_ubatch=2048, tool="server"),
        LlamaCase(fixture, n_ctx=32768, n_ubatch=2048, flash_attn=False, tool="server"),
        LlamaCase(fixture, load_mode="none"),
    ]
    return cases


# architectures whose caches and compute buffers change shape with long contexts (compressed
# caches at ratio 4 / 128, lightning-indexer scores over every cached key): recorded up to 1M
LONG_CONTEXT_ARCHS = ("deepseek4", "glm-dsa")


def long_context_matrix(fixture: str) -> list[LlamaCase]:
    """The runs recorded for the sparse-attention fixtures (DeepSeek V4, GLM-5.x DSA): ctx 4k to
    128k x ubatch 512 / 2048 x flash attention on/off, 256k and 1M with flash attention, q8_0 and
    q4_0 keys (their caches are K-only, and a quantized K adds DeepSeek V4's Hadamard rotations),
    4 sequences with split and unified caches, llama-server, no mmap. Both refuse different K and
    V types (llama-context.cpp: is_mla() or DEEPSEEK4) and a quantized V needs flash attention,
    so every quantized run has it on."""
    cases = [LlamaCase(fixture, n_ctx=c, n_ubatch=u, flash_attn=fa)
             for c in (4096, 32768, 131072) for u in (512, 2048) for fa in (True, False)]
    cases += [LlamaCase(fixture, n_ctx=c, n_ubatch=u) for c in (262144, 1048576) for u in (512, 2048)]
    cases += [
        LlamaCase(fixture, n_ctx=32768, type_k="q8_0", type_v="q8_0"),
        LlamaCase(fixture, n_ctx=32768, type_k="q4_0", type_v="q4_0"),
        LlamaCase(fixture, n_ctx=32768, n_ubatch=2048, type_k="q8_0", type_v="q8_0"),
        LlamaCase(fixture, n_ctx=32768, n_seq=4),
        LlamaCase(fixture, n_ctx=32768, n_seq=4, flash_attn=False),
        LlamaCase(fixture, n_ctx=32768, n_seq=4, kv_unified=True, tool="server"),
        LlamaCase(fixture, n_ctx=32768, n_ubatch=2048, tool="server"),
        LlamaCase(fixture, n_ctx=131072, n_ubatch=2048, flash_attn=False, tool="server"),
        LlamaCase(fixture, load_mode="none"),
    ]
    return cases


def mtp_block_matrix(fixture: str) -> list[LlamaCase]:
    """A fixture that only adds an MTP/NextN block to another: the runs where that block's
    caches show (one and four sequences, split and unified, two ubatches)."""
    return [LlamaCase(fixture), LlamaCase(fixture, n_ctx=32768, n_ubatch=2048),
            LlamaCase(fixture, n_ctx=32768, n_seq=4),
            LlamaCase(fixture, n_ctx=32768, n_seq=4, kv_unified=True, tool="server")]


def cases_for(fixture: str, arch: str, mla: bool) -> list[LlamaCase]:
    """The recorded matrix of a fixture (see the three functions above)."""
    if fixture.endswith("-mtp"):
        return mtp_block_matrix(fixture)
    if arch in LONG_CONTEXT_ARCHS:
        return long_context_matrix(fixture)
    return memory_matrix(fixture, mla=mla)


def case_placement(case: LlamaCase):
    """The moeplan Placement that describes `case` (everything on one device, no offload)."""
    from moeplan.planner.placement import Placement

    return Placement(n_ctx=case.n_ctx, n_seq=case.n_seq, cache_type_k=case.type_k, cache_type_v=case.type_v,
                     flash_attn=case.flash_attn, n_ubatch=case.n_ubatch, n_batch=case.n_batch,
                     kv_unified=case.kv_unified, load_mode="mmap" if case.load_mode == "mmap" else "no-mmap",
                     op_offload=False, n_outputs_max=case.n_seq if case.tool == "server" else 0)


def predict_buffers(model, case: LlamaCase, repack_types: tuple[str, ...]) -> dict[str, int]:
    """moeplan's figures for the buffers a CPU-only llama.cpp allocates for `case`: the
    CPU-only breakdown of estimate_memory (Placement.n_gpus == 0)."""
    from moeplan.planner.memory.accounting import estimate_memory

    est = estimate_memory(model, case_placement(case).with_(n_gpus=0), repack_types=repack_types)
    # the CPU buffer places each tensor at a 32-byte boundary (ggml_backend_alloc_ctx_tensors)
    padding = sum(-t.n_bytes % 32 for t in model.globals) + sum(
        -t.n_bytes % 32 for layer in model.trunk_layers for t in layer.tensors)
    return {
        "kv": est.get("kv_cache"),
        "compute": est.get("compute_cpu"),
        "output": est.get("output"),
        "repack": est.get("repack"),
        "weights": model.loaded_bytes + padding,
    }


def measured_buffers(parsed: dict) -> dict[str, int | None]:
    """The same figures from a parsed llama.cpp run (exact bytes)."""
    kv = buffer_total(parsed, "kv")
    rs = buffer_total(parsed, "rs")
    state = buffer_total(parsed, "state")
    repack = buffer_total(parsed, "model", "CPU_REPACK")
    plain = buffer_total(parsed, "model", "CPU")
    return {
        "kv": None if kv is None or rs is None or state is None else kv + rs + state,
        "compute": buffer_total(parsed, "compute", "CPU"),
        "output": buffer_total(parsed, "output", "CPU"),
        "repack": repack,
        # without mmap the weights are the CPU and CPU_REPACK buffers (with mmap the
        # CPU_Mapped span also covers the repacked tensors, so it is not a weight total)
        "weights": None if not plain else plain + (repack or 0),
    }


def compare_run(model, case: LlamaCase, parsed: dict, repack_types: tuple[str, ...]) -> list[dict]:
    """Rows of (buffer, predicted, measured, error %) for one run."""
    pred = predict_buffers(model, case, repack_types)
    meas = measured_buffers(parsed)
    rows = []
    for name in ("weights", "repack", "kv", "compute", "output"):
        m = meas[name]
        if m is None:
            continue
        err = 0.0 if m == pred[name] else (pred[name] - m) / m * 100 if m else float("inf")
        rows.append({"buffer": name, "predicted": pred[name], "measured": m, "error_pct": err})
    return rows
