"""Write GGUF headers byte by byte, with any value in any field (for adversarial tests).

`header_of(path)` reads a GGUF written by tests/gguf_fixtures.py into an editable form:
a list of (key, type id, value) and a list of tensor infos; `write_raw` writes it back with
whatever changes a test made (a string where a number belongs, a 2^31-element array,
nested arrays, absurd dimensions), followed by `data_bytes` zero bytes of tensor data.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY, T_U64, T_I64, T_F64 = range(13)
SCALAR_FMT = {T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i", T_F32: "<f",
              T_BOOL: "<?", T_U64: "<Q", T_I64: "<q", T_F64: "<d"}


@dataclass
class RawTensor:
    name: str
    shape: list[int]
    type_id: int
    offset: int


@dataclass
class RawGGUF:
    kv: list[tuple[str, int, Any]] = field(default_factory=list)  # (key, type id, value)
    tensors: list[RawTensor] = field(default_factory=list)
    data_bytes: int = 0
    version: int = 3
    alignment: int = 32

    def set(self, key: str, vtype: int, value: Any) -> None:
        self.kv = [kv for kv in self.kv if kv[0] != key] + [(key, vtype, value)]


def _string(s: str | bytes) -> bytes:
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def _infer_type(v: Any) -> int:
    if isinstance(v, bool):
        return T_BOOL
    if isinstance(v, int):
        return T_U32 if 0 <= v < 2**32 else T_I64 if -(2**63) <= v < 2**63 else T_U64
    if isinstance(v, float):
        return T_F32
    if isinstance(v, (str, bytes)):
        return T_STRING
    return T_ARRAY


def value_bytes(vtype: int, v: Any) -> bytes:
    if vtype in SCALAR_FMT:
        fmt = SCALAR_FMT[vtype]
        if fmt[1] in "BbHhIiQq":
            bits = struct.calcsize(fmt) * 8
            half = 1 << (bits - 1)
            v = int(v) % (1 << bits) if fmt[1].isupper() else (int(v) + half) % (1 << bits) - half
        return struct.pack(fmt, v)
    if vtype == T_STRING:
        return _string(v)
    if vtype == T_ARRAY:
        items = list(v)
        itype = _infer_type(items[0]) if items else T_U32
        if itype == T_ARRAY or any(_infer_type(x) != itype for x in items):
            itype = T_ARRAY if any(isinstance(x, (list, tuple)) for x in items) else itype
        return struct.pack("<IQ", itype, len(items)) + b"".join(value_bytes(itype, x) for x in items)
    raise ValueError(f"value type {vtype}")


def write_raw(path: Path, g: RawGGUF) -> Path:
    out = bytearray(b"GGUF" + struct.pack("<IQQ", g.version, len(g.tensors), len(g.kv)))
    for key, vtype, value in g.kv:
        out += _string(key) + struct.pack("<I", vtype) + value_bytes(vtype, value)
    for t in g.tensors:
        out += _string(t.name) + struct.pack("<I", len(t.shape))
        out += b"".join(struct.pack("<Q", d % (1 << 64)) for d in t.shape)
        out += struct.pack("<IQ", t.type_id, t.offset % (1 << 64))
    pad = -len(out) % g.alignment
    out += b"\0" * pad + b"\0" * g.data_bytes
    Path(path).write_bytes(bytes(out))
    return Path(path)


def header_of(path: Path) -> RawGGUF:
    """The editable header of a GGUF written by gguf-py (types as gguf-py wrote them)."""
    import gguf

    r = gguf.GGUFReader(str(path))
    g = RawGGUF()
    for name, f in r.fields.items():
        if name.startswith("GGUF."):
            continue
        vtype = int(f.types[0])
        g.kv.append((name, vtype, f.contents()))
    for t in r.tensors:
        g.tensors.append(RawTensor(t.name, [int(d) for d in t.shape], int(t.tensor_type),
                                   int(t.data_offset) - int(r.data_offset)))
    g.data_bytes = Path(path).stat().st_size - int(r.data_offset)
    return g
