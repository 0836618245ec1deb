"""Read a GGUF header and tensor index, never tensor data.

Streams the header with struct (no mmap, no numpy views), so reading the index of a 400 GB
file costs a few MB of reads, a truncated file is caught by comparing tensor extents with
the file size, and tensor types this version of gguf-py does not know (ik_llama.cpp's IQ*_K)
still get exact sizes from the tensor offsets.

Format (GGUF v2/v3): magic 'GGUF', u32 version, u64 n_tensors, u64 n_kv, then n_kv
(key, type, value), then n_tensors (name, n_dims, dims[n_dims] u64, type u32, offset u64),
then tensor data aligned to `general.alignment` (default 32).
"""
from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from moeplan.errors import ModelFormatError
from moeplan.planner.limits import MAX_ALIGNMENT, MAX_GGUF_ARRAY_DEPTH, MAX_TENSOR_DIM, MAX_TENSOR_ELEMENTS
from moeplan.planner.model.ggml import ROW_META_BYTES, TYPE_BY_ID, TYPE_SIZES

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
# arrays longer than this are kept as their length only (vocab, merges, scores)
MAX_ARRAY_KEEP = 8192
SHARD_RE = re.compile(r"^(?P<prefix>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")

_SCALAR = {
    0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4),
    6: ("<f", 4), 7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8),
}
_T_STRING, _T_ARRAY = 8, 9


@dataclass(frozen=True)
class ArrayInfo:
    """A long array kept as its element type and length only."""

    item_type: int
    length: int

    def __len__(self) -> int:
        return self.length


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml order, ne0 first
    type_id: int
    type_name: str
    offset: int  # relative to the data section
    n_bytes: int


@dataclass(frozen=True)
class GGUFHeader:
    path: str
    version: int
    metadata: dict[str, Any]
    tensors: tuple[TensorInfo, ...]
    data_offset: int
    file_bytes: int


