"""Per-device placement and buffers against a real llama.cpp split over RPC devices.

tests/data/llama_memory_multi/<case>.json: moeplan's emitted complete.sh (the plan's -ts and
-ot overrides) run by a CPU-only llama.cpp build with two or three `rpc-server` processes as
devices (tests/llama_rpc.py --record). The tests regenerate each fixture, check it is the file
that ran, and compare per device:

  blocks on each device and the output layer's device   exact (llama.cpp's debug log)
  expert tensors kept on the CPU                         exact (the -ot override log)
  weights buffer of each device                          exact (every tensor 32-byte aligned)
  KV buffer of each device                               exact
  compute buffer of each device                          not below llama.cpp's, above by <= 15%
  with -ngl N (the *-ngl* cases): blocks on the CPU, the CPU's weights and KV buffers
  (exact) and its compute buffer (not below, above by <= 15%)
  pipeline parallelism (the *-pp* cases: every layer offloaded, no -ot): llama.cpp logs
  "pipeline parallelism enabled" and keeps 4 copies of every input; the devices' and the
  CPU's compute buffers (not below, above by <= 15%)
  the --fit dry run (*-pp-fit, its raw log in tests/data/logs/): moeplan's log reader sees
  the real load only (two devices, the same buffers as the run without -fit)

test_live_rpc re-runs the first case when MOEPLAN_LLAMA_BIN names a build with rpc-server.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from llama_rpc import CASES, DATA, measured, predict, rpc_server_path, run_case, write_case_model

RECORDS = {p.stem: json.loads(p.read_text()) for p in sorted(DATA.glob("*.json"))}
BY_NAME = {c.name: c for c in CASES}
BIN = os.environ.get("MOEPLAN_LLAMA_BIN", "")
COMPUTE_OVER = 0.15


def _check(model, case, rec):
    pred = predict(model, case)
    meas = measured(rec, case.n_devices)
    n = len(model.layers)
    want_layers = {str(i): f"RPC{d}" if d >= 0 else "CPU" for i, d in enumerate(pred["block_devices"])}
    want_layers[str(n)] = f"RPC{pred['output_device']}" if pred["output_device"] >= 0 else "CPU"
    assert rec["layer_devices"] == want_layers
    want_cpu = sorted(t.name for t in model.tensors if t.group == "experts" and t.layer in case.cpu_moe_layers)
    assert rec["cpu_overrides"] == want_cpu
    assert rec["emitted_flags"]["-ts"] == case.tensor_split
    if case.n_gpu_layers is not None:
        assert rec["emitted_flags"]["-ngl"] == str(case.n_gpu_layers)
        _check_host(model, case, rec)
    for pd, md in zip(pred["devices"], meas):
        assert pd["blocks"] == [b for b in md["blocks"] if b < n], pd["device"]  # n: the output layer
        assert pd["weights_bytes"] == md["weights_bytes"], pd["device"]
        assert pd["kv_bytes"] == md["kv_bytes"], pd["device"]
        # the device buffer is predicted from the single-device phases: never below what
        # llama.cpp reserved, and above it by at most COMPUTE_OVER (a device does not hold
        # the token ids and, but for the last, out_ids; its hidden-state input doubles as the
        # first residual - see docs/multi-gpu.md)
        over = (pd["compute_bytes"] - md["compute_bytes"]) / md["compute_bytes"]
        assert 0 <= over <= COMPUTE_OVER, (pd["device"], pd["compute_bytes"], md["compute_bytes"])


def _check_host(model, case, rec):
    """-ngl N: the CPU's buffers hold the CPU blocks' weights and KV (exact) and their ops'
    compute buffer (not below llama.cpp's, above by at most COMPUTE_OVER)."""
    from llama_rpc import case_placement

    from moeplan.planner.memory.accounting import MemoryConstants, estimate_memory

    mem = estimate_memory(model, case_placement(case), MemoryConstants(cuda_context_bytes=0, margin_bytes=0))

    def cpu(kind):
        return sum(b["bytes"] if b["bytes"] is not None else round(b["mib"] * 1024 * 1024)
                   for b in rec["buffers"] if b["kind"] == kind and b["buffer_type"] == "CPU")
    assert mem.get("weights_dense_cpu") > 0 and mem.get("kv_cache_cpu") > 0
    assert mem.get("weights_embed") + mem.get("weights_dense_cpu") + mem.get("weights_experts_cpu") == cpu("model")
    assert mem.get("kv_cache_cpu") == cpu("kv")
    over = (mem.get("compute_cpu") - cpu("compute")) / cpu("compute")
    assert 0 <= over <= COMPUTE_OVER, (mem.get("compute_cpu"), cpu("compute"))
    # the GPU side is what the devices hold
    assert mem.get("kv_cache") == sum(b["bytes"] for b in rec["buffers"] if b["kind"] == "kv"
                                      and b["buffer_type"].startswith("RPC"))


def _check_pp_host(model, case, rec):
    """Pipeline parallelism: the log says so, and the CPU compute buffer (4 copies of the
    graph inputs) is not below llama.cpp's, above by at most COMPUTE_OVER."""
    from llama_rpc import case_placement

    from moeplan.planner.memory.accounting import MemoryConstants, estimate_memory
    from moeplan.planner.memory.compute_buffer import pipeline_copies

    assert rec.get("pipeline_parallel") is True
    assert pipeline_copies(model, case_placement(case)) == 4
    mem = estimate_memory(model, case_placement(case), MemoryConstants(cuda_context_bytes=0, margin_bytes=0))
    cpu = sum(b["bytes"] if b["bytes"] is not None else round(b["mib"] * 1024 * 1024)
              for b in rec["buffers"] if b["kind"] == "compute" and b["buffer_type"] == "CPU")
    over = (mem.get("compute_cpu") - cpu) / cpu
    assert 0 <= over <= COMPUTE_OVER, (mem.get("compute_cpu"), cpu)


def test_recordings_cover_the_cases():
    assert set(RECORDS) == set(BY_NAME)
    for rec in RECORDS.values():
        assert rec["exact"] is True and len(rec["llama_cpp"]["commit"]) >= 7
        assert "--rpc RPC_ENDPOINTS" in rec["command"]
        assert rec["emitted_flags"]["-ts"] or rec["case"]["n_devices"] == 1


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_recorded_devices_match_the_plan(name, tmp_path):
    case = BY_NAME[name]
    rec = RECORDS[name]
    _, model = write_case_model(case, tmp_path)
    assert model.digest() == rec["fixture"]["digest"], "the fixture writer changed since the recording; re-record"
    _check(model, case, rec)
    if "-pp" in name:
        _check_pp_host(model, case, rec)
    else:
        assert not rec.get("pipeline_parallel"), "tensor overrides or -ngl N turn pipeline parallelism off"


def test_fit_dry_run_is_not_counted():
    """llama.cpp's default -fit on: the dry runs print every buffer line before the real load;
    moeplan's reader keeps the real load (two devices, the buffers of the run without -fit)."""
    from llama_rpc import LOGS

    from moeplan.check.parse import parse_log

    text = (LOGS / "rpc-qwen3moe-2dev-pp-fit.log").read_text()
    assert text.count("compute buffer size") > 3  # the dry runs printed them too
    run = parse_log(text, "rpc")
    assert run.superseded_loads >= 1
    assert len(run.devices) == 2
    ref = RECORDS["qwen3moe-2dev-pp"]

    def device(buffer_type: str) -> str:
        # every rpc-server numbers its devices from 0; the endpoint says which it is
        m = re.match(r"RPC\d+\[RPC_ENDPOINT_(\d+)\]$", buffer_type)
        return f"RPC{m.group(1)}" if m else buffer_type

    for kind, rkind in (("compute", "compute"), ("KV", "kv"), ("model", "model")):
        got = sorted((device(b.buffer_type), b.mib) for b in run.buffers if b.kind == kind)
        want = sorted((b["buffer_type"], b["mib"]) for b in ref["buffers"] if b["kind"] == rkind)
        assert got == want, kind


@pytest.mark.skipif(not BIN or rpc_server_path(Path(BIN)) is None,
                    reason="set MOEPLAN_LLAMA_BIN to a llama.cpp build/bin with ggml-rpc-server (-DGGML_RPC=ON)")
def test_live_rpc(tmp_path):
    from llama_memlog import build_alloc_shim

    case = CASES[0]
    rec = run_case(case, Path(BIN), tmp_path, build_alloc_shim(tmp_path))
    _, model = write_case_model(case, tmp_path / "again")
    _check(model, case, rec)
