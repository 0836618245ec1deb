"""KTransformers (kvcache-ai/ktransformers): kt-kernel CPU experts under SGLang, or 0.2/0.3's
local_chat."""
from moeplan.planner.options import KT_GPU_EXPERTS_KEY, KT_THRESHOLD_KEY
from moeplan.planner.runtimes import Backend

KT_CHUNKED_PREFILL_TOKENS = 4096  # SGLang --chunked-prefill-size as `kt run` passes it (run.py resolve(..., 4096))

BACKEND = Backend(
    "ktransformers", "ktransformers", "ktransformers", gguf_runner=False, order=2,
    n_cpu_moe_from="first", op_offload_rule="mainline", windows_native=False,
    no_archs=(("nemotron_h_moe", "it has no NemotronH (Mamba-2 hybrid) model or injection rules"),
              ("kimi-k3", "it has no Kimi-K3 (KDA + MLA hybrid) model or injection rules "
                          "(ktransformers issue #2109, 'when will Kimi K3 be supported?', open)"),
              ("step35", "it has no Step-3.5 (step3p5) model or injection rules"),
              ("hunyuan-moe", "it has no Hunyuan-A13B (HunYuanMoEV1) model or injection rules "
                              "(ktransformers issue #1404, 'Hunyuan-A13B Support', open)"),
              ("dots1", "it has no dots.llm1 (Dots1ForCausalLM) model or injection rules"),
              ("ernie4_5-moe", "it has no ERNIE 4.5 (Ernie4_5_Moe) model or injection rules "
                               "(ktransformers/models has none)")),
    cpu_kernels="gemm",
    # kt-kernel / llamafile sgemm: AVX-512 kernels on AVX-512 parts, AVX2 otherwise; its K-quant
    # decode kernels are iqk_mul_mat's, whose 512-bit path needs VNNI (cost/machine.py)
    isa_dot_scale={"neon": 0.6, "avx2": 0.7, "avx_vnni": 0.8, "avx512f": 0.7, "avx512_vnni": 1.0, "amx": 1.0},
    spinning_worker_pools=True, layerwise_gpu_prefill=True,
    # SGLang --tp-size n (launch/ktransformers.py): every GPU computes its 1/n of every layer
    tensor_parallel_gpus=True,
    default_batch=KT_CHUNKED_PREFILL_TOKENS,
    options=(KT_THRESHOLD_KEY, KT_GPU_EXPERTS_KEY),
    help_marker="--kt-method", log_tools=("ktransformers",), log_program="ktransformers",
)
