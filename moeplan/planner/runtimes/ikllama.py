"""ik_llama.cpp (ikawrakow/ik_llama.cpp): llama.cpp's programs with its own iqk kernels."""
from moeplan.planner.options import AMB_KEY, RTR_KEY
from moeplan.planner.runtimes import Backend

BACKEND = Backend(
    "ik_llama.cpp", "ik_llama_cpp", "ikllama", gguf_runner=True, order=1,
    # -ncmoe N: the last N MoE blocks
    n_cpu_moe_from="last",
    # offload when ubatch x k >= 32 x n_experts (ggml-cuda.cu at 8337e4cd)
    op_offload_rule="ik", windows_native=True,
    no_archs=(("nemotron_h_moe", "its loader has no nemotron_h_moe architecture "
                                 "(ik_llama.cpp issue #1075: 'unknown model architecture')"),
              ("kimi-k3", "it has no kimi-k3 architecture (ik_llama.cpp issue #2203, "
                          "'Feature Request: Kimi K3 model support', open)")),
    cpu_kernels="iqk",
    # ggml/src/iqk/iqk_mul_mat.cpp: HAVE_FANCY_SIMD (AVX512F+VNNI+VL+BW+DQ) runs 512-bit kernels
    # (x1.3 the AVX2 path on full-width AVX-512 cores), AVX2 elsewhere with its own repacked layouts
    isa_dot_scale={"neon": 0.7, "avx2": 0.8, "avx_vnni": 1.0, "avx512f": 0.9, "avx512_vnni": 1.3, "amx": 1.3},
    interleaved_types_stay_on_cpu=True, mla_expanded_prompt=True,
    # llm_prepare_mla (src/llama.cpp): a mainline MLA GGUF's attn_kv_b, computed at load on the block's device
    computes_mla_kv_b=True, cuda_fa_kv_copies="pool",
    # GGML_SCHED_MAX_COPIES 1 (ggml/CMakeLists.txt L110 at 8337e4cd): pipeline parallelism adds no copies
    mapped_buffer_named_cpu=True,  # ggml_backend_cpu_buffer_from_ptr: a "CPU" buffer, mmap or not
    # -rtr: run-time repacking (Placement.options.rtr); -amb: MLA's K*Q in head chunks (options.amb)
    options=(RTR_KEY, AMB_KEY),
    log_tools=("ik_llama.cpp",),
)
