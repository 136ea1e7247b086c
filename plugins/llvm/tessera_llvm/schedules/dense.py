"""The x86/AArch64 schedule of matrix products (dense, matmul, batch matmul) with a fused
epilogue.

Each ``mr x nr`` tile of the output is accumulated in registers (``mr`` rows unrolled, ``nr``
columns as ``nr / lanes`` vectors), over the whole reduction; tiles are spread over threads by
fusing the batch, row-tile and column-tile axes into one parallel axis. The epilogue (bias,
activation, residual) runs when the tile is written out.

Run-time extents ("compile once, serve any size": rows, columns, reduction or batch axes that
are size variables). The register tile is fixed at compile time: ``mr`` rows from the register
file (:meth:`CPUInfo.max_accumulators`: 12 rows of two vectors with 32 registers), ``nr``
columns from the static column count (two vectors when the columns are a run-time size too).
A symbolic axis split by its tile gives a loop of ``ceil(n / tile)`` tiles whose last one is
guarded; the schedule marks that loop and :func:`specialize_tails` (run by the lowering between
``te.lower`` and the TIR pipeline) splits it into the ``n // tile`` whole tiles, the static
micro-kernel without guards, and a last tile without guards either: for rows, the ``n % mr``
rows left in tiles of fewer rows that still fill the FMA units (:func:`tail_height`: 4 rows of
two vectors), the last one shifted back to end at ``n``, and where ``n`` is below that one such
tile whose rows past ``n - 1`` are clamped to it (three copies of the micro-kernel, not one per
remainder); for columns, its vectors shifted back to end at ``n`` (a zero-padded local copy of
``b`` below one vector). A parallel loop over static tiles runs in the caller when the product,
at its run-time sizes, is below ``parallel_min_flops`` (its grain is chosen per call). The axes
of static extent (batch, column tiles) are fused into the parallel loop and the symbolic ones
run inside it (their guards stay linear in one loop variable, which the partition needs); when
the static axes give fewer tasks than threads, the outermost symbolic tile loop is the parallel
one (run-time extent). A reduction of run-time length is a plain loop of that extent around the
tile. Knob defaults are decided at :func:`representative` sizes (the bound of a run-time size
when known, else :data:`~.common.REPRESENTATIVE_SIZE`).
"""

from __future__ import annotations

import math
from typing import Any

from tessera import te
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.arith import to_poly, uses_var
from tessera.tir.buffer import Buffer
from tessera.tir.functor import IRMutator, nodes_of, post_order_visit, rebuild, substitute
from tessera.tir.transform._util import copy_with

from .common import (
    PARALLEL_PRAGMA,
    REPRESENTATIVE_SIZE,
    SERIAL_GRAIN,
    CPUInfo,
    extents,
    representative,
    run_time_extents,
    static_extent,
    workload_dim,
)
from .config import ConfigSpace, ScheduleConfig, largest_divisor

TAGS = ("dense", "matmul", "batch_matmul")


def is_symbolic(mm: te.ComputeOp) -> bool:
    """Whether an axis or the reduction of the product has a run-time extent."""
    return any(static_extent(a.dom.extent) is None for a in (*mm.axis, *mm.reduce_axis))


def _sizes(mm: te.ComputeOp) -> tuple[list[int | None], int | None]:
    """The output extents and the reduction length, None where a run-time size."""
    return ([static_extent(a.dom.extent) for a in mm.axis],
            static_extent(mm.reduce_axis[0].dom.extent))


def _rep_sizes(mm: te.ComputeOp) -> tuple[list[int], int]:
    """:func:`_sizes` with every run-time size at :func:`representative`."""
    return ([representative(a.dom.extent) for a in mm.axis],
            representative(mm.reduce_axis[0].dom.extent))


def find_dense(ops: list[te.ComputeOp]) -> te.ComputeOp | None:
    for op in ops:
        if op.tag in TAGS and len(op.reduce_axis) == 1:
            return op
    return None


