"""Tables for `moeplan bench` (rendered from the result dict that --json prints)."""
from __future__ import annotations

from rich.console import JustifyMethod
from rich.table import Table

from moeplan.units import GIB, MIB

# tier rows: (label, time key or None, byte keys summed for the rate)
TIER_ROWS = (
    ("gpu", "gpu", ("gpu", "gpu_cache", "kv")),
    (" cached", None, ("gpu_cache",)),
    (" KV", None, ("kv",)),
    ("cpu", "cpu", ("cpu",)),
    ("mmap", "mmap", ("mmap",)),
    ("transfer", "transfer", ("transfer",)),
    ("activations", None, ("activations",)),
)
LEGEND = ("gpu: attention, norms, router, shared/dense FFN, GPU-resident and cached experts, head "
          "(cached: expert cache hits; KV: cache reads); "
          "cpu: CPU-tier experts from RAM; mmap: from the model file; transfer: expert uploads. "
          "MiB/tok: bytes moved by the executor (its dtype); file MiB/tok: the same work in the model file's types.")


def _f(x: float | None, fmt: str = "{:.2f}", none: str = "-") -> str:
    return none if x is None else fmt.format(x)


def summary_table(r: dict) -> Table:
    ex = r["executor"]
    m = r["model"]
    t = Table(title=f"bench: {m['name']} ({m['arch']})\non {ex['device_name']}, {ex['dtype']}, routing {ex['routing']}")
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_row("decode (tok/s), measured by the executor", _f(r["decode_tok_s"]))
    t.add_row(f"prefill at ubatch {ex['n_ubatch']} (tok/s), measured by the executor", _f(r["prefill_tok_s"], "{:.1f}"))
    if r.get("plan_estimate"):
        pe = r["plan_estimate"]
        t.add_row(f"plan's estimate for {pe.get('runtime', 'its backend')}, not this executor: decode / prefill (tok/s)",
                  f"{_f(pe.get('decode_tok_s'))} / {_f(pe.get('prefill_tok_s'), '{:.1f}')}")
    t.add_row("GPU expert cache hit rate (%)", _f(None if r["cache_hit_rate"] is None else 100 * r["cache_hit_rate"], "{:.1f}"))
    t.add_row("peak VRAM (GiB)", _f(None if r["peak_vram_bytes"] is None else r["peak_vram_bytes"] / GIB)
              + (f" ({r['peak_vram_scope']})" if r.get("peak_vram_scope") else ""))
    t.add_row("peak RSS (GiB)", _f(r["peak_rss_bytes"] / GIB))
    t.add_row("planned device / host memory (GiB)",
              f"{r['planned_device_bytes'] / GIB:.2f} / {r['planned_host_bytes'] / GIB:.2f}")
    n_blocks = sum(c["n_blocks"] for c in r["classes"].values())
    t.add_row("blocks run", f"{len(r['blocks_run'])} of {n_blocks}" + (" (extrapolated)" if r["extrapolated"] else ""))
    t.add_row("threads decode / batch", f"{ex['threads']} / {ex['threads_batch']}")
    return t


def tier_table(r: dict) -> Table:
    t = Table(title="where time and bytes go: decode per token, prefill per prompt token / per ubatch",
              caption=LEGEND)
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("tier", "left"), ("ms/tok", "right"), ("MiB/tok", "right"), ("file MiB/tok", "right"),
        ("GB/s", "right"), ("prefill ms/tok", "right"), ("prefill MiB/ub", "right"))
    for col, just in columns:
        t.add_column(col, justify=just)
    dt, db, dm = r["decode_s_per_token_by_tier"], r["bytes_per_token_by_tier"], r["model_bytes_per_token_by_tier"]
    pt, pb = r.get("prefill_s_per_token_by_tier") or {}, r.get("prefill_bytes_per_ubatch_by_tier") or {}
    for label, tkey, bkeys in TIER_ROWS:
        b = sum(db.get(k, 0) for k in bkeys)
        mb = sum(dm.get(k, 0) for k in bkeys)
        secs = dt.get(tkey) if tkey else None
        pbytes = sum(pb.get(k, 0) for k in bkeys)
        if not b and not secs and not pbytes:
            continue
        rate = b / secs / 1e9 if secs else None
        t.add_row(label, _f(None if secs is None else secs * 1e3, "{:.3f}"), f"{b / MIB:.2f}", f"{mb / MIB:.2f}",
                  _f(rate, "{:.1f}") if tkey else "",
                  _f(pt.get(tkey, 0) * 1e3, "{:.3f}") if tkey and pt else "", f"{pbytes / MIB:.1f}" if pb else "")
    t.add_row("total", f"{r['decode_s_per_token'] * 1e3:.3f}", f"{sum(db.values()) / MIB:.2f}",
              f"{sum(dm.values()) / MIB:.2f}", "",
              f"{sum(pt.values()) * 1e3:.3f}" if pt else "", f"{sum(pb.values()) / MIB:.1f}" if pb else "")
    return t


def memory_table(r: dict) -> Table:
    t = Table(title="memory the run planned before allocating (executor dtype)")
    t.add_column("part")
    t.add_column("where")
    t.add_column("GiB", justify="right")
    for item in r["memory_plan"]:
        if item["bytes"]:
            where = "device" if item["where"] == "device" else "host RAM"
            t.add_row(item["name"], where, f"{item['bytes'] / GIB:.3f}")
    return t


def bench_tables(r: dict) -> list[Table]:
    return [summary_table(r), tier_table(r), memory_table(r)]
