"""vLLM: weights beyond the GPU offloaded with --cpu-offload-gb (streamed over PCIe each pass)."""
from moeplan.planner.runtimes import Backend

BACKEND = Backend(
    "vllm", "vllm", "vllm", gguf_runner=False, order=3, n_cpu_moe_from="first", op_offload_rule="mainline",
    windows_native=False, needs_gpu=True,
    server_program="vllm",
)
