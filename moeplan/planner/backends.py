"""One record per runtime moeplan plans for: what the planner, the launchers and the priors need
to know about it (pure data).

Adding a backend is one `Backend(...)` entry here, its priors section in profiles/backends.toml,
its emitter module under launch/ (named by `emitter`) and their tests (README: "Adding a backend").
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    name: str
    priors_key: str          # its [section] in profiles/backends.toml
    emitter: str             # module under moeplan.launch that writes its launch files
    gguf_runner: bool        # runs GGUF files with llama.cpp's programs (llama-server, -bench, ...)
    n_cpu_moe_from: str      # which MoE blocks its "N layers of experts on the CPU" flag takes: "first" | "last"
    op_offload_rule: str     # how its prefill moves CPU experts' work to the GPU (executor/experts.py)
    windows_native: bool     # has a native Windows build (launch.ps1 / launch.cmd are written)
    cli_label: str = ""      # how --help lists it ("" = the name)
    no_archs: tuple[tuple[str, str], ...] = ()  # (llama.cpp architecture, why it cannot run it)
    needs_gpu: bool = False  # modelled as its CUDA build: its CPU offload streams weights to a GPU


BACKENDS: dict[str, Backend] = {b.name: b for b in (
    # llama.cpp --n-cpu-moe N: blocks 0..N-1 (common/arg.cpp llm_ffn_exps_block_regex over i < N)
    Backend("llama.cpp", "llama_cpp", "llamacpp", gguf_runner=True, n_cpu_moe_from="first",
            op_offload_rule="llama.cpp", windows_native=True),
    Backend("ik_llama.cpp", "ik_llama_cpp", "ikllama", gguf_runner=True, n_cpu_moe_from="last",
            op_offload_rule="ik_llama.cpp", windows_native=True,
            no_archs=(("nemotron_h_moe", "its loader has no nemotron_h_moe architecture "
                                         "(ik_llama.cpp issue #1075: 'unknown model architecture')"),
                      ("kimi-k3", "it has no kimi-k3 architecture (ik_llama.cpp issue #2203, "
                                  "'Feature Request: Kimi K3 model support', open)"))),
    Backend("ktransformers", "ktransformers", "ktransformers", gguf_runner=False, n_cpu_moe_from="first",
            op_offload_rule="llama.cpp", windows_native=False,
            no_archs=(("nemotron_h_moe", "it has no NemotronH (Mamba-2 hybrid) model or injection rules"),
                      ("kimi-k3", "it has no Kimi-K3 (KDA + MLA hybrid) model or injection rules "
                                  "(ktransformers issue #2109, 'when will Kimi K3 be supported?', open)"),
                      ("step35", "it has no Step-3.5 (step3p5) model or injection rules"),
                      ("hunyuan-moe", "it has no Hunyuan-A13B (HunYuanMoEV1) model or injection rules "
                                      "(ktransformers issue #1404, 'Hunyuan-A13B Support', open)"),
                      ("dots1", "it has no dots.llm1 (Dots1ForCausalLM) model or injection rules"),
                      ("ernie4_5-moe", "it has no ERNIE 4.5 (Ernie4_5_Moe) model or injection rules "
                                       "(ktransformers/models has none)"))),
    Backend("vllm", "vllm", "vllm", gguf_runner=False, n_cpu_moe_from="first",
            op_offload_rule="llama.cpp", windows_native=False, needs_gpu=True),
    Backend("sglang", "sglang", "sglang", gguf_runner=False, n_cpu_moe_from="first",
            op_offload_rule="llama.cpp", windows_native=False, needs_gpu=True),
)}

NAMES: tuple[str, ...] = tuple(BACKENDS)


def unsupported_reason(name: str, arch: str) -> str:
    """Why backend `name` cannot run a model of llama.cpp architecture `arch` ('' if it can)."""
    if name not in BACKENDS:
        return ""
    return dict(BACKENDS[name].no_archs).get(arch, "")


def get(name: str) -> Backend:
    """The record of a backend. Raises KeyError for any other name."""
    return BACKENDS[name]
