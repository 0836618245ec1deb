"""Several GPUs: the per-GPU VRAM of the recommended plan against each GPU's budget, and its
decode speed against the pooled-VRAM upper bound (one imaginary card with all the VRAM, the
fastest card's bandwidth, one CUDA context and one margin: what treating the GPUs as a pool
would promise).

For 2, 4 and 8 GPUs of equal and of mixed sizes (spec-sheet profiles from `moeplan hardware`)
and the bundled large models. Prints figures; not a timed test.

    python benchmarks/multi_gpu.py [--model glm-5.2 ...] [--ctx 32768]
"""
from __future__ import annotations

import argparse
import time
from dataclasses import replace

from moeplan.planner.hardware.spec import SpecRequest
from moeplan.planner.search import Request, choose_plan, gpu_budgets
from moeplan.planner.serde import to_jsonable
from moeplan.probes.models import resolve_model
from moeplan.profiles import catalog
from moeplan.profiles.backends import read_priors
from moeplan.units import GIB

# (label, first GPU, the other GPUs (mixed) or a count (equal), per-GPU links)
MACHINES = (
    ("2x RTX 3090", "RTX 3090", 2, ()),
    ("5090+4090", "RTX 5090", ("RTX 4090",), ()),
    ("4x RTX 3090", "RTX 3090", 4, ()),
    ("5090+2x4090+3090@x4", "RTX 5090", ("RTX 4090", "RTX 4090", "RTX 3090"), ("", "", "", "3x4")),
    ("8x RTX 3090", "RTX 3090", 8, ()),
    ("8x mixed 5090/4090/3090", "RTX 5090", ("RTX 5090", "RTX 4090", "RTX 4090", "RTX 4090", "RTX 3090",
                                             "RTX 3090", "RTX 3090"), ()),
)
MODELS = ("glm-5.2", "deepseek-v3", "kimi-k2", "qwen3-235b-a22b", "deepseek-v4-flash")
SIZES = {"glm-5.2": "223GB"}  # the example file; the others take their default quant


def machine(first: str, rest, links) -> object:
    more = rest if isinstance(rest, tuple) else ()
    req = SpecRequest(gpu=first, gpu_count=None if more else rest, more_gpus=more, gpu_links=tuple(links),
                      cpu="Threadripper PRO 7975WX", ram_bytes=512 * GIB)
    return catalog.build_profile(req)


def pooled(hw):
    """One card with every GPU's VRAM and the fastest card's bandwidth and link."""
    fast = max(hw.gpus, key=lambda g: g.mem_bw_bytes_per_s.value if g.mem_bw_bytes_per_s else 0)
    return replace(hw, gpus=(replace(fast, index=0, vram_bytes=sum(g.vram_bytes for g in hw.gpus),
                                     vram_free_bytes=None),))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", help=f"bundled model(s); default: {', '.join(MODELS)}")
    ap.add_argument("--ctx", type=int, default=32768)
    a = ap.parse_args(argv)
    pr = read_priors("llama.cpp")
    req = Request(n_ctx=a.ctx)
    print(f"ctx {a.ctx}; GiB = 1024^3; 'needed' = in use + the 1 GiB margin; pooled = one card with all the VRAM")
    print(f"{'model':18} {'GPUs':24} {'-ts':18} {'CPU lay':>7} {'needed / budget per GPU (GiB)':44} {'fit':>3} "
          f"{'dec t/s':>7} {'pooled':>7} {'ratio':>5} {'s':>5}")
    worst_fill = 0.0
    for name in a.model or MODELS:
        model = resolve_model(name, size=SIZES.get(name))
        for label, first, rest, links in MACHINES:
            hw = machine(first, rest, links)
            t0 = time.perf_counter()
            try:
                best = choose_plan(model, hw, pr, req).best
            except Exception as exc:  # infeasible: say so and go on
                print(f"{name:18} {label:24} infeasible: {exc}")
                continue
            dt = time.perf_counter() - t0
            try:
                up = choose_plan(model, pooled(hw), pr, req).best.estimate.decode_tok_s
            except Exception:
                up = float("nan")
            per = [to_jsonable(g) for g in best.estimate.memory.per_gpu]
            budgets = gpu_budgets(hw, sum(g.vram_bytes for g in hw.gpus))
            cells = " ".join(f"{g['vram_required_bytes'] / GIB:.1f}/{b / GIB:.0f}" for g, b in zip(per, budgets))
            ok = all(g["vram_required_bytes"] <= b for g, b in zip(per, budgets))
            worst_fill = max([worst_fill] + [g["vram_required_bytes"] / b for g, b in zip(per, budgets)])
            ts = best.placement.options.tensor_split
            d = best.estimate.decode_tok_s
            print(f"{name:18} {label:24} {ts:18} {len(best.placement.cpu_moe_layers):>7} {cells:44} "
                  f"{'yes' if ok else 'NO':>3} {d:7.2f} {up:7.2f} {d / up:5.2f} {dt:5.1f}")
    print(f"largest needed/budget of any GPU: {worst_fill:.3f}")
    return 0 if worst_fill <= 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