def dense_space(mm: te.ComputeOp, cpu: CPUInfo) -> ConfigSpace:
    """The knobs of a product's register tile, vector width, parallel launch and tile order
    (:func:`symbolic_dense_space` where an extent is a run-time size)."""
    if is_symbolic(mm):
        return symbolic_dense_space(mm, cpu)
    shape = extents(mm)
    m, n = shape[-2], shape[-1]
    k = mm.reduce_axis[0].dom.extent.value
    space = ConfigSpace("dense", (tuple(shape), k))
    lanes = cpu.lanes_for(mm.output(0).dtype)
    vec = next((v for v in (lanes, lanes // 2, lanes // 4) if v >= 4 and n % v == 0), 1)
    # two vectors of columns per tile when they divide (more for narrow vectors)
    nr_vecs = next((k for k in ((2,) if vec == lanes else (5, 4, 3, 2))
                    if vec > 1 and n % (k * vec) == 0), 1)
    nr = vec * nr_vecs
    # mr x nr_vecs accumulators, the nr_vecs vectors of b and one broadcast of a must fit the
    # register file: 12 x 2 with 32 vector registers, 6 x 2 with AVX2's 16
    if vec > 1:
        rows = min(24, cpu.max_accumulators(nr_vecs + 1)) // nr_vecs
    else:
        rows = 8
    mr = min(largest_divisor(m, max(1, rows)), 12)
    if vec > 1 and mr * nr_vecs < 4:
        # few rows (a batch-1 fully-connected layer): one accumulator chain per column vector
        # waits on the FMA latency at every step of k; more column vectors per tile give
        # independent chains (1000 columns: 5 vectors of 8); with packed weights the tile
        # stays a whole number of panels (vector loads that provably stay in one panel)
        cols = n // vec
        panel = int(mm.attrs.get("panel") or 1)
        fits = [d for d in range(1, 9)
                if cols % d == 0 and (d * vec) % panel == 0
                and mr * d <= cpu.max_accumulators(d + 1)]
        nr_vecs = max(fits, default=nr_vecs)
        nr = vec * nr_vecs
    space.define("nr", sorted({d for d in (1, 4, 8, 16, 32, 48, 64) if n % d == 0} | {nr}), nr,
                 "output columns per register tile (a multiple of the vector width)")
    space.define("mr", sorted({d for d in range(1, min(m, 16) + 1) if m % d == 0} | {mr}), mr,
                 "output rows per register tile")
    space.define("vector_width", [1, 4, 8, 16], vec if vec in (1, 4, 8, 16) else 1,
                 "vector lanes of the column loop")
    space.define("parallel_min_flops", [1 << 16, 1 << 18, 1 << 20], 1 << 18,
                 "smallest product worth a parallel launch")
    # Column tiles outside row tiles when b is the larger operand: each nr-wide strip of b
    # (k x nr, a few hundred KiB) is then read once and meets every row tile while it is in
    # the cache, and a (smaller) is what the caches re-serve; row tiles outside re-read all
    # of b from memory once per row tile (BERT's 768 x 3072 feed-forward weights: 9 MiB).
    space.define("cols_outer", [False, True], n > m, "column tiles outside row tiles")
    return space


def symbolic_dense_space(mm: te.ComputeOp, cpu: CPUInfo) -> ConfigSpace:
    """:func:`dense_space` of a product with run-time extents (module doc): the register tile
    from the register file and the static extents; the knobs that depend on the size taken at
    :func:`representative` sizes. The workload names each run-time extent by its
    expression."""
    sizes, kdim = _sizes(mm)
    m, n = sizes[-2], sizes[-1]
    workload = (tuple(workload_dim(a.dom.extent) for a in mm.axis),
                workload_dim(mm.reduce_axis[0].dom.extent))
    space = ConfigSpace("dense", workload,
                        extents=run_time_extents(mm.axis, mm.reduce_axis))
    lanes = cpu.lanes_for(mm.output(0).dtype)
    panel = int(mm.attrs.get("panel") or 1)
    if n is None:
        vec, nr_vecs = lanes, 2
    else:
        vec = next((v for v in (lanes, lanes // 2, lanes // 4) if v >= 4 and n % v == 0), 1)
        nr_vecs = next((k for k in ((2,) if vec == lanes else (5, 4, 3, 2))
                        if vec > 1 and n % (k * vec) == 0), 1)
    nr = vec * nr_vecs
    rows = min(24, cpu.max_accumulators(nr_vecs + 1)) // nr_vecs if vec > 1 else 8
    if m is None:  # fixed by the register file (at most the rows' bound, when known)
        mr = min(max(1, rows), 12, representative(mm.axis[-2].dom.extent))
    else:
        mr = min(largest_divisor(m, max(1, rows)), 12)
    if m is not None and vec > 1 and mr * nr_vecs < 4 and n is not None:
        # few static rows (see dense_space): more column vectors per tile
        fits = [d for d in range(1, 9)
                if (n // vec) % d == 0 and (d * vec) % panel == 0
                and mr * d <= cpu.max_accumulators(d + 1)]
        nr_vecs = max(fits, default=nr_vecs)
        nr = vec * nr_vecs
    if n is None:
        nrs = {vec, 2 * vec, 4 * vec} if vec > 1 else {1, 4, 8, 16, 32}
    else:
        nrs = {d for d in (1, 4, 8, 16, 32, 48, 64) if n % d == 0}
    space.define("nr", sorted(nrs | {nr}), nr,
                 "output columns per register tile (a multiple of the vector width)")
    mrs = range(1, 17) if m is None else [d for d in range(1, min(m, 16) + 1) if m % d == 0]
    space.define("mr", sorted(set(mrs) | {mr}), mr, "output rows per register tile")
    space.define("vector_width", [1, 4, 8, 16], vec if vec in (1, 4, 8, 16) else 1,
                 "vector lanes of the column loop")
    rep, _ = _rep_sizes(mm)
    space.define("parallel_min_flops", [1 << 16, 1 << 18, 1 << 20], 1 << 18,
                 "smallest product worth a parallel launch (run-time sizes taken at "
                 f"{REPRESENTATIVE_SIZE})")
    space.define("cols_outer", [False, True], rep[-1] > rep[-2], "column tiles outside row tiles")
    tasks = math.prod(v for v in sizes[:-2] if v is not None)
    tasks *= -(-n // nr) if n is not None else 1
    tasks *= -(-m // mr) if m is not None else 1
    space.define("parallel_rows", [False, True], tasks < cpu.num_threads,
                 "the outermost tile loop of run-time extent is the parallel loop (else the "
                 "static tile loops, fused)")
    return space


def schedule_dense(s: Any, mm: te.ComputeOp, out: te.ComputeOp, cfg: ScheduleConfig) -> None:
    """Apply ``cfg`` (:func:`dense_space`) to the product ``mm`` whose tiles ``out`` (``mm``
    itself, or its epilogue) writes."""
    mr, nr, vec = int(cfg["mr"]), int(cfg["nr"]), int(cfg["vector_width"])
    if nr % max(vec, 1):
        vec = 1
    if out is mm:
        acc = s.cache_write(mm.output(0), "local").op
        writer = mm
    else:
        acc = mm
        writer = out
        s[mm].set_scope("local")
    ws = s[writer]
    axes = list(writer.axis)
    batch, (row, col) = axes[:-2], axes[-2:]
    ro, ri = ws.split(row, factor=mr)
    co, ci = ws.split(col, factor=nr)
    outer = [*batch, co, ro] if cfg.get("cols_outer") else [*batch, ro, co]
    if is_symbolic(mm):
        if static_extent(row.dom.extent) is None:
            ws.pragma(ro, TAIL_PRAGMA, ("rows", mr, tail_height(mr, nr // max(vec, 1))))
        if static_extent(col.dom.extent) is None:
            ws.pragma(co, TAIL_PRAGMA, ("cols", nr, vec))
        par = _symbolic_outer(ws, outer, ri, ci, mm, cfg)
    else:
        ws.reorder(*outer, ri, ci)
        flops = 2 * math.prod(extents(mm)) * mm.reduce_axis[0].dom.extent.value
        par = ws.fuse(*outer) if len(outer) > 1 else outer[0]
        if flops >= int(cfg.get("parallel_min_flops", 1 << 18)):
            ws.parallel(par)
    if vec > 1:
        cio, cii = ws.split(ci, factor=vec)
        ws.vectorize(cii)
    if is_symbolic(mm):
        # the tile written out row by row and vector by vector in straight-line code, as it
        # is accumulated: a loop over them reads the accumulator at a variable offset, which
        # keeps it in memory. A static compile's LLVM unrolls that loop; a symbolic one's
        # does not unroll (tessera_llvm.build), and a product with a GELU epilogue ran at
        # 2.5x its static time (whisper's feed-forward, 0.100 against 0.040 ms)
        ws.unroll(ri)
        if vec > 1:
            ws.unroll(cio)
    s[acc].compute_at(ws, par)
    cs = s[acc]
    crow, ccol = acc.axis[-2], acc.axis[-1]
    (k,) = acc.reduce_axis
    if vec > 1:
        cco, cci = cs.split(ccol, factor=vec)
        cs.reorder(k, crow, cco, cci)
        cs.unroll(crow)
        cs.unroll(cco)
        cs.vectorize(cci)
    else:
        cs.reorder(k, crow, ccol)
        cs.unroll(crow)


def _symbolic_outer(ws: Any, outer: list[Any], ri: Any, ci: Any, mm: te.ComputeOp,
                    cfg: ScheduleConfig) -> Any:
    """Order the tile loops of a product with run-time extents (module doc): the loops of
    static extent fused into one parallel loop, the loops of run-time extent inside it (or the
    first of those outermost and parallel, with ``parallel_rows``); the loop the register tile
    is computed at (the innermost tile loop) is returned."""
    static = [a for a in outer if static_extent(a.dom.extent) is not None]
    dynamic = [a for a in outer if static_extent(a.dom.extent) is None]
    least = int(cfg.get("parallel_min_flops", 1 << 18))
    if dynamic and (cfg.get("parallel_rows") or not static):
        sizes, kdim = _rep_sizes(mm)
        parallel = 2 * math.prod(sizes) * kdim >= least
        ws.reorder(*dynamic[:1], *static, *dynamic[1:], ri, ci)
        if parallel:
            ws.parallel(dynamic[0])
        loops = [*dynamic[:1], *static, *dynamic[1:]]
        return loops[-1]
    ws.reorder(*static, *dynamic, ri, ci)
    fused = ws.fuse(*static) if len(static) > 1 else static[0]
    # parallel where the product, at its run-time sizes, is worth a launch (specialize_tails)
    work: E.PrimExpr = E.IntImm(2, "int64")
    for extent in (*(a.dom.extent for a in mm.axis), mm.reduce_axis[0].dom.extent):
        work = work * extent
    ws.pragma(fused, PARALLEL_PRAGMA, (work, least))
    ws.parallel(fused)
    return dynamic[-1] if dynamic else fused


# -- tails of run-time extents -------------------------------------------------------------------

#: The ``For`` annotation (a TE pragma) that :func:`specialize_tails` acts on: ``(mode, tile)``
#: on a loop over ``ceil(n / tile)`` tiles of a run-time extent ``n``.
TAIL_PRAGMA = "tessera.dense_tail"
#: Marks the loops over run-time lanes that :class:`_HoistLanes` moves (removed by it).
_LANES = "tessera.dense_lanes"


#: Accumulator vectors a row tile of the tail keeps at least (two FMA units of four cycles'
#: latency stay busy with eight independent chains).
TAIL_ACCUMULATORS = 8


def tail_height(mr: int, vectors: int) -> int:
    """The rows of the tile that computes the last ``n % mr`` rows of a run-time row count:
    the fewest (a power of two) whose ``vectors`` column vectors per row give
    :data:`TAIL_ACCUMULATORS` accumulators; ``mr`` itself when that is not fewer (the
    power-of-two heights of :meth:`_Tails.rows` then)."""
    h = 1
    while h * max(vectors, 1) < TAIL_ACCUMULATORS:
        h *= 2
    return min(h, mr)


def specialize_tails(func: S.PrimFunc) -> S.PrimFunc:
    """Replace each tile loop the dense schedule marked (:data:`TAIL_PRAGMA`) over
    ``ceil(n / f)`` tiles of a run-time extent ``n`` by its ``n // f`` whole tiles (their guards
    always hold: the TIR pipeline drops them) and a last, partial tile without guards:

    * ``"rows"``: one copy of the tile per remainder ``r = n % f`` in ``1 .. f - 1``, chosen
      at run time (a switch), each computing exactly ``r`` rows: its row guards become
      ``row < r`` with ``r`` a constant, which unrolling decides. A tail of 7 rows is then the
      7-row micro-kernel of a static compile, not a 12-row one whose rows each test a guard
      on every step of the reduction.
    * ``"cols"``: where ``n >= f``, the last tile shifted back to end at ``n`` (its first
      columns computed twice, with the same values): whole vectors, no guard depending on a
      vector lane (which would make the vectorizer fall back to scalar code). Where
      ``n < f``, the one tile, guarded.

    Run on ``te.lower``'s loop nest, before the TIR pipeline; a marked loop of another shape
    (not from ``0``, an extent that is not ``(n + f - 1) // f``) keeps its guards. Functions
    without marks come back unchanged."""
    found: list[S.For] = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, S.For) and (
        TAIL_PRAGMA in n.annotations or PARALLEL_PRAGMA in n.annotations) else None)
    if not found:
        return func
    return func.with_body(_Tails(func).visit(func.body))


def _tile_count_of(extent: E.PrimExpr, f: int) -> E.PrimExpr | None:
    """``n`` where ``extent`` is ``(n + f - 1) // f``."""
    if isinstance(extent, E.FloorDiv) and isinstance(extent.b, E.IntImm) and \
            extent.b.value == f and isinstance(extent.a, E.Add) and \
            isinstance(extent.a.b, E.IntImm) and extent.a.b.value == f - 1:
        return extent.a.a
    return None


class _FreshAllocations(IRMutator):
    """A new Buffer for every buffer allocated inside a copied statement (copies must not
    allocate the same buffer: once hoisted, one would be nested in the other)."""

    def __init__(self) -> None:
        self.map: dict[int, Buffer] = {}

    def visit_Allocate(self, s: S.Allocate) -> S.Stmt:
        b = s.buffer
        self.map[id(b)] = Buffer(b.name, b.shape, b.dtype, strides=b.strides, scope=b.scope,
                                 elem_offset=b.elem_offset)
        return S.Allocate(self.map[id(b)], self.visit(s.body))

    def visit_BufferLoad(self, e: E.BufferLoad) -> E.PrimExpr:
        new = self.generic_visit(e)
        b = self.map.get(id(e.buffer))
        return E.BufferLoad(b, new.indices) if b is not None else new

    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        new = self.generic_visit(s)
        b = self.map.get(id(s.buffer))
        return S.BufferStore(b, new.value, new.indices) if b is not None else new


def fresh_copy(body: S.Stmt, vmap: dict[E.Var, Any]) -> S.Stmt:
    """``body`` with ``vmap`` substituted and every buffer it allocates a new one (a copy of a
    tile placed next to the original)."""
    return _FreshAllocations().visit(copy_with(body, vmap))


class _Conditions(IRMutator):
    """Rewrites each conjunct of ``if``/``select`` conditions that uses ``var`` (every one when
    ``var`` is None) with ``fn``;
    conjuncts that become true are dropped, an ``if`` whose condition becomes true is its
    body."""

    def __init__(self, var: E.Var | None, fn: Any) -> None:
        self.var, self.fn = var, fn

    def cond(self, c: E.PrimExpr) -> E.PrimExpr:
        parts = [self.fn(x) if self.var is None or uses_var(x, self.var) else x
                 for x in E.conjuncts(c)]
        return E.all_of(*(x for x in parts if not (isinstance(x, E.IntImm) and x.value == 1)))

    def visit_IfThenElse(self, s: S.IfThenElse) -> S.Stmt:
        c = self.cond(s.condition)
        then, other = self.visit(s.then_case), self.visit(s.else_case)
        if isinstance(c, E.IntImm):
            return then if c.value else (other or S.Evaluate(E.IntImm(0, "int32")))
        return S.IfThenElse(c, then, other)

    def visit_Select(self, e: E.Select) -> E.PrimExpr:
        return E.Select(self.cond(e.condition), self.visit(e.true_value),
                        self.visit(e.false_value))


def _upper_limit(cond: E.PrimExpr, var: E.Var) -> E.PrimExpr | None:
    """``k`` where the integer comparison ``cond`` is ``var < k`` (``k`` free of ``var``)."""
    if not isinstance(cond, E.LT | E.LE | E.GT | E.GE) or not E.is_int(cond.a.dtype) or \
            cond.a.lanes != 1:
        return None
    # as p < 0
    if isinstance(cond, E.LT | E.LE):
        p = to_poly(cond.a - cond.b)
    else:
        p = to_poly(cond.b - cond.a)
    if isinstance(cond, E.LE | E.GE):
        p.const -= 1
    key = None
    for k, (coef, atoms) in p.terms.items():
        if any(uses_var(a, var) for a in atoms):
            if key is not None or coef != 1 or len(atoms) != 1 or atoms[0] is not var:
                return None
            key = k
    if key is None:
        return None
    del p.terms[key]
    return to_poly(E.IntImm(0, var.dtype) - p.to_expr()).to_expr()


class _Shrink(IRMutator):
    """``for i in range(c): [for ...:] if i < k && rest: body`` (an ``if`` without ``else``
    that the loops lead to, nothing else in them) becomes ``for i in range(min(c, k)): [for
    ...:] if rest: body``: for a constant ``k`` (any loop), or (``vector_lanes``) for a
    vectorized loop and a run-time ``k``, which then runs serially (a vector needs a constant
    number of lanes)."""

    def __init__(self, vector_lanes: bool = False) -> None:
        self.vector_lanes = vector_lanes

    def visit_For(self, s: S.For) -> S.Stmt:
        s = self.generic_visit(s)
        if not isinstance(s.extent, E.IntImm) or not isinstance(s.min, E.IntImm) or \
                s.min.value != 0:
            return s
        runtime = self.vector_lanes and s.kind == S.ForKind.VECTORIZED
        chain: list[S.For] = [s]
        node = s.body
        while isinstance(node, S.For):
            chain.append(node)
            node = node.body
        if not isinstance(node, S.IfThenElse) or node.else_case is not None:
            return s
        parts = E.conjuncts(node.condition)
        inner_vars = [loop.loop_var for loop in chain[1:]]
        for x in parts:
            limit = _upper_limit(x, s.loop_var)
            if limit is not None and not any(uses_var(limit, v) for v in inner_vars) and \
                    (runtime or isinstance(limit, E.IntImm)):
                break
        else:
            return s
        rest = [y for y in parts if y is not x]
        inner: S.Stmt = node.then_case
        if rest:
            cond = rest[0]
            for y in rest[1:]:
                cond = E.And(cond, y)
            inner = S.IfThenElse(cond, inner)
        for loop in reversed(chain[1:]):
            inner = S.For(loop.loop_var, loop.min, loop.extent, loop.kind, inner,
                          loop.thread_tag, loop.annotations)
        kind = s.kind
        if isinstance(limit, E.IntImm):
            if limit.value <= 0:
                return S.Evaluate(E.IntImm(0, "int32"))
            extent: E.PrimExpr = E.IntImm(min(s.extent.value, limit.value), s.extent.dtype)
        else:
            extent = E.min_(s.extent, E.max_(limit, E.IntImm(0, limit.dtype)))
            kind = S.ForKind.SERIAL
            return S.For(s.loop_var, s.min, extent, kind, inner, s.thread_tag,
                         {**s.annotations, _LANES: True})
        return S.For(s.loop_var, s.min, extent, kind, inner, s.thread_tag, s.annotations)


def _has_tile_base(node: Any, var: E.Var, f: int) -> bool:
    found = False

    def visit(n: Any) -> None:
        nonlocal found
        found = found or (isinstance(n, E.Mul) and n.a is var and isinstance(n.b, E.IntImm)
                          and n.b.value == f)

    post_order_visit(node, visit)
    return found


class _ShiftColumns(IRMutator):
    """The last column tile moved back so that it ends at ``n``, in each index that holds its
    first column ``var * f``. With ``vectors`` (``nv``), the tile's first ``nv`` vectors
    only (the loops over its vectors cut to ``nv``), starting at ``B = max(n - nv * vec, 0)``:
    ``var * f`` becomes ``B`` and a vector's start ``x * vec`` becomes ``min(x * vec, n - vec -
    B)`` (the identity when ``n >= nv * vec``; for ``vec <= n < nv * vec`` the last vector
    ends at ``n``, overlapping the one before). Without (``nv`` None), the whole tile:
    ``var * f`` becomes ``n - f``. With ``base`` and ``rows`` (a row tile: ``rows`` of its
    rows from row ``base``, :meth:`_Tails.rows_tail`), ``var * f`` becomes ``base``; with
    ``clamp`` too, a row index ``var * f + x`` becomes ``min(base + x, n - 1)`` (a tile taller
    than the ``n`` rows there are: the rows past the last compute and store the last one
    again, with the same values; its accumulators keep a row each). Every guard conjunct on
    such an index holds then and is dropped. ``ok`` is False when ``var`` occurs otherwise
    (with ``clamp``, also in an index that is not a row's)."""

    def __init__(self, var: E.Var, f: int, n: E.PrimExpr, vec: int = 1,
                 nv: int | None = None, base: E.PrimExpr | None = None,
                 rows: int | None = None, clamp: bool = False) -> None:
        self.var, self.f, self.n, self.vec, self.nv, self.ok = var, f, n, vec, nv, True
        self.clamp = clamp
        #: the variables of the loops over the tile's vectors (``x`` of ``x * vec``)
        self.vector_vars: set[E.Var] = set()
        #: ``base`` and ``rows`` (rows of a tile, ``nv`` None): ``var * f`` becomes ``base``
        #: and the loops over the tile's rows (of extent ``f``, whose variable ``x`` an index
        #: holds as ``var * f + x``) run ``rows`` times; the caller makes sure those rows
        #: are below ``n``
        self.base, self.rows = base, rows
        self.row_vars: set[E.Var] = set()

    def _note_rows(self, e: E.PrimExpr) -> None:
        p = to_poly(e)
        step = next((coef for coef, atoms in p.terms.values()
                     if len(atoms) == 1 and atoms[0] is self.var), None)
        if step is None:
            return
        for coef, atoms in p.terms.values():
            if len(atoms) == 1 and isinstance(atoms[0], E.Var) and atoms[0] is not self.var \
                    and coef * self.f == step:
                self.row_vars.add(atoms[0])

    def index(self, e: E.PrimExpr) -> E.PrimExpr:
        if not _has_tile_base(e, self.var, self.f):
            return self.visit(e)
        f, vec, n, var, nv = self.f, self.vec, self.n, self.var, self.nv
        if self.rows is not None:
            self._note_rows(e)
        if self.base is not None:
            base = self.base
        else:
            base = n - f if nv is None else E.max_(n - nv * vec, E.IntImm(0, n.dtype))
        if self.clamp:
            row = self._row_of(e)
            if row is None:
                self.ok = False
                return e
            return E.min_(base + row, n - E.IntImm(1, n.dtype))

        def fn(x: E.PrimExpr) -> E.PrimExpr:
            if isinstance(x, E.Mul) and isinstance(x.b, E.IntImm):
                if x.a is var and x.b.value == f:
                    return base
                if nv is not None and isinstance(x.a, E.Var) and x.b.value == vec:
                    self.vector_vars.add(x.a)
                    return E.min_(x, n - vec - base)
            if isinstance(x, E.Var):
                if x is var:
                    self.ok = False
                return x
            return rebuild(x, fn)

        return fn(e)

    def _row_of(self, e: E.PrimExpr) -> E.Var | None:
        """``x`` where ``e`` is ``var * f + x`` (a row of the tile), else None."""
        p = to_poly(e)
        if p.const != 0 or len(p.terms) != 2:
            return None
        row = None
        for coef, atoms in p.terms.values():
            if len(atoms) != 1 or not isinstance(atoms[0], E.Var):
                return None
            if atoms[0] is self.var:
                if coef != self.f:
                    return None
            elif coef == 1 and atoms[0] in self.row_vars:
                row = atoms[0]
            else:
                return None
        return row

    def visit_For(self, s: S.For) -> S.Stmt:
        body = self.visit(s.body)
        mn, ext = self.visit(s.min), self.visit(s.extent)
        if self.nv is not None and s.loop_var in self.vector_vars and \
                isinstance(ext, E.IntImm) and ext.value > self.nv:
            ext = E.IntImm(self.nv, ext.dtype)
        if self.rows is not None and s.loop_var in self.row_vars and \
                isinstance(ext, E.IntImm) and ext.value == self.f:
            ext = E.IntImm(self.rows, ext.dtype)
        return S.For(s.loop_var, mn, ext, s.kind, body, s.thread_tag, s.annotations)

    def visit_Var(self, e: E.Var) -> E.PrimExpr:
        if e is self.var:
            self.ok = False
        return e

    def visit_BufferLoad(self, e: E.BufferLoad) -> E.PrimExpr:
        return E.BufferLoad(e.buffer, [self.index(i) for i in e.indices])

    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        return S.BufferStore(s.buffer, self.visit(s.value), [self.index(i) for i in s.indices])

    def _is_guard(self, x: E.PrimExpr) -> bool:
        """Whether the conjunct ``x`` is the tile's bound check, ``var * f + .. < n``, which
        holds wherever the moved tile is."""
        return isinstance(x, E.LT) and _has_tile_base(x.a, self.var, self.f) and \
            not _has_tile_base(x.b, self.var, self.f) and E.is_int(x.b.dtype) and \
            to_poly(x.b - self.n).is_const() and to_poly(x.b - self.n).const == 0

    def cond(self, c: E.PrimExpr) -> E.PrimExpr | None:
        # the bound checks are dropped; any other condition on the tile's rows or columns
        # (a causal mask fused into the epilogue: col <= row) is evaluated at the moved ones
        parts = [self.index(x) if _has_tile_base(x, self.var, self.f) else self.visit(x)
                 for x in E.conjuncts(c) if not self._is_guard(x)]
        return E.all_of(*parts) if parts else None

    def visit_IfThenElse(self, s: S.IfThenElse) -> S.Stmt:
        c = self.cond(s.condition)
        then, other = self.visit(s.then_case), self.visit(s.else_case)
        return then if c is None else S.IfThenElse(c, then, other)

    def visit_Select(self, e: E.Select) -> E.PrimExpr:
        c = self.cond(e.condition)
        t, f = self.visit(e.true_value), self.visit(e.false_value)
        return t if c is None else E.Select(c, t, f)


def _row_terms(indices: list[E.PrimExpr], row_vars: set[E.Var]) -> set[tuple[int, int]]:
    """(dimension, coefficient) of each variable of ``row_vars`` in ``indices``."""
    out: set[tuple[int, int]] = set()
    for dim, index in enumerate(indices):
        for coef, atoms in to_poly(index).terms.values():
            if len(atoms) == 1 and atoms[0] in row_vars:
                out.add((dim, coef))
    return out


def cut_accumulator_rows(tile: S.Stmt, row_vars: set[E.Var], f: int, rows: int) -> S.Stmt:
    """``tile`` (a copy of the register tile for ``rows < f`` of its ``f`` rows, whose loops
    over the rows of the operands, ``row_vars``, already run ``rows`` times) with every other
    loop of extent ``f`` that indexes a local accumulator as those rows do (its zeroing) cut
    to ``rows`` too: the rows past them are never read in this copy, and zeroing them kept
    the accumulator in memory (LLVM could not promote it to registers, and its LICM then
    spent a third of the kernel's optimisation on it)."""
    keys: set[tuple[int, int, int]] = set()

    def note(n: Any) -> None:
        if isinstance(n, E.BufferLoad | S.BufferStore) and n.buffer.scope == "local":
            keys.update((id(n.buffer), d, c) for d, c in _row_terms(list(n.indices), row_vars))

    post_order_visit(tile, note)
    if not keys:
        return tile

    class Cut(IRMutator):
        def visit_For(self, s: S.For) -> S.Stmt:
            body = self.visit(s.body)
            if isinstance(s.extent, E.IntImm) and s.extent.value == f and \
                    s.loop_var not in row_vars and self.indexes_rows(s.loop_var, body):
                return S.For(s.loop_var, s.min, E.IntImm(rows, s.extent.dtype), s.kind, body,
                             s.thread_tag, s.annotations)
            return s if body is s.body else S.For(s.loop_var, s.min, s.extent, s.kind, body,
                                                  s.thread_tag, s.annotations)

        @staticmethod
        def indexes_rows(v: E.Var, body: S.Stmt) -> bool:
            """Whether ``v`` occurs only in local accumulators' indices, each time where
            the rows do."""
            found, other = [False], [False]

            def look(n: Any) -> None:
                if isinstance(n, E.BufferLoad | S.BufferStore):
                    uses = _row_terms(list(n.indices), {v})
                    if uses and (n.buffer.scope != "local" or not all(
                            (id(n.buffer), d, c) in keys for d, c in uses)):
                        other[0] = True
                    found[0] = found[0] or bool(uses)
                elif isinstance(n, S.IfThenElse | E.Select) and uses_var(n.condition, v):
                    other[0] = True

            post_order_visit(body, look)
            return found[0] and not other[0]

    return Cut().visit(tile)


def _and(parts: list[E.PrimExpr]) -> E.PrimExpr | None:
    if not parts:
        return None
    out = parts[0]
    for x in parts[1:]:
        out = E.And(out, x)
    return out


class _PackPanel(IRMutator):
    """The register tile of a matrix narrower than a vector (``n < vec`` columns). The zeros
    of its accumulator go to every lane (a local tile: no guard). Its reduction nest ``for k:
    for i: for x: for lane (vectorized): if col < n && rest: acc[i, x*vec + lane] += a[.., i,
    k] * b[.., k, x*vec + lane]`` reads ``b`` from a local panel instead, zero-filled and then
    copied from ``b`` where ``col < n`` (``n`` elements per step of ``k``): the tile's vector
    code then needs no column guard and reads nothing past ``b``; the lanes past ``n``
    accumulate zeros that nobody stores. Applies where the loops over the panel (those the
    load of ``b`` uses) have constant extents."""

    def visit_For(self, s: S.For) -> S.Stmt:
        chain: list[S.For] = [s]
        node = s.body
        while isinstance(node, S.For):
            chain.append(node)
            node = node.body
        out = self.packed(chain, node) if len(chain) >= 2 else None
        return out if out is not None else rebuild(s, self.visit)

    def packed(self, chain: list[S.For], node: Any) -> S.Stmt | None:
        lane, k = chain[-1], chain[0]
        if lane.kind != S.ForKind.VECTORIZED or not isinstance(node, S.IfThenElse) or \
                node.else_case is not None or not isinstance(node.then_case, S.BufferStore):
            return None
        store = node.then_case
        if store.buffer.scope != "local":
            return None
        guards = [c for c in E.conjuncts(node.condition) if uses_var(c, lane.loop_var)]
        rest = [c for c in E.conjuncts(node.condition) if not uses_var(c, lane.loop_var)]
        if not any(x.buffer.scope != "local" for x in nodes_of(store.value, E.BufferLoad)):
            # the accumulator's zeros: every lane (the tile is local), no guard
            inner: S.Stmt = store
            if rest:
                inner = S.IfThenElse(_and(rest), store)  # type: ignore[arg-type]
            for f in reversed(chain):
                inner = S.For(f.loop_var, f.min, f.extent, f.kind, inner, f.thread_tag,
                              f.annotations)
            return inner
        loads = [x for x in nodes_of(store.value, E.BufferLoad)
                 if x.buffer.scope != "local" and uses_var(x.indices[-1], lane.loop_var)]
        if len(loads) != 1 or not uses_var(loads[0], k.loop_var):
            return None
        load = loads[0]
        loops = [f for f in chain if uses_var(load, f.loop_var)]
        if not all(isinstance(f.extent, E.IntImm) and isinstance(f.min, E.IntImm)
                   and f.min.value == 0 for f in loops):
            return None
        panel = Buffer(f"{load.buffer.name}_panel", [f.extent for f in loops], load.buffer.dtype,
                       scope="local")

        def nest(body_of: Any) -> S.Stmt:
            fresh = {f.loop_var: E.Var(f.loop_var.name, f.loop_var.dtype) for f in loops}
            inner = body_of([fresh[f.loop_var] for f in loops], fresh)
            for f in reversed(loops):
                kind = f.kind if f is lane or f.kind == S.ForKind.UNROLLED else S.ForKind.SERIAL
                inner = S.For(fresh[f.loop_var], 0, f.extent, kind, inner)
            return inner

        zero = nest(lambda ix, _: S.BufferStore(panel, E.FloatImm(0.0, panel.dtype), ix))
        copy = nest(lambda ix, fresh: S.IfThenElse(
            substitute(_and(guards), fresh),
            S.BufferStore(panel, substitute(load, fresh), ix)))
        read = E.BufferLoad(panel, [f.loop_var for f in loops])
        value = _ReplaceNode(load, read).visit(store.value)
        inner = S.BufferStore(store.buffer, value, store.indices)
        cond = _and(rest)
        if cond is not None:
            inner = S.IfThenElse(cond, inner)
        for f in reversed(chain):
            inner = S.For(f.loop_var, f.min, f.extent, f.kind, inner, f.thread_tag,
                          f.annotations)
        return S.Allocate(panel, S.seq(zero, _Shrink(vector_lanes=True).visit(copy), inner))


class _CutLoops(IRMutator):
    """The loops over ``loop_vars`` cut to at most ``count`` iterations."""

    def __init__(self, loop_vars: set[E.Var], count: int) -> None:
        self.loop_vars, self.count = loop_vars, count

    def visit_For(self, s: S.For) -> S.Stmt:
        body = self.visit(s.body)
        ext = s.extent
        if s.loop_var in self.loop_vars and isinstance(ext, E.IntImm) and ext.value > self.count:
            ext = E.IntImm(self.count, ext.dtype)
        return S.For(s.loop_var, s.min, ext, s.kind, body, s.thread_tag, s.annotations)


class _ReplaceNode(IRMutator):
    """Replaces one node (by identity)."""

    def __init__(self, old: Any, new: Any) -> None:
        self.old, self.new = old, new

    def visit(self, node: Any) -> Any:
        return self.new if node is self.old else super().visit(node)


class _HoistLanes(IRMutator):
    """In a perfect loop nest ending in a store (or a guarded one), the loops :class:`_Shrink`
    made serial (run-time lanes), with the loops their extents use, moved outermost: ``for k:
    for i: for j in range(n): acc[i, j] += ..`` becomes ``for j in range(n): for k: for i:
    ..``, so that the run-time loop is entered once per column rather than once per row and
    step of ``k`` (the accumulator of a column then stays in a register over ``k``)."""

    def visit_For(self, s: S.For) -> S.Stmt:
        chain: list[S.For] = [s]
        node = s.body
        while isinstance(node, S.For):
            chain.append(node)
            node = node.body
        marked = [loop for loop in chain if loop.annotations.get(_LANES)]
        store = node.then_case if isinstance(node, S.IfThenElse) and node.else_case is None \
            else node
        if not marked or not isinstance(store, S.BufferStore):
            return rebuild(s, self.visit)
        front: list[S.For] = []
        for loop in chain:
            if loop in marked or any(uses_var(m.extent, loop.loop_var) for m in marked):
                front.append(loop)
        order = front + [loop for loop in chain if loop not in front]
        inner: S.Stmt = node
        for loop in reversed(order):
            inner = S.For(loop.loop_var, loop.min, loop.extent, loop.kind, inner,
                          loop.thread_tag, {k: v for k, v in loop.annotations.items()
                                            if k != _LANES})
        return inner


def _cancel(c: E.PrimExpr) -> E.PrimExpr:
    """An integer comparison ``a < b`` (``<=``, ``>``, ``>=``) as ``a - b`` with like terms
    collected on the left and its constant on the right (``q*12 + i < q*12 + 7`` is
    ``i < 7``); a comparison that becomes constant is decided."""
    ops = {E.LT: lambda x, y: x < y, E.LE: lambda x, y: x <= y,
           E.GT: lambda x, y: x > y, E.GE: lambda x, y: x >= y}
    op = ops.get(type(c))
    if op is None or not E.is_int(c.a.dtype) or c.a.lanes != 1:
        return c
    p = to_poly(c.a - c.b)
    k = p.const
    p.const = 0
    if p.is_const():
        return E.IntImm(int(op(0, -k)), "bool")
    return type(c)(p.to_expr(), E.IntImm(-k, c.a.dtype))


class _Tails(IRMutator):
    def __init__(self, func: S.PrimFunc) -> None:
        self.size_vars = list(func.size_vars)

    def visit_For(self, s: S.For) -> S.Stmt:
        spec = s.annotations.get(TAIL_PRAGMA)
        body = self.visit(s.body)  # inner marked loops first: their forms are copied along
        notes = {k: v for k, v in s.annotations.items()
                 if k not in (TAIL_PRAGMA, PARALLEL_PRAGMA)}
        gate = s.annotations.get(PARALLEL_PRAGMA)
        if gate is not None:
            return self.gated(S.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag,
                                    notes), *gate)
        loop = S.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, notes)
        if spec is None:
            return loop if body is not s.body or notes != s.annotations else s
        mode, f = spec[0], spec[1]
        n = _tile_count_of(s.extent, f)
        if n is None or not (isinstance(s.min, E.IntImm) and s.min.value == 0):
            return loop
        if mode == "rows":
            height = int(spec[2]) if len(spec) > 2 else f
            rows = self.rows(s, body, n, f, notes) if height >= f else \
                self.short_rows(s, body, n, f, notes, height)
            if rows is not None:
                return rows
            tail = self.exact_rows_tail(s.loop_var, body, n, f)
        elif mode == "cols":
            tail = self.cols_tail(s.loop_var, body, n, f, int(spec[2]) if len(spec) > 2 else 1)
        else:
            return loop
        whole = S.For(s.loop_var, 0, E.FloorDiv(n, E.IntImm(f, n.dtype)), s.kind, body,
                      s.thread_tag, notes)
        return S.seq(whole, tail)

    def gated(self, s: S.For, work: E.PrimExpr, least: int) -> S.Stmt:
        """The parallel loop ``s`` with a grain chosen at run time (its ``parallel_grain``
        annotation, an expression of the sizes): the loop's own grain where ``work >= least``,
        else :data:`SERIAL_GRAIN` (one task, which the thread pool runs in the calling thread
        without waking a worker). The loop and its variable stay as they are, so its index
        expressions keep their ranges (``b`` in ``range(batch)``, not ``p * c + t`` with a
        chunk ``c`` known only at run time, which no bound of the simplifier relates to
        ``batch``)."""
        if s.kind != S.ForKind.PARALLEL or not E.is_int(s.extent.dtype):
            return s
        smallest = substitute(work, {v: 1 for v in self.size_vars})
        smallest = to_poly(smallest).to_expr() if E.is_int(smallest.dtype) else smallest
        if isinstance(smallest, E.IntImm) and smallest.value >= least:
            return s  # worth a launch at every size
        grain = int(s.annotations.get("parallel_grain", 1) or 1)
        chosen = E.Select(E.GE(work, E.IntImm(least, work.dtype)), E.IntImm(grain, "int64"),
                          E.IntImm(SERIAL_GRAIN, "int64"))
        return S.For(s.loop_var, s.min, s.extent, s.kind, s.body, s.thread_tag,
                     {**s.annotations, "parallel_grain": chosen})

    def rows(self, s: S.For, body: S.Stmt, n: E.PrimExpr, f: int,
             notes: dict[str, Any]) -> S.Stmt | None:
        """The loop ``s`` over the ``ceil(n / f)`` row tiles of a run-time extent ``n``, in
        few copies of the tile, none guarded: the ``n // f`` whole tiles, then the ``r = n %
        f`` rows left in at most two tiles of ``h`` rows (``h`` a power of two): the largest
        not above ``r`` where the whole tiles end, then, for the ``m`` rows left, the smallest
        not below ``m``, ending at ``n`` (11 rows: 8, then 4 of which one is computed again,
        with the same value). That is ``1 + log2(f)`` copies where one per remainder
        (:meth:`exact_rows_tail`, kept where the tile index occurs otherwise than as its
        first row: None here) were ``f``: a product whose rows and columns both have run-time
        sizes had 48 copies of its micro-kernel, and a symbolic encoder's compile spent most
        of its time in LLVM optimising them. (Shifting the whole last tile back instead
        computes up to ``f - 1`` rows twice: 24 rows for 13.)"""
        v, idx = s.loop_var, n.dtype

        def const(x: int) -> E.PrimExpr:
            return E.IntImm(x, idx)

        heights = [1 << i for i in range(max(f - 1, 1).bit_length()) if 1 << i < f]
        whole = S.For(v, 0, E.FloorDiv(n, const(f)), s.kind, body, s.thread_tag, notes)
        if not heights:  # one-row tiles: no tile is partial
            return whole

        def pick(m: E.PrimExpr, up: bool) -> E.PrimExpr:
            # the largest height <= m (up: the smallest >= m), for 1 <= m < f
            order = heights if up else heights[::-1]
            out: E.PrimExpr = const(order[-1])
            for h in order[-2::-1]:
                out = E.Select(E.LE(m, const(h)) if up else E.GE(m, const(h)), const(h), out)
            return out

        t = E.Var(f"{v.name}_part", v.dtype)
        rem, first = E.Var(f"{v.name}_rem", idx), E.Var(f"{v.name}_first", idx)
        left, second = E.Var(f"{v.name}_left", idx), E.Var(f"{v.name}_second", idx)
        height, base = E.Var(f"{v.name}_rows", idx), E.Var(f"{v.name}_base", idx)
        chain: S.Stmt | None = None
        for h in heights:
            part = _ShiftColumns(v, f, n, base=base, rows=h)
            tile = part.visit(body)
            if not part.ok:
                return None
            tile = cut_accumulator_rows(tile, part.row_vars, f, h)
            chain = fresh_copy(tile, {}) if chain is None else S.IfThenElse(
                E.EQ(height, const(h)), fresh_copy(tile, {}), chain)
        assert chain is not None
        is_first = E.EQ(t, E.IntImm(0, t.dtype))
        body_t = S.LetStmt(height, E.Select(is_first, first, second), S.LetStmt(
            base, E.Select(is_first, n - rem, n - second), chain))
        count = E.Select(E.GT(left, const(0)), E.IntImm(2, t.dtype), E.IntImm(1, t.dtype))
        tail = S.LetStmt(first, pick(rem, up=False), S.LetStmt(
            left, rem - first, S.LetStmt(second, pick(E.max_(left, const(1)), up=True),
                                         S.For(t, 0, count, S.ForKind.SERIAL, body_t))))
        tail = S.LetStmt(rem, E.FloorMod(n, const(f)),
                         S.IfThenElse(E.GT(rem, const(0)), tail))
        return S.seq(whole, tail)

    def short_rows(self, s: S.For, body: S.Stmt, n: E.PrimExpr, f: int,
                   notes: dict[str, Any], h: int) -> S.Stmt | None:
        """The loop ``s`` over the ``ceil(n / f)`` row tiles of a run-time extent ``n`` in
        three copies of the tile, none guarded: the ``n // f`` whole tiles of ``f`` rows, then
        the ``r = n % f`` rows left in ``ceil(r / h)`` tiles of ``h < f`` rows, the last one
        shifted back to end at ``n`` (at most ``h - 1`` rows computed again, with the same
        values), or, where ``n < h``, one tile of ``h`` rows whose rows past ``n - 1`` read
        and write row ``n - 1`` again (one row at a time where an index is not a plain row).
        ``h`` keeps enough accumulators for the FMA units (:func:`tail_height`), at every
        size; the copies are ``2 h + f`` rows of code where
        :meth:`rows`' power-of-two heights are about ``2 f``, which a symbolic encoder's
        compile spends most of its LLVM time on. None where the tile index occurs otherwise
        than as its first row."""
        v, idx = s.loop_var, n.dtype

        def const(x: int) -> E.PrimExpr:
            return E.IntImm(x, idx)

        rem = E.Var(f"{v.name}_rem", idx)
        base_h, base_1 = E.Var(f"{v.name}_base", idx), E.Var(f"{v.name}_row", idx)
        tall = _ShiftColumns(v, f, n, base=base_h, rows=h)
        tile_h = tall.visit(body)
        if not tall.ok:
            return None
        tile_h = cut_accumulator_rows(tile_h, tall.row_vars, f, h)
        t, u = E.Var(f"{v.name}_part", v.dtype), E.Var(f"{v.name}_one", v.dtype)
        start = n - rem
        tiles = S.For(t, 0, E.FloorDiv(rem + const(h - 1), const(h)), S.ForKind.SERIAL,
                      S.LetStmt(base_h, E.min_(start + t * const(h), n - const(h)),
                                fresh_copy(tile_h, {})))
        # n < h: the tile of h rows from row 0, its rows past n - 1 clamped to it (h
        # accumulator chains: one row at a time kept one or two, and a language model's
        # head at 7 tokens ran at 2.4x its static time)
        clamped = _ShiftColumns(v, f, n, base=const(0), rows=h, clamp=True)
        tile_c = clamped.visit(body)
        singles: S.Stmt
        if clamped.ok:
            singles = fresh_copy(cut_accumulator_rows(tile_c, clamped.row_vars, f, h), {})
        else:
            one = _ShiftColumns(v, f, n, base=base_1, rows=1)
            tile_1 = one.visit(body)
            if not one.ok:
                return None
            tile_1 = cut_accumulator_rows(tile_1, one.row_vars, f, 1)
            singles = S.For(u, 0, rem, S.ForKind.SERIAL,
                            S.LetStmt(base_1, start + u, fresh_copy(tile_1, {})))
        tail = S.LetStmt(rem, E.FloorMod(n, const(f)), S.IfThenElse(
            E.GT(rem, const(0)), S.IfThenElse(E.GE(n, const(h)), tiles, singles)))
        whole = S.For(v, 0, E.FloorDiv(n, const(f)), s.kind, body, s.thread_tag, notes)
        return S.seq(whole, tail)

    def exact_rows_tail(self, v: E.Var, body: S.Stmt, n: E.PrimExpr, f: int) -> S.Stmt:
        """The last tile of ``n % f`` rows: one copy per remainder ``r``, in which ``n`` is
        ``q * f + r`` (``q = n // f``, the tile's index): each guard on the tile's rows,
        ``q * f + i < n``, is rewritten as ``q * f + i - n + (n - q * f - r) < 0``, which
        collects to ``i < r``."""
        q = E.Var(f"{v.name}_last", v.dtype)
        rem = E.FloorMod(n, E.IntImm(f, n.dtype))
        chain: S.Stmt | None = None
        for r in range(f - 1, 0, -1):
            zero = n - (q * f + r)  # zero where this copy runs

            def fix(c: E.PrimExpr, zero: E.PrimExpr = zero) -> E.PrimExpr:
                if not isinstance(c, E.LT | E.LE | E.GT | E.GE) or not E.is_int(c.a.dtype):
                    return c
                return _cancel(type(c)(c.a - c.b + zero, E.IntImm(0, c.a.dtype)))

            copy = _Shrink().visit(_Conditions(q, fix).visit(fresh_copy(body, {v: q})))
            chain = S.IfThenElse(E.EQ(rem, E.IntImm(r, n.dtype)), copy, chain)
        assert chain is not None
        return S.LetStmt(q, E.FloorDiv(n, E.IntImm(f, n.dtype)), chain)

    def cols_tail(self, v: E.Var, body: S.Stmt, n: E.PrimExpr, f: int, vec: int) -> S.Stmt:
        """The last, partial tile of ``r = n % f`` columns: its first ``ceil(r / vec)``
        vectors, shifted back to end at ``n`` (a switch over the count; for ``vec <= n < f``
        the vectors start at 0, the last one shifted back; a tile of two vectors has one
        form, both vectors, which computes one vector again where ``r <= vec``); for
        ``n < vec``, one vector of a
        zero-padded local copy of ``b`` (:class:`_PackPanel`), ``n`` columns stored. Vectors
        of ``vec`` lanes; with scalar columns (``vec`` 1), the tile shifted back for ``n >=
        f``, the guarded tile otherwise."""
        rem = E.FloorMod(n, E.IntImm(f, n.dtype))
        idx = n.dtype

        def last_tile() -> S.Stmt:
            return S.IfThenElse(E.NE(rem, E.IntImm(0, idx)),
                                fresh_copy(body, {v: E.FloorDiv(n, E.IntImm(f, idx))}))

        # n < vec: the tile's first vector only (its other vectors would hold no column)
        probe = _ShiftColumns(v, f, n, vec, 1)
        probe.visit(body)
        first = _CutLoops(probe.vector_vars, 1).visit(body) if vec > 1 else body
        small = _HoistLanes().visit(_Shrink(vector_lanes=True).visit(_PackPanel().visit(
            fresh_copy(first, {v: E.IntImm(0, v.dtype)}))))
        if vec <= 1 or f % vec:
            shift = _ShiftColumns(v, f, n)
            shifted = shift.visit(body)
            if not shift.ok:  # the tile index is used otherwise: the partial tile guarded
                return last_tile()
            return S.IfThenElse(E.NE(rem, E.IntImm(0, idx)), S.IfThenElse(
                E.GE(n, E.IntImm(f, idx)), fresh_copy(shifted, {}), small))
        chain: S.Stmt | None = None
        # two vectors or fewer: one form (at most one vector computed again, not a copy of
        # the tile per vector count)
        counts = [f // vec] if f // vec <= 2 else range(f // vec, 0, -1)
        for nv in counts:
            shift = _ShiftColumns(v, f, n, vec, nv)
            shifted = shift.visit(body)
            if not shift.ok:
                return last_tile()
            if chain is None:
                chain = fresh_copy(shifted, {})
            else:
                chain = S.IfThenElse(E.LE(rem, E.IntImm(nv * vec, idx)), fresh_copy(shifted, {}),
                                     chain)
        assert chain is not None
        return S.IfThenElse(E.NE(rem, E.IntImm(0, idx)), S.IfThenElse(
            E.GE(n, E.IntImm(vec, idx)), chain, small))
