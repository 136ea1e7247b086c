"""Operator fusion (TVM's FuseOps): group the nodes of a function into primitive functions.

A backend that generates code (the LLVM backend) compiles one kernel per *fused group* instead of
one per node: a convolution and the bias add, residual add and ReLU after it become one loop nest
that never writes the intermediate tensors to memory. :func:`fuse_ops` decides the groups; it
does not change the function::

    groups = fuse_ops(region)             # execution order
    print(format_groups(groups))
    for g in groups:
        kernel = build(g.as_function())   # the group's nodes as a function of its inputs

The rules are TVM's, driven by each op's :class:`~tessera.ops.registry.OpPattern`:

* an ``OUT_ELEMWISE_FUSABLE`` op (Conv, Gemm, MatMul, the blocked ``ConvNCHWc``/``PoolNCHWc``)
  takes the ``ELEMWISE``/``BROADCAST`` ops after it as its epilogue (Conv -> Add(bias) ->
  Add(residual) -> Relu is one group);
* chains of ``ELEMWISE``/``BROADCAST`` ops fuse together, into a following ``INJECTIVE`` or
  ``COMM_REDUCE`` op, and into a group that already has a convolution anchor (an elementwise op
  computing the residual operand of the epilogue, for instance);
* ``INJECTIVE`` ops (Reshape, Transpose, Concat, LayoutTransform) fuse with following injective
  ops and into a following reduction (TVM stops injective ops before a reduction; here a
  reduction inlines them like elementwise ones), in a second phase so that convolutions finish
  taking their epilogues first;
* a ``COMM_REDUCE`` op absorbs its elementwise/injective producers but, as in TVM, does not take
  the elementwise ops after it (its schedule would need an epilogue stage);
* ``OPAQUE`` ops (Softmax, LRN, today's MaxPool and AveragePool) stay alone;
* a group whose values depend on sizes and constants only does not fuse into a consumer that
  reads data when computing it costs more than reading it (a static compile folds such a
  group into a constant; a symbolic one runs its kernel once per binding of the sizes);
* a costly group does not fuse into a ``Gather`` as its indices when the Gather reads each
  index several times (rows of more than one element): it would be computed at every read.

A node is only fused into its *immediate post-dominator* (the first node that every path from it
to the function's outputs goes through), after checking every node on every path in between, and
the whole path joins the group. Hence every group has a single output (its last node) and the
groups form an acyclic graph: this is TVM's single-output rule, kept on purpose (a multi-output
group would save a write only where an intermediate is read outside the group, and costs a more
complex kernel interface). A value read by several groups is an output of its producer's group,
and a node whose output is a function output ends its group. ``opt_level`` 0 puts every node in a
group of its own; ``max_depth`` caps the number of nodes in a group.

Edges carry the consumer's pattern, lowered from ``BROADCAST`` to ``ELEMWISE`` when the consumer's
output has the operand's shape (an Add of a per-channel bias to a conv output is elementwise as
seen from the conv).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tessera.errors import PassError
from tessera.ir.graph import Function, Node, Value
from tessera.ir.symbolic import shapes_equal
from tessera.ops.registry import OpPattern, get_schema, has_op

ELEMWISE = OpPattern.ELEMWISE
BROADCAST = OpPattern.BROADCAST
INJECTIVE = OpPattern.INJECTIVE
COMM_REDUCE = OpPattern.COMM_REDUCE
OUT_ELEMWISE_FUSABLE = OpPattern.OUT_ELEMWISE_FUSABLE
OPAQUE = OpPattern.OPAQUE

#: Default cap on the number of nodes in one group (TVM's ``max_fuse_depth``).
MAX_FUSE_DEPTH = 256

#: Ops that only move data: a fused ``Concat`` may inline any number of them.
DATA_MOVEMENT = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten",
                           "Identity", "Slice", "LayoutTransform", "Cast", "Expand"})
#: Ops too costly to compute once per input of a fused ``Concat``.
COSTLY_OPS = frozenset({"Resize", "Upsample", "GridSample"})
#: Computing (not data-moving) nodes a producer group may have and still fuse into a
#: ``Concat`` of several inputs.
CONCAT_INLINE_OPS = 4
#: Ops that only make or pick values by index: a group of them (with data movement) computes
#: as cheaply as it reads its result, so it fuses into its consumer even where its values
#: depend on sizes only.
INDEX_OPS = frozenset({"Range", "ConstantOfShape", "ShapeValues", "Gather", "Concat"})
#: Ops whose cost per element keeps a group made of sizes only a kernel of its own.
TRANSCENDENTAL_OPS = frozenset({"Log", "Exp", "Pow", "Sqrt", "Div", "Mod", "Reciprocal", "Sin",
                                "Cos", "Tan", "Tanh", "Erf", "Sigmoid", "Softplus", "Atan",
                                "Asin", "Acos", "Sinh", "Cosh"})

#: ``PatternFn(node) -> OpPattern``: how fusion sees one node.
PatternFn = Callable[[Node], OpPattern]


def op_pattern(node: Node) -> OpPattern:
    """The registry's pattern for ``node``'s op (``OPAQUE`` for ops not in the registry and for
    nodes holding a body)."""
    if node.body is not None or not has_op(node.op):
        return OPAQUE
    return get_schema(node.op).pattern


@dataclass
class FusedGroup:
    """One primitive function: nodes that a backend compiles into one kernel.

    ``nodes`` are in topological order; ``anchor`` is the node that decides the group's schedule
    (its ``OUT_ELEMWISE_FUSABLE``, ``COMM_REDUCE`` or ``OPAQUE`` node; ``None`` for a group of
    elementwise/broadcast/injective ops); ``pattern`` is the most complex pattern among the
    nodes; ``inputs`` are the values read from outside the group (graph inputs, constants and
    other groups' outputs) in first-use order, each once; ``outputs`` are the group's values read
    by other groups or returned by the function.
    """

    name: str
    nodes: list[Node]
    anchor: Node | None
    pattern: OpPattern
    inputs: list[Value]
    outputs: list[Value]

    @property
    def ops(self) -> list[str]:
        """The ops of the nodes, in order."""
        return [n.op for n in self.nodes]

    def as_function(self) -> Function:
        """The group as a standalone function of its non-constant inputs (a structural copy:
        new nodes and values with the same names; constants keep their data)."""
        fn = Function(self.name, {"fused_pattern": self.pattern.name})
        mapping: dict[int, Value] = {}
        for v in self.inputs:
            if v.is_constant:
                mapping[id(v)] = Value(v.name, v.type, data=v.data)
                fn.reserve_name(v.name)
            else:
                mapping[id(v)] = fn.add_input(v.name, v.type)
        for node in self.nodes:
            outs = [Value(o.name, o.type) for o in node.outputs]
            for old, new in zip(node.outputs, outs):
                mapping[id(old)] = new
            inputs = [mapping[id(v)] if v is not None else None for v in node.inputs]
            fn.append(Node(node.op, node.name, inputs, outs, dict(node.attrs)))
        fn.outputs = [mapping[id(v)] for v in self.outputs]
        return fn

    def __str__(self) -> str:
        anchor = f" anchor={self.anchor.name}" if self.anchor is not None else ""
        ins = ", ".join(f"%{v.name}" for v in self.inputs if not v.is_constant)
        consts = sum(1 for v in self.inputs if v.is_constant)
        if consts:
            ins += f"{', ' if ins else ''}{consts} const"
        outs = ", ".join(f"%{v.name}" for v in self.outputs)
        return (f"{self.name} [{self.pattern.name}{anchor}]: {' -> '.join(self.ops)}  "
                f"({ins}) -> ({outs})")


def format_groups(groups: list[FusedGroup]) -> str:
    """A printable summary: one line per group, then the counts."""
    lines = [f"{i:4d}  {g}" for i, g in enumerate(groups)]
    nodes = sum(len(g.nodes) for g in groups)
    fused = sum(1 for g in groups if len(g.nodes) > 1)
    lines.append(f"{len(groups)} groups for {nodes} nodes ({fused} with more than one node)")
    return "\n".join(lines)


# -- the forward graph and its post-dominator tree ---------------------------------------------

class _ForwardGraph:
    """Nodes in topological order with consumer edges ``(consumer index, edge pattern)``."""

    def __init__(self, func: Function, pattern_of: PatternFn):
        self.nodes = func.topological_order()
        self.patterns = [pattern_of(n) for n in self.nodes]
        produced = {id(v): i for i, n in enumerate(self.nodes) for v in n.outputs}
        #: id(value) -> index of the node producing it
        self.producer = produced
        self.edges: list[list[tuple[int, OpPattern]]] = [[] for _ in self.nodes]
        for j, node in enumerate(self.nodes):
            for v in node.inputs:
                i = produced.get(id(v)) if v is not None else None
                if i is None:
                    continue
                edge = self.patterns[j]
                if (edge == BROADCAST and len(node.outputs) == 1
                        and shapes_equal(node.outputs[0].type.shape, v.type.shape)):
                    edge = ELEMWISE
                self.edges[i].append((j, edge))
        returned = {id(v) for v in func.outputs}
        self.extern = [any(id(o) in returned for o in n.outputs) for n in self.nodes]
        #: per node: whether its values depend on constants and sizes only (no input of the
        #: function reaches it)
        self.sizes_only: list[bool] = []
        for node in self.nodes:
            self.sizes_only.append(node.body is None and all(
                v is None or v.is_constant
                or (id(v) in produced and self.sizes_only[produced[id(v)]])
                for v in node.inputs))


class _PostDominatorTree:
    """Immediate post-dominators: ``parent[i]`` (-1: none below the exit), the tree ``depth``,
    and ``pattern[i]``, the combined edge pattern on the paths from node i to its parent."""

    def __init__(self, graph: _ForwardGraph):
        n = len(graph.nodes)
        self.parent = [-1] * n
        self.depth = [1] * n
        self.pattern = [OPAQUE] * n
        for i in reversed(range(n)):
            if graph.extern[i] or not graph.edges[i]:
                continue
            pattern = ELEMWISE
            parent = -1
            for k, (j, edge) in enumerate(graph.edges[i]):
                if k == 0:
                    parent = j
                else:
                    parent, pattern = self._lca(parent, j, pattern)
                pattern = max(pattern, edge)
            self.parent[i] = parent
            self.depth[i] = self.depth[parent] + 1 if parent >= 0 else 1
            self.pattern[i] = pattern

    def _lca(self, a: int, b: int, pattern: OpPattern) -> tuple[int, OpPattern]:
        while a != b:
            if a < 0 or b < 0:
                return -1, pattern
            if self.depth[a] < self.depth[b]:
                pattern = max(pattern, self.pattern[b])
                b = self.parent[b]
            elif self.depth[b] < self.depth[a]:
                pattern = max(pattern, self.pattern[a])
                a = self.parent[a]
            else:
                pattern = max(pattern, self.pattern[a], self.pattern[b])
                a, b = self.parent[a], self.parent[b]
        return a, pattern


# -- the partitioner ---------------------------------------------------------------------------

class _Partitioner:
    """Union-find over node indices; a root holds its group's pattern, size and anchor."""

    def __init__(self, graph: _ForwardGraph, max_depth: int):
        self.graph = graph
        self.max_depth = max_depth
        n = len(graph.nodes)
        self.parent = list(range(n))
        self.pattern = list(graph.patterns)
        self.size = [1] * n
        self.anchor = [i if p >= COMM_REDUCE else -1 for i, p in enumerate(graph.patterns)]

    def find(self, i: int) -> int:
        root = i
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[i] != root:
            self.parent[i], i = root, self.parent[i]
        return root

    def _paths(self, src: int, sink: int) -> list[int]:
        """Every node on the paths from ``src`` (excluded) to ``sink`` (included, last)."""
        seen = {src}
        order: list[int] = []
        stack = [j for j, _ in reversed(self.graph.edges[src])]
        while stack:
            u = stack.pop()
            if u in seen:
                continue
            seen.add(u)
            if u == sink:
                continue
            order.append(u)
            stack.extend(j for j, _ in reversed(self.graph.edges[u]))
        order.append(sink)
        return order

    def check_path(self, src: int, sink: int,
                   cond: Callable[[OpPattern, bool], bool]) -> bool:
        """Whether every group on the paths from ``src`` to ``sink`` satisfies ``cond(pattern,
        is_sink)``."""
        return all(cond(self.pattern[self.find(u)], u == sink) for u in self._paths(src, sink))

    def size_with(self, src: int, sink: int) -> int:
        """How many nodes the group of ``sink`` would hold after fusing the paths from ``src``."""
        roots = {self.find(u) for u in (src, *self._paths(src, sink))}
        return sum(self.size[r] for r in roots)

    def merge(self, child: int, target: int) -> None:
        child, target = self.find(child), self.find(target)
        if child == target:
            return
        if self.anchor[child] >= 0:
            if self.anchor[target] >= 0:  # the path checks make this impossible
                raise PassError("fuse_ops: two anchors in one group "
                                f"({self.graph.nodes[self.anchor[child]].name}, "
                                f"{self.graph.nodes[self.anchor[target]].name})")
            self.anchor[target] = self.anchor[child]
        self.parent[child] = target
        self.size[target] += self.size[child]
        self.pattern[target] = max(self.pattern[target], self.pattern[child])

    def _costly_into_concat(self, src: int, sink: int) -> bool:
        """Whether fusing ``src``'s group into a ``Concat`` of several inputs would compute it
        for every element of the concatenation: a fused concat selects among its inputs per
        element, and a select evaluates every input, so work beyond a few cheap ops (a
        ``Resize``; more than :data:`CONCAT_INLINE_OPS` computing nodes) stays a kernel of its
        own, written once (SegFormer's head concatenates four upsampled maps)."""
        node = self.graph.nodes[sink]
        if node.op != "Concat" or sum(v is not None for v in node.inputs) < 2:
            return False
        root = self.find(src)
        members = [self.graph.nodes[u] for u in range(len(self.graph.nodes))
                   if self.find(u) == root]
        computing = [n for n in members if n.op not in DATA_MOVEMENT]
        return any(n.op in COSTLY_OPS for n in computing) or \
            len(computing) > CONCAT_INLINE_OPS

    def _computing_ops(self, src: int) -> list[str]:
        """The ops of ``src``'s group that compute (neither move data nor make indices)."""
        root = self.find(src)
        return [n.op for u, n in enumerate(self.graph.nodes)
                if self.find(u) == root and n.op not in DATA_MOVEMENT
                and n.op not in INDEX_OPS]

    @staticmethod
    def _costly(ops: list[str]) -> bool:
        return len(ops) > CONCAT_INLINE_OPS or any(op in TRANSCENDENTAL_OPS for op in ops)

    def _costly_into_gather(self, src: int, sink: int) -> bool:
        """Whether fusing ``src`` (and the paths from it) into ``sink`` would put a costly
        group and a ``Gather`` reading it as its indices in one kernel, where the Gather reads
        each index several times: T5's relative-position bias picks a row of one value per
        head, and a fused index is computed at every read. Work beyond a few cheap ops (a
        transcendental or division; more than :data:`CONCAT_INLINE_OPS` computing nodes)
        then stays a kernel of its own, written once."""
        graph = self.graph
        paths = self._paths(src, sink)
        merged = None
        for u in paths:
            node = graph.nodes[u]
            if node.op != "Gather" or len(node.inputs) < 2 or node.inputs[1] is None \
                    or node.inputs[0] is None:
                continue
            producer = graph.producer.get(id(node.inputs[1]))
            if producer is None or self.find(producer) == self.find(u):
                continue
            if merged is None:
                merged = {self.find(v) for v in (src, *paths)}
            if self.find(producer) not in merged:
                continue
            shape = node.inputs[0].type.shape
            axis = int(node.attrs.get("axis", 0))
            axis = axis + len(shape) if axis < 0 else axis
            row = [d for k, d in enumerate(shape) if k != axis]
            if all(isinstance(d, int) for d in row) and math.prod(row) <= 1:
                continue  # one element per index: read once
            if self._costly(self._computing_ops(producer)):
                return True
        return False

    def _costly_sizes_only(self, src: int, sink: int) -> bool:
        """Whether ``src``'s group computes from sizes and constants only, at a cost per
        element beyond reading its result (a transcendental or division, or more than
        :data:`CONCAT_INLINE_OPS` computing nodes), and ``sink`` reads data: then it stays a
        kernel of its own, which execution states run once per binding of the sizes
        (``ExecutionPlan.once_per_sizes``) as a static compile folds it once (T5's
        relative-position buckets, rotary tables)."""
        graph = self.graph
        if not graph.sizes_only[src] or graph.sizes_only[sink]:
            return False
        return self._costly(self._computing_ops(src))

    def commit(self, src: int, sink: int) -> None:
        """Fuse ``src`` and every node between it and ``sink`` into ``sink``'s group."""
        for u in (src, *self._paths(src, sink)):
            self.merge(u, sink)

    def run_phase(self, dom: _PostDominatorTree, phase: int) -> None:
        for i in range(len(self.graph.nodes)):
            pattern = self.pattern[self.find(i)]
            sink = dom.parent[i]
            if pattern == OPAQUE or sink < 0 or self.find(i) == self.find(sink):
                continue
            if pattern == OUT_ELEMWISE_FUSABLE:
                if phase != 0 or dom.pattern[i] != ELEMWISE:
                    continue
                cond = _epilogue_cond
            elif pattern <= BROADCAST:
                if not (dom.pattern[i] <= INJECTIVE or dom.pattern[i] == COMM_REDUCE):
                    continue
                cond = _elemwise_cond
            elif pattern == INJECTIVE:
                if phase != 1:
                    continue
                cond = _injective_cond
            else:  # COMM_REDUCE: takes producers, never fuses into its consumers (as TVM)
                continue
            if self.size_with(i, sink) > self.max_depth:
                continue
            if self._costly_into_concat(i, sink) or self._costly_sizes_only(i, sink) or \
                    self._costly_into_gather(i, sink):
                continue
            if self.check_path(i, sink, cond):
                self.commit(i, sink)


def _epilogue_cond(kind: OpPattern, is_sink: bool) -> bool:
    return kind <= BROADCAST


def _elemwise_cond(kind: OpPattern, is_sink: bool) -> bool:
    if not is_sink:
        return kind <= INJECTIVE
    return kind <= INJECTIVE or kind in (COMM_REDUCE, OUT_ELEMWISE_FUSABLE)


def _injective_cond(kind: OpPattern, is_sink: bool) -> bool:
    # TVM stops at kind <= INJECTIVE for the sink too; a reduction inlines an injective
    # prologue (a Transpose or Reshape before a ReduceSum) as easily as an elementwise one
    return kind <= INJECTIVE or (is_sink and kind == COMM_REDUCE)


# -- the pass ----------------------------------------------------------------------------------

def fuse_ops(func: Function, opt_level: int = 3, max_depth: int = MAX_FUSE_DEPTH,
             pattern_of: PatternFn | None = None) -> list[FusedGroup]:
    """Partition ``func``'s nodes into fused groups, returned in a valid execution order.

    ``opt_level`` 0 gives one group per node; ``max_depth`` caps the nodes per group;
    ``pattern_of`` overrides how a node is seen (default :func:`op_pattern`: the registry's
    pattern), so a backend can keep a node it cannot fuse ``OPAQUE``. Every node of ``func`` is in
    exactly one group.
    """
    if max_depth < 1:
        raise PassError(f"fuse_ops: max_depth must be at least 1, got {max_depth}")
    graph = _ForwardGraph(func, pattern_of or op_pattern)
    part = _Partitioner(graph, max_depth if opt_level > 0 else 1)
    if opt_level > 0 and max_depth > 1:
        dom = _PostDominatorTree(graph)
        for phase in (0, 1):
            part.run_phase(dom, phase)
    return _collect(func, graph, part)


def _collect(func: Function, graph: _ForwardGraph, part: _Partitioner) -> list[FusedGroup]:
    """Turn the union-find roots into FusedGroups in a topological order of the groups."""
    members: dict[int, list[int]] = {}
    for i in range(len(graph.nodes)):
        members.setdefault(part.find(i), []).append(i)
    group_of = {i: root for root, idx in members.items() for i in idx}

    # the group graph: an edge from each group to the groups reading its values
    succ: dict[int, set[int]] = {root: set() for root in members}
    indegree = dict.fromkeys(members, 0)
    for i, edges in enumerate(graph.edges):
        for j, _ in edges:
            a, b = group_of[i], group_of[j]
            if a != b and b not in succ[a]:
                succ[a].add(b)
                indegree[b] += 1
    # Kahn's algorithm, earliest first node first (stable with respect to the node order)
    ready = sorted((members[r][0], r) for r, d in indegree.items() if d == 0)
    order: list[int] = []
    while ready:
        _, root = ready.pop(0)
        order.append(root)
        for b in succ[root]:
            indegree[b] -= 1
            if indegree[b] == 0:
                ready.append((members[b][0], b))
        ready.sort()
    if len(order) != len(members):
        raise PassError(f"fuse_ops: the fused groups of {func.name} form a cycle")

    returned = {id(v) for v in func.outputs}
    readers: dict[int, set[int]] = {}  # value -> groups reading it
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v is not None:
                readers.setdefault(id(v), set()).add(group_of[i])
    groups: list[FusedGroup] = []
    for root in order:
        nodes = [graph.nodes[i] for i in members[root]]
        inside = {id(o) for n in nodes for o in n.outputs}
        inputs: dict[int, Value] = {}
        for n in nodes:
            for v in n.inputs:
                if v is not None and id(v) not in inside and id(v) not in inputs:
                    inputs[id(v)] = v
        outputs = [o for n in nodes for o in n.outputs
                   if id(o) in returned or readers.get(id(o), set()) - {root}]
        anchor = graph.nodes[part.anchor[root]] if part.anchor[root] >= 0 else None
        groups.append(FusedGroup("", nodes, anchor, part.pattern[root], list(inputs.values()),
                                 outputs))
    _name_groups(groups)
    return groups


def _name_groups(groups: list[FusedGroup]) -> None:
    """``fused_<anchor>`` (or ``fused_<last node>`` without an anchor), made unique."""
    used: set[str] = set()
    for g in groups:
        base = f"fused_{(g.anchor or g.nodes[-1]).name}"
        name, k = base, 1
        while name in used:
            name, k = f"{base}_{k}", k + 1
        used.add(name)
        g.name = name


__all__ = ["FusedGroup", "MAX_FUSE_DEPTH", "format_groups", "fuse_ops", "op_pattern"]
