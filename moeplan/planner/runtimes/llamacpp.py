"""Mainline llama.cpp (ggml-org/llama.cpp)."""
from moeplan.planner.options import LLAMA_BUILD_KEY
from moeplan.planner.runtimes import MAINLINE_ISA_DOT_SCALE, Backend

BACKEND = Backend(
    "llama.cpp", "llama_cpp", "llamacpp", gguf_runner=True, order=0,
    # --n-cpu-moe N: blocks 0..N-1 (common/arg.cpp llm_ffn_exps_block_regex over i < N)
    n_cpu_moe_from="first",
    # ggml-cuda.cu GGML_OP_OFFLOAD_MIN_BATCH = 32: the used experts are copied at ubatch >= 32
    op_offload_rule="mainline", windows_native=True,
    cpu_kernels="mainline", isa_dot_scale=dict(MAINLINE_ISA_DOT_SCALE),
    # GGML_SCHED_MAX_COPIES 4 (ggml/CMakeLists.txt L188, ggml-backend.cpp L772 at 0c1e570)
    sched_max_copies=4,
    options=(LLAMA_BUILD_KEY,),  # costed as that build runs (Placement.options.llama_build)
    log_tools=("llama.cpp", "llama-bench"),
)
