"""Where one block's routed-expert matrices live: device or host tensors, or the model file.

  TensorExperts  (P, 2F, D) gate_up and (P, D, F) down tensors on one device: the GPU tier
                 (compute device) or host RAM (the CPU tier; pinned when the device is CUDA, so
                 uploads run at the full host-to-device rate, else huge-page backed where the
                 OS offers it: executor/hostmem.py). Expert e uses slot e % P; P < N
                 ("expert pool") bounds memory for sampled giant models and is reported.
  MmapExperts    the GGUF's own expert bytes, read through a read-only mmap of the file at
                 the tensor offsets (page cache, or the disk when the pages are cold), never
                 written. F32/F16/BF16 experts are used as they are (zero copy, computed in the
                 file's dtype as ggml does); quantized experts are dequantized with gguf-py
                 when real weights are asked for, else turned into weights by a byte stand-in
                 (bytes or nibbles -> the compute dtype; the time includes that unpacking).
Biases of routed experts (gpt-oss) stay on the compute device, as llama.cpp keeps them there;
a host copy serves CPU-side compute.
"""
from __future__ import annotations

import math
import mmap
import os
import warnings

import numpy as np
import torch

from moeplan.errors import InputError
from moeplan.executor.hostmem import host_empty
from moeplan.executor.layout import ExpertLayout
from moeplan.executor.ops import ExpertWeights
from moeplan.probes.gguf_file import read_gguf_header

FLOAT_TYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


class ExpertBiases:
    """gate_up (N, 2F) and down (N, D) biases of a block, or None where the model has none."""

    def __init__(self, lay: ExpertLayout, source, device: torch.device, dtype: torch.dtype) -> None:
        from moeplan.executor.layout import Weight

        n, f, d = lay.n_expert, lay.n_ff, lay.n_embd
        self.gate_up = self.down = None
        b = lay.bias_names
        if "gate_up" in b:
            self.gate_up = source.tensor(Weight(b["gate_up"], (n, 2 * f), 0, "F32"), device)
        elif "gate" in b or "up" in b:
            parts = []
            for part in ("gate", "up"):
                if part in b:
                    parts.append(source.tensor(Weight(b[part], (n, f), 0, "F32"), device))
                else:
                    parts.append(torch.zeros(n, f, dtype=dtype, device=device))
            self.gate_up = torch.cat(parts, dim=1)
        if "down" in b:
            self.down = source.tensor(Weight(b["down"], (n, d), 0, "F32"), device)

    def to(self, device: torch.device) -> ExpertBiases:
        out = object.__new__(ExpertBiases)
        out.gate_up = self.gate_up.to(device) if self.gate_up is not None else None
        out.down = self.down.to(device) if self.down is not None else None
        return out

    def n_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.gate_up, self.down) if t is not None)

    def attach(self, w: ExpertWeights, e: int) -> ExpertWeights:
        w.gate_up_b = self.gate_up[e] if self.gate_up is not None else None
        w.down_b = self.down[e] if self.down is not None else None
        return w


def fill_slot(lay: ExpertLayout, source, slot: int, gate_up: torch.Tensor, down: torch.Tensor) -> None:
    """Fill one expert slot (views on a host tensor) from the weight source."""
    f = lay.n_ff
    if lay.fused_in_file:
        source.fill_expert(lay.names["gate_up"], slot, gate_up)
    else:
        source.fill_expert(lay.names["gate"], slot, gate_up[:f])
        source.fill_expert(lay.names["up"], slot, gate_up[f:])
    source.fill_expert(lay.names["down"], slot, down)


class TensorExperts:
    """Expert matrices as two tensors on one device (see the module docstring)."""

    kind = "tensor"

    def __init__(self, lay: ExpertLayout, source, device: torch.device, dtype: torch.dtype,
                 n_pool: int, pin: bool, biases: ExpertBiases) -> None:
        self.lay, self.device, self.n_pool = lay, device, n_pool
        f, d = lay.n_ff, lay.n_embd
        on_host = device.type == "cpu"
        if on_host and not pin:  # host RAM the CPU reads: huge pages where the OS has them (hostmem.py)
            self.gate_up = host_empty((n_pool, 2 * f, d), dtype)
            self.down = host_empty((n_pool, d, f), dtype)
        else:
            self.gate_up = torch.empty((n_pool, 2 * f, d), dtype=dtype, device=device, pin_memory=pin and on_host)
            self.down = torch.empty((n_pool, d, f), dtype=dtype, device=device, pin_memory=pin and on_host)
        if on_host:
            for s in range(n_pool):
                fill_slot(lay, source, s, self.gate_up[s], self.down[s])
        else:  # fill slot by slot through one host buffer, never holding the whole layer twice
            hg = torch.empty((2 * f, d), dtype=dtype)
            hd = torch.empty((d, f), dtype=dtype)
            for s in range(n_pool):
                fill_slot(lay, source, s, hg, hd)
                self.gate_up[s].copy_(hg)
                self.down[s].copy_(hd)
        self.biases = biases
        self.exec_bytes_per_expert = 3 * f * d * self.gate_up.element_size()

    def weights(self, e: int) -> ExpertWeights:
        s = e % self.n_pool
        return self.biases.attach(ExpertWeights(down=self.down[s], gate_up=self.gate_up[s]), e)

    def n_bytes(self) -> int:
        return (self.gate_up.numel() + self.down.numel()) * self.gate_up.element_size()


