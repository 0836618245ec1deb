"""Placing and checking memory on a NUMA node: libnuma through ctypes when present, and the
kernel's own page counts (/proc/self/numa_maps) to verify where pages really landed."""
from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

import numpy as np

from moeplan.probes.fsread import read_text


class Libnuma:
    """The few libnuma calls the probe needs (numa_alloc_onnode places pages with mbind, so
    a node without CPUs, e.g. CXL or HBM-only, can be measured too)."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        lib.numa_alloc_onnode.restype = ctypes.c_void_p
        lib.numa_alloc_onnode.argtypes = [ctypes.c_size_t, ctypes.c_int]
        lib.numa_free.restype = None
        lib.numa_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

    @classmethod
    def load(cls, find_library: Callable[[str], str | None] = ctypes.util.find_library) -> Libnuma | None:
        name = find_library("numa")
        if not name:
            return None
        try:
            lib = ctypes.CDLL(name)
            if lib.numa_available() < 0:  # kernel without NUMA support
                return None
            return cls(lib)
        except (OSError, AttributeError):
            return None

    def alloc_onnode(self, n_bytes: int, node: int) -> tuple[np.ndarray, Callable[[], None]]:
        """A uint64 array whose pages go to `node` when first touched, and its release."""
        ptr = self._lib.numa_alloc_onnode(n_bytes, node)
        if not ptr:
            raise MemoryError(f"numa_alloc_onnode({n_bytes}, {node}) failed")
        arr = np.ctypeslib.as_array((ctypes.c_uint64 * (n_bytes // 8)).from_address(ptr))
        return arr, lambda: self._lib.numa_free(ptr, n_bytes)


def parse_numa_maps(text: str | None) -> dict[int, dict[int, int]]:
    """/proc/self/numa_maps -> {vma start address: {node: pages}}."""
    out: dict[int, dict[int, int]] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if not parts:
            continue
        try:
            start = int(parts[0], 16)
        except ValueError:
            continue
        nodes = {}
        for p in parts[1:]:
            if p.startswith("N") and "=" in p:
                k, v = p[1:].split("=", 1)
                if k.isdigit() and v.isdigit():
                    nodes[int(k)] = int(v)
        out[start] = nodes
    return out


def parse_maps(text: str | None) -> list[tuple[int, int]]:
    """/proc/self/maps -> [(start, end)] address ranges."""
    out = []
    for line in (text or "").splitlines():
        rng = line.split(" ", 1)[0]
        if "-" in rng:
            a, b = rng.split("-", 1)
            try:
                out.append((int(a, 16), int(b, 16)))
            except ValueError:
                continue
    return out


def share_on_node(ranges: list[tuple[int, int]], node: int, maps: list[tuple[int, int]],
                  numa_maps: dict[int, dict[int, int]]) -> float | None:
    """Fraction of the pages of the VMAs holding `ranges` that sit on `node` (None: unknown)."""
    pages: dict[int, int] = {}
    for start, end in maps:
        if any(lo < end and hi > start for lo, hi in ranges) and start in numa_maps:
            for n, cnt in numa_maps[start].items():
                pages[n] = pages.get(n, 0) + cnt
    total = sum(pages.values())
    return pages.get(node, 0) / total if total else None


def placement_share(arrays: list[np.ndarray], node: int, root: str = "/") -> float | None:
    """Where the pages of `arrays` are, by the kernel's count (no libnuma needed)."""
    ranges = [(a.ctypes.data, a.ctypes.data + a.nbytes) for a in arrays]
    return share_on_node(ranges, node, parse_maps(read_text(root, "/proc/self/maps")),
                         parse_numa_maps(read_text(root, "/proc/self/numa_maps")))
