"""The bundled executor's fixed costs per decode token: per block, per routed expert, per token.

    python benchmarks/executor_overhead.py [--layers 2,4,8] [--used 2,8] [--rounds 5] [--tokens 32]
                                           [--threads 1] [--clock thread|wall] [--dtype auto]
                                           [--prefill [--experts 8,32] [--ubatch 32] [--ubatches 4]]

On small models the executor's decode time is not its bytes over the memory bandwidth but the
Python + torch dispatch of every op it launches: each block runs norms, q/k/v/o projections,
RoPE, attention over the cache and the router as separate torch calls, and in decode two
matrix-vector calls per routed expert (gate_up and down into preallocated rows; the activation
and the weighted sum run once per block: experts.run_experts_token). This
benchmark times decode steps of tiny qwen3moe-shaped models (n_embd 64, 8 experts of n_ff 32,
so every weight byte is in cache and the byte term is a few microseconds) with L blocks and k
experts used per token, and fits by least squares

    t_token = t_token_s + L x (s_layer_host_s + k x s_expert_op_s) + bytes / bandwidth

after subtracting each run's bytes / the host's DRAM read rate (moeplan probe's figure, cached
or measured). The three constants (t_token_s, s_layer_host_s, s_expert_op_s) are what
profiles/backends.toml's [executor] section holds.
`--prefill` fits the same three kinds of cost for prefill ubatches instead: models of 8 and 32
experts (top-2) run `--ubatches` prompt ubatches of `--ubatch` tokens, each block computing
the distinct experts its ubatch chose (run_experts' per-expert loop: gather the tokens, FFN,
scatter-add), and

    t_ubatch = t_ubatch_s + L x (s_layer_prefill_s + E x s_expert_prefill_s)

where E is the mean number of distinct experts per block and ubatch, counted from the same
seeded routing tables the run uses.
`--clock thread` (the default) times the calling thread's CPU time with one torch thread, so
other tenants of a shared machine cannot stretch it; `--clock wall --threads 2` shows what the
parallel case adds (OpenMP fork/join per op, and on a busy machine, waits for descheduled
threads). Each figure is the best of --rounds runs.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from executor_roofline import qwen3moe_shapes

from moeplan.executor.build import ExecOptions
from moeplan.executor.routing import make_routing, parse_routing
from moeplan.executor.run import RunSpec, run_bench
from moeplan.planner.placement import Placement


def tiny_moe(n_layer: int, n_used: int, n_expert: int = 8):
    """A qwen3moe ModelSpec of the shapes tests/gguf_fixtures.write_qwen3moe writes (n_embd 64,
    8 experts of n_ff 32, 4/2 heads of 16, vocab 96), BF16; `n_expert` other than 8 for --prefill."""
    return qwen3moe_shapes(n_layer, 64, 32, n_expert, n_used, 4, 2, 16, 96, "BF16",
                           f"tiny qwen3moe {n_layer} blocks {n_expert} experts top-{n_used}", 4096)


def time_decode(model, dtype: str, threads: int, tokens: int, clock) -> tuple[float, int]:
    p = Placement(n_ctx=512, n_ubatch=512, n_threads=threads)
    opt = ExecOptions(device="cpu", dtype=dtype)
    r = run_bench(model, p, opt, RunSpec(n_prompt=0, n_tokens=tokens, n_warmup=4, routing=parse_routing("uniform")),
                  clock=clock)
    return r["decode_s_per_token"], sum(r["bytes_per_token_by_tier"].values())


SEED = ExecOptions().seed


def time_prefill(model, dtype: str, threads: int, ubatch: int, n_ubatches: int, clock) -> tuple[float, int, float]:
    """(seconds per prefill ubatch, bytes per ubatch, mean distinct experts per block and ubatch)."""
    n_prompt = ubatch * n_ubatches
    p = Placement(n_ctx=n_prompt + 64, n_ubatch=ubatch, n_threads=threads, n_threads_batch=threads)
    opt = ExecOptions(device="cpu", dtype=dtype, seed=SEED)
    spec = RunSpec(n_prompt=n_prompt, n_tokens=1, n_warmup=0, routing=parse_routing("uniform"))
    r = run_bench(model, p, opt, spec, clock=clock)
    routing = make_routing(spec.routing, model.n_experts, model.n_experts_used, SEED)
    layers = tuple(model.moe_layer_indices)
    routing.prepare(layers, n_prompt + 1)
    distinct = [len(np.unique(routing.tables[i][s:s + ubatch])) for i in layers for s in range(0, n_prompt, ubatch)]
    per_ubatch_s = n_prompt / r["prefill_tok_s"] / n_ubatches
    return per_ubatch_s, sum(r["prefill_bytes_per_ubatch_by_tier"].values()), float(np.mean(distinct))


def host_read_bytes_per_s() -> float:
    from moeplan.probes.hwprofile import load_hardware

    hw = load_hardware(None)
    nodes = [n for n in hw.numa_nodes if n.dram_read_bytes_per_s]
    return nodes[0].dram_read_bytes_per_s.effective if nodes else 20e9


def fit(rows: list[tuple[int, float, float]]) -> tuple[float, float, float, float]:
    """Least squares t = c0 + L*c1 + L*k*c2 over rows (L, k, t) (k: experts per block); returns
    c0, c1, c2 and the largest relative residual."""
    a = np.array([[1.0, L, L * k] for L, k, _ in rows])
    y = np.array([t for _, _, t in rows])
    c, *_ = np.linalg.lstsq(a, y, rcond=None)
    worst = float(np.max(np.abs(a @ c - y) / y))
    return float(c[0]), float(c[1]), float(c[2]), worst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", default="2,4,8")
    ap.add_argument("--used", default="2,8")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", default="auto", help="auto: what bench and tune --validate run on this CPU")
    ap.add_argument("--clock", default="thread", choices=("thread", "wall"))
    ap.add_argument("--prefill", action="store_true", help="fit per-ubatch, per-block and per-expert prefill costs")
    ap.add_argument("--experts", default="8,32", help="--prefill: expert counts of the models (top-2)")
    ap.add_argument("--ubatch", type=int, default=32)
    ap.add_argument("--ubatches", type=int, default=4)
    args = ap.parse_args(argv)
    import torch

    from moeplan.executor.native import resolve_dtype

    args.dtype = resolve_dtype(args.dtype, "cpu")
    if args.clock == "thread" and args.threads != 1:
        print("error: --clock thread times one thread; use --threads 1", file=sys.stderr)
        return 2
    clock = time.thread_time if args.clock == "thread" else time.perf_counter
    torch.set_num_threads(args.threads)
    bw = host_read_bytes_per_s()
    print(f"torch {torch.__version__}, {args.threads} thread(s), clock {args.clock}, dtype {args.dtype}, "
          f"load average {os.getloadavg()[0]:.2f}, host DRAM read {bw / 1e9:.1f} GB/s")
    if args.prefill:
        return prefill_main(args, clock, bw)
    layers = [int(x) for x in args.layers.split(",")]

    def decode(L: int, k: int):
        t, nbytes = time_decode(tiny_moe(L, k), args.dtype, args.threads, args.tokens, clock)
        return t, nbytes, k

    def decode_line(L: int, k: int, best: float, nbytes: int, _: float) -> str:
        return (f"  {L} blocks, top-{k}: {best * 1e3:.3f} ms/token ({1 / best:.0f} tok/s), "
                f"{nbytes / 1e3:.0f} kB/token = {nbytes / bw * 1e6:.1f} us at DRAM rate")

    rows = sweep([int(x) for x in args.used.split(",")], layers, args.rounds, decode, decode_line, bw)
    print_fit(rows, "token", "k", ("t_token_s", "s_layer_host_s", "s_expert_op_s"),
              ("per token: embedding, head, sampling", "per block: norms, attention, router",
               "per routed expert per MoE block"), 1e6, "us")
    return 0


def sweep(outer: list[int], layers: list[int], rounds: int, run, line, bw: float) -> list[tuple[int, float, float]]:
    """(L, experts per block, fixed seconds) for every (outer, L): the fastest of `rounds` runs
    of run(L, outer) -> (seconds, bytes, experts per block), less its bytes at the DRAM rate."""
    rows = []
    for o in outer:
        for L in layers:
            best, nbytes, per = fastest(rounds, lambda L=L, o=o: run(L, o))
            rows.append((L, per, best - nbytes / bw))
            print(line(L, o, best, nbytes, per), flush=True)
    return rows


def fastest(rounds: int, run):
    """The fastest of `rounds` calls of run() -> (seconds, ...)."""
    return min((run() for _ in range(rounds)), key=lambda r: r[0])


def print_fit(rows, step: str, per: str, names: tuple[str, str, str], notes: tuple[str, str, str], scale: float,
              unit: str) -> None:
    c0, c1, c2, worst = fit(rows)
    print(f"\nfit t = t_{step} + L x (s_layer + {per} x s_expert), largest residual {worst:.0%}:")
    width = max(len(n) for n in names)
    for name, v, note in zip(names, (c0, c1, c2), notes):
        print(f"  {name:<{width}} = {v * scale:.{0 if unit == 'us' else 3}f} {unit}   ({note})")


def prefill_main(args, clock, bw: float) -> int:
    def prefill(L: int, n_exp: int):
        return time_prefill(tiny_moe(L, 2, n_exp), args.dtype, args.threads, args.ubatch, args.ubatches, clock)

    def prefill_line(L: int, n_exp: int, best: float, nbytes: int, distinct: float) -> str:
        return (f"  {L} blocks, {n_exp} experts top-2, ubatch {args.ubatch}: {best * 1e3:.2f} ms/ubatch, "
                f"{distinct:.1f} distinct experts per block, {nbytes / 1e3:.0f} kB/ubatch")

    rows = sweep([int(x) for x in args.experts.split(",")], [int(x) for x in args.layers.split(",")], args.rounds,
                 prefill, prefill_line, bw)
    print_fit(rows, "ubatch", "E", ("t_ubatch_s", "s_layer_prefill_s", "s_expert_prefill_s"),
              ("per ubatch: embedding, head, sampling", "per block: norms, attention, router",
               "per distinct expert per block and ubatch"), 1e3, "ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
