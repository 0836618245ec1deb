"""The parts catalog (moeplan/profiles/parts/*.toml) and the hardware presets
(moeplan/profiles/hardware/*.json): reading, name matching, close matches."""
from __future__ import annotations

import difflib
import functools
import json
import re
import tomllib
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from moeplan.errors import InputError, ProbeError
from moeplan.planner.hardware.profile import Figure, HardwareProfile
from moeplan.planner.hardware.spec import VRAM_AS_NAMED, CpuPart, Efficiency, GpuPart, SpecRequest, build_spec_profile
from moeplan.planner.serde import from_jsonable
from moeplan.units import GIB, MIB

# Xeon Scalable tiers (Platinum/Gold/Silver/Bronze) are ignored too: the model number alone names
# the part ("Xeon 8470Q", "Xeon 6454S"), the tier is its first digit
_NOISE = re.compile(r"\(r\)|\(tm\)|®|™|\bnvidia\b|\bgeforce\b|\bamd\b|\bintel\b|\bprocessor\b|\bcpu\b"
                    r"|\b\d+-core\b|\bwith radeon graphics\b|\b(?:platinum|gold|silver|bronze)\b")


def profiles_dir() -> Path:
    return Path(str(resources.files("moeplan") / "profiles"))


def norm(name: str) -> str:
    """'NVIDIA GeForce RTX 4090' -> 'rtx4090'; 'AMD EPYC 9654 96-Core Processor' -> 'epyc9654'."""
    s = _NOISE.sub(" ", name.lower())
    return re.sub(r"[^a-z0-9+]", "", s)


def _read_toml(name: str) -> dict[str, Any]:
    path = profiles_dir() / "parts" / name
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ProbeError(f"parts catalog {path} is unreadable: {exc}", "reinstall moeplan") from None


def _pcie(text: str) -> tuple[int, int]:
    gen, width = text.lower().split("x")
    return int(gen), int(width)


@functools.lru_cache(maxsize=1)
def gpu_parts() -> tuple[GpuPart, ...]:
    out = []
    for g in _read_toml("gpus.toml")["gpu"]:
        # pcie and fp16_tflops are optional: 0 = not stated (the profile notes it as unknown)
        gen, width = _pcie(g["pcie"]) if "pcie" in g else (0, 0)
        # an APU's iGPU (unified = true) has no vram_gib: its budget comes from the RAM
        out.append(GpuPart(name=g["name"], aliases=tuple(g.get("aliases", ())), vram_bytes=int(g.get("vram_gib", 0) * GIB),
                           mem_bw_bytes_per_s=g["mem_bw_gbps"] * 1e9, pcie_gen=gen, pcie_width=width,
                           fp16_flop_per_s=g.get("fp16_tflops", 0.0) * 1e12, compute_capability=g.get("cc", ""),
                           source=g.get("source", ""), mobile=bool(g.get("mobile", False)),
                           vendor=g.get("vendor", "nvidia"), unified=bool(g.get("unified", False)),
                           gfx_target=g.get("gfx", ""), host_cpu=g.get("host_cpu", "")))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def cpu_parts() -> tuple[CpuPart, ...]:
    data = _read_toml("cpus.toml")
    fams, fabric, slots = data["families"], data.get("fabric", {}), data.get("desktop_pcie", {})
    out = []
    for c in data["cpu"]:
        fam = fams[c["family"]]
        fclk = fabric.get(f"{c['family']}_fclk_ghz")
        cap = None
        # the desktop fabric cap only (see cpus.toml); server CCD limits belong to the machine model
        if c.get("ccds") and fclk and c["segment"] == "desktop":
            cap = c["ccds"] * fabric["read_bytes_per_clk_per_ccd"] * fclk * 1e9
        out.append(CpuPart(
            name=c["name"], aliases=tuple(c.get("aliases", ())),
            vendor="amd" if c["name"].startswith("AMD") else "intel" if c["name"].startswith("Intel") else "",
            family=c["family"], cores=c["cores"], threads=c["threads"], base_hz=round(c["base_ghz"] * 1e9, -6),
            l3_bytes=int(c.get("l3_mib", 0) * MIB), channels=c["channels"], ram_type=c["ram_type"],
            ram_speed_mts=c["ram_speed_mts"], max_sockets=c["max_sockets"], segment=c["segment"],
            isa=tuple(fam["isa"]), fp32_flop_per_cycle=c.get("fp32_flop_per_cycle", fam["fp32_flop_per_cycle"]),
            fabric_read_bytes_per_s=cap, boost_hz=round(c["boost_ghz"] * 1e9, -6) if "boost_ghz" in c else None,
            ccds=c.get("ccds"), cores_per_ccd=c.get("cores_per_ccd"),
            ram_speeds_mts=tuple(sorted((k, int(v)) for k, v in c.get("ram_speeds", {}).items())),
            snc_default=int(c.get("snc_default", 1)),
            slot_pcie=_slot_pcie(slots.get(c["family"])) if c["segment"] == "desktop" and not c.get("mobile") else (),
            mobile=bool(c.get("mobile", False)), source=c.get("source", "")))
    return tuple(out)


