"""Sizes and rates as people type them, and back.

`G`, `GiB`, `Gi` are binary (1024**3: what llama.cpp and nvidia-smi print);
`GB` is decimal (1000**3: what file listings on Hugging Face and spec sheets print).
A bare number is refused (`--ram 128` stored 128 bytes once): bytes are written `1024B`.
Rates take a `/s` suffix: `1792GB/s`, `25GiB/s`.
"""
from __future__ import annotations

import re

from moeplan.errors import InputError

_BINARY = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}
_DECIMAL = {"": 1, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4, "P": 1000**5}

_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGTP]?)(I?B?|IB)\s*$", re.IGNORECASE)

GIB = 1024**3
MIB = 1024**2


def parse_size(text: str | int | float, what: str = "size") -> int:
    """Parse '96G', '96GiB', '151GB', '512M', '1.5T', '1024B' into bytes.

    Binary: G, GiB, Gi (and lowercase). Decimal: GB. A bare number ('128') is refused: it was
    meant as 128G or 128GB, never 128 bytes. Raises InputError with a hint.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text < 0:
            raise InputError(f"{what} must not be negative: {text}", "for example 96G or 151GB")
        return int(text)
    s = str(text).strip()
    m = _SIZE_RE.match(s)
    if not m:
        raise InputError(
            f"cannot read {what} {s!r}",
            "write a number with a unit: 96G or 96GiB (binary), 151GB (decimal), 512M",
        )
    number, prefix, suffix = m.group(1), m.group(2).upper(), m.group(3).upper()
    if not prefix and not suffix:
        raise InputError(f"{what} {s!r} has no unit",
                         f"{number}G (binary, what nvidia-smi prints) or {number}GB (decimal)? "
                         f"bytes are written {number}B")
    if suffix in ("B",) and prefix:
        mult = _DECIMAL[prefix]
    elif suffix in ("", "I", "IB"):
        mult = _BINARY[prefix]
    elif suffix == "B":
        mult = 1
    else:  # pragma: no cover - regex excludes the rest
        raise InputError(f"cannot read {what} {s!r}", "for example 96G or 151GB")
    value = float(number) * mult
    return int(round(value))


MIN_PLAUSIBLE_BYTES = 1024**2


def check_plausible_bytes(value: int | float, where: str, exc: type[Exception] = InputError) -> None:
    """A memory size read from a file (a profile's `*_bytes`) below 1 MiB is a size written
    without its unit (`"ram_total_bytes": 128`), never a real machine: refuse it with the bytes
    the user probably meant."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0 or value >= MIN_PLAUSIBLE_BYTES:
        return
    n = f"{value:g}"
    raise exc(f"{where} = {n} bytes: a memory size without its unit?",
              f"the field is in bytes: {n} GiB is {int(value * 1024**3)}, {n} GB is {int(value * 1000**3)}")


def parse_rate(text: str | int | float, what: str = "rate") -> float:
    """Parse '1792GB/s', '25GiB/s', '64G/s' into bytes per second."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    s = str(text).strip()
    if s.lower().endswith("/s"):
        s = s[:-2]
    if re.match(r"^\s*[0-9]*\.?[0-9]+\s*$", s):
        raise InputError(f"{what} {str(text).strip()!r} has no unit",
                         f"{s.strip()}GB/s (decimal, as spec sheets print) or {s.strip()}GiB/s?")
    return float(parse_size(s, what))


def parse_count(text: str, what: str = "number") -> int:
    try:
        n = int(str(text).strip())
    except ValueError:
        raise InputError(f"cannot read {what} {text!r}", "give a whole number, for example 4096") from None
    if n < 0:
        raise InputError(f"{what} must not be negative: {n}", "give a whole number, for example 4096")
    return n


def parse_ctx(text: str | int) -> int:
    """Context length: 4096, 32k, 128K (k = 1024 as llama.cpp users write it)."""
    s = str(text).strip().lower()
    m = re.match(r"^([0-9]+)\s*(k?)$", s)
    if not m:
        raise InputError(f"cannot read context length {text!r}", "for example 4096, 32k or 131072")
    n = int(m.group(1)) * (1024 if m.group(2) else 1)
    return n
