"""Count the thread barriers of one decode step per block, as a real llama.cpp runs it, and
compare them with moeplan's table (moeplan/planner/cost/graph.py BLOCK_BARRIERS).

    MOEPLAN_LLAMA_BIN=/path/to/llama.cpp/build/bin python scripts/count_graph_barriers.py
    ... --record tests/data/graph_barriers.json   # (re)write the figures tests check the table on

For each fixture of tests/llama_fixtures.py it runs `llama-completion -v -n 2` with
GGML_SCHED_DEBUG=2, which prints every non-view node of each graph the scheduler splits, takes
the decode graph (the one reserved for n_tokens = 1), attributes each node to the block its
name carries ("-<il>" or "_l<il>"), and counts a block's barriers as ggml-cpu executes them:
one per node, an RMS_NORM followed by a MUL once (ggml_cpu_try_fuse_ops).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from moeplan.io import write_text_atomic  # noqa: E402

NODE = re.compile(r"node #\s*(\d+) \(\s*([^)]*)\): +(\S+)")
BLOCK = (re.compile(r"-(\d+)$"), re.compile(r"_l(\d+)\b"))


def decode_graph_nodes(log: str) -> list[tuple[str, str]]:
    """(op, name) of the non-view nodes of the first graph reserved for n_tokens = 1."""
    lines = log.splitlines()
    start = next(i for i, line in enumerate(lines) if "reserving a graph" in line and "n_tokens =    1" in line)
    nodes: list[tuple[str, str]] = []
    last = -1
    for line in lines[start + 1:]:
        m = NODE.search(line)
        if not m:
            continue
        idx = int(m.group(1))
        if idx < last:  # the next graph starts
            break
        last = idx
        nodes.append((m.group(2).strip(), m.group(3)))
    return nodes


def barriers_per_block(nodes: list[tuple[str, str]]) -> dict[int, int]:
    """Barriers ggml-cpu runs for each block: nodes, RMS_NORM+MUL pairs once; nodes without a
    block suffix belong to the block of the node before them."""
    ops: dict[int, list[str]] = defaultdict(list)
    cur = -1
    for op, name in nodes:
        for pat in BLOCK:
            m = pat.search(name)
            if m:
                cur = int(m.group(1))
                break
        ops[cur].append(op)
    out = {}
    for il, seq in ops.items():
        if il < 0:
            continue
        fused = sum(1 for a, b in zip(seq, seq[1:]) if a == "RMS_NORM" and b == "MUL")
        out[il] = len(seq) - fused
    return out


# llama-completion's arguments after -m FIXTURE. --no-repack: weights in the plain CPU buffer
# (the graph is the same; a GGML_NATIVE build on an AMX host faults in its AMX kernels in decode)
RUN_ARGS = ("-p", "hello world", "-n", "2", "-t", "2", "-fa", "on", "-no-cnv", "-c", "512", "-fit", "off",
            "--no-warmup", "-v", "--no-repack")


def count(bin_dir: Path, fixture: str, folder: Path) -> dict[int, int]:
    from llama_fixtures import write_fixture

    model = write_fixture(fixture, folder)
    env = dict(os.environ, GGML_SCHED_DEBUG="2")
    proc = subprocess.run([str(bin_dir / "llama-completion"), "-m", str(model), *RUN_ARGS],
                          capture_output=True, text=True, env=env, timeout=300)
    # the fixtures' random vocabularies may end the run after the graphs are printed
    return barriers_per_block(decode_graph_nodes(proc.stderr))


FIXTURES = ("qwen3moe", "gpt-oss", "qwen3next", "deepseek4", "gemma4", "nemotron_h_moe", "kimi-k3", "step35",
            "hunyuan-moe", "dots1", "ernie4_5-moe")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--record", type=Path, help="write the counts as JSON")
    args = ap.parse_args()
    bin_dir = Path(os.environ.get("MOEPLAN_LLAMA_BIN", ""))
    if not (bin_dir / "llama-completion").is_file():
        print("set MOEPLAN_LLAMA_BIN to a llama.cpp build/bin with llama-completion", file=sys.stderr)
        return 2
    from llama_memlog import llama_build_info

    out = {"llama_build": llama_build_info(bin_dir), "date": dt.date.today().isoformat(),
           "command": "GGML_SCHED_DEBUG=2 llama-completion -m FIXTURE " + shlex.join(RUN_ARGS), "blocks": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for fixture in FIXTURES:
            per = count(bin_dir, fixture, Path(tmp))
            out["blocks"][fixture] = [per[i] for i in sorted(per)]
            print(f"{fixture:10s} barriers per decode block: {out['blocks'][fixture]}")
    if args.record:
        blocks = ",\n".join(f'  "{k}": {json.dumps(v)}' for k, v in out.pop("blocks").items())
        head = json.dumps(out, indent=1)[:-2]
        write_text_atomic(args.record, f'{head},\n "blocks": {{\n{blocks}\n }}\n}}\n')
    return 0


if __name__ == "__main__":
    sys.exit(main())
