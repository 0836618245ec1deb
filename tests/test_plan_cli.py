"""estimate and tune as a user runs them: JSON shape, determinism, goldens, bad input."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from goldens import assert_golden_file
from typer.testing import CliRunner

from moeplan.cli import app

GOLDEN = Path(__file__).parent / "golden" / "plans"
RUN = CliRunner()


def _json(args: list[str]) -> dict:
    out = RUN.invoke(app, args)
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_estimate_json_has_the_contract_keys():
    d = _json(["estimate", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--cpu-moe-layers", "10", "--json"])
    for key in ("vram_bytes", "ram_bytes", "decode_tok_s", "prefill_tok_s", "decode_tok_s_range", "bottleneck",
                "decode_terms", "prefill_terms", "placement", "memory", "factors", "moeplan_version"):
        assert key in d, key
    lo, hi = d["decode_tok_s_range"]
    assert lo < d["decode_tok_s"] < hi
    assert d["placement"]["cpu_moe_layers"] == list(range(10))
    total = sum(t["seconds"] for t in d["decode_terms"])
    assert d["decode_tok_s"] == pytest.approx(1 / total)


def test_estimate_flags_change_what_they_should():
    base = ["estimate", "deepseek-v3", "--hw", "epyc-genoa-2s-4090", "--all-cpu-moe", "--json"]
    a = _json(base)
    b = _json(base + ["--numa", "bind"])
    i = _json(base + ["--numa", "interleave"])
    # a bind reads one node locally; interleaved pages make every thread wait for remote lines
    assert b["decode_tok_s"] > i["decode_tok_s"]
    assert "node 0" in b["factors"]["bw_cpu_bytes_per_s"]["note"]
    assert "no NUMA policy" in a["factors"]["bw_cpu_bytes_per_s"]["note"]
    c = _json(base + ["--kv-type", "q8_0", "--ctx", "32k"])
    d = _json(base + ["--ctx", "32k"])
    assert c["vram_bytes"] < d["vram_bytes"]
    e = _json(base + ["--depth", "16384"])
    assert e["decode_tok_s"] < a["decode_tok_s"]


def test_k_and_v_cache_types_and_flash_attention_apart():
    """llama.cpp -ctk q8_0 -ctv f16 -fa off (ik_llama.cpp discussion 357's mainline run): the K
    cache shrinks alone, and without flash attention the KQ matrix of a ubatch joins the compute
    buffer (n_kv x n_ubatch x n_head F32)."""
    base = ["estimate", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--quant", "Q4_K_M", "--all-cpu-moe",
            "--ctx", "32k", "--json"]
    f16, k8, k8v16 = _json(base), _json(base + ["--kv-type", "q8_0"]), _json(base + ["--kv-type", "q8_0",
                                                                                  "--kv-type-v", "f16"])
    kv = {n: next(i["bytes"] for i in d["memory"]["items"] if i["name"] == "kv_cache")
          for n, d in (("f16", f16), ("q8", k8), ("k8v16", k8v16))}
    assert kv["q8"] < kv["k8v16"] < kv["f16"]
    assert kv["k8v16"] - kv["q8"] == pytest.approx(kv["f16"] - kv["k8v16"], rel=0.15)  # K and V rows alike
    assert (k8v16["placement"]["cache_type_k"], k8v16["placement"]["cache_type_v"]) == ("q8_0", "f16")
    nofa = _json(base + ["--kv-type", "q8_0", "--kv-type-v", "f16", "--no-flash-attn"])
    assert nofa["placement"]["flash_attn"] is False
    gpu_cb = {n: next(i["bytes"] for i in d["memory"]["items"] if i["name"] == "compute")
              for n, d in (("fa", k8v16), ("nofa", nofa))}
    kq = 32 * 32768 * 512 * 4  # Qwen3-30B: 32 q heads x 32768 cells x ubatch 512, F32
    assert gpu_cb["fa"] < kq < gpu_cb["nofa"]


def test_kt_prefill_threshold_switches_the_layer_wise_gpu_prefill():
    base = ["estimate", "deepseek-v3", "--hw", "epyc-genoa-2s-4090", "--backend", "ktransformers", "--all-cpu-moe",
            "--prompt", "8000", "--json"]
    default = _json(base)  # the computed crossover: an 8000-token prompt uploads the CPU layers' experts
    off = _json(base + ["--kt-prefill-threshold", "0"])  # KTransformers 0.2/0.3: the CPU experts always
    assert "h2d_experts" in {t["name"] for t in default["prefill_terms"]}
    assert "h2d_experts" not in {t["name"] for t in off["prefill_terms"]}
    assert off["prefill_tok_s"] < default["prefill_tok_s"]
    assert off["placement"]["options"] == {"kt_gpu_prefill_token_threshold": 0}
    for bad, words in ((["--backend", "ktransformers", "--kt-prefill-threshold", "-5"], "is negative"),
                       (["--backend", "llama.cpp", "--kt-prefill-threshold", "100"], "KTransformers setting")):
        out = RUN.invoke(app, base[:2] + ["--hw", "epyc-genoa-2s-4090"] + bad)
        assert out.exit_code != 0 and words in out.output


def test_llama_build_costs_an_older_builds_cpu_attention():
    base = ["estimate", "qwen3-30b-a3b", "--hw", "epyc-genoa-2s-4090", "--cpu-only", "--depth", "8192", "--json"]
    cur, old = _json(base), _json(base + ["--llama-build", "6263"])
    assert old["placement"]["options"] == {"llama_build": 6263}
    assert old["decode_tok_s"] < cur["decode_tok_s"]
    assert "row-parallel" in next(t["formula"] for t in old["decode_terms"] if t["name"] == "cpu_attention")


def test_rtr_costs_ik_prefill_on_the_interleaved_kernels():
    base = ["estimate", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--backend", "ik_llama.cpp", "--cpu-only",
            "--quant", "IQ4_XS", "--json"]
    plain, rtr = _json(base), _json(base + ["--rtr"])
    assert rtr["placement"]["options"] == {"rtr": True} and rtr["placement"]["load_mode"] == "no-mmap"
    assert rtr["prefill_tok_s"] < 0.9 * plain["prefill_tok_s"]
    assert rtr["decode_tok_s"] == pytest.approx(plain["decode_tok_s"])
    out = RUN.invoke(app, ["estimate", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--rtr"])
    assert out.exit_code == 2 and "ik_llama.cpp's run-time repacking" in out.output


def test_rtr_keeps_experts_cuda_cannot_multiply_on_the_cpu():
    """ik_llama.cpp -rtr repacks every host tensor (src/llama.cpp: iqk_repack_tensor for each
    tensor in a host buffer); its CUDA backend multiplies only IQ1_S/IQ1_M/IQ2_K..IQ5_KS _R4 among
    the interleaved types (ggml-cuda.cu supports_op), so Q4_K experts turned Q4_K_R4 are not
    offloaded at a large batch and run on the CPU, while IQ4_K ones (IQ4_K_R4) still are."""
    base = ["estimate", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--backend", "ik_llama.cpp",
            "--cpu-moe-layers", "30", "--ubatch", "2048", "--prompt", "2048", "--json"]

    def terms(extra):
        return {t["name"]: t["formula"] for t in _json(base + extra)["prefill_terms"]}

    assert "h2d_experts" in terms(["--quant", "Q4_K_M"])
    rtr = terms(["--quant", "Q4_K_M", "--rtr"])
    assert "h2d_experts" not in rtr and "cpu_experts" in rtr
    assert "h2d_experts" in terms(["--quant", "IQ4_K", "--rtr"])


def test_tune_is_deterministic_and_fits():
    args = ["tune", "gpt-oss-120b", "--hw", "desktop-4090-ddr5", "--json"]
    a, b = RUN.invoke(app, args), RUN.invoke(app, args)
    assert a.exit_code == 0 and a.stdout == b.stdout
    plan = json.loads(a.stdout)["plan"]
    assert plan["estimate"]["vram_required_bytes"] <= 24 * 1024**3
    assert plan["pareto"] and plan["notes"]


def test_tune_what_if_vram_and_objective():
    small = _json(["tune", "glm-4.5-air", "--hw", "desktop-4090-ddr5", "--vram", "16G", "--json"])["plan"]
    big = _json(["tune", "glm-4.5-air", "--hw", "desktop-4090-ddr5", "--vram", "48G", "--json"])["plan"]
    assert len(big["placement"]["cpu_moe_layers"]) < len(small["placement"]["cpu_moe_layers"])
    assert big["estimate"]["decode_tok_s"] > small["estimate"]["decode_tok_s"]
    pp = _json(["tune", "glm-4.5-air", "--hw", "desktop-4090-ddr5", "--objective", "prefill", "--json"])["plan"]
    assert pp["objective"] == "prefill"


def test_tune_emit_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    out = RUN.invoke(app, ["tune", "qwen3-30b-a3b", "--hw", "desktop-3060-ddr4", "--emit", str(tmp_path / "run"),
                           "--plot", str(tmp_path / "p.png"), "--out", str(tmp_path / "plan.json")])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "run" / "launch.sh").exists() and (tmp_path / "run" / "plan.json").exists()
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    json.loads((tmp_path / "plan.json").read_text())


def test_infeasible_says_what_is_short():
    out = RUN.invoke(app, ["tune", "deepseek-v3", "--quant", "Q8_0", "--hw", "desktop-3060-ddr4", "--vram", "1G",
                           "--json"])
    assert out.exit_code == 5
    err = json.loads(out.stdout)["error"]
    assert "GiB" in err["message"] and err["hint"]


@pytest.mark.parametrize("args, code, words", [
    (["estimate", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--vram", "banana"], 2, "banana"),
    (["estimate", "qwen3-30b-a3bb", "--hw", "desktop-4090-ddr5"], 2, "qwen3-30b-a3b"),
    (["estimate", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--kv-type", "q9"], 2, "q9"),
    (["estimate", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--kv-type-v", "q9"], 2, "q9"),
    # llama.cpp refuses a quantized V cache without flash attention, and distinct K/V types for MLA
    (["estimate", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--kv-type", "q8_0", "--no-flash-attn"], 2,
     "needs flash attention"),
    (["estimate", "deepseek-v3", "--hw", "desktop-4090-ddr5", "--kv-type", "q8_0", "--kv-type-v", "f16"], 2,
     "cannot differ"),
    (["estimate", "deepseek-v4-flash", "--hw", "desktop-4090-ddr5", "--kv-type", "q8_0", "--kv-type-v", "f16"], 2,
     "cannot differ"),
    (["estimate", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--cpu-moe-layers", "99"], 2, "out of range"),
    (["estimate", "qwen3-30b-a3b", "--hw", "no-such-machine"], 2, "no-such-machine"),
    (["tune", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--objective", "fast"], 2, "objective"),
    (["estimate", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--llama-build", "0"], 2, "not a build number"),
    # mainline cannot load ik_llama.cpp's own types
    (["estimate", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--quant", "IQ4_KS"], 2, "ik_llama.cpp's own types"),
    (["tune", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--quant", "mix-IQ3_K", "--backend", "ktransformers"], 2,
     "ik_llama.cpp's own types"),
    (["estimate", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--backend", "ik_llama.cpp", "--llama-build", "6263"],
     2, "llama.cpp build number"),
    # vLLM / SGLang are modelled as CUDA builds: without a GPU they used to divide by zero
    (["estimate", "qwen3-30b-a3b", "--hw", "desktop-4090-ddr5", "--backend", "vllm", "--cpu-only"], 2, "needs a GPU"),
])
def test_bad_input_is_one_line_with_a_hint(args, code, words):
    out = RUN.invoke(app, args)
    assert out.exit_code == code, out.output
    lines = [x for x in out.output.strip().splitlines() if x.strip()]
    assert len(lines) == 2, lines  # one line of error, one line of hint
    assert lines[0].startswith("error:") and words in " ".join(lines)
    assert lines[1].startswith("hint:")


# ---- golden plans: bundled models on the presets --------------------------------------------

CASES = [("deepseek-v4-flash", ["--size", "151G"], "seed-rtxpro6000-2x6548y"),
         ("gpt-oss-120b", [], "desktop-4090-ddr5"),
         ("qwen3-235b-a22b", ["--quant", "Q3_K_M"], "epyc-genoa-2s-4090"),
         ("qwen3-30b-a3b", [], "desktop-3060-ddr4"),
         ("glm-4.5-air", [], "desktop-5080-ddr5")]


def _projection(plan: dict) -> dict:
    """What a golden pins: the chosen placement and rounded figures (so a change of the cost
    model shows up here and must be looked at)."""
    e = plan["estimate"]
    return {"placement": plan["placement"], "vram_bytes": e["vram_bytes"], "ram_bytes": e["ram_bytes"],
            "decode_tok_s": float(f"{e['decode_tok_s']:.3g}"), "prefill_tok_s": float(f"{e['prefill_tok_s']:.3g}"),
            "bottleneck": e["bottleneck"]}


def golden_plan_name(model: str, hw: str) -> str:
    return f"{model}--{hw}.json"


def golden_plan_text(model: str, extra: list[str], hw: str) -> str:
    plan = _json(["tune", model, *extra, "--hw", hw, "--objective", "decode", "--min-ctx", "4096", "--json"])["plan"]
    return json.dumps(_projection(plan), indent=2, sort_keys=True) + "\n"


@pytest.mark.parametrize("model, extra, hw", CASES)
def test_golden_plans(model, extra, hw):
    assert_golden_file(GOLDEN / golden_plan_name(model, hw), golden_plan_text(model, extra, hw))


def test_golden_plans_folder_holds_exactly_the_cases():
    assert {p.name for p in GOLDEN.iterdir()} == {golden_plan_name(m, hw) for m, _, hw in CASES}


def test_cpu_only_machine_plans_and_emits_without_gpu_layers(tmp_path):
    from dataclasses import replace

    from moeplan.probes.hwprofile import load_hardware

    hw = replace(load_hardware("desktop-4090-ddr5"), gpus=(), name="no gpu")
    (tmp_path / "hw.json").write_text(json.dumps(hw.to_dict()))
    out = RUN.invoke(app, ["tune", "qwen3-30b-a3b", "--hw", str(tmp_path / "hw.json"), "--emit", str(tmp_path / "run")])
    assert out.exit_code == 0, out.output
    script = (tmp_path / "run" / "launch.sh").read_text()
    assert "-ngl 0" in script and "-ot" not in script
    # a GPU-only backend on that machine: a one-line refusal, not a division by zero
    out = RUN.invoke(app, ["tune", "qwen3-30b-a3b", "--hw", str(tmp_path / "hw.json"), "--backend", "sglang"])
    assert out.exit_code == 2 and "needs a GPU" in out.output, out.output


def test_a_hugging_face_repository_id_names_its_bundled_profile():
    d = _json(["estimate", "Qwen/Qwen3.5-35B-A3B", "--hw", "desktop-4090-ddr5", "--json"])
    assert d["model"]["name"] == "Qwen3.5-35B-A3B" and d["model"]["source"] == "profile"
    out = RUN.invoke(app, ["estimate", "Foo/Bar", "--hw", "desktop-4090-ddr5"])
    assert out.exit_code != 0 and "no such file" in out.output and "moeplan models" in out.output


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_gpu_only_backends_plan_on_a_two_node_machine(backend):
    # their CPU reads nothing (eta_cpu 0): the NUMA policies the search tries must not divide by it
    plan = _json(["tune", "qwen3-30b-a3b", "--hw", "epyc-genoa-2s-4090", "--backend", backend, "--json"])["plan"]
    assert plan["placement"]["cpu_moe_layers"] == [] and plan["estimate"]["decode_tok_s"] > 0
