"""Record llama.cpp's own dry run (`llama-fit-params -fitp on -v`) of moeplan plans on this
machine's llama.cpp build: the CPU backend alone, and two or one RPC devices (`ggml-rpc-server`
processes, RPC0/RPC1). Each record keeps, verbatim, the program's stdout (the per-device rows)
and its 'using device' log lines (free memory), the exact command (model path and endpoints
replaced by placeholders), the build's version line, the fixture that was loaded and the
placement moeplan planned, so tests/test_fitparams.py compares moeplan's figures with them.

    python tests/fit_params_record.py --bin BUILD/bin      # writes tests/data/fit_params/*.json

The plans are tune's own choice (the search with a hardware profile of two or one GPUs of a
given size) or a fixed placement, as each case says.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

DATA = HERE / "data" / "fit_params"


@dataclass(frozen=True)
class FitCase:
    name: str
    n_devices: int  # RPC devices; 0: the CPU backend alone
    gpu: bool = False  # the build's own GPU (CUDA0 ...) instead of RPC servers: --case NAME on a GPU machine
    gpu_vram_mib: int = 2048  # each GPU of the profile the plan is made for
    n_ctx: int = 4096
    n_layer: int = 6
    # a fixed placement instead of tune's choice: (cpu_moe_layers, -ts, ubatch, KV type)
    fixed: tuple[tuple[int, ...], str, int, str] | None = None


CASES = (
    FitCase("cpu-qwen3moe", 0),
    FitCase("rpc2-qwen3moe-tune", 2),
    FitCase("rpc2-qwen3moe-cpumoe-q8", 2, fixed=((0, 1, 4), "3,4", 512, "q8_0")),
    FitCase("rpc1-qwen3moe-cpumoe", 1, n_ctx=8192, fixed=((1, 2, 3, 4, 5), "", 2048, "f16")),
    # one GPU of a CUDA/ROCm build (not recorded by default: `--case cuda1-qwen3moe-tune --case
    # cuda1-qwen3moe-cpumoe` with a GPU build's bin): tune's plan on a 24 GiB GPU, and the
    # experts of 5 blocks on the CPU with op offload
    FitCase("cuda1-qwen3moe-tune", 1, gpu=True, gpu_vram_mib=24576, n_ctx=32768),
    FitCase("cuda1-qwen3moe-cpumoe", 1, gpu=True, gpu_vram_mib=24576, n_ctx=8192,
            fixed=((1, 2, 3, 4, 5), "", 2048, "f16")),
)
DEFAULT = tuple(c.name for c in CASES if not c.gpu)


def fixture(case: FitCase, folder: Path):
    from llama_fixtures import write_qwen3moe_llama

    from moeplan.probes.models import resolve_model

    path = folder / f"{case.name}.gguf"
    write_qwen3moe_llama(path, n_layer=case.n_layer)
    return path, resolve_model(str(path))


def profile(case: FitCase):
    """A spec-sheet profile: n GPUs of gpu_vram_mib (none for the CPU case)."""
    from moeplan.planner.hardware.spec import SpecRequest
    from moeplan.profiles import catalog

    if case.n_devices == 0:
        return catalog.build_profile(SpecRequest(cpu="EPYC 9355", ram_bytes=64 << 30))
    return catalog.build_profile(SpecRequest(gpu="RTX 4090" if case.gpu else "RTX 3060", gpu_count=case.n_devices,
                                             gpu_vram_bytes=case.gpu_vram_mib << 20, cpu="EPYC 9355",
                                             ram_bytes=64 << 30))


def plan_of(case: FitCase, spec, hw):
    from dataclasses import replace

    from moeplan import __version__
    from moeplan.planner.options import PlanOptions
    from moeplan.planner.search import Request, build_plan, choose_plan
    from moeplan.profiles.backends import read_priors

    pr = read_priors("llama.cpp")
    req = Request(backend="llama.cpp", n_ctx=case.n_ctx, min_ctx=case.n_ctx)
    result = choose_plan(spec, hw, pr, req)
    if case.fixed:
        from moeplan.planner.cost.estimate import estimate

        cpu, ts, ub, kv = case.fixed
        p = result.best.placement.with_(cpu_moe_layers=cpu, n_ubatch=ub, cache_type_k=kv, cache_type_v=kv,
                                        op_offload=case.gpu, options=PlanOptions(tensor_split=ts))
        best = replace(result.best, placement=p, estimate=estimate(spec, p, hw, pr))
        result = replace(result, best=best, alternatives=())
    return build_plan(spec, hw, result, "workload", moeplan_version=__version__)


def budgets_of(hw) -> tuple[int, ...]:
    return tuple(g.vram_free_bytes if g.vram_free_bytes is not None else g.vram_bytes for g in hw.gpus)


def record(bin_dir: Path, only: tuple[str, ...] = ()) -> None:
    from llama_memlog import llama_build_info
    from llama_rpc import RpcServers

    from moeplan.planner.serde import to_jsonable
    from moeplan.probes.fitparams import run_fit_params
    from moeplan.tuner.fitcheck import check_plan

    DATA.mkdir(parents=True, exist_ok=True)
    build = llama_build_info(bin_dir)
    for case in CASES:
        if case.name not in (only or DEFAULT):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            path, spec = fixture(case, Path(tmp))
            hw = profile(case)
            plan = plan_of(case, spec, hw)
            runs = []

            def runner(*a, _runs=runs, **kw):
                _runs.append(run_fit_params(*a, **kw))
                return _runs[-1]

            with RpcServers(bin_dir, 0 if case.gpu else case.n_devices) as rpc:
                fit = check_plan(plan, spec, str(bin_dir), rpc=rpc.rpc_arg if rpc.endpoints else None,
                                 budgets=budgets_of(hw), runner=runner)
                endpoints = list(rpc.endpoints)
            if fit.status in ("failed", "skipped"):
                raise RuntimeError(f"{case.name}: {fit.note}")
            run = runs[-1]

            def anon(text: str, path=path, endpoints=endpoints) -> str:
                text = text.replace(str(Path(path).absolute()), "MODEL.gguf").replace(str(bin_dir) + "/", "")
                for i, ep in enumerate(endpoints):
                    text = text.replace(ep, f"RPC_ENDPOINT_{i}")
                return text

            doc = {
                "case": {**case.__dict__, "fixed": case.fixed},
                "build": build,
                "recorded_by": "python tests/fit_params_record.py --bin BUILD/bin",
                "command": [anon(a) for a in run.argv],
                "env": {k: v for k, v in plan_env(plan, spec, bin_dir, path).items()},
                "stdout": run.stdout,
                "device_lines": [anon(line) for line in run.device_lines],
                "fixture": {"writer": "llama_fixtures.write_qwen3moe_llama", "n_layer": case.n_layer,
                            "digest": spec.digest(), "file_bytes": spec.file_bytes},
                "placement": to_jsonable(plan.placement),
                "gpu_budget_bytes": list(budgets_of(hw)),
                "verdict": fit.to_dict(),
            }
            doc["verdict"]["command"] = doc["command"]
            (DATA / f"{case.name}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
            print(case.name, fit.status, [(d.device, d.row.model_mib, d.row.context_mib, d.row.compute_mib)
                                          for d in fit.devices])


def plan_env(plan, spec, bin_dir: Path, path: Path) -> dict[str, str]:
    from moeplan.launch import emit_launch, find_programs

    cmd = emit_launch(plan, spec, "llama.cpp", find_programs("llama.cpp", str(bin_dir)),
                      model_path=str(path)).scripts[0].command
    return dict(cmd.env)


def fake_hw(budgets) -> SimpleNamespace:
    """The little of a profile memory_report reads: each GPU's name and budget."""
    return SimpleNamespace(gpus=[SimpleNamespace(name=f"GPU{i}", vram_free_bytes=None, vram_bytes=b)
                                 for i, b in enumerate(budgets)])


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, type=Path, help="llama.cpp build/bin with llama-fit-params, ggml-rpc-server")
    ap.add_argument("--case", action="append", default=[])
    a = ap.parse_args()
    record(a.bin.absolute(), tuple(a.case))
