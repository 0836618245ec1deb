"""How close `moeplan probe` gets to independent measurements, and how long it takes.

    python benchmarks/probe_accuracy.py [--model-path FILE] [--skip-full]

- DRAM: the probe's node-0 read figure next to a STREAM-like read kernel in C (OpenMP, one
  thread per physical core, first-touch placement, uint64 sum so the compiler vectorises it),
  compiled here with the system gcc into a temp folder that is removed afterwards. The
  reference runs right before and right after each probe, on the same number of bytes.
- Storage: the probe's sequential (4 MiB, queue depth 1, O_DIRECT) and 4 KiB random read
  figures next to fio with the same pattern (fio --readonly), when fio is installed.
- Wall time of `moeplan probe --quick` and `--full`.

Targets: DRAM within 15 % of the reference, storage within 20 % of fio, --quick under 20 s.
Without --model-path a 1 GiB file of random bytes is written to a temp folder for the storage
part and removed afterwards (the probe itself never writes).
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from moeplan.probes import dram, storage
from moeplan.probes.cpu import read_cpu
from moeplan.probes.numa import read_numa_nodes
from moeplan.probes.system import read_system

C_KERNEL = r"""
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

/* STREAM-like read-only kernel. read_sum keeps four independent 64-byte vector accumulators
   so a core has many loads in flight (a single-accumulator loop reads ~15% slower on one
   core); the program first-touches each thread's part in parallel (pages land by each
   thread's node), makes one untimed pass, then `reps` timed passes. Like numpy, it asks for
   transparent huge pages (argv[3] = 1), so both read through the same page size. */
typedef uint64_t v8 __attribute__((vector_size(64)));

uint64_t read_sum(const uint64_t *a, size_t n) {
    const v8 *p = (const v8 *)a;
    v8 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    size_t m = n / 32 * 4, i;
    for (i = 0; i < m; i += 4) { s0 += p[i]; s1 += p[i + 1]; s2 += p[i + 2]; s3 += p[i + 3]; }
    v8 v = s0 + s1 + s2 + s3;
    uint64_t t = 0;
    for (int j = 0; j < 8; j++) t += v[j];
    for (i = m * 8; i < n; i++) t += a[i];
    return t;
}

static void part(size_t n, size_t *lo, size_t *hi) {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    *lo = n / nt * t / 8 * 8;
    *hi = t == nt - 1 ? n : n / nt * (t + 1) / 8 * 8;
}

int main(int argc, char **argv) {
    size_t n = strtoull(argv[1], NULL, 10) / sizeof(uint64_t);
    int reps = atoi(argv[2]);
    size_t bytes = ((n * sizeof(uint64_t) + (2u << 20) - 1) / (2u << 20)) * (2u << 20);
    uint64_t *a = aligned_alloc(2u << 20, bytes);
    if (!a) return 1;
    if (argc > 3 && atoi(argv[3])) madvise(a, bytes, MADV_HUGEPAGE);
#pragma omp parallel
    {
        size_t lo, hi;
        part(n, &lo, &hi);
        for (size_t i = lo; i < hi; i++) a[i] = i;
    }
    volatile uint64_t sink = 0;
    for (int r = -1; r < reps; r++) {
        uint64_t s = 0;
        double t = omp_get_wtime();
#pragma omp parallel reduction(+ : s)
        {
            size_t lo, hi;
            part(n, &lo, &hi);
            s += read_sum(a + lo, hi - lo);
        }
        t = omp_get_wtime() - t;
        sink += s;
        if (r >= 0) printf("%.9f\n", t);
    }
    free(a);
    return sink == 42 ? 2 : 0;
}
"""


def build_kernel(folder: str) -> str:
    """The OpenMP program and, from the same source, a shared library with read_sum."""
    src, exe = os.path.join(folder, "read.c"), os.path.join(folder, "read")
    with open(src, "w") as f:
        f.write(C_KERNEL)
    subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", src, "-o", exe], check=True)
    subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", src, "-o", exe + ".so"], check=True)
    return exe


def compare_paired(exe: str, settings: dram.DramSettings, n_pairs: int) -> dict:
    """Pass-by-pass pairs on the same arrays, in the probe's own pinned threads: numpy's
    max() (the probe's kernel) and C's read_sum alternate, so whatever else runs on the machine
    hits both alike. Returns the per-pair ratios probe/C, all cores and one core."""
    lib = ctypes.CDLL(exe + ".so")
    lib.read_sum.restype = ctypes.c_uint64
    lib.read_sum.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    nodes, topo, l3, n_bytes, threads, node = node0(settings)
    cpus = topo.first_cpus(next(n for n in nodes if n.cpus).cpus)
    calls = threading.local()

    def alternating(a: np.ndarray) -> None:  # each thread makes one call per timed pass
        i = getattr(calls, "i", 0)
        calls.i = i + 1
        if i % 2:
            lib.read_sum(a.ctypes.data, a.size)
        else:
            a.max()

    out = {}
    for label, use in (("all cores", cpus), ("one core", cpus[:1])):
        job = dram.ReadJob(reader_cpus=use, place_cpus=use, mem_node=next(n for n in nodes if n.cpus).id,
                           bytes_per_thread=n_bytes // len(use) // 4096 * 4096)
        samples, _, _ = dram.run_read_job(job, reps=2 * n_pairs, warmup=2, kernel=alternating)
        rates = [b / t for b, t in samples]
        probe, c = rates[0::2], rates[1::2]
        out[label] = {"ratios": [p / q for p, q in zip(probe, c)], "probe_best": max(probe), "c_best": max(c),
                      "probe_median": statistics.median(probe), "c_median": statistics.median(c)}
    return out


def run_reference(exe: str, n_bytes: int, threads: int, reps: int, node: int | None) -> tuple[float, float]:
    """(best, median) GB/s of the C kernel."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PLACES="cores", OMP_PROC_BIND="close")
    cmd = [exe, str(n_bytes), str(reps), "1"]
    if node is not None and shutil.which("numactl"):
        cmd = ["numactl", f"--cpunodebind={node}", f"--membind={node}"] + cmd
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    rates = [n_bytes / float(t) / 1e9 for t in out.split()]
    return max(rates), statistics.median(rates)


def run_probe(mode: str, model: str) -> tuple[dict, float]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "moeplan", "probe", f"--{mode}", "--json", "--model-path", model],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out), time.perf_counter() - t0


