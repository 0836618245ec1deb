"""Readers of sysfs/procfs/DMI on fake trees: a laptop, a two-socket server with the GPU on
node 1, a VM with numa_node = -1, a CPU-less memory node."""
from __future__ import annotations

import os

import pynvml
import pytest
from probe_trees import FakeNvml, dimm_raw, gpu_dev, laptop_tree, memory_only_tree, server_tree, vm_tree

from moeplan.planner.hardware.profile import format_cpulist
from moeplan.probes.cpu import read_cpu
from moeplan.probes.dmi import parse_type17, read_dimms
from moeplan.probes.fsread import parse_cpulist
from moeplan.probes.load import busy_fraction, parse_cpu_times, parse_loadavg
from moeplan.probes.numa import nearest_cpu_node, read_numa_nodes
from moeplan.probes.probe import read_machine
from moeplan.probes.storage import parse_mountinfo, read_storage_device
from moeplan.probes.system import parse_thp, read_cgroup_limit, read_system

GIB = 1024**3
NO_TOOLS = {"which": lambda name: None, "find_library": lambda name: None}
NO_DRIVER = FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)


def test_cpulist_round_trip():
    assert parse_cpulist("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert format_cpulist((0, 1, 2, 3, 8, 10, 11)) == "0-3,8,10-11"
    assert parse_cpulist("") == () and format_cpulist([]) == ""


def test_laptop(tmp_path):
    root = str(laptop_tree(tmp_path))
    cpu, topo = read_cpu(root)
    assert (cpu.n_sockets, cpu.n_cores, cpu.n_threads) == (1, 4, 8)
    assert cpu.vendor == "amd" and "avx512f" in cpu.isa and "amx_tile" not in cpu.isa
    assert cpu.l3_bytes == 16 * 1024**2  # one L3 shared by all 8 CPUs, counted once
    assert cpu.max_clock_hz == 4e9
    assert topo.first_cpus() == (0, 1, 2, 3)  # one CPU per physical core, siblings 4-7 left out
    (node,) = read_numa_nodes(root, topo)
    assert node.cpus == tuple(range(8)) and node.n_physical_cores == 4 and not node.memory_only
    assert node.mem_free_bytes == 20 * GIB
    s = read_system(root, **NO_TOOLS)
    assert s.thp == "madvise" and s.numa_balancing == 0 and s.swap_total_bytes == 8 * GIB
    assert s.cgroup_limit_bytes is None and s.cgroup_version == 1  # v1 "unlimited" is a huge number
    assert not s.is_vm and s.hostname == "box" and s.os.startswith("Debian")
    m = read_machine(root, NO_DRIVER, system_kwargs=NO_TOOLS)
    assert m.profile.gpus == ()
    assert any("no NVIDIA driver" in n for n in m.notes)


def test_server_gpu_on_node1(tmp_path):
    root = str(server_tree(tmp_path))
    nvml = FakeNvml([gpu_dev()])
    m = read_machine(root, nvml, system_kwargs=NO_TOOLS)
    p = m.profile
    assert (p.cpu.n_sockets, p.cpu.n_cores, p.cpu.n_threads) == (2, 16, 32)
    assert p.cpu.l3_bytes == 2 * 60 * 1024**2
    n0, n1 = p.numa_nodes
    assert n0.distances == (10, 21) and n1.distances == (21, 10)
    assert n1.n_physical_cores == 8 and n1.cpus == tuple(range(8, 16)) + tuple(range(24, 32))
    (g,) = p.gpus
    assert g.numa_node == 1 and g.local_cpus == "8-15,24-31" and g.pci_bus_id == "0000:c1:00.0"
    # 512-bit GDDR7 at 14001 MHz x 2 / 8 = 1792 GB/s, NVML's theoretical figure
    assert g.mem_bw_bytes_per_s.value == pytest.approx(1792.128e9) and g.mem_bw_bytes_per_s.source == "nvml"
    assert g.mem_bw_bytes_per_s.achievable < 1  # a peak, with the catalog's achievable fraction
    assert g.fp16_flop_per_s.source == "spec-sheet"  # NVML has no FLOP rate: from the parts catalog
    assert g.h2d_bytes_per_s.value == pytest.approx(63.015e9, rel=1e-3)  # gen 5 x16 max link
    # DMI: 4 populated DDR5 DIMMs running at 5200 (rated 5600); the empty slot is skipped
    assert (p.cpu.ram_type, p.cpu.ram_speed_mts, p.cpu.n_dimms, p.cpu.memory_source) == ("ddr5", 5200, 4, "dmi")
    assert p.cpu.memory_channels == 16  # Xeon Gold 6548Y+ spec sheet: 8 per socket
    from moeplan.planner.hardware.profile import profile_warnings

    w = " | ".join(profile_warnings(p))
    assert "numa_balancing is on" in w
    assert "GPU 0 hangs off node 1" in w and "node 0 has 200.0 GiB free" in w
    assert "use --threads 16" in w
    assert nvml.shutdowns == 1


def test_vm_with_numa_node_minus_one(tmp_path):
    root = str(vm_tree(tmp_path))
    m = read_machine(root, FakeNvml([gpu_dev(name="NVIDIA GeForce RTX 4090", bus="00000000:00:05.0",
                                             bus_bits=384, mem_mhz=10501, gen_max=4)]), system_kwargs=NO_TOOLS)
    p = m.profile
    assert p.system.is_vm and p.system.vm_vendor.startswith("QEMU")
    assert p.system.cgroup_limit_bytes == 8 * GIB and p.system.cgroup_version == 2
    (g,) = p.gpus
    assert g.numa_node is None and g.local_cpus == "0-3"
    assert g.mem_bw_bytes_per_s.value == pytest.approx(1008.096e9)
    assert p.cpu.memory_channels == 12  # EPYC 9654 matched from "AMD EPYC 9654 96-Core Processor"
    assert p.cpu.memory_source == "spec-sheet"  # DMI not there: rated speed, said so in a note
    assert any("rated maximum" in n for n in m.notes)
    from moeplan.planner.hardware.profile import profile_warnings

    w = " | ".join(profile_warnings(p))
    assert "running in a VM (QEMU" in w and "limited to 8.0 GiB by a cgroup" in w
    assert "NUMA node unknown" not in w  # one node: nothing to bind to


def test_memory_only_node(tmp_path):
    root = str(memory_only_tree(tmp_path))
    cpu, topo = read_cpu(root)
    nodes = read_numa_nodes(root, topo)
    assert [n.memory_only for n in nodes] == [False, True]
    assert nodes[1].cpus == () and nodes[1].n_physical_cores == 0 and nodes[1].mem_total_bytes == 128 * GIB
    assert nearest_cpu_node(nodes, 1).id == 0


def test_no_numa_folder_means_one_node(tmp_path):
    laptop_tree(tmp_path)
    import shutil

    shutil.rmtree(tmp_path / "sys/devices/system/node")
    cpu, topo = read_cpu(str(tmp_path))
    (node,) = read_numa_nodes(str(tmp_path), topo)
    assert node.cpus == tuple(range(8)) and node.mem_total_bytes == int(30.5 * GIB) // 1024 * 1024


def test_topology_from_cpuinfo_when_sysfs_lacks_it(tmp_path):
    laptop_tree(tmp_path)
    for cpu in range(8):
        os.remove(tmp_path / f"sys/devices/system/cpu/cpu{cpu}/topology/core_cpus_list")
    cpu, topo = read_cpu(str(tmp_path))
    assert cpu.n_cores == 4 and cpu.n_threads == 8  # 'core id' pairs 0/4, 1/5, ...


def test_py_cpuinfo_only_as_fallback(tmp_path):
    laptop_tree(tmp_path)
    called = []

    def fallback():
        called.append(1)
        return {"brand_raw": "Fallback CPU", "flags": ["avx2"], "vendor_id_raw": "GenuineIntel"}

    cpu, _ = read_cpu(str(tmp_path), fallback=fallback)
    assert not called and cpu.source == "procfs"
    (tmp_path / "proc/cpuinfo").write_text("processor\t: 0\n\n")
    cpu, _ = read_cpu(str(tmp_path), fallback=fallback)
    assert called and cpu.model == "Fallback CPU" and cpu.isa == ("avx2",) and cpu.source == "py-cpuinfo"


def test_dmi_type17():
    d = parse_type17(dimm_raw(16384, 0x22, 6400, 5600))
    assert (d.size_bytes, d.ram_type, d.speed_mts, d.configured_mts) == (16 * GIB, "ddr5", 6400, 5600)
    assert parse_type17(dimm_raw(0, 0x1A, 0, 0)) is None  # empty slot
    assert parse_type17(b"\x11\x05") is None  # truncated
    assert parse_type17(dimm_raw(0x7FFF, 0x1A, 3200, 3200)[:0x1C] + (40960).to_bytes(4, "little")
                        + bytes(8)).size_bytes == 40 * GIB  # extended size field


def test_dimms_unreadable_without_root(tmp_path):
    assert read_dimms(str(tmp_path)) == ()


def test_cgroup_v2_takes_the_smallest_limit_up_the_tree(tmp_path):
    vm_tree(tmp_path)
    (tmp_path / "sys/fs/cgroup/machine.slice/memory.max").write_text(f"{4 * GIB}\n")
    assert read_cgroup_limit(str(tmp_path)) == (4 * GIB, 2)


def test_thp_and_load_parsers():
    assert parse_thp("[always] madvise never") == "always"
    assert parse_loadavg("1.50 1.00 0.50 2/300 999") == 1.5
    a = parse_cpu_times("cpu  100 0 100 800 0 0 0 0 0 0")
    b = parse_cpu_times("cpu  200 0 200 1000 0 0 0 0 0 0")
    assert busy_fraction(a, b) == pytest.approx(0.5)  # 200 busy ticks of 400
    assert busy_fraction(a, a) is None


def test_storage_device_from_fake_sysfs(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"x" * 8192)
    st = os.stat(model)
    devno = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    root = tmp_path / "root"
    disk = root / "sys/devices/pci0000:00/nvme/nvme0n1"
    (disk / "nvme0n1p2").mkdir(parents=True)
    (disk / "nvme0n1p2/partition").write_text("2\n")
    (disk / "queue").mkdir()
    (disk / "queue/rotational").write_text("0\n")
    (disk / "device").mkdir()
    (disk / "device/model").write_text("Samsung SSD 990 PRO 2TB\n")
    (root / "sys/dev/block").mkdir(parents=True)
    os.symlink(os.path.relpath(disk / "nvme0n1p2", root / "sys/dev/block"), root / f"sys/dev/block/{devno}")
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/mountinfo").write_text(f"22 1 {devno} / / rw,relatime - ext4 /dev/nvme0n1p2 rw\n")
    s = read_storage_device(str(root), str(model))
    assert (s.device, s.rotational, s.device_model, s.fs_type, s.file_bytes) == \
        ("nvme0n1", False, "Samsung SSD 990 PRO 2TB", "ext4", 8192)
    assert parse_mountinfo("36 35 98:0 /mnt1 /mnt/my\\040disk rw - xfs /dev/sdb rw") == [("/mnt/my disk", "98:0", "xfs")]
