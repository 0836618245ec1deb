"""The parts catalog: size, provenance, topology fields, and name resolution of the
families added for issue 16 (desktop/laptop Core, Ryzen X3D, Threadripper, EPYC F parts,
Xeon Scalable 1st-5th gen, Xeon 6, Xeon W, Xeon E5/E7, laptop and workstation RTX)."""
from __future__ import annotations

import json
import re
import tomllib

import pytest

from moeplan.errors import InputError
from moeplan.planner.hardware.spec import SpecRequest
from moeplan.profiles import catalog


def _raw(name: str) -> list[dict]:
    with open(catalog.profiles_dir() / "parts" / name, "rb") as f:
        data = tomllib.load(f)
    return data["cpu"] if name == "cpus.toml" else data["gpu"]


def test_catalog_sizes():
    assert len(catalog.cpu_parts()) >= 150
    assert len(catalog.gpu_parts()) >= 80


@pytest.mark.parametrize("kind", ["cpus.toml", "gpus.toml"])
def test_every_part_has_a_source_url_and_a_unique_name(kind):
    rows = _raw(kind)
    names = [r["name"] for r in rows]
    assert len(names) == len(set(names))
    for r in rows:
        assert re.match(r"https://[\w.-]+\.(com|net|org|cn)/", r.get("source", "")), r["name"]


def test_every_part_loads_with_sane_figures():
    for c in catalog.cpu_parts():
        assert c.threads >= c.cores >= 1 and 0.8e9 <= c.base_hz <= 6e9, c.name
        assert c.channels >= 1 and 1000 <= c.ram_speed_mts <= 10000 and c.max_sockets in (1, 2, 4, 8), c.name
        assert c.isa and c.fp32_flop_per_cycle in (16, 32, 64), c.name
        if c.boost_hz is not None:
            assert c.boost_hz >= c.base_hz, c.name
        if c.ccds and c.cores_per_ccd:
            assert c.ccds * c.cores_per_ccd == c.cores, c.name
        assert c.source
    for g in catalog.gpu_parts():
        # an APU's iGPU has no memory of its own (its budget comes from --ram) and no PCIe link
        assert (g.vram_bytes > 0 or g.unified) and g.mem_bw_bytes_per_s > 0 and g.source, g.name
        if g.unified:
            assert g.vram_bytes == 0 and not g.pcie_gen and catalog.find_cpu(g.host_cpu).vendor == "amd", g.name


def test_every_cpu_with_a_turbo_states_its_boost_clock():
    # the all-core clock of the cost model lies between base and boost (machine.all_core_clock_hz):
    # a part without its boost figure would be costed at base clock, unlike its neighbours
    fixed_clock = {"Intel Core i3-8100"}  # no Turbo Boost
    assert {c.name for c in catalog.cpu_parts() if c.boost_hz is None} == fixed_clock
    for name, base, boost in (("AMD Ryzen 9 7950X", 4.5e9, 5.7e9), ("AMD EPYC 9654", 2.4e9, 3.7e9),
                              ("Intel Xeon Gold 6548Y+", 2.5e9, 4.1e9), ("Intel Xeon 6980P", 2.0e9, 3.9e9)):
        c = catalog.find_cpu(name)
        assert (c.base_hz, c.boost_hz) == (base, boost)