class _Reader:
    def __init__(self, f: BinaryIO, path: str, size: int) -> None:
        self.f, self.path, self.size = f, path, size

    def corrupt(self, what: str) -> ModelFormatError:
        return ModelFormatError(f"{self.path}: corrupt GGUF header ({what})",
                                "the header is damaged or this is not a GGUF file; downloading the same "
                                "file again will not help unless its checksum differs")

    def remaining(self) -> int:
        return self.size - self.f.tell()

    def read(self, n: int) -> bytes:
        # never ask for more than the file holds: a corrupt count must not allocate gigabytes
        if n > self.size:
            raise self.corrupt(f"a field of {n:,} bytes in a file of {self.size:,}")
        if n > self.remaining():
            raise ModelFormatError(
                f"{self.path}: truncated GGUF header (wanted {n} bytes at offset {self.f.tell()}, "
                f"the file ends at {self.size})",
                "the download is incomplete; check its size against the source and download it again",
            )
        b = self.f.read(n)
        if len(b) != n:
            raise ModelFormatError(
                f"{self.path}: truncated GGUF header (wanted {n} bytes at offset {self.f.tell() - len(b)})",
                "the download is incomplete; check its size against the source and download it again",
            )
        return b

    def u32(self) -> int:
        return struct.unpack("<I", self.read(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.read(8))[0]

    def string(self) -> str:
        n = self.u64()
        if n > 1 << 24:
            raise ModelFormatError(f"{self.path}: corrupt GGUF header (string of {n} bytes)",
                                   "the file is damaged or not a GGUF file")
        return self.read(n).decode("utf-8", errors="replace")

    def value(self, vtype: int, depth: int = 0) -> Any:
        if depth > MAX_GGUF_ARRAY_DEPTH:
            raise self.corrupt(f"arrays nested more than {MAX_GGUF_ARRAY_DEPTH} deep")
        if vtype in _SCALAR:
            fmt, n = _SCALAR[vtype]
            return struct.unpack(fmt, self.read(n))[0]
        if vtype == _T_STRING:
            return self.string()
        if vtype == _T_ARRAY:
            itype = self.u32()
            count = self.u64()
            min_item = _SCALAR[itype][1] if itype in _SCALAR else 8 if itype == _T_STRING else 12
            if count > 1 << 31 or count * min_item > self.remaining():
                raise self.corrupt(f"array of {count:,} items with {self.remaining():,} bytes left in the file")
            if itype in _SCALAR:
                fmt, n = _SCALAR[itype]
                raw = self.read(n * count)
                if count > MAX_ARRAY_KEEP:
                    return ArrayInfo(itype, count)
                return list(struct.unpack("<" + fmt[1] * count, raw))
            if itype == _T_STRING:
                keep = count <= MAX_ARRAY_KEEP
                items = []
                for _ in range(count):
                    n = self.u64()
                    if n > 1 << 24:
                        raise ModelFormatError(f"{self.path}: corrupt GGUF header (string of {n} bytes)",
                                               "the file is damaged or not a GGUF file")
                    b = self.read(n)
                    if keep:
                        items.append(b.decode("utf-8", errors="replace"))
                return items if keep else ArrayInfo(itype, count)
            if itype == _T_ARRAY:
                return [self.value(_T_ARRAY, depth + 1) for _ in range(count)]
            raise ModelFormatError(f"{self.path}: corrupt GGUF header (array item type {itype})",
                                   "the file is damaged or not a GGUF file")
        raise ModelFormatError(f"{self.path}: corrupt GGUF header (value type {vtype})",
                               "the file is damaged or not a GGUF file")


def tensor_nbytes(type_id: int, shape: tuple[int, ...]) -> int | None:
    """ggml_nbytes of a contiguous tensor, or None when the type is unknown here."""
    name = TYPE_BY_ID.get(type_id)
    if name is None or name not in TYPE_SIZES:
        return None
    block, size = TYPE_SIZES[name]
    n = 1
    for d in shape:
        n *= d
    if not shape:
        n = 1
    rows = n // shape[0] if shape and shape[0] else 1
    meta = ROW_META_BYTES.get(name, 0) * rows  # ik_llama.cpp's per-row scales (ggml.py)
    return (n // block * size if block > 1 else n * size) + meta


def read_gguf_header(path: str | os.PathLike) -> GGUFHeader:
    """Parse one GGUF file's header and tensor index. Raises ModelFormatError."""
    p = str(path)
    try:
        size = os.path.getsize(p)
        f = open(p, "rb")
    except FileNotFoundError:
        raise ModelFormatError(f"{p}: no such file", "check the path; for a split model give any shard") from None
    except IsADirectoryError:
        raise ModelFormatError(f"{p}: is a folder, not a GGUF file",
                               "give the .gguf file, or a Hugging Face folder with config.json") from None
    except PermissionError:
        raise ModelFormatError(f"{p}: permission denied", "make the file readable for this user") from None
    with f:
        r = _Reader(f, p, size)
        if size < 24:
            raise ModelFormatError(f"{p}: too short to be a GGUF file ({size} bytes)",
                                   "the download is incomplete or this is not a GGUF file")
        magic = r.read(4)
        if magic != GGUF_MAGIC:
            raise ModelFormatError(f"{p}: not a GGUF file (magic {magic!r})",
                                   "give a .gguf file, a Hugging Face folder or a profile name (moeplan models)")
        version = r.u32()
        if version not in (2, 3):
            raise ModelFormatError(f"{p}: GGUF version {version} is not supported (2 and 3 are)",
                                   "re-convert the model with a current llama.cpp")
        n_tensors, n_kv = r.u64(), r.u64()
        # each key takes >= 13 bytes (name length, type, a 1-byte value), each tensor >= 24
        if n_tensors > 1 << 24 or n_kv > 1 << 20 or n_kv * 13 + n_tensors * 24 > r.remaining():
            raise ModelFormatError(f"{p}: corrupt GGUF header ({n_tensors} tensors, {n_kv} keys)",
                                   "the file is damaged or not a GGUF file")
        meta: dict[str, Any] = {}
        for _ in range(n_kv):
            key = r.string()
            meta[key] = r.value(r.u32())
        raw: list[tuple[str, tuple[int, ...], int, int]] = []
        for _ in range(n_tensors):
            name = r.string()
            n_dims = r.u32()
            if n_dims > 8:
                raise ModelFormatError(f"{p}: corrupt tensor info for {name!r} ({n_dims} dims)",
                                       "the file is damaged")
            shape = tuple(r.u64() for _ in range(n_dims))
            n_elements = 1
            for d in shape:
                n_elements *= d
            if any(d > MAX_TENSOR_DIM for d in shape) or n_elements > MAX_TENSOR_ELEMENTS:
                raise r.corrupt(f"tensor {name!r} has shape {list(shape)}, above the limit of "
                                f"{MAX_TENSOR_ELEMENTS:.3g} elements")
            type_id = r.u32()
            offset = r.u64()
            raw.append((name, shape, type_id, offset))
        align = meta.get("general.alignment", DEFAULT_ALIGNMENT)
        if (isinstance(align, bool) or not isinstance(align, int) or not 1 <= align <= MAX_ALIGNMENT
                or align & (align - 1)):
            raise r.corrupt(f"general.alignment = {align!r} is not a power of two up to {MAX_ALIGNMENT}")
        pos = f.tell()
        data_offset = -(-pos // align) * align

    data_bytes = size - data_offset
    order = sorted(range(len(raw)), key=lambda i: raw[i][3])
    next_offset = {}
    for a, b in zip(order, order[1:]):
        next_offset[a] = raw[b][3]
    tensors: list[TensorInfo] = []
    for i, (name, shape, type_id, offset) in enumerate(raw):
        nbytes = tensor_nbytes(type_id, shape)
        type_name = TYPE_BY_ID.get(type_id, f"type{type_id}")
        if nbytes is None:
            # unknown type (e.g. an ik_llama.cpp quant): size is the gap to the next tensor
            end = next_offset.get(i, data_bytes)
            nbytes = end - offset
        if offset > size:
            raise ModelFormatError(
                f"{p}: corrupt GGUF header: tensor {name!r} starts at data offset {offset:,}, past the end of "
                f"the file ({size:,} bytes)",
                "the header is damaged (not an incomplete download); re-convert or fetch a good copy")
        if nbytes > size:
            raise ModelFormatError(
                f"{p}: corrupt GGUF header: tensor {name!r} of shape {list(shape)} ({type_name}) would take "
                f"{nbytes:,} bytes, more than the whole file ({size:,})",
                "the header is damaged (not an incomplete download); re-convert or fetch a good copy")
        if offset + nbytes > data_bytes:
            raise ModelFormatError(
                f"{p}: truncated: tensor {name!r} ends at byte {data_offset + offset + nbytes:,} "
                f"but the file has {size:,}",
                "the download is incomplete; download the file again",
            )
        tensors.append(TensorInfo(name, shape, type_id, type_name, offset, nbytes))
    return GGUFHeader(p, version, meta, tuple(tensors), data_offset, size)


def find_shards(path: str | os.PathLike) -> list[Path]:
    """All shards of a split GGUF set, given any one of them (in order). Raises on a gap."""
    p = Path(path)
    m = SHARD_RE.match(p.name)
    if not m:
        return [p]
    count, no = int(m.group("count")), int(m.group("no"))
    if count < 1 or not 1 <= no <= count:
        raise ModelFormatError(f"{p.name}: shard {no} of {count} is not a valid split-file name",
                               "split files are named NAME-00001-of-0000N.gguf; rename it or give the first shard")
    prefix = m.group("prefix")
    shards = [p.parent / f"{prefix}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
    missing = [s.name for s in shards if not s.exists()]
    if missing:
        raise ModelFormatError(
            f"{p.name}: split set of {count} is missing {', '.join(missing[:3])}"
            + (f" and {len(missing) - 3} more" if len(missing) > 3 else ""),
            "download every shard into the same folder",
        )
    return shards


def read_gguf_set(path: str | os.PathLike) -> list[GGUFHeader]:
    """Headers of every shard of the set `path` belongs to (one element if not split)."""
    headers = [read_gguf_header(s) for s in find_shards(path)]
    first = headers[0].metadata
    count = first.get("split.count")
    expected = first.get("split.tensors.count")
    for key, v in (("split.count", count), ("split.tensors.count", expected)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise ModelFormatError(f"{path}: {key} = {v!r} is not a whole number",
                                   "the header is damaged; re-convert or fetch a good copy")
    if count is not None and int(count) != len(headers):
        raise ModelFormatError(f"{path}: header says split.count={count} but {len(headers)} files were found",
                               "download every shard into the same folder")
    got = sum(len(h.tensors) for h in headers)
    if expected is not None and int(expected) != got:
        raise ModelFormatError(f"{path}: the shards hold {got} tensors, the header promises {expected}",
                               "a shard is from another download or damaged; download the set again")
    return headers
