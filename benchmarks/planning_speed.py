"""How long the full `tune` search takes for the bundled models (target: under 1 s for the
largest, on a 2-core machine). Prints model load time and search time per model and preset,
best of a few runs, and the number of placements evaluated.

    python benchmarks/planning_speed.py [--repeat 3] [--hw seed-rtxpro6000-2x6548y]
"""
from __future__ import annotations

import argparse
import sys
import time

from moeplan.planner.search import Request, choose_plan
from moeplan.probes.hwprofile import load_hardware
from moeplan.probes.models import resolve_model
from moeplan.profiles.backends import read_priors
from moeplan.profiles.model_profiles import list_profiles


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hw", action="append",
                    help="preset(s); default: the seed machine (2 NUMA nodes) and a 24 GB desktop")
    a = ap.parse_args(argv)
    presets = a.hw or ["seed-rtxpro6000-2x6548y", "desktop-4090-ddr5"]
    rows = sorted(list_profiles(), key=lambda r: -(r.get("total_params_b") or 0))
    pr = read_priors("llama.cpp")
    print(f"{'model':26} {'params':>7} {'hardware':26} {'load s':>7} {'search s':>9} {'evaluated':>9}")
    worst = 0.0
    for r in rows:
        t0 = time.perf_counter()
        resolve_model(r["name"])  # timed: reading the profile and building its tensor index
        t_load = time.perf_counter() - t0
        for hw_name in presets:
            hw = load_hardware(hw_name)
            best = float("inf")
            n = 0
            for _ in range(a.repeat):
                fresh = resolve_model(r["name"])  # no caches carried over between runs
                t0 = time.perf_counter()
                try:
                    res = choose_plan(fresh, hw, pr, Request())
                    n = res.n_evaluated
                except Exception as exc:  # an infeasible model on a small machine still costs a search
                    n = f"({type(exc).__name__})"
                best = min(best, time.perf_counter() - t0)
            worst = max(worst, best)
            print(f"{r['name']:26} {str(r.get('total_params_b')) + 'B':>7} {hw_name:26} {t_load:7.2f} {best:9.3f} {n!s:>9}")
    print(f"\nslowest full search: {worst:.3f} s (target < 1 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
