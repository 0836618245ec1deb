"""What each backend emits for a plan, and what it refuses to emit."""
from __future__ import annotations

import pytest
from launch_plans import make_plan, write_models

from moeplan.errors import InfeasibleError, InputError
from moeplan.launch import emit_launch
from moeplan.launch.benchjson import check_bench_overrides, parse_bench_json
from moeplan.launch.gpumem import gpu_need
from moeplan.launch.ikllama import op_offload_min_ubatch
from moeplan.launch.ktransformers import gpu_experts_per_layer
from moeplan.planner.options import PlanOptions
from moeplan.planner.placement import Placement

GIB = 1024**3


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return write_models(tmp_path_factory.mktemp("models"))


def argv_of(launch, script="launch.sh"):
    return list(launch.script(script).command.argv)


def value(argv, flag):
    return argv[argv.index(flag) + 1]


# ---- llama.cpp -----------------------------------------------------------------------------

def test_llama_cpp_server_command(models):
    m = models["deepseek2"]  # 9 blocks in the file: 8 trunk + 1 NextN
    p = Placement(cpu_moe_layers=(2, 3, 4), n_ctx=32768, cache_type_k="q8_0", cache_type_v="q8_0", n_threads=32,
                  n_threads_batch=64, n_ubatch=2048, n_batch=4096, numa="bind", numa_nodes=(1,), load_mode="no-mmap")
    launch = emit_launch(make_plan(m, p), m, "llama.cpp", model_path="/m/model.gguf")
    cmd = launch.script("launch.sh").command
    argv = list(cmd.argv)
    assert cmd.prefix == ("numactl", "--cpunodebind=1", "--membind=1")
    assert value(argv, "-ngl") == "10"  # 9 blocks + output
    assert value(argv, "-ot") == r"^blk\.(2|3|4)\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU"
    assert argv.count("-ot") == 1
    expect = {"-fit": "off", "-c": "32768", "-fa": "on", "-ctk": "q8_0", "-ctv": "q8_0", "-t": "32", "-tb": "64",
              "-b": "4096", "-ub": "2048", "--numa": "numactl", "-lm": "none", "-np": "1"}
    assert {f: value(argv, f) for f in expect} == expect
    assert "--no-op-offload" not in argv and "-ts" not in argv and "--spec-type" not in argv
    assert launch.bench_overrides == value(argv, "-ot")


def test_llama_cpp_bench_joins_overrides_and_measures_the_plans_depth(models):
    m = models["qwen3moe"]
    from launch_plans import ESTIMATE

    from moeplan.planner.plan import Estimate
    est = Estimate(**{**ESTIMATE.__dict__, "depth": 4096})
    p = Placement(cpu_moe_layers=(0, 1, 2, 3, 4, 5), n_ubatch=1024, op_offload=False, n_gpus=2,
                  options=PlanOptions(tensor_split="3,1"))
    launch = emit_launch(make_plan(m, p, est), m, "llama.cpp", model_path="/m.gguf")
    bench = argv_of(launch, "bench.sh")
    assert value(bench, "-ot").endswith("=CPU") and "," not in value(bench, "-ot")
    assert value(bench, "-p") == "1024" and value(bench, "-d") == "4096" and value(bench, "-o") == "json"
    assert value(bench, "-nopo") == "1" and value(bench, "-ts") == "3/1"  # ',' would start a second test
    server = argv_of(launch)
    assert "--no-op-offload" in server and value(server, "-ts") == "3,1"


def test_op_offload_threshold_env_only_when_the_plan_sets_it(models):
    m = models["qwen3moe"]
    plain = emit_launch(make_plan(m, Placement(cpu_moe_layers=(1,))), m, "llama.cpp", model_path="/m.gguf")
    assert plain.script("launch.sh").command.env == ()
    tuned = emit_launch(make_plan(m, Placement(cpu_moe_layers=(1,), options=PlanOptions(op_offload_min_batch="256"))),
                        m, "llama.cpp", model_path="/m.gguf")
    assert tuned.script("launch.sh").command.env == (("GGML_OP_OFFLOAD_MIN_BATCH", "256"),)


