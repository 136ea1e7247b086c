"""Features of a lowered loop nest, for the tuners' cost models (AutoTVM's itervar features).

:func:`loop_features` reads a lowered TIR :class:`~tessera.tir.PrimFunc` (any backend's:
CPU loop nests with parallel loops and vector ramps, GPU ones with thread-bound loops) and
returns a fixed-length vector of floats, the same length for every function
(:data:`FEATURE_NAMES` names each entry). Two configs of a schedule template whose knob values
look alike can lower to very different loop nests (a tile that divides the extent or not, a
vectorized or a scalar innermost loop); these features let a cost model see that.

What is read. The *main body* is the body of the innermost loop that does most of the work:
the statements directly under one loop (or under no loop), grouped by that loop, each group
weighted by its trip count times its floating-point operations (plus one per store); the
heaviest group wins (the first on ties). Its enclosing loops, innermost first, are the
*innermost loops* (up to :data:`K_LOOPS`). Loops of extent 1 are no loops and are skipped.
Backends featurise the loop nest ``te.lower`` makes of a schedule, before the TIR pipeline
(loops still marked vectorized or unrolled, buffers multi-dimensional), which is several
times cheaper to make than the fully lowered function; both forms are read alike (vector
ramps and broadcasts of a lowered function count by their lanes).

Features, in order (every count or size is scaled by ``log2(1 + x)``; flags are 0 or 1):

* ``loop{k}_*`` for k = 0 (innermost) .. K_LOOPS-1, zero when there are fewer loops:
  ``extent`` (scaled), ``serial``/``parallel``/``vectorized``/``unrolled``/``thread`` (a
  one-hot of the loop's kind), ``depth`` (scaled nesting depth, 1 for an outermost loop).
* ``par_extent``, ``par_depth``: the outermost parallel or thread-bound loop around the main
  body (scaled extent and depth, 0 without one); ``par_total``: the product of the extents
  of every parallel or thread-bound loop around it (scaled); ``par_loops``: how many parallel
  or thread-bound loops the function has (scaled).
* ``buf{b}_*`` for the :data:`N_BUFFERS` buffers the main body accesses (stored ones first in
  the order of their first store, then loaded ones by decreasing bytes accessed per
  execution of the body, then by name; zero for missing slots):
  ``step{k}``: bytes the address moves per iteration of innermost loop k (scaled; 0: the
  access does not move with that loop, so it is reused; -1: the index is not linear in the
  loop variable), from the first access to the buffer in the body;
  ``touch{k}``: bytes touched during one iteration of innermost loop k (the body's distinct
  accesses to the buffer, each of its vector width, times the extents of the loops inside k
  that move the address; scaled);
  ``accesses``: distinct accesses in the body (scaled); ``width``: bytes per access (scaled);
  ``contiguous``: the access is a unit-stride vector, or a scalar that moves one element per
  iteration of the innermost loop; ``invariant``: it does not move with the vector lanes or
  the innermost loop (a broadcast); ``local``/``shared``: the buffer's scope; ``stored``: the
  body stores to it.
* Main body operation counts, each counted once per vector lane (scaled): ``fma`` (a float
  multiply feeding an add or subtract, or an ``fma`` call), ``fadd``, ``fmul``, ``fother``
  (other float arithmetic, min/max, selects and calls), ``int_ops`` (integer arithmetic,
  address computation included), ``loads``, ``stores``, ``load_bytes``, ``store_bytes``
  (per execution of the body), ``branches`` (ifs and selects), ``lanes`` (the widest vector:
  a vector expression's lanes or a vectorized loop's extent).
* Whole function: ``trip`` (executions of the main body), ``flops`` (every store's float
  operations times its trip count; a fused multiply-add counts two), ``bytes`` (bytes loaded
  and stored, times trip counts), ``intensity`` (flops per byte), ``nests`` (top-level loop
  nests), ``loops`` (every loop), ``max_depth``, ``global_alloc``, ``local_alloc``,
  ``shared_alloc`` (bytes allocated in each scope: workspace, registers or stack, GPU shared
  memory), ``allocs`` (allocations).

A symbolic function (run-time extents) is featurised at representative sizes: each size
variable at the upper bound of its range, or at :data:`REPRESENTATIVE_SIZE` (at least its
lower bound) when it has none; extents, strides and allocation sizes are evaluated there. A
loop extent that is still not a constant counts as its upper bound when one is known, else as
1.
Float work inside ``LetStmt`` values is not counted; loop-invariant values bound by lets are
substituted into indices before strides are read. The result is deterministic: it depends
only on the function's structure, never on object identities or dict order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.arith import const_int_bound, linear_in, struct_key
from tessera.tir.functor import children, substitute
from tessera.tir.simplify import simplify

__all__ = ["FEATURE_NAMES", "K_LOOPS", "N_BUFFERS", "REPRESENTATIVE_SIZE", "loop_features",
           "representative_sizes"]

#: The value a size variable without an upper bound takes when a symbolic function is
#: featurised.
REPRESENTATIVE_SIZE = 256

#: Innermost loops described one by one.
K_LOOPS = 4
#: Buffers of the main body described one by one.
N_BUFFERS = 3

_KINDS = (S.ForKind.SERIAL, S.ForKind.PARALLEL, S.ForKind.VECTORIZED, S.ForKind.UNROLLED,
          S.ForKind.THREAD_BINDING)
_KIND_NAMES = ("serial", "parallel", "vectorized", "unrolled", "thread")
_OPS = ("fma", "fadd", "fmul", "fother", "int_ops", "loads", "stores", "load_bytes",
        "store_bytes", "branches", "lanes")
_FUNC = ("trip", "flops", "bytes", "intensity", "nests", "loops", "max_depth", "global_alloc",
         "local_alloc", "shared_alloc", "allocs")
_BUF_FLAGS = ("accesses", "width", "contiguous", "invariant", "local", "shared", "stored")


def _names() -> list[str]:
    names: list[str] = []
    for k in range(K_LOOPS):
        names += [f"loop{k}_extent", *(f"loop{k}_{n}" for n in _KIND_NAMES), f"loop{k}_depth"]
    names += ["par_extent", "par_depth", "par_total", "par_loops"]
    for b in range(N_BUFFERS):
        names += [f"buf{b}_step{k}" for k in range(K_LOOPS)]
        names += [f"buf{b}_touch{k}" for k in range(K_LOOPS)]
        names += [f"buf{b}_{n}" for n in _BUF_FLAGS]
    return names + list(_OPS) + list(_FUNC)


#: The name of each entry of :func:`loop_features`' vector (module doc).
FEATURE_NAMES: tuple[str, ...] = tuple(_names())


def _log(x: float) -> float:
    return math.log2(1.0 + max(x, 0.0))


def _nbytes(dtype: str) -> int:
    return max(E.bits(dtype) // 8, 1)


#: Size variable -> the constant it is featurised at.
_Sizes = dict[E.Var, E.PrimExpr]


def _at_sizes(e: E.PrimExpr, sizes: _Sizes | None) -> E.PrimExpr:
    """``e`` with the size variables replaced by their representative values, simplified."""
    if isinstance(e, E.IntImm) or not sizes:
        return e
    return simplify(substitute(e, sizes))


def _extent(e: E.PrimExpr, sizes: _Sizes | None = None) -> int:
    e = _at_sizes(e, sizes)
    if isinstance(e, E.IntImm):
        return max(e.value, 0)
    hi = const_int_bound(e)[1]
    return max(hi, 1) if hi is not None else 1


def _elements(buf: Any, sizes: _Sizes | None) -> int | None:
    """Elements of ``buf`` (at the representative sizes), or None when not a constant."""
    total = 1
    for d in buf.shape:
        c = _at_sizes(d, sizes)
        if not isinstance(c, E.IntImm):
            return None
        total *= max(c.value, 0)
    return total


def representative_sizes(func: S.PrimFunc) -> dict[E.Var, E.PrimExpr]:
    """The constant each size variable of ``func`` is featurised at (module doc)."""
    out: dict[E.Var, E.PrimExpr] = {}
    for v, (lo, hi) in func.var_bounds().items():
        value = hi if hi is not None else max(lo or 0, REPRESENTATIVE_SIZE)
        out[v] = E.IntImm(value, v.dtype)
    return out


@dataclass
class _Loop:
    var: E.Var
    extent: int
    kind: S.ForKind
    depth: int


@dataclass
class _Access:
    buffer: Any
    indices: tuple[E.PrimExpr, ...]
    lanes: int
    store: bool
    lets: dict[E.Var, E.PrimExpr]


@dataclass
class _Ops:
    """Operation counts of statements (per vector lane) and the buffer accesses they make."""

    counts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(_OPS, 0.0))
    accesses: list[_Access] = field(default_factory=list)

    def flops(self) -> float:
        c = self.counts
        return 2 * c["fma"] + c["fadd"] + c["fmul"] + c["fother"]

    def expr(self, e: Any, lets: dict[E.Var, E.PrimExpr]) -> None:
        if not isinstance(e, E.PrimExpr):
            return
        c = self.counts
        lanes = float(e.lanes)
        c["lanes"] = max(c["lanes"], lanes)
        fl = E.is_float(e.dtype)
        if isinstance(e, E.Add | E.Sub) and fl:
            mul = next((x for x in (e.a, e.b) if isinstance(x, E.Mul) and E.is_float(x.dtype)),
                       None)
            if mul is not None:
                c["fma"] += lanes
                other = e.b if mul is e.a else e.a
                for x in (mul.a, mul.b, other):
                    self.expr(x, lets)
                return
            c["fadd"] += lanes
        elif isinstance(e, E.Mul) and fl:
            c["fmul"] += lanes
        elif isinstance(e, E.Call) and e.name == "fma":
            c["fma"] += lanes
        elif isinstance(e, E.BinaryOp) and fl or isinstance(e, E.Call):
            c["fother"] += lanes
        elif isinstance(e, E.Select):
            c["branches"] += 1
            if fl:
                c["fother"] += lanes
        elif isinstance(e, E.BinaryOp):
            c["int_ops"] += lanes
        elif isinstance(e, E.BufferLoad):
            c["loads"] += 1
            c["load_bytes"] += lanes * _nbytes(e.dtype)
            self.accesses.append(_Access(e.buffer, e.indices, e.lanes, False, lets))
        for child in children(e):  # a Let's variable adds nothing
            self.expr(child, lets)

    def store(self, s: S.BufferStore, lets: dict[E.Var, E.PrimExpr]) -> None:
        lanes = max((i.lanes for i in s.indices), default=1)
        self.counts["stores"] += 1
        self.counts["store_bytes"] += lanes * _nbytes(s.buffer.dtype)
        self.accesses.append(_Access(s.buffer, s.indices, lanes, True, lets))
        self.expr(s.value, lets)
        for i in s.indices:
            self.expr(i, lets)


@dataclass
class _Group:
    """The statements directly under one loop (or under none)."""

    stack: tuple[_Loop, ...]
    ops: _Ops = field(default_factory=_Ops)
    trip: int = 1


@dataclass
class _Walk:
    groups: dict[int, _Group] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)
    flops: float = 0.0
    bytes: float = 0.0
    nests: int = 0
    loops: int = 0
    par_loops: int = 0
    max_depth: int = 0
    alloc: dict[str, float] = field(default_factory=lambda: {"global": 0.0, "local": 0.0,
                                                             "shared": 0.0})
    allocs: int = 0
    sizes: _Sizes = field(default_factory=dict)

    def group(self, stack: tuple[_Loop, ...], loop: S.For | None) -> _Group:
        key = id(loop)
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = _Group(stack, trip=math.prod(x.extent for x in stack))
            self.order.append(key)
        return g

    def stmt(self, s: Any, stack: tuple[_Loop, ...], loop: S.For | None,
             lets: dict[E.Var, E.PrimExpr]) -> None:
        if isinstance(s, S.For) and _extent(s.extent, self.sizes) == 1:  # no loop at all
            self.stmt(s.body, stack, loop, lets)
        elif isinstance(s, S.For):
            self.loops += 1
            self.nests += int(not stack)
            if s.kind in (S.ForKind.PARALLEL, S.ForKind.THREAD_BINDING):
                self.par_loops += 1
            inner = (*stack, _Loop(s.loop_var, _extent(s.extent, self.sizes), s.kind,
                                   len(stack) + 1))
            self.max_depth = max(self.max_depth, len(inner))
            self.stmt(s.body, inner, s, lets)
        elif isinstance(s, S.SeqStmt):
            for x in s.seq:
                self.stmt(x, stack, loop, lets)
        elif isinstance(s, S.LetStmt):
            value = substitute(s.value, lets) if lets else s.value
            self.stmt(s.body, stack, loop, {**lets, s.var: value})
        elif isinstance(s, S.Allocate):
            self.allocs += 1
            scope = s.buffer.scope if s.buffer.scope in self.alloc else "global"
            elems = _elements(s.buffer, self.sizes)
            if elems is not None:  # else a dimension that is not a constant
                self.alloc[scope] += elems * _nbytes(s.buffer.dtype)
            self.stmt(s.body, stack, loop, lets)
        elif isinstance(s, S.IfThenElse):
            g = self.group(stack, loop)
            g.ops.counts["branches"] += 1
            g.ops.expr(s.condition, lets)
            self.stmt(s.then_case, stack, loop, lets)
            if s.else_case is not None:
                self.stmt(s.else_case, stack, loop, lets)
        elif isinstance(s, S.BufferStore | S.Evaluate):
            g = self.group(stack, loop)
            before = g.ops.flops(), g.ops.counts["load_bytes"] + g.ops.counts["store_bytes"]
            if isinstance(s, S.BufferStore):
                g.ops.store(s, lets)
            else:
                g.ops.expr(s.value, lets)
            after = g.ops.flops(), g.ops.counts["load_bytes"] + g.ops.counts["store_bytes"]
            self.flops += (after[0] - before[0]) * g.trip
            self.bytes += (after[1] - before[1]) * g.trip


def _const_int(e: E.PrimExpr, sizes: _Sizes | None = None) -> int | None:
    if not isinstance(e, E.IntImm):
        e = simplify(substitute(e, sizes) if sizes else e)
    return e.value if isinstance(e, E.IntImm) else None


def _flat_index(access: _Access,
                sizes: _Sizes | None = None) -> tuple[E.PrimExpr, int | None] | None:
    """The access as (scalar index of its first element, in elements; its vector lanes'
    element stride: None for a scalar access, -1 when not a constant), or None when the
    buffer's strides are not constants."""
    buf = access.buffer
    strides = buf.strides if buf.strides is not None else buf.row_major_strides()
    base: E.PrimExpr = E.IntImm(0)
    vstride: int | None = None
    for idx, st in zip(access.indices, strides):
        st_c = _const_int(st, sizes)
        if st_c is None:
            return None
        if access.lets:
            idx = substitute(idx, access.lets)
        if isinstance(idx, E.Ramp):
            rs = _const_int(idx.stride, sizes)
            vstride = -1 if rs is None else rs * st_c
            idx = idx.base
        elif isinstance(idx, E.Broadcast):
            vstride = 0 if vstride is None else vstride
            idx = idx.value
        if idx.lanes > 1:  # a vector index that is neither a ramp nor a broadcast
            return None
        base = base + idx * st_c
    return base, vstride


