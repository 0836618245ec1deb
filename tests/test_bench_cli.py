"""`moeplan bench` through the CLI: JSON keys, tables, --plan, errors."""
from __future__ import annotations

import json

import pytest
from gguf_fixtures import write_deepseek2, write_qwen3moe
from typer.testing import CliRunner

from moeplan.cli import app
from moeplan.planner.placement import Placement
from moeplan.planner.plan import Estimate, ModelRef, Plan
from moeplan.probes.gguf_model import read_gguf_model

runner = CliRunner()
FAST = ["--prompt", "16", "--ubatch", "16", "--tokens", "4", "--warmup", "1", "--ctx", "256", "--threads", "1"]
KEYS = {"decode_tok_s", "prefill_tok_s", "decode_s_per_token_by_tier", "bytes_per_token_by_tier",
        "model_bytes_per_token_by_tier", "cache_hit_rate", "peak_vram_bytes", "peak_rss_bytes", "sampled_layers",
        "extrapolated", "placement", "executor", "model", "notes", "memory_plan", "moeplan_version"}


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    return str(write_deepseek2(tmp_path_factory.mktemp("cli") / "d.gguf", n_layer=5, expert_type=__import__(
        "gguf").GGMLQuantizationType.Q8_0, n_embd=128)[0])


def _json(args):
    res = runner.invoke(app, ["bench", *args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_bench_json_has_stable_keys(gguf):
    r = _json([gguf, "--cpu-moe-layers", "2", "--cache-experts", "4", "--routing", "zipf:1.1", *FAST])
    assert set(r) >= KEYS
    assert r["placement"]["cpu_moe_layers"] == [1, 2]  # llama.cpp rule: the first 2 MoE blocks
    assert r["decode_tok_s"] > 0 and r["prefill_tok_s"] > 0
    assert set(r["decode_s_per_token_by_tier"]) == {"gpu", "cpu", "mmap", "transfer"}
    assert r["bytes_per_token_by_tier"]["gpu_cache"] > 0 and 0 <= r["cache_hit_rate"] <= 1
    assert r["executor"]["device"] == "cpu" and r["peak_vram_bytes"] is None
    assert r["extrapolated"] is False and r["sampled_layers"] is None and r["peak_rss_bytes"] > 0
    total = sum(r["decode_s_per_token_by_tier"].values())
    assert total == pytest.approx(r["decode_s_per_token"]) and r["decode_tok_s"] == pytest.approx(1 / total)


def test_bench_table_and_sampling(gguf):
    res = runner.invoke(app, ["bench", gguf, "--all-cpu-moe", "--sample-layers", "1", "--dtype", "fp32", *FAST])
    assert res.exit_code == 0, res.output
    for text in ("decode (tok/s)", "tok/s", "MiB", "GiB", "extrapolated", "sampled:"):
        assert text in res.stdout


def test_bench_with_plan_file(gguf, tmp_path):
    model = read_gguf_model(gguf)
    placement = Placement(cpu_moe_layers=(3, 4), n_ctx=256, n_ubatch=16, n_threads=1)
    est = Estimate(decode_tok_s=12.5, decode_tok_s_range=(10, 15), prefill_tok_s=300.0, prefill_tok_s_range=(200, 400),
                   decode_terms=(), prefill_terms=(), bottleneck="cpu-mem", prefill_bottleneck="pcie",
                   vram_bytes=1, vram_required_bytes=1, ram_bytes=1)
    ref = ModelRef(model.name, model.arch, "gguf", gguf, model.quant, model.digest(), model.file_bytes)
    plan = Plan(model=ref, hardware_name="test", hardware_digest="x", placement=placement, estimate=est)
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    r = _json([gguf, "--plan", str(path), "--prompt", "16", "--tokens", "3", "--warmup", "0"])
    assert r["placement"]["cpu_moe_layers"] == [3, 4]
    assert r["plan_estimate"] == {"decode_tok_s": 12.5, "prefill_tok_s": 300.0, "runtime": "llama.cpp"}
    res = runner.invoke(app, ["bench", gguf, "--plan", str(path), "--cpu-moe-layers", "1", "--json"])
    assert res.exit_code == 2 and "either --plan or placement flags" in json.loads(res.stdout)["error"]["message"]
    (tmp_path / "junk.json").write_text("[1, 2]")
    res = runner.invoke(app, ["bench", gguf, "--plan", str(tmp_path / "junk.json")])
    assert res.exit_code == 2 and "not a moeplan plan" in " ".join(res.output.split())


@pytest.mark.parametrize("args,code,text", [
    (["--routing", "zipf:x"], 2, "Zipf exponent"),
    (["--dtype", "int3"], 2, "unknown dtype"),
    (["--cpu-experts", "sometimes"], 2, "--cpu-experts"),
    (["--cache-upload-share", "2"], 2, "not a share"),
    (["--tokens", "0"], 2, "--tokens"),
    (["--ctx", "64", "--prompt", "100"], 2, "raise --ctx"),
    (["--max-ram", "10M"], 5, "host RAM"),
    (["--weights", "gguf", "--expert-source", "mmap", "--all-cpu-moe"], 0, ""),
])
def test_bench_errors(gguf, args, code, text):
    res = runner.invoke(app, ["bench", gguf, "--prompt", "8", "--tokens", "2", "--ubatch", "8", "--threads", "1", *args])
    assert res.exit_code == code, res.output
    assert text in " ".join(res.output.split())


def test_device_cuda_without_cuda_is_a_clear_error(gguf):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    res = runner.invoke(app, ["bench", gguf, "--device", "cuda", "--json"])
    assert res.exit_code == 4
    err = json.loads(res.stdout)["error"]
    assert "--device cuda" in err["message"] and "--device cpu" in err["hint"]


def test_profile_model_needs_no_file_but_mmap_does(tmp_path):
    path = write_qwen3moe(tmp_path / "q.gguf")[0]
    res = runner.invoke(app, ["bench", str(path), "--expert-source", "mmap", "--all-cpu-moe", "--prompt", "0",
                              "--tokens", "2", "--ctx", "256", "--threads", "1", "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    assert r["bytes_per_token_by_tier"]["mmap"] > 0 and r["prefill_tok_s"] is None
