"""AMD GPUs and APUs (issue 34): the sysfs / AMD SMI probe on fake trees, the catalog's AMD
parts, an APU's iGPU priced as unified memory, and llama.cpp's ROCm / Vulkan device names."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pynvml
import pytest
from probe_trees import FakeNvml, _w, cpuinfo, write_cpus, write_node, write_proc
from typer.testing import CliRunner

from moeplan.check.parse import parse_log
from moeplan.cli import app
from moeplan.errors import InputError
from moeplan.planner.hardware.spec import SpecRequest
from moeplan.planner.hardware.vendors import build_options, default_build, device_names
from moeplan.planner.options import PlanOptions
from moeplan.probes.amd_gpu import import_amdsmi, read_amd_gpus
from moeplan.probes.probe import read_machine
from moeplan.profiles import catalog

GIB = 1024**3
NO_TOOLS = {"which": lambda name: None, "find_library": lambda name: None}
NO_DRIVER = FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
RUN = CliRunner()


# ---- fake trees -------------------------------------------------------------------------------

def write_amd_card(root: Path, card: int, bus: str, device_id: int, vram_bytes: int, vram_used: int,
                   gtt_bytes: int, gtt_used: int, link: str | None = "16.0 GT/s PCIe", width: int = 16,
                   numa_node: int = -1, product: str | None = None) -> None:
    """What amdgpu shows under /sys/class/drm/cardN/device (and a connector beside it)."""
    dev = f"/sys/class/drm/card{card}/device"
    _w(root, f"{dev}/vendor", "0x1002\n")
    _w(root, f"{dev}/device", f"{device_id:#06x}\n")
    _w(root, f"{dev}/uevent", f"DRIVER=amdgpu\nPCI_CLASS=30000\nPCI_SLOT_NAME={bus}\n")
    _w(root, f"{dev}/mem_info_vram_total", f"{vram_bytes}\n")
    _w(root, f"{dev}/mem_info_vram_used", f"{vram_used}\n")
    _w(root, f"{dev}/mem_info_gtt_total", f"{gtt_bytes}\n")
    _w(root, f"{dev}/mem_info_gtt_used", f"{gtt_used}\n")
    if link:
        for kind in ("current", "max"):
            _w(root, f"{dev}/{kind}_link_speed", link + "\n")
            _w(root, f"{dev}/{kind}_link_width", f"{width}\n")
    _w(root, f"{dev}/numa_node", f"{numa_node}\n")
    _w(root, f"{dev}/local_cpulist", "0-31\n")
    if product:
        _w(root, f"{dev}/product_name", product + "\n")
    _w(root, f"/sys/class/drm/card{card}-DP-1/status", "disconnected\n")  # a connector, not a GPU


def strix_halo_tree(root: Path, carve_out_gib: float = 0.5, gtt_gib: float = 120) -> Path:
    """A Ryzen AI Max+ 395 with 128 GiB: Linux sees 128 less the BIOS carve-out; the GTT raised."""
    write_cpus(root, n_sockets=1, cores_per_pkg=16, smt=2, l3_kb=32768, max_khz=5_100_000)
    _w(root, "/proc/cpuinfo", cpuinfo(32, "AMD RYZEN AI MAX+ 395 w/ Radeon 8060S", "fpu sse2 avx avx2 fma f16c avx512f",
                                      16, 2, vendor="AuthenticAMD"))
    mem = 128 - carve_out_gib
    write_node(root, 0, range(32), mem, mem - 4, [10])
    write_proc(root, mem, mem - 4)
    write_amd_card(root, 1, "0000:c5:00.0", 0x1586, int(carve_out_gib * GIB), 200 * 2**20,
                   int(gtt_gib * GIB), 1 * GIB, link=None)
    return root


class FakeSmi:
    """amdsmi's calls (amdsmi 7.0 names), one GPU per bus id."""

    def __init__(self, gpus: dict[str, dict], init_error: Exception | None = None) -> None:
        self.gpus, self.init_error, self.shut = gpus, init_error, False

    def amdsmi_init(self):
        if self.init_error:
            raise self.init_error

    def amdsmi_shut_down(self):
        self.shut = True

    def amdsmi_get_processor_handles(self):
        return list(self.gpus)

    def amdsmi_get_gpu_device_bdf(self, h):
        return h

    def amdsmi_get_gpu_asic_info(self, h):
        return self.gpus[h]["asic"]

    def amdsmi_get_gpu_vram_info(self, h):
        if "vram" not in self.gpus[h]:
            raise RuntimeError("AMDSMI_STATUS_NOT_SUPPORTED")
        return self.gpus[h]["vram"]

    def amdsmi_get_gpu_device_uuid(self, h):
        return "5fff74c0-0000-1000-80c3-8f5e2b1a4d00"


