"""llama.cpp's fixed cost per prompt ubatch on the CPU: per graph and per block, apart from the
per-weight and per-token work.

    python benchmarks/llamacpp_ubatch_overhead.py --bin /work/build/llama.cpp/bin [--threads 1]
                                                  [--layers 2,4,8,16] [--prompts 1,2,4,8,16]
                                                  [--reps 10] [--embd 64,256]

Writes tiny qwen3moe GGUFs (tests/gguf_fixtures.write_qwen3moe, Q8_0 experts, zero weights) of
L blocks at two widths into a temporary folder and runs `llama-bench -p P -n 0 -t T` on each.
One prompt of P <= ubatch tokens is one ubatch, so its time is

    t(P) = a + b P      (a: the ubatch's fixed cost; b: weights and per-token ops; attention
                         over a prompt this short is a small part of b)

fitted per model over short prompt lengths (the fastest of --reps samples, since other tenants of a
shared machine only ever add time). The fixed parts are then regressed on the number of nodes of the CPU's graph (cost/graph.py's
count for the model, 30 per qwen3moe block):

    a = s_ubatch_s + n_nodes x s_node_s

(building and scheduling the graph once per ubatch; each node's setup, whatever the batch: the
op's parameters, MUL_MAT_ID's row mapping, the work buffer). With one thread no node waits at a
barrier; with more, cost/resolve.py's barrier figure (core hand-over, and the wait for a
descheduled thread on a busy machine) comes on top. The two constants are what
profiles/backends.toml's llama.cpp entry holds as prefill's per-ubatch fixed cost.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def write_models(folder: Path, layers: list[int], widths: list[int]) -> list[tuple[Path, int, int]]:
    from gguf_fixtures import write_qwen3moe

    out = []
    for d in widths:
        for n in layers:
            path = folder / f"tiny-{d}-{n}.gguf"
            if d <= 64:
                write_qwen3moe(path, n_layer=n)
            else:
                write_qwen3moe(path, n_layer=n, n_embd=d, n_head=8, n_head_kv=4, head_dim=d // 8,
                               n_ff_exp=d // 2, n_vocab=256)
            out.append((path, n, d))
    return out


def bench(binary: Path, model: Path, prompts: list[int], threads: int, reps: int) -> dict[int, float]:
    cmd = [str(binary / "llama-bench"), "-m", str(model), "-t", str(threads), "-n", "0", "-r", str(reps),
           "-p", ",".join(str(p) for p in prompts), "-ub", str(max(prompts)), "-b", str(max(prompts)), "-o", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return {r["n_prompt"]: min(r["samples_ns"]) * 1e-9 for r in json.loads(out.stdout) if r["n_prompt"]}


def per_model_fixed(times: dict[int, float]) -> float:
    p = np.array(sorted(times), dtype=float)
    y = np.array([times[int(x)] for x in p])
    a = np.stack([np.ones_like(p), p], axis=1)
    c, *_ = np.linalg.lstsq(a, y, rcond=None)
    return float(c[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.environ.get("MOEPLAN_LLAMA_BIN", ""))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--layers", default="2,4,8,16")
    ap.add_argument("--prompts", default="1,2,4,8,16")
    ap.add_argument("--embd", default="64,256")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args(argv)
    if not args.bin or not (Path(args.bin) / "llama-bench").exists():
        print("error: no llama-bench; hint: --bin DIR (a llama.cpp build's bin folder) or MOEPLAN_LLAMA_BIN",
              file=sys.stderr)
        return 2
    layers = [int(x) for x in args.layers.split(",")]
    prompts = [int(x) for x in args.prompts.split(",")]
    widths = [int(x) for x in args.embd.split(",")]
    print(f"llama-bench at {args.bin}, {args.threads} thread(s), prompts {prompts} (one ubatch each), "
          f"fastest of {args.reps}; load average {os.getloadavg()[0]:.2f}")
    from moeplan.planner.cost import graph
    from moeplan.probes.gguf_model import read_gguf_model

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for path, n, d in write_models(Path(tmp), layers, widths):
            m = read_gguf_model(path)
            nodes = graph.block_barriers(m, m.trunk_layers, "llama.cpp")
            times = bench(Path(args.bin), path, prompts, args.threads, args.reps)
            a = per_model_fixed(times)
            rows.append((nodes, d, a))
            shown = ", ".join(f"pp{p} {t * 1e3:.3f} ms" for p, t in sorted(times.items()))
            print(f"  n_embd {d}, {n} blocks ({nodes} nodes), {path.stat().st_size / 1e6:.2f} MB: {shown}; "
                  f"fixed per ubatch {a * 1e6:.0f} us", flush=True)
    x = np.array([[1.0, n] for n, _, _ in rows])
    y = np.array([a for _, _, a in rows])
    c, *_ = np.linalg.lstsq(x, y, rcond=None)
    worst = float(np.max(np.abs(x @ c - y)) * 1e6)
    print(f"\nfit over {len(rows)} models: fixed per ubatch = s_ubatch_s + n_nodes x s_node_s "
          f"(largest residual {worst:.0f} us)")
    print(f"  s_ubatch_s = {c[0] * 1e6:.1f} us")
    print(f"  s_node_s   = {c[1] * 1e6:.3f} us per node")
    return 0


if __name__ == "__main__":
    sys.exit(main())
