"""How much of its FP16 matrix peak a GPU family's llama.cpp kernels reach in prompt processing,
from published llama-bench runs of dense models (pure data; cost/resolve.py applies it).

The backends' `gpu_mfu` priors (profiles/backends.toml) are one fraction of the FP16 tensor peak
for every GPU; the rows they were judged on are NVIDIA's. AMD's Radeon parts reach a smaller
share of their WMMA / packed-FP16 peak in llama.cpp's quantized matmuls (ROCm and Vulkan alike),
so a prior gpu_mfu prices their prompt processing too fast (by ~67% on the train split's Strix
Halo rows). The figure here is a kernel measurement, not a fit to rows: for each family, the
FLOP rate of a dense model's prompt in llama-bench (a dense model: no expert routing, every
weight multiplied by the whole ubatch) as a share of the part's FP16 peak (profiles/parts/
gpus.toml), divided by the same share measured on NVIDIA's cards. A family with no measurement
here keeps the prior (factor 1): RDNA 4, CDNA (Instinct) and Intel.

FLOPs of a token of a pp test = 2 x the matmul weights (the layers' weights; not the token
embedding, a lookup, nor the output matrix, which llama-bench's prompt batch multiplies for the
last token only) + the attention's 4 x n_layer x n_embd x (mean depth = prompt / 2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class DenseModel:
    """A dense model of the llama-bench rows: its matmul weights and attention shape."""

    name: str
    matmul_params: float  # weights of the layers' matmuls (total less token embedding and output)
    n_layer: int
    n_embd: int  # attention width (query heads x head size)

    def flop_per_token(self, prompt: int) -> float:
        return 2 * self.matmul_params + 4 * self.n_layer * self.n_embd * prompt / 2


# Llama 2 7B: 6.738B parameters, embedding and output 32000 x 4096 each (Meta's config)
LLAMA2_7B = DenseModel("llama 7B (Llama 2)", 6.738e9 - 2 * 32000 * 4096, 32, 4096)
# Llama 3 8B: 8.030B parameters, embedding and output 128256 x 4096 each (Meta's config)
LLAMA3_8B = DenseModel("llama 8B (Llama 3)", 8.030e9 - 2 * 128256 * 4096, 32, 4096)


@dataclass(frozen=True)
class KernelRun:
    """One llama-bench prompt test of a dense model, fully on one GPU."""

    family: str
    gpu: str  # the parts catalog's name: its fp16_tflops is the peak
    fp16_peak_flop_per_s: float  # that catalog figure, repeated so the data reads on its own
    model: DenseModel
    quant: str
    api: str  # CUDA, ROCm, Vulkan
    test: str  # llama-bench test, ubatch 512
    prompt: int
    tok_s: float
    source: str  # where the figure is printed
    note: str = ""

    @property
    def flop_per_s(self) -> float:
        return self.model.flop_per_token(self.prompt) * self.tok_s

    @property
    def share_of_peak(self) -> float:
        return self.flop_per_s / self.fp16_peak_flop_per_s


REFERENCE_FAMILY = "nvidia"

KERNEL_RUNS: tuple[KernelRun, ...] = (
    KernelRun("nvidia", "NVIDIA GeForce RTX 4090", 330.3e12, LLAMA3_8B, "Q4_0", "CUDA", "pp512 -ub 512", 512,
              10358.75, "https://github.com/ggml-org/llama.cpp/pull/7676",
              "MMQ on tensor cores, the path llama.cpp multiplies quantized weights with since (2024)"),
    KernelRun("nvidia", "NVIDIA GeForce RTX 5090", 419.0e12, LLAMA3_8B, "IQ4_NL", "CUDA", "pp512 -ub 512", 512,
              14933.62, "https://github.com/ggml-org/llama.cpp/pull/24127", "build b9992 (2026)"),
    KernelRun("rdna3.5", "AMD Radeon 8060S", 59.4e12, LLAMA2_7B, "Q4_0", "ROCm 7.2.3", "pp512", 512,
              1545.36, "https://github.com/kyuz0/amd-strix-halo-toolboxes/tree/d1a34bee0900be574fc31be9dcdc02a925581889"
              "/benchmark/results#llama-2-7b.Q4_0__rocm-7_2_3__fa1.log", "build b9187, -fa 1"),
    KernelRun("rdna3.5", "AMD Radeon 8060S", 59.4e12, LLAMA2_7B, "Q4_0", "Vulkan (RADV)", "pp512", 512,
              1337.70, "https://github.com/kyuz0/amd-strix-halo-toolboxes/tree/d1a34bee0900be574fc31be9dcdc02a925581889"
              "/benchmark/results#llama-2-7b.Q4_0__vulkan_radv__fa1.log", "build b9187, -fa 1"),
    KernelRun("rdna3", "AMD Radeon RX 7900 XTX", 122.8e12, LLAMA3_8B, "Q4_K_M", "ROCm", "pp2048 -ub 512", 2048,
              3189.36, "https://github.com/ggml-org/llama.cpp/pull/26284", "baseline (master) column of the PR's compare table"),
    KernelRun("rdna2", "AMD Radeon RX 6800", 32.3e12, LLAMA3_8B, "Q4_0", "ROCm", "pp2048 -ub 512", 2048,
              638.26, "https://github.com/ggml-org/llama.cpp/pull/8416",
              "baseline (master) column of the PR's compare table; no WMMA: packed-FP16 peak"),
)

# the LLVM targets (profile Gpu.gfx_target) of each AMD family
GFX_FAMILY = {"gfx1150": "rdna3.5", "gfx1151": "rdna3.5", "gfx1152": "rdna3.5",
              "gfx1100": "rdna3", "gfx1101": "rdna3", "gfx1102": "rdna3", "gfx1103": "rdna3",
              "gfx1030": "rdna2", "gfx1031": "rdna2", "gfx1032": "rdna2", "gfx1034": "rdna2", "gfx1035": "rdna2",
              "gfx1036": "rdna2"}


def family_share(family: str) -> float | None:
    """The mean share of the FP16 peak a family's measured dense prompts reach (None: none)."""
    runs = [r.share_of_peak for r in KERNEL_RUNS if r.family == family]
    return math.fsum(runs) / len(runs) if runs else None  # statistics.fmean (not imported on the planning path)


