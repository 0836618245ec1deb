"""Spec-only profiles: the parts catalog, numeric overrides, numbers alone, what-if overrides."""
from __future__ import annotations

import pytest

from moeplan.errors import InputError
from moeplan.planner.hardware.profile import apply_overrides
from moeplan.planner.hardware.spec import SpecRequest
from moeplan.profiles import catalog

GIB = 1024**3


def build(**kw):
    return catalog.build_profile(SpecRequest(**kw))


@pytest.mark.parametrize("name", [
    "RTX 2080 Ti", "RTX 3060", "RTX 3090", "RTX 4060 Ti", "RTX 4090", "RTX 5060 Ti", "RTX 5080", "RTX 5090",
    "RTX A4000", "RTX A5000", "RTX A6000", "RTX 6000 Ada", "RTX PRO 6000 Blackwell", "RTX PRO 6000 Blackwell Max-Q",
    "L40S", "A100", "H100", "H200"])
def test_catalog_has_the_gpus_the_issue_lists(name):
    assert catalog.find_gpu(name)


@pytest.mark.parametrize("name", [
    "Ryzen 9 7950X", "Ryzen 7 9800X3D", "Ryzen 7 5800X", "Threadripper 7980X", "Threadripper PRO 7995WX",
    "EPYC 7763", "EPYC 9654", "EPYC 9355", "EPYC 9175F", "Xeon Platinum 8380", "Xeon Gold 6454S",
    "Xeon Gold 6548Y+", "Xeon 6980P", "Core i9-14900K", "Core i9-13900K"])
def test_catalog_has_the_cpus_the_issue_lists(name):
    assert catalog.find_cpu(name)


def test_catalog_agrees_with_the_calibration_lookups():
    # lookup_* fields of benchmarks/data/measurements.jsonl
    g = catalog.find_gpu("RTX Pro 6000 Blackwell Workstation Edition")
    assert (g.vram_bytes, g.mem_bw_bytes_per_s, g.pcie_gen, g.pcie_width) == (96 * GIB, 1792e9, 5, 16)
    g = catalog.find_gpu("RTX 5060 Ti")
    assert (g.vram_bytes, g.mem_bw_bytes_per_s, g.pcie_gen, g.pcie_width) == (16 * GIB, 448e9, 5, 8)
    for name, cores, ch, ram, speed in (("Xeon Gold 6548Y+", 32, 8, "ddr5", 5200), ("Xeon Gold 6454S", 32, 8, "ddr5", 4800),
                                        ("EPYC 9175F", 16, 12, "ddr5", 6000), ("Ryzen 9 7950X", 16, 2, "ddr5", 5200),
                                        ("Core i9-14900K", 24, 2, "ddr5", 5600), ("Ryzen 7 5800X", 8, 2, "ddr4", 3200)):
        c = catalog.find_cpu(name)
        assert (c.cores, c.channels, c.ram_type, c.ram_speed_mts) == (cores, ch, ram, speed), name


def test_full_names_from_nvml_and_cpuinfo_match_strictly():
    assert catalog.match_gpu("NVIDIA GeForce RTX 4090 D").name == "NVIDIA GeForce RTX 4090 D"
    assert catalog.match_gpu("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition").name.endswith("Max-Q")
    assert catalog.match_cpu("AMD Ryzen 9 7950X3D 16-Core Processor").name == "AMD Ryzen 9 7950X3D"
    assert catalog.match_cpu("Intel(R) Xeon(R) Processor") is None  # a VM's generic name: no guess


def test_unknown_part_gives_close_matches_and_the_numbers_hint():
    with pytest.raises(InputError) as e:
        catalog.find_gpu("RTX 4095")
    assert "NVIDIA GeForce RTX 4090" in e.value.hint and "--gpu-vram" in e.value.hint
    with pytest.raises(InputError) as e:
        catalog.find_cpu("EPYC")
    assert "several parts" in e.value.message and "--cores" in e.value.hint


