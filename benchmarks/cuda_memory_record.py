"""Record what a CUDA build of llama.cpp allocates, buffer by buffer and as nvidia-smi sees it.

For each fixture (tests/llama_fixtures.py: the small MoE GGUFs, and two with the real widths of
Qwen3-30B-A3B and Qwen3.5-35B-A3B but few blocks) and each case of CUDA_CASES (everything on the
GPU at ubatch 512-4096, FA off, a q8_0 cache, a 32K context, every expert on the CPU with and
without op offload, --n-cpu-moe), this starts `llama-server` on one GPU and reads:

  * the buffer lines llama.cpp prints (model, KV, recurrent state, compute, output), parsed by
    tests/llama_memlog.parse_llama_log;
  * the process's memory in nvidia-smi after the load (and warm-up) and again after a prompt of
    one full ubatch, which is what the CUDA context, cuBLAS and the memory pool add on top;
  * the `common_memory_breakdown_print` table llama-server prints when it stops.

    python benchmarks/cuda_memory_record.py --bin /path/to/llama.cpp/build/bin --out DIR
    ... --fixtures qwen3moe,qwen3-30b-dims --cases gpu-ub512,cpumoe-ub2048 --budget-s 240

Writes DIR/<fixture>.json (the parsed figures, the command, the kept log lines, nvidia-smi's
figures, the GPU and driver) and prints one line per run. Needs an NVIDIA GPU and nvidia-smi.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from llama_fixtures import LLAMA_FIXTURES, sparse_files, write_qwen3moe_llama, write_qwen3next_llama  # noqa: E402
from llama_memlog import parse_llama_log  # noqa: E402


@dataclass(frozen=True)
class CudaCase:
    """One llama-server run on one GPU: the flags that decide its buffers."""

    name: str
    n_ctx: int = 8192
    n_ubatch: int = 512
    n_batch: int = 2048
    flash_attn: bool = True
    type_k: str = "f16"
    type_v: str = "f16"
    override: str = ""          # -ot value, e.g. 'exps=CPU'
    n_cpu_moe: int = 0
    op_offload: bool = True

    def args(self, model: Path) -> list[str]:
        a = ["-m", str(model), "-c", str(self.n_ctx), "-b", str(max(self.n_batch, self.n_ubatch)),
             "-ub", str(self.n_ubatch), "-fa", "on" if self.flash_attn else "off", "-ctk", self.type_k,
             "-ctv", self.type_v, "-ngl", "99", "-np", "1", "-fit", "off", "-t", "8", "-v"]
        if self.override:
            a += ["-ot", self.override]
        if self.n_cpu_moe:
            a += ["--n-cpu-moe", str(self.n_cpu_moe)]
        if not self.op_offload:
            a += ["--no-op-offload"]
        return a


CUDA_CASES = [
    CudaCase("gpu-ub512"),
    CudaCase("gpu-ub2048", n_ubatch=2048),
    CudaCase("gpu-ub4096", n_ubatch=4096, n_batch=4096),
    CudaCase("gpu-ub512-nofa", flash_attn=False),
    CudaCase("gpu-ub512-q8kv", type_k="q8_0", type_v="q8_0"),
    CudaCase("gpu-c32k-ub512", n_ctx=32768),
    CudaCase("cpumoe-ub512", override="exps=CPU"),
    CudaCase("cpumoe-ub2048", n_ubatch=2048, override="exps=CPU"),
    CudaCase("cpumoe-ub2048-no-op-offload", n_ubatch=2048, override="exps=CPU", op_offload=False),
    CudaCase("ncmoe2-ub512", n_cpu_moe=2),
]


def write_real_width(name: str, folder: Path) -> Path:
    """The fixtures with a real model's widths (hidden size, experts, vocabulary) and few blocks:
    the compute buffer and the CUDA pool depend on the widths, not on the block count."""
    path = folder / f"{name}.gguf"
    if name == "qwen3-30b-dims":   # Qwen3-30B-A3B: 2048 wide, 128 experts of 768, 151,936 tokens
        write_qwen3moe_llama(path, n_layer=4, n_embd=2048, n_head=32, n_head_kv=4, head_dim=128, n_expert=128,
                             n_used=8, n_ff_exp=768, n_vocab=151936, ctx=40960)
    elif name == "qwen3.5-35b-dims":  # Qwen3.5-35B-A3B's text widths, qwen3next's graph, 4 blocks
        write_qwen3next_llama(path, n_layer=4, n_embd=2048, n_head=16, n_head_kv=2, head_dim=256, n_expert=256,
                              n_used=8, n_ff_exp=512, n_ff_shexp=512, n_vocab=248320, ctx=262144, d_state=128,
                              n_k_heads=16, n_v_heads=32)
    else:
        raise KeyError(name)
    return path


REAL_WIDTH = ("qwen3-30b-dims", "qwen3.5-35b-dims")


def write_model(name: str, folder: Path) -> Path:
    """Fixture `name` as folder/<name>.gguf; the zero weights are a hole in the file (the same
    bytes as the writers' own output, see llama_fixtures.sparse_files)."""
    with sparse_files():
        if name in REAL_WIDTH:
            return write_real_width(name, folder)
        path = folder / f"{name}.gguf"
        LLAMA_FIXTURES[name](path)
    return path


def smi(query: str, extra: str = "") -> list[list[str]]:
    """nvidia-smi's CSV rows for `query`; none where nvidia-smi is missing (a CPU build records
    its buffer lines only)."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-{extra or 'gpu'}={query}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [[c.strip() for c in line.split(",")] for line in out.strip().splitlines() if line.strip()]


def process_mib(pid: int) -> int | None:
    """nvidia-smi's used memory of process `pid` (MiB), None when it lists no such process."""
    for row in smi("pid,used_memory", "compute-apps"):
        if row and row[0] == str(pid) and row[1].isdigit():
            return int(row[1])
    return None


def gpu_used_mib() -> int | None:
    rows = smi("memory.used")
    return int(rows[0][0]) if rows and rows[0][0].isdigit() else None


def _delta(now: int | None, before: int | None) -> int | None:
    return None if now is None or before is None else now - before


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


KEEP = re.compile(r"buffer size|compute buffer|graph splits|graph nodes|pipeline parallelism|memory breakdown|"
                  r"\| +- |\| +- Host|offload|n_ctx|n_ubatch|n_batch|flash_attn|CUDA0:|ggml_cuda_init|"
                  r"Device 0|type_k|type_v|llama_kv_cache|llama_memory_recurrent|sched_reserve|build:|system_info")


def run_case(server: Path, model: Path, case: CudaCase, timeout_s: float) -> dict:
    port = _free_port()
    argv = [str(server)] + case.args(model) + ["--host", "127.0.0.1", "--port", str(port)]
    before = gpu_used_mib()
    t0 = time.monotonic()
    log_file = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, text=True)
    result: dict = {"case": asdict(case), "command": shlex.join(["llama-server"] + case.args(Path(model.name)))}
    try:
        deadline = t0 + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.2)
        result["load_s"] = round(time.monotonic() - t0, 2)
        if proc.poll() is None:
            result["nvidia_smi_process_mib_after_load"] = process_mib(proc.pid)
            result["nvidia_smi_gpu_delta_mib_after_load"] = _delta(gpu_used_mib(), before)
            n_tok = case.n_ubatch
            body = json.dumps({"prompt": " ".join(f"w{i}" for i in range(n_tok)), "n_predict": 4,
                               "cache_prompt": False}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=body,
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=max(5.0, deadline - time.monotonic())) as r:
                    reply = json.loads(r.read())
                result["prompt_tokens"] = reply.get("timings", {}).get("prompt_n")
                result["prompt_tok_s"] = reply.get("timings", {}).get("prompt_per_second")
            except (OSError, ValueError) as exc:
                result["prompt_error"] = str(exc)[:200]
            result["nvidia_smi_process_mib_after_prompt"] = process_mib(proc.pid)
            result["nvidia_smi_gpu_delta_mib_after_prompt"] = _delta(gpu_used_mib(), before)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log_file.seek(0)
        log = log_file.read()
        log_file.close()
    result["exit_code"] = proc.returncode
    result["wall_s"] = round(time.monotonic() - t0, 2)
    parsed = parse_llama_log(log)
    parsed.pop("exact", None)
    result["parsed"] = parsed
    result["log_lines"] = [ln for ln in log.splitlines() if KEEP.search(ln)][:400]
    if proc.returncode not in (0, -signal.SIGINT, 130) or not parsed["buffers"]:
        result["log_tail"] = log.splitlines()[-40:]
    return result


