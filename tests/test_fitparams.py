"""llama-fit-params -fitp on: the parser, and (with MOEPLAN_LLAMA_BIN) a dry run beside
moeplan's per-device figures on RPC devices."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from moeplan.probes.fitparams import FitRow, compare_devices, fit_params_program, fit_rows

BIN = os.environ.get("MOEPLAN_LLAMA_BIN", "")


def test_rows_are_read_and_log_lines_ignored():
    out = ("common_fit_print: printing estimated memory in MiB to stdout (device, model, context, compute) ...\n"
           "RPC0 12 64 9\nRPC1 20 64 10\nHost 64 8 14\n")
    rows = fit_rows(out)
    assert rows == [FitRow("RPC0", 12, 64, 9), FitRow("RPC1", 20, 64, 10), FitRow("Host", 64, 8, 14)]
    assert rows[-1].total_mib == 86


def test_no_rows_is_an_error():
    with pytest.raises(ValueError, match="no per-device estimate"):
        fit_rows("llama-fit-params: error: failed to load model\n")


def test_comparison_in_mib():
    mib = 1024 * 1024
    cmp = compare_devices([FitRow("CUDA0", 100, 50, 20)],
                          [{"weights_bytes": 100 * mib + 5, "kv_bytes": 50 * mib, "compute_bytes": 25 * mib}])
    assert cmp[0]["compute"] == {"llama_cpp_mib": 20, "moeplan_mib": 25, "diff_mib": 5}
    assert cmp[0]["weights"]["diff_mib"] == 0


@pytest.mark.skipif(not BIN or fit_params_program(Path(BIN)) is None,
                    reason="set MOEPLAN_LLAMA_BIN to a llama.cpp build/bin with llama-fit-params and ggml-rpc-server")
def test_dry_run_on_rpc_devices_matches_the_plan(tmp_path):
    """Two RPC devices, the pipeline-parallel case: llama.cpp's dry run prints each device's
    weights, KV and compute MiB; moeplan's figures are the same MiB for weights and KV and
    not below for compute."""
    from llama_rpc import CASES, RpcServers, predict, write_case_model

    from moeplan.probes.fitparams import run_fit_print

    case = next(c for c in CASES if c.name == "qwen3moe-2dev-pp")
    path, model = write_case_model(case, tmp_path)
    flags = ["-c", str(case.n_ctx), "-ub", str(case.n_ubatch), "-b", str(case.n_batch), "-ngl", "99",
             "-ts", case.tensor_split, "-fa", "on", "-t", "2", "-fit", "off"]
    with RpcServers(Path(BIN), case.n_devices) as rpc:
        rows = run_fit_print(BIN, path, flags + ["--rpc", rpc.rpc_arg])
    pred = predict(model, case)["devices"]
    mib = 1024 * 1024
    for row, d in zip(rows, pred):
        assert row.model_mib == d["weights_bytes"] // mib, row
        assert row.context_mib == d["kv_bytes"] // mib, row
        assert d["compute_bytes"] // mib >= row.compute_mib, row
