"""check/parse.py reads only the last load of a model file: llama.cpp's -fit on dry runs print
every buffer line first (the recorded case is tests/test_multi_gpu_llamacpp.py's
test_fit_dry_run_is_not_counted); a draft model, another file, is kept."""
from __future__ import annotations

import pytest

from moeplan.check.parse import parse_log


def _load(path: str, compute_mib: float, devices=("CUDA0", "CUDA1"), devices_first: bool = True) -> list[str]:
    """One load as llama.cpp logs it; devices_first=False: 0c1e570's order (the devices after
    the file's metadata, llama_prepare_model_devices)."""
    dev = [f"llama_model_load_from_file_impl: using device {d} (NVIDIA GeForce RTX 3090) (0000:0{i}:00.0) "
           f"- 24000 MiB free" for i, d in enumerate(devices)]
    head = [f"llama_model_loader: loaded meta data with 40 key-value pairs and 579 tensors from {path} "
            "(version GGUF V3 (latest))"]
    lines = dev + head if devices_first else head + ["print_info: arch = qwen3moe"] + dev
    lines += [f"load_tensors:        {d} model buffer size =  1000.00 MiB" for d in devices]
    lines += [f"llama_kv_cache:        {d} KV buffer size =   100.00 MiB" for d in devices]
    lines += [f"sched_reserve:        {d} compute buffer size =   {compute_mib:.2f} MiB" for d in devices]
    return lines


@pytest.mark.parametrize("devices_first", [True, False])
def test_dry_runs_are_skipped(devices_first):
    text = "\n".join(_load("/m/a.gguf", 1.0, devices_first=devices_first)
                     + _load("/m/a.gguf", 2.0, devices_first=devices_first)
                     + ["common_fit_params: fitting params to free memory took 0.35 seconds"]
                     + _load("/m/a.gguf", 59.0, devices_first=devices_first)) + "\n"
    run = parse_log(text, "x")
    assert run.superseded_loads == 2
    assert len(run.devices) == 2
    assert sorted(b.mib for b in run.buffers if b.kind == "compute") == [59.0, 59.0]
    assert run.buffer_total("model") == 2 * 1000 * 1024 * 1024


def test_a_draft_model_is_kept():
    text = "\n".join(_load("/m/a.gguf", 59.0) + _load("/m/draft.gguf", 7.0, ("CUDA0",))) + "\n"
    run = parse_log(text, "x")
    assert run.superseded_loads == 0
    assert sorted(b.mib for b in run.buffers if b.kind == "compute") == [7.0, 59.0, 59.0]