@pytest.mark.parametrize("query, name", [
    ("i5-13400", "Intel Core i5-13400"),
    ("Core i5-13400", "Intel Core i5-13400"),
    ("i5-13400F", "Intel Core i5-13400"),
    ("Core Ultra 7 265K", "Intel Core Ultra 7 265K"),
    ("i9-14900HX", "Intel Core i9-14900HX"),
    ("Ryzen 9 9950X3D", "AMD Ryzen 9 9950X3D"),
    ("Ryzen 5 5600X", "AMD Ryzen 5 5600X"),
    ("EPYC 9175F", "AMD EPYC 9175F"),
    ("EPYC 7742", "AMD EPYC 7742"),
    ("Threadripper PRO 3995WX", "AMD Ryzen Threadripper PRO 3995WX"),
    ("5995WX", "AMD Ryzen Threadripper PRO 5995WX"),
    ("7995WX", "AMD Ryzen Threadripper PRO 7995WX"),
    ("9995WX", "AMD Ryzen Threadripper PRO 9995WX"),
    ("Xeon Platinum 8136", "Intel Xeon Platinum 8136"),
    ("Xeon Gold 6248", "Intel Xeon Gold 6248"),
    ("Xeon 6780E", "Intel Xeon 6780E"),
    ("w9-3495X", "Intel Xeon w9-3495X"),
    ("E7-8890 v3", "Intel Xeon E7-8890 v3"),
    ("E5-2699v4", "Intel Xeon E5-2699 v4"),
])
def test_new_cpu_families_resolve_by_common_spellings(query, name):
    assert catalog.find_cpu(query).name == name


@pytest.mark.parametrize("query, name", [
    ("RTX 3070 Laptop", "NVIDIA GeForce RTX 3070 Laptop GPU"),
    ("RTX 4090 Mobile", "NVIDIA GeForce RTX 4090 Laptop GPU"),
    ("RTX 5090 Laptop", "NVIDIA GeForce RTX 5090 Laptop GPU"),
    ("RTX A2000 12GB", "NVIDIA RTX A2000 12GB"),
    ("RTX 4000 Ada", "NVIDIA RTX 4000 Ada Generation"),
    ("RTX PRO 5000 Blackwell", "NVIDIA RTX PRO 5000 Blackwell"),
    ("Quadro RTX 8000", "Quadro RTX 8000"),
    ("RTX 3070", "NVIDIA GeForce RTX 3070"),  # the desktop card stays the exact match
])
def test_new_gpus_resolve(query, name):
    assert catalog.find_gpu(query).name == name