def _slot_pcie(d: dict | None) -> tuple[int, int, int] | tuple[()]:
    return (int(d["gen"]), int(d["lanes"]), int(d["chipset_gen"])) if d else ()


@functools.lru_cache(maxsize=1)
def efficiency() -> Efficiency:
    e = _read_toml("efficiency.toml")
    numa = e["numa"]
    return Efficiency(
        dram_read=dict(e["dram_read"]), fabric_read=e["fabric"]["read"], pcie_pinned=e["pcie_h2d"]["pinned"],
        gpu_mem=e["gpu_mem"]["copy"], gpu_fp16=e["gpu_fp16"]["gemm"], cpu_sgemm=e["cpu_flop"]["sgemm"],
        core_read_prior_bytes_per_s={k: v * 1e9 for k, v in e["prior"]["core_read_gbps"].items()},
        remote_distance={"intel": numa["remote_distance_intel"], "amd": numa["remote_distance_amd"],
                         "other": numa["remote_distance_other"]},
        disks={k: (v["seq_read_gbps"] * 1e9, v["achievable"]) for k, v in e["disk"].items()},
        cpu_clock_prior_hz=_clock_priors(cpu_parts()), gpu_bw_by_vram=_gpu_bw_classes(gpu_parts()))


def _clock_priors(parts: tuple[CpuPart, ...]) -> dict[str, float]:
    """segment -> median base clock of the catalog's parts of that segment, laptop parts left
    out (the prior for a CPU given by numbers without --cpu-ghz)."""
    import statistics  # here: with fractions and decimal 2.5 ms, which a preset's `tune` never calls for

    out = {}
    for seg in sorted({p.segment for p in parts}):
        clocks = [p.base_hz for p in parts if p.segment == seg and not p.mobile]
        if clocks:
            out[seg] = statistics.median(clocks)
    return out


def _gpu_bw_classes(parts: tuple[GpuPart, ...]) -> tuple[tuple[float, float, float, float, int], ...]:
    """(vram_gib, median, min, max bandwidth, n) for each VRAM size in the catalog."""
    import statistics

    by: dict[float, list[float]] = {}
    for p in parts:
        if p.mem_bw_bytes_per_s and not p.unified:  # an iGPU has no VRAM class
            by.setdefault(round(p.vram_bytes / GIB, 1), []).append(p.mem_bw_bytes_per_s)
    return tuple((v, statistics.median(bw), min(bw), max(bw), len(bw)) for v, bw in sorted(by.items()))


def _keys(part: GpuPart | CpuPart) -> list[str]:
    return [norm(part.name)] + [norm(a) for a in part.aliases]


def _match(parts, query: str, strict: bool):
    """(part or None, close-match names, ambiguous names)."""
    q = norm(query)
    if not q:
        return None, [], []
    exact = [p for p in parts if q in _keys(p)]
    if exact:
        return exact[0], [], []
    if strict:  # a full name from NVML or /proc/cpuinfo: the most specific key it contains
        best, best_len = None, 0
        for p in parts:
            for k in _keys(p):
                if len(k) >= 4 and k in q and len(k) > best_len:
                    best, best_len = p, len(k)
        return best, [], []
    within = [p for p in parts if any(q in k for k in _keys(p))]
    if len(within) == 1:
        return within[0], [], []
    if within:
        return None, [], [p.name for p in within]
    by_key = {k: p.name for p in parts for k in _keys(p)}
    close = difflib.get_close_matches(q, list(by_key), n=5, cutoff=0.6)
    return None, list(dict.fromkeys(by_key[k] for k in close)), []


