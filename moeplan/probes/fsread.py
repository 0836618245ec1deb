"""Reading sysfs/procfs files under a root path (so tests can point it at a fake tree)."""
from __future__ import annotations

import os

from moeplan.planner.hardware.profile import format_cpulist  # noqa: F401  (re-exported)


def under(root: str, path: str) -> str:
    """`path` (absolute, as on a live system) inside `root`."""
    return os.path.join(root, path.lstrip("/"))


def read_text(root: str, path: str) -> str | None:
    """The file's text, or None when it is missing or unreadable (sysfs varies by kernel)."""
    try:
        with open(under(root, path), encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def read_int(root: str, path: str) -> int | None:
    text = read_text(root, path)
    if text is None:
        return None
    try:
        return int(text.strip().split()[0])
    except (ValueError, IndexError):
        return None


def list_dir(root: str, path: str) -> list[str]:
    try:
        return sorted(os.listdir(under(root, path)))
    except OSError:
        return []


def parse_cpulist(text: str | None) -> tuple[int, ...]:
    """'0-3,8,10-11' -> (0, 1, 2, 3, 8, 10, 11). Empty or None -> ()."""
    if not text:
        return ()
    out: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    return tuple(sorted(set(out)))


def parse_kv_lines(text: str | None, sep: str = ":") -> dict[str, str]:
    """'Key:   value' lines -> {key: value} (first occurrence wins)."""
    out: dict[str, str] = {}
    for line in (text or "").splitlines():
        if sep in line:
            k, v = line.split(sep, 1)
            out.setdefault(k.strip(), v.strip())
    return out


def kib_field(fields: dict[str, str], key: str) -> int | None:
    """'12345 kB' -> bytes."""
    v = fields.get(key)
    if v is None:
        return None
    try:
        n = int(v.split()[0])
    except (ValueError, IndexError):
        return None
    return n * 1024 if v.lower().endswith("kb") else n
