"""The `tune` search's own time for every bundled model (CPU seconds, in one process).

    python benchmarks/planning_speed.py [--repeat 3] [--hw PRESET ...] [--model NAME ...]

For each bundled model and preset: the time to read the profile and build its tensor index
(`load`), the search (`choose_plan`, best of --repeat runs, each on a freshly read model so no
cache carries over), the placements evaluated, and how many estimate() / memory evaluations
the search asked for against how many distinct placements they were for (a placement
evaluated twice shows as `calls > distinct`). Times are CPU seconds of this process
(time.process_time): on a shared, noisy machine wall time doubles and CPU time does not.
The whole-process figures (imports, interpreter) are benchmarks/startup.py's.
"""
from __future__ import annotations

import argparse
import sys
import time

from moeplan.planner.search import Request, choose_plan, evaluation_counts
from moeplan.probes.hwprofile import load_hardware
from moeplan.probes.models import resolve_model
from moeplan.profiles.backends import read_priors
from moeplan.profiles.model_profiles import list_profiles


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hw", action="append",
                    help="preset(s); default: the seed machine (2 NUMA nodes) and a 24 GB desktop")
    ap.add_argument("--model", action="append", help="only these bundled models")
    a = ap.parse_args(argv)
    presets = a.hw or ["seed-rtxpro6000-2x6548y", "desktop-4090-ddr5"]
    rows = sorted(list_profiles(), key=lambda r: -(r.get("total_params_b") or 0))
    if a.model:
        rows = [r for r in rows if r["name"] in a.model]
    pr = read_priors("llama.cpp")
    clock = time.process_time
    print(f"{'model':26} {'params':>7} {'hardware':24} {'load s':>6} {'search s':>8} {'placed':>6} "
          f"{'estimates':>10} {'memory':>11}")
    worst = (0.0, "")
    for r in rows:
        t0 = clock()
        resolve_model(r["name"])  # timed: reading the profile and building its tensor index
        t_load = clock() - t0
        for hw_name in presets:
            hw = load_hardware(hw_name)
            best = float("inf")
            n: int | str = 0
            counts: dict[str, int] = {}
            for _ in range(a.repeat):
                fresh = resolve_model(r["name"])  # no caches carried over between runs
                t0 = clock()
                with evaluation_counts() as run_counts:
                    try:
                        n = choose_plan(fresh, hw, pr, Request()).n_evaluated
                    except Exception as exc:  # an infeasible model on a small machine still costs a search
                        n = f"({type(exc).__name__[:5]})"
                best = min(best, clock() - t0)
                counts = dict(run_counts)
            worst = max(worst, (best, f"{r['name']} on {hw_name}"))
            est = f"{counts.get('estimate', 0)}/{counts.get('estimate_distinct', 0)}"
            mem = f"{counts.get('memory', 0)}/{counts.get('memory_distinct', 0)}"
            print(f"{r['name']:26} {str(r.get('total_params_b')) + 'B':>7} {hw_name:24} {t_load:6.3f} "
                  f"{best:8.3f} {n!s:>6} {est:>10} {mem:>11}", flush=True)
    print(f"\nslowest search: {worst[0]:.3f} s CPU ({worst[1]}); estimates and memory: calls/distinct placements")
    return 0


if __name__ == "__main__":
    sys.exit(main())
