"""Tables and JSON for `moeplan models` and `moeplan inspect`."""
from __future__ import annotations

from rich import box
from rich.table import Table

from moeplan.planner.memory.accounting import kv_cache_bytes, kv_layer_bytes, kv_layer_bytes_per_token
from moeplan.planner.model.spec import ModelSpec
from moeplan.units import GIB, MIB


def _gib(n: float) -> str:
    return f"{n / GIB:.2f}"


def _mib(n: float) -> str:
    return f"{n / MIB:.1f}"


def inspect_data(m: ModelSpec, n_ctx: int, kv_type: str) -> dict:
    """Everything `inspect` shows, as plain data (the JSON output)."""
    type_k = kv_type
    type_v = kv_type
    layers = []
    for layer in m.layers:
        layers.append({
            "index": layer.index,
            "kind": layer.kind,
            "attention": layer.attention,
            "dense_bytes": layer.resident_bytes,
            "expert_bytes": layer.expert_bytes,
            "expert_types": list(layer.expert_types),
            "kv_bytes_per_token": kv_layer_bytes_per_token(layer, type_k, type_v),
            "kv_bytes_at_ctx": kv_layer_bytes(layer, n_ctx, type_k, type_v) if layer.kind != "nextn" else 0,
            "groups": layer.bytes_by_group(),
        })
    totals = {
        "file_bytes": m.file_bytes,
        "tensor_bytes": m.tensor_bytes,
        "loaded_bytes": m.loaded_bytes,
        "routed_expert_bytes": m.expert_bytes,
        "gpu_resident_bytes": m.gpu_resident_bytes,
        "bytes_read_per_token": m.bytes_read_per_token(),
        "kv_bytes": kv_cache_bytes(m, n_ctx, type_k, type_v),
        "kv_ctx": n_ctx,
        "kv_type": kv_type,
        "expert_bytes_per_expert": int(m.expert_bytes_per_expert),
        "expert_params_per_expert": int(m.expert_params_per_expert),
    }
    return {"model": m.summary_dict(), "totals": totals, "groups": m.bytes_by_group(),
            "layers": layers, "notes": list(m.notes)}


def inspect_tables(data: dict) -> list[Table]:
    m = data["model"]
    t = Table(title=f"{m['name']} ({m['arch']}, {m['quant']}) per layer — sizes in MiB (binary)",
              show_lines=False)
    for col in ("blk", "kind", "attention", "dense MiB", "experts MiB", "expert types", "KV B/token"):
        t.add_column(col, justify="right" if "MiB" in col or col in ("blk", "KV B/token") else "left")
    for layer in data["layers"]:
        t.add_row(str(layer["index"]), layer["kind"], layer["attention"], _mib(layer["dense_bytes"]),
                  _mib(layer["expert_bytes"]), ",".join(layer["expert_types"]) or "-",
                  f"{layer['kv_bytes_per_token']:,}")
    tot = data["totals"]
    s = Table(title="totals (GiB = 1024^3 bytes, GB = 1000^3 bytes)")
    s.add_column("what")
    s.add_column("GiB", justify="right")
    s.add_column("GB", justify="right")
    s.add_column("bytes", justify="right")

    def row(label: str, n: int) -> None:
        s.add_row(label, _gib(n), f"{n / 1e9:.2f}", f"{n:,}")

    row("file on disk", tot["file_bytes"])
    row("tensors (sum of the index)", tot["tensor_bytes"])
    row("routed experts (movable to CPU)", tot["routed_expert_bytes"])
    row("must stay on the GPU (all but experts)", tot["gpu_resident_bytes"])
    row("weights read per decoded token", tot["bytes_read_per_token"])
    row(f"KV cache at ctx {tot['kv_ctx']} ({tot['kv_type']})", tot["kv_bytes"])
    row("one routed expert (average)", tot["expert_bytes_per_expert"])
    return [t, s]


def _b(v) -> str:
    return f"{v}B" if v not in (None, "") else "?"


def models_table(rows: list[dict]) -> Table:
    t = Table(title="bundled model profiles (params in billions, as model cards print them)",
              box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, padding=(0, 0), show_edge=False)
    cells = [[r["name"], r["arch"], _b(r.get("total_params_b")), _b(r.get("active_params_b")),
              f"{r.get('n_experts_used', '?')}/{r.get('n_experts', '?')}", str(r.get("n_layers", "?")),
              str(r.get("default_quant", "")), str(r.get("status", "")).split(" ")[0]] for r in rows]
    for i, col in enumerate(("name", "arch", "total", "active", "k/N", "layers", "quant", "status")):
        width = max([len(col)] + [len(c[i]) for c in cells])
        # names are copied into commands: never broken; the short columns keep their width
        # (the arch column gives way first: the name says the family)
        t.add_column(col, min_width=None if i == 1 else width, max_width=None if i == 1 else width, no_wrap=i == 0,
                     overflow="ellipsis")
    for c in cells:
        t.add_row(*c)
    return t


def aliases_lines(rows: list[dict]) -> list[str]:
    return [f"{r['name']}: {', '.join(r['aliases'])}" for r in rows if r.get("aliases")]
