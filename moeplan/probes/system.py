"""OS, memory, cgroup limit, hugepages, THP, swap, numa_balancing, numactl/libnuma, VM."""
from __future__ import annotations

import ctypes.util
import shutil
from collections.abc import Callable

from moeplan.planner.hardware.profile import System
from moeplan.probes.fsread import kib_field, parse_kv_lines, read_int, read_text

# a cgroup v1 "no limit" is PAGE_COUNTER_MAX rounded to pages: anything this large is unlimited
_UNLIMITED = 1 << 60
# DMI vendor / product strings of common hypervisors and clouds
_VM_DMI = ("qemu", "kvm", "vmware", "virtualbox", "innotek", "xen", "bochs", "amazon ec2",
           "google compute engine", "openstack", "parallels", "bhyve", "cloud hypervisor", "firecracker")


def parse_meminfo(text: str | None) -> dict[str, int]:
    """/proc/meminfo -> bytes for the fields we use (HugePages_* are counts)."""
    f = parse_kv_lines(text)
    out = {}
    for key in ("MemTotal", "MemFree", "MemAvailable", "SwapTotal", "Hugepagesize"):
        v = kib_field(f, key)
        if v is not None:
            out[key] = v
    for key in ("HugePages_Total", "HugePages_Free"):
        if key in f and f[key].split()[0].isdigit():
            out[key] = int(f[key].split()[0])
    return out


def parse_thp(text: str | None) -> str:
    """'always [madvise] never' -> 'madvise'."""
    if not text:
        return ""
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return text.strip()


def read_cgroup_limit(root: str) -> tuple[int | None, int | None]:
    """(memory limit in bytes or None, cgroup version or None) of this process.

    v2: the smallest memory.max on the path from this cgroup up to the root; v1: the
    memory controller's memory.limit_in_bytes (at the process's path, else at the mount's root,
    which is what a container sees)."""
    text = read_text(root, "/proc/self/cgroup") or ""
    v1_path = v2_path = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2_path = parts[2]
        elif "memory" in parts[1].split(","):
            v1_path = parts[2]
    if v1_path is not None:
        for p in (v1_path, "/"):
            val = read_int(root, f"/sys/fs/cgroup/memory{p.rstrip('/')}/memory.limit_in_bytes")
            if val is not None:
                return (val if val < _UNLIMITED else None), 1
    if v2_path is not None:
        limits = []
        path = v2_path.rstrip("/")
        found = False
        while True:
            t = read_text(root, f"/sys/fs/cgroup{path}/memory.max")
            if t is not None:
                found = True
                if t.strip().isdigit():
                    limits.append(int(t.strip()))
            if not path:
                break
            path = path.rsplit("/", 1)[0]
        if found:
            return (min(limits) if limits else None), 2
    return None, None


def _os_name(root: str) -> str:
    rel = parse_kv_lines(read_text(root, "/etc/os-release"), "=")
    return rel.get("PRETTY_NAME", "").strip('"') or "Linux"


def detect_vm(root: str, cpu_flags: set[str]) -> tuple[bool, str]:
    """(is a VM, vendor). The CPUID 'hypervisor' flag is set by every mainstream hypervisor;
    DMI names the vendor where firmware exposes it."""
    vendor_text = " ".join(filter(None, (
        read_text(root, "/sys/class/dmi/id/sys_vendor"), read_text(root, "/sys/class/dmi/id/product_name"),
        read_text(root, "/sys/hypervisor/type")))).strip()
    low = vendor_text.lower()
    dmi_vm = any(v in low for v in _VM_DMI) or "virtual machine" in low
    if "hypervisor" in cpu_flags or dmi_vm:
        return True, " ".join(vendor_text.split()) if dmi_vm else ""
    return False, ""


def read_system(root: str = "/", cpu_flags: set[str] | None = None,
                which: Callable[[str], str | None] = shutil.which,
                find_library: Callable[[str], str | None] = ctypes.util.find_library) -> System:
    mem = parse_meminfo(read_text(root, "/proc/meminfo"))
    limit, cg_version = read_cgroup_limit(root)
    if cpu_flags is None:
        first = (read_text(root, "/proc/cpuinfo") or "")
        cpu_flags = set()
        for line in first.splitlines():
            if line.startswith("flags"):
                cpu_flags = set(line.split(":", 1)[1].split())
                break
    is_vm, vm_vendor = detect_vm(root, cpu_flags)
    return System(
        os=_os_name(root),
        kernel=(read_text(root, "/proc/sys/kernel/osrelease") or "").strip(),
        hostname=(read_text(root, "/proc/sys/kernel/hostname") or "").strip(),
        is_vm=is_vm,
        vm_vendor=vm_vendor,
        ram_total_bytes=mem.get("MemTotal", 0),
        ram_available_bytes=mem.get("MemAvailable"),
        cgroup_limit_bytes=limit,
        cgroup_version=cg_version,
        swap_total_bytes=mem.get("SwapTotal", 0),
        hugepages_total=mem.get("HugePages_Total", 0),
        hugepages_free=mem.get("HugePages_Free", 0),
        hugepage_bytes=mem.get("Hugepagesize", 0),
        thp=parse_thp(read_text(root, "/sys/kernel/mm/transparent_hugepage/enabled")),
        numa_balancing=read_int(root, "/proc/sys/kernel/numa_balancing"),
        numactl=which("numactl") is not None,
        libnuma=find_library("numa") is not None,
    )
