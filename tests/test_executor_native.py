"""The executor's dtype follows what the CPU runs natively (moeplan/executor/native.py)."""
from __future__ import annotations

import pytest

from moeplan.executor.native import choose_dtype, f16c, native_bf16, resolve_dtype

ZEN4 = frozenset({"avx2", "f16c", "fma", "avx512f", "avx512_bf16"})
SAPPHIRE_RAPIDS = frozenset({"avx2", "f16c", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
HASWELL = frozenset({"avx2", "f16c", "fma"})
OLD = frozenset({"sse4_2", "avx"})


def test_cuda_keeps_bf16():
    assert choose_dtype("cuda", flags=HASWELL) == "bf16"


@pytest.mark.parametrize("flags", [ZEN4, SAPPHIRE_RAPIDS, HASWELL])
def test_synthetic_weights_stream_as_fp16_where_f16c_converts_them(flags):
    assert f16c(flags)
    assert choose_dtype("cpu", "synthetic", flags) == "fp16"


def test_bf16_only_where_the_cpu_has_it(monkeypatch):
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    assert native_bf16(ZEN4) and native_bf16(SAPPHIRE_RAPIDS) and not native_bf16(HASWELL)
    assert choose_dtype("cpu", "gguf", ZEN4) == "bf16"
    assert choose_dtype("cpu", "gguf", HASWELL) == "fp32"  # a file's activations may pass fp16's range
    assert choose_dtype("cpu", "synthetic", OLD) == "fp32"


def test_an_avx2_dispatch_has_no_bf16(monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert not native_bf16(ZEN4)
    assert choose_dtype("cpu", "gguf", ZEN4) == "fp32"


def test_auto_resolves_in_the_options_and_the_parser():
    from moeplan.executor.build import ExecOptions
    from moeplan.executor.weights import parse_dtype

    assert parse_dtype("auto") == "auto" and parse_dtype("BF16") == "bf16"
    assert ExecOptions(device="cuda").dtype == "bf16"
    assert ExecOptions(device="cpu").dtype == choose_dtype("cpu")
    assert ExecOptions(device="cpu", dtype="fp32").dtype == "fp32"
    assert resolve_dtype("fp16", "cuda") == "fp16" and resolve_dtype("auto", "cuda") == "bf16"