# Parts users name that the catalog lacked (issue 16 follow-up): each resolves by its common
# spelling with its vendor figures: family, cores / threads, base / boost GHz, L3 MiB, channels,
# memory type and speed, sockets.
@pytest.mark.parametrize("query, name, fig", [
    ("Ryzen 7 5700X3D", "AMD Ryzen 7 5700X3D", ("zen3", 8, 16, 3.0, 4.1, 96, 2, "ddr4", 3200, 1)),
    ("Ryzen 9 3900X", "AMD Ryzen 9 3900X", ("zen2", 12, 24, 3.8, 4.6, 64, 2, "ddr4", 3200, 1)),
    ("Ryzen 9 3950X", "AMD Ryzen 9 3950X", ("zen2", 16, 32, 3.5, 4.7, 64, 2, "ddr4", 3200, 1)),
    ("Ryzen AI Max 390", "AMD Ryzen AI Max 390", ("zen5", 12, 24, 3.2, 5.0, 64, 4, "lpddr5x", 8000, 1)),
    ("Ryzen 7 7840HS", "AMD Ryzen 7 7840HS", ("zen4", 8, 16, 3.8, 5.1, 16, 2, "ddr5", 5600, 1)),
    ("Xeon W-3375", "Intel Xeon W-3375", ("icelake-sp", 38, 76, 2.5, 4.0, 57, 8, "ddr4", 3200, 1)),
    ("Xeon Silver 4314", "Intel Xeon Silver 4314", ("icelake-sp", 16, 32, 2.4, 3.4, 24, 8, "ddr4", 2666, 2)),
    ("Xeon Gold 6438Y+", "Intel Xeon Gold 6438Y+", ("sapphire-rapids", 32, 64, 2.0, 4.0, 60, 8, "ddr5", 4800, 2)),
    ("Xeon Gold 5418Y", "Intel Xeon Gold 5418Y", ("sapphire-rapids", 24, 48, 2.0, 3.8, 45, 8, "ddr5", 4400, 2)),
    ("Xeon Platinum 8570", "Intel Xeon Platinum 8570", ("sapphire-rapids", 56, 112, 2.1, 4.0, 300, 8, "ddr5", 5600, 2)),
    ("Xeon Gold 6248R", "Intel Xeon Gold 6248R", ("cascade-lake", 24, 48, 3.0, 4.0, 35.75, 6, "ddr4", 2933, 2)),
    ("Xeon W-2295", "Intel Xeon W-2295", ("cascade-lake", 18, 36, 3.0, 4.8, 24.75, 4, "ddr4", 2933, 1)),
    ("Xeon Platinum 8168", "Intel Xeon Platinum 8168", ("skylake-sp", 24, 48, 2.7, 3.7, 33, 6, "ddr4", 2666, 8)),
    ("Xeon Gold 6138", "Intel Xeon Gold 6138", ("skylake-sp", 20, 40, 2.0, 3.7, 27.5, 6, "ddr4", 2666, 4)),
    ("Xeon W-2145", "Intel Xeon W-2145", ("skylake-sp", 8, 16, 3.7, 4.5, 11, 4, "ddr4", 2666, 1)),
    ("Xeon E5-2696 v4", "Intel Xeon E5-2696 v4", ("haswell", 22, 44, 2.2, 3.7, 55, 4, "ddr4", 2400, 2)),
    ("Xeon E5-2667 v4", "Intel Xeon E5-2667 v4", ("haswell", 8, 16, 3.2, 3.6, 25, 4, "ddr4", 2400, 2)),
    # the second catalog pass: older desktops, laptops, Xeon E5 v2 and Scalable parts
    ("i9-9900K", "Intel Core i9-9900K", ("skylake-client", 8, 16, 3.6, 5.0, 16, 2, "ddr4", 2666, 1)),
    ("Ryzen 5 2600", "AMD Ryzen 5 2600", ("zen1", 6, 12, 3.4, 3.9, 16, 2, "ddr4", 2933, 1)),
    ("E5-2690 v2", "Intel Xeon E5-2690 v2", ("ivy-bridge", 10, 20, 3.0, 3.6, 25, 4, "ddr3", 1866, 2)),
    ("Xeon Gold 6240", "Intel Xeon Gold 6240", ("cascade-lake", 18, 36, 2.6, 3.9, 24.75, 6, "ddr4", 2933, 4)),
    ("Xeon Platinum 8368", "Intel Xeon Platinum 8368", ("icelake-sp", 38, 76, 2.4, 3.4, 57, 8, "ddr4", 3200, 2)),
    ("Ryzen 7 8845HS", "AMD Ryzen 7 8845HS", ("zen4", 8, 16, 3.8, 5.1, 16, 2, "ddr5", 5600, 1)),
    ("Core Ultra 7 258V", "Intel Core Ultra 7 258V", ("alder-lake", 8, 8, 2.2, 4.8, 12, 2, "lpddr5x", 8533, 1)),
    ("i7-4790K", "Intel Core i7-4790K", ("haswell", 4, 8, 4.0, 4.4, 8, 2, "ddr3", 1600, 1)),
])
def test_named_cpus_resolve_with_their_figures(query, name, fig):
    p = catalog.find_cpu(query)
    assert p.name == name
    got = (p.family, p.cores, p.threads, p.base_hz / 1e9, p.boost_hz / 1e9, p.l3_bytes / 2**20, p.channels,
           p.ram_type, p.ram_speed_mts, p.max_sockets)
    assert got[:3] + got[6:] == fig[:3] + fig[6:]
    assert got[3:6] == pytest.approx(fig[3:6])  # GHz and MiB
    if p.ccds:  # AMD: the cores sit on whole CCDs
        assert p.ccds * p.cores_per_ccd == p.cores
    # Xeon Scalable 3rd gen and later, Xeon W: two AVX-512 FMA units on every SKU
    assert p.fp32_flop_per_cycle == {"haswell": 32, "zen2": 32, "zen3": 32, "zen4": 32, "skylake-client": 32,
                                     "alder-lake": 32, "zen1": 16, "ivy-bridge": 16}.get(p.family, 64)
    assert catalog.match_cpu(name).name == name  # a /proc/cpuinfo name with the full model