def test_seed_machine_from_the_catalog():
    p = build(gpu="RTX PRO 6000 Blackwell", cpu="Xeon Gold 6548Y+", sockets=2, ram_bytes=512 * GIB)
    c = p.cpu
    assert (c.n_sockets, c.n_cores, c.n_threads, c.memory_channels) == (2, 64, 128, 16)
    assert len(p.numa_nodes) == 2 and [n.n_physical_cores for n in p.numa_nodes] == [32, 32]
    assert [n.mem_total_bytes for n in p.numa_nodes] == [256 * GIB] * 2
    d = p.numa_nodes[0].dram_read_bytes_per_s
    # 8 channels x 5200 MT/s x 8 B = 332.8 GB/s per socket, DDR5 read efficiency 0.80
    assert d.value == pytest.approx(332.8e9) and d.achievable == 0.8 and d.source == "spec-sheet"
    assert d.effective == pytest.approx(266.24e9)
    g = p.gpus[0]
    assert g.numa_node == 0 and g.local_cpus == "0-31,64-95"
    assert g.h2d_bytes_per_s.value == pytest.approx(16 * 32e9 * 128 / 130 / 8) and g.h2d_bytes_per_s.achievable == 0.8
    assert c.core_read_bytes_per_s.source == "prior"  # no spec sheet gives it, and it says so
    assert c.core_flop_per_s.value == pytest.approx(2.5e9 * 64) and c.core_flop_per_s.source == "spec-sheet"
    assert p.numa_nodes[0].distances == (10, 21)
    assert p.spec_inputs["cpu"] == "Xeon Gold 6548Y+"


def test_numbers_alone_give_the_same_machine():
    a = build(gpu="RTX PRO 6000 Blackwell", cpu="Xeon Gold 6548Y+", sockets=2, ram_bytes=512 * GIB)
    b = build(gpu_vram_bytes=96 * GIB, gpu_bw_bytes_per_s=1792e9, pcie_gen=5, pcie_width=16, cores=32, threads=64,
              sockets=2, channels=8, ram_type="ddr5", ram_speed_mts=5200, ram_bytes=512 * GIB, cpu_ghz=2.5,
              isa=("avx2", "avx512f"))
    na, nb = a.numa_nodes[0].dram_read_bytes_per_s, b.numa_nodes[0].dram_read_bytes_per_s
    assert nb.value == na.value and nb.achievable == na.achievable and nb.source == "user"
    assert b.gpus[0].vram_bytes == a.gpus[0].vram_bytes
    assert b.gpus[0].h2d_bytes_per_s.value == a.gpus[0].h2d_bytes_per_s.value
    assert b.gpus[0].mem_bw_bytes_per_s.source == "user" and b.gpus[0].fp16_flop_per_s is None
    assert b.cpu.n_cores == 64 and b.cpu.core_flop_per_s.value == pytest.approx(2.5e9 * 64)
    assert any("FP16 rate unknown" in n for n in b.notes)


def test_numeric_overrides_win_over_the_catalog():
    p = build(gpu="RTX 4090", gpu_vram_bytes=48 * GIB, gpu_count=2, cpu="EPYC 9355", sockets=2, channels=8,
              ram_speed_mts=6400, ram_bytes=768 * GIB)
    assert [g.vram_bytes for g in p.gpus] == [48 * GIB] * 2 and p.gpu_vram_bytes == 96 * GIB
    assert p.gpus[0].mem_bw_bytes_per_s.value == 1008e9 and p.gpus[0].mem_bw_bytes_per_s.source == "spec-sheet"
    d = p.numa_nodes[0].dram_read_bytes_per_s
    assert d.value == pytest.approx(8 * 6400e6 * 8) and d.source == "user"
    assert p.cpu.memory_channels == 16 and p.cpu.memory_source == "user"


def test_fabric_caps_single_ccd_ryzen():
    p = build(gpu="RTX 5080", cpu="Ryzen 7 9800X3D", ram_bytes=64 * GIB)
    d = p.numa_nodes[0].dram_read_bytes_per_s
    # DDR5-5600 x 2 channels = 89.6 GB/s, but one CCD reads 32 B x 2.0 GHz = 64 GB/s (x 0.9)
    assert d.value == pytest.approx(89.6e9) and d.effective == pytest.approx(64e9 * 0.9)