_GPU_NUMBERS = "or describe it by numbers: --gpu-vram 24G --gpu-bw 1008GB/s --pcie 4x16 --gpu-tflops 330"
_CPU_NUMBERS = "or describe it by numbers: --cores 32 --channels 8 --ram-type ddr5 --ram-speed 5200 --cpu-ghz 2.5"


# a GPU named with its memory size: "RTX 4090 48GB", "RTX 4090 (48 GB)", "2080 Ti 22G"
_VRAM_IN_NAME = re.compile(r"^(.*?\S)[\s_-]*\(?\s*(\d+(?:\.\d+)?)\s*(?:gb|gib|g)\s*\)?$", re.IGNORECASE)


def find_gpu(name: str) -> GpuPart:
    """The catalog part called `name`; a name the catalog lacks that ends in a memory size larger
    than its base part's ("RTX 4090 48GB", "2080 Ti 22GB": the memory-modified cards sold with
    larger chips on the same bus) is that part with the VRAM named."""
    try:
        return _find(gpu_parts(), "GPU", name, _GPU_NUMBERS)
    except InputError as err:
        m = _VRAM_IN_NAME.match(name.strip())
        base = _match(gpu_parts(), m.group(1), strict=False)[0] if m else None
        if m is None or base is None:
            raise
        vram = int(float(m.group(2)) * GIB)
        if base.unified:  # "Radeon 8060S 128GB": the APU's RAM, given with --ram
            return base
        if vram < base.vram_bytes:  # a cut-down variant: a narrower bus the stock figures overstate
            raise InputError(f"unknown GPU {name!r}: not in the parts catalog ({base.name} has "
                             f"{base.vram_bytes / GIB:g} GiB)",
                             f"describe it by numbers: --gpu-vram {m.group(2)}G --gpu-bw ... --pcie ...") from err
        if vram == base.vram_bytes:
            return base
        return replace(base, name=f"{base.name} {m.group(2)}GB", vram_bytes=vram, aliases=(),
                       source=f"{VRAM_AS_NAMED}: {base.name} with {vram / GIB:g} GiB instead of its "
                              f"{base.vram_bytes / GIB:g} (a memory-modified card); bandwidth, compute and link "
                              "are the stock part's")


# a pre-production sample: "EPYC 9334QS", "Xeon 8480 ES", "8480 (engineering sample QYFS)"
_SAMPLE_IN_NAME = re.compile(r"^(.*?\d\S*?)\s*(?:\(?\s*(?:ES|QS|engineering sample|qualification sample)\b[^)]*\)?)$",
                             re.IGNORECASE)


def find_cpu(name: str) -> CpuPart:
    try:
        return _find(cpu_parts(), "CPU", name, _CPU_NUMBERS)
    except InputError:
        m = _SAMPLE_IN_NAME.match(name.strip())
        base = _match(cpu_parts(), m.group(1), strict=False)[0] if m else None
        if base is not None:
            return replace(base, name=name.strip(), aliases=(),
                           source=f"not in the catalog: a pre-production sample of the {base.name}, costed as that "
                                  "part (an engineering sample's clocks can be lower); " + base.source)
        part = generation_part(name)
        if part is None:
            raise
        return part


# AMD's EPYC model numbers: the first digit is the series, the last the generation (AMD EPYC
# processor naming: 7xx1 Naples, 7xx2 Rome, 7xx3 Milan, 9xx4 Genoa, 9xx5 Turin); cloud and OEM
# parts (EPYC 9B14, 9R14, 9V45, 7C13, 7B13, 7R13, 7V12 ...) put a letter in the second place and
# keep the scheme. QEMU/KVM guests report the host's family by its code name ("Intel Xeon
# Processor (Icelake)", target/i386/cpu.c model_id of the Icelake-Server model ...).
_EPYC_GENERATION = {("7", "2"): "zen2", ("7", "3"): "zen3", ("9", "4"): "zen4", ("9", "5"): "zen5"}
_QEMU_FAMILY = {"skylake": "skylake-sp", "cascadelake": "cascade-lake", "icelake": "icelake-sp",
                "sapphirerapids": "sapphire-rapids", "graniterapids": "granite-rapids", "sierraforest": "sierra-forest",
                "rome": "zen2", "milan": "zen3", "genoa": "zen4", "turin": "zen5"}


