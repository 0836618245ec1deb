"""The machine model's DRAM read rate against public measurements of that hardware
(moeplan/profiles/parts/memory_measurements.toml): a hardware figure comes from a measurement of
the hardware, and the model must land inside the measurement's spread."""
from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from moeplan.planner.cost import machine, resolve
from moeplan.planner.hardware.spec import SpecRequest
from moeplan.planner.placement import Placement
from moeplan.profiles import catalog
from moeplan.profiles.backends import read_priors
from moeplan.units import GIB

DATA = Path(catalog.profiles_dir()) / "parts" / "memory_measurements.toml"
TABLES = tomllib.loads(DATA.read_text())
MEASUREMENTS = TABLES["measurement"]
CORE_TO_CORE = TABLES["core_to_core"]


def _profile(m: dict):
    """The machine of a measurement as `moeplan hardware` builds it (the part's default NUMA mode
    unless the entry gives numa_nodes)."""
    return catalog.build_profile(SpecRequest(cpu=m["cpu"], sockets=m["sockets"], ram_bytes=512 * GIB,
                                             channels=m["channels_per_socket"] * m["sockets"],
                                             ram_type=m["ram_type"], ram_speed_mts=m["ram_speed_mts"],
                                             numa_nodes=m.get("numa_nodes")))


def modelled_read_bytes_per_s(m: dict) -> float:
    """The model's read rate for the measured setup: the threads on the nodes used (all sockets'
    or the first `nodes_used` sub-NUMA nodes), each node reading its own memory, with the
    runtime's efficiency left out (eta_cpu = 1: a stream benchmark, not a decode). A `remote`
    entry: node 0's threads reading node 1's memory, the local rate x the model's remote/local
    ratio for the part (resolve._remote_ratio)."""
    hw = _profile(m)
    pr = replace(read_priors("llama.cpp"), eta_cpu=1.0)
    used = m.get("nodes_used", m["sockets_used"])
    nodes = tuple(n.id for n in resolve.cpu_nodes(hw))[:used]
    numa = "distribute" if used > 1 else "bind"
    p = Placement(cpu_moe_layers=(0,), n_threads=m["threads"] * used, n_gpus=0, numa=numa,
                  numa_nodes=nodes)
    local = resolve.resolve_factors(hw, pr, p, host_bytes=10e9).bw_cpu_bytes_per_s.value
    if m.get("reads", "local") == "local":
        return local
    rho = resolve._remote_ratio(hw, pr, resolve.cpu_nodes(hw)[:2])[0]
    return rho * local


def test_every_measurement_names_its_source_and_a_catalog_part():
    assert MEASUREMENTS
    for m in MEASUREMENTS:
        assert m["source"].startswith("https://") and m["quote"]
        assert str(m["read_gbps"]) in m["quote"].replace(" GB/s", "") or f"{m['read_gbps']}" in m["quote"]
        assert catalog.find_cpu(m["cpu"])
        assert 0 < m["spread"] <= 0.25
        assert m.get("reads", "local") in ("local", "remote")
        assert "assumed" in m or "source" in m


def test_every_family_figure_the_machine_model_takes_is_a_listed_measurement():
    """machine.py's measured one-core rates and remote ratios each stand in the table."""
    listed = {(catalog.find_cpu(m["cpu"]).family, m["read_gbps"]) for m in MEASUREMENTS if m["threads"] == 1}
    for fam, ms in machine.FAMILIES.items():
        if ms.core_read_bytes_per_s:
            assert (fam, round(ms.core_read_bytes_per_s / 1e9, 2)) in listed, fam
        for ratio, one_node_per_socket in ((ms.remote_read_ratio, True), (ms.sub_numa_read_ratio, False)):
            if not ratio:
                continue
            # the node-0 local and remote figures of one NUMA mode: one node per socket (remote is
            # the other socket) or sub-NUMA nodes (remote is the next node of the same socket)
            mode = [m for m in MEASUREMENTS if catalog.find_cpu(m["cpu"]).family == fam
                    and m.get("nodes_used", 1) == 1 and m["sockets_used"] == 1
                    and (len(resolve.cpu_nodes(_profile(m))) == m["sockets"]) == one_node_per_socket]
            remote = [m for m in mode if m.get("reads") == "remote"]
            assert remote, fam
            local = [m for m in mode if m.get("reads", "local") == "local" and m["threads"] > 1
                     and (m["cpu"], m["source"]) == (remote[0]["cpu"], remote[0]["source"])]
            assert local, fam
            assert ratio == pytest.approx(min(1.0, remote[0]["read_gbps"] / local[0]["read_gbps"]), rel=0.01), fam


@pytest.mark.parametrize("m", MEASUREMENTS, ids=lambda m: (f"{m['cpu']}-{m.get('nodes_used', m['sockets_used'])}of"
                                                    f"{m.get('numa_nodes', 'default')}N-{m['threads']}T-"
                                                    f"{m.get('reads', 'local')}"))
def test_modelled_read_rate_within_the_measured_spread(m):
    got = modelled_read_bytes_per_s(m) / 1e9
    assert got == pytest.approx(m["read_gbps"], rel=m["spread"]), (got, m["read_gbps"], m["source"])


def _hw_6980p(numa_nodes: int | None):
    return catalog.build_profile(SpecRequest(cpu="Xeon 6980P", sockets=2, ram_bytes=1536 * GIB, numa_nodes=numa_nodes))


@pytest.mark.parametrize("c", CORE_TO_CORE, ids=lambda c: f"{c['cpu']}-{c['mode']}-{c['between']}")
def test_barrier_hand_over_is_the_measured_core_to_core_latency(c):
    """The barrier hand-over the model charges a Xeon 6900P in each NUMA mode is the MLC figure:
    threads within one node (SNC3), spread over the three nodes of a socket (the in-node and
    cross-node figures mixed as consecutive arrivals come from other nodes), or HEX."""
    assert c["source"].startswith("https://") and str(c["latency_ns"]) in c["quote"] + c["kind"]
    assert catalog.find_cpu(c["cpu"]).family == "granite-rapids"
    if c["mode"] == "HEX":
        got = machine.barrier_handoff_s(_hw_6980p(2), 128)[0]
        assert got == pytest.approx(c["latency_ns"] * 1e-9, rel=0.01)
    elif c["between"] == "node":
        got = machine.barrier_handoff_s(_hw_6980p(None), 40)[0]  # 40 threads fit one 42-core node
        assert got == pytest.approx(c["latency_ns"] * 1e-9, rel=0.01)
    else:
        inside = next(x for x in CORE_TO_CORE if x["mode"] == "SNC3" and x["between"] == "node")["latency_ns"]
        got = machine.barrier_handoff_s(_hw_6980p(None), 256)[0]  # both sockets, all three nodes each
        want = inside / 3 + c["latency_ns"] * 2 / 3
        assert got == pytest.approx(want * 1e-9, rel=0.01)
