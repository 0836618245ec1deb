"""GPUs through a fake NVML that fails the ways real drivers do."""
from __future__ import annotations

import pynvml
import pytest
from probe_trees import FakeNvml, gpu_dev, server_tree

from moeplan.probes.gpu import nvml_error_kind, read_gpus, sysfs_bus_id


@pytest.mark.parametrize("code, words", [
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "no NVIDIA driver"),
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver is not loaded"),
    (pynvml.NVML_ERROR_NO_PERMISSION, "no permission"),
    (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, "too old"),
    (pynvml.NVML_ERROR_UNKNOWN, "NVML failed"),
])
def test_init_failures_give_no_gpu_and_a_note(tmp_path, code, words):
    gpus, notes = read_gpus(FakeNvml(init_error=code), str(tmp_path))
    assert gpus == ()
    assert len(notes) == 1 and words in notes[0] and "CPU only" in notes[0]


def test_error_kinds_from_real_pynvml_classes():
    assert nvml_error_kind(pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)) == "library-not-found"
    assert nvml_error_kind(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)) == "not-supported"
    assert nvml_error_kind(pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)) == "function-not-found"


def test_bus_id_to_sysfs_form():
    assert sysfs_bus_id("00000000:C1:00.0") == "0000:c1:00.0"
    assert sysfs_bus_id(b"00000001:65:00.0") == "0001:65:00.0"


def test_zero_gpus(tmp_path):
    gpus, notes = read_gpus(FakeNvml([]), str(tmp_path))
    assert gpus == () and notes == ["NVML found no NVIDIA GPU"]


def test_not_supported_fields_fall_back_to_sysfs_or_unknown(tmp_path):
    root = str(server_tree(tmp_path))  # sysfs says: gen 5 (32 GT/s) x16, node 1
    fail = {name: pynvml.NVML_ERROR_NOT_SUPPORTED for name in (
        "nvmlDeviceGetMemoryBusWidth", "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkGeneration",
        "nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMaxPcieLinkWidth")}
    fail["nvmlDeviceGetTopologyCommonAncestor"] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    fail["nvmlDeviceGetUUID"] = pynvml.NVML_ERROR_NO_PERMISSION
    (g,), notes = read_gpus(FakeNvml([gpu_dev()], fail=fail), root)
    assert g.mem_bw_bytes_per_s is None  # no bus width: left for the catalog, not guessed here
    assert (g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max) == (5, 5, 16, 16)  # from sysfs
    assert g.uuid == "" and g.topology == ("X",) and g.vram_bytes == 97887 * 1024**2
    assert "nvmlDeviceGetMemoryBusWidth" in notes[-1] and "nvmlDeviceGetUUID" in notes[-1]


def test_function_missing_from_an_old_pynvml(tmp_path):
    class OldNvml(FakeNvml):
        nvmlDeviceGetTopologyCommonAncestor = None  # an old binding without the call

    dev = gpu_dev()
    (g,), notes = read_gpus(OldNvml([dev]), str(tmp_path))
    assert g.topology == ("X",) and g.numa_node is None  # no sysfs in this root either


def test_two_gpus_topology_and_link(tmp_path):
    a = gpu_dev(name="NVIDIA GeForce RTX 4090", bus="00000000:01:00.0", bus_bits=384, mem_mhz=10501, gen_max=4)
    b = gpu_dev(name="NVIDIA GeForce RTX 4090", bus="00000000:81:00.0", bus_bits=384, mem_mhz=10501, gen_max=4,
                width=8)
    topo = {("00000000:01:00.0", "00000000:81:00.0"): pynvml.NVML_TOPOLOGY_SYSTEM,
            ("00000000:81:00.0", "00000000:01:00.0"): pynvml.NVML_TOPOLOGY_SYSTEM}
    gpus, _ = read_gpus(FakeNvml([a, b], topo=topo), str(tmp_path))
    assert [g.topology for g in gpus] == [("X", "SYS"), ("SYS", "X")]
    assert gpus[1].pcie_width == 8 and gpus[1].pcie_width_max == 16
    assert gpus[0].compute_capability == "12.0" and gpus[0].vram_free_bytes == 96000 * 1024**2


def test_a_bug_in_the_caller_is_not_swallowed(tmp_path):
    class Broken(FakeNvml):
        def nvmlDeviceGetName(self, h):
            raise KeyError("bug")

    with pytest.raises(KeyError):
        read_gpus(Broken([gpu_dev()]), str(tmp_path))
