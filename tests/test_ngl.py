"""llama.cpp's plain layer split -ngl N (Placement.n_gpu_layers): memory split, cost terms,
CLI and launch flag. The per-device buffers against a real llama.cpp run are in
test_multi_gpu_llamacpp.py (the *-ngl* recordings)."""
from __future__ import annotations

import json

import pytest
from launch_plans import make_plan, write_models
from typer.testing import CliRunner

from moeplan.cli import app
from moeplan.launch import emit_launch
from moeplan.planner.cost.estimate import estimate
from moeplan.planner.memory.accounting import estimate_memory, kv_layer_bytes
from moeplan.planner.memory.compute_buffer import staging_bytes
from moeplan.planner.memory.devices import assign_blocks, device_memory, layer_split
from moeplan.planner.placement import Placement
from moeplan.probes.hwprofile import load_hardware
from moeplan.probes.models import resolve_model
from moeplan.profiles.backends import read_priors

RUN = CliRunner()


@pytest.fixture(scope="module")
def model():
    return resolve_model("qwen3-30b-a3b", quant="Q4_K_M")


@pytest.fixture(scope="module")
def hw():
    return load_hardware("desktop-4090-ddr5")


def _p(ngl, **kw):
    return Placement(n_gpu_layers=ngl, n_ctx=8192, n_threads=8, **kw)


def test_layer_split_is_llamacpps_rule(model):
    n = len(model.layers)  # 48 blocks; the output layer is layer 48
    assert layer_split(model, Placement()) == (frozenset(), True)
    assert layer_split(model, _p(n + 1)) == (frozenset(), True)
    # -ngl 8: the output layer counts as the last of the 8, so 7 blocks are on the GPU
    blocks, out_gpu = layer_split(model, _p(8))
    assert out_gpu and blocks == frozenset(range(n - 7))
    assert layer_split(model, _p(1)) == (frozenset(range(n)), True)
    assert layer_split(model, _p(0)) == (frozenset(range(n)), False)
    assert layer_split(model, Placement(n_gpus=0)) == (frozenset(range(n)), False)
    devs, out = assign_blocks(n, (1.0,), 8)
    assert devs.count(-1) == n - 7 and out == 0


def test_memory_moves_from_vram_to_host_block_by_block(model):
    full = estimate_memory(model, _p(None))
    n = len(model.layers)
    prev = None
    for ngl in (n + 1, 40, 24, 8, 1):
        mem = estimate_memory(model, _p(ngl))
        blocks, _ = layer_split(model, _p(ngl))
        cpu_layers = [layer for layer in model.layers if layer.index in blocks]
        # weights and KV of the CPU blocks are host bytes, exactly
        assert mem.get("weights_dense_cpu") == sum(layer.resident_bytes for layer in cpu_layers)
        assert mem.get("weights_experts_cpu") == sum(layer.expert_bytes for layer in cpu_layers)
        kv_cpu = sum(kv_layer_bytes(layer, 8192) for layer in cpu_layers)
        assert mem.get("kv_cache_cpu") == kv_cpu
        assert mem.get("kv_cache") + kv_cpu == full.get("kv_cache")
        gpu_weights = mem.get("weights_dense") + mem.get("weights_experts")
        assert gpu_weights + mem.get("weights_dense_cpu") + mem.get("weights_experts_cpu") == \
            full.get("weights_dense") + full.get("weights_experts")
        if prev is not None:
            assert mem.vram_bytes < prev.vram_bytes and mem.ram_bytes > prev.ram_bytes
        prev = mem
    # -ngl 0: nothing but the compute buffer and the context on the GPU; the output on the CPU
    zero = estimate_memory(model, _p(0))
    assert zero.get("weights_dense") == 0 and zero.get("weights_experts") == 0 and zero.get("kv_cache") == 0
    out = sum(t.n_bytes for t in model.globals if t.group != "embed")
    assert zero.get("weights_dense_cpu") == full.get("weights_dense")
    assert estimate_memory(model, _p(1)).get("weights_dense") == out
    # the CPU compute buffer grows when blocks run on the CPU
    assert estimate_memory(model, _p(8)).get("compute_cpu") > full.get("compute_cpu")
    # op-offload stages the CPU blocks' weights in the GPU compute buffer at ubatch >= 32
    blocks, _ = layer_split(model, _p(8))
    largest = max(t.n_bytes for layer in model.layers if layer.index in blocks for t in layer.tensors)
    assert staging_bytes(model, _p(8), 32) == largest
    assert staging_bytes(model, _p(8, op_offload=False), 32) == 0 == staging_bytes(model, _p(None), 32)
    assert estimate_memory(model, _p(8)).get("compute") >= full.get("compute")


def test_cpu_moe_layers_of_gpu_blocks_stay_counted(model):
    blocks, _ = layer_split(model, _p(20))
    gpu_moe = [i for i in model.moe_layer_indices if i not in blocks]
    mem = estimate_memory(model, _p(20, cpu_moe_layers=tuple(gpu_moe[:3])))
    base = estimate_memory(model, _p(20))
    moved = sum(layer.expert_bytes for layer in model.layers if layer.index in gpu_moe[:3])
    assert mem.get("weights_experts_cpu") - base.get("weights_experts_cpu") == moved
    assert base.get("weights_experts") - mem.get("weights_experts") == moved


def test_two_gpus_split_only_the_gpu_layers(model):
    p = _p(20, n_gpus=2)
    devs = device_memory(model, p, (1.0, 1.0), context_bytes=0, margin_bytes=0)
    n = len(model.layers)
    assert [len(d.blocks) for d in devs] == [10, 9] and devs[1].output and not devs[0].output
    assert min(devs[0].blocks) == n - 19
    mem = estimate_memory(model, p)
    assert sum(d.weights_dense_bytes + d.weights_experts_bytes for d in devs) == \
        mem.get("weights_dense") + mem.get("weights_experts")


