"""What moeplan knows about one runtime, as one record: the Backend strategy.

Every runtime has its own module here (llamacpp.py, ikllama.py, ...) holding `BACKEND =
Backend(...)`: what the planner, the cost model, the memory accounting, the launchers and the
log checker ask of it. planner/backends.py finds the modules (the registry); no other module
names a backend. Adding a backend is a module here, its [section] of priors in
profiles/backends.toml, its emitter under launch/ (named by `emitter`) and their tests
(README: "Adding a backend").

This package stays pure data: the cost model reads the flags, it does not import back.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# ggml's batch-1 dot kernels on each ISA class against the anchor (AVX-512 VNNI) for
# mainline llama.cpp, the table a runtime without its own uses (cost/machine.py ISA_DOT_SCALE)
MAINLINE_ISA_DOT_SCALE = {"neon": 0.7, "avx2": 0.75, "avx_vnni": 1.0, "avx512f": 0.8, "avx512_vnni": 1.0,
                          "amx": 1.0}


@dataclass(frozen=True)
class Backend:
    """A runtime moeplan plans for: its priors, launch-file emitter and the rules the planner applies to it."""

    name: str
    priors_key: str          # its [section] in profiles/backends.toml
    emitter: str             # module under moeplan.launch that writes its launch files ('' = none)
    gguf_runner: bool        # runs GGUF files with llama.cpp's programs (llama-server, -bench, ...)
    n_cpu_moe_from: str      # which MoE blocks its "N layers of experts on the CPU" flag takes: "first" | "last"
    op_offload_rule: str     # how its prefill moves CPU experts' work to the GPU: "mainline" | "ik"
    windows_native: bool     # has a native Windows build (launch.ps1 / launch.cmd are written)
    order: int = 99          # place in --backend's list and in tables
    cli_label: str = ""      # how --help lists it ("" = the name)
    no_archs: tuple[tuple[str, str], ...] = ()  # (llama.cpp architecture, why it cannot run it)
    needs_gpu: bool = False  # modelled as its CUDA build: its CPU offload streams weights to a GPU
    module: str = ""         # its own module (set by the registry)
    # -- the cost model
    cpu_kernels: str = "gemm"  # CPU matmul/attention kernel family: "mainline" (ggml), "iqk", "gemm"
    isa_dot_scale: dict[str, float] = field(default_factory=lambda: dict(MAINLINE_ISA_DOT_SCALE))
    spinning_worker_pools: bool = False  # CPU experts on spinning worker pools (cost/machine.py kt_threads)
    layerwise_gpu_prefill: bool = False  # long prompts upload every CPU layer's experts (cost/prefill_path.py)
    tensor_parallel_gpus: bool = False  # several GPUs compute every layer together, not one after another
    interleaved_types_stay_on_cpu: bool = False  # its CUDA backend does not multiply some repacked types
    mapped_buffer_named_cpu: bool = False  # its log names an mmap'ed model buffer plain "CPU" (check/placement.py)
    mla_expanded_prompt: bool = False  # expands MLA heads for prompt batches (attention.IK_MLA_PP_MIN_TOKENS)
    computes_mla_kv_b: bool = False  # builds attn_kv_b at load for an MLA GGUF without it (memory/devices.py)
    # where its CUDA flash attention puts the F16 copies of a quantized cache (memory/cuda_runtime.py):
    # "compute" = in the FA output's allocation (mainline), "pool" = the CUDA memory pool (ik_llama.cpp)
    cuda_fa_kv_copies: str = "compute"
    default_batch: int = 2048  # logical batch of a plan without -b
    sched_max_copies: int = 1  # GGML_SCHED_MAX_COPIES: input copies under pipeline parallelism (memory/compute_buffer.py)
    # -- plan options it takes (planner/options.py OPTION_KEYS), and which it refuses
    options: tuple[str, ...] = ()
    # -- the launchers and the log checker
    server_program: str = "python"  # program of a non-GGUF runtime's server
    help_marker: str = ""  # a flag its --help lists that tells it apart from the runtimes it shares programs with
    log_tools: tuple[str, ...] = ()  # check/parse.py tool names of its logs
    log_program: str = ""  # the program a log of this runtime ran ("" = the log says)

    @property
    def label(self) -> str:
        return self.cli_label or self.name

    def takes(self, option: str) -> bool:
        """Whether a plan for this backend may carry the option (a PlanOptions field name)."""
        return option in self.options

    def unsupported_reason(self, arch: str) -> str:
        return dict(self.no_archs).get(arch, "")
