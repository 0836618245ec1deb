"""Which device holds each block of a layer split (pure; no other memory module imported).

llama.cpp `-sm layer` (src/llama-model.cpp, llama_model_base::load_tensors, commit 0c1e570):

  * L1557-1587: `splits` = the `-ts` weights (all zero or absent: each device's free memory),
    summed cumulatively and normalised, in `float` (32-bit) arithmetic;
  * L1589-1590: i_gpu_start = max(n_layer_all + 1 - n_gpu_layers, 0),
    act_gpu_layers = min(n_gpu_layers, n_layer_all + 1): the output layer counts as layer
    n_layer_all, so `-ngl n_layer_all + 1` puts every block and the output on the GPUs;
  * L1597: block il goes to device upper_bound(splits, float(il - i_gpu_start) / act_gpu_layers),
    the first device whose cumulative share exceeds the block's position;
  * L1614: dev_output = the same rule for il = n_layer_all: the output layer (output_norm,
    output) is on the last device that gets any share; token_embd stays on the CPU (L1604).

With `-ts c_0,c_1,...` where the c_d are whole block counts (the output counted on the last
device), device d gets blocks C_{d-1} .. C_d - 1 (C the running sum): float(C)/float(N) is the
same number on both sides of the comparison, so the assignment is exact, not rounded.

Kept apart from devices.py so that compute_buffer.py (staging of -ngl CPU blocks) and devices.py
(per-device VRAM, which needs compute_buffer.py) both import it without an import loop.
"""
from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Sequence

from moeplan.planner.memory.cache import memo
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement


def f32(x: float) -> float:
    """Round to IEEE single precision (llama.cpp computes the split points in float)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def split_points(weights: Sequence[float]) -> list[float]:
    """llama.cpp's normalised cumulative splits (float arithmetic, L1579-1587)."""
    acc = f32(0.0)
    cum = []
    for w in weights:
        acc = f32(acc + f32(float(w)))
        cum.append(acc)
    if acc <= 0:
        raise ValueError("tensor split weights sum to zero")
    return [f32(c / acc) for c in cum]


def assign_blocks(n_layer_all: int, weights: Sequence[float], n_gpu_layers: int | None = None) -> tuple[tuple[int, ...], int]:
    """(device of every block 0..n_layer_all-1, device of the output layer); -1 = the CPU.

    `weights` is the -ts list in device order; n_gpu_layers defaults to every block plus the
    output (what moeplan emits)."""
    ngl = n_layer_all + 1 if n_gpu_layers is None else n_gpu_layers
    splits = split_points(weights)
    start = max(n_layer_all + 1 - ngl, 0)
    act = min(ngl, n_layer_all + 1)

    def dev(il: int) -> int:
        if il < start or il - start >= act:
            return -1
        x = f32(float(il - start) / act)
        return min(bisect_right(splits, x), len(splits) - 1)

    return tuple(dev(il) for il in range(n_layer_all)), dev(n_layer_all)


def layer_split(model: ModelSpec, p: Placement) -> tuple[frozenset[int], bool]:
    """(block indices that -ngl leaves entirely on the CPU, whether the output layer is on a
    GPU) for placement p: assign_blocks with p.n_gpu_layers. A CPU-only run (n_gpus 0) has
    every block on the CPU; without n_gpu_layers every block and the output are offloaded."""
    if p.n_gpus == 0:
        return frozenset(layer.index for layer in model.layers), False
    if p.n_gpu_layers is None:
        return frozenset(), True
    key = ("layer-split", p.n_gpu_layers, len(model.layers))
    cache = memo(model)
    hit = cache.get(key)
    if hit is None:
        devs, out_dev = assign_blocks(len(model.layers), (1.0,), p.n_gpu_layers)
        hit = cache[key] = (frozenset(model.layers[i].index for i, d in enumerate(devs) if d < 0), out_dev >= 0)
    return hit


def counts_from_assignment(devs: Sequence[int], out_dev: int, n_devices: int) -> tuple[int, ...]:
    """Blocks (and the output layer) per device: the exact -ts of an assignment."""
    counts = [0] * n_devices
    for d in devs:
        counts[d] += 1
    counts[out_dev] += 1
    return tuple(counts)


def parse_tensor_split(text: str, n_devices: int) -> tuple[float, ...]:
    """'20,21,20' -> (20.0, 21.0, 20.0); missing devices get 0 (llama.cpp's rule). ValueError on junk."""
    parts = [x.strip() for x in text.replace("/", ",").split(",") if x.strip()]
    vals = tuple(float(x) for x in parts)
    if len(vals) > n_devices or any(v < 0 for v in vals) or sum(vals) <= 0:
        raise ValueError(text)
    return vals + (0.0,) * (n_devices - len(vals))


def format_tensor_split(counts: Sequence[float]) -> str:
    return ",".join(str(int(c)) if float(c).is_integer() else f"{c:g}" for c in counts)