def test_speculative_flags_only_when_the_plan_drafts(models):
    m = models["deepseek2"]  # has an MTP (NextN) block
    launch = emit_launch(make_plan(m, Placement(n_draft=3, draft_accept=0.8)), m, "llama.cpp", model_path="/m.gguf")
    argv = argv_of(launch)
    assert value(argv, "--spec-type") == "draft-mtp" and value(argv, "--spec-draft-n-max") == "3"
    assert "--spec-type" not in argv_of(launch, "complete.sh")
    q = models["qwen3moe"]
    with pytest.raises(InputError, match="names no draft model"):
        emit_launch(make_plan(q, Placement(n_draft=3)), q, "llama.cpp", model_path="/m.gguf")
    drafted = emit_launch(make_plan(q, Placement(n_draft=3, options=PlanOptions(draft_model="/d/s.gguf"))), q,
                          "llama.cpp", model_path="/m.gguf")
    assert value(argv_of(drafted), "--spec-type") == "draft-simple" and value(argv_of(drafted), "-md") == "/d/s.gguf"


def test_numa_policies_map_to_numactl_and_llama_numa(models):
    m = models["qwen3moe"]
    cases = {
        ("interleave", (0, 1)): (("numactl", "--interleave=0,1"), "distribute"),
        ("interleave", ()): (("numactl", "--interleave=all"), "distribute"),
        ("distribute", ()): ((), "distribute"),
        ("none", ()): ((), None),
    }
    for (policy, nodes), (prefix, numa) in cases.items():
        launch = emit_launch(make_plan(m, Placement(numa=policy, numa_nodes=nodes)), m, "llama.cpp", model_path="/m")
        cmd = launch.script("launch.sh").command
        assert cmd.prefix == prefix
        assert (value(list(cmd.argv), "--numa") if "--numa" in cmd.argv else None) == numa
    with pytest.raises(InputError, match="lists none"):
        emit_launch(make_plan(m, Placement(numa="bind")), m, "llama.cpp", model_path="/m")


def test_quantized_v_cache_without_flash_attention_is_refused(models):
    m = models["qwen3moe"]
    with pytest.raises(InputError, match="needs flash attention"):
        emit_launch(make_plan(m, Placement(cache_type_v="q4_0", flash_attn=False)), m, "llama.cpp", model_path="/m")
    ok = emit_launch(make_plan(m, Placement(flash_attn=False)), m, "llama.cpp", model_path="/m")
    assert value(argv_of(ok), "-fa") == "off"


def test_llama_cpp_is_one_machine(models):
    m = models["qwen3moe"]
    with pytest.raises(InputError, match="one machine"):
        emit_launch(make_plan(m, Placement()), m, "llama.cpp", n_nodes=2, model_path="/m")


# ---- ik_llama.cpp --------------------------------------------------------------------------

def test_ik_op_offload_threshold():
    assert op_offload_min_ubatch(256, 8) == 1024  # DeepSeek V3: -ub >= 1024
    assert op_offload_min_ubatch(128, 8) == 512  # Qwen3-235B
    assert op_offload_min_ubatch(8, 2) == 128


def test_ik_says_what_its_threshold_means_for_the_plan(models):
    m = models["qwen3moe"]  # 8 experts, k = 2: offload from -ub 128
    below = emit_launch(make_plan(m, Placement(cpu_moe_layers=(1,), n_ubatch=64)), m, "ik_llama.cpp", model_path="/m")
    assert any("from -ub 128" in n and "computes the CPU experts on the CPU" in n for n in below.notes)
    above = emit_launch(make_plan(m, Placement(cpu_moe_layers=(1,), n_ubatch=512)), m, "ik_llama.cpp", model_path="/m")
    assert any("copies the used CPU experts to the GPU" in n for n in above.notes)
    assert "-op" not in argv_of(above)
    # no offload wanted above the threshold: -op -1,0 (every ggml op) in the server and the CLI
    off = emit_launch(make_plan(m, Placement(cpu_moe_layers=(1,), n_ubatch=512, op_offload=False)), m,
                      "ik_llama.cpp", model_path="/m")
    assert value(argv_of(off), "-op") == "-1,0" and value(argv_of(off, "complete.sh"), "-op") == "-1,0"
    assert "-op" not in argv_of(off, "bench.sh")  # llama-bench has no -op: said in a note
    assert any("bench.sh measures prefill with offload" in n for n in off.notes)
    ok = emit_launch(make_plan(m, Placement(cpu_moe_layers=(1,), n_ubatch=64, op_offload=False)), m, "ik_llama.cpp",
                     model_path="/m")
    assert "--no-op-offload" not in argv_of(ok) and "-op" not in argv_of(ok)
    with pytest.raises(InputError, match="GGML_OP_OFFLOAD_MIN_BATCH") as err:
        emit_launch(make_plan(m, Placement(cpu_moe_layers=(1,), options=PlanOptions(op_offload_min_batch="64"))), m,
                    "ik_llama.cpp", model_path="/m")
    assert "offload-batch-size" in err.value.hint