def test_numa_nodes_split_sockets():
    p = build(cpu="EPYC 9654", sockets=2, numa_nodes=4, ram_bytes=768 * GIB)
    assert [n.n_physical_cores for n in p.numa_nodes] == [48] * 4 and p.gpus == ()
    assert p.numa_nodes[0].dram_read_bytes_per_s.value == pytest.approx(6 * 4800e6 * 8)
    # the other NPS2 node of its socket is 12 away (as Linux reports SNC / NPS), the other socket 32
    assert p.numa_nodes[1].distances == (12, 10, 32, 32)


@pytest.mark.parametrize("kw, words", [
    (dict(cpu="Ryzen 9 7950X"), "--ram is required"),
    (dict(ram_bytes=GIB), "CPU is unknown"),
    (dict(cpu="Ryzen 9 7950X", sockets=2, ram_bytes=GIB), "at most 1 socket"),
    (dict(cores=15, sockets=2, numa_nodes=4, ram_bytes=GIB), "do not split evenly"),
    (dict(cores=8, gpu="RTX 4090", gpu_node=1, ram_bytes=GIB), "--gpu-node 1 does not exist"),
    (dict(cores=8, gpu_count=1, ram_bytes=GIB), "--gpu-count needs a GPU"),
    (dict(cores=8, disk="floppy", ram_bytes=GIB), "unknown disk class"),
    (dict(cores=8, threads=4, ram_bytes=GIB), "less than --cores"),
])
def test_bad_requests_are_input_errors(kw, words):
    with pytest.raises(InputError) as e:
        build(**kw)
    assert words in e.value.message and e.value.hint


def test_apply_overrides_is_a_pure_what_if():
    from dataclasses import replace

    p = build(gpu="RTX 4090", cpu="EPYC 9654", sockets=2, ram_bytes=768 * GIB)
    used = replace(p, gpus=(replace(p.gpus[0], vram_free_bytes=20 * GIB),),
                   system=replace(p.system, ram_available_bytes=700 * GIB),
                   numa_nodes=tuple(replace(n, mem_free_bytes=350 * GIB) for n in p.numa_nodes))
    q = apply_overrides(used, vram_bytes=96 * GIB, ram_bytes=1024 * GIB)
    assert q.gpus[0].vram_bytes == 96 * GIB and q.gpus[0].vram_free_bytes == 92 * GIB  # 4 GiB stays used
    assert q.system.ram_total_bytes == 1024 * GIB and q.system.ram_available_bytes == 956 * GIB
    assert [n.mem_total_bytes for n in q.numa_nodes] == [512 * GIB] * 2
    assert [n.mem_free_bytes for n in q.numa_nodes] == [478 * GIB] * 2
    assert q.numa_nodes[0].dram_read_bytes_per_s == p.numa_nodes[0].dram_read_bytes_per_s  # rates stay
    assert used.gpus[0].vram_bytes == 24 * GIB  # the input is untouched
    two = build(gpu="RTX 4090", gpu_count=2, cores=8, ram_bytes=64 * GIB)
    assert [g.vram_bytes for g in apply_overrides(two, vram_bytes=96 * GIB).gpus] == [48 * GIB] * 2  # a total
    assert any(n.startswith("what-if: VRAM") for n in q.notes)
    assert apply_overrides(p) == p
    with pytest.raises(InputError):
        apply_overrides(build(cores=8, ram_bytes=GIB), vram_bytes=GIB)
    with pytest.raises(InputError):
        apply_overrides(p, ram_bytes=0)


def test_a_server_part_caps_channels_and_ddr4_speed_at_its_own():
    # 8 DIMMs of DDR4-2666 on a 4-channel Broadwell-EP rated for DDR4-2133
    p = build(cpu="Xeon E5-2630 v4", channels=8, ram_speed_mts=2666, ram_bytes=256 * GIB)
    assert p.cpu.memory_channels == 4 and p.cpu.ram_speed_mts == 2133
    assert p.numa_nodes[0].dram_read_bytes_per_s.value == pytest.approx(4 * 2133e6 * 8)
    assert any("4 memory channels" in n for n in p.notes) and any("at most at 2133" in n for n in p.notes)
    # a desktop part keeps an XMP/EXPO speed above its rating
    d = build(cpu="Ryzen 9 7950X", ram_speed_mts=6000, ram_bytes=64 * GIB)
    assert d.cpu.ram_speed_mts == 6000


