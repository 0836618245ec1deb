"""Which experts each token uses: the model's own router, or a synthetic or recorded choice.

Modes (`--routing`):
  router      the router's own top-k (meaningful with real weights; with synthetic weights it
              is whatever the seeded router picks)
  uniform     k distinct experts per token and layer, uniformly at random (seeded)
  zipf:S      k distinct experts drawn without replacement with P(expert of rank r) ~ 1/r^S;
              each layer gets its own seeded rank order, so different layers have different
              hot experts (S=0 is uniform; measured MoE routing is often S ~ 0.5-1.2)
  trace:FILE  the ids recorded in FILE (format below); positions past its end wrap around

The router is always computed (its bytes and time are real); synthetic modes replace only the
choice, as llama.cpp's `selected_experts_in` does, and weights are the router's probabilities
at the chosen ids. Choices are a pure function of (seed, layer, position), drawn before
timing starts, so the executor and the reference see the same ids.

Trace file (JSON, written by `moeplan bench --routing router --record-trace FILE`):
  {"format": "moeplan-routing-trace", "version": 1,
   "model": "<name, informational>", "n_experts": 128, "n_experts_used": 8,
   "layers": [0, 1, ...],                       # GGUF block indices
   "tokens": [[[e, ...k ids] per layer in `layers` order] per token position]}
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from moeplan.errors import InputError

TRACE_FORMAT = "moeplan-routing-trace"
TRACE_VERSION = 1


@dataclass(frozen=True)
class RoutingSpec:
    mode: str  # 'router' | 'uniform' | 'zipf' | 'trace'
    zipf_s: float = 0.0
    trace_path: str = ""

    @property
    def label(self) -> str:
        if self.mode == "zipf":
            return f"zipf:{self.zipf_s:g}"
        if self.mode == "trace":
            return f"trace:{self.trace_path}"
        return self.mode


def parse_routing(text: str) -> RoutingSpec:
    t = text.strip()
    low = t.lower()
    if low in ("router", "uniform"):
        return RoutingSpec(low)
    if low == "zipf" or low.startswith("zipf:"):
        arg = t.split(":", 1)[1] if ":" in t else "1.0"
        try:
            s = float(arg)
        except ValueError:
            raise InputError(f"cannot read the Zipf exponent in {text!r}", "for example --routing zipf:1.2") from None
        if s < 0:
            raise InputError(f"Zipf exponent must not be negative: {s}", "for example --routing zipf:1.2")
        return RoutingSpec("zipf", zipf_s=s)
    if low.startswith("trace:"):
        path = t.split(":", 1)[1]
        if not path:
            raise InputError("--routing trace: needs a file", "for example --routing trace:routes.json")
        return RoutingSpec("trace", trace_path=os.path.expanduser(path))
    raise InputError(f"unknown routing {text!r}", "use router, uniform, zipf:S or trace:FILE")


@dataclass
class Trace:
    n_experts: int
    n_experts_used: int
    layers: tuple[int, ...]
    tokens: np.ndarray  # (n_tokens, n_layers, k) int64
    model: str = ""

    def to_json(self) -> str:
        doc = {"format": TRACE_FORMAT, "version": TRACE_VERSION, "model": self.model,
               "n_experts": self.n_experts, "n_experts_used": self.n_experts_used,
               "layers": list(self.layers), "tokens": self.tokens.tolist()}
        return json.dumps(doc, separators=(",", ":")) + "\n"


def read_trace(path: str) -> Trace:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise InputError(f"{path}: no such routing trace", "record one with --routing router --record-trace FILE") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read the routing trace ({exc})", "the file must be JSON (see README, Bench)") from None
    if not isinstance(doc, dict) or doc.get("format") != TRACE_FORMAT:
        raise InputError(f"{path}: not a moeplan routing trace", f'the JSON needs "format": "{TRACE_FORMAT}"')
    try:
        layers = tuple(int(x) for x in doc["layers"])
        tokens = np.asarray(doc["tokens"], dtype=np.int64)
        n_exp, k = int(doc["n_experts"]), int(doc["n_experts_used"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{path}: malformed routing trace ({exc})", "see the trace format in the README (Bench)") from None
    if tokens.ndim != 3 or tokens.shape[1] != len(layers) or tokens.shape[2] != k or tokens.shape[0] == 0:
        raise InputError(f"{path}: tokens must be [n_tokens][{len(layers)} layers][{k} ids]",
                         "see the trace format in the README (Bench)")
    if tokens.min() < 0 or tokens.max() >= n_exp:
        raise InputError(f"{path}: expert ids outside 0..{n_exp - 1}", "the trace is from another model")
    return Trace(n_exp, k, layers, tokens, str(doc.get("model", "")))


def write_trace(path: str, trace: Trace) -> None:
    """Write atomically (temp file in the same folder, then rename)."""
    from moeplan.io import write_text_atomic

    write_text_atomic(path, trace.to_json())


def _seed(seed: int, layer: int) -> int:
    return (seed * 1_000_003 + layer * 7919 + 17) & 0x7FFFFFFF


def draw_uniform(rng: np.random.Generator, n_pos: int, n_exp: int, k: int) -> np.ndarray:
    return np.argsort(rng.random((n_pos, n_exp)), axis=1)[:, :k].astype(np.int64)


def draw_zipf(rng: np.random.Generator, n_pos: int, n_exp: int, k: int, s: float) -> np.ndarray:
    """k distinct ids per position, Plackett-Luce in Zipf(s) weights (Gumbel top-k)."""
    ranks = rng.permutation(n_exp) + 1  # this layer's rank of each expert
    logp = -s * np.log(ranks.astype(np.float64))
    gumbel = -np.log(-np.log(rng.random((n_pos, n_exp)).clip(1e-300, 1.0)))
    return np.argsort(-(logp[None, :] + gumbel), axis=1)[:, :k].astype(np.int64)


@dataclass
class Routing:
    """Expert choices of one run: tables drawn up front, or None for the router's own top-k."""

    spec: RoutingSpec
    n_experts: int
    k: int
    seed: int = 0
    trace: Trace | None = None
    tables: dict[int, np.ndarray] = field(default_factory=dict)
    recorded: dict[int, dict[int, list[int]]] = field(default_factory=dict)
    record: bool = False
    notes: list[str] = field(default_factory=list)

    def prepare(self, layers: tuple[int, ...], n_positions: int) -> None:
        """Draw (or look up) the ids of every layer and position before timing."""
        if self.spec.mode == "router":
            return
        if self.spec.mode == "trace":
            tr = self.trace
            assert tr is not None
            if tr.n_experts != self.n_experts or tr.n_experts_used != self.k:
                raise InputError(f"routing trace is for {tr.n_experts} experts, top-{tr.n_experts_used}; "
                                 f"this model has {self.n_experts}, top-{self.k}", "record a trace on this model")
            missing = [i for i in layers if i not in tr.layers]
            if missing:
                raise InputError(f"routing trace has no entries for block {missing[0]}",
                                 f"the trace covers blocks {list(tr.layers)[:8]}...")
            if tr.tokens.shape[0] < n_positions:
                self.notes.append(f"routing trace has {tr.tokens.shape[0]} positions; the run needs "
                                  f"{n_positions}, so it wraps around")
            pos = np.arange(n_positions) % tr.tokens.shape[0]
            for i in layers:
                self.tables[i] = tr.tokens[pos, tr.layers.index(i)]
            return
        for i in layers:
            rng = np.random.default_rng(_seed(self.seed, i))
            if self.spec.mode == "uniform":
                self.tables[i] = draw_uniform(rng, n_positions, self.n_experts, self.k)
            else:
                self.tables[i] = draw_zipf(rng, n_positions, self.n_experts, self.k, self.spec.zipf_s)

    def chosen(self, layer: int, positions: np.ndarray) -> np.ndarray | None:
        """(n, k) ids for these positions, or None when the router decides."""
        if self.spec.mode == "router":
            return None
        return self.tables[layer][positions]

    def note_router_choice(self, layer: int, positions: np.ndarray, ids: np.ndarray) -> None:
        if self.record:
            per = self.recorded.setdefault(layer, {})
            for p, row in zip(positions.tolist(), ids.tolist()):
                per[int(p)] = [int(x) for x in row]

    def recorded_trace(self, model_name: str) -> Trace:
        layers = tuple(sorted(self.recorded))
        if not layers:
            raise InputError("nothing was recorded", "--record-trace needs --routing router and at least one MoE block")
        positions = sorted(set.intersection(*(set(self.recorded[i]) for i in layers)))
        tokens = np.asarray([[self.recorded[i][p] for i in layers] for p in positions], dtype=np.int64)
        return Trace(self.n_experts, self.k, layers, tokens, model_name)


def make_routing(spec: RoutingSpec, n_experts: int, k: int, seed: int, record: bool = False) -> Routing:
    if record and spec.mode != "router":
        raise InputError("--record-trace records the router's own choices", "add --routing router")
    trace = read_trace(spec.trace_path) if spec.mode == "trace" else None
    return Routing(spec, n_experts, k, seed, trace, record=record)