def test_ik_never_emits_ncmoe_and_no_mmap_is_not_rtr(models):
    m = models["gpt-oss"]
    launch = emit_launch(make_plan(m, Placement(cpu_moe_layers=(4, 5), load_mode="no-mmap")), m, "ik_llama.cpp",
                         model_path="/m")
    argv = argv_of(launch)
    assert "-ncmoe" not in argv and "--n-cpu-moe" not in argv
    # ik 8337e4cd3: fused MoE is the default (only -no-fmoe exists), -fa takes a value
    # --no-mmap, not -rtr: repacked (interleaved) types lose ik's converted int8 GEMM in prefill
    assert "--no-mmap" in argv and "-rtr" not in argv and value(argv_of(launch, "bench.sh"), "-rtr") == "0"
    assert value(argv_of(launch, "bench.sh"), "-mmp") == "0"
    assert "-fmoe" not in argv and "-mla" not in argv  # gpt-oss is not MLA
    assert value(argv, "-fa") == "on" and "-amb" not in argv
    assert value(argv_of(launch, "bench.sh"), "-fmoe") == "1"
    assert any("not -rtr" in n for n in launch.notes)
    mapped = emit_launch(make_plan(m, Placement(cpu_moe_layers=(4, 5))), m, "ik_llama.cpp", model_path="/m")
    assert "-rtr" not in argv_of(mapped) and value(argv_of(mapped, "bench.sh"), "-rtr") == "0"
    no_fa = emit_launch(make_plan(m, Placement(cpu_moe_layers=(4, 5), flash_attn=False)), m, "ik_llama.cpp",
                        model_path="/m")
    assert value(argv_of(no_fa), "-fa") == "off" and value(argv_of(no_fa, "bench.sh"), "-fa") == "0"


def test_ik_emits_rtr_only_when_the_plan_asks_for_it(models):
    m = models["gpt-oss"]
    p = Placement(cpu_moe_layers=(4, 5), load_mode="no-mmap", options=PlanOptions(rtr=True))
    launch = emit_launch(make_plan(m, p), m, "ik_llama.cpp", model_path="/m")
    argv = argv_of(launch)
    assert "-rtr" in argv and "--no-mmap" not in argv
    assert value(argv_of(launch, "bench.sh"), "-rtr") == "1" and value(argv_of(launch, "bench.sh"), "-mmp") == "0"
    assert not any("not -rtr" in n for n in launch.notes)


def test_ik_bench_joins_overrides_with_commas(models):
    """ik's llama-bench splits one -ot on ',' (mainline's on ';') and reports them in
    `override_tensor`, joined by ','."""
    m = models["qwen3moe"]
    launch = emit_launch(make_plan(m, Placement(cpu_moe_layers=(0, 2, 4))), m, "ik_llama.cpp", model_path="/m")
    ot = value(argv_of(launch, "bench.sh"), "-ot")
    assert ";" not in ot and ot == ",".join(v for v in argv_of(launch)[1:] if v.endswith("=CPU"))
    assert any('"override_tensor": ' in line for line in launch.script("bench.sh").after)


def test_ik_drafting(models):
    d = models["deepseek2"]  # has an MTP block
    mtp = emit_launch(make_plan(d, Placement(n_draft=2)), d, "ik_llama.cpp", model_path="/m")
    assert value(argv_of(mtp), "--spec-type") == "mtp:n_max=2" and "--draft" not in argv_of(mtp)
    q = models["qwen3moe"]
    draft = emit_launch(make_plan(q, Placement(n_draft=3, options=PlanOptions(draft_model="/d.gguf"))), q, "ik_llama.cpp",
                        model_path="/m")
    assert value(argv_of(draft), "--spec-type") == "draft:n_max=3" and value(argv_of(draft), "-md") == "/d.gguf"
    with pytest.raises(InputError, match="names no draft model"):
        emit_launch(make_plan(q, Placement(n_draft=3)), q, "ik_llama.cpp", model_path="/m")


