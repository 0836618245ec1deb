"""Golden launch files: fixed hand-written plans on the test models, for every backend.

The plans are shaped like the machines people run (a 24 GB desktop, a 2-socket server with
NUMA binding, a 4-GPU box, two 8-GPU nodes); the models are the GGUF fixtures (qwen3moe-like,
deepseek2-like with dense leading blocks and an MTP block, gpt-oss-like with expert biases)
under fixed paths. The tests only compare against the committed files (tests/goldens.py); after
an intended change rewrite them with `python scripts/update_goldens.py` and review the diff.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace

import pytest
from goldens import ROOT, assert_golden, differences, main, produce, update
from launch_plans import ESTIMATE, make_plan, write_models

from moeplan import __version__
from moeplan.launch import emit_launch, render_files
from moeplan.planner.options import PlanOptions
from moeplan.planner.placement import Placement

GOLDEN = ROOT / "launch"
GIB = 1024**3

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
                                         options=PlanOptions(op_offload_min_batch="512")),
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


def golden_files(models, case: str, placement: Placement | None = None) -> dict[tuple[str, str], str]:
    """(backend, file name) -> text of a case's launch files (`placement`: instead of the case's)."""
    key, path, case_placement, backends, n_nodes, vram = CASES[case]
    placement = placement or case_placement
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
    assert_golden(GOLDEN / case, golden_files(models, case))


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


def bundled_files(case: str) -> dict[tuple[str, str], str]:
    """(backend, file name) -> text of a bundled profile's launch files."""
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
    return files


@pytest.mark.parametrize("case", sorted(BUNDLED))
def test_golden_bundled(case):
    folder = GOLDEN / "bundled" / case
    assert_golden(folder, bundled_files(case))
    for p in folder.glob("*/*.sh"):
        r = subprocess.run(["bash", "-n", str(p)], capture_output=True, text=True)
        assert r.returncode == 0, (p, r.stderr)


# ---- the golden checks can fail, and only the update command writes ---------------------------

def test_a_changed_plan_fails_against_the_committed_golden(models, tmp_path):
    case = "qwen3moe-desktop-24g"
    copy = tmp_path / case
    shutil.copytree(GOLDEN / case, copy)
    assert_golden(copy, golden_files(models, case))  # as committed: passes
    changed = CASES[case][2].with_(cpu_moe_layers=(3, 4))  # block 5's experts back on the GPU
    with pytest.raises(AssertionError, match=r"launch\.sh changed") as err:
        assert_golden(copy, golden_files(models, case, changed))
    assert "-    -ot '^blk\\.(3|4|5)\\." in str(err.value) and "+    -ot '^blk\\.(3|4)\\." in str(err.value), err.value
    assert copy.joinpath("llama.cpp", "launch.sh").read_bytes() == (GOLDEN / case / "llama.cpp" / "launch.sh").read_bytes()
    # a committed file the code no longer writes, and a file it writes that is not committed
    (copy / "llama.cpp" / "old.sh").write_text("")
    (copy / "ik_llama.cpp" / "bench.sh").unlink()
    problems = differences(copy, golden_files(models, case))
    assert problems == [f"missing golden {case}/ik_llama.cpp/bench.sh",
                        f"golden {case}/llama.cpp/old.sh is no longer produced"], problems
    with pytest.raises(AssertionError, match="scripts/update_goldens.py"):
        assert_golden(copy, golden_files(models, case))


def test_the_update_command_rewrites_exactly_what_the_tests_compare(tmp_path, capsys):
    root = tmp_path / "golden"
    shutil.copytree(GOLDEN, root / "launch")
    files = produce(("launch",))
    assert update(root, ("launch",), check=True, files=files) == []  # the committed goldens are current
    edited = root / "launch" / "qwen3moe-desktop-24g" / "llama.cpp" / "launch.sh"
    edited.write_text(edited.read_text() + "# edited\n")
    stale = edited.with_name("old.sh")
    stale.write_text("")
    want = ["golden launch/qwen3moe-desktop-24g/llama.cpp/old.sh is no longer produced",
            "golden launch/qwen3moe-desktop-24g/llama.cpp/launch.sh changed:"]
    assert update(root, ("launch",), check=True, files=files) == want
    assert edited.read_text().endswith("# edited\n") and stale.exists()  # --check writes nothing
    assert main(["--root", str(root), "--only", "launch", "--check"]) == 1
    assert "2 golden file(s) stale" in capsys.readouterr().err
    assert update(root, ("launch",), files=files) == want
    assert edited.read_bytes() == (GOLDEN / "qwen3moe-desktop-24g" / "llama.cpp" / "launch.sh").read_bytes()
    assert not stale.exists()
    assert update(root, ("launch",), check=True, files=files) == []
