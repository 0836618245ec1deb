"""`moeplan probe` (measure this machine) and `moeplan hardware` (describe one by its parts)."""
from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from moeplan.commands.common import JsonOpt, ProgressOpt, command
from moeplan.errors import InputError
from moeplan.units import parse_count, parse_rate, parse_size

if TYPE_CHECKING:
    from moeplan.planner.hardware.profile import HardwareProfile

OutOpt = Annotated[Optional[str], typer.Option("--out", help="Write the profile JSON here (atomically).")]


def parse_pcie(text: str) -> tuple[int, int]:
    """'5x16', 'gen5x16', '4.0 x8' -> (generation, lanes)."""
    m = re.match(r"^\s*(?:gen)?\s*([1-6])(?:\.0)?\s*x\s*(1|2|4|8|16|32)\s*$", text.lower())
    if not m:
        raise InputError(f"cannot read --pcie {text!r}", "write GENxLANES, for example 5x16 or 4x8")
    return int(m.group(1)), int(m.group(2))


def parse_gpu_list(values: list[str]) -> tuple[list[str], list[tuple[int, int] | None]]:
    """--gpu values -> one part name per card and its own link (None = the part's or --pcie):
    'RTX 4090', 'RTX 4090:2' (two of them), 'RTX 3090@3x4' (on a gen 3 x4 riser)."""
    names: list[str] = []
    links: list[tuple[int, int] | None] = []
    for v in values:
        text, count = v, 1
        m = re.match(r"^(.*?):\s*(\d+)\s*$", text)
        if m:
            text, count = m.group(1), int(m.group(2))
            if count < 1:
                raise InputError(f"--gpu {v!r}: the count must be at least 1", "for example --gpu 'RTX 4090:2'")
        link = None
        if "@" in text:
            text, _, lk = text.rpartition("@")
            link = parse_pcie(lk)
        text = text.strip()
        if not text:
            raise InputError(f"cannot read --gpu {v!r}", "a part name, optionally @GENxLANES and :COUNT, "
                             "for example --gpu 'RTX 3090@3x4:2'")
        names += [text] * count
        links += [link] * count
    return names, links


def parse_isa(text: str) -> tuple[str, ...]:
    from moeplan.probes.cpu import ISA_FLAGS

    flags = tuple(f.strip().lower() for f in text.split(",") if f.strip())
    bad = [f for f in flags if f not in ISA_FLAGS]
    if bad:
        raise InputError(f"unknown ISA flag(s): {', '.join(bad)}", "known: " + ", ".join(ISA_FLAGS))
    return flags


@contextmanager
def stderr_steps(enabled: bool = True, force: bool = False
                 ) -> Iterator[tuple[Callable[[str], None], Callable[[int], None]]]:
    """Progress of a multi-second probe on stderr: (on_step, on_total). On a terminal (or with
    --progress) a bar with the step, elapsed time and ETA; otherwise one plain line per step;
    nothing when disabled (--json without --progress)."""
    from moeplan.ui.console import progress

    if not (enabled or force):
        yield (lambda msg: None), (lambda n: None)
        return
    if not (sys.stderr.isatty() or force):
        yield (lambda msg: print(f"probe: {msg}", file=sys.stderr, flush=True)), (lambda n: None)
        return
    with progress("probe", total=None, force=force) as bar:
        started = [False]

        def step(msg: str) -> None:
            if started[0]:
                bar.advance(1)
            started[0] = True
            bar.update(description=f"probe: {msg}")

        yield step, (lambda n: bar.update(total=n))


def show_profile(p: HardwareProfile) -> None:
    from moeplan.ui.console import stdout_console
    from moeplan.ui.hardware_tables import hardware_tables

    con = stdout_console()
    for t in hardware_tables(p):
        con.print(t)
    for w in p.warnings:
        con.print(f"[yellow]warning:[/] {w}", highlight=False)
    for n in p.notes:
        con.print(f"note: {n}", markup=False, highlight=False)


def _write(p: HardwareProfile, out: str | None) -> None:
    if not out:
        return
    from moeplan.probes.hwprofile import write_json_atomic

    try:
        write_json_atomic(out, p.to_dict())
    except OSError as exc:  # the folder exists but the rename or write failed
        raise InputError(f"cannot write {out}: {exc.strerror or exc}", "choose a writable folder") from None
    print(f"wrote {out}", file=sys.stderr)


