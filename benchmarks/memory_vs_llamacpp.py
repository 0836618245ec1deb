"""moeplan's memory accounting against a real llama.cpp, buffer by buffer.

Writes the MoE fixtures of tests/llama_fixtures.py, runs llama.cpp (CPU build) on each over
the matrix of tests/llama_memlog.memory_matrix (ctx x ubatch x flash attention, KV types,
four sequences, no mmap), reads the exact size of every buffer it allocates (log lines plus
the LD_PRELOAD allocation shim) and prints predicted vs measured with the error:

    MOEPLAN_LLAMA_BIN=/path/to/llama.cpp/build/bin python benchmarks/memory_vs_llamacpp.py
    ... --fixtures qwen3moe,gpt-oss --quick          # fewer runs
    ... --record tests/data/llama_memory             # (re)write the recorded figures

The recorded JSON (one file per fixture) keeps the parsed figures, the exact command, the
llama.cpp build and the date; tests/test_memory_llamacpp.py checks moeplan against it.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from llama_fixtures import LLAMA_FIXTURES, write_fixture  # noqa: E402
from llama_memlog import build_alloc_shim, cases_for, compare_run, llama_build_info, parse_llama_log, run_llama  # noqa: E402

from moeplan.planner.memory.accounting import CPU_REPACK_TYPES_X86_AVX512  # noqa: E402
from moeplan.probes.gguf_model import read_gguf_model  # noqa: E402

QUICK = {"n_ctx": 4096}


def build_description(bin_dir: Path) -> dict:
    """Version line, commit and the cmake options of the build that made `bin_dir`."""
    info = {"version": llama_build_info(bin_dir), "bin_dir": str(bin_dir)}
    cache = bin_dir.parent / "CMakeCache.txt"
    if cache.is_file():
        text = cache.read_text(errors="replace")
        src = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", text, re.M)
        opts = dict(re.findall(r"^(GGML_(?:NATIVE|AVX\w*|AMX\w*|F16C|FMA|BMI2|CPU_REPACK|OPENMP|CUDA)):BOOL=(\w+)$",
                               text, re.M))
        info["cmake"] = {k: v for k, v in sorted(opts.items())}
        if src:
            proc = subprocess.run(["git", "-C", src.group(1), "rev-parse", "HEAD"], capture_output=True, text=True)
            if proc.returncode == 0:
                info["commit"] = proc.stdout.strip()
    m = re.search(r"commit (\w+)", info["version"])
    info.setdefault("commit", m.group(1) if m else "unknown")
    return info


def host_description() -> dict:
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line
                break
    except OSError:
        pass
    isa = [f for f in ("avx2", "avx512f", "avx512bw", "avx512vnni", "amx_int8") if re.search(rf"\b{f}\b", flags)]
    return {"machine": platform.machine(), "cpus": os.cpu_count(), "isa": isa}


def record_text(doc: dict) -> str:
    """JSON with one line per run (small, diffable)."""
    head = {k: v for k, v in doc.items() if k != "runs"}
    body = ",\n".join("  " + json.dumps(r, separators=(",", ":")) for r in doc["runs"])
    return json.dumps(head, indent=1)[:-2] + ',\n "runs": [\n' + body + "\n ]\n}\n"


def command_of(argv: list[str], model: Path) -> str:
    """The command line with the binary's name and the model's file name only."""
    out = [Path(argv[0]).name] + [model.name if a == str(model) else a for a in argv[1:]]
    return shlex.join(out)


def run_fixture(name: str, bin_dir: Path, work: Path, shim: Path | None, quick: bool) -> dict:
    path = write_fixture(name, work)
    model = read_gguf_model(path)
    cases = cases_for(name, model.arch, model.mla)
    if quick:
        cases = [c for c in cases if c.n_ctx == QUICK["n_ctx"]]
    runs = []
    for case in cases:
        try:
            argv, log = run_llama(bin_dir, path, case, shim)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"{case.name:44} llama.cpp failed: {str(exc).splitlines()[0]}", flush=True)
            continue
        parsed = parse_llama_log(log)
        parsed.pop("exact", None)
        runs.append({"case": case.to_dict(), "name": case.name, "command": command_of(argv, path), **parsed})
        rows = compare_run(model, case, parsed, CPU_REPACK_TYPES_X86_AVX512)
        cells = "  ".join(f"{r['buffer']} {r['predicted'] / 2**20:9.2f}/{r['measured'] / 2**20:9.2f} MiB "
                          f"{r['error_pct']:+6.2f}%" for r in rows)
        print(f"{case.name:44} {cells}", flush=True)
    path.unlink()
    return {"fixture": {"name": name, "writer": f"tests/llama_fixtures.py:{LLAMA_FIXTURES[name].__name__}",
                        "file_bytes": model.file_bytes, "tensor_bytes": model.tensor_bytes,
                        "digest": model.digest()},
            "runs": runs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.environ.get("MOEPLAN_LLAMA_BIN"), help="llama.cpp build/bin folder")
    ap.add_argument("--fixtures", default=",".join(LLAMA_FIXTURES), help="comma-separated fixture names")
    ap.add_argument("--quick", action="store_true", help="only the ctx 4096 runs")
    ap.add_argument("--record", type=Path, help="write <fixture>.json with the parsed figures here")
    args = ap.parse_args()
    if not args.bin:
        print("set MOEPLAN_LLAMA_BIN (or --bin) to a llama.cpp build/bin folder", file=sys.stderr)
        return 2
    bin_dir = Path(args.bin).resolve()
    build = build_description(bin_dir)
    print(f"llama.cpp {build['version']} ({build['commit']})", file=sys.stderr)
    print("per buffer: predicted/measured MiB and moeplan's error", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="moeplan-llama-") as tmp:
        work = Path(tmp)
        shim = build_alloc_shim(work)
        if shim is None:
            print("no C compiler: buffer sizes are read from the log (0.01 MiB resolution)", file=sys.stderr)
        for name in args.fixtures.split(","):
            result = run_fixture(name, bin_dir, work, shim, args.quick)
            if args.record:
                args.record.mkdir(parents=True, exist_ok=True)
                doc = {"llama_cpp": build, "recorded": dt.date.today().isoformat(), "host": host_description(),
                       "exact_bytes": shim is not None, **result}
                out = args.record / f"{name}.json"
                tmp_out = out.with_suffix(".json.tmp")
                tmp_out.write_text(record_text(doc))
                os.replace(tmp_out, out)
                print(f"recorded {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
