"""SGLang: weights beyond the GPU offloaded with --cpu-offload-gb (streamed over PCIe each pass)."""
from moeplan.planner.runtimes import Backend

BACKEND = Backend(
    "sglang", "sglang", "sglang", gguf_runner=False, order=4, n_cpu_moe_from="first", op_offload_rule="mainline",
    windows_native=False, needs_gpu=True,
    log_tools=("sglang",), log_program="sglang",
)
