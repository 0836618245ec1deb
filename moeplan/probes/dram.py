"""DRAM read bandwidth per NUMA node, per core, and across nodes.

STREAM's rules, for a read-only kernel: each thread is pinned to one physical core; its
array is first touched by a thread on the memory's node (or placed with libnuma), so pages
land there; all arrays together are several times the last-level cache; one warm-up pass;
then timed passes, reporting the best and the median.

The read kernel is numpy's uint64 max() reduction: a SIMD loop that releases the GIL, so
threads read in parallel. On this project's 2-core CI machine it reads L2-resident data about
3x faster than DRAM, so the DRAM figure is not the kernel's limit; the probe re-checks that on
every run (`kernel_cache_rate`) and says so when the margin is thin.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from moeplan.errors import ProbeError
from moeplan.planner.hardware.profile import Figure, NumaNode
from moeplan.probes.cpu import Topology
from moeplan.probes.numa import nearest_cpu_node
from moeplan.probes.numa_alloc import Libnuma, placement_share
from moeplan.probes.timing import measured_figure, summarise_rates
from moeplan.units import MIB

KERNEL = "numpy uint64 max() reduction"


@dataclass(frozen=True)
class DramSettings:
    l3_factor: float  # arrays of all threads together >= this x the node's L3
    min_bytes: int  # ... and at least this many bytes
    reps: int  # timed passes per figure
    warmup: int
    cross_reps: int


QUICK = DramSettings(l3_factor=4, min_bytes=256 * MIB, reps=5, warmup=1, cross_reps=3)
FULL = DramSettings(l3_factor=8, min_bytes=1024 * MIB, reps=20, warmup=2, cross_reps=8)


def read_kernel(a: np.ndarray) -> None:
    a.max()


def pin_linux(cpu: int) -> None:
    """Run the calling thread on `cpu` only (Linux; on Windows the probe passes
    probes/windows.Kernel32Api.pin_current_thread, SetThreadGroupAffinity)."""
    os.sched_setaffinity(0, {cpu})


def choose_bytes(l3_node: int | None, n_threads: int, s: DramSettings, avail_bytes: int | None,
                 node_free_bytes: int | None) -> tuple[int, str]:
    """Bytes per thread (a multiple of 4 KiB) and a note when memory forced arrays smaller
    than STREAM's rule (then part of the data may be served from cache)."""
    want = max(s.min_bytes, int(s.l3_factor * (l3_node or 0)))
    caps = [c for c in ((avail_bytes or 0) // 4, (node_free_bytes or 0) // 2) if c > 0]
    total = min([want] + caps)
    note = ""
    if l3_node and total < 2 * l3_node:
        note = (f"arrays are only {total / l3_node:.1f}x the L3 cache (memory is short): the figure "
                "may include cache hits")
    per = max(4096, (total // max(1, n_threads)) // 4096 * 4096)
    return per, note


@dataclass
class ReadJob:
    """One timed read: a thread per reader CPU, each with its own chunk placed on mem_node."""

    reader_cpus: tuple[int, ...]
    place_cpus: tuple[int, ...]  # CPU each chunk is first touched from (first-touch placement)
    mem_node: int
    bytes_per_thread: int
    libnuma: Libnuma | None = None
    chunks: list = field(default_factory=list)
    pin: Callable[[int], None] = pin_linux


class _Pool:
    """Pinned worker threads that allocate, touch and then read their chunks on command."""

    def __init__(self, job: ReadJob, kernel: Callable[[np.ndarray], None]) -> None:
        self.job, self.kernel = job, kernel
        n = len(job.reader_cpus)
        self.bar = threading.Barrier(n + 1)
        self.cmd = ""
        self.chunks: list[np.ndarray | None] = [None] * n
        self.releases: list[Callable[[], None]] = []
        self.error: BaseException | None = None
        self.threads = [threading.Thread(target=self._worker, args=(i,), daemon=True) for i in range(n)]
        for t in self.threads:
            t.start()
        try:
            self.bar.wait()
        except threading.BrokenBarrierError:
            self.close()
            raise ProbeError(f"DRAM measurement could not allocate its arrays: {self.error}",
                             "free some memory or run `moeplan probe --quick`") from None

    def _worker(self, i: int) -> None:
        job = self.job
        try:
            job.pin(job.place_cpus[i])
            if job.libnuma is not None:
                arr, release = job.libnuma.alloc_onnode(job.bytes_per_thread, job.mem_node)
                self.releases.append(release)
            else:
                arr = np.empty(job.bytes_per_thread // 8, np.uint64)
            arr.fill(1)  # first touch: the pages land on this CPU's node (or libnuma's node)
            self.chunks[i] = arr
            job.pin(job.reader_cpus[i])
            self.bar.wait()
            while True:
                self.bar.wait()
                if self.cmd == "stop":
                    return
                if self.cmd == "all":
                    self.kernel(arr)
                elif self.cmd == "one" and i == 0:
                    for c in self.chunks:
                        assert c is not None  # every worker filled its chunk before the first command
                        self.kernel(c)
                self.bar.wait()
        except threading.BrokenBarrierError:
            return
        except BaseException as exc:  # MemoryError, OSError from affinity: stop everyone
            self.error = exc
            self.bar.abort()

    def time(self, cmd: str) -> float:
        self.cmd = cmd
        try:
            self.bar.wait()
            t0 = time.perf_counter()
            self.bar.wait()
        except threading.BrokenBarrierError:
            raise ProbeError(f"DRAM measurement failed: {self.error}", "rerun with --debug to see why") from None
        return time.perf_counter() - t0

    def close(self) -> None:
        if not self.bar.broken:
            self.cmd = "stop"
            try:
                self.bar.wait(timeout=60)
            except threading.BrokenBarrierError:
                pass
        for t in self.threads:
            t.join(timeout=60)
        self.chunks = []
        for release in self.releases:
            release()


def run_read_job(job: ReadJob, reps: int, warmup: int, single: bool = False,
                 kernel: Callable[[np.ndarray], None] = read_kernel,
                 check_node: bool = False) -> tuple[list, list, float | None]:
    """(all-thread samples, single-thread samples, share of pages on mem_node or None).
    Samples are (bytes, seconds)."""
    pool = _Pool(job, kernel)
    try:
        share = None
        if check_node:
            share = placement_share([c for c in pool.chunks if c is not None], job.mem_node)
        n = len(job.reader_cpus)
        total = n * job.bytes_per_thread
        for _ in range(warmup):
            pool.time("all")
        samples = [(total, pool.time("all")) for _ in range(reps)]
        one = []
        if single:
            pool.time("one")
            one = [(total, pool.time("one")) for _ in range(reps)]
        return samples, one, share
    finally:
        pool.close()


def measure_kernel_cache_rate(cpu: int, reps: int = 200, n_bytes: int = 256 * 1024,
                              kernel: Callable[[np.ndarray], None] = read_kernel,
                              pin: Callable[[int], None] = pin_linux) -> list[tuple[float, float]]:
    """The read kernel on an L2-resident array, pinned to `cpu`: its compute ceiling."""
    out: list[tuple[float, float]] = []

    def work() -> None:
        pin(cpu)
        a = np.ones(n_bytes // 8, np.uint64)
        for _ in range(10):
            kernel(a)
        for _ in range(reps):
            t0 = time.perf_counter()
            kernel(a)
            out.append((a.nbytes, time.perf_counter() - t0))

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join()
    return out


@dataclass
class DramResult:
    node_figures: dict[int, Figure] = field(default_factory=dict)
    core_figure: Figure | None = None
    matrix: tuple[tuple[float, ...], ...] = ()
    notes: list[str] = field(default_factory=list)


def measure_dram(nodes: tuple[NumaNode, ...], topo: Topology, l3_bytes: int | None, s: DramSettings,
                 avail_bytes: int | None, libnuma: Libnuma | None = None,
                 on_step: Callable[[str], None] = lambda msg: None,
                 pin: Callable[[int], None] = pin_linux, allowed: set[int] | None = None) -> DramResult:
    """Per-node local read bandwidth (all physical cores of the node), the single-core figure
    on the first node, and with 2+ CPU nodes the [reader][memory] matrix (0.0 = not measured).
    pin / allowed: how to pin a thread and which CPUs this process may use (default: Linux's
    sched_setaffinity / sched_getaffinity; on Windows SetThreadGroupAffinity and every CPU)."""
    res = DramResult()
    allowed = allowed if allowed is not None else os.sched_getaffinity(0)
    cpu_nodes = [n for n in nodes if n.cpus]
    total_cores = max(1, len(topo.cores))
    multi = len(nodes) >= 2
    readers: dict[int, tuple[int, ...]] = {}
    for n in cpu_nodes:
        cpus = tuple(c for c in topo.first_cpus(n.cpus) if c in allowed)
        if len(cpus) < n.n_physical_cores:
            res.notes.append(f"node {n.id}: only {len(cpus)} of its {n.n_physical_cores} cores are allowed to "
                             "this process (cpuset); its figure is for those")
        if cpus:
            readers[n.id] = cpus
    kernel_ceiling = None
    if readers:
        first = next(iter(readers.values()))[0]
        kc = summarise_rates(measure_kernel_cache_rate(first, pin=pin))
        kernel_ceiling = kc.median
    for n in cpu_nodes:
        if n.id not in readers:
            continue
        cpus = readers[n.id]
        l3_node = int(l3_bytes * len(cpus) / total_cores) if l3_bytes else None
        per, note = choose_bytes(l3_node, len(cpus), s, avail_bytes, n.mem_free_bytes)
        if note:
            res.notes.append(f"node {n.id}: {note}")
        on_step(f"DRAM read, node {n.id}: {len(cpus)} threads x {per / MIB:.0f} MiB")
        job = ReadJob(reader_cpus=cpus, place_cpus=cpus, mem_node=n.id, bytes_per_thread=per, libnuma=libnuma,
                      pin=pin)
        single = res.core_figure is None
        samples, one, share = run_read_job(job, s.reps, s.warmup, single=single, check_node=multi)
        placed = f"; {share:.1%} of pages on node {n.id} (numa_maps)" if share is not None else ""
        how = "libnuma numa_alloc_onnode" if libnuma else "first touch by the pinned thread"
        res.node_figures[n.id] = measured_figure(
            summarise_rates(samples),
            f"{KERNEL}, {len(cpus)} threads pinned one per physical core, {len(cpus) * per / MIB:.0f} MiB "
            f"placed by {how}{placed}; best of {s.reps} after {s.warmup} warm-up")
        if single and one:
            st = summarise_rates(one)
            fig = measured_figure(st, f"{KERNEL}, 1 thread pinned to CPU {cpus[0]} reading "
                                      f"{len(cpus) * per / MIB:.0f} MiB on node {n.id}; best of {s.reps}")
            if kernel_ceiling:
                fig = _with_kernel_check(fig, kernel_ceiling, res.notes)
            res.core_figure = fig
    for n in nodes:  # memory-only nodes: only libnuma can place pages there
        if n.cpus or n.mem_total_bytes <= 0:
            continue
        near = nearest_cpu_node(nodes, n.id)
        if libnuma is None or near is None or near.id not in readers:
            res.notes.append(f"node {n.id} has memory but no CPUs: measuring it needs libnuma "
                             "(apt install libnuma1)")
            continue
        cpus = readers[near.id]
        per, _ = choose_bytes(None, len(cpus), s, avail_bytes, n.mem_free_bytes)
        on_step(f"DRAM read, memory-only node {n.id} from node {near.id}")
        job = ReadJob(reader_cpus=cpus, place_cpus=cpus, mem_node=n.id, bytes_per_thread=per, libnuma=libnuma)
        samples, _, share = run_read_job(job, s.cross_reps, s.warmup, check_node=True)
        res.node_figures[n.id] = measured_figure(
            summarise_rates(samples), f"{KERNEL}, {len(cpus)} threads of node {near.id} reading memory placed "
            f"on node {n.id} by libnuma; best of {s.cross_reps}")
    if len(readers) >= 2:
        res.matrix = _cross_matrix(nodes, readers, res, s, avail_bytes, libnuma, l3_bytes, total_cores, on_step, pin)
    return res


def _with_kernel_check(fig: Figure, ceiling: float, notes: list[str]) -> Figure:
    from dataclasses import replace

    method = fig.method + f"; the kernel reads L2-resident data at {ceiling / 1e9:.1f} GB/s"
    if fig.value > 0.6 * ceiling:
        notes.append(f"single-core read figure ({fig.value / 1e9:.1f} GB/s) is close to the read kernel's "
                     f"in-cache rate ({ceiling / 1e9:.1f} GB/s): it may be limited by the kernel, not DRAM")
    return replace(fig, method=method)


def _cross_matrix(nodes, readers, res, s, avail_bytes, libnuma, l3_bytes, total_cores, on_step, pin=pin_linux):
    ids = [n.id for n in nodes]
    by_id = {n.id: n for n in nodes}
    rows = []
    for i in ids:
        row = []
        for j in ids:
            if i not in readers:
                row.append(0.0)
                continue
            if i == j and j in res.node_figures:
                row.append(res.node_figures[j].value)
                continue
            mem = by_id[j]
            place = readers.get(j)
            if place is None and libnuma is None:
                row.append(0.0)
                continue
            cpus = readers[i]
            l3_node = int(l3_bytes * len(cpus) / total_cores) if l3_bytes else None
            per, _ = choose_bytes(l3_node, len(cpus), s, avail_bytes, mem.mem_free_bytes)
            on_step(f"DRAM read, node {i} reading node {j}")
            place_cpus = tuple(place[k % len(place)] for k in range(len(cpus))) if place else cpus
            job = ReadJob(reader_cpus=cpus, place_cpus=place_cpus, mem_node=j, bytes_per_thread=per,
                          libnuma=libnuma, pin=pin)
            samples, _, _ = run_read_job(job, s.cross_reps, 1)
            row.append(summarise_rates(samples).best)
        rows.append(tuple(row))
    return tuple(rows)