@pytest.mark.parametrize("query, name, vram_gib, bw_gbps, pcie_gen, fp16_tflops, cc", [
    ("V100 PCIe 16GB", "Tesla V100-PCIE-16GB", 16, 900, 3, 112, "7.0"),
    ("V100 PCIe 32GB", "Tesla V100-PCIE-32GB", 32, 900, 3, 112, "7.0"),
    ("V100 SXM2 16GB", "Tesla V100-SXM2-16GB", 16, 900, 3, 125, "7.0"),
    ("Tesla V100-SXM2-32GB", "Tesla V100-SXM2-32GB", 32, 900, 3, 125, "7.0"),
    ("Tesla P100", "NVIDIA Tesla P100-PCIE-16GB", 16, 732, 3, 18.7, "6.0"),
    ("Titan RTX", "NVIDIA TITAN RTX", 24, 672, 3, 130.5, "7.5"),
    ("A10", "NVIDIA A10", 24, 600, 4, 125, "8.6"),
    ("RTX 5090 D", "NVIDIA GeForce RTX 5090 D", 32, 1792, 5, 0.0, "12.0"),
    ("T4", "Tesla T4", 16, 320, 3, 65, "7.5"),
    ("M40 24GB", "Tesla M40 24GB", 24, 288, 3, 6.8, "5.2"),
    ("RTX 5050", "NVIDIA GeForce RTX 5050", 8, 320, 5, 52.6, "12.0"),
])
def test_named_gpus_resolve_with_their_figures(query, name, vram_gib, bw_gbps, pcie_gen, fp16_tflops, cc):
    g = catalog.find_gpu(query)
    assert g.name == name
    assert (g.vram_bytes / 2**30, g.mem_bw_bytes_per_s / 1e9, g.pcie_gen, g.compute_capability) == \
        (vram_gib, bw_gbps, pcie_gen, cc)
    assert g.fp16_flop_per_s / 1e12 == pytest.approx(fp16_tflops)
    assert catalog.match_gpu(name).name == name  # NVML's name


def test_bare_v100_lists_its_variants_and_a10_is_not_an_a100():
    with pytest.raises(InputError) as e:
        catalog.find_gpu("Tesla V100")
    assert all(f"V100-{v}" in e.value.message for v in ("PCIE-16GB", "PCIE-32GB", "SXM2-16GB", "SXM2-32GB"))
    assert catalog.find_gpu("A100").name == "NVIDIA A100-SXM4-80GB"
    assert catalog.find_gpu("RTX 5090").name == "NVIDIA GeForce RTX 5090"


def test_full_names_from_nvml_and_cpuinfo():
    assert catalog.match_gpu("NVIDIA GeForce RTX 3070 Laptop GPU").name == "NVIDIA GeForce RTX 3070 Laptop GPU"
    assert catalog.match_gpu("NVIDIA GeForce RTX 3070").name == "NVIDIA GeForce RTX 3070"
    assert catalog.match_cpu("13th Gen Intel(R) Core(TM) i5-13400F").name == "Intel Core i5-13400"
    assert catalog.match_cpu("AMD EPYC 9175F 16-Core Processor").name == "AMD EPYC 9175F"
    assert catalog.match_cpu("Intel(R) Xeon(R) CPU E7-8890 v3 @ 2.50GHz").name == "Intel Xeon E7-8890 v3"


@pytest.mark.parametrize("typo, expected, kind", [
    ("i5-13401", "Intel Core i5-13400", "cpu"),
    ("Xeon Platnum 8136", "Intel Xeon Platinum 8136", "cpu"),
    ("Threadriper 3995WX", "AMD Ryzen Threadripper PRO 3995WX", "cpu"),
    ("EPYC 9157F", "AMD EPYC 9175F", "cpu"),
    ("RTX 3070 Laptp", "NVIDIA GeForce RTX 3070 Laptop GPU", "gpu"),
])
def test_misspellings_get_close_matches(typo, expected, kind):
    with pytest.raises(InputError) as e:
        (catalog.find_cpu if kind == "cpu" else catalog.find_gpu)(typo)
    assert "close matches" in e.value.hint and expected in e.value.hint


