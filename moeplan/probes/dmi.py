"""Installed memory from SMBIOS type 17 (Memory Device) entries in sysfs.

/sys/firmware/dmi/entries/17-*/raw is readable by root only; without it the memory type and
speed stay unknown (or come from the CPU's spec sheet, marked so)."""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from moeplan.probes.fsread import list_dir, under

# SMBIOS 3.x, 7.18.2 Memory Device - Type
_MEMORY_TYPES = {0x18: "ddr3", 0x1A: "ddr4", 0x1B: "lpddr", 0x1C: "lpddr2", 0x1D: "lpddr3",
                 0x1E: "lpddr4", 0x20: "hbm", 0x21: "hbm2", 0x22: "ddr5", 0x23: "lpddr5"}


@dataclass(frozen=True)
class Dimm:
    size_bytes: int
    ram_type: str
    speed_mts: int | None  # rated
    configured_mts: int | None  # what the board runs it at


def _word(raw: bytes, off: int) -> int | None:
    return struct.unpack_from("<H", raw, off)[0] if len(raw) >= off + 2 else None


def parse_type17(raw: bytes) -> Dimm | None:
    """One SMBIOS type-17 structure -> Dimm, or None for an empty slot or another type."""
    if len(raw) < 0x15 or raw[0] != 17:
        return None
    length = raw[1]
    size = _word(raw, 0x0C)
    if not size or size == 0xFFFF:
        return None
    if size == 0x7FFF and length >= 0x20:
        size_bytes = struct.unpack_from("<I", raw, 0x1C)[0] * 1024**2
    else:
        size_bytes = (size & 0x7FFF) * (1024 if size & 0x8000 else 1024**2)
    if size_bytes == 0:
        return None
    speed = _word(raw, 0x15) if length >= 0x17 else None
    if speed == 0xFFFF and length >= 0x58:
        speed = struct.unpack_from("<I", raw, 0x54)[0]
    conf = _word(raw, 0x20) if length >= 0x22 else None
    if conf == 0xFFFF and length >= 0x5C:
        conf = struct.unpack_from("<I", raw, 0x58)[0]
    return Dimm(size_bytes=size_bytes, ram_type=_MEMORY_TYPES.get(raw[0x12], ""),
                speed_mts=speed or None, configured_mts=conf or None)


def read_dimms(root: str = "/") -> tuple[Dimm, ...]:
    """Populated DIMMs; () when the entries are absent or not readable (not root)."""
    base = "/sys/firmware/dmi/entries"
    out = []
    for name in list_dir(root, base):
        if not name.startswith("17-"):
            continue
        try:
            with open(os.path.join(under(root, base), name, "raw"), "rb") as f:
                d = parse_type17(f.read())
        except OSError:
            continue
        if d is not None:
            out.append(d)
    return tuple(out)
