"""moeplan's emitted ik_llama.cpp scripts, run on tiny GGUFs with two local RPC devices.

A CPU build of ik_llama.cpp with -DGGML_RPC=ON and two `rpc-server -H 127.0.0.1 -p PORT`
processes (passed with `--rpc`) has two devices, exactly as a box with two GPUs: the blocks
are split over them by `-ts`, and `-ot ...=CPU` keeps the plan's experts in host memory. ik
prints no per-layer device lines with every setup, so the runs use an LD_PRELOAD shim
(tests/ik_tensor_shim.c) that logs the buffer every model tensor is placed in and the exact
bytes of every buffer. Then a placement is checked tensor by tensor, on each device and on the
CPU, and the buffers byte for byte.

Used by tests/test_launch_ik_real.py (live, with MOEPLAN_IK_BIN) and to record the runs that
CI checks (tests/test_check_ik_real.py):

    MOEPLAN_IK_BIN=/path/to/ik_llama.cpp/build/bin PYTHONPATH=.:tests python tests/ik_runs.py --record

writes tests/data/ik_runs/<case>.log (the run's output, with a header naming the build, its
commit and the command) and <case>.json (llama-bench's JSON, for bench cases).
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from gguf_fixtures import write_deepseek2, write_qwen3moe  # noqa: E402
from launch_plans import make_plan, write_runnable  # noqa: E402
from llama_rpc import RpcServers, rpc_server_path  # noqa: E402

from moeplan.planner.options import PlanOptions  # noqa: E402
from moeplan.planner.placement import Placement  # noqa: E402

DATA = HERE / "data" / "ik_runs"
SHIM_SOURCE = HERE / "ik_tensor_shim.c"
PROGRAMS = ("llama-server", "llama-cli", "llama-bench")

# ik_llama.cpp converts a mainline MLA GGUF (one KV head, attn_k_b/attn_v_b, no attn_kv_b) only
# for DeepSeek's own head sizes: n_head % 4 == 0, key length kv_lora + rope = 576, value
# length kv_lora = 512, rope 64 (src/llama-hparams.cpp, LLM_ARCH_DEEPSEEK2); else it aborts
# with "Sorry, uknown model => cannot fix it => bailing out". So the MLA fixture has
# DeepSeek-V3's attention head sizes (nope 128, rope 64, v 128, kv_lora 512) on a small trunk,
# with the expert_weights_scale key ik requires (and V3's weights norm and sigmoid gating).
DEEPSEEK_HEADS = {"n_head": 4, "kv_lora": 512, "rope": 64, "nope": 128, "v_dim": 128, "weights_scale": 2.5}
FIXTURES = {
    "qwen3moe": (write_qwen3moe, {"n_layer": 6}),
    "deepseek2": (write_deepseek2, {"n_layer": 5, "n_dense": 1, **DEEPSEEK_HEADS}),
}


@dataclass(frozen=True)
class IkCase:
    name: str
    fixture: str  # a FIXTURES key
    placement: Placement
    rpc: int = 2  # local RPC devices
    script: str = "complete.sh"  # complete.sh | bench.sh


def _p(**kw) -> Placement:
    return Placement(backend="ik_llama.cpp", n_threads=2, **kw)


CASES = (
    # GQA: non-contiguous CPU blocks, an uneven -ts, q8_0 KV, no mmap
    IkCase("ik-qwen3moe-rpc2-complete", "qwen3moe",
           _p(cpu_moe_layers=(1, 2, 4), n_ctx=512, n_batch=128, n_ubatch=64, cache_type_k="q8_0",
              cache_type_v="q8_0", load_mode="no-mmap", n_gpus=2, options=PlanOptions(tensor_split="3,4"))),
    # a split where ik's byte rule and llama.cpp's block count disagree (probe ts-block-counts):
    # -ts 1,5 as block counts is blocks 0-1 on the first device, as ik reads it block 0 only
    IkCase("ik-qwen3moe-rpc2-ts15-complete", "qwen3moe",
           _p(cpu_moe_layers=(3,), n_ctx=512, n_batch=128, n_ubatch=64, load_mode="no-mmap", n_gpus=2,
              options=PlanOptions(tensor_split="1,5"))),
    # MLA with DeepSeek's head sizes: a dense leading block, shared experts that stay with their block, mmap
    IkCase("ik-deepseek2-rpc2-complete", "deepseek2",
           _p(cpu_moe_layers=(1, 3), n_ctx=512, n_batch=64, n_ubatch=32, load_mode="mmap", n_gpus=2)),
    # llama-bench with the plan's -ot; without RPC devices: ik's llama-bench with --rpc aborts at exit
    # ("corrupted size vs. prev_size", probe bench-rpc-exit) after writing its JSON
    IkCase("ik-qwen3moe-bench", "qwen3moe",
           _p(cpu_moe_layers=(0, 5), n_ctx=512, n_batch=128, n_ubatch=64, n_gpus=1), rpc=0, script="bench.sh"),
)

TENSOR_LINE = re.compile(r"^moeplan-tensor (\S+) (\S+)$", re.M)


def have_build(bin_dir: str | Path) -> bool:
    return bool(bin_dir) and all((Path(bin_dir) / n).is_file() for n in PROGRAMS) \
        and rpc_server_path(Path(bin_dir)) is not None


def build_shim(out_dir: Path, cc: str = "cc") -> Path | None:
    """Compile the tensor/allocation shim; None without a C compiler."""
    if shutil.which(cc) is None:
        return None
    out = Path(out_dir) / "ik_tensor_shim.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(SHIM_SOURCE), "-ldl"], check=True,
                   capture_output=True)
    return out


def build_info(bin_dir: Path) -> tuple[str, str]:
    """(ik's `llama-cli --version` text, its commit)."""
    r = subprocess.run([str(Path(bin_dir) / "llama-cli"), "--version"], capture_output=True, text=True, timeout=60)
    text = " ".join(line.strip() for line in (r.stdout + r.stderr).splitlines() if "version" in line or "built" in line)
    m = re.search(r"\(([0-9a-f]{7,40})\)", text)
    return text, m.group(1) if m else ""


def write_model(fixture: str, folder: Path):
    """The fixture GGUF (runnable: byte tokenizer) and its ModelSpec."""
    from moeplan.probes.models import resolve_model

    writer, kw = FIXTURES[fixture]
    folder.mkdir(parents=True, exist_ok=True)
    path, _ = write_runnable(writer, folder / f"{fixture}.gguf", **kw)
    return path, resolve_model(str(path))


ALLOC_LINE = re.compile(r"^moeplan-alloc (\S+) (\d+)$", re.M)
MIB = 1024 * 1024
KINDS = {"model": "weights", "KV": "kv", "compute": "compute"}


def device_of(buffer_name: str) -> str:
    """'RPC0[RPC1]' (an RPC buffer, its endpoint already replaced by RPCk) -> 'RPC1'; host
    buffers -> 'CPU'."""
    m = re.match(r"RPC\d*\[(RPC\d+)\]$", buffer_name)
    if m:
        return m.group(1)
    return "CPU" if buffer_name.startswith(("CPU", "AMX")) or "_Host" in buffer_name else buffer_name


def tensor_devices(log: str) -> dict[str, str]:
    """Tensor name -> 'CPU' or 'RPCk', from the shim's lines."""
    return {name: device_of(buf) for name, buf in TENSOR_LINE.findall(log)}


def planned_devices(model, p: Placement) -> dict[str, str]:
    """Tensor name -> where the plan puts it: the blocks of each device by the plan's -ts
    (block counts, planner/memory/devices.py), the CPU blocks' experts on the CPU, the output
    layer on its device, token_embd on the CPU."""
    from moeplan.planner.memory.devices import assign_blocks, parse_tensor_split

    ts = p.options.tensor_split or ",".join("1" for _ in range(p.n_gpus))
    devs, out_dev = assign_blocks(len(model.layers), parse_tensor_split(ts, p.n_gpus), p.n_gpu_layers)
    cpu = set(p.cpu_moe_layers)
    out = {}
    for i, layer in enumerate(model.layers):
        for t in layer.tensors:
            on_cpu = devs[i] < 0 or (t.group == "experts" and layer.index in cpu)
            out[t.name] = "CPU" if on_cpu else f"RPC{devs[i]}"
    for t in model.globals:
        out[t.name] = "CPU" if t.group == "embed" or out_dev < 0 else f"RPC{out_dev}"
    return out


def predicted_buffers(model, p: Placement) -> dict[str, dict[str, int]]:
    """moeplan's accounting per device: weights (its tensors, each padded to the 32-byte
    alignment of the CPU backend behind rpc-server), KV and compute (planner/memory/devices.py
    device_memory; no CUDA context or margin on an RPC device)."""
    from moeplan.launch.ikllama import computed_wkv_b_bytes
    from moeplan.planner.memory.devices import device_memory, parse_tensor_split

    ts = p.options.tensor_split or ",".join("1" for _ in range(p.n_gpus))
    devs = device_memory(model, p, parse_tensor_split(ts, p.n_gpus), context_bytes=0, margin_bytes=0)
    where = planned_devices(model, p)
    sizes = {t.name: t.n_bytes for t in model.tensors}
    out = {}
    for d in devs:
        name = f"RPC{d.index}"
        weights = sum(n + (-n % 32) for t, n in sizes.items() if where[t] == name)
        out[name] = {"weights": weights, "kv": d.kv_bytes, "compute": d.compute_bytes,
                     "computed wkv_b": sum(computed_wkv_b_bytes(model.layers[b]) for b in d.blocks)}
    return out


def measured_buffers(log: str) -> dict[str, dict[str, int]]:
    """Device -> {'weights', 'kv', 'compute', 'computed wkv_b'} exact bytes: the buffer lines
    `check` reads (moeplan.check.parse), each matched to the shim's allocation of the same
    buffer type and size in MiB (printed with two decimals), in order; 'computed wkv_b' is the
    device allocations no buffer line names (ik's computed MLA tensors)."""
    from moeplan.check.parse import parse_log

    run = parse_log(log)
    allocs = [(device_of(n), int(b)) for n, b in ALLOC_LINE.findall(log)]
    used = [False] * len(allocs)
    out: dict[str, dict[str, int]] = {}
    for b in run.buffers:
        dev = device_of(b.buffer_type)
        if b.kind not in KINDS or dev == "CPU":
            continue
        for j, (name, size) in enumerate(allocs):
            if not used[j] and name == dev and abs(size / MIB - b.mib) <= 0.0051:
                used[j] = True
                e = out.setdefault(dev, {"weights": 0, "kv": 0, "compute": 0})
                e[KINDS[b.kind]] += size
                break
        else:
            raise AssertionError(f"no allocation of {b.mib} MiB on {dev} for {b.kind} (line {b.line_no})")
    for j, (name, size) in enumerate(allocs):
        if not used[j] and name != "CPU":
            e = out.setdefault(name, {"weights": 0, "kv": 0, "compute": 0})
            e["computed wkv_b"] = e.get("computed wkv_b", 0) + size
    for e in out.values():
        e.setdefault("computed wkv_b", 0)
    return out


COMPUTE_OVER = 0.15  # the bound tests/test_multi_gpu_llamacpp.py holds llama.cpp's compute buffers to


def check_run(case: IkCase, model, log: str) -> list[tuple[str, str, int, int]]:
    """Assert that a complete.sh run of `case` placed every tensor where the plan says, that
    `check` reads the plan's placement back from the log, and that each device's buffers are
    moeplan's accounting (weights and KV exact; the compute buffer is held to its bounds by
    compute_outside_bounds), plus the attn_kv_b ik computes for an MLA GGUF from mainline
    (exact, planner/memory/devices.py computed_kv_b_bytes, which an ik plan's memory counts).
    Returns (device, buffer, predicted bytes, measured bytes) rows."""
    from moeplan.check.compare import differences
    from moeplan.check.parse import is_host_buffer, parse_log
    from moeplan.check.placement import recover_placement
    from moeplan.planner.memory.accounting import MemoryConstants
    from moeplan.probes.hwprofile import load_hardware
    from moeplan.profiles.backends import read_priors

    p = case.placement
    want = planned_devices(model, p)
    placed = tensor_devices(log)
    assert placed, "no moeplan-tensor lines: the run needs LD_PRELOAD of tests/ik_tensor_shim.c"
    wrong = {n: (placed.get(n), d) for n, d in want.items() if placed.get(n) != d}
    assert not wrong, f"tensors not where the plan puts them (placed, planned): {wrong}"
    run = parse_log(log, case.name)
    assert run.tool == "ik_llama.cpp", run.tool
    cpu_experts = {n for n, d in want.items() if d == "CPU" and ".ffn_" in n and "_exps." in n}
    assert {o.tensor for o in run.overrides if is_host_buffer(o.buffer_type)} == cpu_experts
    rec = recover_placement(run, model)
    assert rec.placement.cpu_moe_layers == p.cpu_moe_layers, rec.placement.cpu_moe_layers
    assert rec.evidence["cpu_moe_layers"] == "log"
    diffs = differences(model, p, rec, load_hardware("desktop-4090-ddr5"), read_priors("ik_llama.cpp"),
                        MemoryConstants())
    assert diffs == (), diffs
    pred, meas = predicted_buffers(model, p), measured_buffers(log)
    assert set(meas) == set(pred), (sorted(meas), sorted(pred))
    rows = []
    for dev in sorted(pred):
        for kind in ("weights", "kv", "compute", "computed wkv_b"):
            rows.append((dev, kind, pred[dev][kind], meas[dev][kind]))
    for dev, kind, want_b, got_b in rows:
        if kind != "compute":
            assert want_b == got_b, (dev, kind, want_b, got_b)
    return rows


def compute_outside_bounds(rows: list[tuple[str, str, int, int]],
                           below_bytes: int = 0) -> list[tuple[str, int, int, float]]:
    """Compute-buffer rows of check_run outside [ik's - below_bytes, ik's + COMPUTE_OVER]:
    (device, predicted, measured, relative difference). `below_bytes`: ggml-alloc's
    fragmentation that the live-set model leaves out (compute_buffer.fragmentation_allowance,
    the bound tests/test_memory_llamacpp.py holds llama.cpp's buffers to)."""
    out = []
    for dev, kind, want_b, got_b in rows:
        rel = (want_b - got_b) / got_b if kind == "compute" else 0.0
        if kind == "compute" and not (-below_bytes <= want_b - got_b and rel <= COMPUTE_OVER):
            out.append((dev, want_b, got_b, round(rel, 4)))
    return out


EXIT_ABORT = re.compile(r"corrupted size vs\. prev_size|double free or corruption|free\(\): invalid")


def finished_then_aborted(log: str) -> bool:
    """ik's llama-cli and llama-bench with --rpc devices finish the run (timings printed, JSON
    written), then abort in teardown with glibc's "corrupted size vs. prev_size while
    consolidating" or "double free or corruption" (SIGABRT, exit 134): at 8337e4cd3 on this
    CPU build, with or without the shim (probe bench-rpc-exit). Such a run counts as complete."""
    return EXIT_ABORT.search(log) is not None and ("eval time =" in log or '"avg_ts"' in log)


def run_case(case: IkCase, bin_dir: Path, work: Path, shim: Path | None = None,
             extra_args: tuple[str, ...] = ()) -> tuple[object, object, str, str]:
    """(model, plan, log, command) of one case: the emitted script run on `case.rpc` local RPC
    devices. The log is the script's stderr + stdout (for bench.sh: llama-bench's JSON, then
    its stderr); endpoints in it read RPC0, RPC1 (the k-th server in --rpc)."""
    from moeplan.launch import find_programs, write_launch

    path, model = write_model(case.fixture, work)
    plan = make_plan(model, case.placement)
    folder = work / case.name
    programs = find_programs("ik_llama.cpp", str(bin_dir))
    write_launch(plan, model, folder, "ik_llama.cpp", str(bin_dir), programs=programs)
    env = dict(os.environ)
    if shim is not None:
        env["LD_PRELOAD"] = str(shim)
    with RpcServers(bin_dir, case.rpc) as rpc:
        # -dev names the RPC devices: without it ik 8337e4cd3 lists each RPC server twice
        # (llama_model_load_from_file adds the --rpc names and the same names again as "GPUs"),
        # so -ts would split over four devices (probe rpc-no-dev)
        extra = ["--rpc", rpc.rpc_arg, "-dev", ",".join(f"RPC0[{ep}]" for ep in rpc.endpoints)] if rpc.endpoints else []
        if case.script == "complete.sh":
            extra += ["--verbose", "-n", "4"]
        else:
            extra += ["-r", "1", "-p", "64", "-n", "8"]
        extra += list(extra_args)
        r = subprocess.run(["bash", str(folder / case.script), *extra], capture_output=True, text=True, timeout=600,
                           cwd=str(work), env=env, stdin=subprocess.DEVNULL)
        text = r.stderr + r.stdout
        if case.script == "bench.sh":
            text = (folder / "bench.json").read_text() + "\n" + r.stderr
        if r.returncode != 0 and not finished_then_aborted(text):
            raise RuntimeError(f"{case.name}: exit {r.returncode}\n{text[-3000:]}")
        for k, ep in enumerate(rpc.endpoints):
            text = text.replace(ep, f"RPC{k}")
        cmd = " ".join([case.script, *extra]).replace(rpc.rpc_arg, ",".join(f"RPC{k}" for k in range(case.rpc)))
        for k, ep in enumerate(rpc.endpoints):
            cmd = cmd.replace(ep, f"RPC{k}")
    return model, plan, text, cmd


# ---- ik_llama.cpp's own behaviours that matter to a plan (docs/launch.md) --------------------
# Each probe runs one program of the build on a fixture with the flags given and keeps what it
# printed; tests/test_check_ik_real.py checks the docs' statements against these recordings.

@dataclass(frozen=True)
class Probe:
    name: str
    program: str  # llama-cli | llama-bench
    fixture: str
    args: tuple[str, ...]
    rpc: int = 0
    expect_fail: bool = False
    dev: bool = True  # name the RPC devices with -dev (see run_case); False shows what happens without


PROBES = (
    # -ncmoe N: the last N MoE blocks with fewer than two devices ...
    Probe("ncmoe-1dev", "llama-cli", "qwen3moe", ("-ngl", "99", "-ncmoe", "2"), rpc=1),
    # ... and with several devices under -sm layer each device's share, from its last block back
    Probe("ncmoe-2dev", "llama-cli", "qwen3moe", ("-ngl", "99", "-ncmoe", "2", "-ts", "1,1"), rpc=2),
    # llama-bench --n-cpu-moe N: blocks 0..N-1 (its own -ot patterns, in override_tensor)
    Probe("bench-ncmoe", "llama-bench", "qwen3moe", ("-ngl", "99", "--n-cpu-moe", "2", "-p", "16", "-n", "4",
                                                     "-r", "1", "-o", "json")),
    # --rpc without -dev: each RPC server is listed twice ("Setting default device" over 4 devices)
    Probe("rpc-no-dev", "llama-cli", "qwen3moe", ("-ngl", "99", "-ts", "1,1"), rpc=2, dev=False),
    # llama-bench with an RPC device (no -dev: it has none) writes its JSON, then aborts in teardown
    Probe("bench-rpc-exit", "llama-bench", "qwen3moe", ("-ngl", "99", "-p", "16", "-n", "4", "-r", "1", "-o", "json"),
          rpc=1, dev=False),
    # -ts by bytes: a plain -ts 1,5 puts block 0 alone on the first device (llama.cpp: blocks 0-1)
    Probe("ts-block-counts", "llama-cli", "qwen3moe", ("-ngl", "99", "-ts", "1,5"), rpc=2),
    # --fit refuses explicit overrides and -ncmoe
    Probe("fit-ot", "llama-cli", "qwen3moe", ("--fit", "-ot", r"blk\.1\.ffn_up_exps=CPU"), rpc=1, expect_fail=True),
    Probe("fit-ncmoe", "llama-cli", "qwen3moe", ("--fit", "-ncmoe", "2"), rpc=1, expect_fail=True),
    # -sm graph on a build without CUDA/SYCL/Vulkan
    Probe("sm-graph", "llama-cli", "qwen3moe", ("-ngl", "99", "-sm", "graph", "-ts", "1,1"), rpc=2, expect_fail=True),
    # the defaults of -mla, -amb, -fmoe: none given, an MLA model
    Probe("defaults-mla", "llama-cli", "deepseek2", ("-ngl", "99"), rpc=1),
)


def run_probe(probe: Probe, bin_dir: Path, work: Path) -> tuple[str, str, int]:
    """(command, output, exit code) of a probe; endpoints read RPCk."""
    path, _ = write_model(probe.fixture, work)
    argv = [str(Path(bin_dir) / probe.program), "-m", str(path), "-t", "2"]
    if probe.program == "llama-cli":
        argv += ["-c", "256", "-n", "1", "-p", "hi", "--verbose"]
    with RpcServers(bin_dir, probe.rpc) as rpc:
        argv += [*probe.args] + (["--rpc", rpc.rpc_arg] if rpc.endpoints else [])
        if rpc.endpoints and probe.dev:
            argv += ["-dev", ",".join(f"RPC0[{ep}]" for ep in rpc.endpoints)]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL, cwd=str(work))
        text = r.stdout + "\n" + r.stderr if probe.program == "llama-bench" else r.stderr + r.stdout
        for k, ep in enumerate(rpc.endpoints):
            text = text.replace(ep, f"RPC{k}")
        cmd = " ".join([probe.program, "-m", f"{probe.fixture}.gguf", *argv[3:]])
        for k, ep in enumerate(rpc.endpoints):
            cmd = cmd.replace(ep, f"RPC{k}")
    if (r.returncode != 0 and not finished_then_aborted(text)) != probe.expect_fail:
        raise RuntimeError(f"probe {probe.name}: exit {r.returncode}\n{text[-3000:]}")
    return cmd, text, r.returncode


