"""Tables and JSON for `moeplan estimate` and `moeplan tune`."""
from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from moeplan.planner.cost.estimate import BOTTLENECK_TEXT
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement
from moeplan.planner.plan import Estimate, Plan
from moeplan.planner.serde import to_jsonable
from moeplan.units import GIB


def _layers(p: Placement, model: ModelSpec) -> str:
    if p.n_gpus == 0:
        return "all (CPU-only run)"
    if p.n_gpu_layers is not None and p.n_gpu_layers <= len(model.trunk_layers):
        gpu_blocks = max(0, p.n_gpu_layers - 1)  # the output layer is the first of the -ngl layers
        moe = f", and of GPU blocks: {compact_ranges(p.cpu_moe_layers)}" if p.cpu_moe_layers else ""
        return f"the first {len(model.trunk_layers) - gpu_blocks} blocks wholly on the CPU (-ngl {p.n_gpu_layers}){moe}"
    if not p.cpu_moe_layers:
        return "none (all experts on the GPU)"
    if set(p.cpu_moe_layers) == set(model.moe_layer_indices):
        return f"all {len(p.cpu_moe_layers)}"
    return f"{len(p.cpu_moe_layers)}: {compact_ranges(p.cpu_moe_layers)}"


def compact_ranges(idx: tuple[int, ...]) -> str:
    out: list[str] = []
    start: int | None = None
    prev = -2
    for i in sorted(idx):
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = prev = i
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(out)


def estimate_data(model: ModelSpec, p: Placement, e: Estimate, hw_name: str, fit=None) -> dict:
    """The stable JSON of `estimate`: top-level figures, then terms and the placement. `fits`
    false: `fit` says which budget, by how much and what a run does; the speeds are then what
    really happens (0 when it fails to load), the figures if it fit are in `notes`."""
    return {
        "model": model.summary_dict(),
        "hardware": hw_name,
        "fits": True if fit is None else fit.fits,
        "fit": None if fit is None else fit.to_dict(),
        "vram_bytes": e.vram_bytes,
        "vram_required_bytes": e.vram_required_bytes,
        "ram_bytes": e.ram_bytes,
        "decode_tok_s": e.decode_tok_s,
        "decode_tok_s_range": list(e.decode_tok_s_range),
        "prefill_tok_s": e.prefill_tok_s,
        "prefill_tok_s_range": list(e.prefill_tok_s_range),
        "decode_tok_s_paging": e.decode_tok_s_paging,
        "decode_range_tier": e.decode_range_tier,
        "prefill_range_tier": e.prefill_range_tier,
        "bottleneck": e.bottleneck,
        "prefill_bottleneck": e.prefill_bottleneck,
        "depth": e.depth,
        "decode_terms": to_jsonable(e.decode_terms),
        "prefill_terms": to_jsonable(e.prefill_terms),
        "memory": to_jsonable(e.memory),
        "vram_bytes_per_gpu": vram_bytes_per_gpu(e),
        "ram_bytes_per_node": [list(x) for x in e.ram_bytes_per_node],
        "factors": to_jsonable(e.factors),
        "notes": _quant_notes(model) + list(e.notes),
        "placement": p.to_dict(),
    }


def vram_bytes_per_gpu(e: Estimate) -> list[int]:
    """VRAM in use on every GPU, in device order ([] for a CPU-only run)."""
    per = e.memory.per_gpu
    if per:
        return [g.vram_bytes for g in per]
    return [e.vram_bytes] if e.vram_bytes else []


def gpu_table(e: Estimate) -> Table | None:
    """Several GPUs: what each device holds and needs against its budget."""
    per = e.memory.per_gpu
    if not per:
        return None
    t = Table(title="per GPU (GiB = 1024^3 bytes; needed = in use + llama.cpp's 1 GiB margin)")
    pool = any(g.pool_bytes for g in per)  # a CUDA/ROCm build's memory pool (memory/cuda_runtime.py)
    for col in ("GPU", "blocks", "experts of", "weights", "KV", "compute", "ctx") + (("pool",) if pool else ()) + (
            "in use", "needed", "budget"):
        t.add_column(col, justify="left" if col in ("GPU", "blocks", "experts of") else "right")
    for g in per:
        budget = g.budget_bytes
        over = budget is not None and g.vram_required_bytes > budget
        name = g.name.replace("NVIDIA ", "").replace("GeForce ", "")
        t.add_row(f"{g.device} {name}".strip(),
                  (g.blocks or "-") + (" + output" if g.output else ""), g.gpu_expert_blocks or "-",
                  f"{(g.weights_dense_bytes + g.weights_experts_bytes) / GIB:.2f}", f"{g.kv_bytes / GIB:.2f}",
                  f"{g.compute_bytes / GIB:.2f}", f"{g.context_bytes / GIB:.2f}",
                  *((f"{g.pool_bytes / GIB:.2f}",) if pool else ()), f"{g.vram_bytes / GIB:.2f}",
                  f"[red]{g.vram_required_bytes / GIB:.2f}[/red]" if over else f"{g.vram_required_bytes / GIB:.2f}",
                  f"{budget / GIB:.2f}" if budget is not None else "?")
    return t


