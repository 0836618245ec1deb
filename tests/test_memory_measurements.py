"""The machine model's DRAM read rate against public measurements of that hardware
(moeplan/profiles/parts/memory_measurements.toml): a hardware figure comes from a measurement of
the hardware, and the model must land inside the measurement's spread."""
from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from moeplan.planner.cost import resolve
from moeplan.planner.hardware.spec import SpecRequest
from moeplan.planner.placement import Placement
from moeplan.profiles import catalog
from moeplan.profiles.backends import read_priors
from moeplan.units import GIB

DATA = Path(catalog.profiles_dir()) / "parts" / "memory_measurements.toml"
MEASUREMENTS = tomllib.loads(DATA.read_text())["measurement"]


def modelled_read_bytes_per_s(m: dict) -> float:
    """The model's read rate for the measured setup: all cores of the sockets used, each socket
    reading its own memory, with the runtime's efficiency left out (eta_cpu = 1: a stream
    benchmark, not a decode)."""
    hw = catalog.build_profile(SpecRequest(cpu=m["cpu"], sockets=m["sockets"], ram_bytes=512 * GIB,
                                           channels=m["channels_per_socket"] * m["sockets"],
                                           ram_type=m["ram_type"], ram_speed_mts=m["ram_speed_mts"]))
    pr = replace(read_priors("llama.cpp"), eta_cpu=1.0)
    nodes = tuple(n.id for n in resolve.cpu_nodes(hw))[: m["sockets_used"]]
    numa = "distribute" if m["sockets_used"] > 1 else "bind"
    p = Placement(cpu_moe_layers=(0,), n_threads=m["threads"] * m["sockets_used"], n_gpus=0, numa=numa,
                  numa_nodes=nodes)
    return resolve.resolve_factors(hw, pr, p, host_bytes=10e9).bw_cpu_bytes_per_s.value


def test_every_measurement_names_its_source_and_a_catalog_part():
    assert MEASUREMENTS
    for m in MEASUREMENTS:
        assert m["source"].startswith("https://") and m["quote"]
        assert str(m["read_gbps"]) in m["quote"].replace(" GB/s", "") or f"{m['read_gbps']}" in m["quote"]
        assert catalog.find_cpu(m["cpu"])
        assert 0 < m["spread"] <= 0.25


@pytest.mark.parametrize("m", MEASUREMENTS, ids=lambda m: f"{m['cpu']}-{m['sockets_used']}of{m['sockets']}S")
def test_modelled_read_rate_within_the_measured_spread(m):
    got = modelled_read_bytes_per_s(m) / 1e9
    assert got == pytest.approx(m["read_gbps"], rel=m["spread"]), (got, m["read_gbps"], m["source"])
