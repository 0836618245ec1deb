"""How round is the knee between compute-bound and bandwidth-bound decode? (DECODE_OVERLAP_P)

moeplan costs a batch of CPU weights in decode as (read^p + compute^p)^(1/p): read = bytes /
memory bandwidth, compute = weights / (threads x per-thread dot rate). p -> infinity is the
roofline max(read, compute); p = 1 is no overlap at all. This fits p on published token-
generation-versus-threads sweeps (benchmarks/data/thread-sweeps.json): each sweep has its own
per-thread rate r, each ceiling group one memory ceiling (shared bytes, or one bandwidth over
the given file sizes), and

    t_token(n) = ((1 / (n r))^p + (bytes / BW)^p)^(1/p)

is fitted to each sweep's points up to its fastest (beyond it, threads only contend), the
squared log error summed over all sweeps, for each p on a grid. Printed: the total error per p,
the best p, and the best p of 200 bootstrap resamples of the ceiling groups (its spread is how
well the sweeps pin p down).

    python benchmarks/overlap_fit.py [--data PATH] [--split train|test|all]

The sweeps fall into the train/test split of benchmarks/split.py by their source_url, as the
measurement rows do; DECODE_OVERLAP_P is the train sweeps' figure (the default), the test
sweeps' own best p is printed with --split test to see whether it holds.

A caveat printed with the figures: the sweeps' CPUs boost their clock when few cores are busy,
so the per-thread rate falls as threads are added, which the fit can only read as a rounder
knee -- the p it finds is a lower bound on the overlap of loads and arithmetic at a fixed clock.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

DEFAULT_DATA = Path(__file__).resolve().parent / "data" / "thread-sweeps.json"
P_GRID = [round(1.0 + 0.25 * i, 2) for i in range(21)]  # 1.0 .. 6.0


def up_to_peak(s: dict) -> tuple[list[int], list[float]]:
    k = int(np.argmax(s["tg_tok_s"]))
    return s["threads"][: k + 1], s["tg_tok_s"][: k + 1]


def group_error(sweeps: list[dict], p: float) -> float:
    """Least squared log error of one ceiling group at overlap p: one log rate per sweep, one log
    ceiling (tok/s of the group's bytes, or GiB/s over each sweep's size_gib)."""
    pts = [up_to_peak(s) for s in sweeps]
    sizes = [s.get("size_gib") or 1.0 for s in sweeps]

    def err(x: np.ndarray) -> float:
        ceil, tot = x[0], 0.0
        for (ns, ys), size, lr in zip(pts, sizes, x[1:]):
            for n, y in zip(ns, ys):
                t = ((1.0 / (n * math.exp(lr))) ** p + (size / math.exp(ceil)) ** p) ** (1.0 / p)
                tot += (math.log(1.0 / t) - math.log(y)) ** 2
        return tot

    # start: ceiling a little above the fastest point, rates from each sweep's first point
    c0 = max(math.log(max(ys) * size) for (ns, ys), size in zip(pts, sizes)) + 0.1
    x0 = np.array([c0] + [math.log(ys[0] / ns[0]) for ns, ys in pts])
    best = min((minimize(err, x0 + d, method="Nelder-Mead", options={"xatol": 1e-5, "fatol": 1e-10, "maxiter": 4000})
                for d in (0.0, 0.3)), key=lambda r: r.fun)
    return float(best.fun)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--split", choices=("train", "test", "all"), default="train",
                    help="the sweeps of this side of benchmarks/split.py (default: train, what the constant uses)")
    a = ap.parse_args(argv)
    if not a.data.exists():
        print(f"error: {a.data} not found\nhint: pass --data PATH/thread-sweeps.json", file=sys.stderr)
        return 2
    sweeps = json.loads(a.data.read_text())["sweeps"]
    if a.split != "all":
        import importlib.util
        spec = importlib.util.spec_from_file_location("moeplan_bench_split", Path(__file__).resolve().parent / "split.py")
        split = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(split)
        sweeps = [s for s in sweeps if split.side(s["source_url"]) == a.split]
        print(f"{a.split} sweeps of benchmarks/split.py only")
    groups: dict[str, list[dict]] = {}
    for s in sweeps:
        groups.setdefault(s["ceiling_group"], []).append(s)
    table = {g: {p: group_error(ss, p) for p in P_GRID} for g, ss in sorted(groups.items())}
    n_pts = sum(len(up_to_peak(s)[0]) for s in sweeps)
    print(f"{len(sweeps)} sweeps in {len(groups)} ceiling groups, {n_pts} points up to each sweep's fastest "
          f"({len({s['cpu'] for s in sweeps})} CPUs)")
    print(f"{'p':>5} {'sum sq log err':>15}")
    tot = {p: sum(t[p] for t in table.values()) for p in P_GRID}
    for p in P_GRID:
        print(f"{p:5.2f} {tot[p]:15.4f}")
    best = min(tot, key=tot.get)
    rng = random.Random(0)
    names = list(table)
    boot = []
    for _ in range(200):
        pick = [rng.choice(names) for _ in names]
        t = {p: sum(table[g][p] for g in pick) for p in P_GRID}
        boot.append(min(t, key=t.get))
    boot.sort()
    print(f"\nbest p = {best:.2f}; bootstrap over ceiling groups: median {boot[100]:.2f}, "
          f"10-90% {boot[20]:.2f}-{boot[180]:.2f}")
    by_cpu: dict[str, dict[float, float]] = {}
    for g, ss in groups.items():
        cpu = ss[0]["cpu"]
        by_cpu.setdefault(cpu, {p: 0.0 for p in P_GRID})
        for p in P_GRID:
            by_cpu[cpu][p] += table[g][p]
    for cpu, t in sorted(by_cpu.items()):
        print(f"  {cpu}: best p {min(t, key=t.get):.2f}")
    print("(the CPUs boost their clock with few cores busy: a rate falling with threads reads as a rounder "
          "knee, so p is a lower bound at a fixed clock)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