def run_fio(model: str, rw: str, bs: str, seconds: int) -> float | None:
    """fio's read rate in GB/s for the probe's pattern, or None without fio."""
    if not shutil.which("fio"):
        return None
    out = subprocess.run(["fio", "--name=probe-check", f"--filename={model}", "--readonly", f"--rw={rw}",
                          f"--bs={bs}", "--iodepth=1", "--ioengine=psync", "--direct=1", "--numjobs=1",
                          f"--runtime={seconds}", "--time_based", "--output-format=json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])["jobs"][0]["read"]["bw_bytes"] / 1e9


def node0(settings: dram.DramSettings):
    """(nodes, topology, l3, total bytes, threads, node id for numactl) as the probe sees node 0."""
    cpu, topo = read_cpu("/")
    nodes = read_numa_nodes("/", topo)
    node = next(n for n in nodes if n.cpus)
    cpus = topo.first_cpus(node.cpus)
    l3 = int(cpu.l3_bytes * len(cpus) / max(1, len(topo.cores))) if cpu.l3_bytes else None
    per, _ = dram.choose_bytes(l3, len(cpus), settings, read_system("/").ram_available_bytes, node.mem_free_bytes)
    return nodes, topo, cpu.l3_bytes, per * len(cpus), len(cpus), (node.id if len(nodes) > 1 else None)


def compare_dram(exe: str, settings: dram.DramSettings, rounds: int) -> dict:
    """Alternate the C reference and the probe's own DRAM measurement, `rounds` times each, all
    cores and one core, so a busy machine disturbs both alike. Best-of-many-samples is the
    estimator that survives other processes taking the CPUs now and then."""
    nodes, topo, l3, n_bytes, threads, node = node0(settings)
    out: dict = {"n_bytes": n_bytes, "threads": threads, "ref": [], "probe": [], "ref1": [], "probe1": []}
    for _ in range(rounds):
        out["ref"].append(run_reference(exe, n_bytes, threads, settings.reps, node))
        out["ref1"].append(run_reference(exe, n_bytes, 1, settings.reps, node))
        res = dram.measure_dram(nodes[:1] if node is None else nodes, topo, l3, settings,
                                read_system("/").ram_available_bytes)
        f = next(iter(res.node_figures.values()))
        out["probe"].append((f.value / 1e9, f.median / 1e9))
        out["probe1"].append((res.core_figure.value / 1e9, res.core_figure.median / 1e9))
    return out


def compare_storage(model: str, seconds: float, rounds: int) -> dict | None:
    """Alternate the probe's storage measurement and fio with the same pattern and duration."""
    if not shutil.which("fio"):
        return None
    s = storage.StorageSettings(block_bytes=4 * 1024 * 1024, seq_budget_s=seconds, seq_max_bytes=1 << 40,
                                rand_budget_s=seconds)
    out = {"probe_seq": [], "fio_seq": [], "probe_rand": [], "fio_rand": []}
    for _ in range(rounds):
        st, _ = storage.measure_storage(model, s)
        out["probe_seq"].append(st.seq_read_bytes_per_s.value / 1e9)
        out["probe_rand"].append(st.rand4k_read_bytes_per_s.value / 1e9)
        out["fio_seq"].append(run_fio(model, "read", "4M", int(seconds)))
        out["fio_rand"].append(run_fio(model, "randread", "4k", int(seconds)))
    return out


def pct(a: float, b: float) -> str:
    return f"{(a / b - 1) * 100:+.1f}%"


def verdict(a: float, b: float, tol: float) -> str:
    return f"{pct(a, b)} [target within {tol:.0%}: {'met' if abs(a / b - 1) <= tol else 'NOT met'}]"


def make_model(folder: str) -> str:
    path = os.path.join(folder, "model.bin")
    with open(path, "wb") as f:
        for _ in range(256):
            f.write(os.urandom(4 * 1024 * 1024))
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-path", help="a large file on the disk to measure (read only)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds per comparison")
    ap.add_argument("--skip-full", action="store_true", help="time only --quick")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="moeplan-probe-accuracy-")
    try:
        exe = build_kernel(tmp)
        model = args.model_path or make_model(tmp)
        print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        walls = {}
        for mode in ["quick"] + ([] if args.skip_full else ["full"]):
            doc, wall = run_probe(mode, model)
            walls[mode] = (wall, doc)
        d = compare_dram(exe, dataclasses.replace(dram.QUICK, reps=20), args.rounds)
        paired = compare_paired(exe, dram.QUICK, 20)
        st = compare_storage(model, 2.0, max(6, args.rounds))
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        print()
        for mode, (wall, doc) in walls.items():
            f = next(n["dram_read_bytes_per_s"] for n in doc["numa_nodes"] if n["cpus"])
            s0 = doc["storage"][0]
            print(f"moeplan probe --{mode}: wall {wall:.1f} s"
                  + (" (target < 20 s: " + ("met" if wall < 20 else "NOT met") + ")" if mode == "quick" else "")
                  + f"; DRAM {f['value'] / 1e9:.2f} GB/s, seq read {s0['seq_read_bytes_per_s']['value'] / 1e9:.3f} GB/s,"
                  f" busy {doc['load']['cpu_busy_before']:.0%} before / {doc['load']['cpu_busy_after']:.0%} after")
        print(f"\nDRAM read, node 0, {d['n_bytes'] / 2**20:.0f} MiB, {args.rounds} alternating rounds of 20 passes "
              "(best / median GB/s):")
        print(f"  round  C {d['threads']} threads    probe {d['threads']} threads    C 1 thread      probe 1 thread")
        for i, (r, p, r1, p1) in enumerate(zip(d["ref"], d["probe"], d["ref1"], d["probe1"]), 1):
            print(f"  {i:5d}  {r[0]:6.2f} / {r[1]:5.2f}  {p[0]:6.2f} / {p[1]:5.2f}      {r1[0]:6.2f} / {r1[1]:5.2f}  "
                  f"{p1[0]:6.2f} / {p1[1]:5.2f}")
        for label, rk, pk in (("all cores", "ref", "probe"), ("one core", "ref1", "probe1")):
            rb, pb = max(b for b, _ in d[rk]), max(b for b, _ in d[pk])
            rm, pm = statistics.median(m for _, m in d[rk]), statistics.median(m for _, m in d[pk])
            print(f"  {label:9s} best of rounds: probe {pb:.2f} vs C {rb:.2f} GB/s {verdict(pb, rb, 0.15)}; "
                  f"median of medians {pm:.2f} vs {rm:.2f} ({pct(pm, rm)})")
        print("\nDRAM read, paired passes (numpy max() and C read_sum alternating on the same arrays, "
              "the probe's pinned threads, 20 pairs):")
        for label, r in paired.items():
            med = statistics.median(r["ratios"])
            print(f"  {label:9s} probe/C per pair: median {med:.3f} (min {min(r['ratios']):.3f}, max "
                  f"{max(r['ratios']):.3f}); best probe {r['probe_best'] / 1e9:.2f} vs C {r['c_best'] / 1e9:.2f} GB/s, "
                  f"median {r['probe_median'] / 1e9:.2f} vs {r['c_median'] / 1e9:.2f} GB/s  "
                  f"[target within 15%: {'met' if abs(med - 1) <= 0.15 else 'NOT met'}]")
        if st is None:
            print("\nstorage: fio is not installed (apt install fio): no comparison")
        else:
            print(f"\nstorage, {model}, {len(st['fio_seq'])} alternating rounds of 2 s each (medians):")
            ps, fs = statistics.median(st["probe_seq"]), statistics.median(st["fio_seq"])
            pr, fr = statistics.median(st["probe_rand"]), statistics.median(st["fio_rand"])
            print(f"  sequential 4 MiB QD1 O_DIRECT: probe {ps:.3f} vs fio {fs:.3f} GB/s  {verdict(ps, fs, 0.20)}")
            print(f"  random 4 KiB QD1 O_DIRECT:     probe {pr * 1e3:.1f} vs fio {fr * 1e3:.1f} MB/s  {verdict(pr, fr, 0.20)}")
            print("  rounds seq (probe/fio): " + ", ".join(f"{a:.3f}/{b:.3f}" for a, b in zip(st["probe_seq"], st["fio_seq"])))
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
