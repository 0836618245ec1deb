"""Start-up time of the CLI against a bare interpreter, measured side by side in one run.

    python benchmarks/startup.py [--repeats 7]

For `python -c pass`, `moeplan --version`, `moeplan --help` and `moeplan tune --help`, prints
the best of N runs as wall time and as CPU time (user + system of the child). On a shared,
noisy machine the CPU time is the steadier figure; wall time is what a person waits. The
target (issue 10): --help and --version within 0.15 s of the bare interpreter.
"""
from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time

TARGET_S = 0.15


def best_of(cmd: list[str], repeats: int) -> tuple[float, float]:
    wall_s, cpu_s = float("inf"), float("inf")
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        wall_s, cpu_s = min(wall_s, wall), min(cpu_s, cpu)
    return wall_s, cpu_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    py = sys.executable
    cases = [("python -c pass", [py, "-c", "pass"]),
             ("moeplan --version", [py, "-m", "moeplan", "--version"]),
             ("moeplan --help", [py, "-m", "moeplan", "--help"]),
             ("moeplan tune --help", [py, "-m", "moeplan", "tune", "--help"])]
    rows = [(name, *best_of(cmd, args.repeats)) for name, cmd in cases]
    base_wall, base_cpu = rows[0][1], rows[0][2]
    print(f"{'command':22s} {'wall s':>8s} {'cpu s':>8s} {'wall - bare':>12s} {'cpu - bare':>11s}  target")
    for name, wall, cpu in rows:
        extra_wall, extra_cpu = wall - base_wall, cpu - base_cpu
        target = "" if name.startswith(("python", "moeplan tune")) else (
            "ok" if extra_cpu <= TARGET_S else "MISSED") + f" (<= {TARGET_S:.2f} s cpu)"
        print(f"{name:22s} {wall:8.3f} {cpu:8.3f} {extra_wall:12.3f} {extra_cpu:11.3f}  {target}")
    print(f"best of {args.repeats}; load average {', '.join(f'{x:.2f}' for x in __import__('os').getloadavg())}")


if __name__ == "__main__":
    main()