def generation_part(name: str) -> CpuPart | None:
    """A CPU the catalog lacks, from what its name says of its generation: the catalog's
    largest part of that family stands for its memory system (channels, memory type, CCDs),
    and a core count in the name ('96-Core Processor') replaces its cores; None when the name
    says nothing. The result says it was modelled so (source), and --cores overrides it."""
    low = name.lower()
    fam, series = "", ""
    m = re.search(r"epyc\s*(\d)[0-9a-z]{2}(\d)[a-z]*\b", low)
    if m and (m.group(1), m.group(2)) in _EPYC_GENERATION:
        fam, series = _EPYC_GENERATION[(m.group(1), m.group(2))], "AMD EPYC"
    q = re.search(r"\((\w+?)(?:-server)?\)", low.replace(" ", ""))
    if not fam and q and q.group(1) in _QEMU_FAMILY and re.search(r"xeon|epyc", low):
        fam, series = _QEMU_FAMILY[q.group(1)], "AMD EPYC" if "epyc" in low else "Intel Xeon"
    if not fam:
        return None
    same = [p for p in cpu_parts() if p.family == fam and p.name.startswith(series) and p.segment == "server"
            and not re.search(r"[FX]$|H", p.name.split()[-1])]  # not the frequency / V-Cache parts
    if not same:
        return None
    # the classic-core dies (8 cores per CCD), not the dense Zen 4c/5c parts
    rep = max(same, key=lambda p: ((p.cores_per_ccd or 8) <= 8, p.cores, p.ram_speed_mts, p.name))
    c = re.search(r"(\d+)-core", low)
    cores = int(c.group(1)) if c else rep.cores
    per_ccd = rep.cores_per_ccd
    ccds = min(rep.ccds, max(1, -(-cores // per_ccd))) if rep.ccds and per_ccd else rep.ccds
    return replace(
        rep, name=name.strip(), aliases=(), cores=cores, threads=cores * max(1, rep.threads // rep.cores), ccds=ccds,
        boost_hz=None, source=(f"not in the catalog: modelled as a {fam} part from its name, memory system of the "
                               f"{rep.name} ({rep.source}); give --cores and --cpu-ghz if they differ"))


def _find(parts, kind: str, name: str, numbers: str):
    """The part called `name` (exact, alias, or the one part containing it), else InputError
    with the close matches and how to pass numbers instead."""
    part, close, ambiguous = _match(parts, name, strict=False)
    if part is not None:
        return part
    if ambiguous:
        raise InputError(f"{kind} {name!r} matches several parts: " + ", ".join(ambiguous[:8]),
                         "give the full name, " + numbers)
    hint = ("close matches: " + ", ".join(close) + "; " if close else "") + numbers
    raise InputError(f"unknown {kind} {name!r}: not in the parts catalog",
                     hint + "; `moeplan hardware --list` shows the catalog")


def match_gpu(full_name: str) -> GpuPart | None:
    """The catalog entry for a name as NVML reports it, or None (never guesses loosely)."""
    return _match(gpu_parts(), full_name, strict=True)[0]


def match_cpu(full_name: str) -> CpuPart | None:
    """The catalog entry for a /proc/cpuinfo model name, or None."""
    return _match(cpu_parts(), full_name, strict=True)[0]


# A machine described by its GPU alone (a post that names the card and the RAM, not the CPU):
# the CPU side is costed as a common machine of the kind the RAM allows, with the figures marked
# as priors (a wider range) and a note. Up to 256 GiB (the most a desktop platform takes: four
# 64 GB DIMMs) a desktop: Ryzen desktops are most of the public reports (8 of the 13 desktop CPUs
# in benchmarks/data/measurements.jsonl), an 8-core one-CCD Ryzen 7 their middle, a 9700X on DDR5,
# a 5800X on DDR4. Beyond it a single-socket server: the public reports with more RAM are EPYC
# 9004/9005 and Xeon Scalable boxes, a 32-core EPYC their middle, a 9354 on DDR5, a 7543 on DDR4.
# DDR4 when --ram-type says so or beside an Ampere-or-older NVIDIA card (mostly DDR4 platforms).
STAND_IN_CPU = {"ddr5": "Ryzen 7 9700X", "ddr4": "Ryzen 7 5800X",
                "lpddr5x": "Ryzen 7 7840HS"}  # soldered LPDDR5X beside a GPU: a gaming laptop
STAND_IN_SERVER_CPU = {"ddr5": "EPYC 9354", "ddr4": "EPYC 7543"}
DESKTOP_MAX_RAM_BYTES = 256 * GIB


def _stand_in(req: SpecRequest, gpu: GpuPart | None, more: tuple[GpuPart, ...]) -> CpuPart | None:
    if req.cpu or req.cores or not (gpu or more or req.gpu_vram_bytes):
        return None
    card = gpu or (more[0] if more else None)
    if card is not None and card.unified and card.host_cpu:  # an iGPU: the APU it is part of
        return find_cpu(card.host_cpu)
    cc = float(card.compute_capability or 0) if card else 0.0
    ram_type = (req.ram_type or ("ddr4" if 0 < cc < 8.9 else "ddr5")).lower()
    table = STAND_IN_SERVER_CPU if (req.ram_bytes or 0) > DESKTOP_MAX_RAM_BYTES else STAND_IN_CPU
    return find_cpu(table.get(ram_type, table["ddr5"]))


def _as_prior(hw: HardwareProfile, cpu: CpuPart) -> HardwareProfile:
    def prior(fig: Figure | None) -> Figure | None:
        return replace(fig, source="prior", method=f"{fig.method} (stand-in CPU)") if fig else None

    kind = "desktop" if cpu.segment == "desktop" else "single-socket server (more RAM than a desktop takes)"
    note = (f"CPU not given: its side is costed as {cpu.name} ({cpu.cores} cores) on "
            f"{hw.cpu.memory_channels} channels of {hw.cpu.ram_type.upper()}-{hw.cpu.ram_speed_mts}, a common "
            f"{kind}, with a prior's uncertainty; pass --cpu (and --ram-speed) for your machine's figures")
    c = replace(hw.cpu, source="prior", memory_source="prior", core_flop_per_s=prior(hw.cpu.core_flop_per_s))
    nodes = tuple(replace(n, dram_read_bytes_per_s=prior(n.dram_read_bytes_per_s)) for n in hw.numa_nodes)
    return replace(hw, cpu=c, numa_nodes=nodes, notes=tuple(hw.notes) + (note,))


def build_profile(req: SpecRequest) -> HardwareProfile:
    """Resolve the request's part names and build the spec profile."""
    gpu = find_gpu(req.gpu) if req.gpu else None
    cpu = find_cpu(req.cpu) if req.cpu else None
    more = tuple(find_gpu(n) for n in req.more_gpus)
    stand_in = _stand_in(req, gpu, more)
    if stand_in:
        return _as_prior(build_spec_profile(req, gpu, stand_in, efficiency(), more), stand_in)
    return build_spec_profile(req, gpu, cpu, efficiency(), more)


def spec_request(data: dict[str, Any]) -> SpecRequest:
    return from_jsonable(SpecRequest, data)


# ---- presets -----------------------------------------------------------------------------------

def _preset_paths() -> dict[str, Path]:
    d = profiles_dir() / "hardware"
    return {p.stem: p for p in sorted(d.glob("*.json"))}


def list_presets() -> list[dict[str, Any]]:
    """[{name, gpus, cpu, ram_bytes, numa_nodes}] for every bundled preset."""
    out = []
    for name in _preset_paths():
        p = load_preset(name)
        out.append({"name": name, "gpus": [g.name for g in p.gpus], "gpu_vram_bytes": p.gpu_vram_bytes,
                    "cpu": f"{p.cpu.n_sockets}x {p.cpu.model}" if p.cpu.n_sockets > 1 else p.cpu.model,
                    "ram_bytes": p.system.ram_total_bytes, "numa_nodes": len(p.numa_nodes)})
    return out


def load_preset(name: str) -> HardwareProfile:
    paths = _preset_paths()
    if name not in paths:
        close = difflib.get_close_matches(name, list(paths), n=3, cutoff=0.4)
        raise InputError(f"unknown hardware preset {name!r}",
                         ("close matches: " + ", ".join(close) + "; " if close else "")
                         + "presets: " + ", ".join(paths) + "; or give a profile JSON from `moeplan probe`/"
                         "`moeplan hardware --out`")
    with open(paths[name], encoding="utf-8") as f:
        data = json.load(f)
    from dataclasses import replace

    return replace(HardwareProfile.from_dict(data), origin="preset")