def gpu_family(vendor: str, gfx_target: str) -> str:
    """A profile GPU's family: NVIDIA's cards (vendor '') are the reference; an AMD part by its
    LLVM target ('' where unknown or unmeasured)."""
    if vendor != "amd":
        return REFERENCE_FAMILY
    return GFX_FAMILY.get(gfx_target.lower(), "")


def kernel_efficiency(vendor: str, gfx_target: str) -> tuple[float, float, str]:
    """(factor on the prior gpu_mfu, its 1-sigma relative error, how): the family's measured share
    of its peak over NVIDIA's; (1, 0, '') for NVIDIA and for families not measured."""
    fam = gpu_family(vendor, gfx_target)
    share, ref = family_share(fam) if fam else None, family_share(REFERENCE_FAMILY)
    if fam == REFERENCE_FAMILY or share is None or not ref:
        return 1.0, 0.0, ""
    # the spread of the runs behind either share (APIs, builds, cards), at least 10%
    import statistics

    spread = [statistics.pstdev([math.log(r.share_of_peak) for r in KERNEL_RUNS if r.family == f])
              for f in (fam, REFERENCE_FAMILY)]
    err = max(0.10, math.hypot(*spread))
    return share / ref, err, (f"{fam} llama.cpp kernels {share / ref:.2f} of NVIDIA's share of the FP16 peak "
                              f"(dense llama-bench prompts, cost/gpu_kernels.py)")
