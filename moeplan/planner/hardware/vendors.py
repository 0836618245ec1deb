"""GPU vendors and llama.cpp builds: device names, and the memory an APU's iGPU may map (pure).

llama.cpp names a device by its backend and index (ggml/include/ggml-cuda.h GGML_CUDA_NAME,
ggml-vulkan.h GGML_VK_NAME at commit 0c1e570): `CUDA0` in a CUDA build, `ROCm0` in a HIP build
(the CUDA backend compiled with -DGGML_HIP=ON), `Vulkan0` in a Vulkan build; the host buffer
of each is `<name>_Host` (CUDA_Host, ROCm_Host, Vulkan_Host). These names are what -dev, -ot
`=<buffer>` and the loader's "<dev> model buffer size" lines use.

An APU's iGPU (Radeon 8060S of the Ryzen AI Max+ 395, 890M, 780M) reads the host's DRAM: its
budget is what the amdgpu driver lets it map, the BIOS carve-out ("UMA frame buffer", outside
the RAM Linux sees) plus the GTT (system RAM mapped into the GPU's address space; the kernel's
default is half the RAM: TTM's pages_limit, amdgpu.gttsize -1), and its bandwidth is the DRAM's,
shared with the CPU cores. llama.cpp's Vulkan build counts every heap of an integrated GPU as
its memory (ggml_backend_vk_get_device_memory: `is_integrated_gpu || eDeviceLocal`), so it sees
carve-out + GTT; the ROCm build allocates with hipMalloc from the carve-out unless
GGML_CUDA_ENABLE_UNIFIED_MEMORY=1 (hipMallocManaged: system RAM up to the GTT limit;
docs/build.md "Unified Memory", ggml-cuda.cu ggml_cuda_device_malloc).
"""
from __future__ import annotations

from moeplan.planner.hardware.profile import Gpu, HardwareProfile
from moeplan.planner.options import PlanOptions
from moeplan.units import GIB

# llama.cpp build -> the device-name prefix its backend registers
LLAMA_DEVICE_PREFIX = {"cuda": "CUDA", "rocm": "ROCm", "vulkan": "Vulkan"}
BUILDS = tuple(LLAMA_DEVICE_PREFIX)

# RAM an APU machine keeps for the OS and the host side of llama.cpp when the GPU may map the
# rest (the Strix Halo setups that raise the GTT leave 4-8 GiB: e.g. ttm.pages_limit for 120 of
# 128 GiB); a spec profile's iGPU budget is the RAM less this, with a note on how to set it
UNIFIED_HOST_KEEP_BYTES = 8 * GIB
# Linux's default GTT (TTM pages_limit = half of system RAM, kernels 6.x)
DEFAULT_GTT_FRACTION = 0.5
# the kernel command line that lets the iGPU map `n` GiB: TTM's limit in 4 KiB pages (the
# amdgpu.gttsize module option, in MiB, is deprecated in favour of it)
GTT_PAGE_BYTES = 4096


def gpu_vendor(g: Gpu) -> str:
    """'amd' or 'nvidia' (profiles written before the vendor field: NVML's GPUs, NVIDIA)."""
    if g.vendor:
        return g.vendor
    name = g.name.lower()
    return "amd" if ("radeon" in name or "instinct" in name or name.startswith("amd ")) else "nvidia"


def default_build(g: Gpu) -> str:
    """The llama.cpp build a plan's scripts are written for: CUDA for NVIDIA, ROCm (HIP) for
    AMD's cards and Instinct, Vulkan for an APU's iGPU (it runs on the Mesa driver alone and
    sees the whole carve-out + GTT budget without an environment variable)."""
    if gpu_vendor(g) != "amd":
        return "cuda"
    return "vulkan" if g.unified_memory else "rocm"


def profile_build(hw: HardwareProfile) -> str:
    """The build for the profile's GPUs (the first GPU's; CUDA without a GPU)."""
    return default_build(hw.gpus[0]) if hw.gpus else "cuda"


def device_name(build: str, index: int) -> str:
    """llama.cpp's name of device `index` in `build`: CUDA0, ROCm1, Vulkan0."""
    return f"{LLAMA_DEVICE_PREFIX.get(build, 'CUDA')}{index}"


def device_names(hw: HardwareProfile | None, indices: list[int]) -> str:
    """'-dev' value for the profile's GPUs `indices`: 'CUDA0,CUDA2', 'ROCm0', 'Vulkan0'."""
    build = profile_build(hw) if hw is not None else "cuda"
    return ",".join(device_name(build, i) for i in indices)


def build_options(hw: HardwareProfile | None, options: PlanOptions | None = None) -> PlanOptions:
    """`options` with the settings that tell the launch files which llama.cpp build to write
    for: gpu_build 'rocm' | 'vulkan', the GPU's LLVM target and whether it shares the host's
    memory. Unchanged for NVIDIA GPUs (CUDA, the scripts' default) or a machine without a GPU."""
    options = options if options is not None else PlanOptions()
    if hw is None or not hw.gpus:
        return options
    build = profile_build(hw)
    if build == "cuda":
        return options
    g = hw.gpus[0]
    options = options.with_(gpu_build=build)
    if g.gfx_target:
        options = options.with_(gfx_target=g.gfx_target)
    if hw.unified_memory:
        options = options.with_(unified_memory=True)
    return options


def default_unified_budget_bytes(ram_bytes: int) -> int:
    """What a spec profile's iGPU may map: the installed RAM less UNIFIED_HOST_KEEP_BYTES (a
    machine set up for LLMs raises the GTT that far), at least the Linux default (half)."""
    return max(int(ram_bytes * DEFAULT_GTT_FRACTION), ram_bytes - UNIFIED_HOST_KEEP_BYTES)


def gtt_setting(budget_bytes: int) -> str:
    """The kernel parameter that sets the GTT to `budget_bytes`."""
    pages = budget_bytes // GTT_PAGE_BYTES
    return f"ttm.pages_limit={pages} (= {budget_bytes / GIB:.0f} GiB of 4 KiB pages) on the kernel command line"


def unified_notes(g: Gpu, ram_total_bytes: int) -> list[str]:
    """What a plan on an iGPU must say: one memory, one bandwidth, no PCIe copy."""
    if not g.unified_memory:
        return []
    out = [f"GPU {g.index} ({g.name}) shares the host's DRAM (unified memory): no PCIe copy, its bandwidth "
           f"is the DRAM's and the CPU cores share it; its budget is {g.vram_bytes / GIB:.0f} GiB, what the "
           "amdgpu driver lets it map (BIOS carve-out + GTT), and that much is not host RAM; experts kept "
           "on the CPU save no memory, they only read it more slowly"]
    if ram_total_bytes and g.host_shared_bytes < ram_total_bytes * DEFAULT_GTT_FRACTION * 1.05:
        out.append(f"GPU {g.index}: at Linux's default GTT (half the RAM) the iGPU maps "
                   f"{g.vram_bytes / GIB:.0f} GiB; to give it more set "
                   f"{gtt_setting(max(0, ram_total_bytes - UNIFIED_HOST_KEEP_BYTES))}")
    return out