# ---- KTransformers -------------------------------------------------------------------------

def test_kt_gpu_experts_spend_the_plans_gpu_expert_bytes(models):
    m = models["qwen3moe"]  # 6 MoE layers x 8 experts
    from moeplan.launch import release_programs
    from moeplan.launch.common import EmitContext

    def g_of(p):
        ctx = EmitContext(plan=make_plan(m, p), model=m, flags=release_programs("ktransformers").flags,
                          programs={"server": "python"})
        return gpu_experts_per_layer(ctx)

    assert g_of(Placement(cpu_moe_layers=m.moe_layer_indices)) == (0, 0)
    assert g_of(Placement(cpu_moe_layers=())) == (8, 48)
    assert g_of(Placement(cpu_moe_layers=(0, 1, 2))) == (4, 24)  # half the layers' bytes = 4 of 8 per layer
    one_expert = m.moe_layers[0].expert_bytes // 8
    assert g_of(Placement(cpu_moe_layers=m.moe_layer_indices, gpu_expert_cache_bytes=6 * one_expert)) == (1, 6)


def test_kt_command(models):
    m = models["deepseek2"]
    p = Placement(backend="ktransformers", cpu_moe_layers=m.moe_layer_indices[:3], n_ctx=16384, n_threads=64,
                  numa="bind", numa_nodes=(0, 1), n_batch=4096, n_seq=2)
    launch = emit_launch(make_plan(m, p), m, "ktransformers", gpu_vram_bytes=48 * GIB)
    cmd = launch.script("launch.sh").command
    argv = list(cmd.argv)
    assert argv[:3] == ["python", "-m", "sglang.launch_server"]
    assert value(argv, "--kt-method") == "LLAMAFILE" and value(argv, "--kt-cpuinfer") == "64"
    assert value(argv, "--kt-weight-path") == str(__import__("pathlib").Path(m.path).parent)
    assert value(argv, "--kt-threadpool-count") == "2" and value(argv, "--kt-num-gpu-experts") == "4"
    assert value(argv, "--kt-max-deferred-experts-per-token") == "0"
    assert value(argv, "--mem-fraction-static") == "0.38"  # 18 GiB of 48 GiB, rounded up
    assert value(argv, "--max-total-tokens") == "16384" and value(argv, "--context-length") == "8192"
    assert value(argv, "--max-running-requests") == "2" and value(argv, "--chunked-prefill-size") == "4096"
    assert str(value(argv, "--model-path")) == "${MODEL}"  # a GGUF plan: SGLang loads the HF checkpoint
    assert cmd.prefix == ("numactl", "--cpunodebind=0,1", "--membind=0,1")
    with pytest.raises(InfeasibleError):
        emit_launch(make_plan(m, p), m, "ktransformers", gpu_vram_bytes=16 * GIB)
    unknown = emit_launch(make_plan(m, p), m, "ktransformers")
    assert "--mem-fraction-static" not in argv_of(unknown)
    assert any("--mem-fraction-static left to SGLang" in n for n in unknown.notes)


# ---- vLLM and SGLang -----------------------------------------------------------------------

def test_vllm_refuses_cpu_experts_without_knowing_the_gpu(models):
    m = models["qwen3moe"]
    plan = make_plan(m, Placement(cpu_moe_layers=(1, 2)))
    with pytest.raises(InputError, match="cannot compute routed experts on the CPU") as err:
        emit_launch(plan, m, "vllm")
    assert "--gpu-vram" in err.value.hint and "ktransformers" in err.value.hint
    with pytest.raises(InputError, match="KTransformers integration"):
        emit_launch(plan, m, "sglang")


def test_vllm_single_node_tp_ep(models):
    m = models["qwen3moe"]
    launch = emit_launch(make_plan(m, Placement(n_gpus=4, n_ctx=65536, n_seq=8, cache_type_k="q8_0",
                                                cache_type_v="q8_0")), m, "vllm", gpu_vram_bytes=80 * GIB)
    argv = argv_of(launch)
    assert argv[:2] == ["vllm", "serve"] and str(argv[2]) == "${MODEL}"
    assert value(argv, "--tensor-parallel-size") == "4" and "--enable-expert-parallel" in argv
    assert "--pipeline-parallel-size" not in argv and value(argv, "--kv-cache-dtype") == "fp8"
    assert value(argv, "--max-model-len") == "8192" and value(argv, "--max-num-seqs") == "8"
    yaml = launch.configs[0].text
    assert "tensor-parallel-size: 4" in yaml and "enable-expert-parallel: true" in yaml
    assert any("per-GPU memory" in n for n in launch.notes)


