"""benchmarks/cuda_memory_record.py: the CUDA recording matrix and its sparse fixtures."""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from cuda_memory_record import CUDA_CASES, run_case, write_model  # noqa: E402
from llama_fixtures import sparse_files, write_qwen3moe_llama  # noqa: E402

from moeplan.probes.gguf_model import read_gguf_model  # noqa: E402


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def test_sparse_fixture_is_the_written_file_byte_for_byte(tmp_path):
    kw = {"n_layer": 2, "n_embd": 512, "n_expert": 8, "n_ff_exp": 256, "n_vocab": 2048}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    full, _ = write_qwen3moe_llama(tmp_path / "a" / "m.gguf", **kw)
    with sparse_files():
        hole, _ = write_qwen3moe_llama(tmp_path / "b" / "m.gguf", **kw)
    assert full.stat().st_size == hole.stat().st_size
    assert _sha256(full) == _sha256(hole)
    # the hole takes (almost) no disk: the zero weights are never written
    assert hole.stat().st_blocks * 512 < full.stat().st_size // 4


def test_real_width_fixtures_have_the_real_models_widths(tmp_path):
    m = read_gguf_model(write_model("qwen3-30b-dims", tmp_path))
    assert (m.n_embd, m.n_vocab, m.n_experts, m.n_experts_used) == (2048, 151936, 128, 8)
    m = read_gguf_model(write_model("qwen3.5-35b-dims", tmp_path))
    assert (m.n_embd, m.n_vocab, m.n_experts, m.n_experts_used) == (2048, 248320, 256, 8)


def test_the_matrix_covers_what_issue_33_asks():
    """ubatch 512-4096, FA on and off, f16 and q8_0 KV, every expert on the CPU with op offload
    on and off, --n-cpu-moe, everything on the GPU."""
    ub = {c.n_ubatch for c in CUDA_CASES}
    assert {512, 2048, 4096} <= ub
    assert {c.flash_attn for c in CUDA_CASES} == {True, False}
    assert {c.type_k for c in CUDA_CASES} == {"f16", "q8_0"}
    cpu_moe = [c for c in CUDA_CASES if c.override == "exps=CPU"]
    assert {c.op_offload for c in cpu_moe} == {True, False}
    assert any(c.n_cpu_moe for c in CUDA_CASES)
    assert any(not c.override and not c.n_cpu_moe for c in CUDA_CASES)
    for c in CUDA_CASES:  # a full-ubatch prompt must fit the context
        assert c.n_ctx >= c.n_ubatch + 8 and max(c.n_batch, c.n_ubatch) >= c.n_ubatch


BIN = os.environ.get("MOEPLAN_LLAMA_BIN", "")


@pytest.mark.skipif(not (BIN and (Path(BIN) / "llama-server").exists()), reason="set MOEPLAN_LLAMA_BIN to a llama.cpp build")
def test_live_run_reads_the_buffers(tmp_path):
    case = next(c for c in CUDA_CASES if c.name == "cpumoe-ub512")
    model = write_model("qwen3moe", tmp_path)
    r = run_case(Path(BIN) / "llama-server", model, case, timeout_s=120)
    kinds = {b["kind"] for b in r["parsed"]["buffers"]}
    assert {"model", "kv", "compute"} <= kinds
    assert r["prompt_tokens"] == case.n_ubatch + 1  # the prompt's words and BOS
    assert "-ot exps=CPU" in r["command"]
