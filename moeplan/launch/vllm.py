"""vLLM: `vllm serve` on one node (tensor + expert parallel) or on N identical nodes (Ray).

Flags target VLLM_RELEASE below: the `--help=all` of vllm 0.33.0's `vllm serve` and `vllm bench
serve`, recorded in tests/data/help/vllm-0.33.0 (tests/test_launch_help.py checks the tables
and every emitted flag and choice against it); with a vllm on PATH or given with --bin, its
own `vllm serve --help=all` decides.

  one node   --tensor-parallel-size G [--enable-expert-parallel]
  N nodes    --tensor-parallel-size G --pipeline-parallel-size N --distributed-executor-backend ray,
             after `ray start --head` on the head and `ray start --address HEAD:6379` on the others
             (vLLM's advice: tensor parallel inside a node, pipeline parallel across nodes)
vLLM computes every expert on a GPU; see gpumem.check_gpu_fit for what happens to a plan that
keeps experts on the CPU. vllm.yaml holds the same settings for `vllm serve MODEL --config`.
"""
from __future__ import annotations

from moeplan.launch.common import Command, ConfigFile, EmitContext, Launch, Script, ShellVar, require_flags
from moeplan.launch.flags import FlagSet, release_table, target_text
from moeplan.launch.gpumem import gpu_backend_notes

VLLM_RELEASE = "vLLM 0.33.0 (the --help=all of vllm serve and vllm bench serve)"
GPU_MEMORY_UTILIZATION = 0.90  # vLLM's default, stated so the memory check and the run agree
PORT = 8000
RAY_PORT = 6379

KV_CACHE_DTYPES = ("['auto', 'bfloat16', 'float16', 'fp8', 'fp8_ds_mla', 'fp8_e4m3', 'fp8_e5m2', 'fp8_inc', "
                   "'fp8_per_token_head', 'int4_per_token_head', 'int8_per_token_head', 'nvfp4', "
                   "'nvfp4_4over6', 'nvfp4_ds_mla', 'octave_k3v3', 'octave_k3v3_compact', 'octave_k3v4', "
                   "'turboquant_3bit_nc', 'turboquant_4bit_nc', 'turboquant_k3v4_nc', 'turboquant_k8v4', "
                   "'ultraquant_4bit']")  # as vllm 0.33.0 prints the choices
_SERVE = {
    "--tensor-parallel-size": "TENSOR_PARALLEL_SIZE", "--pipeline-parallel-size": "PIPELINE_PARALLEL_SIZE",
    "--enable-expert-parallel": "", "--max-model-len": "MAX_MODEL_LEN", "--max-num-seqs": "MAX_NUM_SEQS",
    "--max-num-batched-tokens": "MAX_NUM_BATCHED_TOKENS", "--gpu-memory-utilization": "GPU_MEMORY_UTILIZATION",
    "--kv-cache-dtype": KV_CACHE_DTYPES, "--distributed-executor-backend": "['external_launcher', 'mp', 'ray', 'uni']",
    "--trust-remote-code": "", "--served-model-name": "SERVED_MODEL_NAME [SERVED_MODEL_NAME ...]", "--port": "PORT",
    "--config": "CONFIG",
}
_BENCH = {"--model": "MODEL", "--port": "PORT",
          "--dataset-name": "{sharegpt,burstgpt,random,random-mm,random-rerank,hf,custom,custom_audio,custom_image,"
                            "prefix_repetition,spec_bench,speed_bench,timed_trace}",
          "--random-input-len": "RANDOM_INPUT_LEN", "--random-output-len": "RANDOM_OUTPUT_LEN",
          "--num-prompts": "NUM_PROMPTS"}


def release_flags() -> dict[str, FlagSet]:
    return release_table(VLLM_RELEASE, {"server": ("vllm serve", _SERVE), "bench": ("vllm bench serve", _BENCH)})


def kv_dtype(cache_type: str) -> tuple[str, str]:
    """vLLM's --kv-cache-dtype for a llama.cpp cache type, and a note when it is not the same."""
    if cache_type in ("f16", "bf16", "f32"):
        return "auto", ""
    return "fp8", (f"vLLM has no {cache_type} KV cache; fp8 (1 byte per element) is the nearest, "
                   "so the KV figure differs a little from the plan's")