def _strides(base: E.PrimExpr, loops: list[_Loop],
             sizes: _Sizes | None = None) -> list[int | None]:
    """Elements ``base`` moves per iteration of each loop (None: not linear in it)."""
    out: list[int | None] = []
    for lp in loops:
        lin = linear_in(base, lp.var)
        out.append(None if lin is None else _const_int(lin[1], sizes))
    return out


def _buffer_features(accesses: list[_Access], loops: list[_Loop],
                     sizes: _Sizes | None = None) -> list[float]:
    """The ``buf{b}_*`` features of one buffer's accesses (``loops``: innermost first)."""
    first = accesses[0]
    buf = first.buffer
    elem = _nbytes(buf.dtype)
    distinct = {tuple(struct_key(x) for x in a.indices) for a in accesses}
    width = max(a.lanes for a in accesses) * elem
    flat = _flat_index(first, sizes)
    strides: list[int | None] = _strides(flat[0], loops, sizes) if flat is not None \
        else [None] * len(loops)
    steps = [(-1.0 if s is None else _log(abs(s) * elem)) for s in strides]
    touches = []
    for k in range(len(loops)):
        inner = math.prod(lp.extent for lp, s in zip(loops[:k], strides[:k]) if s != 0)
        touch = len(distinct) * width * inner
        elems = _elements(buf, sizes)
        if elems is not None:
            touch = min(touch, elems * elem)
        touches.append(_log(touch))
    pad = K_LOOPS - len(loops)
    vstride = flat[1] if flat is not None else -1
    if vstride is None:  # a scalar access: how it moves along the innermost loop
        vstride = (-1 if strides[0] is None else strides[0]) if strides else 0
    return [*steps, *([0.0] * pad), *touches, *([0.0] * pad),
            _log(len(distinct)), _log(width), float(vstride == 1),
            float(vstride == 0), float(buf.scope == "local"), float(buf.scope == "shared"),
            float(any(a.store for a in accesses))]