def test_vllm_multi_node_uses_ray_and_pipeline_parallel(models):
    m = models["qwen3moe"]
    launch = emit_launch(make_plan(m, Placement(n_gpus=8)), m, "vllm", n_nodes=2, gpu_vram_bytes=80 * GIB)
    argv = argv_of(launch)
    assert value(argv, "--pipeline-parallel-size") == "2" and value(argv, "--distributed-executor-backend") == "ray"
    assert argv_of(launch, "ray-head.sh") == ["ray", "start", "--head", "--port=6379"]
    worker = launch.script("ray-worker.sh")
    assert [str(t) for t in worker.command.argv] == ["ray", "start", "--address", "${HEAD_ADDR}:6379", "--block"]
    assert worker.requires[0][0] == "HEAD_ADDR"


def test_sglang_multi_node_scripts_per_rank(models):
    m = models["qwen3moe"]
    launch = emit_launch(make_plan(m, Placement(n_gpus=8)), m, "sglang", n_nodes=3, gpu_vram_bytes=80 * GIB)
    names = [s.name for s in launch.scripts]
    assert names == ["launch.sh", "launch-node1.sh", "launch-node2.sh", "bench.sh"]
    for rank, name in enumerate(names[:3]):
        argv = argv_of(launch, name)
        assert value(argv, "--node-rank") == str(rank) and value(argv, "--nnodes") == "3"
        assert value(argv, "--tp-size") == "24" and value(argv, "--ep-size") == "24"
        assert str(value(argv, "--dist-init-addr")) == "${HEAD_ADDR}:5000"


def test_model_too_big_for_the_gpus_says_how_many_nodes(models):
    m = models["qwen3moe"]
    # a checkpoint of 200 kB per parameter makes the tiny model a ~90 GB one
    p = Placement(n_gpus=1, n_ctx=4096, options=PlanOptions(hf_bytes_per_param="200000"))
    need = gpu_need(m, p, 1, 1, 200000.0)
    assert need.weights_bytes == sum(t.n_elements for t in m.tensors) * 200000
    # per GPU: W/N + KV/N + 2 GiB <= 0.90 * 40 GiB  ->  the smallest such N
    n = next(n for n in range(1, 10) if need.weights_bytes / n + need.kv_bytes / n + 2 * GIB <= 0.9 * 40 * GIB)
    assert n > 1
    with pytest.raises(InfeasibleError) as err:
        emit_launch(make_plan(m, p), m, "vllm", gpu_vram_bytes=40 * GIB, n_nodes=n - 1)
    assert f"--nodes {n}" in err.value.hint
    ok = emit_launch(make_plan(m, p), m, "vllm", gpu_vram_bytes=40 * GIB, n_nodes=n)
    assert value(argv_of(ok), "--pipeline-parallel-size") == str(n)


def test_cpu_plan_on_vllm_is_emitted_only_when_the_gpus_hold_everything(models):
    m = models["qwen3moe"]
    launch = emit_launch(make_plan(m, Placement(cpu_moe_layers=(1, 2), n_gpus=2)), m, "vllm", n_nodes=2,
                         gpu_vram_bytes=80 * GIB)
    assert any("CPU expert layers are dropped" in n for n in launch.notes)
    assert launch.placement_text.startswith("every expert on the GPUs (4")


def test_gpu_need_splits_weights_and_replicates_mla_cache(models):
    q, d = models["qwen3moe"], models["deepseek2"]
    p = Placement(n_ctx=65536)
    one, four = gpu_need(q, p, 1, 1), gpu_need(q, p, 4, 1)
    assert four.per_gpu_bytes - 2 * GIB == one.weights_bytes // 4 + one.kv_bytes // 4
    md = gpu_need(d, p, 4, 1)
    assert md.per_gpu_bytes - 2 * GIB == md.weights_bytes // 4 + md.kv_bytes  # MLA latent on every rank


# ---- llama-bench JSON ----------------------------------------------------------------------

