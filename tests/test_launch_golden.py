"""Golden launch files: fixed hand-written plans on the test models, for every backend.

The plans are shaped like the machines people run (a 24 GB desktop, a 2-socket server with
NUMA binding, a 4-GPU box, two 8-GPU nodes); the models are the GGUF fixtures (qwen3moe-like,
deepseek2-like with dense leading blocks and an MTP block, gpt-oss-like with expert biases)
under fixed paths. Regenerate after an intended change with
    MOEPLAN_UPDATE_GOLDEN=1 python -m pytest tests/test_launch_golden.py
and review the diff.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from launch_plans import make_plan, write_models

from moeplan import __version__
from moeplan.launch import emit_launch, render_files
from moeplan.planner.placement import Placement

GOLDEN = Path(__file__).parent / "golden" / "launch"
GIB = 1024**3
UPDATE = os.environ.get("MOEPLAN_UPDATE_GOLDEN") == "1"

# case -> (model key, fixed model path, placement, backends, n_nodes, GPU memory)
CASES = {
    "qwen3moe-desktop-24g": ("qwen3moe", "/models/Qwen3 MoE/tiny-Q8_0.gguf",
                             Placement(cpu_moe_layers=(3, 4, 5), n_ctx=32768, n_threads=16, n_ubatch=1024,
                                       n_batch=2048, cache_type_k="q8_0", cache_type_v="q8_0"),
                             ("llama.cpp", "ik_llama.cpp", "ktransformers"), 1, 24 * GIB),
    "deepseek2-2socket-bind": ("deepseek2", "/models/deepseek/tiny-Q4_K_M-00001-of-00002.gguf",
                               Placement(cpu_moe_layers=(2, 3, 4, 5, 6), n_ctx=65536, n_threads=32,
                                         n_threads_batch=64, n_ubatch=4096, n_batch=4096, numa="bind",
                                         numa_nodes=(0,), load_mode="no-mmap", n_draft=2, draft_accept=0.8,
                                         extra=(("op_offload_min_batch", "512"),)),
                               ("llama.cpp", "ktransformers"), 1, 96 * GIB),
    # ik_llama.cpp: MLA flags, -rtr, and a ubatch below its op-offload threshold (prefill on the CPU)
    "deepseek2-ik-below-threshold": ("deepseek2", "/models/deepseek/tiny-Q4_K_M-00001-of-00002.gguf",
                                     Placement(backend="ik_llama.cpp", cpu_moe_layers=(4, 5, 6, 7), n_ctx=32768,
                                               n_threads=32, n_ubatch=64, n_batch=2048, numa="bind",
                                               numa_nodes=(1,), load_mode="no-mmap", op_offload=False),
                                     ("ik_llama.cpp", "llama.cpp"), 1, 24 * GIB),
    "gptoss-interleave-mlock": ("gpt-oss", "/models/gpt-oss/tiny-MXFP4.gguf",
                                Placement(cpu_moe_layers=(0, 1, 2, 3, 4, 5), n_ctx=131072, n_threads=48,
                                          numa="interleave", numa_nodes=(0, 1), load_mode="mlock", n_gpus=2,
                                          op_offload=False, n_ubatch=256),
                                ("llama.cpp", "ktransformers"), 1, 32 * GIB),
    "qwen3moe-4gpu": ("qwen3moe", "/models/Qwen3 MoE/tiny-Q8_0.gguf",
                      Placement(backend="vllm", n_ctx=131072, n_seq=8, n_gpus=4),
                      ("vllm", "sglang"), 1, 80 * GIB),
    "deepseek2-2nodes": ("deepseek2", "/models/deepseek/tiny-Q4_K_M-00001-of-00002.gguf",
                         Placement(backend="sglang", n_ctx=65536, n_seq=4, n_gpus=8, cache_type_k="q8_0",
                                   cache_type_v="q8_0"),
                         ("vllm", "sglang"), 2, 80 * GIB),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return write_models(tmp_path_factory.mktemp("models"))


def normalise(text: str) -> str:
    return text.replace(f"moeplan {__version__}", "moeplan VERSION").replace(
        f'"moeplan_version": "{__version__}"', '"moeplan_version": "VERSION"')


def golden_files(models, case: str) -> dict[tuple[str, str], str]:
    key, path, placement, backends, n_nodes, vram = CASES[case]
    m = replace(models[key], path=path, shards=())
    plan = make_plan(m, placement)
    out = {}
    for backend in backends:
        launch = emit_launch(plan, m, backend, n_nodes=n_nodes, gpu_vram_bytes=vram, model_path=path)
        for name, text, _exe in render_files(plan, m, launch):
            if name != "plan.json":
                out[(backend, name)] = normalise(text)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(models, case):
    files = golden_files(models, case)
    folder = GOLDEN / case
    if UPDATE:
        for (backend, name), text in files.items():
            p = folder / backend / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
    on_disk = {(p.parent.name, p.name) for p in folder.glob("*/*")}
    assert on_disk == set(files), "golden files differ in name: regenerate and review"
    for (backend, name), text in files.items():
        assert (folder / backend / name).read_text() == text, f"{case}/{backend}/{name} changed"


def test_golden_scripts_are_valid_bash():
    scripts = sorted(GOLDEN.glob("*/*/*.sh"))
    assert len(scripts) >= 25
    for p in scripts:
        r = subprocess.run(["bash", "-n", str(p)], capture_output=True, text=True)
        assert r.returncode == 0, (p, r.stderr)