def register(app: typer.Typer) -> None:
    @app.command("probe")
    @command
    def probe_cmd(
        quick: Annotated[bool, typer.Option("--quick", help="Fast figures, under 20 s (the default).")] = False,
        full: Annotated[bool, typer.Option("--full", help="More and larger samples: slower, tighter figures.")] = False,
        model_path: Annotated[Optional[str], typer.Option("--model-path", help="Model file (or folder) whose disk to time; read only.")] = None,
        out: OutOpt = None,
        as_json: JsonOpt = False,
        show_progress: ProgressOpt = False,
    ) -> None:
        """Measure this machine: GPUs, CPU, NUMA nodes, DRAM per node, host<->GPU copies, disk."""
        from moeplan.probes.hwprofile import save_cached
        from moeplan.probes.probe import FULL, QUICK, run_probe
        from moeplan.ui.console import emit_json

        if quick and full:
            raise InputError("--quick and --full exclude each other", "pick one (--quick is the default)")
        with stderr_steps(enabled=not as_json, force=show_progress) as (step, total):
            p = run_probe(FULL if full else QUICK, model_path=model_path, on_step=step, on_total=total)
        _, warning = save_cached(p)
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
        _write(p, out)
        if as_json:
            emit_json(p.to_dict())
        else:
            show_profile(p)

    @app.command("hardware")
    @command
    def hardware_cmd(
        gpu: Annotated[Optional[list[str]], typer.Option("--gpu", help="GPU from the parts catalog: 'RTX 4090', 'RTX PRO 6000 Blackwell', H100 ...; repeat it for mixed cards, NAME:COUNT for several of one, NAME@GENxLANES for a card's own link ('RTX 3090@3x4:2').")] = None,
        gpu_count: Annotated[Optional[str], typer.Option("--gpu-count", help="Number of identical GPUs (default 1 with --gpu).")] = None,
        gpu_vram: Annotated[Optional[str], typer.Option("--gpu-vram", help="VRAM per GPU: 96G (binary) or 96GB.")] = None,
        gpu_bw: Annotated[Optional[str], typer.Option("--gpu-bw", help="GPU memory bandwidth peak: 1792GB/s.")] = None,
        gpu_tflops: Annotated[Optional[float], typer.Option("--gpu-tflops", help="Dense FP16 tensor TFLOPS.")] = None,
        pcie: Annotated[Optional[str], typer.Option("--pcie", help="GPU link: 5x16, 4x8 ...")] = None,
        h2d: Annotated[Optional[str], typer.Option("--h2d", help="Known host-to-GPU copy rate (used as is): 25GB/s.")] = None,
        gpu_node: Annotated[int, typer.Option("--gpu-node", help="NUMA node the GPUs hang off.")] = 0,
        cpu: Annotated[Optional[str], typer.Option("--cpu", help="CPU from the parts catalog: 'EPYC 9355', 'Xeon Gold 6548Y+' ...")] = None,
        sockets: Annotated[Optional[str], typer.Option("--sockets", help="CPU sockets (multiplies --cores/--channels).")] = None,
        cores: Annotated[Optional[str], typer.Option("--cores", help="Physical cores per socket.")] = None,
        threads: Annotated[Optional[str], typer.Option("--threads", help="Logical CPUs per socket.")] = None,
        channels: Annotated[Optional[str], typer.Option("--channels", help="Memory channels per socket.")] = None,
        ram_type: Annotated[Optional[str], typer.Option("--ram-type", help="ddr4, ddr5, lpddr5, lpddr5x.")] = None,
        ram_speed: Annotated[Optional[str], typer.Option("--ram-speed", help="Memory speed in MT/s: 5200.")] = None,
        ram: Annotated[Optional[str], typer.Option("--ram", help="Installed RAM in total: 512G.")] = None,
        numa_nodes: Annotated[Optional[str], typer.Option("--numa-nodes", help="NUMA nodes in total (default: sockets).")] = None,
        dram_bw: Annotated[Optional[str], typer.Option("--dram-bw", help="Known DRAM read rate per NUMA node (used as is): 250GB/s.")] = None,
        cpu_ghz: Annotated[Optional[float], typer.Option("--cpu-ghz", help="CPU base clock in GHz.")] = None,
        isa: Annotated[Optional[str], typer.Option("--isa", help="CPU ISA flags: avx2,avx512f,amx_int8 ...")] = None,
        disk: Annotated[Optional[str], typer.Option("--disk", help="Disk class: nvme-gen3/4/5, sata-ssd, hdd.")] = None,
        disk_read: Annotated[Optional[str], typer.Option("--disk-read", help="Known sequential disk read rate: 7GB/s.")] = None,
        name: Annotated[Optional[str], typer.Option("--name", help="Name of the profile.")] = None,
        os_family: Annotated[str, typer.Option("--os", help="linux | windows: the OS the machine runs "
                                                            "(NUMA binding, WDDM VRAM reserve, launch files).")] = "linux",
        out: OutOpt = None,
        list_parts: Annotated[bool, typer.Option("--list", help="List the parts catalog and the presets.")] = False,
        show: Annotated[Optional[str], typer.Option("--show", help="Show a profile JSON or a preset instead of building one.")] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Describe a machine you don't have yet (parts and numbers -> a spec-sheet profile)."""
        from moeplan import __version__
        from moeplan.planner.hardware.spec import SpecRequest
        from moeplan.profiles import catalog
        from moeplan.ui.console import emit_json

        if list_parts:
            return _list(as_json)
        if show:
            from moeplan.probes.hwprofile import load_hardware

            p = load_hardware(show, allow_probe=False)
            return emit_json(p.to_dict()) if as_json else show_profile(p)
        if not any((gpu, gpu_vram, cpu, cores, ram)):
            raise InputError("describe a machine: at least --ram and --cpu (or --cores)",
                             "for example: moeplan hardware --gpu 'RTX 4090' --cpu 'Ryzen 9 7950X' --ram 96G")
        gen, width = parse_pcie(pcie) if pcie else (None, None)
        names, links = parse_gpu_list(gpu or [])
        count = parse_count(gpu_count, "--gpu-count") if gpu_count is not None else None
        mixed = len(set(names)) > 1 or any(links)
        if len(names) > 1 and not mixed:
            if count is not None and count != len(names):
                raise InputError(f"--gpu-count {count} does not match the {len(names)} GPUs named",
                                 "give the count once: --gpu 'RTX 4090:2' or --gpu 'RTX 4090' --gpu-count 2")
            count = len(names)
        req = SpecRequest(
            name=name or "",
            gpu=names[0] if names else None, gpu_count=count,
            more_gpus=tuple(names[1:]) if mixed else (),
            gpu_links=tuple(f"{lk[0]}x{lk[1]}" if lk else "" for lk in links) if any(links) else (),
            gpu_vram_bytes=parse_size(gpu_vram, "--gpu-vram") if gpu_vram else None,
            gpu_bw_bytes_per_s=parse_rate(gpu_bw, "--gpu-bw") if gpu_bw else None,
            gpu_fp16_flop_per_s=gpu_tflops * 1e12 if gpu_tflops else None,
            pcie_gen=gen, pcie_width=width,
            h2d_bytes_per_s=parse_rate(h2d, "--h2d") if h2d else None,
            gpu_node=gpu_node, cpu=cpu,
            sockets=_positive(sockets, "--sockets"), cores=_positive(cores, "--cores"),
            threads=_positive(threads, "--threads"), channels=_positive(channels, "--channels"),
            ram_type=_ram_type(ram_type), ram_speed_mts=_positive(ram_speed, "--ram-speed") or _mrdimm_speed(ram_type, cpu),
            ram_bytes=parse_size(ram, "--ram") if ram else None,
            numa_nodes=_positive(numa_nodes, "--numa-nodes"),
            dram_bw_bytes_per_s=parse_rate(dram_bw, "--dram-bw") if dram_bw else None,
            cpu_ghz=cpu_ghz, isa=parse_isa(isa) if isa else None,
            disk=disk.lower() if disk else None,
            disk_read_bytes_per_s=parse_rate(disk_read, "--disk-read") if disk_read else None,
            os=os_family.strip().lower(),
        )
        p = catalog.build_profile(req)
        p = replace(p, moeplan_version=__version__,
                    created=datetime.now(UTC).isoformat(timespec="seconds"))
        _write(p, out)
        if as_json:
            emit_json(p.to_dict())
        else:
            show_profile(p)


def _positive(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    n = parse_count(text, what)
    if n == 0:
        raise InputError(f"{what} must be at least 1", f"for example {what} 2")
    return n


def _mrdimm_speed(ram_type: str | None, cpu: str | None) -> int | None:
    """--ram-type mrdimm without --ram-speed: the named part's rated MRDIMM speed (the type
    itself becomes a DDR5 channel, so the speed is what says MRDIMM)."""
    if not ram_type or _ram_type_key(ram_type) != "mrdimm" or not cpu:
        return None
    from moeplan.profiles.catalog import find_cpu

    return find_cpu(cpu).rated_mts("mrdimm")


def _ram_type_key(text: str) -> str:
    return text.strip().lower().replace("-", "")


def _ram_type(text: str | None) -> str | None:
    if text is None:
        return None
    from moeplan.profiles.catalog import efficiency

    t = _ram_type_key(text)
    if t == "mrdimm":
        # MRDIMM (DDR5 multiplexed-rank DIMM): a DDR5 channel at the stated MT/s (8800), the
        # buffer interleaving two ranks; peak = MT/s x 8 B like any DDR5 channel
        t = "ddr5"
    known = [k for k in efficiency().dram_read if k != "unknown"]
    if t not in known:
        raise InputError(f"unknown --ram-type {text!r}", "use one of " + ", ".join(known))
    return t


def _list(as_json: bool) -> None:
    from moeplan.planner.serde import to_jsonable
    from moeplan.profiles import catalog
    from moeplan.ui.console import emit_json, stdout_console
    from moeplan.ui.hardware_tables import parts_tables, presets_table

    presets = catalog.list_presets()
    if as_json:
        emit_json({"presets": presets, "gpus": to_jsonable(list(catalog.gpu_parts())),
                   "cpus": to_jsonable(list(catalog.cpu_parts()))})
        return
    con = stdout_console()
    for t in parts_tables(list(catalog.gpu_parts()), list(catalog.cpu_parts())):
        con.print(t)
    con.print(presets_table(presets))
