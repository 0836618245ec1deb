"""Several GPUs: llama.cpp's block assignment, per-device VRAM, the split tune chooses, the
pipeline decode, mixed cards in `moeplan hardware`, and the emitted -ts."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
from model_builders import GIB, toy_hw, toy_model, unit_priors
from typer.testing import CliRunner

from moeplan.cli import app
from moeplan.planner.cost.estimate import estimate
from moeplan.planner.memory.accounting import MemoryConstants, estimate_memory
from moeplan.planner.memory.devices import (
    assign_blocks,
    counts_from_assignment,
    fit_split,
    format_tensor_split,
    split_points,
)
from moeplan.planner.options import PlanOptions
from moeplan.planner.placement import Placement
from moeplan.planner.search import Request, choose_plan, gpu_budgets
from moeplan.planner.serde import to_jsonable

RUN = CliRunner()
MODEL = toy_model(n_layers=12, n_experts=16, k=4, n_embd=2048, n_ff_exp=1024, n_dense_lead=1)
PRIORS = unit_priors(s_sync_s=100e-6, t_token_s=1e-3, eta_gpu=0.8, eta_cpu=0.7, core_read_share=2.5)
CONSTS = MemoryConstants()


def multi_hw(vram_gib=(4.0, 4.0), bw=(1000e9, 1000e9), h2d=(25e9, 25e9)):
    base = toy_hw(vram_gib=vram_gib[0], ram_gib=64)
    g0 = base.gpus[0]
    gpus = tuple(replace(g0, index=i, vram_bytes=int(v * GIB), mem_bw_bytes_per_s=replace(g0.mem_bw_bytes_per_s, value=b),
                         h2d_bytes_per_s=replace(g0.h2d_bytes_per_s, value=h))
                 for i, (v, b, h) in enumerate(zip(vram_gib, bw, h2d)))
    return replace(base, gpus=gpus)


# ---- llama.cpp's assignment rule ------------------------------------------------------------

def test_even_split_follows_upper_bound_of_the_cumulative_split():
    # 10 blocks + output over 2 devices: block il goes to the first device whose cumulative
    # share exceeds il / 11, so 0..5 (5/11 < 0.5) on device 0 and 6..9 + output on device 1
    devs, out = assign_blocks(10, [1, 1])
    assert devs == (0,) * 6 + (1,) * 4 and out == 1
    assert split_points([1, 1, 1]) == pytest.approx([1 / 3, 2 / 3, 1.0])


@pytest.mark.parametrize("counts", [(5, 6), (1, 10), (4, 4, 3), (0, 7, 4), (3, 0, 0, 8), (11, 0)])
def test_whole_block_counts_are_exact(counts):
    devs, out = assign_blocks(10, counts)
    assert counts_from_assignment(devs, out, len(counts)) == tuple(counts)
    # contiguous, in device order
    assert list(devs) == sorted(devs)


def test_fewer_gpu_layers_leave_the_first_blocks_on_the_cpu():
    devs, out = assign_blocks(10, [1, 1], n_gpu_layers=5)  # i_gpu_start = 6
    assert devs[:6] == (-1,) * 6 and set(devs[6:]) <= {0, 1} and out == 1


# ---- per-device memory ----------------------------------------------------------------------

def test_devices_add_up_to_the_single_gpu_weights_and_kv():
    p = Placement(n_ctx=8192, cpu_moe_layers=(1, 2, 3), n_gpus=1)
    one = estimate_memory(MODEL, p, CONSTS)
    multi = estimate_memory(MODEL, p.with_(n_gpus=3, options=PlanOptions(tensor_split="4,5,4")), CONSTS)
    devs = multi.devices
    assert [len(d.blocks) for d in devs] == [4, 5, 3] and devs[-1].output
    assert sum(d.weights_dense_bytes + d.weights_experts_bytes for d in devs) == \
        one.get("weights_dense") + one.get("weights_experts")
    assert sum(d.kv_bytes for d in devs) == one.get("kv_cache")
    # a context and a margin on every device; logits only on the last; staging only on the first
    assert multi.margin_bytes == 3 * one.margin_bytes
    assert multi.get("cuda_context") == 3 * one.get("cuda_context")
    assert devs[0].compute_bytes >= devs[1].compute_bytes
    assert list(multi.vram_bytes_per_gpu) == [d.vram_bytes for d in devs]
    assert "per_gpu" in multi.to_dict() and "per_gpu" not in one.to_dict()


def test_kv_of_a_block_is_on_its_device():
    p = Placement(n_ctx=32768, n_gpus=2, options=PlanOptions(tensor_split="12,1"))  # blocks 0-11 on GPU0
    devs = estimate_memory(MODEL, p, CONSTS).devices
    assert devs[1].blocks == () and devs[1].kv_bytes == 0 and devs[1].output
    assert devs[0].kv_bytes == estimate_memory(MODEL, p.with_(n_gpus=1), CONSTS).get("kv_cache")


def test_fit_split_fits_every_device_and_covers_every_block():
    p = Placement(n_ctx=4096, cpu_moe_layers=(1, 2, 3, 4), n_gpus=3)
    budgets = (int(3.0 * GIB), int(2.5 * GIB), int(3.0 * GIB))
    counts = fit_split(MODEL, p, budgets, CONSTS.cuda_context_bytes, CONSTS.margin_bytes)
    assert counts is not None and sum(counts) == len(MODEL.layers) + 1
    devs = estimate_memory(MODEL, p.with_(options=PlanOptions(tensor_split=format_tensor_split(counts))), CONSTS).devices
    for d, b in zip(devs, budgets):
        assert d.vram_required_bytes <= b
    # nothing fits on 1 GiB cards (the margin alone)
    assert fit_split(MODEL, p, (GIB, GIB, GIB), CONSTS.cuda_context_bytes, CONSTS.margin_bytes) is None


# ---- the search -----------------------------------------------------------------------------

def test_tune_fits_every_gpu_and_uses_more_experts_than_one_gpu():
    hw2 = multi_hw((3.0, 3.0))
    req = Request(n_ctx=4096, kv_types=("f16",), ubatches=(512,))
    r = choose_plan(MODEL, hw2, PRIORS, req)
    p = r.best.placement
    assert p.n_gpus == 2 and p.options.tensor_split
    per = [to_jsonable(g) for g in r.best.estimate.memory.per_gpu]
    for g, budget in zip(per, gpu_budgets(hw2, 6 * GIB)):
        assert g["vram_required_bytes"] <= budget == g["budget_bytes"]
    one = choose_plan(MODEL, toy_hw(vram_gib=3.0), PRIORS, req).best.placement
    assert len(p.cpu_moe_layers) < len(one.cpu_moe_layers)


def test_pooled_vram_is_an_upper_bound_of_the_split():
    # the same 6 GiB as one card holds at least as many experts: two contexts, two margins
    req = Request(n_ctx=4096, kv_types=("f16",), ubatches=(512,))
    two = choose_plan(MODEL, multi_hw((3.0, 3.0)), PRIORS, req).best
    pooled = choose_plan(MODEL, toy_hw(vram_gib=6.0), PRIORS, req).best
    assert len(pooled.placement.cpu_moe_layers) <= len(two.placement.cpu_moe_layers)
    assert pooled.estimate.decode_tok_s >= two.estimate.decode_tok_s


def test_pipeline_decode_reads_each_device_at_its_own_bandwidth():
    p = Placement(n_ctx=4096, n_gpus=2, options=PlanOptions(tensor_split="6,7"))
    fast = estimate(MODEL, p, multi_hw((24, 24), bw=(1000e9, 1000e9)), PRIORS)
    slow = estimate(MODEL, p, multi_hw((24, 24), bw=(1000e9, 250e9)), PRIORS)
    t = {x.name: x.seconds for x in fast.decode_terms}
    ts = {x.name: x.seconds for x in slow.decode_terms}
    assert ts["gpu_weights_read"] > t["gpu_weights_read"] * 1.5
    assert t["device_hops"] > 0
    # a narrow link on one card slows the hop, not the weight reads
    narrow = estimate(MODEL, p, multi_hw((24, 24), h2d=(25e9, 0.25e9)), PRIORS)
    tn = {x.name: x.seconds for x in narrow.decode_terms}
    assert tn["device_hops"] > t["device_hops"] and tn["gpu_weights_read"] == pytest.approx(t["gpu_weights_read"])


# ---- the CLI ----------------------------------------------------------------------------------

def _json(args):
    out = RUN.invoke(app, args)
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_hardware_takes_mixed_cards_counts_and_links(tmp_path):
    d = _json(["hardware", "--gpu", "RTX 5090", "--gpu", "RTX 4090:2", "--gpu", "RTX 3090@3x4",
               "--cpu", "Ryzen 9 9900X", "--ram", "192G", "--json"])
    names = [g["name"] for g in d["gpus"]]
    assert len(names) == 4 and "5090" in names[0] and "4090" in names[1] and "4090" in names[2] and "3090" in names[3]
    assert (d["gpus"][3]["pcie_gen"], d["gpus"][3]["pcie_width"]) == (3, 4)
    assert d["gpus"][0]["vram_bytes"] == 32 * GIB and d["gpus"][1]["vram_bytes"] == 24 * GIB
    same = _json(["hardware", "--gpu", "RTX 3090:4", "--cpu", "Ryzen 9 9900X", "--ram", "192G", "--json"])
    assert len(same["gpus"]) == 4 and "more_gpus" not in same["spec_inputs"]
    bad = RUN.invoke(app, ["hardware", "--gpu", "RTX 3090:2", "--gpu-count", "3", "--cpu", "Ryzen 9 9900X",
                           "--ram", "192G"])
    assert bad.exit_code == 2 and "--gpu-count" in bad.output


def test_issue_example_4x3090_glm52_fits_every_gpu(tmp_path):
    hw = tmp_path / "hw.json"
    r = RUN.invoke(app, ["hardware", "--gpu", "RTX 3090", "--gpu-count", "4", "--cpu", "Ryzen 9 9900X",
                         "--ram", "192G", "--out", str(hw)])
    assert r.exit_code == 0, r.output
    plan = _json(["tune", "glm-5.2", "--size", "223GB", "--hw", str(hw), "--ctx", "32k", "--json"])["plan"]
    per = plan["estimate"]["memory"]["per_gpu"]
    assert len(per) == 4
    for g in per:
        assert g["vram_required_bytes"] <= g["budget_bytes"] == 24 * GIB
    ts = plan["placement"]["options"]["tensor_split"]
    # the emitted command carries that split and the estimate reproduces the plan's devices
    run = tmp_path / "run"
    out = RUN.invoke(app, ["tune", "glm-5.2", "--size", "223GB", "--hw", str(hw), "--ctx", "32k", "--emit", str(run)])
    assert out.exit_code == 0, out.output
    launch = (run / "launch.sh").read_text()
    assert f"-ts {ts}" in launch
    est = _json(["estimate", "glm-5.2", "--size", "223GB", "--hw", str(hw), "--ctx", "32k", "--ts", ts,
                 "--cpu-layers", ",".join(str(i) for i in plan["placement"]["cpu_moe_layers"]),
                 "--ubatch", str(plan["placement"]["n_ubatch"]), "--json"])
    assert len(est["vram_bytes_per_gpu"]) == 4
    assert est["vram_bytes_per_gpu"] == [g["vram_bytes"] for g in per]


def test_gpus_subset_emits_dev(tmp_path):
    hw = tmp_path / "hw.json"
    RUN.invoke(app, ["hardware", "--gpu", "RTX 3090", "--gpu-count", "4", "--cpu", "Ryzen 9 9900X", "--ram", "192G",
                     "--out", str(hw)])
    d = _json(["estimate", "qwen3-30b-a3b", "--hw", str(hw), "--gpus", "1,3", "--json"])
    assert len(d["vram_bytes_per_gpu"]) == 2 and d["placement"]["options"]["devices"] == "CUDA1,CUDA3"
    bad = RUN.invoke(app, ["estimate", "qwen3-30b-a3b", "--hw", str(hw), "--gpus", "5"])
    assert bad.exit_code == 2


def test_ktransformers_prefills_tensor_parallel_not_one_device_after_another():
    """SGLang --tp-size n (launch/ktransformers.py): each GPU computes 1/n of every layer at once,
    where llama.cpp's layer split runs the devices one after another; the layer-wise upload of the
    CPU experts is costed over one link either way."""
    m, hw = toy_model(), multi_hw(vram_gib=(24.0, 24.0))
    p = Placement(n_ctx=4096, n_gpus=2, cpu_moe_layers=(0, 1, 2, 3), n_threads=16, n_batch=4096,
                  options=PlanOptions(tensor_split="1,1", kt_gpu_prefill_token_threshold=1))
    terms = {}
    for name in ("llama.cpp", "ktransformers"):
        pr = unit_priors(name=name, op_offload="never" if name == "ktransformers" else "mainline")
        e = estimate(m, p.with_(backend=name), hw, pr, n_prompt=4096)
        terms[name] = {t.name: t for t in e.prefill_terms}
    kt, lc = terms["ktransformers"], terms["llama.cpp"]
    assert "tensor-parallel over 2 GPUs" in kt["gpu_matmul"].formula and "device_hops" not in kt
    assert kt["gpu_matmul"].seconds == pytest.approx(lc["gpu_matmul"].seconds / 2, rel=0.05)