def model_arg(ctx: EmitContext) -> tuple[str, tuple[tuple[str, str], ...]]:
    """vLLM and SGLang serve a Hugging Face checkpoint: the plan's folder, or MODEL for a GGUF plan."""
    if ctx.model.source == "hf" and ctx.model.path:
        return ctx.model.path, ()
    return ShellVar("MODEL"), (("MODEL", f"the Hugging Face checkpoint of {ctx.model.name} (a folder or hub id)"),)


def serve_settings(ctx: EmitContext) -> list[tuple[str, str | None]]:
    """(long flag, value or None for a switch), in the order they are emitted."""
    p = ctx.placement
    kv, _ = kv_dtype(p.cache_type_k)
    out: list[tuple[str, str | None]] = [("--tensor-parallel-size", str(p.n_gpus))]
    if ctx.n_nodes > 1:
        out.append(("--pipeline-parallel-size", str(ctx.n_nodes)))
        out.append(("--distributed-executor-backend", "ray"))
    if p.n_gpus * ctx.n_nodes > 1 and ctx.model.n_experts:
        out.append(("--enable-expert-parallel", None))
    # the plan's n_ctx is the whole cache, shared by n_seq sequences (llama.cpp -c with -np)
    out += [("--max-model-len", str(p.n_ctx // max(1, p.n_seq))), ("--max-num-seqs", str(p.n_seq)),
            ("--max-num-batched-tokens", str(p.n_batch)),
            ("--gpu-memory-utilization", f"{GPU_MEMORY_UTILIZATION:.2f}"), ("--kv-cache-dtype", kv),
            ("--trust-remote-code", None), ("--served-model-name", ctx.model.name), ("--port", str(PORT))]
    return out


def _yaml_scalar(v: str | None) -> str:
    if v is None:
        return "true"
    if v.replace(".", "", 1).isdigit():
        return v
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


def config_yaml(settings: list[tuple[str, str | None]]) -> str:
    lines = ["# the settings of launch.sh, for `vllm serve MODEL --config vllm.yaml`"]
    lines += [f"{flag[2:]}: {_yaml_scalar(v)}" for flag, v in settings]
    return "\n".join(lines) + "\n"


def emit(ctx: EmitContext) -> Launch:
    p = ctx.placement
    notes = gpu_backend_notes(ctx, "vLLM", GPU_MEMORY_UTILIZATION, kv_dtype(p.cache_type_k)[1])
    model, requires = model_arg(ctx)
    settings = serve_settings(ctx)
    serve = Command(parts=((ctx.programs["server"], "serve"), (model,),
                           *[(f,) if v is None else (f, v) for f, v in settings]))
    bench = Command(parts=((ctx.programs["server"], "bench", "serve"), ("--model", model), ("--port", str(PORT)),
                           ("--dataset-name", "random"), ("--random-input-len", str(max(512, p.n_ubatch))),
                           ("--random-output-len", "128"), ("--num-prompts", str(max(4, 2 * p.n_seq)))))
    require_flags(serve, ctx.flags["server"], "vLLM")
    require_flags(bench, ctx.flags["bench"], "vLLM")
    scripts = [Script("launch.sh", "vLLM server" + (" (run on the head node after the Ray cluster is up)"
                                                    if ctx.n_nodes > 1 else ""), serve, requires=requires),
               Script("bench.sh", "vllm bench serve against the running server", bench, exec_=False,
                      requires=requires)]
    if ctx.n_nodes > 1:
        scripts.append(Script("ray-head.sh", "start the Ray head (run first, on the head node)",
                              Command(parts=(("ray", "start", "--head"), (f"--port={RAY_PORT}",))), exec_=False))
        scripts.append(Script(
            "ray-worker.sh", f"join the Ray cluster (run on each of the other {ctx.n_nodes - 1} node(s))",
            Command(parts=(("ray", "start"), ("--address", ShellVar("HEAD_ADDR", f":{RAY_PORT}")), ("--block",))),
            requires=(("HEAD_ADDR", "the IP address of the head node"),)))
        notes.append(f"multi-node: ray-head.sh on the head, ray-worker.sh on the {ctx.n_nodes - 1} other "
                     "node(s) (identical machines, same model path), then launch.sh on the head")
    target = target_text(ctx.flags["server"], VLLM_RELEASE, "no vllm found: pass --bin to check your install")
    return Launch(backend="vllm", target=target, scripts=tuple(scripts),
                  configs=(ConfigFile("vllm.yaml", config_yaml(settings), "the same settings as a vLLM config"),),
                  notes=tuple(notes) + ctx.notes,
                  placement_text=f"every expert on the GPUs ({p.n_gpus * ctx.n_nodes} in all)")
