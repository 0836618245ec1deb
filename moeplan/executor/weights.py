"""Where weight values come from: seeded synthetic values, or a GGUF file dequantized.

Synthetic values are a pure function of (seed, tensor name, expert slot), so the executor and
the dense reference, on any device, build bit-identical weights. Matrices are uniform in
+-sqrt(3 / fan_in) (unit-variance outputs for unit-variance inputs), norm weights near 1,
biases near 0. Routed experts: one seeded random block per tensor, and expert slot s is that
block rotated by s * 7919 elements, so experts are distinct and are filled at memcpy speed
(seeded generation runs at ~0.25 GB/s here, far too slow for GiB-sized layers). Other tensors
over 4 Mi elements (token_embd, output) are filled the same way from a 4 Mi-element block,
each chunk rotated differently.

GGUF values are read with gguf-py's reader (a read-only memmap) and dequantized with
`gguf.quants.dequantize` into the compute dtype; this is for models that fit in memory.
"""
from __future__ import annotations

import hashlib
import math

import numpy as np
import torch

from moeplan.errors import InputError, ModelFormatError
from moeplan.executor.hostmem import host_empty
from moeplan.executor.layout import Weight

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
SLOT_STRIDE = 7919  # a prime, so slot rotations of one block differ for every slot
BIG_TENSOR = 1 << 22  # elements; larger non-expert tensors are tiled from a block this size


def parse_dtype(text: str) -> str:
    t = text.lower().replace("float", "fp").replace("bfloat16", "bf16")
    aliases = {"fp32": "fp32", "f32": "fp32", "fp16": "fp16", "f16": "fp16", "half": "fp16", "bf16": "bf16",
               "auto": "auto"}
    if t not in aliases:
        raise InputError(f"unknown dtype {text!r}", "use auto (default: by the CPU's native formats), bf16, fp16 or fp32")
    return aliases[t]


def _seed(*parts: object) -> int:
    h = hashlib.blake2b(":".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & ((1 << 62) - 1)


def init_kind(name: str, n_dims: int) -> str:
    base = name.rsplit(".", 1)[0]
    if name.endswith(".bias"):
        return "bias"
    if base.endswith("sinks"):
        return "sinks"
    if n_dims == 1 and ("norm" in base or "scale" in base):
        return "norm"
    if n_dims == 1:
        return "vector"
    return "matrix"


def _fill_random(out: torch.Tensor, name: str, seed: int, fan_in: int, n_dims: int | None = None) -> None:
    g = torch.Generator().manual_seed(_seed(seed, name))
    kind = init_kind(name, out.dim() if n_dims is None else n_dims)
    if kind == "norm":
        out.uniform_(0.9, 1.1, generator=g)
    elif kind == "bias":
        out.uniform_(-0.02, 0.02, generator=g)
    elif kind == "sinks":
        out.uniform_(-0.5, 0.5, generator=g)
    elif kind == "vector":
        out.uniform_(0.5, 1.0, generator=g)
    else:
        a = math.sqrt(3.0 / max(1, fan_in))
        out.uniform_(-a, a, generator=g)


def _rotate_into(out: torch.Tensor, base: torch.Tensor, shift: int) -> None:
    """out[i] = base[(i + shift) mod len(base)] for the first len(out) elements (two copies)."""
    n = out.numel()
    r = shift % base.numel()
    head = min(n, base.numel() - r)
    out[:head].copy_(base[r:r + head])
    if head < n:
        out[head:].copy_(base[: n - head])


class SyntheticWeights:
    """Seeded values in the compute dtype (see the module docstring)."""

    kind = "synthetic"

    def __init__(self, seed: int, dtype: torch.dtype) -> None:
        self.seed = seed
        self.dtype = dtype
        self._blocks: dict[str, torch.Tensor] = {}

    def tensor(self, w: Weight, device: torch.device) -> torch.Tensor:
        on_host = device.type == "cpu"  # weights the CPU reads: huge pages where the OS has them
        out = host_empty(w.shape, self.dtype) if on_host else torch.empty(w.shape, dtype=self.dtype)
        fan_in = w.shape[-1] if out.dim() > 1 else 1
        n = out.numel()
        if n <= BIG_TENSOR:
            _fill_random(out, w.name, self.seed, fan_in)
        else:
            base = torch.empty(BIG_TENSOR, dtype=self.dtype)
            _fill_random(base, w.name, self.seed, fan_in, len(w.shape))
            flat = out.view(-1)
            for i, start in enumerate(range(0, n, BIG_TENSOR)):
                chunk = flat[start:start + BIG_TENSOR]
                _rotate_into(chunk, base, i * SLOT_STRIDE)
        return out if on_host else out.to(device)

    def fill_expert(self, name: str, slot: int, out: torch.Tensor) -> None:
        """Fill `out` (one expert's matrix, contiguous) with slot `slot` of tensor `name`."""
        base = self._blocks.get(name)
        if base is None or base.numel() != out.numel():
            base = torch.empty(out.numel(), dtype=self.dtype)
            _fill_random(base.view(out.shape), name, self.seed, out.shape[-1])
            self._blocks[name] = base
        _rotate_into(out.view(-1), base, slot * SLOT_STRIDE)

    def done(self) -> None:
        """Drop the cached random blocks once a model is built (they are as big as one expert)."""
        self._blocks.clear()


class GgufWeights:
    """Real values, dequantized from a GGUF file (all shards) with gguf-py."""

    kind = "gguf"

    def __init__(self, paths: tuple[str, ...], dtype: torch.dtype) -> None:
        from gguf import GGUFReader

        self.dtype = dtype
        self._tensors = {}
        for p in paths:
            try:
                reader = GGUFReader(p, "r")
            except Exception as exc:  # gguf-py raises bare ValueError/struct errors
                raise ModelFormatError(f"{p}: gguf-py cannot read the tensor data ({exc})",
                                       "run with --weights synthetic, or re-download the file") from None
            for t in reader.tensors:
                self._tensors[t.name] = t

    def _array(self, name: str, index: int | None) -> np.ndarray:
        from gguf.quants import dequantize

        t = self._tensors.get(name)
        if t is None:
            raise ModelFormatError(f"tensor {name!r} not found in the GGUF data", "the file set is incomplete")
        data = t.data if index is None else t.data[index]
        try:
            return dequantize(np.asarray(data), t.tensor_type)
        except NotImplementedError:
            raise InputError(f"gguf-py cannot dequantize {t.tensor_type.name} ({name})",
                             "use --weights synthetic (exact shapes, seeded values)") from None

    def tensor(self, w: Weight, device: torch.device) -> torch.Tensor:
        arr = torch.from_numpy(np.array(self._array(w.name, None).reshape(w.shape), dtype=np.float32))
        if device.type == "cpu":
            return host_empty(w.shape, self.dtype).copy_(arr)
        return arr.to(self.dtype).to(device)

    def fill_expert(self, name: str, slot: int, out: torch.Tensor) -> None:
        arr = self._array(name, slot).reshape(out.shape)
        out.copy_(torch.from_numpy(np.array(arr, dtype=np.float32)))

    def done(self) -> None:
        pass