def record_probes(bin_dir: Path, only: tuple[str, ...] = (), commit_given: str = "") -> None:
    import tempfile

    version, commit = _commit(bin_dir, commit_given)
    DATA.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for probe in PROBES:
            if only and probe.name not in only:
                continue
            work = Path(tmp) / probe.name
            work.mkdir()
            cmd, text, rc = run_probe(probe, bin_dir, work)
            head = (f"# RECORDED: ik_llama.cpp {version} (commit {commit}), CPU build with -DGGML_RPC=ON, "
                    f"{probe.rpc} local rpc-server devices, {platform.machine()}, {time.strftime('%Y-%m-%d')}\n"
                    f"# run: {cmd} (tests/ik_runs.py probe {probe.name}; fixture {probe.fixture}); exit code {rc}\n")
            (DATA / f"probe-{probe.name}.log").write_text(head + text)
            print(f"recorded probe {probe.name}", file=sys.stderr)


def _commit(bin_dir: Path, given: str) -> tuple[str, str]:
    """(version text, commit): the binary's own, else `given` (a build from a source archive
    reports version 0 (unknown))."""
    version, commit = build_info(bin_dir)
    if not commit and given:
        return version + " - built from a source archive", given
    return version, commit


def record(bin_dir: Path, only: tuple[str, ...] = (), commit_given: str = "") -> None:
    import tempfile

    version, commit = _commit(bin_dir, commit_given)
    DATA.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        shim = build_shim(Path(tmp))
        for case in CASES:
            if only and case.name not in only:
                continue
            work = Path(tmp) / case.name
            work.mkdir()
            model, _, text, cmd = run_case(case, bin_dir, work, shim)
            head = (f"# RECORDED: ik_llama.cpp {version} (commit {commit}), CPU build with -DGGML_RPC=ON, "
                    f"{case.rpc} local rpc-server devices, {platform.machine()}, {time.strftime('%Y-%m-%d')}\n"
                    f"# run: moeplan's emitted {cmd} on tests/ik_runs.py fixture {case.fixture} "
                    f"(case {case.name}), LD_PRELOAD=tests/ik_tensor_shim.c\n"
                    f"# fixture digest {model.digest()}\n")
            if case.script == "bench.sh":
                js, _, rest = text.partition("\n]\n")
                (DATA / f"{case.name}.json").write_text(js + "\n]\n")  # llama-bench's JSON, unchanged
                text = rest
            (DATA / f"{case.name}.log").write_text(head + text)
            print(f"recorded {case.name}", file=sys.stderr)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="run and record moeplan's ik_llama.cpp scripts on RPC devices")
    ap.add_argument("--bin", default=os.environ.get("MOEPLAN_IK_BIN", ""))
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--probes", action="store_true", help="record the behaviour probes")
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("--commit", default="", help="the build's commit, when its --version does not say")
    a = ap.parse_args()
    if not have_build(a.bin):
        sys.exit("error: --bin (or MOEPLAN_IK_BIN) must name an ik_llama.cpp build/bin with llama-server, "
                 "llama-cli, llama-bench and rpc-server")
    if a.record:
        record(Path(a.bin), tuple(a.case), a.commit)
    if a.probes:
        record_probes(Path(a.bin), tuple(a.case), a.commit)
