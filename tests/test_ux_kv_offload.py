"""Issue 32 item 9 (the kv_offload part): with the KV cache in RAM (llama.cpp -nkvo) decode
reads it at the host's bandwidth, not the GPU's."""
from __future__ import annotations

import pytest

from moeplan.planner.cost.estimate import estimate
from moeplan.planner.placement import Placement
from moeplan.probes.hwprofile import load_hardware
from moeplan.probes.models import resolve_model
from moeplan.profiles.backends import read_priors


def test_kv_in_ram_read_at_host_bandwidth():
    m, hw, pr = resolve_model("qwen3-30b-a3b"), load_hardware("desktop-4090-ddr5"), read_priors("llama.cpp")
    p = Placement(n_ctx=32768, n_gpus=1, cpu_moe_layers=tuple(range(24)), n_threads=16)
    on = estimate(m, p, hw, pr, depth=16384)
    off = estimate(m, p.with_(kv_offload=False), hw, pr, depth=16384)
    t_on = next(t for t in on.decode_terms if t.name == "kv_read")
    t_off = next(t for t in off.decode_terms if t.name == "kv_read")
    f = off.factors
    assert t_off.resource == "cpu-mem" and "in RAM" in t_off.formula
    assert t_off.seconds / t_on.seconds == pytest.approx(f.bw_gpu_bytes_per_s.value / f.bw_cpu_bytes_per_s.value)
    assert off.decode_tok_s < on.decode_tok_s