def test_bench_json_with_leading_error_text_and_jsonl():
    text = ("error: unrecognized buffer type 'CUDA0'\nAvailable buffer types:\n  CPU\n[\n"
            '  {"tensor_buft_overrides": "none", "avg_ts": 3.5},\n  {"tensor_buft_overrides": "none"}\n]\n')
    recs = parse_bench_json(text)
    assert len(recs) == 2
    assert check_bench_overrides(recs, "x=CPU")[0].startswith("test 0 ran with tensor_buft_overrides='none'")
    assert check_bench_overrides(recs, "none") == ()
    jsonl = '{"tensor_buft_overrides": "a=CPU"}\n{"tensor_buft_overrides": "a=CPU"}\n'
    assert check_bench_overrides(parse_bench_json(jsonl), "a=CPU") == ()
    assert check_bench_overrides([{"avg_ts": 1}], "a=CPU")[0].endswith("(an older llama-bench?)")
    from moeplan.errors import RunnerError
    with pytest.raises(RunnerError):
        parse_bench_json("segfault\n")
    with pytest.raises(RunnerError):
        parse_bench_json("[\n  {\"a\": 1},\n")


def test_experts_per_token_override(models):
    m = models["qwen3moe"]  # k = 2
    plan = make_plan(m, Placement(cpu_moe_layers=(1,), n_experts_used=1))
    launch = emit_launch(plan, m, "llama.cpp", model_path="/m")
    assert value(argv_of(launch), "--override-kv") == "qwen3moe.expert_used_count=int:1"
    assert value(argv_of(launch, "complete.sh"), "--override-kv") == "qwen3moe.expert_used_count=int:1"
    assert "--override-kv" not in argv_of(launch, "bench.sh")  # llama-bench has no --override-kv
    assert any("measures the model's own k" in n for n in launch.notes)
    assert value(argv_of(emit_launch(plan, m, "ik_llama.cpp", model_path="/m")), "--override-kv").endswith("int:1")
    same = emit_launch(make_plan(m, Placement(n_experts_used=2)), m, "llama.cpp", model_path="/m")
    assert "--override-kv" not in argv_of(same)
    for backend in ("vllm", "sglang", "ktransformers"):
        with pytest.raises(InputError, match="experts per token"):
            emit_launch(make_plan(m, Placement(n_experts_used=1)), m, backend, gpu_vram_bytes=80 * GIB)


def test_preview_command_is_one_line_or_says_why_not(models):
    from moeplan.launch import preview_command

    m = models["qwen3moe"]
    line = preview_command(make_plan(m, Placement(cpu_moe_layers=(1, 2))), m)
    assert line.startswith("llama-server -m ") and "\n" not in line and "-ot " in line
    refused = preview_command(make_plan(m, Placement(cpu_moe_layers=(1, 2))), m, "vllm")
    assert refused.startswith("# no vllm command: ")


def test_kt_reads_a_native_checkpoint_with_its_own_method():
    """A plan on a native checkpoint: kt-kernel's native-precision method for its expert dtype, the
    weights from the --model-path folder; a GGUF-quant plan of the same model keeps AMXINT4."""
    from moeplan.profiles.model_profiles import load_profile

    for name, quant, method in (("kimi-k2-thinking", "native", "RAWINT4"), ("kimi-k2.5", "native", "RAWINT4"),
                                ("deepseek-v3", "native", "FP8"), ("qwen3-30b-a3b", "native", "BF16"),
                                ("qwen3-30b-a3b", "FP8", "FP8")):
        m = load_profile(name, quant)
        p = Placement(backend="ktransformers", cpu_moe_layers=m.moe_layer_indices, n_ctx=8192, n_threads=32)
        launch = emit_launch(make_plan(m, p), m, "ktransformers", gpu_vram_bytes=96 * GIB)
        argv = argv_of(launch)
        assert value(argv, "--kt-method") == method, name
        assert str(value(argv, "--kt-weight-path")) == str(value(argv, "--model-path")) == "${MODEL}"
        assert any(f"--kt-method {method}" in n for n in launch.notes)
    m = load_profile("kimi-k2-thinking", "Q4_K_M")
    p = Placement(backend="ktransformers", cpu_moe_layers=m.moe_layer_indices, n_ctx=8192, n_threads=32)
    assert value(argv_of(emit_launch(make_plan(m, p), m, "ktransformers", gpu_vram_bytes=96 * GIB)),
                 "--kt-method") == "AMXINT4"
