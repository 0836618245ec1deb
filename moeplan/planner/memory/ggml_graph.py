"""A shape-only mirror of a ggml graph and of ggml-alloc's graph allocator (pure).

Some architectures' compute buffers are not a sum of a few live tensors: DeepSeek V4's
attention builds several [n_kv, n_tokens] masks, a key concatenation and indexer scores in a
fixed order, and ggml-alloc's best-fit placement leaves holes that decide the peak (up to a
third of the buffer). For those the planner builds the graph the way src/models/<arch>.cpp
does - same ops, same operands, same order, shapes and types only, no data - and replays
ggml-alloc on it. Rules mirrored (llama.cpp 0c1e570):

graph (ggml/src/ggml.c ggml_visit_parents_graph)
  `expand(t)` visits t's sources depth first, left to right, and appends each tensor once:
  op NONE to the leafs (in the order found), everything else to the nodes.
  A view (VIEW/RESHAPE/PERMUTE/TRANSPOSE, and SET_ROWS/CPY, which return a view of their
  destination) is a node with `view_src` = the tensor that owns the memory.

allocation (ggml/src/ggml-alloc.c ggml_gallocr_alloc_graph_impl)
  1. every leaf is allocated first, in leaf order (graph inputs and constants such as
     ggml_new_tensor + ggml_fill; weights and KV-cache tensors have memory elsewhere);
  2. each node's children (uses as a source) and each owner's views are counted;
  3. nodes in order: a node is allocated unless it is a view or lives elsewhere; an op of
     ggml_op_can_inplace takes over the memory of its first source that galloc owns (not a
     view, not a graph output), has the same type and shape, and has this node as its only
     child and no views; then each source whose children and views are all done is freed
     (a view passes that on to its owner). Graph outputs (logits, result_norm) are never freed.
  Sizes are rounded up to the buffer's alignment (CPU 32 B, CUDA 128 B).

best fit (ggml_dyn_tallocr_alloc / _free_bytes)
  free blocks sorted by offset, the last one the open end of the buffer; a tensor takes the
  smallest free block that fits (the later one on a tie), else the end; freed ranges merge
  with their neighbours. The buffer is the highest end ever reached.

The result is checked against llama.cpp's own buffer sizes in tests/test_memory_llamacpp.py.
"""
from __future__ import annotations

import bisect
import contextlib
import math
import operator
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from moeplan.planner.model.ggml import row_bytes

F32, F16, I32, I64 = "F32", "F16", "I32", "I64"

# ggml_op_can_inplace (ggml-alloc.c)
CAN_INPLACE = frozenset({
    "FILL", "SCALE", "DIAG_MASK_ZERO", "DIAG_MASK_INF", "ADD", "ADD_ID", "ADD1", "SUB", "MUL", "DIV",
    "SQR", "SQRT", "LOG", "UNARY", "ROPE", "ROPE_BACK", "SILU_BACK", "RMS_NORM", "RMS_NORM_BACK",
    "CLAMP", "SOFT_MAX", "SOFT_MAX_BACK",
})
VIEW_OPS = frozenset({"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE", "SET_ROWS", "CPY"})

CPU_ALIGNMENT = 32  # ggml-backend.cpp TENSOR_ALIGNMENT
CUDA_ALIGNMENT = 128  # ggml-cuda.cu ggml_backend_cuda_buffer_type_get_alignment


class Trace:
    """The decisions a build took on Sym sizes (see Sym): each a guard that must give the same
    answer at another point for the build to hold there."""

    def __init__(self) -> None:
        self.guards: dict[tuple, None] = {}  # insertion-ordered set

    def holds(self, x: tuple[int, ...]) -> bool:
        """Whether every guard gives, at the point x, the answer it gave when traced."""
        for kind, poly, param in self.guards:
            value = _peval(poly, x)
            if kind == "mod":
                if value % param:
                    return False
            elif _COMPARE[kind](value, 0) != param:
                return False
        return True


_TRACE: list[Trace] = []
_COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
            ">=": operator.ge}


@contextlib.contextmanager
def trace() -> Iterator[Trace]:
    """Record the guards of the Sym decisions taken inside (a build and its allocation plan)."""
    t = Trace()
    _TRACE.append(t)
    try:
        yield t
    finally:
        _TRACE.pop()


