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
from launch_plans import ESTIMATE, make_plan, write_models

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
    # ik_llama.cpp: MLA flags, --no-mmap, and a ubatch below its op-offload threshold (prefill on the CPU)
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


# ---- bundled profiles on the bundled presets (fixed placements, so the goldens pin the
# emitters, not the cost model) ----------------------------------------------------------------

BUNDLED = {
    # profile, --quant/--size, preset the placement is shaped for, placement, backends, GPUs' memory
    "deepseek-v3-q4km--epyc-genoa-2s-4090": (
        "deepseek-v3", {"quant": "Q4_K_M"},
        Placement(cpu_moe_layers=tuple(range(3, 61)), n_ctx=32768, n_threads=96, n_threads_batch=96, n_ubatch=4096,
                  n_batch=4096, numa="bind", numa_nodes=(0,), cache_type_k="q8_0", cache_type_v="q8_0"),
        ("llama.cpp", "ik_llama.cpp", "ktransformers"), 24 * GIB),
    "gpt-oss-120b--desktop-4090-ddr5": (
        "gpt-oss-120b", {},
        Placement(cpu_moe_layers=tuple(range(24)), n_ctx=26112, n_threads=16, n_ubatch=1024, n_batch=2048),
        ("llama.cpp", "ik_llama.cpp", "ktransformers"), 24 * GIB),
    "qwen3-30b-a3b--desktop-3060-ddr4": (
        "qwen3-30b-a3b", {},
        Placement(cpu_moe_layers=tuple(range(28)), n_ctx=16384, n_threads=8, n_ubatch=512, n_batch=2048),
        ("llama.cpp", "ik_llama.cpp", "ktransformers"), 12 * GIB),
    "deepseek-v4-flash-151G--seed-rtxpro6000-2x6548y": (
        "deepseek-v4-flash", {"size": "151G"},
        Placement(cpu_moe_layers=tuple(range(18)), n_ctx=65536, n_threads=64, n_ubatch=2048, n_batch=2048,
                  numa="distribute"),
        ("llama.cpp",), 96 * GIB),
    "qwen3-235b-a22b--8xH100": (
        "qwen3-235b-a22b", {"quant": "native"},
        Placement(backend="vllm", n_ctx=65536, n_seq=16, n_gpus=8),
        ("vllm", "sglang"), 80 * GIB),
}


@pytest.mark.parametrize("case", sorted(BUNDLED))
def test_golden_bundled(case):
    from moeplan.probes.models import resolve_model

    name, args, placement, backends, vram = BUNDLED[case]
    m = resolve_model(name, quant=args.get("quant"), size=args.get("size"))
    # the plan's predicted VRAM drives KTransformers' memory fraction: pin it at 80% of the GPU
    plan = make_plan(m, placement, replace(ESTIMATE, vram_bytes=int(0.8 * vram), vram_required_bytes=int(0.8 * vram) + GIB))
    files = {}
    for backend in backends:
        launch = emit_launch(plan, m, backend, gpu_vram_bytes=vram)
        for fname, text, _exe in render_files(plan, m, launch):
            if fname != "plan.json":
                files[(backend, fname)] = normalise(text)
    folder = GOLDEN / "bundled" / case
    if UPDATE:
        for (backend, fname), text in files.items():
            p = folder / backend / fname
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
    on_disk = {(p.parent.name, p.name) for p in folder.glob("*/*")}
    assert on_disk == set(files), "golden files differ in name: regenerate and review"
    for (backend, fname), text in files.items():
        assert (folder / backend / fname).read_text() == text, f"{case}/{backend}/{fname} changed"
    for p in folder.glob("*/*.sh"):
        r = subprocess.run(["bash", "-n", str(p)], capture_output=True, text=True)
        assert r.returncode == 0, (p, r.stderr)
