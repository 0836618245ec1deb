"""Several devices on a CPU-only machine: llama.cpp's RPC backend (`rpc-server`) as GPUs.

Each `ggml-rpc-server -H 127.0.0.1 -p PORT` process is one device (RPC0, RPC1, ... in the order
given to `--rpc`); llama.cpp splits the blocks over them with `-ts` exactly as over CUDA
devices (src/llama-model.cpp load_tensors; the device list holds every GPU/RPC device, the CPU
is not in it), and the -ot overrides to CPU keep those experts in the host process. So the
per-device placement and buffer sizes moeplan plans can be checked without a GPU:

  * 'load_tensors: layer N assigned to device RPCk[...]' (debug log, --verbose): the blocks of
    every device, and the output layer's (layer n_layer_all);
  * 'tensor blk.N.ffn_*_exps.weight (...) buffer type overridden to CPU': the experts kept on
    the CPU;
  * '<device> model/KV/compute buffer size' lines, and the exact bytes from the allocation shim
    (tests/llama_alloc_shim.c) - the shim runs in the client, where the RPC buffers are
    allocated through ggml_backend_buft_alloc_buffer like any other.

`python tests/llama_rpc.py --bin BUILD/bin --record` writes tests/data/llama_memory_multi/*.json.
RPC devices have no op offload (ggml-rpc.cpp: offload_op = NULL), so the cases run without it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from moeplan.planner.options import PlanOptions

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from llama_memlog import MIB, build_alloc_shim, llama_build_info, parse_llama_log  # noqa: E402

DATA = HERE / "data" / "llama_memory_multi"
LAYER_DEV = re.compile(r"load_tensors: layer\s+(\d+) assigned to device (\S+?)(?:\[[^\]]*\])?, is_swa")
OVERRIDE = re.compile(r"tensor (\S+) \(.*\) buffer type overridden to (\S+)")


@dataclass(frozen=True)
class RpcCase:
    """One run: a fixture, how many RPC devices, the -ts, which blocks keep experts on the CPU."""

    name: str
    fixture: str
    n_layer: int
    n_devices: int
    tensor_split: str
    cpu_moe_layers: tuple[int, ...]
    n_ctx: int = 2048
    n_ubatch: int = 128
    n_batch: int = 256
    cache_type: str = "f16"
    n_gpu_layers: int | None = None  # -ngl N (plain layer split); None = every layer on the devices
    fit_on: bool = False  # append `-fit on` (llama.cpp's default): dry runs log every buffer line first


CASES = (
    RpcCase("qwen3moe-2dev", "qwen3moe", 6, 2, "3,4", (1, 4)),
    RpcCase("qwen3moe-3dev-uneven", "qwen3moe", 8, 3, "1,5,3", (0, 2, 3), cache_type="q8_0"),
    RpcCase("gptoss-2dev", "gpt-oss", 6, 2, "4,3", (0, 5), n_ctx=4096),
    # -ngl: blocks 0-2 wholly on the CPU (weights, KV, their ops), 3-5 + output on the device,
    # block 4's experts on the CPU as well
    RpcCase("qwen3moe-1dev-ngl4", "qwen3moe", 6, 1, "", (4,), n_gpu_layers=4),
    RpcCase("qwen3moe-2dev-ngl5", "qwen3moe", 8, 2, "1,1", (), n_gpu_layers=5),
    # every block and the output on the devices, no tensor override: llama.cpp turns pipeline
    # parallelism on (4 input copies, llama-context.cpp L430-435) - issue 33's first defect
    RpcCase("qwen3moe-2dev-pp", "qwen3moe", 4, 2, "2,3", (), n_ctx=4096, n_ubatch=512, n_batch=2048),
    # the same with -fit on, as users run it: the --fit dry run logs every buffer line before
    # the real load (issue 33's second defect); its raw log is kept in tests/data/logs/
    RpcCase("qwen3moe-2dev-pp-fit", "qwen3moe", 4, 2, "2,3", (), n_ctx=4096, n_ubatch=512, n_batch=2048,
            fit_on=True),
)
LOGS = HERE / "data" / "logs"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rpc_server_path(bin_dir: Path) -> Path | None:
    """The RPC server of a build: `ggml-rpc-server` (tools/rpc, commit 0c1e570) or the older
    `rpc-server`; None when the build has neither (built without -DGGML_RPC=ON)."""
    for name in ("ggml-rpc-server", "rpc-server"):
        if (Path(bin_dir) / name).is_file():
            return Path(bin_dir) / name
    return None


class RpcServers:
    """Start n rpc-server processes; stop exactly those (by their pids) on exit."""

    def __init__(self, bin_dir: Path, n: int):
        self.bin_dir, self.n = Path(bin_dir), n
        self.procs: list[subprocess.Popen] = []
        self.endpoints: list[str] = []

    def __enter__(self) -> RpcServers:
        exe = rpc_server_path(self.bin_dir)
        for _ in range(self.n):
            port = free_port()
            proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port), "-t", "1"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.procs.append(proc)
            self.endpoints.append(f"127.0.0.1:{port}")
        for ep in self.endpoints:  # wait until each listens
            host, port = ep.split(":")
            for _ in range(100):
                try:
                    with socket.create_connection((host, int(port)), timeout=0.2):
                        break
                except OSError:
                    time.sleep(0.1)
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    @property
    def rpc_arg(self) -> str:
        return ",".join(self.endpoints)


def write_case_model(case: RpcCase, folder: Path):
    """The fixture GGUF of a case (runnable: byte tokenizer, head_dim 32) and its ModelSpec."""
    from gguf_fixtures import write_gptoss, write_qwen3moe
    from launch_plans import write_runnable

    from moeplan.probes.models import resolve_model

    writer = {"qwen3moe": write_qwen3moe, "gpt-oss": write_gptoss}[case.fixture]
    folder.mkdir(parents=True, exist_ok=True)
    kw = {"n_layer": case.n_layer} if case.fixture == "qwen3moe" else {"n_layer": case.n_layer, "n_head": 4}
    path, _ = write_runnable(writer, folder / f"{case.name}.gguf", **kw)
    return path, resolve_model(str(path))


def case_placement(case: RpcCase):
    from moeplan.planner.placement import Placement

    return Placement(cpu_moe_layers=case.cpu_moe_layers, n_ctx=case.n_ctx, n_threads=2, n_batch=case.n_batch,
                     n_ubatch=case.n_ubatch, cache_type_k=case.cache_type, cache_type_v=case.cache_type,
                     op_offload=False, load_mode="no-mmap", n_gpus=case.n_devices, n_gpu_layers=case.n_gpu_layers,
                     options=PlanOptions(tensor_split=case.tensor_split or ""))


def emitted_once_command(case: RpcCase, model, model_path: Path, bin_dir: Path, folder: Path) -> list[str]:
    """complete.sh as moeplan emits it for the case's plan (flags checked against the binaries)."""
    from launch_plans import make_plan

    from moeplan.launch import find_programs, write_launch

    plan = make_plan(model, case_placement(case))
    programs = find_programs("llama.cpp", str(bin_dir))
    write_launch(plan, model, folder, "llama.cpp", str(bin_dir), programs=programs)
    return ["bash", str(folder / "complete.sh")]