def _terms(e, kind="decode"):
    return {t.name: t.seconds for t in (e.decode_terms if kind == "decode" else e.prefill_terms)}


def test_cost_terms_present_and_monotone(model, hw):
    pr = read_priors("llama.cpp")
    n = len(model.layers)
    decode, prefill = [], []
    for ngl in (n + 1, 36, 24, 12, 1):
        e = estimate(model, _p(ngl), hw, pr, depth=4096, n_prompt=4096)
        d = _terms(e)
        if ngl <= n:
            for name in ("cpu_blocks_read", "cpu_blocks_attention", "cpu_blocks_barriers", "split_hop",
                         "cpu_experts_read"):
                assert d[name] > 0, name
            pt = _terms(e, "prefill")
            assert pt["h2d_cpu_blocks"] > 0 and pt["cpu_blocks_attention"] > 0
            assert "sync" not in d  # whole CPU blocks have no per-layer GPU<->CPU hand-over
        else:
            assert "cpu_blocks_read" not in d
        decode.append(e.decode_tok_s)
        prefill.append(e.prefill_tok_s)
    assert decode == sorted(decode, reverse=True), decode
    assert prefill == sorted(prefill, reverse=True), prefill
    # below GGML_OP_OFFLOAD_MIN_BATCH the CPU multiplies its blocks' weights itself
    e = estimate(model, _p(12), hw, pr, n_prompt=16)
    pt = _terms(e, "prefill")
    assert "cpu_blocks_matmul" in pt and "h2d_cpu_blocks" not in pt


def test_ngl_zero_decodes_like_cpu_only(model, hw):
    pr = read_priors("llama.cpp")
    a = estimate(model, _p(0), hw, pr, depth=1024)
    b = estimate(model, _p(None, n_gpus=0), hw, pr, depth=1024)
    assert a.decode_tok_s == pytest.approx(b.decode_tok_s, rel=0.02)


@pytest.mark.parametrize("args, words", [
    (["--ngl", "-1"], "--ngl -1 is below 0"),
    (["--ngl", "8", "--backend", "ktransformers"], "no plain layer split"),
    (["--ngl", "8", "--cpu-only"], "CPU-only run"),
    (["--ngl", "20", "--cpu-layers", "3-5"], "already keeps entirely on the CPU"),
    (["--ngl", "20", "--cpu-moe-layers", "25"], "on the GPU with --ngl 20"),
])
def test_bad_ngl_is_one_line_with_a_hint(args, words):
    out = RUN.invoke(app, ["estimate", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", *args])
    assert out.exit_code == 2, out.output
    lines = [x for x in out.output.strip().splitlines() if x.strip()]
    assert len(lines) == 2 and lines[0].startswith("error:") and lines[1].startswith("hint:"), lines
    assert words in " ".join(lines)


def test_estimate_cli_ngl(model):
    out = RUN.invoke(app, ["estimate", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--ngl", "20",
                           "--cpu-moe-layers", "2", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    p = Placement.from_dict(doc["placement"])
    blocks, _ = layer_split(model, p)
    assert p.n_gpu_layers == 20 and len(blocks) == len(model.layers) - 19
    # llama.cpp's --n-cpu-moe 2 among the GPU blocks: their first two MoE layers
    assert p.cpu_moe_layers == tuple(i for i in model.moe_layer_indices if i not in blocks)[:2]
    # more than every layer is every layer: the default placement
    out = RUN.invoke(app, ["estimate", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--ngl", "999", "--json"])
    assert Placement.from_dict(json.loads(out.stdout)["placement"]).n_gpu_layers is None


def test_tune_keeps_a_fixed_ngl(tmp_path):
    out = RUN.invoke(app, ["tune", "qwen3-30b-a3b", "--hw", "desktop-3060-ddr4", "--ngl", "30",
                           "--emit", str(tmp_path / "o"), "--json"])
    assert out.exit_code == 0, out.output
    plan = json.loads((tmp_path / "o" / "plan.json").read_text())
    assert plan["placement"]["n_gpu_layers"] == 30
    assert all(i >= 48 - 29 for i in plan["placement"]["cpu_moe_layers"])
    assert "    -ngl 30 \\" in (tmp_path / "o" / "launch.sh").read_text()
    # the plan file reads back with its -ngl (emit re-checks the placement)
    out = RUN.invoke(app, ["emit", str(tmp_path / "o" / "plan.json"), "--out", str(tmp_path / "again")])
    assert out.exit_code == 0, out.output
    assert "    -ngl 30 \\" in (tmp_path / "again" / "launch.sh").read_text()


def test_plans_without_ngl_do_not_carry_the_field():
    from moeplan.planner.serde import to_jsonable

    assert "n_gpu_layers" not in to_jsonable(Placement()) and "n_gpu_layers" not in Placement().to_dict()
    assert to_jsonable(Placement(n_gpu_layers=0))["n_gpu_layers"] == 0


@pytest.mark.parametrize("backend", ["llama.cpp", "ik_llama.cpp"])
def test_launch_emits_ngl(tmp_path, backend):
    m = write_models(tmp_path)["qwen3moe"]
    for ngl, want in ((None, str(len(m.layers) + 1)), (3, "3"), (0, "0")):
        launch = emit_launch(make_plan(m, Placement(backend=backend, n_gpu_layers=ngl)), m, backend)
        found = [part[1] for s in launch.scripts for part in s.command.parts if part[0] == "-ngl"]
        assert found and set(found) == {want}, (ngl, found)