def test_a_gpu_alone_gets_a_stand_in_desktop_cpu_with_a_prior_s_uncertainty():
    from moeplan.planner.cost.estimate import estimate
    from moeplan.planner.placement import Placement
    from moeplan.profiles.backends import read_priors
    from moeplan.profiles.model_profiles import load_profile

    ada = build(gpu="RTX 4060 Ti", ram_bytes=64 * GIB)
    assert ada.cpu.model == "AMD Ryzen 7 9700X" and ada.cpu.ram_type == "ddr5" and ada.cpu.source == "prior"
    assert ada.numa_nodes[0].dram_read_bytes_per_s.source == "prior"
    assert any(n.startswith("CPU not given") and "--cpu" in n for n in ada.notes)
    # an Ampere card: a DDR4 desktop; --ram-type and --ram-speed are kept
    assert build(gpu="RTX 3090", ram_bytes=64 * GIB).cpu.model == "AMD Ryzen 7 5800X"
    ddr5 = build(gpu="RTX 3090", ram_bytes=64 * GIB, ram_type="ddr5", ram_speed_mts=6000)
    assert (ddr5.cpu.model, ddr5.cpu.ram_speed_mts) == ("AMD Ryzen 7 9700X", 6000)
    # the same desktop named: the same figures, a narrower decode range
    named = build(gpu="RTX 4060 Ti", ram_bytes=64 * GIB, cpu="Ryzen 7 9700X")
    m, pr = load_profile("qwen3.5-35b-a3b", quant="Q4_K_M"), read_priors("llama.cpp")
    p = Placement(cpu_moe_layers=tuple(range(20)), n_threads=8)
    a, b = estimate(m, p, ada, pr), estimate(m, p, named, pr)
    assert a.decode_tok_s == pytest.approx(b.decode_tok_s)
    assert any("CPU not named" in n for n in a.notes) and not any("CPU not named" in n for n in b.notes)
    (alo, ahi), (blo, bhi) = a.decode_tok_s_range, b.decode_tok_s_range
    assert ahi / alo > bhi / blo
    # more RAM than a desktop platform takes: a single-socket server stands in
    big = build(gpu="RTX 3090", gpu_count=4, ram_bytes=512 * GIB)
    assert big.cpu.model == "AMD EPYC 7543" and any("single-socket server" in n for n in big.notes)
    assert build(gpu="RTX 4090", ram_bytes=384 * GIB).cpu.model == "AMD EPYC 9354"
    # nothing at all about the CPU and no GPU: still an error
    with pytest.raises(InputError, match="CPU is unknown"):
        build(ram_bytes=64 * GIB)


def test_stand_in_spread_is_the_catalog_s_spread():
    import math

    from moeplan.planner.cost.estimate import STAND_IN_CPU_LOG_SPREAD

    def rate(name):
        hw = build(cpu=name, ram_bytes=512 * GIB, numa_nodes=1)
        return hw.numa_nodes[0].dram_read_bytes_per_s.effective

    for segment, ref in (("desktop", catalog.STAND_IN_CPU["ddr5"]), ("server", catalog.STAND_IN_SERVER_CPU["ddr5"])):
        logs = sorted(math.log(rate(p.name) / rate(ref)) for p in catalog.cpu_parts()
                      if p.segment == segment and not p.mobile)
        assert len(logs) > 40

        def q(x, logs=logs):
            i = x * (len(logs) - 1)
            lo = int(i)
            return logs[lo] + (logs[min(lo + 1, len(logs) - 1)] - logs[lo]) * (i - lo)

        assert pytest.approx((q(0.9) - q(0.1)) / 2, abs=0.02) == STAND_IN_CPU_LOG_SPREAD[segment], segment


