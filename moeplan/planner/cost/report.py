"""What an estimate reports beside the speeds: how much of the CPU experts the page cache can
hold, the decode floor under page-cache pressure, host RAM per NUMA node and the memory
breakdown per device.
"""
from __future__ import annotations

from moeplan.planner import backends
from moeplan.planner.cost import machine
from moeplan.planner.cost.priors import BackendPriors
from moeplan.planner.cost.resolve import Factors, used_nodes
from moeplan.planner.hardware.profile import OS_RESERVE_BYTES, HardwareProfile
from moeplan.planner.memory.devices import layer_split
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement
from moeplan.planner.plan import GpuMemory, MemoryLine, MemoryReport, Term


def _resident_share(model: ModelSpec, p: Placement, hw: HardwareProfile, mem_host_other: int) -> float:
    """Share of CPU expert pages that page cache can keep (mmap); the rest comes from NVMe."""
    if p.load_mode != "mmap" or not hw.system.ram_total_bytes:
        return 1.0
    cpu_layers = set(p.cpu_moe_layers)
    if p.n_gpus and p.n_gpu_layers is not None:
        cpu_layers |= layer_split(model, p)[0]
    need = sum(layer.expert_bytes for layer in model.moe_layers if layer.index in cpu_layers)
    if need <= 0:
        return 1.0
    avail = hw.ram_bytes - mem_host_other - OS_RESERVE_BYTES
    return max(0.0, min(1.0, avail / need))


def page_cache_short_bytes(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors,
                           ram_anon_bytes: int) -> int:
    """Bytes by which the mapped file, the anonymous host memory and the OS reserve exceed RAM,
    when some of the file's tensors live on a GPU (0 otherwise).

    With mmap, llama.cpp maps the whole file with MAP_POPULATE (src/llama-mmap.cpp), so the
    load reads every byte into the page cache, then copies the GPU tensors out of the mapping
    (llama_model_loader::load_all_data): those pages were touched twice and sit on the kernel's
    active list, the CPU experts' pages once. When the file does not fit beside the rest, the
    kernel reclaims CPU expert pages while the dead GPU-tensor pages stay, and the cyclic sweep
    of decode over the layers is LRU's worst case: expert reads fault in from the disk. How far
    it goes depends on the kernel and what else runs (hardware-corner.net's EPYC 7343 + RTX 3090
    with 64 GB for the 63 GB gpt-oss-120b: 1.4-1.8 tok/s, the disk-bound figure), so it widens
    the range rather than moving the figure; --no-mmap holds the CPU weights in anonymous memory.
    """
    # only llama.cpp's loader (src/llama-model-loader.cpp) maps the file: the GGUF runners
    runs_gguf = pr.name in backends.BACKENDS and backends.get(pr.name).gguf_runner
    if not runs_gguf or p.load_mode != "mmap" or p.n_gpus == 0 or not hw.system.ram_total_bytes:
        return 0
    return max(0, model.file_bytes + ram_anon_bytes + OS_RESERVE_BYTES - hw.ram_bytes)


def paging_decode_tok_s(terms: list[Term], f: Factors, per_step: float) -> float:
    """Decode speed if every CPU expert byte a token reads comes from the disk (the range's low
    end under page-cache pressure): the CPU experts' DRAM read, compute excess and NVMe terms
    give way to their bytes over the NVMe read rate."""
    by = {t.name: t.seconds for t in terms}
    cpu_read = by.get("cpu_experts_read", 0.0)
    if cpu_read <= 0:
        return 0.0
    nbytes = cpu_read * f.bw_cpu_bytes_per_s.value
    t = (sum(by.values()) - cpu_read - by.get("cpu_compute_excess", 0.0) - by.get("nvme_read", 0.0)
         + nbytes / f.nvme_bytes_per_s.value)
    return per_step / t if t > 0 else 0.0


def node_ram_split(model: ModelSpec, p: Placement, hw: HardwareProfile, pr: BackendPriors,
                   host_bytes: int, cpu_expert_bytes: int = 0) -> tuple[tuple[int, int], ...]:
    """Host RAM per NUMA node: bound nodes hold it all, interleave spreads it (as Windows does
    without a bind), KTransformers' per-node pools hold 1/N of every CPU expert each (kt-kernel
    splits, machine.py "KTransformers"; the rest stays on the first node), no policy puts it on
    the first node."""
    nodes = used_nodes(hw, p)
    pools = machine.kt_pool_count(p.numa, len(nodes)) if pr.numa_aware else 1
    if pools > 1:
        share = cpu_expert_bytes // pools
        rest = host_bytes - share * pools
        return tuple((n.id, share + (rest if i == 0 else 0)) for i, n in enumerate(nodes))
    spread = p.numa in ("interleave", "distribute") or (hw.os == "windows" and p.numa != "bind")
    if spread and len(nodes) > 1:
        share = host_bytes // len(nodes)
        return tuple((n.id, share) for n in nodes)
    return ((nodes[0].id, host_bytes),)


def memory_report(mem, hw: HardwareProfile) -> MemoryReport:
    """The breakdown as an estimate carries it; with several GPUs each device also names the GPU
    and its budget (free memory, else total)."""
    d = mem.to_dict()
    per = []
    for g in d.get("per_gpu", ()):
        if g["device"] < len(hw.gpus):
            gpu = hw.gpus[g["device"]]
            g = {**g, "name": gpu.name,
                 "budget_bytes": gpu.vram_free_bytes if gpu.vram_free_bytes is not None else gpu.vram_bytes}
        per.append(GpuMemory(**g))
    lines = tuple(MemoryLine(**i) for i in d["items"])
    return MemoryReport(vram_bytes=d["vram_bytes"], vram_required_bytes=d["vram_required_bytes"],
                        ram_bytes=d["ram_bytes"], ram_anon_bytes=d["ram_anon_bytes"], margin_bytes=d["margin_bytes"],
                        items=lines, per_gpu=tuple(per))