def _guard(kind: str, poly: dict[tuple[int, ...], int], param: int | bool) -> None:
    if not _TRACE:
        raise TypeError("a decision on a symbolic size outside a trace")
    _TRACE[-1].guards[(kind, tuple(sorted(poly.items())), param)] = None


def _peval(poly, x: tuple[int, ...]) -> int:
    """A polynomial ({monomial: coefficient} or its items) at the point x; a monomial is the
    tuple of its variables' indices, with repeats (x0*x0*x2 = (0, 0, 2))."""
    total = 0
    for mono, c in (poly.items() if isinstance(poly, dict) else poly):
        for i in mono:
            c *= x[i]
        total += c
    return total


class Sym:
    """A size that depends on the graph's variables (the reserved ubatch's tokens and outputs,
    the cache cells): P(x) / den, P a polynomial with integer coefficients, and `v`, its value
    at the point the build is traced at. Builders take Syms in place of those sizes, so that
    one build gives every tensor's bytes as a function of them (graph_buffers compiles a
    model's graph once and evaluates it at each ubatch and context the search asks for).

    Where the graph depends on a size other than through arithmetic - a comparison (min, max,
    a branch), an equality (ggml-alloc's in-place reuse wants equal shapes), a remainder or an
    inexact division - the answer at the traced point is taken and recorded as a guard in the
    open trace(): the build holds at every point where each guard answers the same
    (Trace.holds), and graph_buffers builds afresh where one does not. Operations whose result
    is a constant return an int; outside a trace a decision raises TypeError."""

    __slots__ = ("p", "den", "v")

    def __init__(self, p: dict[tuple[int, ...], int], den: int, v: int):
        self.p, self.den, self.v = p, den, v

    @staticmethod
    def var(i: int, value: int) -> Sym:
        return Sym({(i,): 1}, 1, value)

    @staticmethod
    def make(p: dict[tuple[int, ...], int], den: int, v: int) -> Sym | int:
        p = {m: c for m, c in p.items() if c}
        if not p or (len(p) == 1 and () in p):
            return v
        g = math.gcd(den, *p.values()) if den > 1 else 1
        if g > 1:
            p = {m: c // g for m, c in p.items()}
            den //= g
        return Sym(p, den, v)

    def at(self, x: tuple[int, ...]) -> int:
        return _peval(self.p, x) // self.den

    def _scaled(self, k: int) -> dict[tuple[int, ...], int]:
        return {m: c * k for m, c in self.p.items()}

    def __add__(self, o: object) -> Sym | int:
        if isinstance(o, int):
            if not o:
                return self
            p = dict(self.p)
            p[()] = p.get((), 0) + o * self.den
            return Sym.make(p, self.den, self.v + o)
        if isinstance(o, Sym):
            p = self._scaled(o.den)
            for m, c in o.p.items():
                p[m] = p.get(m, 0) + c * self.den
            return Sym.make(p, self.den * o.den, self.v + o.v)
        return NotImplemented

    __radd__ = __add__

    def __neg__(self) -> Sym:
        return Sym(self._scaled(-1), self.den, -self.v)

    def __sub__(self, o: object) -> Sym | int:
        if isinstance(o, (int, Sym)):
            return self + -o
        return NotImplemented

    def __rsub__(self, o: object) -> Sym | int:
        if isinstance(o, int):
            return -self + o
        return NotImplemented

    def __mul__(self, o: object) -> Sym | int:
        if isinstance(o, int):
            if o == 1:
                return self
            return Sym.make(self._scaled(o), self.den, self.v * o) if o else 0
        if isinstance(o, Sym):
            p: dict[tuple[int, ...], int] = {}
            for m1, c1 in self.p.items():
                for m2, c2 in o.p.items():
                    m = tuple(sorted(m1 + m2))
                    p[m] = p.get(m, 0) + c1 * c2
            return Sym.make(p, self.den * o.den, self.v * o.v)
        return NotImplemented

    __rmul__ = __mul__

    def _exact(self, k: int) -> bool:
        return self.den == 1 and all(c % k == 0 for c in self.p.values())

    def __floordiv__(self, k: object) -> Sym | int:
        if not isinstance(k, int) or k <= 0:
            return NotImplemented
        if k == 1:
            return self
        if self._exact(k):
            return Sym.make({m: c // k for m, c in self.p.items()}, 1, self.v // k)
        r = self.v % k
        p = dict(self.p)
        p[()] = p.get((), 0) - r * self.den
        _guard("mod", p, self.den * k)  # (P - r*den) / den is a multiple of k: the value is r mod k
        return Sym.make(p, self.den * k, (self.v - r) // k)

    def __mod__(self, k: object) -> int:
        if not isinstance(k, int) or k <= 0:
            return NotImplemented
        if self._exact(k):
            return 0
        r = self.v % k
        p = dict(self.p)
        p[()] = p.get((), 0) - r * self.den
        _guard("mod", p, self.den * k)
        return r

    def _compare(self, o: object, op: str) -> bool:
        """`self op o`, decided at the traced point and guarded (the guard keeps the answer,
        not the sign: min(x, k) built at x > k holds at x = k too)."""
        if not isinstance(o, (int, Sym)):
            return NotImplemented
        d = self - o
        if isinstance(d, int):
            return _COMPARE[op](d, 0)
        answer = _COMPARE[op](d.v, 0)
        _guard(op, d.p, answer)  # the sign of P / den is P's (den > 0)
        return answer

    def __eq__(self, o: object) -> bool:
        return self._compare(o, "==")

    def __ne__(self, o: object) -> bool:
        return self._compare(o, "!=")

    def __lt__(self, o: object) -> bool:
        return self._compare(o, "<")

    def __le__(self, o: object) -> bool:
        return self._compare(o, "<=")

    def __gt__(self, o: object) -> bool:
        return self._compare(o, ">")

    def __ge__(self, o: object) -> bool:
        return self._compare(o, ">=")

    def __bool__(self) -> bool:
        return self._compare(0, "!=")

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Sym({self.p}, /{self.den}, ={self.v})"


@dataclass(eq=False, slots=True)
class Tensor:
    """ne in ggml order (ne0 = row length); `external`: memory the graph allocator does not
    own (weights, KV cache); `contiguous`: false for permuted/transposed/strided views."""

    op: str
    ne: tuple[int, int, int, int]
    type: str
    src: tuple[Tensor, ...] = ()
    name: str = ""
    view_src: Tensor | None = None
    contiguous: bool = True
    external: bool = False
    output: bool = False
    input: bool = False  # ggml_set_input (a constant leaf such as a zeros tensor is not one)

    @property
    def nbytes(self) -> int:
        n0, n1, n2, n3 = self.ne
        if n1.__class__ is int and n2.__class__ is int and n3.__class__ is int:
            return row_bytes(self.type, n0) * (n1 * n2 * n3)
        # a symbolic size (graph_buffers' compile): the integer factors first, one Sym product
        k, sym = 1, []
        for n in (n1, n2, n3):
            if n.__class__ is int:
                k *= n
            else:
                sym.append(n)
        out = row_bytes(self.type, n0) * k
        for n in sym:
            out = out * n
        return out

    @property
    def n_elements(self) -> int:
        n0, n1, n2, n3 = self.ne
        return n0 * n1 * n2 * n3


def _ne(*dims: int) -> tuple[int, int, int, int]:
    n = len(dims)
    if n == 4:
        return dims  # type: ignore[return-value]
    return dims + (1,) * (4 - n)  # type: ignore[return-value]


class Graph:
    """Builder for a shape-only ggml graph; methods are named after the ggml calls they mirror."""

    def __init__(self) -> None:
        self.nodes: list[Tensor] = []
        self.leafs: list[Tensor] = []
        self._seen: set[int] = set()

    # ---- tensors without an op ------------------------------------------------------------
    def external(self, name: str, *ne: int, type: str = F32) -> Tensor:
        """A weight or cache tensor: memory owned by a model or KV buffer."""
        return Tensor("NONE", _ne(*ne), type, name=name, external=True)

    def new_tensor(self, name: str, *ne: int, type: str = F32, input: bool = True) -> Tensor:
        """ggml_new_tensor_*: a graph input (ggml_set_input) or, with input=False, a constant
        (filled by an op of the graph); the graph allocator places both."""
        return Tensor("NONE", _ne(*ne), type, name=name, input=input)

    # ---- ops ------------------------------------------------------------------------------
    def op(self, op: str, ne: tuple[int, ...], type: str, *src: Tensor | None, name: str = "") -> Tensor:
        kept: tuple[Tensor, ...] = src if None not in src else tuple(s for s in src if s is not None)  # type: ignore[assignment]
        return Tensor(op, _ne(*ne), type, kept, name=name)

    def unary(self, op: str, a: Tensor, *src: Tensor | None, name: str = "") -> Tensor:
        """An op whose result has a's type and shape (norms, rope, scale, add, mul, ...)."""
        return self.op(op, a.ne, a.type, a, *src, name=name)

    def view(self, a: Tensor, *ne: int, contiguous: bool = True, op: str = "VIEW", name: str = "") -> Tensor:
        owner = a.view_src if a.view_src is not None else a
        return Tensor(op, _ne(*ne), a.type, (a,), name=name or a.name, view_src=owner,
                      contiguous=contiguous and a.contiguous, external=owner.external)

    def reshape(self, a: Tensor, *ne: int) -> Tensor:
        return self.view(a, *ne, op="RESHAPE")

    def permute(self, a: Tensor, *axes: int) -> Tensor:
        ne = [0, 0, 0, 0]
        for i, ax in enumerate(axes):
            ne[ax] = a.ne[i]
        for i in range(len(axes), 4):
            ne[i] = a.ne[i]
        trivial = list(axes) == list(range(len(axes)))
        return self.view(a, *ne, contiguous=trivial, op="PERMUTE")

    def transpose(self, a: Tensor) -> Tensor:
        return self.view(a, a.ne[1], a.ne[0], a.ne[2], a.ne[3], contiguous=False, op="TRANSPOSE")

    def cont(self, a: Tensor, *ne: int, name: str = "") -> Tensor:
        return self.op("CONT", ne or a.ne, a.type, a, name=name)

    def mul_mat(self, a: Tensor, b: Tensor, name: str = "") -> Tensor:
        return self.op("MUL_MAT", (a.ne[1], b.ne[1], b.ne[2], b.ne[3]), F32, a, b, name=name)

    def mul_mat_id(self, a: Tensor, b: Tensor, ids: Tensor, name: str = "") -> Tensor:
        return self.op("MUL_MAT_ID", (a.ne[1], ids.ne[0], b.ne[2], 1), F32, a, b, ids, name=name)

    def get_rows(self, a: Tensor, rows: Tensor, name: str = "") -> Tensor:
        type = a.type if a.type == I32 else F32
        return self.op("GET_ROWS", (a.ne[0], rows.ne[0], rows.ne[1], rows.ne[2]), type, a, rows, name=name)

    def concat(self, a: Tensor, b: Tensor, dim: int, name: str = "") -> Tensor:
        ne = list(a.ne)
        ne[dim] = a.ne[dim] + b.ne[dim]
        return self.op("CONCAT", tuple(ne), a.type, a, b, name=name)

    def set_rows(self, dst: Tensor, src: Tensor, idx: Tensor) -> Tensor:
        """ggml_set_rows returns a view of `dst` (the rows are written in place); its sources are
        (src, idx, dst) in that order (ggml.c, 'order is weird due to legacy reasons')."""
        v = self.view(dst, *dst.ne, op="SET_ROWS")
        v.src = (src, idx, dst)
        return v

    # ---- graph ----------------------------------------------------------------------------
    def expand(self, t: Tensor) -> Tensor:
        """ggml_build_forward_expand: add t and its unseen ancestors, sources first.
        Iterative depth-first walk (graphs of thousands of nodes)."""
        seen = self._seen
        if id(t) in seen:
            return t
        seen.add(id(t))
        stack = [(t, iter(t.src))]
        leafs, nodes = self.leafs, self.nodes
        while stack:
            node, rest = stack[-1]
            for child in rest:  # the next source not seen yet, if any
                if id(child) not in seen:
                    seen.add(id(child))
                    stack.append((child, iter(child.src)))
                    break
            else:
                stack.pop()
                (leafs if node.op == "NONE" else nodes).append(node)
        return t


# ---- ggml-alloc ------------------------------------------------------------------------------

class BestFit:
    """ggml_dyn_tallocr with one chunk: free blocks [offset, size] sorted by offset."""

    def __init__(self) -> None:
        self.offsets: list[int] = [0]
        self.sizes: list[int] = [1 << 62]  # the last block is the open end of the buffer
        self.max_size = 0

    def alloc(self, size: int) -> int:
        best, best_size = -1, 0
        sizes = self.sizes
        for i in range(len(sizes) - 1):
            s = sizes[i]
            if s >= size and (best == -1 or s <= best_size):
                best, best_size = i, s
        if best == -1:
            best = len(sizes) - 1
        off = self.offsets[best]
        self.offsets[best] += size
        sizes[best] -= size
        if sizes[best] == 0:
            del self.offsets[best], sizes[best]
        self.max_size = max(self.max_size, off + size)
        return off

    def free(self, off: int, size: int) -> None:
        offs, sizes = self.offsets, self.sizes
        for i in range(len(offs)):
            if offs[i] + sizes[i] == off:
                sizes[i] += size
                if i + 1 < len(offs) and offs[i] + sizes[i] == offs[i + 1]:
                    sizes[i] += sizes[i + 1]
                    del offs[i + 1], sizes[i + 1]
                return
            if off + size == offs[i]:
                offs[i] = off
                sizes[i] += size
                if i > 0 and offs[i - 1] + sizes[i - 1] == off:
                    sizes[i - 1] += sizes[i]
                    del offs[i], sizes[i]
                return
        i = bisect.bisect(offs, off)
        offs.insert(i, off)
        sizes.insert(i, size)


@dataclass
class AllocResult:
    """`peak_bytes`: the buffer ggml-alloc reserves; at the moment the highest end was reached:
    `live_bytes` of tensors alive (below the peak by the holes between them), of which
    `input_bytes` graph inputs and constants and `staging_bytes` staged weight copies;
    `live_at_peak`: (name, kind, bytes) of those tensors when asked for (detail=True)."""

    peak_bytes: int
    live_bytes: int = 0
    input_bytes: int = 0
    staging_bytes: int = 0
    live_at_peak: list[tuple[str, str, int]] = field(default_factory=list)


@dataclass(frozen=True)
class AllocPlan:
    """The size-independent part of a replay: which blocks are allocated and freed in which
    order. `events`: b >= 0 allocates block b, ~b frees it. Per block: `slots` names the tensor
    whose bytes it holds (i < n_leafs: graph.leafs[i]; else graph.nodes[i - n_leafs]; ~k: the
    staged copy before node k) and `kinds` is 'input', 'node' or 'staging'; `tags` holds the
    `extra` value of each staging block (None for the others). A node that takes over a
    source's memory in place has no block of its own. A block of 0 bytes is not allocated."""

    events: tuple[int, ...]
    slots: tuple[int, ...]
    kinds: tuple[str, ...]
    tags: tuple[object, ...]


def plan_allocation(graph: Graph, extra: Mapping[int, object] | None = None) -> AllocPlan:
    """Walk the graph as ggml_gallocr_alloc_graph_impl does (see the module docstring).

    `extra`: id(node) -> a tag of a tensor allocated just before that node and freed right
    after it (the GPU copy of a host-resident expert weight that op-offload stages for a
    MUL_MAT_ID: ggml-backend.cpp splits each such op with its weight as the split input);
    its bytes are given at replay (0: no copy, the weight is on the GPU).
    The decisions depend on shapes only through equality (in-place reuse), not on sizes."""
    extra = extra or {}
    n_leafs = len(graph.leafs)
    # every tensor by its slot (leafs, then nodes; anything else met after them), so that the
    # walk indexes lists instead of hashing ids: the search compiles graphs of ten thousand nodes
    tensors: list[Tensor] = graph.leafs + graph.nodes
    n_graph = len(tensors)
    slot_of = {id(t): i for i, t in enumerate(tensors)}

    def slot(t: Tensor) -> int:
        i = slot_of.get(id(t))
        if i is None:
            i = slot_of[id(t)] = len(tensors)
            tensors.append(t)
        return i

    try:
        node_src = [[slot_of[id(s)] for s in t.src] for t in graph.nodes]
        node_owner = [-1 if t.view_src is None else slot_of[id(t.view_src)] for t in graph.nodes]
    except KeyError:  # a source or owner the graph does not hold
        node_src = [[slot(s) for s in t.src] for t in graph.nodes]
        node_owner = [-1 if t.view_src is None else slot(t.view_src) for t in graph.nodes]
    n = len(tensors)
    children = [0] * n
    views = [0] * n
    for k, owner in enumerate(node_owner):
        if owner >= 0:
            views[owner] += 1
        for i in node_src[k]:
            children[i] += 1
    output = [t.output for t in tensors]
    # not allocated by galloc: weights, caches and views (they use their owner's memory)
    elsewhere = [t.external or t.view_src is not None for t in tensors]
    owned = [False] * n
    block = [-1] * n  # a tensor's block (shared along an in-place chain)
    events: list[int] = []
    slots: list[int] = []
    kinds: list[str] = []
    tags: list[object] = []

    def new_block(i: int, kind: str, tag: object = None) -> int:
        if i >= n_graph:
            raise KeyError("a tensor outside the graph is allocated")
        slots.append(i)
        kinds.append(kind)
        tags.append(tag)
        events.append(len(slots) - 1)
        return len(slots) - 1

    def allocate_node(i: int) -> None:
        if owned[i] or elsewhere[i]:
            return
        owned[i] = True
        t = tensors[i]
        if t.op in CAN_INPLACE:
            for s in t.src:
                j = slot_of[id(s)]
                if not owned[j] or output[j] or not s.contiguous or s.type != t.type or s.ne != t.ne:
                    continue
                if children[j] == 1 and views[j] == 0:
                    block[i] = block[j]
                    owned[j] = False  # the child now owns the memory
                    return
        block[i] = new_block(i, _kind(t))

    for i in range(n_leafs):
        allocate_node(i)
    for k, node in enumerate(graph.nodes):
        src = node_src[k]
        for i in src:
            if not (owned[i] or elsewhere[i]):  # allocate_node's own first test, without the call
                allocate_node(i)
        tag = extra.get(id(node))
        stage = new_block(~k, "staging", tag) if tag is not None else -1
        allocate_node(n_leafs + k)
        if stage >= 0:
            events.append(~stage)
        for i in src:
            children[i] -= 1
            if children[i] or views[i]:
                continue
            owner = -1 if tensors[i].view_src is None else slot_of[id(tensors[i].view_src)]
            if owner >= 0:
                views[owner] -= 1
                if not views[owner] and not children[owner] and owned[owner] and not output[owner]:
                    events.append(~block[owner])
                    owned[owner] = False
            elif owned[i] and not output[i]:
                events.append(~block[i])
                owned[i] = False
    return AllocPlan(tuple(events), tuple(slots), tuple(kinds), tuple(tags))


def block_bytes(plan: AllocPlan, graph: Graph) -> list[int]:
    """Bytes of each block of `plan` for this graph's shapes (unpadded; staging blocks 0).
    A symbolic shape's bytes (a Sym product) are computed once per type and the very Sym
    objects of its dimensions (held by the graph while this runs): a compiled graph's blocks
    repeat the same few shapes in each of its layers."""
    n_leafs = len(graph.leafs)
    leafs, nodes = graph.leafs, graph.nodes
    out: list = []
    by_shape: dict[tuple, object] = {}
    for slot in plan.slots:
        if slot < 0:
            out.append(0)
            continue
        t = leafs[slot] if slot < n_leafs else nodes[slot - n_leafs]
        n0, n1, n2, n3 = t.ne
        if n0.__class__ is int and n1.__class__ is int and n2.__class__ is int and n3.__class__ is int:
            out.append(t.nbytes)
            continue
        key = (t.type, n0 if n0.__class__ is int else (id(n0),), n1 if n1.__class__ is int else (id(n1),),
               n2 if n2.__class__ is int else (id(n2),), n3 if n3.__class__ is int else (id(n3),))
        got = by_shape.get(key)
        if got is None:
            got = by_shape[key] = t.nbytes
        out.append(got)
    return out


def replay(plan: AllocPlan, sizes: list[int], alignment: int = CPU_ALIGNMENT,
           names: list[str] | None = None) -> AllocResult:
    """Run the plan's allocations and frees through best fit (BestFit, inlined: the search
    replays hundreds of plans; the live bytes in locals, each plan's block kinds coded once)
    with these block sizes. `names` (per block) asks for the list of tensors alive at the peak."""
    kinds = _KIND_CODES.get(plan.kinds)
    if kinds is None:
        kinds = _KIND_CODES[plan.kinds] = [1 if k == "input" else 2 if k == "staging" else 0 for k in plan.kinds]
    padded = [-(-n // alignment) * alignment for n in sizes]
    offs: list[int] = [0]
    lens: list[int] = [1 << 62]  # free block sizes; the last block is the open end
    offset = [0] * len(sizes)
    live_node = live_input = live_staging = 0
    max_size = 0
    best = (0, 0, 0, 0)  # the peak's AllocResult fields, made into one at the end
    at_peak: list[tuple[str, str, int]] = []
    alive: set[int] = set()
    detail = names is not None
    bisect_right = bisect.bisect_right
    for ev in plan.events:
        if ev >= 0:
            size = padded[ev]
            if not size:
                continue
            n_free = len(lens) - 1
            i_best = n_free
            best_size = 1 << 63
            for i in range(n_free):
                fs = lens[i]
                if size <= fs <= best_size:
                    i_best, best_size = i, fs
            off = offs[i_best]
            rest = lens[i_best] - size
            if rest:
                offs[i_best] = off + size
                lens[i_best] = rest
            else:
                del offs[i_best], lens[i_best]
            offset[ev] = off
            k = kinds[ev]
            if k == 0:
                live_node += size
            elif k == 1:
                live_input += size
            else:
                live_staging += size
            end = off + size
            if detail:
                alive.add(ev)
            if end > max_size:
                max_size = end
                best = (end, live_node + live_input + live_staging, live_input, live_staging)
                if names is not None:
                    at_peak = [(names[b], plan.kinds[b], padded[b]) for b in sorted(alive)]
        else:
            b = ~ev
            size = padded[b]
            if not size:
                continue
            k = kinds[b]
            if k == 0:
                live_node -= size
            elif k == 1:
                live_input -= size
            else:
                live_staging -= size
            if detail:
                alive.discard(b)
            off = offset[b]
            j = bisect_right(offs, off)  # offs[j - 1] < off < offs[j]
            if j and offs[j - 1] + lens[j - 1] == off:
                lens[j - 1] += size
                if j < len(offs) and off + size == offs[j]:
                    lens[j - 1] += lens[j]
                    del offs[j], lens[j]
            elif j < len(offs) and off + size == offs[j]:
                offs[j] = off
                lens[j] += size
            else:
                offs.insert(j, off)
                lens.insert(j, size)
    return AllocResult(*best, live_at_peak=at_peak)


_KIND_CODES: dict[tuple[str, ...], list[int]] = {}  # plan.kinds -> 0 node / 1 input / 2 staging


def _kind(t: Tensor) -> str:
    return "input" if t.op == "NONE" else "node"


def allocate(graph: Graph, alignment: int = CPU_ALIGNMENT, extra: dict[int, int] | None = None) -> AllocResult:
    """Replay ggml_gallocr_alloc_graph_impl on `graph`: the buffer it needs and what is alive
    at its peak; `extra`: id(node) -> bytes of a copy staged for that node (plan_allocation)."""
    plan = plan_allocation(graph, extra)
    n_leafs = len(graph.leafs)
    names = []
    for slot in plan.slots:
        t = None if slot < 0 else graph.leafs[slot] if slot < n_leafs else graph.nodes[slot - n_leafs]
        names.append("staged_weight" if t is None else t.name or t.op)
    sizes = [int(tag) if kind == "staging" else n  # type: ignore[call-overload]
             for n, kind, tag in zip(block_bytes(plan, graph), plan.kinds, plan.tags)]
    return replay(plan, sizes, alignment, names)
