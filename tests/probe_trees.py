"""Fake sysfs/procfs trees and a fake NVML for the probe tests.

Each builder writes the files a real kernel shows into tmp_path and returns the root; the
probes read them through the same `root` argument they use on a live machine.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import pynvml

GIB_KB = 1024 * 1024  # kB per GiB (meminfo counts kB)


def _w(root: Path, path: str, text: str) -> None:
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def _cpulist(cpus) -> str:
    from moeplan.planner.hardware.profile import format_cpulist

    return format_cpulist(list(cpus))


def cpuinfo(n_cpus: int, model: str, flags: str, cores_per_pkg: int, smt: int, vendor="GenuineIntel") -> str:
    """/proc/cpuinfo in Linux's x86 numbering: first threads of all cores, then siblings."""
    n_cores = n_cpus // smt
    blocks = []
    for cpu in range(n_cpus):
        core = cpu % n_cores
        blocks.append(
            f"processor\t: {cpu}\nvendor_id\t: {vendor}\nmodel name\t: {model}\nphysical id\t: {core // cores_per_pkg}\n"
            f"core id\t\t: {core % cores_per_pkg}\ncpu MHz\t\t: 2500.000\ncache size\t: 61440 KB\nflags\t\t: {flags}\n")
    return "\n".join(blocks) + "\n"


