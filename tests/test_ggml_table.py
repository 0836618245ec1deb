"""The planner's copy of gguf-py's type tables (ggml_table.py) matches the installed gguf-py."""
from __future__ import annotations

import importlib.util
import os

import pytest

from moeplan.planner.model import ggml, ggml_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _generator():
    spec = importlib.util.spec_from_file_location("gen_ggml_table", os.path.join(ROOT, "scripts", "gen_ggml_table.py"))
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_types_match_installed_gguf():
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    want = {t.name: (int(t), *GGML_QUANT_SIZES[t]) for t in GGMLQuantizationType}
    have = dict(ggml_table.GGML_TYPES)
    diff = {k: (have.get(k), want.get(k)) for k in set(want) | set(have) if have.get(k) != want.get(k)}
    assert not diff, f"ggml_table.py differs from gguf-py (committed, installed): {diff}; " \
                     "run scripts/gen_ggml_table.py"


def test_file_types_match_installed_gguf():
    from gguf.constants import LlamaFileType

    want = {int(f): f.name for f in LlamaFileType}
    assert want == ggml_table.LLAMA_FILE_TYPES, "run scripts/gen_ggml_table.py"


def test_committed_file_is_what_the_generator_writes():
    with open(ggml_table.__file__, encoding="utf-8") as f:
        assert f.read() == _generator().render(), "ggml_table.py is out of date: run scripts/gen_ggml_table.py"


def test_a_changed_value_is_caught(monkeypatch):
    """The comparison is not vacuous: a gguf whose Q8_0 block took 36 bytes would fail it."""
    import gguf.constants as gc

    sizes = dict(gc.GGML_QUANT_SIZES)
    sizes[gc.GGMLQuantizationType.Q8_0] = (32, 36)
    monkeypatch.setattr(gc, "GGML_QUANT_SIZES", sizes)
    with pytest.raises(AssertionError, match="Q8_0"):
        test_types_match_installed_gguf()
    assert _generator().render() != open(ggml_table.__file__, encoding="utf-8").read()


def test_planner_tables_keep_gguf_values_and_extras():
    assert ggml.TYPE_SIZES["Q8_0"] == (32, 34)
    assert ggml.TYPE_SIZES["Q4_K"] == (256, 144)
    assert ggml.TYPE_BY_ID[8] == "Q8_0" and ggml.ID_BY_TYPE["MXFP4"] == 39
    assert ggml.TYPE_SIZES["IQ4_KS"] == (256, 136)  # ik_llama.cpp's, from EXTRA_TYPES
    assert ggml.row_bytes("IQ4_KS", 512) == 4 + 2 * 136  # with its per-row scale
