"""Whole-process time of the CLI (start-up and `tune`) against a bare interpreter.

    python benchmarks/startup.py [--repeats 5]                 # the issue-31 table
    python benchmarks/startup.py --all-models [--hw PRESET] [--table-too] [--model NAME ...]
                                                               # `tune` of every bundled model
    python benchmarks/startup.py ... --base DIR                # and of another commit's checkout

Each command runs as a child process once untimed (a warm-up that writes the bytecode cache,
as pip does when it installs a package; --no-bytecode compiles moeplan's modules on every run
instead), then N times; the figure is the median of N of its CPU time
(user + system, from resource.getrusage(RUSAGE_CHILDREN) deltas around the child), which is
the steady one on a shared, noisy machine; wall time (median) is shown beside it, as what a
person waits. Targets (issue 31): `--version` and `--help` within 0.1 s of CPU of
`python -c pass`; `tune` of every bundled model on a bundled preset within 0.4 s of CPU,
`--json` and table alike.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

START_TARGET_S = 0.10  # over `python -c pass`
TUNE_TARGET_S = 0.40  # whole process
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env(bytecode: bool) -> dict[str, str]:
    """The children's environment. With `bytecode`, Python reads and writes moeplan's
    __pycache__ (what an installed package has: pip compiles it). Without, moeplan's caches are
    removed first and PYTHONDONTWRITEBYTECODE=1 keeps them away, so each run compiles moeplan's
    modules from source (a fresh checkout under PYTHONDONTWRITEBYTECODE=1, as on the project's
    development machines); the standard library and site-packages keep their caches."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        for d, sub, _files in os.walk(os.path.join(ROOT, "moeplan")):
            if "__pycache__" in sub:
                shutil.rmtree(os.path.join(d, "__pycache__"))
    return env


def child_times(cmd: list[str], repeats: int, env: dict[str, str], cwd: str | None = None) -> tuple[float, float, int]:
    """Median wall seconds, median CPU seconds (user + sys) of `cmd` over `repeats` runs after
    one untimed warm-up run (which writes the bytecode cache), and its last exit status (an
    infeasible model exits non-zero and is still timed)."""
    walls, cpus = [], []
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    rc = 0
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd).returncode
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return statistics.median(walls), statistics.median(cpus), rc


def _bundled_models() -> list[str]:
    here = os.path.join(ROOT, "moeplan", "profiles", "models")
    return sorted(f[:-5] for f in os.listdir(here) if f.endswith(".toml"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--all-models", action="store_true", help="`tune` every bundled model (--json and table)")
    ap.add_argument("--hw", default="desktop-4090-ddr5", help="preset for --all-models")
    ap.add_argument("--table-too", action="store_true", help="with --all-models: also time the table output")
    ap.add_argument("--model", action="append", help="with --all-models: only these bundled models")
    ap.add_argument("--no-bytecode", action="store_true",
                    help="compile moeplan's modules from source on every run (no __pycache__ of its own)")
    ap.add_argument("--base", metavar="DIR",
                    help="a checkout of another commit (git worktree add --detach DIR REV): each command also "
                         "runs with DIR's moeplan, right before this tree's, and the row shows both")
    args = ap.parse_args(argv)
    py = sys.executable
    mp = [py, "-m", "moeplan"]
    cases: list[tuple[str, list[str], float | None]] = [("python -c pass", [py, "-c", "pass"], None)]
    if args.all_models:
        for m in _bundled_models():
            if args.model and m not in args.model:
                continue
            cases.append((f"tune {m} --json", mp + ["tune", m, "--hw", args.hw, "--json"], TUNE_TARGET_S))
            if args.table_too:
                cases.append((f"tune {m}", mp + ["tune", m, "--hw", args.hw], TUNE_TARGET_S))
    else:
        cases += [
            ("moeplan --version", mp + ["--version"], -START_TARGET_S),
            ("moeplan --help", mp + ["--help"], -START_TARGET_S),
            ("moeplan tune --help", mp + ["tune", "--help"], -START_TARGET_S),
            ("tune glm-4.5 --hw desktop-4090-ddr5 --json",
             mp + ["tune", "glm-4.5", "--hw", "desktop-4090-ddr5", "--json"], TUNE_TARGET_S),
            ("tune glm-4.5 --hw desktop-4090-ddr5",
             mp + ["tune", "glm-4.5", "--hw", "desktop-4090-ddr5"], TUNE_TARGET_S),
            ("tune kimi-k2 --quant Q4_K_M --hw seed-rtxpro6000-2x6548y --json",
             mp + ["tune", "kimi-k2", "--quant", "Q4_K_M", "--hw", "seed-rtxpro6000-2x6548y", "--json"],
             TUNE_TARGET_S),
        ]
    width = max(len(c[0]) for c in cases)
    print(f"{'command':{width}s} {'cpu s':>7s} {'wall s':>7s} {'cpu-bare':>9s}  target")
    env = child_env(not args.no_bytecode)
    if args.base:
        print(f"(--base: each row's figure for {args.base} first, 'base -> this tree')")
        env = dict(env, PYTHONPATH=os.pathsep.join(x for x in (ROOT, env.get("PYTHONPATH")) if x))
        base_env = dict(env, PYTHONPATH=os.path.abspath(args.base))
    base_cpu = 0.0
    missed = 0
    for name, cmd, target in cases:
        before = ""
        if args.base and target is not None:
            # run in the checkout: `python -m` puts the working directory before PYTHONPATH
            _, cpu_base, _ = child_times(cmd, args.repeats, base_env, cwd=os.path.abspath(args.base))
            before = f"{cpu_base:.3f} -> "
        wall, cpu, rc = child_times(cmd, args.repeats, env, cwd=ROOT if args.base else None)
        if target is None:
            base_cpu = cpu
            verdict = ""
        elif target < 0:  # relative to the bare interpreter
            ok = cpu - base_cpu <= -target
            verdict = ("ok" if ok else "MISSED") + f" (<= bare + {-target:.2f} s)"
            missed += not ok
        else:
            ok = cpu <= target
            verdict = ("ok" if ok else "MISSED") + f" (<= {target:.2f} s)"
            missed += not ok
        if rc:
            verdict += f"  exit {rc}"
        print(f"{name:{width}s} {cpu:7.3f} {wall:7.3f} {cpu - base_cpu:9.3f}  {before}{verdict}", flush=True)
    print(f"median of {args.repeats} after a warm-up, CPU = user + sys of the child, "
          f"{'moeplan compiled from source' if args.no_bytecode else 'bytecode cached'}; load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}; {missed} missed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