def test_topology_fields_of_the_issue_classes():
    f = catalog.find_cpu("EPYC 9175F")
    assert (f.cores, f.ccds, f.cores_per_ccd, f.channels) == (16, 16, 1, 12)
    tr = catalog.find_cpu("3995WX")
    assert (tr.family, tr.cores, tr.channels, tr.ram_type, tr.ccds) == ("zen2", 64, 8, "ddr4", 8)
    x6 = dict(catalog.find_cpu("Xeon 6980P").ram_speeds_mts)
    assert x6["mrdimm"] == 8800 and x6["ddr5"] == 6400
    e7 = catalog.find_cpu("E7-8890 v3")
    assert e7.max_sockets == 8 and "avx2" in e7.isa and "avx512f" not in e7.isa
    assert catalog.find_cpu("Xeon Silver 4210").fp32_flop_per_cycle == 32  # one AVX-512 FMA unit
    assert "amx_int8" in catalog.find_cpu("w9-3495X").isa
    lap = catalog.find_gpu("RTX 3070 Laptop")
    assert lap.mobile and lap.pcie_gen == 0 and lap.fp16_flop_per_s == 0.0


def test_server_ccds_add_no_fabric_cap_desktop_keeps_it():
    assert catalog.find_cpu("EPYC 9175F").fabric_read_bytes_per_s is None
    assert catalog.find_cpu("Ryzen 7 5800X").fabric_read_bytes_per_s is not None


def test_a_monolithic_apu_reads_through_its_ccx_port():
    """Phoenix / Hawk Point: one CCX whose 32 B-per-FCLK port (2.0 GHz) reads 64 GB/s, below the
    0.80 x 89.6 GB/s its dual-channel DDR5-5600 streams: the DRAM rate is the port's 0.90 x 64."""
    hs = catalog.find_cpu("Ryzen 7 8845HS")
    assert hs.ccds == 1 and hs.fabric_read_bytes_per_s == pytest.approx(64e9)
    node = catalog.build_profile(SpecRequest(cpu="Ryzen 7 8845HS", ram_bytes=64 * 2**30)).numa_nodes[0]
    assert node.dram_read_bytes_per_s.effective == pytest.approx(0.90 * 64e9)
    assert "Infinity Fabric" in node.dram_read_bytes_per_s.method
    # Cezanne with DDR4-3200: the port (0.90 x 51.2 GB/s) is above the DIMMs' 0.85 x 51.2 GB/s
    g = catalog.build_profile(SpecRequest(cpu="Ryzen 7 5700G", ram_bytes=64 * 2**30)).numa_nodes[0]
    assert g.dram_read_bytes_per_s.effective == pytest.approx(0.85 * 51.2e9)


def test_laptop_gpu_profile_notes_the_unknown_link_and_rate():
    p = catalog.build_profile(SpecRequest(gpu="RTX 3070 Laptop", cpu="i7-12700H", ram_bytes=32 * 2**30))
    g = p.gpus[0]
    assert g.mem_bw_bytes_per_s.value == 448e9 and g.mem_bw_bytes_per_s.source == "spec-sheet"
    assert g.h2d_bytes_per_s is None and g.fp16_flop_per_s is None
    assert any("PCIe link unknown" in n for n in p.notes)
    assert p.cpu.max_clock_hz == 4.7e9