XTX_SMI = {"0000:03:00.0": {"asic": {"market_name": "AMD Radeon RX 7900 XTX", "device_id": "0x744c",
                                     "target_graphics_version": "gfx1100", "num_compute_units": 96},
                            "vram": {"vram_size": 24560, "vram_bit_width": 384, "vram_max_bandwidth": 960}}}


# ---- probe ------------------------------------------------------------------------------------

def test_no_amd_gpu_is_a_clean_none(tmp_path, capsys):
    gpus, notes = read_amd_gpus(str(tmp_path))
    assert gpus == () and notes == ["no AMD GPU (no amdgpu device with vendor 0x1002 under /sys/class/drm)"]
    assert capsys.readouterr() == ("", "")


def test_amdsmi_that_cannot_load_its_library_is_a_note_not_a_crash(tmp_path, monkeypatch, capsys):
    pkg = tmp_path / "fake" / "amdsmi"
    pkg.mkdir(parents=True)
    # what amdsmi 7.0.2 does without /opt/rocm/lib/libamd_smi.so: two prints, then KeyError
    (pkg / "__init__.py").write_text("print('Unable to find libamd_smi.so library')\nraise KeyError('libamd_smi.so')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "fake"))
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    smi, why = import_amdsmi()
    assert smi is None and "libamd_smi.so" in why
    assert capsys.readouterr() == ("", "")
    root = tmp_path / "tree"
    write_amd_card(root, 0, "0000:03:00.0", 0x744C, 24 * GIB, GIB, 16 * GIB, 0)
    gpus, notes = read_amd_gpus(str(root))
    assert len(gpus) == 1 and gpus[0].vram_bytes == 24 * GIB
    assert any("sysfs only" in n and "libamd_smi.so" in n for n in notes)


def test_a_card_from_sysfs_alone(tmp_path):
    write_amd_card(tmp_path, 0, "0000:03:00.0", 0x744C, 24 * GIB, 2 * GIB, 16 * GIB, 0, numa_node=0)
    (g,), notes = read_amd_gpus(str(tmp_path), use_smi=False)
    assert notes == []
    assert (g.vendor, g.source, g.pci_bus_id, g.name) == ("amd", "sysfs", "0000:03:00.0", "AMD GPU 0x744c")
    assert (g.vram_bytes, g.vram_free_bytes) == (24 * GIB, 22 * GIB)
    assert (g.pcie_gen, g.pcie_width, g.pcie_gen_max, g.pcie_width_max) == (4, 16, 4, 16)
    assert g.h2d_bytes_per_s.value == pytest.approx(31.5e9, rel=0.01)
    assert g.numa_node == 0 and not g.unified_memory and g.host_shared_bytes == 0


def test_amdsmi_names_the_card_and_gives_its_bandwidth(tmp_path):
    write_amd_card(tmp_path, 0, "0000:03:00.0", 0x744C, 24 * GIB, 2 * GIB, 16 * GIB, 0)
    smi = FakeSmi(XTX_SMI)
    (g,), notes = read_amd_gpus(str(tmp_path), smi=smi, first_index=2)
    assert smi.shut and notes == []
    assert (g.index, g.name, g.gfx_target) == (2, "AMD Radeon RX 7900 XTX", "gfx1100")
    assert g.mem_bw_bytes_per_s.value == 960e9 and "384-bit" in g.mem_bw_bytes_per_s.method
    assert g.uuid and not g.unified_memory


def test_amdsmi_failing_to_start_leaves_sysfs_figures(tmp_path):
    write_amd_card(tmp_path, 0, "0000:03:00.0", 0x744C, 24 * GIB, 2 * GIB, 16 * GIB, 0)
    (g,), notes = read_amd_gpus(str(tmp_path), smi=FakeSmi({}, init_error=RuntimeError("AMDSMI_STATUS_DRM_ERROR")))
    assert g.vram_bytes == 24 * GIB and g.mem_bw_bytes_per_s is None
    assert notes and "could not start" in notes[0]


def test_a_machine_with_a_7900xtx_gets_the_catalog_figures(tmp_path):
    strix = strix_halo_tree(tmp_path)  # reuse the CPU side; swap the iGPU for a card
    import shutil

    shutil.rmtree(strix / "sys/class/drm")
    write_amd_card(strix, 0, "0000:03:00.0", 0x744C, 24 * GIB, 2 * GIB, 16 * GIB, 0)
    m = read_machine(str(strix), NO_DRIVER, system_kwargs=NO_TOOLS, amd_smi=FakeSmi(XTX_SMI))
    (g,) = m.profile.gpus
    assert g.fp16_flop_per_s.value == pytest.approx(122.8e12)  # the catalog's, as for NVML GPUs
    assert g.mem_bw_bytes_per_s.achievable == catalog.efficiency().gpu_mem
    assert any(n.startswith("no NVIDIA GPU:") for n in m.notes)
    assert not any("planning for CPU only" in n for n in m.notes)


def test_strix_halo_igpu_shares_the_dram(tmp_path):
    root = strix_halo_tree(tmp_path)
    m = read_machine(str(root), NO_DRIVER, system_kwargs=NO_TOOLS, amd_smi=FakeSmi({}))
    p = m.profile
    (g,) = p.gpus
    assert g.name == "AMD Radeon 8060S" and g.unified_memory and g.gfx_target == "gfx1151"
    assert g.vram_bytes == int(120.5 * GIB)  # carve-out + GTT
    assert g.host_shared_bytes == 120 * GIB  # the GTT is in MemTotal, the carve-out is not
    assert p.ram_bytes == int(127.5 * GIB) - 120 * GIB
    assert g.pcie_gen is None and g.pcie_width is None
    # 4 x 64-bit channels of LPDDR5X-8000 (the catalog's Ryzen AI Max+ 395): 256 GB/s, the
    # host-to-GPU "link" is the same DRAM
    assert g.mem_bw_bytes_per_s.value == pytest.approx(256e9)
    assert g.h2d_bytes_per_s.value == pytest.approx(256e9)
    assert any("shares the host's DRAM" in n for n in m.notes)


def test_strix_halo_at_the_default_gtt_says_how_to_raise_it(tmp_path):
    root = strix_halo_tree(tmp_path, carve_out_gib=0.5, gtt_gib=63.75)  # Linux's default: half the RAM
    m = read_machine(str(root), NO_DRIVER, system_kwargs=NO_TOOLS, amd_smi=FakeSmi({}))
    assert any("ttm.pages_limit=" in n for n in m.notes)


# ---- catalog and spec profiles ----------------------------------------------------------------

@pytest.mark.parametrize("query, name, vram_gib, bw_gbps, pcie_gen, fp16_tflops, gfx", [
    ("RX 7900 XTX", "AMD Radeon RX 7900 XTX", 24, 960, 4, 122.8, "gfx1100"),
    ("Radeon RX 7900 XT", "AMD Radeon RX 7900 XT", 20, 800, 4, 103.0, "gfx1100"),
    ("7900 GRE", "AMD Radeon RX 7900 GRE", 16, 576, 4, 92.0, "gfx1100"),
    ("RX 9070 XT", "AMD Radeon RX 9070 XT", 16, 640, 5, 194.6, "gfx1201"),
    ("W7900", "AMD Radeon PRO W7900", 48, 864, 4, 122.6, "gfx1100"),
    ("MI210", "AMD Instinct MI210", 64, 1638.4, 4, 181.0, "gfx90a"),
    ("MI250", "AMD Instinct MI250", 64, 1638.4, 4, 181.0, "gfx90a"),  # one of its two GCDs
    ("AMD Instinct MI300X", "AMD Instinct MI300X", 192, 5300, 5, 1307.4, "gfx942"),
    ("MI325X", "AMD Instinct MI325X", 256, 6000, 5, 1307.4, "gfx942"),
    ("Radeon 8060S", "AMD Radeon 8060S", 0, 256, 0, 59.4, "gfx1151"),
    ("890M", "AMD Radeon 890M", 0, 120, 0, 23.8, "gfx1150"),
    ("Radeon 780M Graphics", "AMD Radeon 780M", 0, 120, 0, 16.6, "gfx1103"),
])
def test_amd_parts_resolve_with_their_figures(query, name, vram_gib, bw_gbps, pcie_gen, fp16_tflops, gfx):
    p = catalog.find_gpu(query)
    assert (p.name, p.vendor, p.gfx_target, p.pcie_gen) == (name, "amd", gfx, pcie_gen)
    assert (p.vram_bytes, p.mem_bw_bytes_per_s, p.fp16_flop_per_s) == (
        vram_gib * GIB, pytest.approx(bw_gbps * 1e9), pytest.approx(fp16_tflops * 1e12))
    assert p.unified == (vram_gib == 0) and "amd.com" in p.source


def test_ryzen_ai_max_parts():
    assert catalog.find_cpu("Ryzen AI Max+ 395").cores == 16
    c = catalog.find_cpu("Ryzen AI Max 385")
    assert (c.cores, c.channels, c.ram_type, c.ram_speed_mts, c.ccds) == (8, 4, "lpddr5x", 8000, 1)


def _spec(**kw):
    req = SpecRequest(**kw)
    return catalog.build_profile(req)


def test_spec_strix_halo_is_one_memory():
    p = _spec(gpu="Radeon 8060S", cpu="Ryzen AI Max+ 395", ram_bytes=128 * GIB)
    (g,) = p.gpus
    assert g.unified_memory and g.vendor == "amd"
    assert g.vram_bytes == g.host_shared_bytes == 120 * GIB  # the RAM less the 8 GiB the host keeps
    assert p.ram_bytes == 8 * GIB and p.system.ram_total_bytes == 128 * GIB
    assert g.mem_bw_bytes_per_s.value == pytest.approx(256e9) and g.h2d_bytes_per_s.value == pytest.approx(256e9)
    assert g.pcie_gen is None
    assert any("ttm.pages_limit=31457280" in n for n in p.notes)
    # a plan that fills 64 GiB of it leaves the rest to the host (the GTT is a limit, not a reservation)
    assert p.with_gpu_use(64 * GIB).ram_bytes == 64 * GIB


def test_spec_igpu_budget_and_errors():
    p = _spec(gpu="8060S", cpu="Ryzen AI Max+ 395", ram_bytes=128 * GIB, gpu_vram_bytes=96 * GIB)
    assert p.gpus[0].vram_bytes == 96 * GIB and p.ram_bytes == 32 * GIB
    with pytest.raises(InputError, match="more than the 64 GiB"):
        _spec(gpu="8060S", cpu="Ryzen AI Max+ 395", ram_bytes=64 * GIB, gpu_vram_bytes=96 * GIB)
    with pytest.raises(InputError, match="iGPU of an APU"):
        _spec(gpu="8060S", cpu="Ryzen AI Max+ 395", ram_bytes=128 * GIB, gpu_count=2)


def test_an_igpu_named_alone_brings_its_apu():
    p = _spec(gpu="Radeon 890M", ram_bytes=64 * GIB)
    assert p.cpu.model == "AMD Ryzen AI 9 HX 370" and p.cpu.source == "prior"
    assert p.gpus[0].unified_memory


def test_vram_what_if_on_an_apu_moves_the_split():
    from moeplan.planner.hardware.profile import apply_overrides

    p = apply_overrides(_spec(gpu="8060S", cpu="Ryzen AI Max+ 395", ram_bytes=128 * GIB), vram_bytes=100 * GIB)
    assert p.gpus[0].host_shared_bytes == 100 * GIB and p.ram_bytes == 28 * GIB


def _hw(tmp_path, *args) -> str:
    out = tmp_path / "hw.json"
    r = RUN.invoke(app, ["hardware", *args, "--out", str(out)])
    assert r.exit_code == 0, r.output
    return str(out)


def test_strix_halo_plan_keeps_every_expert_on_the_igpu(tmp_path):
    hw = _hw(tmp_path, "--gpu", "Radeon 8060S", "--cpu", "Ryzen AI Max+ 395", "--ram", "128G")
    r = RUN.invoke(app, ["tune", "gpt-oss-120b", "--hw", hw, "--json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)["plan"]
    assert plan["placement"]["cpu_moe_layers"] == []
    # every CPU-expert alternative is slower: the iGPU reads the same DRAM faster than the cores
    best = plan["estimate"]["decode_tok_s"]
    others = [a for a in plan["pareto"] if a["vram_bytes"] < plan["estimate"]["vram_bytes"] - GIB]
    assert others and all(a["decode_tok_s"] < best for a in others)
    assert any("shares the host's DRAM" in n and "save no memory" in n for n in plan["notes"])
    assert plan["placement"]["options"] == {"gpu_build": "vulkan", "gfx_target": "gfx1151", "unified_memory": True}


def test_launch_files_name_rocm_and_vulkan_devices(tmp_path):
    hw = _hw(tmp_path, "--gpu", "RX 7900 XTX:2", "--cpu", "Ryzen 9 7950X", "--ram", "192G")
    run = tmp_path / "run"
    r = RUN.invoke(app, ["tune", "qwen3-30b-a3b", "--hw", hw, "--gpus", "0,1", "--emit", str(run)])
    assert r.exit_code == 0, r.output
    launch, bench = (run / "launch.sh").read_text(), (run / "bench.sh").read_text()
    assert "-dev ROCm0,ROCm1" in launch and "-dev ROCm0/ROCm1" in bench and "CUDA" not in launch
    assert "-DGGML_HIP=ON -DGPU_TARGETS=gfx1100" in launch
    assert "GGML_CUDA_ENABLE_UNIFIED_MEMORY" not in launch  # a card has its own memory
    hw2 = _hw(tmp_path, "--gpu", "Radeon 8060S", "--cpu", "Ryzen AI Max+ 395", "--ram", "128G")
    run2 = tmp_path / "run2"
    r = RUN.invoke(app, ["tune", "qwen3-30b-a3b", "--hw", hw2, "--emit", str(run2)])
    assert r.exit_code == 0, r.output
    text = (run2 / "launch.sh").read_text()
    assert "Vulkan0" in text and "-DGGML_VULKAN=ON" in text and "unified memory" in text


def test_estimate_costs_a_plan_for_an_amd_gpu(tmp_path):
    # the build settings are plan options the cost model reads (at 47a6b1b it refused them:
    # "unknown plan option 'gpu_build'", and every ROCm/Vulkan row of the accuracy data was skipped)
    hw = _hw(tmp_path, "--gpu", "RX 7900 XTX", "--cpu", "Ryzen 9 7950X", "--ram", "192G")
    r = RUN.invoke(app, ["estimate", "qwen3-30b-a3b", "--hw", hw, "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["placement"]["options"] == {"gpu_build": "rocm", "gfx_target": "gfx1100"} and d["decode_tok_s"] > 0


def test_rocm_build_on_an_igpu_asks_for_managed_memory():
    from moeplan.launch.common import EmitContext
    from moeplan.launch.llamacpp import env_pairs

    class P:
        n_gpus = 1
        options = PlanOptions(gpu_build="rocm", unified_memory=True)

    class Plan:
        placement = P()

    ctx = EmitContext(plan=Plan(), model=None, flags={}, programs={})  # type: ignore[arg-type]
    assert ("GGML_CUDA_ENABLE_UNIFIED_MEMORY", "1") in env_pairs(ctx)


def test_device_names_follow_the_vendor():
    nv = _spec(gpu="RTX 4090", gpu_count=2, cpu="Ryzen 9 7950X", ram_bytes=128 * GIB)
    amd = _spec(gpu="MI300X", gpu_count=2, cpu="EPYC 9654", ram_bytes=768 * GIB)
    apu = _spec(gpu="8060S", cpu="Ryzen AI Max+ 395", ram_bytes=128 * GIB)
    assert device_names(nv, [0, 1]) == "CUDA0,CUDA1" and build_options(nv) == PlanOptions()
    assert device_names(amd, [1]) == "ROCm1" and build_options(amd) == PlanOptions(gpu_build="rocm",
                                                                                     gfx_target="gfx942")
    assert device_names(apu, [0]) == "Vulkan0" and default_build(apu.gpus[0]) == "vulkan"


@pytest.mark.parametrize("dev, host", [("ROCm0", "ROCm_Host"), ("Vulkan0", "Vulkan_Host")])
def test_check_reads_rocm_and_vulkan_logs(dev, host):
    log = (f"load_tensors: offloaded 49/49 layers to GPU\n"
           f"load_tensors:   CPU_Mapped model buffer size =   166.92 MiB\n"
           f"load_tensors: {host:>12} model buffer size =  3240.00 MiB\n"
           f"load_tensors: {dev:>12} model buffer size = 14508.94 MiB\n"
           f"llama_kv_cache: {dev:>12} KV buffer size =   384.00 MiB\n"
           f"llama_context: {dev:>12} compute buffer size =   300.75 MiB\n")
    run = parse_log(log)
    devices = {b.buffer_type for b in run.buffers}
    assert dev in devices and host in devices
    on_gpu = sum(b.mib for b in run.buffers if b.buffer_type == dev)
    assert on_gpu == pytest.approx(14508.94 + 384.00 + 300.75)


def test_vulkan_plan_with_bf16_weights_warns(tmp_path):
    hw = _hw(tmp_path, "--gpu", "Radeon 8060S", "--cpu", "Ryzen AI Max+ 395", "--ram", "128G")
    run = tmp_path / "run"
    r = RUN.invoke(app, ["tune", "qwen3.5-35b-a3b", "--quant", "BF16", "--hw", hw, "--emit", str(run)])
    assert r.exit_code == 0, r.output
    assert "bf16: 0" in (run / "launch.sh").read_text()


def test_ram_what_if_on_an_apu_keeps_the_igpu_share():
    from moeplan.planner.hardware.profile import apply_overrides

    p = apply_overrides(_spec(gpu="8060S", cpu="Ryzen AI Max+ 395", ram_bytes=128 * GIB), ram_bytes=64 * GIB)
    assert p.gpus[0].vram_bytes == p.gpus[0].host_shared_bytes == 60 * GIB and p.ram_bytes == 4 * GIB