def run_case(case: RpcCase, bin_dir: Path, work: Path, shim: Path | None) -> dict:
    """Run the emitted complete.sh on RPC devices; return the parsed record."""
    work.mkdir(parents=True, exist_ok=True)
    path, model = write_case_model(case, work)
    cmd = emitted_once_command(case, model, path, bin_dir, work / "launch")
    env = dict(os.environ)
    if shim is not None:
        env["LD_PRELOAD"] = str(shim)
    with RpcServers(bin_dir, case.n_devices) as rpc:
        argv = cmd + ["--rpc", rpc.rpc_arg, "--verbose", "--no-warmup"]
        if case.n_gpu_layers is not None:
            # CPU blocks' dense weights would go to the CPU build's extra buffer types (AMX,
            # CPU_REPACK; on this VM AMX traps with SIGILL); a GPU build puts them in the host
            # buffer instead (accounting.py), which --no-repack reproduces
            argv.append("--no-repack")
        if case.fit_on:
            argv += ["-fit", "on"]  # the last -fit wins over complete.sh's -fit off
        r = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, cwd=str(work))
        log = r.stdout + r.stderr
        if r.returncode != 0:
            raise RuntimeError(f"complete.sh exited {r.returncode}:\n{log[-3000:]}")
        endpoints = list(rpc.endpoints)
    if case.fit_on:
        LOGS.mkdir(parents=True, exist_ok=True)
        shown = log.replace(rpc.rpc_arg, "RPC_ENDPOINTS")
        for i, ep in enumerate(endpoints):
            shown = shown.replace(ep, f"RPC_ENDPOINT_{i}")
        (LOGS / f"rpc-{case.name}.log").write_text(
            f"# recorded run: tests/llama_rpc.py --record --case {case.name} (llama.cpp, 2 rpc-server devices)\n"
            + shown)
        # the record reads the real load only: from the last load's first "using device" line
        # (the dry runs before it allocate nothing; the shim saw only the real buffers)
        starts = [m.start() for m in re.finditer(r"^.*using device RPC0", log, re.M)]
        log = log[starts[-1]:]
    parsed = parse_llama_log(log)
    layers = {int(i): dev for i, dev in LAYER_DEV.findall(log)}
    overrides = {n: b for n, b in OVERRIDE.findall(log)}
    script = (work / "launch" / "complete.sh").read_text()
    ts = re.search(r"\n\s+-ts (\S+)", script)
    flags = {"-ts": ts.group(1) if ts else "",
             "-ngl": re.search(r"\n\s+-ngl (\S+)", script).group(1),
             "-ot": re.findall(r"\n\s+-ot '([^']*)'", script)}
    return {"case": {**case.__dict__, "cpu_moe_layers": list(case.cpu_moe_layers)},
            "emitted_flags": flags,
            "command": " ".join(Path(a).name if i == 1 else a for i, a in enumerate(argv))
            .replace(rpc.rpc_arg, "RPC_ENDPOINTS"),
            "fixture": {"digest": model.digest(), "file_bytes": model.file_bytes},
            "layer_devices": {str(k): v for k, v in sorted(layers.items())},
            "cpu_overrides": sorted(n for n, b in overrides.items() if b.startswith("CPU")),
            "buffers": [{**b, "buffer_type": _device_of(b["buffer_type"], endpoints)} for b in parsed["buffers"]],
            "exact": parsed["exact"],
            "pipeline_parallel": "pipeline parallelism enabled" in log}


