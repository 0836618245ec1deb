"""SGLang: `python -m sglang.launch_server` on one node (tensor + expert parallel) or on N
identical nodes with SGLang's own multi-node launch (--nnodes, --node-rank, --dist-init-addr).

Flags target SGLANG_RELEASE: the `--help` of sglang 0.5.23's launch_server and bench_serving,
recorded in tests/data/help/sglang-0.5.23 (tests/test_launch_help.py checks the tables below
and every emitted flag and choice against it); with --bin (the python that has sglang) its
own `--help` decides. KTransformers (ktransformers.py) runs through
the same launcher and reuses the token limits here.

SGLang computes every expert on a GPU; CPU expert offload with SGLang is the KTransformers
integration (--backend ktransformers). See gpumem.check_gpu_fit.
"""
from __future__ import annotations

from moeplan.launch.common import Command, EmitContext, Launch, Script, ShellVar, require_flags
from moeplan.launch.flags import FlagSet, release_table, target_text
from moeplan.launch.gpumem import gpu_backend_notes
from moeplan.launch.vllm import model_arg

SGLANG_RELEASE = "SGLang 0.5.23 (the --help of its launch_server and bench_serving)"
MEM_FRACTION_STATIC = 0.85  # weights + KV pool; the rest is left for activations and CUDA graphs
PORT = 30000
DIST_PORT = 5000
LAUNCHER = ("-m", "sglang.launch_server")
NO_SGLANG = "no sglang found: pass --bin the python that has it"

_SERVER = {
    "--model-path": "MODEL_PATH", "--tp-size": "TP_SIZE", "--ep-size": "EP_SIZE", "--nnodes": "NNODES",
    "--node-rank": "NODE_RANK", "--dist-init-addr": "DIST_INIT_ADDR", "--context-length": "CONTEXT_LENGTH",
    "--max-running-requests": "MAX_RUNNING_REQUESTS", "--max-total-tokens": "MAX_TOTAL_TOKENS",
    "--chunked-prefill-size": "CHUNKED_PREFILL_SIZE", "--mem-fraction-static": "MEM_FRACTION_STATIC",
    "--kv-cache-dtype": "{auto,fp8_e5m2,fp8_e4m3,mxfp8,bf16,bfloat16,nvfp4,fp4_mx_block16}",
    "--trust-remote-code": "",
    "--served-model-name": "SERVED_MODEL_NAME", "--port": "PORT",
}
_BENCH = {"--backend": "{sglang,sglang-native,sglang-oai,sglang-oai-chat,sglang-embedding,vllm,vllm-chat,"
                      "vllm-embedding,lmdeploy,lmdeploy-chat,trt,gserver,truss}", "--port": "PORT",
          "--dataset-name": "{agentic-trace,sharegpt,custom,openai,random,random-ids,generated-shared-prefix,mmmu,"
                            "image,mooncake,longbench_v2,speed-bench}",
          "--random-input-len": "RANDOM_INPUT_LEN", "--random-output-len": "RANDOM_OUTPUT_LEN",
          "--num-prompts": "NUM_PROMPTS"}


def release_flags(server_extra: dict[str, str] | None = None, release: str = SGLANG_RELEASE) -> dict[str, FlagSet]:
    return release_table(release, {"server": ("python -m sglang.launch_server", {**_SERVER, **(server_extra or {})}),
                                   "bench": ("python -m sglang.bench_serving", _BENCH)})


def kv_dtype(cache_type: str) -> tuple[str, str]:
    if cache_type in ("f16", "bf16", "f32"):
        return "auto", ""
    return "fp8_e5m2", (f"SGLang has no {cache_type} KV cache; fp8_e5m2 (1 byte per element) is the nearest")


def limit_parts(ctx: EmitContext) -> list[tuple[str, ...]]:
    """Context and token limits: the plan's n_ctx is the whole cache, shared by n_seq requests."""
    p = ctx.placement
    kv, _ = kv_dtype(p.cache_type_k)
    return [("--context-length", str(p.n_ctx // max(1, p.n_seq))), ("--max-total-tokens", str(p.n_ctx)),
            ("--max-running-requests", str(p.n_seq)), ("--chunked-prefill-size", str(p.n_batch)),
            ("--kv-cache-dtype", kv)]


def bench_command(ctx: EmitContext) -> Command:
    p = ctx.placement
    return Command(parts=((ctx.programs["server"], "-m", "sglang.bench_serving"), ("--backend", "sglang"),
                          ("--port", str(PORT)), ("--dataset-name", "random"),
                          ("--random-input-len", str(max(512, p.n_ubatch))), ("--random-output-len", "128"),
                          ("--num-prompts", str(max(4, 2 * p.n_seq)))))


def emit(ctx: EmitContext) -> Launch:
    p = ctx.placement
    notes = gpu_backend_notes(ctx, "SGLang", MEM_FRACTION_STATIC, kv_dtype(p.cache_type_k)[1])
    model, requires = model_arg(ctx)
    n_total = p.n_gpus * ctx.n_nodes
    common: list[tuple[str, ...]] = [("--model-path", model), ("--tp-size", str(n_total))]
    if n_total > 1 and ctx.model.n_experts:
        common.append(("--ep-size", str(n_total)))
    common += limit_parts(ctx)
    common += [("--mem-fraction-static", f"{MEM_FRACTION_STATIC:.2f}"), ("--trust-remote-code",),
               ("--served-model-name", ctx.model.name), ("--port", str(PORT))]
    program = (ctx.programs["server"], *LAUNCHER)
    scripts: list[Script] = []
    if ctx.n_nodes == 1:
        scripts.append(Script("launch.sh", "SGLang server", Command(parts=(program, *common)), requires=requires))
    else:
        head = (("HEAD_ADDR", "the IP address of node 0 (the same on every node)"),)
        for rank in range(ctx.n_nodes):
            cmd = Command(parts=(program, *common, ("--nnodes", str(ctx.n_nodes)), ("--node-rank", str(rank)),
                                 ("--dist-init-addr", ShellVar("HEAD_ADDR", f":{DIST_PORT}"))))
            name = "launch.sh" if rank == 0 else f"launch-node{rank}.sh"
            purpose = f"SGLang node {rank} of {ctx.n_nodes}" + (" (serves HTTP)" if rank == 0 else "")
            scripts.append(Script(name, purpose, cmd, requires=requires + head))
        notes.append(f"multi-node: launch.sh on node 0 and launch-nodeN.sh on node N, all with HEAD_ADDR set to "
                     f"node 0's address; tensor parallel over all {n_total} GPUs")
    bench = bench_command(ctx)
    scripts.append(Script("bench.sh", "sglang.bench_serving against the running server", bench, exec_=False))
    for s in scripts:
        require_flags(s.command, ctx.flags["bench" if s.name == "bench.sh" else "server"], "SGLang", skip=3)
    return Launch(backend="sglang", target=target_text(ctx.flags["server"], SGLANG_RELEASE, NO_SGLANG),
                  scripts=tuple(scripts), notes=tuple(notes) + ctx.notes,
                  placement_text=f"every expert on the GPUs ({n_total} in all)")