def surrogate_matrix(raw: np.ndarray, shape: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    """Weights of `shape` made from quantized bytes: one value per byte when there are enough
    bytes, else one per nibble (repeated if still short), centred and scaled to +-sqrt(3/fan_in)."""
    n = shape[0] * shape[1]
    r = torch.from_numpy(raw)
    a = math.sqrt(3.0 / shape[1])
    if r.numel() >= n:
        vals = (r[:n].to(torch.float32) - 127.5) * (a / 127.5)
    else:
        nib = torch.stack([r & 15, r >> 4], dim=1).reshape(-1)
        if nib.numel() < n:
            nib = nib.repeat(-(-n // nib.numel()))
        vals = (nib[:n].to(torch.float32) - 7.5) * (a / 7.5)
    return vals.to(dtype).view(shape)


class MmapExperts:
    """Expert bytes read from the GGUF through a read-only mmap (see the module docstring)."""

    kind = "mmap"

    def __init__(self, lay: ExpertLayout, shards: tuple[str, ...], dtype: torch.dtype, exact_dequant: bool,
                 biases: ExpertBiases) -> None:
        self.lay, self.dtype, self.exact = lay, dtype, exact_dequant
        self.device = torch.device("cpu")
        self.biases = biases
        self.parts: dict[str, tuple[mmap.mmap, int, int, str, tuple[int, int]]] = {}
        self._maps: dict[str, tuple[int, mmap.mmap]] = {}
        where = {}
        for path in shards:
            hdr = read_gguf_header(path)
            for t in hdr.tensors:
                where[t.name] = (path, hdr.data_offset + t.offset, t.n_bytes, t.type_name)
        f, d = lay.n_ff, lay.n_embd
        shapes = {"gate_up": (2 * f, d), "gate": (f, d), "up": (f, d), "down": (d, f)}
        for part, name in lay.names.items():
            if name not in where:
                raise InputError(f"{name} is not in the model file", "the mmap tier needs the GGUF the model came from")
            path, off, nbytes, tname = where[name]
            mm = self._map(path)
            self.parts[part] = (mm, off, nbytes // lay.n_expert, tname, shapes[part])
        self.exec_bytes_per_expert = sum(
            (p[2] if p[3] in FLOAT_TYPES else p[4][0] * p[4][1] * torch.tensor([], dtype=dtype).element_size())
            for p in self.parts.values())
        self.file_bytes_per_expert = sum(p[2] for p in self.parts.values())

    def _map(self, path: str) -> mmap.mmap:
        if path not in self._maps:
            fd = os.open(path, os.O_RDONLY)
            size = os.fstat(fd).st_size
            self._maps[path] = (fd, mmap.mmap(fd, size, prot=mmap.PROT_READ))
        return self._maps[path][1]

    def _decode(self, part: str, e: int) -> torch.Tensor:
        with warnings.catch_warnings():  # read-only mapping: torch warns, and we never write
            warnings.simplefilter("ignore", UserWarning)
            return self._decode_ro(part, e)

    def _decode_ro(self, part: str, e: int) -> torch.Tensor:
        mm, off, stride, tname, shape = self.parts[part]
        raw = np.frombuffer(mm, dtype=np.uint8, count=stride, offset=off + e * stride)
        if tname in FLOAT_TYPES:
            if tname == "BF16":
                t = torch.from_numpy(raw.view(np.int16)).view(torch.bfloat16)
            else:
                t = torch.from_numpy(raw.view(np.float32 if tname == "F32" else np.float16))
            return t.view(shape)
        if self.exact:
            from gguf.constants import GGMLQuantizationType
            from gguf.quants import dequantize

            qt = GGMLQuantizationType[tname]
            arr = dequantize(raw.reshape(shape[0], -1), qt)
            return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32)).to(self.dtype).view(shape)
        return surrogate_matrix(raw, shape, self.dtype)

    def weights(self, e: int) -> ExpertWeights:
        if "gate_up" in self.parts:
            w = ExpertWeights(down=self._decode("down", e), gate_up=self._decode("gate_up", e))
        else:
            w = ExpertWeights(down=self._decode("down", e), gate=self._decode("gate", e), up=self._decode("up", e))
        return self.biases.attach(w, e)

    def evict(self) -> None:
        """Drop this block's expert pages from our mapping and from the page cache (clean pages
        of a file opened read-only: nothing is written), so the next reads go to the disk."""
        for mm, off, stride, _, _ in self.parts.values():
            start = off // mmap.PAGESIZE * mmap.PAGESIZE
            length = off + stride * self.lay.n_expert - start
            mm.madvise(mmap.MADV_DONTNEED, start, length)
            fd = next(fd for fd, m in self._maps.values() if m is mm)
            os.posix_fadvise(fd, start, length, os.POSIX_FADV_DONTNEED)

    def close(self) -> None:
        for fd, mm in self._maps.values():
            try:
                mm.close()
            except BufferError:  # a tensor still views the mapping; the OS unmaps at exit
                pass
            os.close(fd)
        self._maps.clear()