def summary(fixture: str, r: dict) -> str:
    cells = [f"{b['buffer_type']} {b['kind']} {b['mib']:.2f}" for b in r["parsed"]["buffers"]
             if b["buffer_type"].startswith("CUDA")]
    smi_a, smi_b = r.get("nvidia_smi_process_mib_after_load"), r.get("nvidia_smi_process_mib_after_prompt")
    return (f"{fixture:18} {r['case']['name']:30} smi {smi_a}/{smi_b} MiB (load/prompt)  "
            + "  ".join(cells) + f"  [{r['wall_s']} s]")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.environ.get("MOEPLAN_LLAMA_BIN"), help="CUDA llama.cpp build/bin folder")
    ap.add_argument("--out", type=Path, required=True, help="folder for <fixture>.json")
    ap.add_argument("--fixtures", default="qwen3-30b-dims,qwen3.5-35b-dims,qwen3moe,deepseek2,gpt-oss,qwen3next")
    ap.add_argument("--cases", default=",".join(c.name for c in CUDA_CASES))
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop starting runs after this many seconds")
    ap.add_argument("--work", type=Path, help="folder for the GGUF files (default: a temp folder)")
    args = ap.parse_args()
    if not args.bin:
        print("set MOEPLAN_LLAMA_BIN (or --bin) to a CUDA llama.cpp build/bin folder", file=sys.stderr)
        return 2
    server = Path(args.bin) / "llama-server"
    cases = [c for c in CUDA_CASES if c.name in args.cases.split(",")]
    t_start = time.monotonic()
    gpu = smi("name,driver_version,memory.total")
    version = subprocess.run([str(server), "--version"], capture_output=True, text=True, timeout=60)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="moeplan-cuda-", dir=args.work) as tmp:
        for fixture in args.fixtures.split(","):
            if time.monotonic() - t_start > args.budget_s:
                print(f"budget spent: {fixture} not run", flush=True)
                continue
            model = write_model(fixture, Path(tmp))
            runs = []
            for case in cases:
                if time.monotonic() - t_start > args.budget_s:
                    print(f"budget spent: {fixture} {case.name} not run", flush=True)
                    continue
                r = run_case(server, model, case, timeout_s=120)
                runs.append(r)
                print(summary(fixture, r), flush=True)
            doc = {"fixture": fixture, "file_bytes": model.stat().st_size,
                   "writer": "benchmarks/cuda_memory_record.py:write_model",
                   "recorded": dt.date.today().isoformat(), "gpu": gpu,
                   "llama_cpp": (version.stdout + version.stderr).strip().splitlines()[-2:], "runs": runs}
            out = args.out / f"{fixture}.json"
            out.write_text(json.dumps(doc, indent=1) + "\n")
            model.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
