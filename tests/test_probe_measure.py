"""Timed measurements: pure summarisers on injected samples, and the measuring code run on
this machine with tiny sizes (so the suite stays fast)."""
from __future__ import annotations

import errno
import hashlib
import os

import numpy as np
import pytest
from probe_trees import listing

from moeplan.probes import dram, storage
from moeplan.probes.cpu import read_cpu
from moeplan.probes.numa import read_numa_nodes
from moeplan.probes.timing import measured_figure, summarise_rates, windows

MIB = 1024**2
TINY_DRAM = dram.DramSettings(l3_factor=0, min_bytes=8 * MIB, reps=2, warmup=1, cross_reps=1)
TINY_DISK = storage.StorageSettings(block_bytes=1 * MIB, seq_budget_s=0.05, seq_max_bytes=4 * MIB, rand_budget_s=0.05)


def test_summarise_rates_on_injected_samples():
    # 1 GB in 0.1 s, 0.125 s, 0.2 s -> 10, 8, 5 GB/s
    st = summarise_rates([(1e9, 0.1), (1e9, 0.125), (1e9, 0.2), (0, 1.0), (1e9, 0.0)])
    assert st.n == 3  # zero work and zero time are dropped
    assert (st.best, st.median, st.worst) == pytest.approx((10e9, 8e9, 5e9))
    assert st.spread == pytest.approx((10 - 5) / 8)
    assert st.overall == pytest.approx(3e9 / 0.425)
    f = measured_figure(st, "m")
    assert (f.value, f.median, f.source, f.n_samples, f.achievable) == (st.best, st.median, "measured", 3, 1.0)
    assert measured_figure(st, "m", value="overall").value == pytest.approx(st.overall)
    with pytest.raises(ValueError):
        summarise_rates([(0, 0)])


def test_windows_merge_small_samples():
    samples = [(4096, 0.01)] * 25  # 0.25 s of reads
    w = windows(samples, 0.1)
    assert len(w) == 2  # 0.1, then 0.15 (the short tail joins the last window)
    assert sum(b for b, _ in w) == 25 * 4096 and sum(s for _, s in w) == pytest.approx(0.25)
    assert windows([(1, 0.01)], 0.1) == [(1, 0.01)]