def placement_table(model: ModelSpec, p: Placement) -> Table:
    t = Table(title="placement", show_header=False)
    t.add_column("what")
    t.add_column("value")
    t.add_row("backend", p.backend)
    t.add_row("MoE layers with experts on the CPU", _layers(p, model))
    t.add_row("context", f"{p.n_ctx}")
    t.add_row("KV cache", f"K {p.cache_type_k}, V {p.cache_type_v}, flash attention {'on' if p.flash_attn else 'off'}")
    t.add_row("threads", f"{p.n_threads} (batch {p.threads_batch})")
    t.add_row("NUMA", p.numa + (f" nodes {list(p.numa_nodes)}" if p.numa_nodes else ""))
    t.add_row("ubatch / batch", f"{p.n_ubatch} / {p.n_batch}, op-offload {'on' if p.op_offload else 'off'}")
    if p.gpu_expert_cache_bytes:
        t.add_row("GPU expert cache", f"{p.gpu_expert_cache_bytes / GIB:.2f} GiB")
    if p.n_draft:
        t.add_row("speculative", f"{p.n_draft} drafted, acceptance {p.draft_accept:.0%}")
    return t


def memory_table(e: Estimate, explain: bool = True, fit=None) -> Table:
    t = Table(title="memory (GiB = 1024^3 bytes)")
    t.add_column("item")
    t.add_column("where")
    t.add_column("GiB", justify="right")
    if explain:
        t.add_column("how")
    for item in e.memory.items:
        if not item.bytes:
            continue
        where = item.device + (" (page cache)" if item.page_cache else "")
        t.add_row(item.name, where, f"{item.bytes / GIB:.2f}", *((item.formula,) if explain else ()))
    extra = ("",) if explain else ()
    t.add_row("VRAM in use", "gpu", f"{e.vram_bytes / GIB:.2f}", *extra)
    needed = "VRAM needed (+1 GiB margin" + (" per GPU)" if e.memory.per_gpu else ")")
    t.add_row(needed, "gpu", f"{e.vram_required_bytes / GIB:.2f}",
              *(("llama.cpp --fit keeps 1 GiB free",) if explain else ()))
    t.add_row("host RAM", "host", f"{e.ram_bytes / GIB:.2f}",
              *((", ".join(f"node {n}: {b / GIB:.1f}" for n, b in e.ram_bytes_per_node),) if explain else ()))
    if fit is not None and not fit.fits:
        t.add_row(f"OVER BUDGET: {fit.budget}", "gpu" if fit.budget == "vram" else "host",
                  f"-{fit.short_bytes / GIB:.2f}",
                  *((f"needs {fit.needed_bytes / GIB:.2f}, budget {fit.budget_bytes / GIB:.2f}",) if explain else ()),
                  style="bold red")
    return t


def terms_table(title: str, terms, total_label: str, explain: bool = True) -> Table:
    t = Table(title=title)
    t.add_column("term")
    t.add_column("ms", justify="right")
    t.add_column("share", justify="right")
    t.add_column("resource")
    if explain:
        t.add_column("formula")
    total = sum(x.seconds for x in terms) or 1.0
    for x in terms:
        if x.seconds <= 0:
            continue
        t.add_row(x.name, f"{x.seconds * 1e3:.3f}", f"{x.seconds / total:.0%}", x.resource,
                  *((x.formula,) if explain else ()))
    t.add_row(total_label, f"{total * 1e3:.3f}", "100%", "", *(("",) if explain else ()))
    return t


def fit_line(fit) -> Text | None:
    """A placement over a budget, said before the figures: which budget, by how much, and what
    a real run does."""
    if fit is None or fit.fits:
        return None
    names = {"vram": "VRAM", "ram": "host RAM", "numa_node": "the bound NUMA node's RAM"}
    return Text.assemble(("DOES NOT FIT ", "bold red"),
                         f"{names.get(fit.budget, fit.budget)}: needs {fit.needed_bytes / GIB:.2f} GiB, budget "
                         f"{fit.budget_bytes / GIB:.2f} GiB, short by {fit.short_bytes / GIB:.2f} GiB. "
                         f"Run as it is: {fit.outcome}.")


def speed_line(e: Estimate) -> Text:
    if e.decode_tok_s <= 0 and e.prefill_tok_s <= 0:
        return Text.assemble(("decode ", "bold"), "- ", ("  prefill ", "bold"), "-  (it does not load)")
    lo, hi = e.decode_tok_s_range
    plo, phi = e.prefill_tok_s_range
    return Text.assemble(
        ("decode ", "bold"), f"{e.decode_tok_s:.1f} tok/s ({lo:.1f}-{hi:.1f})",
        ("   prefill ", "bold"), f"{e.prefill_tok_s:.0f} tok/s ({plo:.0f}-{phi:.0f})",
        ("   bottleneck ", "bold"), BOTTLENECK_TEXT.get(e.bottleneck, e.bottleneck),
    )


