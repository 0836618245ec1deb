"""Run moeplan's emitted llama.cpp scripts on tiny synthetic GGUFs and keep their logs.

Used by tests/test_check_llama_real.py (live, with MOEPLAN_LLAMA_BIN) and to record the logs in
tests/data/logs/cpu-*.log:

    MOEPLAN_LLAMA_BIN=/path/to/llama.cpp/build/bin PYTHONPATH=tests python tests/llama_runs.py

Several-device runs use two local `rpc-server -H 127.0.0.1 -p PORT` processes as the devices
(`--rpc 127.0.0.1:P1,127.0.0.1:P2` passed through the scripts' "$@"); a CPU build then places
the blocks on RPC0/RPC1 and the plan's CPU experts in host memory, as a GPU build would.
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gguf_fixtures import write_gptoss, write_qwen3moe
from launch_plans import make_plan, write_runnable
from llama_rpc import RpcServers, free_port

from moeplan.launch import write_launch
from moeplan.planner.placement import Placement
from moeplan.probes.models import resolve_model

DATA = Path(__file__).parent / "data" / "logs"


@dataclass(frozen=True)
class Case:
    name: str
    fixture: str  # qwen3moe | gpt-oss
    placement: Placement
    rpc: int = 0  # RPC devices
    script: str = "complete.sh"


WRITERS = {"qwen3moe": (write_qwen3moe, {"n_layer": 6}), "gpt-oss": (write_gptoss, {"n_layer": 4, "n_head": 4})}

CASES = (
    Case("cpu-qwen3moe-rpc2-complete", "qwen3moe",
         Placement(cpu_moe_layers=(1, 2, 4), n_ctx=512, n_threads=2, n_batch=128, n_ubatch=64, cache_type_k="q8_0",
                   cache_type_v="q8_0", load_mode="no-mmap", n_gpus=2), rpc=2),
    Case("cpu-gptoss-rpc1-complete", "gpt-oss",
         Placement(cpu_moe_layers=(0, 1, 3), n_ctx=512, n_threads=2, n_batch=64, n_ubatch=32, op_offload=False,
                   load_mode="mmap", n_gpus=1), rpc=1),
    Case("cpu-qwen3moe-server", "qwen3moe",
         Placement(cpu_moe_layers=(0, 1, 2, 3, 4, 5), n_ctx=1024, n_threads=2, n_batch=256, n_ubatch=128,
                   n_gpus=0, n_outputs_max=1), script="launch.sh"),
    Case("cpu-qwen3moe-rpc2-bench", "qwen3moe",
         Placement(cpu_moe_layers=(0, 5), n_ctx=512, n_threads=2, n_batch=128, n_ubatch=64, n_gpus=2), rpc=2,
         script="bench.sh"),
)


def run_case(case: Case, bin_dir: Path, work: Path) -> tuple[object, object, str, str]:
    """(model, plan, log text, command) of one case; the log is the script's stderr+stdout
    (for bench.sh: llama-bench's JSON)."""
    writer, kw = WRITERS[case.fixture]
    path, _ = write_runnable(writer, work / f"{case.fixture}.gguf", **kw)
    m = resolve_model(str(path))
    plan = make_plan(m, case.placement)
    folder = work / case.name
    write_launch(plan, m, folder, "llama.cpp", str(bin_dir))
    with RpcServers(bin_dir, case.rpc) as rpc:
        extra = ["--rpc", ",".join(rpc.endpoints)] if rpc.endpoints else []
        if case.script == "complete.sh":
            extra += ["--verbose", "-nr"]  # -nr: repacking off (some VMs fault on AMX); not a plan flag
        elif case.script == "launch.sh":
            extra += ["--port", str(free_port()), "--verbose", "-nr"]
        else:
            extra += ["-r", "1", "-p", "64", "-n", "8", "--repack", "0"]
        cmd = ["bash", str(folder / case.script), *extra]
        if case.script == "launch.sh":
            text = _serve_once(cmd, int(extra[extra.index("--port") + 1]), work)
        else:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=str(work))
            if r.returncode != 0:
                raise RuntimeError(f"{case.name}: exit {r.returncode}\n{r.stderr[-3000:]}")
            text = (folder / "bench.json").read_text() if case.script == "bench.sh" else r.stderr + r.stdout
    return m, plan, text, " ".join([case.script, *extra])


def _serve_once(cmd: list[str], port: int, work: Path) -> str:
    """Start llama-server, answer one completion, stop it; its log."""
    import json
    import urllib.request

    log = work / "server.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=str(work))
        try:
            for _ in range(240):
                if proc.poll() is not None:
                    raise RuntimeError(f"llama-server exited {proc.returncode}: {log.read_text()[-3000:]}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as resp:
                        if resp.status == 200:
                            break
                except OSError:
                    time.sleep(0.25)
            body = json.dumps({"prompt": "The capital of France is", "n_predict": 16}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as resp:
                resp.read()
            time.sleep(0.5)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
    return log.read_text()


def main() -> None:
    import tempfile

    bin_dir = Path(os.environ["MOEPLAN_LLAMA_BIN"])
    ver = subprocess.run([str(bin_dir / "llama-completion"), "--version"], capture_output=True, text=True)
    version = (ver.stdout + ver.stderr).strip().splitlines()[0]
    DATA.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            work = Path(tmp) / case.name
            work.mkdir()
            _, _, text, cmd = run_case(case, bin_dir, work)
            ext = ".json" if case.script == "bench.sh" else ".log"
            devices = f" with {case.rpc} local rpc-server devices" if case.rpc else ""
            head = (f"# RECORDED: {version}, CPU build{devices}, "
                    f"{platform.machine()}, {time.strftime('%Y-%m-%d')}\n# run: moeplan's emitted {cmd} "
                    f"on tests/gguf_fixtures.py {case.fixture} (tests/llama_runs.py case {case.name})\n")
            out = DATA / (case.name + ext)
            if ext == ".json":
                out.write_text(text)  # llama-bench's own JSON, unchanged (no room for a header)
            else:
                out.write_text(head + text)
            print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
