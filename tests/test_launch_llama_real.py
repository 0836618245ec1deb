"""The emitted llama.cpp commands, run for real on tiny synthetic MoE GGUFs.

Runs only when MOEPLAN_LLAMA_BIN names a folder with llama-completion and llama-bench (and,
for the server check, llama-server), e.g. a llama.cpp build/bin. Checks: every flag is
accepted (the flags come from the programs' own --help), the run completes, the loader places
exactly the plan's expert tensors in a host buffer (`--verbose` logs 'tensor blk.N.ffn_*_exps.weight
(...) buffer type overridden to CPU'; on a CPU-only build the target is still CPU), expert
biases are not moved, and llama-bench's JSON reports the plan's tensor_buft_overrides.

Some VMs report AMX in cpuid but fault on its instructions (SIGILL in ggml's AMX matmul);
then the run is repeated once with weight repacking off (-nr / --repack 0), passed through
the scripts' "$@", and the test says so.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
from gguf_fixtures import write_gptoss, write_qwen3moe
from launch_plans import make_plan, write_runnable

from moeplan.launch import find_programs, write_launch
from moeplan.launch.benchjson import check_bench_overrides, parse_bench_json
from moeplan.launch.render import render_script
from moeplan.planner.placement import Placement
from moeplan.probes.models import resolve_model

BIN = os.environ.get("MOEPLAN_LLAMA_BIN", "")
pytestmark = pytest.mark.skipif(
    not BIN or not all((Path(BIN) / n).is_file() for n in ("llama-completion", "llama-bench")),
    reason="set MOEPLAN_LLAMA_BIN to a llama.cpp build/bin with llama-completion and llama-bench")

OVERRIDE_RE = re.compile(r"tensor (\S+) \(.*\) buffer type overridden to (\S+)")
SIGILL = (-signal.SIGILL, 128 + signal.SIGILL)


def run(script: Path, *args: str, retry_args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    r = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=300,
                       cwd=str(script.parent.parent))
    if r.returncode in SIGILL and retry_args:
        warnings.warn(f"{script.name} died of SIGILL (AMX on this CPU?): rerun with {' '.join(retry_args)}")
        r = subprocess.run(["bash", str(script), *args, *retry_args], capture_output=True, text=True, timeout=300,
                           cwd=str(script.parent.parent))
    return r


CASES = {
    # qwen3moe-like: non-contiguous CPU blocks, q8_0 KV, no mmap, op offload kept
    "qwen3moe": (write_qwen3moe, {"n_layer": 6},
                 Placement(cpu_moe_layers=(1, 2, 4), n_ctx=512, n_threads=2, n_batch=128, n_ubatch=64,
                           cache_type_k="q8_0", cache_type_v="q8_0", load_mode="no-mmap")),
    # gpt-oss-like: expert biases must stay where they were; mmap; no op offload
    "gpt-oss": (write_gptoss, {"n_layer": 4, "n_head": 4},
                Placement(cpu_moe_layers=(0, 1, 3), n_ctx=512, n_threads=2, n_batch=64, n_ubatch=32,
                          op_offload=False, load_mode="mmap")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_emitted_llama_cpp_commands_run(case, tmp_path):
    writer, kw, placement = CASES[case]
    path, _ = write_runnable(writer, tmp_path / f"{case} it's \"tiny\".gguf", **kw)
    m = resolve_model(str(path))
    plan = make_plan(m, placement)
    programs = find_programs("llama.cpp", BIN)
    assert all(fs.from_help for fs in programs.flags.values()), "flags must come from the binaries' --help"
    launch, _ = write_launch(plan, m, tmp_path / "launch files", "llama.cpp", BIN, programs=programs)
    folder = tmp_path / "launch files"

    # one short completion, with the loader's placement log
    r = run(folder / "complete.sh", "--verbose", retry_args=("-nr",))
    assert r.returncode == 0, r.stderr[-2000:]
    placed = {}
    for name, buft in OVERRIDE_RE.findall(r.stderr):
        placed[name] = buft
    want = {t.name for t in m.tensors if t.group == "experts" and t.layer in placement.cpu_moe_layers}
    assert set(placed) == want
    assert all(b.startswith("CPU") or b == "AMX" or b.endswith("_Host") for b in placed.values()), placed
    assert not [n for n in placed if n.endswith(".bias")]
    assert "eval time" in r.stderr

    # llama-bench: completes and reports the plan's overrides in its JSON
    r = run(folder / "bench.sh", retry_args=("--repack", "0"))
    assert r.returncode == 0, r.stderr[-2000:]
    records = parse_bench_json((folder / "bench.json").read_text())
    assert len(records) == 2 and check_bench_overrides(records, launch.bench_overrides) == ()
    assert all(rec["avg_ts"] > 0 for rec in records)

    # An unknown buffer type. As emitted, -fa follows -ot, and llama-bench fails loudly ...
    bad = folder / "bench-bad.sh"
    bad.write_text((folder / "bench.sh").read_text().replace("=CPU'", "=NO_SUCH_BUFFER'"))
    r = run(bad, retry_args=("--repack", "0"))
    assert r.returncode == 1 and "invalid parameter" in r.stderr
    # ... but with -ot just before -o json, llama-bench prints an error on stdout, drops the
    # override and exits 0 (-o resets its error flag): bench.sh's own check must catch that
    s = launch.script("bench.sh")
    parts = [p for p in s.command.parts if p[0] != "-ot"]
    ot = next(p for p in s.command.parts if p[0] == "-ot")
    i = parts.index(("-o", "json"))
    parts[i:i] = [("-ot", ot[1].replace("=CPU", "=NO_SUCH_BUFFER"))]
    silent = replace(s, name="bench-silent.sh", command=replace(s.command, parts=tuple(parts)))
    (folder / silent.name).write_text(render_script(plan, m, launch, silent))
    r = run(folder / silent.name, retry_args=("--repack", "0"))
    out = (folder / "bench.json").read_text()
    assert "unrecognized buffer type 'NO_SUCH_BUFFER'" in out
    assert [rec["tensor_buft_overrides"] for rec in parse_bench_json(out)] == ["none", "none"]
    assert r.returncode == 1 and "did not run with the plan's -ot overrides" in r.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not (Path(BIN) / "llama-server").is_file(), reason="no llama-server in MOEPLAN_LLAMA_BIN")
def test_emitted_llama_server_starts_and_answers(tmp_path):
    path, _ = write_runnable(write_qwen3moe, tmp_path / "server model.gguf", n_layer=4)
    m = resolve_model(str(path))
    plan = make_plan(m, Placement(cpu_moe_layers=(1, 3), n_ctx=512, n_threads=2, n_ubatch=64, n_batch=128))
    write_launch(plan, m, tmp_path / "srv", "llama.cpp", BIN)
    port = _free_port()
    # -nr: repacking off, so a CPU that faults on AMX still serves (it is not a plan flag)
    proc = subprocess.Popen(["bash", str(tmp_path / "srv" / "launch.sh"), "--port", str(port), "-nr"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ok = False
        for _ in range(120):
            if proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as resp:
                    ok = resp.status == 200
                    break
            except OSError:
                time.sleep(0.25)
        assert ok, proc.stderr.read()[-2000:] if proc.poll() is not None else "no /health answer"
        req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=b'{"prompt": "hi", "n_predict": 4}',
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
