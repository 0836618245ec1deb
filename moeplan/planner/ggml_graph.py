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
from dataclasses import dataclass, field

from moeplan.planner.ggml import row_bytes

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


@dataclass(eq=False)
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
        return row_bytes(self.type, n0) * n1 * n2 * n3

    @property
    def n_elements(self) -> int:
        n0, n1, n2, n3 = self.ne
        return n0 * n1 * n2 * n3


def _ne(*dims: int) -> tuple[int, int, int, int]:
    d = tuple(int(x) for x in dims) + (1, 1, 1, 1)
    return d[0], d[1], d[2], d[3]


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
        return Tensor(op, _ne(*ne), type, tuple(s for s in src if s is not None), name=name)

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
        stack: list[tuple[Tensor, int]] = [(t, 0)]
        while stack:
            node, i = stack.pop()
            if i == 0:
                if id(node) in self._seen:
                    continue
                self._seen.add(id(node))
            if i < len(node.src):
                stack.append((node, i + 1))
                child = node.src[i]
                if id(child) not in self._seen:
                    stack.append((child, 0))
                continue
            if node.op == "NONE":
                self.leafs.append(node)
            else:
                self.nodes.append(node)
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
    """`peak_bytes`: the buffer ggml-alloc reserves; `live_at_peak`: (name, kind, bytes) of the
    tensors alive when the highest end was reached, kind 'input' (graph inputs and constants),
    'staging' or 'node'; their sum is below the peak by the holes between them."""

    peak_bytes: int
    live_at_peak: list[tuple[str, str, int]] = field(default_factory=list)


def _kind(t: Tensor) -> str:
    if t.name == "staged_weight":
        return "staging"
    return "input" if t.op == "NONE" else "node"


def allocate(graph: Graph, alignment: int = CPU_ALIGNMENT, extra: dict[int, int] | None = None) -> AllocResult:
    """Replay ggml_gallocr_alloc_graph_impl on `graph`; return the buffer size it needs.

    `extra`: id(node) -> bytes of a tensor allocated just before that node and freed right
    after it (the GPU copy of a host-resident expert weight that op-offload stages for a
    MUL_MAT_ID: ggml-backend.cpp splits each such op with its weight as the split input).
    """
    extra = extra or {}
    heap = BestFit()
    addr: dict[int, int] = {}
    size_of: dict[int, int] = {}
    owned: set[int] = set()
    children: dict[int, int] = {}
    views: dict[int, int] = {}
    live: dict[int, Tensor] = {}
    peak = [0, []]

    def pad(n: int) -> int:
        return -(-n // alignment) * alignment

    def place(t: Tensor, size: int) -> None:
        addr[id(t)] = heap.alloc(size)
        size_of[id(t)] = size
        live[id(t)] = t
        if heap.max_size > peak[0]:
            peak[0] = heap.max_size
            peak[1] = [(x.name or x.op, _kind(x), size_of[id(x)]) for x in live.values()]

    def release(t: Tensor) -> None:
        heap.free(addr[id(t)], size_of[id(t)])
        owned.discard(id(t))
        live.pop(id(t), None)

    def allocate_node(t: Tensor) -> None:
        if id(t) in owned or t.external or t.view_src is not None:
            return
        owned.add(id(t))
        if t.op in CAN_INPLACE:
            for p in t.src:
                if id(p) not in owned or p.output or not p.contiguous or p.type != t.type or p.ne != t.ne:
                    continue
                if children.get(id(p), 0) == 1 and views.get(id(p), 0) == 0:
                    addr[id(t)], size_of[id(t)] = addr[id(p)], size_of[id(p)]
                    owned.discard(id(p))  # the child now owns the memory
                    live.pop(id(p), None)
                    live[id(t)] = t
                    return
        place(t, pad(t.nbytes))

    for leaf in graph.leafs:
        allocate_node(leaf)
    for node in graph.nodes:
        if node.view_src is not None:
            views[id(node.view_src)] = views.get(id(node.view_src), 0) + 1
        for s in node.src:
            children[id(s)] = children.get(id(s), 0) + 1
    for node in graph.nodes:
        for s in node.src:
            allocate_node(s)
        staged = extra.get(id(node), 0)
        if staged:
            stage = Tensor("NONE", (staged, 1, 1, 1), "I8", name="staged_weight")
            place(stage, pad(staged))
        allocate_node(node)
        if staged:
            release(stage)
        for p in node.src:
            children[id(p)] -= 1
            if children[id(p)] or views.get(id(p), 0):
                continue
            if p.view_src is not None:
                owner = p.view_src
                views[id(owner)] -= 1
                if not views[id(owner)] and not children.get(id(owner), 0) and id(owner) in owned \
                        and not owner.output:
                    release(owner)
            elif id(p) in owned and not p.output:
                release(p)
    return AllocResult(peak[0], peak[1])
