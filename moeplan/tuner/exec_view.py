"""How the cost model sees a run of the bundled executor (pure).

The executor computes every weight in one torch dtype, so its bytes are the model's
elements times that dtype's size, not the GGUF's quantized bytes: `retype` gives the model
it really streams. Without a GPU, its GPU tier runs on the CPU through the same code path
(`moeplan bench --device cpu`), so `executor_hardware` gives the cost model a stand-in
GPU that is the host: the node's DRAM bandwidth, the cores' FLOPs, and a memcpy for the
host-to-device copies (read and write both cross the memory bus: half the read rate).
The two tiers keep their own efficiency factors, which calibration fits.
"""
from __future__ import annotations

from dataclasses import replace

from moeplan.planner.cost.estimate import REF_CLOCK_HZ
from moeplan.planner.hardware.profile import Figure, Gpu, HardwareProfile
from moeplan.planner.model.spec import ModelSpec

DTYPE_GGML = {"fp32": ("F32", 4), "bf16": ("BF16", 2), "fp16": ("F16", 2)}


def retype(model: ModelSpec, dtype: str) -> ModelSpec:
    """The model with every tensor held in `dtype` (what the executor allocates)."""
    name, size = DTYPE_GGML[dtype]

    def conv(t):
        return replace(t, ggml_type=name, n_bytes=t.n_elements * size)

    layers = tuple(replace(layer, tensors=tuple(conv(t) for t in layer.tensors)) for layer in model.layers)
    return replace(model, layers=layers, globals=tuple(conv(t) for t in model.globals), quant=name)


def executor_hardware(hw: HardwareProfile, device: str, threads: int | None = None) -> HardwareProfile:
    """The profile the executor runs on: unchanged on CUDA. With the CPU standing in for the
    GPU (`--device cpu`), a stand-in device made of the host's own figures for `threads`
    threads: its memory is DRAM read by those threads (min(T x per-core read, node read)),
    its FLOPs are those threads' measured FP32 matmul rate (prefill's GEMMs), and its
    "host-to-device" copy is a memcpy (read and write both cross the bus: half the read rate)."""
    if device == "cuda" and hw.gpus:
        return hw
    nodes = [n for n in hw.numa_nodes if n.cpus and not n.memory_only]
    bw = [n.dram_read_bytes_per_s for n in nodes if n.dram_read_bytes_per_s]
    if bw:
        node_read = bw[0].effective
        src = bw[0].source
    else:
        node_read, src = 20e9, "prior"
    cores = max(1, nodes[0].n_physical_cores if nodes else hw.cpu.n_cores)
    t = max(1, min(threads or cores, cores))
    core = hw.cpu.core_read_bytes_per_s
    per_core = core.effective if core else 2.5 * node_read / cores
    read = min(t * per_core, node_read)
    flop = hw.cpu.core_flop_per_s
    flops = t * (flop.effective if flop else (hw.cpu.base_clock_hz or REF_CLOCK_HZ) * 32)
    stand_in = Gpu(index=0, name="cpu (stand-in for the GPU tier)", vram_bytes=hw.ram_bytes,
                   mem_bw_bytes_per_s=Figure(read, src, f"host DRAM read by {t} threads"),
                   fp16_flop_per_s=Figure(flops, flop.source if flop else "prior",
                                          f"FP32 matmul rate of {t} host cores"),
                   h2d_bytes_per_s=Figure(read / 2, src, "memcpy within host memory: read + write"),
                   numa_node=nodes[0].id if nodes else 0, source="stand-in")
    return replace(hw, gpus=(stand_in,), name=f"{hw.name} (executor, CPU as GPU)")
