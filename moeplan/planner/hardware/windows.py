"""What Windows changes for a plan (pure): the VRAM the OS keeps, and how a NUMA node is bound.

VRAM. Under WDDM (the driver model of every GeForce card and of workstation cards driving a
display) Windows' video memory manager owns the GPU's memory: part of it is not available to
CUDA although NVML reports it free. Ollama measures this per GPU as NVML's free bytes minus
CUDA's (`cudaMemGetInfo`) and logs it as "detected OS VRAM overhead" (ollama discover/gpu.go).
Published logs of that line on Windows 10/11: 125 MiB (RTX 4060), 189 MiB (RTX 3090), 283 and
582 MiB (RTX 3060 Ti), 846 MiB (RTX 4050 Laptop); one Windows 10 1909 machine (WDDM 2.6) lost
3.2 GiB of an RTX 2080 Ti's 22 GiB (ollama/ollama#9167, which links Microsoft's forum thread on
Windows 10 keeping part of the VRAM from CUDA). There is no public exact figure: it depends on
the Windows build, the driver and the displays. moeplan therefore ASSUMES
WDDM_RESERVE_BYTES = 512 MiB per WDDM GPU, uncertain by a factor of two either way (the logs
span 0.12-0.85 GiB; old Windows 10 builds lose far more), and says so in every Windows plan.
A GPU in TCC mode (`nvidia-smi -dm 1`, workstation and data-center cards without a display)
is not managed by WDDM and keeps no reserve. The desktop's own use of a display GPU (DWM:
frame buffers, a few hundred MiB with large displays) is what NVML reports as used, so a
probed profile already has it in `vram_free_bytes`; a spec-sheet profile does not.

NUMA. llama.cpp's `--numa` is a no-op on Windows: ggml's NUMA code reads
/sys/devices/system/node and is compiled for Linux only (ggml/src/ggml-cpu/ggml-cpu.c, struct
ggml_numa_nodes: "no NUMA support outside of Linux at this time"), and there is no numactl.
Without a binding Windows runs the threads on every node and the model's pages end up spread
over the nodes (the cost model treats this as interleaved pages: a share 1 - 1/n of the reads
is remote, see cost/estimate.py). The binding Windows offers is cmd's
`start /NODE n /AFFINITY mask`: the process prefers node n for its memory and runs only on
the processors the mask selects, counted from the node's first processor (`start /?`: "Specify
the affinity mask as if the NUMA node's processor mask is right shifted to begin at bit zero";
processors outside the node are dropped). Memory is preferred, not bound: when node n is full,
Windows takes pages from another node, which is why a bound plan must fit the node's RAM.
"""
from __future__ import annotations

from moeplan.planner.hardware.profile import Gpu, HardwareProfile, NumaNode
from moeplan.units import MIB

WDDM_RESERVE_BYTES = 512 * MIB  # assumption, see the module docstring
WDDM_RESERVE_REL_ERR = 1.0  # the logs span a quarter to almost twice the assumption
WDDM_SOURCE = ("assumption: 512 MiB per WDDM GPU (Ollama's 'detected OS VRAM overhead' logs on Windows "
               "10/11 range 0.12-0.85 GiB; older Windows 10 builds keep several GiB, ollama#9167)")
# a Windows processor group holds at most 64 logical processors; start /AFFINITY is one group's mask
GROUP_SIZE = 64


def is_windows(hw: HardwareProfile) -> bool:
    return hw.os == "windows"


def gpu_reserve_bytes(g: Gpu, os_family: str) -> int:
    """VRAM Windows keeps from CUDA on GPU g (0 off Windows and for TCC-mode GPUs)."""
    if os_family != "windows" or g.driver_model == "tcc":
        return 0
    return WDDM_RESERVE_BYTES


def vram_reserve_bytes(hw: HardwareProfile) -> int:
    """The OS's VRAM reserve over all GPUs of the profile."""
    return sum(gpu_reserve_bytes(g, hw.os) for g in hw.gpus)


def reserve_note(hw: HardwareProfile) -> str:
    """One line for the plan: what was kept from the VRAM budget for Windows, and why."""
    total = vram_reserve_bytes(hw)
    if not is_windows(hw) or not hw.gpus:
        return ""
    tcc = [g.index for g in hw.gpus if g.driver_model == "tcc"]
    if not total:
        return f"Windows: GPU(s) {tcc} run in TCC mode, no WDDM VRAM reserve"
    n = sum(1 for g in hw.gpus if gpu_reserve_bytes(g, hw.os))
    unknown = any(g.driver_model == "" for g in hw.gpus)
    return (f"Windows: {total / MIB:.0f} MiB of VRAM kept for WDDM on {n} GPU(s) ({WDDM_SOURCE}; "
            f"+/-{WDDM_RESERVE_REL_ERR:.0%})" + ("; driver model unknown, WDDM assumed (a TCC-mode GPU keeps "
                                                  "none: `nvidia-smi -q | findstr /C:\"Driver Model\"`)"
                                                  if unknown else ""))


def affinity_mask(node: NumaNode) -> str:
    """start /AFFINITY's hexadecimal mask for all logical processors of `node`, counted from
    the node's first processor (capped at one processor group of 64)."""
    n = min(GROUP_SIZE, max(1, len(node.cpus) or node.n_physical_cores or 1))
    return f"0x{(1 << n) - 1:X}"


def bind_hint(node_id: int, mask: str) -> str:
    """How to bind llama-server to a node on Windows, in words."""
    return (f"`start \"\" /B /WAIT /NODE {node_id} /AFFINITY {mask} llama-server.exe ...` (cmd; launch.cmd "
            "does this); llama.cpp's --numa has no effect on Windows (ggml's NUMA code is Linux-only)")