def test_xeon_6900p_defaults_to_snc3_sub_numa_nodes():
    from moeplan.planner.cost.estimate import RHO_SUB_NUMA, resolve_factors
    from moeplan.planner.placement import Placement
    from moeplan.profiles.backends import read_priors

    one = build(cpu="Xeon 6980P", ram_bytes=768 * GIB)
    assert [n.n_physical_cores for n in one.numa_nodes] == [43, 43, 42]
    assert one.numa_nodes[2].cpus[:2] == (86, 87) and len(one.numa_nodes[2].cpus) == 84
    assert one.numa_nodes[0].distances == (10, 12, 12)
    assert one.numa_nodes[0].dram_read_bytes_per_s.value == pytest.approx(4 * 6400e6 * 8)
    assert any("SNC3" in n and "--numa-nodes 1" in n for n in one.notes)
    assert len(build(cpu="Xeon 6980P", ram_bytes=768 * GIB, numa_nodes=1).numa_nodes) == 1
    two = build(cpu="Xeon 6980P", sockets=2, ram_bytes=1536 * GIB)
    assert len(two.numa_nodes) == 6 and two.numa_nodes[0].distances[:3] == (10, 12, 12)
    assert min(two.numa_nodes[0].distances[3:]) >= 20
    # no policy, pages on the loader's die until it is full: 2 of the 3 dies' channels for 400 GB;
    # a die's neighbours read at the sub-NUMA ratio, not a socket link's
    pr = read_priors("llama.cpp")
    none = resolve_factors(one, pr, Placement(n_gpus=0, n_threads=128), host_bytes=400e9)
    dist = resolve_factors(one, pr, Placement(n_gpus=0, n_threads=128, numa="distribute"), host_bytes=400e9)
    assert "pages on 2 nodes" in none.bw_cpu_bytes_per_s.note
    assert none.bw_cpu_bytes_per_s.value < 0.7 * dist.bw_cpu_bytes_per_s.value
    assert pr.rho_remote < RHO_SUB_NUMA


def test_desktop_sockets_split_their_graphics_lanes():
    """A desktop socket wires 16 CPU lanes to its graphics slots (Intel ark "1x16+4, 2x8+4", AM5
    x16 or x8/x8): one card x16, two x8/x8, further cards on x4 chipset slots; the link runs at the
    lower generation of card and slot. Servers keep each card's own x16."""
    from moeplan.planner.hardware.spec import slot_links

    assert slot_links((5, 16, 4), [(4, 16)]) == [(4, 16, "CPU")]
    assert slot_links((4, 16, 4), [(5, 16)]) == [(4, 16, "CPU")]  # an RTX 5090 on AM4
    assert slot_links((5, 16, 4), [(4, 16)] * 3) == [(4, 8, "CPU"), (4, 8, "CPU"), (4, 4, "chipset")]
    assert slot_links((5, 16, 4), [(4, 8)]) == [(4, 8, "CPU")]  # an x8 card stays x8
    assert slot_links((3, 48, 3), [(3, 16)] * 3) == [(3, 16, "CPU")] * 3  # X299's 48 lanes
    assert slot_links((5, 16, 4), [(0, 0)]) == [(0, 16, "CPU")]  # unknown card: its link stays unknown

    def links(cpu, gpus):
        hw = build(cpu=cpu, gpu=gpus[0], more_gpus=tuple(gpus[1:]), ram_bytes=192 * GIB)
        return [(g.pcie_gen, g.pcie_width) for g in hw.gpus], hw.notes

    got, notes = links("Ryzen 7 7800X3D", ["RTX 3090"] * 3)
    assert got == [(4, 8), (4, 8), (4, 4)]
    assert any("chipset" in n and "--gpu NAME@GENxWIDTH" in n for n in notes)
    assert links("Ryzen 7 7800X3D", ["RTX 3090"])[0] == [(4, 16)]
    assert links("Ryzen 7 5800X", ["RTX 5090"])[0] == [(4, 16)]
    assert links("EPYC 9355", ["RTX 3090"] * 3)[0] == [(4, 16)] * 3
    # a link the user gives wins
    hw = build(cpu="Ryzen 7 7800X3D", gpu="RTX 3090", more_gpus=("RTX 3090",), gpu_links=("4x16", ""),
               ram_bytes=192 * GIB)
    assert [(g.pcie_gen, g.pcie_width) for g in hw.gpus] == [(4, 16), (4, 8)]