def write_cpus(root: Path, n_sockets: int, cores_per_pkg: int, smt: int, l3_kb: int, max_khz: int | None = 4_000_000):
    n_cores = n_sockets * cores_per_pkg
    n_cpus = n_cores * smt
    _w(root, "/sys/devices/system/cpu/online", f"0-{n_cpus - 1}\n")
    for cpu in range(n_cpus):
        core = cpu % n_cores
        pkg = core // cores_per_pkg
        sib = [core + k * n_cores for k in range(smt)]
        base = f"/sys/devices/system/cpu/cpu{cpu}"
        _w(root, f"{base}/topology/physical_package_id", f"{pkg}\n")
        _w(root, f"{base}/topology/core_id", f"{core % cores_per_pkg}\n")
        _w(root, f"{base}/topology/core_cpus_list", _cpulist(sib) + "\n")
        _w(root, f"{base}/cache/index3/level", "3\n")
        _w(root, f"{base}/cache/index3/size", f"{l3_kb}K\n")
        pkg_cpus = [c for c in range(n_cpus) if (c % n_cores) // cores_per_pkg == pkg]
        _w(root, f"{base}/cache/index3/shared_cpu_list", _cpulist(pkg_cpus) + "\n")
        _w(root, f"{base}/cache/index2/level", "2\n")
        _w(root, f"{base}/cache/index2/size", "2048K\n")
        if max_khz:
            _w(root, f"{base}/cpufreq/cpuinfo_max_freq", f"{max_khz}\n")
    return n_cpus


def write_node(root: Path, nid: int, cpus, total_gib: float, free_gib: float, distances) -> None:
    base = f"/sys/devices/system/node/node{nid}"
    _w(root, f"{base}/cpulist", _cpulist(cpus) + "\n")
    _w(root, f"{base}/meminfo",
       f"Node {nid} MemTotal:       {int(total_gib * GIB_KB)} kB\nNode {nid} MemFree:        {int(free_gib * GIB_KB)} kB\n"
       f"Node {nid} MemUsed:        {int((total_gib - free_gib) * GIB_KB)} kB\n")
    _w(root, f"{base}/distance", " ".join(str(d) for d in distances) + "\n")


def write_proc(root: Path, total_gib: float, avail_gib: float, swap_gib: float = 0, hugepages: int = 0,
               numa_balancing: int = 0, thp: str = "always [madvise] never", hostname: str = "box",
               cgroup: str = "0::/user.slice\n") -> None:
    _w(root, "/proc/meminfo",
       f"MemTotal:       {int(total_gib * GIB_KB)} kB\nMemFree:        {int(avail_gib * GIB_KB * 0.8)} kB\n"
       f"MemAvailable:   {int(avail_gib * GIB_KB)} kB\nSwapTotal:      {int(swap_gib * GIB_KB)} kB\n"
       f"HugePages_Total:    {hugepages}\nHugePages_Free:     {hugepages}\nHugepagesize:       2048 kB\n")
    _w(root, "/proc/loadavg", "0.10 0.20 0.30 1/200 12345\n")
    _w(root, "/proc/stat", "cpu  1000 0 500 90000 100 0 10 0 0 0\ncpu0 500 0 250 45000 50 0 5 0 0 0\n")
    _w(root, "/proc/sys/kernel/numa_balancing", f"{numa_balancing}\n")
    _w(root, "/proc/sys/kernel/osrelease", "6.8.0-test\n")
    _w(root, "/proc/sys/kernel/hostname", f"{hostname}\n")
    _w(root, "/sys/kernel/mm/transparent_hugepage/enabled", thp + "\n")
    _w(root, "/etc/os-release", 'NAME="Debian"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n')
    _w(root, "/proc/self/cgroup", cgroup)


def write_gpu_sysfs(root: Path, bus: str, numa_node: int, local_cpus: str, gen_gts: str = "16.0 GT/s PCIe",
                    width: int = 16) -> None:
    base = f"/sys/bus/pci/devices/{bus}"
    _w(root, f"{base}/numa_node", f"{numa_node}\n")
    _w(root, f"{base}/local_cpulist", local_cpus + "\n")
    _w(root, f"{base}/current_link_speed", gen_gts + "\n")
    _w(root, f"{base}/max_link_speed", gen_gts + "\n")
    _w(root, f"{base}/current_link_width", f"{width}\n")
    _w(root, f"{base}/max_link_width", f"{width}\n")


def dimm_raw(size_mib: int, mem_type: int, speed: int, configured: int) -> bytes:
    """An SMBIOS 3.2 type-17 structure (0x28 bytes of formatted area)."""
    raw = bytearray(0x28)
    raw[0], raw[1] = 17, 0x28
    struct.pack_into("<H", raw, 0x0C, size_mib)
    raw[0x12] = mem_type
    struct.pack_into("<H", raw, 0x15, speed)
    struct.pack_into("<H", raw, 0x20, configured)
    return bytes(raw)


def write_dimm(root: Path, idx: int, raw: bytes) -> None:
    p = root / f"sys/firmware/dmi/entries/17-{idx}/raw"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(raw)


AVX512_FLAGS = "fpu sse sse2 avx avx2 fma f16c avx512f avx512bw avx512vl avx512_vnni avx512_bf16 amx_tile amx_int8 amx_bf16"


def laptop_tree(root: Path) -> Path:
    """One node, 4 cores x 2 threads, 32 GiB, no GPU."""
    write_cpus(root, n_sockets=1, cores_per_pkg=4, smt=2, l3_kb=16384)
    _w(root, "/proc/cpuinfo", cpuinfo(8, "AMD Ryzen 7 7840U w/ Radeon 780M Graphics",
                                      "fpu sse2 avx avx2 fma f16c avx512f avx512_bf16", 4, 2, vendor="AuthenticAMD"))
    write_node(root, 0, range(8), 30.5, 20.0, [10])
    write_proc(root, 30.5, 22.0, swap_gib=8, cgroup="4:memory:/user/1000\n0::/user.slice\n")
    _w(root, "/sys/fs/cgroup/memory/user/1000/memory.limit_in_bytes", "9223372036854771712\n")
    return root


def server_tree(root: Path) -> Path:
    """Two Xeon Gold 6548Y+ sockets, 8 cores x 2 threads each (shrunk), GPU on node 1 whose
    free memory is low, numa_balancing on, DDR5-5200 DIMMs in DMI."""
    write_cpus(root, n_sockets=2, cores_per_pkg=8, smt=2, l3_kb=61440)
    _w(root, "/proc/cpuinfo", cpuinfo(32, "INTEL(R) XEON(R) GOLD 6548Y+", AVX512_FLAGS, 8, 2))
    node0 = [c for c in range(32) if (c % 16) < 8]
    node1 = [c for c in range(32) if (c % 16) >= 8]
    write_node(root, 0, node0, 251.0, 200.0, [10, 21])
    write_node(root, 1, node1, 252.0, 12.0, [21, 10])
    write_proc(root, 503.0, 210.0, numa_balancing=1, hugepages=0, hostname="seed")
    write_gpu_sysfs(root, "0000:c1:00.0", 1, _cpulist(node1), gen_gts="32.0 GT/s PCIe")
    for i in range(4):
        write_dimm(root, i, dimm_raw(16384, 0x22, 5600, 5200))
    write_dimm(root, 4, dimm_raw(0, 0x02, 0, 0))  # an empty slot
    return root


def vm_tree(root: Path) -> Path:
    """A 4-vCPU VM: hypervisor flag, QEMU DMI, cgroup v2 limit, GPU passed through with
    numa_node = -1."""
    write_cpus(root, n_sockets=1, cores_per_pkg=4, smt=1, l3_kb=32768, max_khz=None)
    _w(root, "/proc/cpuinfo", cpuinfo(4, "AMD EPYC 9654 96-Core Processor", "fpu avx avx2 fma avx512f hypervisor",
                                      4, 1, vendor="AuthenticAMD"))
    write_node(root, 0, range(4), 15.6, 10.0, [10])
    write_proc(root, 15.6, 12.0, cgroup="0::/machine.slice/job\n")
    _w(root, "/sys/fs/cgroup/machine.slice/job/memory.max", f"{8 * 1024**3}\n")
    _w(root, "/sys/fs/cgroup/machine.slice/memory.max", "max\n")
    _w(root, "/sys/class/dmi/id/sys_vendor", "QEMU\n")
    _w(root, "/sys/class/dmi/id/product_name", "Standard PC (Q35 + ICH9, 2009)\n")
    write_gpu_sysfs(root, "0000:00:05.0", -1, "0-3")
    return root


def memory_only_tree(root: Path) -> Path:
    """One CPU node and a CPU-less memory node (CXL expander) further away."""
    write_cpus(root, n_sockets=1, cores_per_pkg=4, smt=1, l3_kb=32768)
    _w(root, "/proc/cpuinfo", cpuinfo(4, "Intel(R) Xeon(R) Platinum 8480+", AVX512_FLAGS, 4, 1))
    write_node(root, 0, range(4), 62.0, 50.0, [10, 20])
    _w(root, "/sys/devices/system/node/node1/cpulist", "\n")
    write_node(root, 1, [], 128.0, 127.0, [20, 10])
    (root / "sys/devices/system/node/node1/cpulist").write_text("\n")
    write_proc(root, 190.0, 170.0)
    return root


# ---- fake NVML -------------------------------------------------------------------------------------

def nvml_error(code: int) -> pynvml.NVMLError:
    """The real pynvml exception subclass for an NVML return code."""
    return pynvml.NVMLError(code)


class FakePci:
    def __init__(self, bus: str) -> None:
        self.busId = bus


class FakeMem:
    def __init__(self, total: int, free: int) -> None:
        self.total, self.free = total, free


class FakeNvml:
    """The pynvml calls read_gpus uses. `devices`: dicts with name, bus, total, free, bus_bits,
    mem_mhz, gen, width, gen_max, width_max, cc. `fail`: {function name: NVML return code} to
    raise; `init_error`: a code raised by nvmlInit."""

    NVMLError = pynvml.NVMLError

    def __init__(self, devices=(), fail=None, init_error=None, topo=None) -> None:
        self.devices = list(devices)
        self.fail = dict(fail or {})
        self.init_error = init_error
        self.topo = topo or {}
        self.shutdowns = 0

    def _check(self, fn: str) -> None:
        if fn in self.fail:
            raise nvml_error(self.fail[fn])

    def nvmlInit(self):
        if self.init_error is not None:
            raise nvml_error(self.init_error)

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        self._check("nvmlDeviceGetCount")
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.devices[i]

    def _get(self, fn, h, key):
        self._check(fn)
        return h[key]

    def nvmlDeviceGetName(self, h):
        return self._get("nvmlDeviceGetName", h, "name")

    def nvmlDeviceGetUUID(self, h):
        return self._get("nvmlDeviceGetUUID", h, "uuid")

    def nvmlDeviceGetPciInfo(self, h):
        self._check("nvmlDeviceGetPciInfo")
        return FakePci(h["bus"])

    def nvmlDeviceGetMemoryInfo(self, h):
        self._check("nvmlDeviceGetMemoryInfo")
        return FakeMem(h["total"], h["free"])

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return self._get("nvmlDeviceGetCudaComputeCapability", h, "cc")

    def nvmlDeviceGetMemoryBusWidth(self, h):
        return self._get("nvmlDeviceGetMemoryBusWidth", h, "bus_bits")

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        assert clock == pynvml.NVML_CLOCK_MEM
        return self._get("nvmlDeviceGetMaxClockInfo", h, "mem_mhz")

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._get("nvmlDeviceGetCurrPcieLinkGeneration", h, "gen")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._get("nvmlDeviceGetMaxPcieLinkGeneration", h, "gen_max")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._get("nvmlDeviceGetCurrPcieLinkWidth", h, "width")

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._get("nvmlDeviceGetMaxPcieLinkWidth", h, "width_max")

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        self._check("nvmlDeviceGetTopologyCommonAncestor")
        return self.topo.get((a["bus"], b["bus"]), pynvml.NVML_TOPOLOGY_SYSTEM)


def gpu_dev(name="NVIDIA RTX PRO 6000 Blackwell Workstation Edition", bus="00000000:C1:00.0",
            total=97887 * 1024**2, free=96000 * 1024**2, bus_bits=512, mem_mhz=14001, gen=1, width=16,
            gen_max=5, width_max=16, cc=(12, 0)) -> dict:
    return dict(name=name, bus=bus, uuid=f"GPU-{bus}", total=total, free=free, bus_bits=bus_bits, mem_mhz=mem_mhz,
                gen=gen, width=width, gen_max=gen_max, width_max=width_max, cc=cc)


def listing(path: Path) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs}