@pytest.mark.parametrize("query, family, rep, cores", [
    ("AMD EPYC 9B14", "zen4", "AMD EPYC 9654", 96),
    ("AMD EPYC 9B14 96-Core Processor", "zen4", "AMD EPYC 9654", 96),
    ("AMD EPYC 9V45", "zen5", "AMD EPYC 9755", 128),
    ("AMD EPYC 7C13 64-Core Processor", "zen3", "AMD EPYC 7763", 64),
    ("AMD EPYC 7V12 48-Core Processor", "zen2", "AMD EPYC 7742", 48),
    ("Intel Xeon Processor (Icelake)", "icelake-sp", "Intel Xeon Platinum 8380", 40),
])
def test_an_unlisted_cpu_is_modelled_from_its_generation(query, family, rep, cores):
    from moeplan.profiles.catalog import find_cpu
    p = find_cpu(query)
    assert p.family == family and p.cores == cores and p.name == query
    assert rep in p.source and p.source.startswith("not in the catalog")
    assert p.ccds is None or p.ccds * (p.cores_per_ccd or 1) >= p.cores


@pytest.mark.parametrize("query", ["AMD EPYC 9999X", "Intel Xeon Processor (Pentium)", "Frobnicator 3000"])
def test_a_name_without_a_known_generation_is_still_refused(query):
    from moeplan.profiles.catalog import find_cpu
    with pytest.raises(InputError, match="not in the parts catalog"):
        find_cpu(query)


def test_the_modelled_part_says_so_in_the_profile_notes(tmp_path):
    from typer.testing import CliRunner

    from moeplan.cli import app
    r = CliRunner().invoke(app, ["hardware", "--cpu", "AMD EPYC 9B14", "--ram", "768G", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    doc = doc.get("profile", doc)
    assert any("modelled as a zen4 part" in n for n in doc["notes"])
    assert doc["cpu"]["n_cores"] == 96


@pytest.mark.parametrize("query", ["RTX 4090 48GB", "RTX 4090 (48 GB)", "4090 48G", "NVIDIA GeForce RTX 4090 48GB"])
def test_a_memory_modified_card_is_its_stock_part_with_the_vram_named(query):
    stock = catalog.find_gpu("RTX 4090")
    p = catalog.find_gpu(query)
    assert p.vram_bytes == 48 * 2**30
    assert (p.mem_bw_bytes_per_s, p.fp16_flop_per_s, p.pcie_gen) == (stock.mem_bw_bytes_per_s, stock.fp16_flop_per_s,
                                                                     stock.pcie_gen)
    assert p.source.startswith(catalog.VRAM_AS_NAMED)
    prof = catalog.build_profile(SpecRequest(gpu=query, cpu="Ryzen 9 7950X", ram_bytes=128 * 2**30))
    assert prof.gpus[0].vram_bytes == 48 * 2**30
    assert any("memory-modified" in n for n in prof.notes)


def test_a_named_size_that_is_stock_or_a_catalog_variant_is_that_part():
    assert catalog.find_gpu("RTX 4090 24GB") == catalog.find_gpu("RTX 4090")
    assert catalog.find_gpu("RTX 3080 12GB").vram_bytes == 12 * 2**30  # the catalog's own 12 GB variant
    # smaller than the stock part: a cut-down card on a narrower bus, whose figures the stock part overstates
    with pytest.raises(InputError, match="has 12 GiB") as e:
        catalog.find_gpu("RTX 3060 8GB")
    assert "--gpu-vram 8G" in e.value.hint
    with pytest.raises(InputError, match="not in the parts catalog"):
        catalog.find_gpu("Frobnicator 48GB")


def test_gold_5200_has_one_avx512_fma_unit_and_old_isas_lack_avx2():
    """Intel ark: Xeon Gold 5220 "# of AVX-512 FMA Units 1"; Ivy Bridge-EP has AVX but no FMA/AVX2."""
    assert catalog.find_cpu("Xeon Gold 5220").fp32_flop_per_cycle == 32
    assert catalog.find_cpu("Xeon Gold 6240").fp32_flop_per_cycle == 64
    ivy = catalog.find_cpu("E5-2680 v2")
    assert "avx2" not in ivy.isa and "fma" not in ivy.isa and "avx" in ivy.isa