def _device_of(buffer_type: str, endpoints: list[str]) -> str:
    """'RPC0[127.0.0.1:PORT]' -> 'RPCk', k the position of that server in --rpc: every
    rpc-server numbers its own devices from 0 (ggml-rpc.cpp L1092 names the buffer type
    RPC<remote device>[endpoint]), while llama.cpp names the devices RPC0, RPC1, ... in order."""
    m = re.match(r"RPC\d+\[(.*)\]$", buffer_type)
    if not m:
        return buffer_type
    return f"RPC{endpoints.index(m.group(1))}"


def predict(model, case: RpcCase) -> dict:
    """moeplan's per-device figures for a case: blocks, weights (each tensor padded to the
    32-byte alignment of the CPU backend behind rpc-server), KV, compute buffer; an RPC device
    has no CUDA context and no margin."""
    from moeplan.planner.memory.devices import assign_blocks, device_memory, parse_tensor_split

    p = case_placement(case)
    weights = parse_tensor_split(case.tensor_split or "1", case.n_devices)
    devs = device_memory(model, p, weights, context_bytes=0, margin_bytes=0)
    block_dev, out_dev = assign_blocks(len(model.layers), weights, case.n_gpu_layers)
    cpu = set(case.cpu_moe_layers)
    out = []
    for d in devs:
        blocks = set(d.blocks)
        tensors = [t for layer in model.layers if layer.index in blocks for t in layer.tensors
                   if not (t.group == "experts" and layer.index in cpu)]
        if d.output:
            tensors += [t for t in model.globals if t.group != "embed"]
        padded = sum(t.n_bytes + (-t.n_bytes % 32) for t in tensors)
        out.append({"device": f"RPC{d.index}", "blocks": sorted(blocks), "output": d.output,
                    "weights_bytes": padded, "kv_bytes": d.kv_bytes, "compute_bytes": d.compute_bytes})
    return {"devices": out, "block_devices": list(block_dev), "output_device": out_dev}


def measured(rec: dict, n_devices: int) -> list[dict]:
    """Per-device buffers of a record (exact bytes), by device name RPC0.."""
    out = []
    for k in range(n_devices):
        name = f"RPC{k}"

        def total(kind: str, name: str = name) -> int | None:
            sizes = [b["bytes"] if b["bytes"] is not None else round(b["mib"] * MIB)
                     for b in rec["buffers"] if b["kind"] == kind and b["buffer_type"] == name]
            return sum(sizes) if sizes else 0
        blocks = sorted(int(i) for i, d in rec["layer_devices"].items() if d == name)
        out.append({"device": name, "blocks": blocks, "weights_bytes": total("model"), "kv_bytes": total("kv"),
                    "compute_bytes": total("compute")})
    return out


def record(bin_dir: Path, work: Path, only: tuple[str, ...] = ()) -> None:
    work.mkdir(parents=True, exist_ok=True)
    shim = build_alloc_shim(work)
    info = llama_build_info(bin_dir)
    m = re.search(r"commit (\w+)", info)
    commit = m.group(1) if m else ""
    DATA.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        if only and case.name not in only:
            continue
        rec = run_case(case, bin_dir, work / case.name, shim)
        rec["llama_cpp"] = {"build": info, "commit": commit}
        (DATA / f"{case.name}.json").write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
        print(f"recorded {case.name}", file=sys.stderr)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="record llama.cpp RPC multi-device runs")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", default="/tmp/moeplan-rpc")
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--case", action="append", default=[], help="record only this case (repeatable)")
    a = ap.parse_args()
    if a.record:
        record(Path(a.bin), Path(a.work), tuple(a.case))