def _quant_notes(model: ModelSpec) -> list[str]:
    """The model's notes on its bytes (recipe approximations, --size scaling: 'quant: ...')."""
    return [n for n in model.notes if n.startswith("quant: ")]


def estimate_render(model: ModelSpec, p: Placement, e: Estimate, fit=None) -> Group:
    parts: list[RenderableType] = [placement_table(model, p), memory_table(e, fit=fit)]
    gt = gpu_table(e)
    if gt is not None:
        parts.append(gt)
    over = fit_line(fit)
    cond = " if it fit" if over is not None else ""
    parts += [terms_table(f"decode: where the time goes (per token, depth {e.depth}{cond})", e.decode_terms,
                          "per token"),
              terms_table(f"prefill: where the time goes (per prompt token{cond})", e.prefill_terms,
                          "per prompt token"),
              speed_line(e)]
    if over is not None:
        parts.append(over)
    for n in _quant_notes(model) + [n for n in e.notes if not n.startswith("does not fit: ")]:
        parts.append(Text(f"note: {n}"))
    return Group(*parts)


def pareto_table(plan: Plan) -> Table:
    t = Table(title="VRAM against decode speed (Pareto front; * = recommended; beyond the budget: what more VRAM buys)")
    t.add_column("CPU layers", justify="right")
    t.add_column("VRAM GiB", justify="right")
    t.add_column("decode tok/s", justify="right")
    t.add_column("prefill tok/s", justify="right")
    best = len(plan.placement.cpu_moe_layers)
    for a in plan.pareto:
        if a.vram_bytes > plan.estimate.vram_bytes and len(a.placement.cpu_moe_layers) < best - 8 and a is not plan.pareto[-1]:
            continue  # far beyond the budget: keep the table short (the JSON has every point)
        mark = "*" if len(a.placement.cpu_moe_layers) == best else ""
        t.add_row(f"{len(a.placement.cpu_moe_layers)}{mark}", f"{a.vram_bytes / GIB:.1f}", f"{a.decode_tok_s:.1f}",
                  f"{a.prefill_tok_s:.0f}")
    return t


def alternatives_table(plan: Plan) -> Table:
    t = Table(title="next best placements")
    t.add_column("placement")
    t.add_column("decode tok/s", justify="right")
    t.add_column("prefill tok/s", justify="right")
    t.add_column("VRAM GiB", justify="right")
    for a in plan.alternatives:
        t.add_row(a.label, f"{a.decode_tok_s:.1f}", f"{a.prefill_tok_s:.0f}", f"{a.vram_bytes / GIB:.1f}")
    return t


def tune_render(model: ModelSpec, plan: Plan, command: str = "", explain: bool = False) -> Group:
    e = plan.estimate
    wl = plan.workload
    goal = (f"the shortest request ({wl.describe()})" if plan.objective == "workload" and wl is not None
            else plan.objective)
    parts: list[RenderableType] = [
        Text(f"recommended for {goal}: {model.name} ({model.quant}) on {plan.hardware_name}", style="bold"),
        speed_line(e)]
    if plan.objective == "workload" and wl is not None:
        parts.append(Text(f"one {wl.name} request: {wl.seconds(e.prefill_tok_s, e.decode_tok_s):.1f} s "
                          f"({wl.prompt_tokens:,} / {e.prefill_tok_s:,.0f} tok/s prefill + {wl.gen_tokens:,} / "
                          f"{e.decode_tok_s:.2f} tok/s decode)"))
    if command:
        # one line, never wrapped inside an argument: it is copied into a shell (print the
        # group with crop=False so a line wider than the terminal overflows instead of being cut)
        parts += [Text("run it:", style="bold"), Text(command, no_wrap=True, overflow="ignore")]
    parts += [placement_table(model, plan.placement), memory_table(e, explain)]
    gt = gpu_table(e)
    if gt is not None:
        parts.append(gt)
    parts += [terms_table("decode: where the time goes (per token)", e.decode_terms, "per token", explain)]
    if explain:
        parts.append(terms_table("prefill: where the time goes (per prompt token)", e.prefill_terms,
                                 "per prompt token"))
    why = Table(title="why", show_header=False)
    why.add_column("")
    for n in plan.notes:
        why.add_row(n)
    parts.append(why)
    for n in e.notes:
        parts.append(Text(f"note: {n}"))
    if plan.pareto:
        parts.append(pareto_table(plan))
    if plan.alternatives:
        parts.append(alternatives_table(plan))
    if not explain:
        parts.append(Text("--explain shows the formula of every figure and the prefill terms", style="dim"))
    return Group(*parts)
