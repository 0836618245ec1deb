"""The emitted ik_llama.cpp commands, run for real on tiny synthetic MoE GGUFs.

Runs only when MOEPLAN_IK_BIN names a folder with ik_llama.cpp's llama-server, llama-cli and
llama-bench (its build/bin; how to make one: README, "ik_llama.cpp"). Builds nothing. For a GQA
model (qwen3moe-like) and an MLA model (deepseek2-like, with a dense leading block and a shared
expert) it emits with `--bin` (so every flag comes from the build's own --help, which ik prints
with exit code 1), then checks:
  * complete.sh runs a few tokens, and the loader put exactly the plan's expert tensors in a
    CPU buffer: ik logs `Tensor blk.N.ffn_up_exps.weight (size = X MiB) buffer type
    overridden to CPU` (on a CUDA build the target may read CUDA_Host); nothing else moves;
  * the MLA model runs with -mla 3; the fixture has no attn_kv_b (as GGUFs converted by
    mainline), so ik says "missing wkv_b" and runs MLA 1, as launch.sh's note says;
  * bench.sh with one repetition completes, its own override check passes, and every test in
    the JSON reports the plan's `override_tensor` and a positive speed.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from gguf_fixtures import write_deepseek2, write_qwen3moe
from launch_plans import make_plan, write_runnable

from moeplan.launch import find_programs, write_launch
from moeplan.launch.benchjson import parse_bench_json
from moeplan.launch.ikllama import BENCH_OVERRIDE_FIELD
from moeplan.planner.placement import Placement
from moeplan.probes.models import resolve_model

BIN = os.environ.get("MOEPLAN_IK_BIN", "")
PROGRAMS = ("llama-server", "llama-cli", "llama-bench")
pytestmark = pytest.mark.skipif(
    not BIN or not all((Path(BIN) / n).is_file() for n in PROGRAMS),
    reason="set MOEPLAN_IK_BIN to an ik_llama.cpp build/bin with llama-server, llama-cli and llama-bench")

OVERRIDE_RE = re.compile(r"Tensor (\S+) \(size = [^)]*\) buffer type overridden to (\S+)")

CASES = {
    # GQA, every block MoE, non-contiguous CPU blocks, q8_0 KV, no mmap (--no-mmap)
    "qwen3moe": (write_qwen3moe, {"n_layer": 6},
                 Placement(backend="ik_llama.cpp", cpu_moe_layers=(1, 2, 4), n_ctx=512, n_threads=2, n_batch=128,
                           n_ubatch=64, cache_type_k="q8_0", cache_type_v="q8_0", load_mode="no-mmap")),
    # MLA, one dense leading block, shared experts stay off the CPU patterns, mmap
    "deepseek2": (write_deepseek2, {"n_layer": 5, "n_dense": 1},
                  Placement(backend="ik_llama.cpp", cpu_moe_layers=(1, 3), n_ctx=512, n_threads=2, n_batch=64,
                            n_ubatch=32, load_mode="mmap")),
}


def run(script: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=600,
                          cwd=str(script.parent.parent), stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("case", sorted(CASES))
def test_emitted_ik_commands_run(case, tmp_path):
    writer, kw, placement = CASES[case]
    path, _ = write_runnable(writer, tmp_path / f"{case} it's \"tiny\".gguf", **kw)
    m = resolve_model(str(path))
    plan = make_plan(m, placement)
    programs = find_programs("ik_llama.cpp", BIN)
    assert all(fs.from_help for fs in programs.flags.values()), "flags must come from the binaries' --help"
    launch, _ = write_launch(plan, m, tmp_path / "launch files", "ik_llama.cpp", BIN, programs=programs)
    folder = tmp_path / "launch files"

    # a few tokens; a later -n wins over the script's -n 32
    r = run(folder / "complete.sh", "--verbose", "-n", "4")
    assert r.returncode == 0, r.stderr[-3000:]
    placed = dict(OVERRIDE_RE.findall(r.stderr))
    want = {t.name for t in m.tensors if t.group == "experts" and t.layer in placement.cpu_moe_layers}
    assert want and set(placed) == want, (sorted(placed), sorted(want))
    assert all(b == "CPU" or b.endswith("_Host") for b in placed.values()), placed
    if m.mla:
        assert "-mla" in launch.script("complete.sh").command.argv
        assert "missing wkv_b" in r.stderr  # the fixture has attn_k_b/attn_v_b only

    # llama-bench, one repetition: the script's own override check and the JSON
    r = run(folder / "bench.sh", "-r", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    records = parse_bench_json((folder / "bench.json").read_text())
    expected = launch.script("bench.sh").command.argv[launch.script("bench.sh").command.argv.index("-ot") + 1]
    assert records and all(rec.get(BENCH_OVERRIDE_FIELD) == expected for rec in records), records
    assert all(rec["avg_ts"] > 0 for rec in records)
