"""`moeplan models` and `moeplan inspect`."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from moeplan.commands.common import JsonOpt, command
from moeplan.errors import InputError
from moeplan.planner.model.ggml import KV_CACHE_TYPES
from moeplan.units import parse_ctx

_QUANT_HELP = ("Quant of a bundled profile: any llama-quantize type (Q4_K_M, IQ2_M, Q3_K_S ...), MXFP4, BF16, "
               "native, FP8 (a BF16 model's -FP8 checkpoint), Unsloth UD-Q2_K_XL / Q4_K_XL, ik_llama.cpp IQ3_KS ... "
               "(docs/quants.md)")
QuantOpt = Annotated[Optional[str], typer.Option("--quant", help=_QUANT_HELP)]
SizeOpt = Annotated[Optional[str], typer.Option("--size", help="Real file size of a bundled profile (151GB decimal, 151G binary); bytes are scaled to it.")]


def check_kv_type(kv_type: str) -> str:
    t = kv_type.lower()
    if t not in KV_CACHE_TYPES:
        raise InputError(f"unknown KV cache type {kv_type!r}", "use one of " + ", ".join(KV_CACHE_TYPES))
    return t


def register(app: typer.Typer) -> None:
    @app.command("models")
    @command
    def models_cmd(as_json: JsonOpt = False) -> None:
        """List the bundled model profiles."""
        from moeplan.profiles.model_profiles import list_profiles
        from moeplan.ui.console import emit_json, stdout_console
        from moeplan.ui.model_tables import aliases_lines, models_table

        rows = list_profiles()
        if as_json:
            emit_json({"models": rows})
        else:
            con = stdout_console()
            con.print(models_table(rows))
            con.print("aliases (any of these names works as MODEL):")
            for line in aliases_lines(rows):
                con.print("  " + line, highlight=False)

    @app.command("inspect")
    @command
    def inspect_cmd(
        model: Annotated[str, typer.Argument(help="GGUF file (any shard), Hugging Face folder, or profile name")],
        quant: QuantOpt = None,
        size: SizeOpt = None,
        ctx: Annotated[str, typer.Option("--ctx", help="Context for the KV figure (4096, 32k)")] = "4096",
        kv_type: Annotated[str, typer.Option("--kv-type", help="KV cache type (f16, q8_0, q4_0 ...)")] = "f16",
        as_json: JsonOpt = False,
    ) -> None:
        """Show what a MoE model is made of: per-layer bytes, experts, KV per token, totals."""
        from moeplan.probes.models import resolve_model
        from moeplan.ui.console import emit_json, stdout_console
        from moeplan.ui.model_tables import inspect_data, inspect_tables

        n_ctx = parse_ctx(ctx)
        kvt = check_kv_type(kv_type)
        spec = resolve_model(model, quant=quant, size=size)
        data = inspect_data(spec, n_ctx, kvt)
        if as_json:
            emit_json(data)
        else:
            con = stdout_console()
            for t in inspect_tables(data):
                con.print(t)
            for note in spec.notes:
                con.print(f"note: {note}")
