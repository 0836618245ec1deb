"""No NUMA policy on two sockets (issue 32 item 5): a model bigger than one node spills its
pages onto the second node, but each layer still sits on one node and the other socket's
threads read it over the xGMI links, so `--numa none` is slower than `distribute` (whose first
touch makes every read local), and no faster than one node's DRAM allows."""
from __future__ import annotations

from moeplan.planner.cost.estimate import estimate
from moeplan.planner.hardware.spec import SpecRequest
from moeplan.planner.placement import Placement
from moeplan.profiles.backends import read_priors
from moeplan.profiles.catalog import build_profile
from moeplan.profiles.model_profiles import load_profile

GIB = 1024**3


def _epyc():
    return build_profile(SpecRequest(cpu="EPYC 7543", sockets=2, ram_bytes=512 * GIB, gpu="RTX 3090", gpu_count=2))


def _est(numa: str):
    model = load_profile("deepseek-v3")
    p = Placement(cpu_moe_layers=model.moe_layer_indices, numa=numa, n_threads=64)
    return estimate(model, p, _epyc(), read_priors("llama.cpp"))


def test_no_policy_with_pages_on_both_nodes_reads_over_the_socket_links():
    none, dist = _est("none"), _est("distribute")
    assert none.decode_tok_s < 0.8 * dist.decode_tok_s
    assert none.factors.remote_share == 0.5
    node_bw = _epyc().numa_nodes[0].dram_read_bytes_per_s.effective
    assert none.factors.bw_cpu_bytes_per_s.value <= node_bw * 1.001
    assert "socket" in none.factors.bw_cpu_bytes_per_s.note or "links" in none.factors.bw_cpu_bytes_per_s.note