def loop_features(func: S.PrimFunc) -> list[float]:
    """The loop-nest features of a lowered function: ``len(FEATURE_NAMES)`` floats, each
    described in the module doc."""
    sizes = representative_sizes(func)
    walk = _Walk(sizes=sizes)
    walk.stmt(func.body, (), None, {})
    out: list[float] = []
    if walk.order:
        main = max((walk.groups[k] for k in walk.order),
                   key=lambda g: g.trip * (g.ops.flops() + g.ops.counts["stores"]))
    else:
        main = _Group(())
    loops = list(reversed(main.stack))[:K_LOOPS]
    for lp in loops:
        out += [_log(lp.extent), *(float(lp.kind == k) for k in _KINDS), _log(lp.depth)]
    out += [0.0] * ((K_LOOPS - len(loops)) * (2 + len(_KINDS)))
    par = [lp for lp in main.stack if lp.kind in (S.ForKind.PARALLEL, S.ForKind.THREAD_BINDING)]
    out += [_log(par[0].extent) if par else 0.0, _log(par[0].depth) if par else 0.0,
            _log(math.prod(lp.extent for lp in par)) if par else 0.0, _log(walk.par_loops)]
    by_buffer: dict[int, list[_Access]] = {}
    for a in main.ops.accesses:
        by_buffer.setdefault(id(a.buffer), []).append(a)
    stored = [accs for accs in by_buffer.values() if any(a.store for a in accs)]
    stored.sort(key=lambda accs: next(i for i, a in enumerate(main.ops.accesses)
                                      if a.store and a.buffer is accs[0].buffer))
    loaded = [accs for accs in by_buffer.values() if not any(a.store for a in accs)]
    loaded.sort(key=lambda accs: (-sum(a.lanes * _nbytes(a.buffer.dtype) for a in accs),
                                  accs[0].buffer.name))
    slots = (stored + loaded)[:N_BUFFERS]
    per_buffer = 2 * K_LOOPS + len(_BUF_FLAGS)
    for accs in slots:
        out += _buffer_features(accs, loops, sizes)
    out += [0.0] * ((N_BUFFERS - len(slots)) * per_buffer)
    c = dict(main.ops.counts)
    c["lanes"] = max([c["lanes"]] + [lp.extent for lp in main.stack
                                     if lp.kind == S.ForKind.VECTORIZED])
    out += [_log(c[n]) for n in _OPS]
    out += [_log(main.trip), _log(walk.flops), _log(walk.bytes),
            _log(walk.flops / walk.bytes) if walk.bytes else 0.0, _log(walk.nests),
            _log(walk.loops), _log(walk.max_depth), _log(walk.alloc["global"]),
            _log(walk.alloc["local"]), _log(walk.alloc["shared"]), _log(walk.allocs)]
    assert len(out) == len(FEATURE_NAMES), (len(out), len(FEATURE_NAMES))
    return out