def test_choose_bytes_follows_stream_rule_and_caps():
    per, note = dram.choose_bytes(l3_node=100 * MIB, n_threads=4, s=dram.QUICK, avail_bytes=64 * 1024 * MIB,
                                  node_free_bytes=None)
    assert per * 4 == 400 * MIB and note == ""  # 4 x L3, split over 4 threads
    per, note = dram.choose_bytes(l3_node=1 * MIB, n_threads=3, s=dram.QUICK, avail_bytes=None, node_free_bytes=None)
    assert per == (256 * MIB // 3) // 4096 * 4096  # the 256 MiB floor, 4 KiB-aligned per thread
    per, note = dram.choose_bytes(l3_node=512 * MIB, n_threads=1, s=dram.QUICK, avail_bytes=1024 * MIB,
                                  node_free_bytes=None)
    assert per == 256 * MIB and "only 0.5x the L3" in note  # a quarter of available memory, and said so


def test_read_job_reads_every_chunk_in_single_mode():
    seen = []

    def kernel(a):
        seen.append(a.nbytes)
        a.max()

    cpu = sorted(os.sched_getaffinity(0))[0]
    job = dram.ReadJob(reader_cpus=(cpu, cpu), place_cpus=(cpu, cpu), mem_node=0, bytes_per_thread=MIB)
    samples, one, share = dram.run_read_job(job, reps=2, warmup=1, single=True, kernel=kernel)
    assert [b for b, _ in samples] == [2 * MIB] * 2 and len(one) == 2 and share is None
    # warm-up + 2 reps with both threads, then warm-up + 2 reps of one thread reading both chunks
    assert len(seen) == 3 * 2 + 3 * 2


def test_measure_dram_on_this_machine_tiny():
    cpu, topo = read_cpu("/")
    nodes = read_numa_nodes("/", topo)
    steps = []
    res = dram.measure_dram(nodes, topo, None, TINY_DRAM, avail_bytes=None, on_step=steps.append)
    first = next(n for n in nodes if n.cpus)
    f = res.node_figures[first.id]
    assert f.source == "measured" and f.n_samples == 2 and f.value >= f.median > 0
    assert res.core_figure is not None and "L2-resident" in res.core_figure.method
    assert steps and steps[0].startswith("DRAM read, node")


def _model_file(tmp_path, n_bytes=8 * MIB + 123):
    p = tmp_path / "model.gguf"
    p.write_bytes(np.random.default_rng(1).integers(0, 255, n_bytes, dtype=np.uint8).tobytes())
    return p


def test_storage_reads_without_writing_or_leaving_files(tmp_path):
    p = _model_file(tmp_path)
    before_hash, before_stat, before_files = hashlib.sha256(p.read_bytes()).hexdigest(), p.stat(), listing(tmp_path)
    st, notes = storage.measure_storage(str(p), TINY_DISK)
    assert st.seq_read_bytes_per_s.source == "measured" and st.seq_read_bytes_per_s.value > 0
    assert st.rand4k_read_bytes_per_s.value > 0 and st.file_bytes == 8 * MIB + 123
    assert "4 KiB" in st.rand4k_read_bytes_per_s.method
    assert hashlib.sha256(p.read_bytes()).hexdigest() == before_hash
    assert p.stat().st_mtime_ns == before_stat.st_mtime_ns and listing(tmp_path) == before_files
    assert any("storage figures from so little data are rough" in n for n in notes)


def test_storage_falls_back_when_o_direct_is_refused(tmp_path):
    p = _model_file(tmp_path)
    direct = getattr(os, "O_DIRECT", 0)

    def no_direct(path, flags):
        if direct and flags & direct:
            raise OSError(errno.EINVAL, "Invalid argument")
        return os.open(path, flags)

    st, notes = storage.measure_storage(str(p), TINY_DISK, opener=no_direct)
    assert "buffered" in st.seq_read_bytes_per_s.method
    assert any("O_DIRECT refused" in n for n in notes)


def test_storage_budget_with_injected_clock(tmp_path):
    p = _model_file(tmp_path, 64 * 4096)
    ticks = iter(i * 0.01 for i in range(10_000))
    fd = os.open(p, os.O_RDONLY)
    try:
        samples = storage.measure_rand4k(fd, 64 * 4096, budget_s=0.1, clock=lambda: next(ticks))
    finally:
        os.close(fd)
    # the clock is read three times per loop (budget check, start, end), 0.01 s a tick: the
    # budget checks see 0.01, 0.04, 0.07, then 0.10 -> stop after 3 reads of 0.01 s each
    assert len(samples) == 3 and all(b == 4096 and s == pytest.approx(0.01) for b, s in samples)


def test_bad_model_path_is_an_input_error(tmp_path):
    from moeplan.errors import InputError

    with pytest.raises(InputError):
        storage.measure_storage(str(tmp_path / "missing.gguf"), TINY_DISK)
    with pytest.raises(InputError):
        storage.resolve_model_file(str(tmp_path))  # an empty folder


@pytest.mark.gpu
def test_copy_rates_on_a_real_gpu():
    from moeplan.probes.copy_rates import measure_copy_rates, torch_cuda
    from moeplan.probes.gpu import read_gpus

    if not read_gpus()[0]:  # no driver: skip without paying for a torch import
        pytest.skip("needs an NVIDIA GPU")
    torch = torch_cuda()
    if torch is None:
        pytest.skip("needs torch with CUDA")
    res = measure_copy_rates(torch, 0, (), 64 * MIB, 3)
    for key in ("h2d_pinned", "h2d_pageable", "d2h_pinned"):
        st = summarise_rates(res[key])
        assert 1e9 < st.best < 1e12  # between PCIe gen 1 x1 and anything that exists


def test_page_placement_from_numa_maps():
    from moeplan.probes.numa_alloc import parse_maps, parse_numa_maps, share_on_node

    maps = parse_maps("7f0000000000-7f0040000000 rw-p 00000000 00:00 0\n7f1000000000-7f1000001000 r--p 0 0 0 /lib/x\n")
    numa = parse_numa_maps("7f0000000000 default anon=262144 dirty=262144 N0=6144 N1=256000 kernelpagesize_kB=4\n"
                           "7f1000000000 default file=/lib/x mapped=1 N0=1\n")
    share = share_on_node([(0x7F0000001000, 0x7F0000002000)], 1, maps, numa)
    assert share == pytest.approx(256000 / 262144)
    assert share_on_node([(0x100, 0x200)], 0, maps, numa) is None  # not in any mapping


def test_libnuma_placement_when_present():
    from moeplan.probes.numa_alloc import Libnuma

    lib = Libnuma.load()
    if lib is None:
        pytest.skip("libnuma is not installed")
    cpu = sorted(os.sched_getaffinity(0))[0]
    job = dram.ReadJob(reader_cpus=(cpu,), place_cpus=(cpu,), mem_node=0, bytes_per_thread=4 * MIB, libnuma=lib)
    samples, _, share = dram.run_read_job(job, reps=2, warmup=1, check_node=True)
    assert len(samples) == 2 and share is not None and share > 0.9  # pages are where libnuma put them


def test_copy_measurements_land_in_the_gpu_figures(tmp_path, monkeypatch):
    """The plumbing around torch: figures, sources and the loaded link (torch itself is faked)."""
    from probe_trees import FakeNvml, gpu_dev, server_tree

    from moeplan.probes import copy_rates
    from moeplan.probes.probe import QUICK, _measure_copies, read_machine

    nvml = FakeNvml([gpu_dev(gen=1)])
    p = read_machine(str(server_tree(tmp_path)), nvml,
                     system_kwargs={"which": lambda n: None, "find_library": lambda n: None}).profile
    calls = []

    def fake_measure(torch, index, cpus, n_bytes, reps, read_link=None):
        calls.append((index, cpus, n_bytes, reps))
        return {"h2d_pinned": [(1e9, 0.04)] * 3, "h2d_pageable": [(1e9, 0.1)] * 3,
                "d2h_pinned": [(1e9, 0.05)] * 3, "link_loaded": (5, 16)}

    monkeypatch.setattr(copy_rates, "torch_cuda", lambda: object())
    monkeypatch.setattr(copy_rates, "measure_copy_rates", fake_measure)
    notes: list[str] = []
    g = _measure_copies(p, QUICK, nvml, lambda m: None, notes).gpus[0]
    assert calls == [(0, tuple(range(8, 16)) + tuple(range(24, 32)), QUICK.copy_bytes, QUICK.copy_reps)]
    assert g.h2d_bytes_per_s.value == pytest.approx(25e9) and g.h2d_bytes_per_s.source == "measured"
    assert g.h2d_pageable_bytes_per_s.value == pytest.approx(10e9) and g.d2h_bytes_per_s.value == pytest.approx(20e9)
    assert (g.pcie_gen_loaded, g.pcie_width_loaded) == (5, 16) and "first touched on CPUs 8-15,24-31" in g.h2d_bytes_per_s.method
    monkeypatch.setattr(copy_rates, "torch_cuda", lambda: None)
    assert _measure_copies(p, QUICK, nvml, lambda m: None, notes) == p
    assert "needs torch with CUDA" in notes[-1]


def test_cross_node_matrix_code_path():
    """Two 'nodes' of one CPU each (on this machine both are really node 0): the matrix is
    filled, its diagonal is the per-node figure, and placement is reported honestly."""
    from moeplan.planner.hardware.profile import NumaNode
    from moeplan.probes.cpu import Topology

    cpus = sorted(os.sched_getaffinity(0))[:2]
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    nodes = (NumaNode(id=0, cpus=(cpus[0],), n_physical_cores=1, distances=(10, 21)),
             NumaNode(id=1, cpus=(cpus[1],), n_physical_cores=1, distances=(21, 10)))
    topo = Topology(cores=((cpus[0],), (cpus[1],)), package_of={cpus[0]: 0, cpus[1]: 1})
    res = dram.measure_dram(nodes, topo, None, TINY_DRAM, avail_bytes=None)
    m = res.matrix
    assert len(m) == 2 and all(len(row) == 2 and all(v > 0 for v in row) for row in m)
    assert m[0][0] == res.node_figures[0].value and m[1][1] == res.node_figures[1].value
    assert "of pages on node 1 (numa_maps)" in res.node_figures[1].method
