"""Bound inference: how much of each stage is computed where it is computed (TVM's
``InferBound``).

A stage computed at root covers its whole shape. A stage attached to loop ``iv`` of another
stage (``compute_at``) computes, in each iteration of ``iv``, the region its readers use during
that iteration: the reads' index expressions are evaluated over intervals, with the loops inside
``iv`` relaxed to their ranges and the loops at or outside ``iv`` kept as symbols. A region is
``(min, extent)`` with a symbolic ``min`` (in terms of the enclosing loops) and an extent; an
index that is not analysable (a load used as an index, a product of two loops) falls back to
the full extent.

Extents (:data:`Extent`) are ``int`` when static, so static schedules lower exactly as they
always did, and index expressions (``int64``) when they depend on run-time sizes (variables in
the shapes of placeholders and computes, or in the extents of reduce axes; every such size
variable is non-negative). A split of a symbolic extent ``n`` by a factor ``f`` gives an inner
loop of ``f`` and an outer loop of ``floordiv(n + f - 1, f)`` (``n // f`` when ``n`` is
provably a multiple of ``f``), guarded by ``outer * f + inner < n``; a split into ``nparts``
gives ``nparts`` outer iterations of ``floordiv(n + nparts - 1, nparts)``; a fuse runs over the
product. A region whose span is a constant (a tile of 8 rows inside a loop over ``n / 8``)
keeps that constant extent, so its allocation has a constant size, and the stage computing it
is guarded by ``row < n`` where the tile could pass the end of a symbolic dimension; a region
whose span is not constant covers the whole (symbolic) dimension.

A ``shared`` stage attached inside ``threadIdx``-bound loops is computed for the whole block,
so those loops are relaxed too (TVM's treatment of shared memory): the block's threads then
fetch its region cooperatively, each taking the elements of its own thread index when the
stage's loops are bound to the same thread axes (see :mod:`tessera.te.lower`).

Index expressions are handled when they are affine in the loop variables, with ``min``/``max``
and ``//``/``%`` by positive constants; stages inlined with ``compute_inline`` are substituted
into their readers first. A region is shifted back inside the producer's shape only when it
could otherwise leave it (a non-divisible split of the reader); padding computes are expected
to keep their own reads in bounds.

Every loop of a lowered stage runs from 0: a root iteration variable's value is its region's
``min`` plus the offset its leaf loops give (``outer * factor + inner`` for a split,
``fused // extent(inner)`` and ``fused % extent(inner)`` for a fuse).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tessera.te.schedule import INLINE, ROOT, SCOPE, Fuse, Schedule, Split, Stage
from tessera.te.tensor import ComputeOp, IterVar, Range
from tessera.tir import expr as E
from tessera.tir.arith import Poly, const_int_bound, exact_quotient, struct_key, to_poly
from tessera.tir.functor import IRMutator, Substitute, post_order_visit, rebuild

__all__ = [
    "Bounds", "Extent", "Interval", "StageBound", "as_extent", "eval_interval", "extent_expr",
    "infer_bound", "inline_body", "simplify_index", "split_extents", "substitute_vars",
]

#: A loop or region extent: an ``int`` when static, else an ``int64`` index expression.
Extent = int | E.PrimExpr

#: Variable ranges ``var -> (lo, hi)`` (both inclusive): ints, or index expressions where a
#: loop's extent is symbolic.
VarRanges = Mapping[E.Var, tuple[Any, Any]]


# ---- expression helpers ---------------------------------------------------------------------


class _SubstituteIterVars(Substitute):
    """:class:`Substitute` that also replaces TE iteration variables."""

    def visit_IterVar(self, node: IterVar) -> E.PrimExpr:
        return self.vmap.get(node, node)


def substitute_vars(node: Any, vmap: Mapping[E.Var, Any]) -> Any:
    """``node`` with every variable in ``vmap`` (TE iteration variables included) replaced."""
    if not vmap:
        return node
    return _SubstituteIterVars({k: E.convert(v, k.dtype) for k, v in vmap.items()}).visit(node)


def _is_index(e: Any) -> bool:
    return isinstance(e, E.PrimExpr) and e.dtype == E.INDEX_DTYPE and e.lanes == 1


def simplify_index(e: Any) -> Any:
    """``e`` with its index (scalar ``int64``) sub-expressions in a canonical form: like terms
    collected (``(i*8 + j) - i*8 -> j``, ``x*1 -> x``), constants folded,
    ``(a*c + b) // c -> a + b // c`` and ``(a*c + b) % c -> b % c`` for a constant ``c > 0``,
    ``min``/``max`` of operands a constant apart decided."""
    if not isinstance(e, E.PrimExpr) or isinstance(e, E.IntImm | E.FloatImm | E.Var):
        return e
    if not _is_index(e):
        return rebuild(e, simplify_index)
    return _merge_div_mod(to_poly(e, atom=_simplify_atom)).to_expr()


def _merge_div_mod(p: Poly) -> Poly:
    """``k*c*(x // c) + k*(x % c) -> k*x`` for a constant ``c > 0`` (the index of a flattened
    pair of axes, ``(f // w) * w + f % w``, is ``f`` again)."""
    mods = {}
    for key, (coef, atoms) in p.terms.items():
        if len(atoms) == 1 and isinstance(atoms[0], E.FloorMod) and \
                isinstance(atoms[0].b, E.IntImm) and atoms[0].b.value > 0:
            mods[key] = (coef, atoms[0])
    if not mods:
        return p
    for coef, atoms in list(p.terms.values()):
        if len(atoms) != 1 or not isinstance(atoms[0], E.FloorDiv):
            continue
        div = atoms[0]
        for mkey, (mcoef, mod) in mods.items():
            if mkey not in p.terms or div.b.dtype != mod.b.dtype or \
                    not isinstance(div.b, E.IntImm) or div.b.value != mod.b.value or \
                    coef != mcoef * mod.b.value or struct_key(div.a) != struct_key(mod.a):
                continue
            p = p.add(Poly.atom(div).scale(coef), -1).add(Poly.atom(mod).scale(mcoef), -1)
            p = p.add(to_poly(div.a).scale(mcoef))
            break
    return p


def _simplify_atom(x: E.PrimExpr) -> E.PrimExpr:
    if isinstance(x, E.FloorDiv | E.FloorMod) and _is_index(x):
        a, b = simplify_index(x.a), simplify_index(x.b)
        if isinstance(b, E.IntImm) and b.value > 0:
            c = b.value
            pa = to_poly(a)
            if pa.is_const():
                v = pa.const // c if isinstance(x, E.FloorDiv) else pa.const % c
                return E.IntImm(v, x.dtype)
            q, r = pa.split(c)
            if isinstance(x, E.FloorMod):
                return E.IntImm(r.const, x.dtype) if r.is_const() else E.FloorMod(r.to_expr(), b)
            if r.is_const():
                return q.to_expr()
            rest = E.FloorDiv(r.to_expr(), b)
            return rest if q.is_const() and q.const == 0 else q.to_expr() + rest
        return x if a is x.a and b is x.b else type(x)(a, b)
    if isinstance(x, E.Min | E.Max) and _is_index(x):
        a, b = simplify_index(x.a), simplify_index(x.b)
        d = _const_diff(a, b)
        if d is not None:
            pick_a = d <= 0 if isinstance(x, E.Min) else d >= 0
            return a if pick_a else b
        return x if a is x.a and b is x.b else type(x)(a, b)
    return rebuild(x, simplify_index)


def _const_diff(a: E.PrimExpr, b: E.PrimExpr) -> int | None:
    """``a - b`` when it is a constant, else None."""
    if a.dtype != b.dtype or not _is_index(a) or not _is_index(b):
        return None
    p = to_poly(a).add(to_poly(b), -1)
    return p.const if p.is_const() else None


def _smin(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    d = _const_diff(a, b)
    if d is not None:
        return a if d <= 0 else b
    return E.Min(a, b)


def _smax(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    d = _const_diff(a, b)
    if d is not None:
        return a if d >= 0 else b
    return E.Max(a, b)


# ---- intervals ------------------------------------------------------------------------------


class Interval:
    """``[lo, hi]`` (both inclusive); the bounds are index expressions."""

    __slots__ = ("lo", "hi")

    def __init__(self, lo: E.PrimExpr, hi: E.PrimExpr) -> None:
        self.lo, self.hi = lo, hi

    def union(self, other: Interval) -> Interval:
        return Interval(_smin(self.lo, other.lo), _smax(self.hi, other.hi))

    def __repr__(self) -> str:
        return f"[{self.lo}, {self.hi}]"


class _IntervalEval:
    def __init__(self, relax: VarRanges) -> None:
        self.relax = relax

    def uses_relaxed(self, e: E.PrimExpr) -> bool:
        found = False

        def f(n: Any) -> None:
            nonlocal found
            if isinstance(n, E.Var) and n in self.relax:
                found = True

        post_order_visit(e, f)
        return found

    def eval(self, e: E.PrimExpr) -> Interval | None:
        if not self.uses_relaxed(e):
            return Interval(e, e)
        if not _is_index(e):
            return None
        if isinstance(e, E.Var):
            lo, hi = self.relax[e]
            return Interval(extent_expr(lo, e.dtype), extent_expr(hi, e.dtype))
        method = getattr(self, "e_" + type(e).__name__, None)
        return method(e) if method is not None else None

    def _pair(self, e: E.BinaryOp) -> tuple[Interval, Interval] | None:
        a, b = self.eval(e.a), self.eval(e.b)
        return None if a is None or b is None else (a, b)

    def e_Add(self, e: E.Add) -> Interval | None:
        ab = self._pair(e)
        if ab is None:
            return None
        a, b = ab
        return Interval(simplify_index(a.lo + b.lo), simplify_index(a.hi + b.hi))

    def e_Sub(self, e: E.Sub) -> Interval | None:
        ab = self._pair(e)
        if ab is None:
            return None
        a, b = ab
        return Interval(simplify_index(a.lo - b.hi), simplify_index(a.hi - b.lo))

    def e_Mul(self, e: E.Mul) -> Interval | None:
        ab = self._pair(e)
        if ab is None:
            return None
        a, b = ab
        for x, k in ((a, b), (b, a)):
            if k.lo is k.hi:
                c = simplify_index(k.lo)
                if isinstance(c, E.IntImm):
                    lo, hi = simplify_index(x.lo * c), simplify_index(x.hi * c)
                    return Interval(lo, hi) if c.value >= 0 else Interval(hi, lo)
        return None

    def _divisor(self, e: E.BinaryOp) -> int | None:
        if self.uses_relaxed(e.b):
            return None
        c = simplify_index(e.b)
        return c.value if isinstance(c, E.IntImm) and c.value > 0 else None

    def e_FloorDiv(self, e: E.FloorDiv) -> Interval | None:
        c, a = self._divisor(e), self.eval(e.a)
        if a is None:
            return None
        if c is None:
            return self._size_quotient(e, a)
        return Interval(simplify_index(a.lo // c), simplify_index(a.hi // c))

    def _size_quotient(self, e: E.FloorDiv, a: Interval) -> Interval | None:
        """``a // d`` by a run-time size ``d`` (never negative) where ``a`` runs over
        ``[lo, q * d - 1]`` with ``lo >= 0``: ``[0, q - 1]``. The outer index of a loop fused
        over a run-time extent (``f // (occ * height)`` of ``f`` below ``batch * occ *
        height``) stays below ``batch``, so its stage needs no guard."""
        if self.uses_relaxed(e.b):
            return None
        d_low = _const_bound(e.b, {})[0]
        lo = simplify_index(a.lo)
        if d_low is None or d_low < 0 or not isinstance(lo, E.IntImm) or lo.value < 0:
            return None
        q = exact_quotient(simplify_index(a.hi + E.IntImm(1, a.hi.dtype)), e.b)
        if q is None:
            return None
        return Interval(E.IntImm(0, e.dtype), simplify_index(q - E.IntImm(1, e.dtype)))

    def e_FloorMod(self, e: E.FloorMod) -> Interval | None:
        c, a = self._divisor(e), self.eval(e.a)
        low = _const_bound(e.b, {})[0] if c is None and not self.uses_relaxed(e.b) else None
        if low is not None and low >= 0:
            # by a run-time size (never negative; a zero divisor has no result to bound):
            # the fused loop of a symbolic axis, ``f % h``, is in [0, h - 1]
            return Interval(E.IntImm(0, e.dtype), simplify_index(e.b - E.IntImm(1, e.dtype)))
        if c is None or a is None:
            return None
        lo, hi = simplify_index(a.lo), simplify_index(a.hi)
        if isinstance(lo, E.IntImm) and isinstance(hi, E.IntImm) and \
                lo.value // c == hi.value // c:
            return Interval(E.IntImm(lo.value % c, e.dtype), E.IntImm(hi.value % c, e.dtype))
        return Interval(E.IntImm(0, e.dtype), E.IntImm(c - 1, e.dtype))

    def e_Min(self, e: E.Min) -> Interval | None:
        ab = self._pair(e)
        if ab is None:
            return None
        a, b = ab
        return Interval(_smin(a.lo, b.lo), _smin(a.hi, b.hi))

    def e_Max(self, e: E.Max) -> Interval | None:
        ab = self._pair(e)
        if ab is None:
            return None
        a, b = ab
        return Interval(_smax(a.lo, b.lo), _smax(a.hi, b.hi))

    def e_Select(self, e: E.Select) -> Interval | None:
        a, b = self.eval(e.true_value), self.eval(e.false_value)
        if a is None or b is None:
            return None
        return a.union(b)

    def e_Cast(self, e: E.Cast) -> Interval | None:
        a = self.eval(e.value)
        if a is None or not E.is_int(e.value.dtype):
            return None
        return Interval(E.cast(e.dtype, a.lo), E.cast(e.dtype, a.hi))


def eval_interval(e: E.PrimExpr, relax: VarRanges) -> Interval | None:
    """The interval of integer expression ``e`` when each variable in ``relax`` ranges over its
    ``(lo, hi)``; other variables stay symbolic. None when ``e`` is not analysable."""
    return _IntervalEval(relax).eval(simplify_index(e))


def _const_bound(e: E.PrimExpr, bounds: VarRanges) -> tuple[int | None, int | None]:
    """:func:`~tessera.tir.arith.const_int_bound` over expressions that use TE iteration
    variables (the analyser looks variables up by node class, so they become plain ones)."""
    proxies: dict[E.Var, E.Var] = {}

    def f(n: Any) -> None:
        if isinstance(n, IterVar) and n not in proxies:
            proxies[n] = E.Var(n.name, n.dtype)

    post_order_visit(e, f)
    plain: dict[E.Var, tuple[int | None, int | None]] = {}
    for n in _free_vars(e):
        if isinstance(n, IterVar):
            if n in bounds:
                plain[proxies[n]] = _const_range(bounds[n])
        elif E.is_int(n.dtype):
            plain[n] = (0, None)  # a size variable: never negative
    return const_int_bound(substitute_vars(e, proxies), plain)


def _free_vars(e: Any) -> list[E.Var]:
    found: list[E.Var] = []
    seen: set[int] = set()

    def f(n: Any) -> None:
        if isinstance(n, E.Var) and id(n) not in seen:
            seen.add(id(n))
            found.append(n)

    post_order_visit(e, f)
    return found


def _const_range(r: tuple[Any, Any]) -> tuple[int | None, int | None]:
    """A loop range with a symbolic side left unbounded on that side (a span that depends on
    a run-time size is not a constant, whatever bounds the caller gives that size)."""
    lo, hi = r
    return (lo if isinstance(lo, int) else None), (hi if isinstance(hi, int) else None)


def _upper(e: E.PrimExpr, bounds: VarRanges) -> int | None:
    return _const_bound(e, bounds)[1]


def _diff_upper(hi: E.PrimExpr, lo: E.PrimExpr, bounds: VarRanges) -> int | None:
    """A constant upper bound of ``hi - lo`` over the variable ranges in ``bounds``."""
    if hi.dtype != lo.dtype:
        return None
    p = to_poly(simplify_index(hi - lo))
    if p.is_const():
        return p.const

    def best(values: list[int | None], pick: Any) -> int | None:
        known = [v for v in values if v is not None]
        if pick is max:
            return None if len(known) < len(values) else max(known)
        return min(known) if known else None

    if isinstance(hi, E.Max):
        return best([_diff_upper(hi.a, lo, bounds), _diff_upper(hi.b, lo, bounds)], max)
    if isinstance(lo, E.Min):
        return best([_diff_upper(hi, lo.a, bounds), _diff_upper(hi, lo.b, bounds)], max)
    if isinstance(hi, E.Min):
        return best([_diff_upper(hi.a, lo, bounds), _diff_upper(hi.b, lo, bounds)], min)
    if isinstance(lo, E.Max):
        return best([_diff_upper(hi, lo.a, bounds), _diff_upper(hi, lo.b, bounds)], min)
    if isinstance(hi, E.FloorDiv) and isinstance(lo, E.FloorDiv) and \
            isinstance(hi.b, E.IntImm) and isinstance(lo.b, E.IntImm) and \
            hi.b.value == lo.b.value and hi.b.value > 0:
        c = hi.b.value
        d = _diff_upper(hi.a, lo.a, bounds)
        if d is not None and d >= 0:
            low = to_poly(lo.a)
            aligned = low.const % c == 0 and all(co % c == 0 for co, _ in low.terms.values())
            return d // c if aligned else -(-d // c)
    return _upper(p.to_expr(), bounds)


# ---- inlining -------------------------------------------------------------------------------


class _Inliner(IRMutator):
    """Substitute the bodies of inlined stages for their loads."""

    def __init__(self, sch: Schedule) -> None:
        self.sch = sch
        self.expanded: dict[Stage, E.PrimExpr] = {}

    def body_of(self, stage: Stage) -> E.PrimExpr:
        if stage not in self.expanded:
            op = stage.op
            assert isinstance(op, ComputeOp)
            self.expanded[stage] = self.visit(op.body)
        return self.expanded[stage]

    def visit_ProducerLoad(self, node: E.ProducerLoad) -> Any:
        idx = [self.visit(i) for i in node.indices]
        stage = self.sch.stage_of(node.producer)
        if stage is not None and stage.attach_type == INLINE:
            op = stage.op
            assert isinstance(op, ComputeOp)
            if op.reduce_axis:
                raise ValueError(f"stage {stage.name} is a reduction and cannot be inlined")
            return substitute_vars(self.body_of(stage), dict(zip(op.axis, idx)))
        if all(a is b for a, b in zip(idx, node.indices)):
            return node
        return E.ProducerLoad(node.producer, idx)


def inline_body(sch: Schedule, stage: Stage) -> E.PrimExpr:
    """The body of a compute stage with every inlined stage it reads substituted."""
    return _Inliner(sch).body_of(stage)


def _loads_of(body: E.PrimExpr, sch: Schedule, stage: Stage) -> list[E.ProducerLoad]:
    found: list[E.ProducerLoad] = []

    def f(n: Any) -> None:
        if isinstance(n, E.ProducerLoad) and sch.stage_of(n.producer) is stage:
            found.append(n)

    post_order_visit(body, f)
    return found


def _producers_of(body: E.PrimExpr, sch: Schedule) -> list[Stage]:
    found: list[Stage] = []

    def f(n: Any) -> None:
        if isinstance(n, E.ProducerLoad):
            src = sch.stage_of(n.producer)
            if src is not None and src not in found:
                found.append(src)

    post_order_visit(body, f)
    return found


# ---- per-stage results ----------------------------------------------------------------------


class StageBound:
    """The inferred loop structure of one stage.

    ``extent``: every iteration variable's extent (a root variable's is its region's), an
    ``int`` when static and an index expression when it depends on run-time sizes;
    ``root_min``: each root variable's region minimum (an expression in the leaf loops of the
    stages it is nested in); ``offset``: each variable's value within its range, in terms of the
    stage's leaf loops; ``guards``: ``(split parent, condition)`` for splits that do not
    (provably) divide their parent, then ``(root axis, value < size)`` for the dimensions whose
    constant-size region could pass the end of a symbolic dimension."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        self.extent: dict[IterVar, Extent] = {}
        self.root_min: dict[IterVar, E.PrimExpr] = {}
        self.offset: dict[IterVar, E.PrimExpr] = {}
        self.guards: list[tuple[IterVar, E.PrimExpr]] = []

    def root_value(self, iv: IterVar) -> E.PrimExpr:
        """The value of root variable ``iv`` in terms of the leaf loops."""
        return simplify_index(self.root_min[iv] + self.offset[iv])

    def root_values(self) -> dict[IterVar, E.PrimExpr]:
        return {iv: self.root_value(iv) for iv in self.stage.root_iter_vars}

    def extent_expr(self, iv: IterVar) -> E.PrimExpr:
        """The extent of ``iv`` as an expression (an IntImm when static)."""
        return extent_expr(self.extent[iv])

    def is_static(self) -> bool:
        """Whether every extent of the stage is a constant."""
        return all(isinstance(x, int) for x in self.extent.values())

    def region(self) -> list[tuple[E.PrimExpr, Extent]]:
        """``(min, extent)`` of each dimension of the stage's output that it computes."""
        op = self.stage.op
        assert isinstance(op, ComputeOp)
        return [(self.root_min[a], self.extent[a]) for a in op.axis]

    def __repr__(self) -> str:
        parts = [f"{iv.name}: [{self.root_min[iv]}, +{self.extent[iv]})"
                 for iv in self.stage.root_iter_vars]
        return f"StageBound({self.stage.name}: {', '.join(parts)})"


class Bounds:
    """The result of :func:`infer_bound`: a :class:`StageBound` per scheduled compute stage,
    the bodies with inlined stages substituted, and who reads whom."""

    def __init__(self, sch: Schedule) -> None:
        self.schedule = sch
        self.stages: dict[Stage, StageBound] = {}
        self.bodies: dict[Stage, E.PrimExpr] = {}
        self.consumers: dict[Stage, list[Stage]] = {}
        #: ``(0, extent - 1)`` of every leaf loop of every stage (``extent - 1`` an index
        #: expression where the extent is symbolic).
        self.loop_ranges: dict[E.Var, tuple[Any, Any]] = {}

    def __getitem__(self, key: Any) -> StageBound:
        """The bounds of a stage (or of the stage of a tensor or operation)."""
        stage = self.schedule[key]
        if stage not in self.stages:
            raise KeyError(f"stage {stage.name} is inlined or a placeholder: it has no bounds")
        return self.stages[stage]

    def range_of(self, iv: IterVar) -> Range:
        """The range of any iteration variable (TVM's ``InferBound`` map)."""
        for sb in self.stages.values():
            if iv in sb.extent:
                return Range(sb.root_min.get(iv, E.IntImm(0)), sb.extent[iv])
        raise KeyError(f"{iv.name} is not an iteration variable of a scheduled stage")


# ---- extents --------------------------------------------------------------------------------


def extent_expr(x: Any, dtype: str = E.INDEX_DTYPE) -> E.PrimExpr:
    """An extent (int or expression) as an expression."""
    return E.IntImm(x, dtype) if isinstance(x, int) else x


def as_extent(x: Any) -> Extent:
    """An extent in canonical form: an ``int`` when it is (or simplifies to) a constant, else
    the simplified ``int64`` index expression."""
    if isinstance(x, bool):
        raise TypeError(f"extent {x!r} is a bool")
    if isinstance(x, int):
        return x
    e = E.convert(x)
    if not E.is_int(e.dtype) or e.lanes != 1:
        raise TypeError(f"extent {e} is not a scalar integer expression")
    if e.dtype != E.INDEX_DTYPE:
        e = E.cast(E.INDEX_DTYPE, e)
    e = simplify_index(e)
    return e.value if isinstance(e, E.IntImm) else e


def _divides(f: int, e: E.PrimExpr) -> bool:
    """Whether ``e`` is provably a multiple of ``f`` (every coefficient and the constant of its
    polynomial are)."""
    p = to_poly(e)
    return p.const % f == 0 and all(c % f == 0 for c, _ in p.terms.values())


def _ceil_div(total: E.PrimExpr, f: int) -> Extent:
    """``ceil(total / f)`` for a non-negative symbolic ``total``."""
    if f == 1:
        return as_extent(total)
    if _divides(f, total):
        return as_extent(E.FloorDiv(total, E.IntImm(f, total.dtype)))
    return as_extent(E.FloorDiv(total + E.IntImm(f - 1, total.dtype), E.IntImm(f, total.dtype)))


def split_extents(total: Extent, factor: int | None, nparts: int | None) -> tuple[Extent, Extent]:
    """``(outer, inner)`` extents of a split of ``total`` by ``factor`` or into ``nparts``. A
    constant ``total`` clamps the factor (or nparts) to it; a symbolic one cannot, so the inner
    loop runs ``factor`` (the outer ``nparts``) iterations and the guard drops the excess."""
    if isinstance(total, int):
        if factor is not None:
            inner = max(1, min(factor, total))
            return -(-total // inner), inner
        assert nparts is not None
        outer = max(1, min(nparts, total))
        return outer, -(-total // outer)
    if factor is not None:
        return _ceil_div(total, factor), factor
    assert nparts is not None
    return nparts, _ceil_div(total, nparts)


def _mul_extents(a: Extent, b: Extent) -> Extent:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return as_extent(extent_expr(a) * extent_expr(b))


def _provably_equal(a: Extent, b: Extent) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    d = simplify_index(extent_expr(a) - extent_expr(b))
    return isinstance(d, E.IntImm) and d.value == 0


def _pass_down(stage: Stage, sb: StageBound) -> None:
    """Extents, offsets and guards of every variable from the root extents."""
    ext = sb.extent
    for rel in stage.relations:
        if isinstance(rel, Split):
            ext[rel.outer], ext[rel.inner] = split_extents(ext[rel.parent], rel.factor,
                                                           rel.nparts)
        else:
            ext[rel.fused] = _mul_extents(ext[rel.outer], ext[rel.inner])
    off: dict[IterVar, E.PrimExpr] = {iv: iv for iv in stage.leaf_iter_vars}
    for rel in reversed(stage.relations):
        if isinstance(rel, Split):
            value = simplify_index(off[rel.outer] * ext[rel.inner] + off[rel.inner])
            off[rel.parent] = value
            total = ext[rel.parent]
            if not _provably_equal(_mul_extents(ext[rel.outer], ext[rel.inner]), total):
                sb.guards.append((rel.parent, E.LT(value, extent_expr(total, value.dtype))))
        else:
            assert isinstance(rel, Fuse)
            fused, n = off[rel.fused], extent_expr(ext[rel.inner], off[rel.fused].dtype)
            off[rel.outer] = simplify_index(E.FloorDiv(fused, n))
            off[rel.inner] = simplify_index(E.FloorMod(fused, n))
    sb.offset = off


class _Inference:
    def __init__(self, sch: Schedule) -> None:
        self.sch = sch
        self.result = Bounds(sch)
        self.busy: set[Stage] = set()

    def run(self) -> Bounds:
        sch, res = self.sch, self.result
        live = [s for s in sch.compute_stages() if s.attach_type != INLINE]
        inliner = _Inliner(sch)
        for stage in live:
            res.bodies[stage] = inliner.body_of(stage)
            res.consumers.setdefault(stage, [])
        for stage in live:
            for src in _producers_of(res.bodies[stage], sch):
                res.consumers.setdefault(src, []).append(stage)
        for stage in live:
            self.infer(stage)
        return res

    def infer(self, stage: Stage) -> None:
        if stage in self.result.stages:
            return
        if stage in self.busy:
            raise ValueError(f"bound inference: stage {stage.name} is attached inside a loop "
                             f"that depends on it (a compute_at cycle)")
        self.busy.add(stage)
        if stage.attach_type == SCOPE:
            self.check_attach(stage)
            assert stage.attach_stage is not None
            self.infer(stage.attach_stage)
            for consumer in self.result.consumers.get(stage, []):
                self.infer(consumer)
        sb = StageBound(stage)
        op = stage.op
        assert isinstance(op, ComputeOp)
        region = self.region(stage) if stage.attach_type == SCOPE else None
        ends: list[tuple[IterVar, E.PrimExpr]] = []
        for k, axis in enumerate(op.axis):
            if region is not None:
                sb.root_min[axis], sb.extent[axis], end = region[k]
                if end is not None:
                    ends.append((axis, end))
            else:
                sb.root_min[axis], sb.extent[axis] = _dom(axis)
        for axis in op.reduce_axis:
            sb.root_min[axis], sb.extent[axis] = _dom(axis)
        _pass_down(stage, sb)
        for axis, end in ends:
            sb.guards.append((axis, E.LT(sb.root_value(axis), end)))
        for iv in stage.leaf_iter_vars:
            ext = sb.extent[iv]
            self.result.loop_ranges[iv] = (0, ext - 1 if isinstance(ext, int) else
                                           simplify_index(ext - E.IntImm(1, ext.dtype)))
        self.result.stages[stage] = sb
        self.busy.discard(stage)

    def check_attach(self, stage: Stage) -> None:
        parent, iv = stage.attach_stage, stage.attach_ivar
        assert parent is not None and iv is not None
        if stage.is_output:
            raise ValueError(f"stage {stage.name} is an output of the schedule; it must be "
                             f"computed at root, not at {parent.name}.{iv.name}")
        if parent.schedule is not self.sch or parent.attach_type == INLINE:
            raise ValueError(f"stage {stage.name} is computed at {parent.name}, which is "
                             f"inlined or not part of this schedule")
        if not any(v is iv for v in parent.leaf_iter_vars):
            raise ValueError(f"stage {stage.name} is computed at {parent.name}.{iv.name}, which "
                             f"is no longer a loop of {parent.name} (it was split or fused "
                             f"after compute_at; attach to one of "
                             f"{', '.join(v.name for v in parent.leaf_iter_vars)})")

    def relaxed_loops(self, consumer: Stage, stage: Stage) -> list[IterVar]:
        """The loops that vary during one iteration of ``stage``'s attach loop, as seen from
        the loop nest of ``consumer``."""
        parent, iv = stage.attach_stage, stage.attach_ivar
        assert parent is not None and iv is not None
        pos = _index(parent.leaf_iter_vars, iv)
        if consumer is parent:
            return parent.leaf_iter_vars[pos + 1:]
        relaxed = list(consumer.leaf_iter_vars)
        cur = consumer
        while True:
            if cur.attach_type != SCOPE:
                raise ValueError(
                    f"stage {stage.name} is computed at {parent.name}.{iv.name}, but its reader "
                    f"{consumer.name} is computed outside that loop; attach {stage.name} where "
                    f"all its readers run, or inline it")
            up, up_iv = cur.attach_stage, cur.attach_ivar
            assert up is not None and up_iv is not None
            up_pos = _index(up.leaf_iter_vars, up_iv)
            if up is parent:
                if up_pos < pos:
                    raise ValueError(
                        f"stage {stage.name} is computed at {parent.name}.{iv.name}, but its "
                        f"reader {consumer.name} is computed at the outer loop "
                        f"{parent.name}.{up_iv.name}")
                return relaxed + parent.leaf_iter_vars[pos + 1:up_pos + 1]
            relaxed += up.leaf_iter_vars[:up_pos + 1]
            cur = up

    def region(self, stage: Stage) -> list[tuple[E.PrimExpr, Extent, E.PrimExpr | None]]:
        """``(min, extent, end)`` of each dimension of ``stage``'s output that one iteration
        of its attach loop needs; ``end`` is the (symbolic) size of the dimension when the
        region could pass it (the stage then guards its rows against it), else None."""
        res, sch = self.result, self.sch
        op = stage.op
        assert isinstance(op, ComputeOp)
        shape = [as_extent(d) for d in op.output(0).shape]
        ndim = len(shape)
        union: list[Interval | None] = [None] * ndim
        known = [True] * ndim
        shared = _block_thread_loops(stage) if stage.scope == "shared" else []
        for consumer in res.consumers.get(stage, []):
            relax = {v: res.loop_ranges[v]
                     for v in self.relaxed_loops(consumer, stage) + shared}
            values = res.stages[consumer].root_values()
            for load in _loads_of(res.bodies[consumer], sch, stage):
                for k, index in enumerate(load.indices):
                    if not known[k]:
                        continue
                    got = eval_interval(substitute_vars(index, values), relax)
                    if got is None:
                        known[k] = False
                        continue
                    union[k] = got if union[k] is None else union[k].union(got)  # type: ignore
        out: list[tuple[E.PrimExpr, Extent, E.PrimExpr | None]] = []
        for k in range(ndim):
            rng, size = union[k], shape[k]
            if not known[k] or rng is None:
                out.append((E.IntImm(0), size, None))
                continue
            span = _diff_upper(rng.hi, rng.lo, res.loop_ranges)
            if isinstance(size, int):
                if span is None or span + 1 >= size:
                    out.append((E.IntImm(0), size, None))
                    continue
                out.append((*_fit(simplify_index(rng.lo), span + 1, size, res.loop_ranges),
                            None))
            elif span is None or span < 0:
                out.append((E.IntImm(0), size, None))
            else:
                out.append(_fit_symbolic(simplify_index(rng.lo), span + 1, size,
                                         res.loop_ranges))
        return out


def _block_thread_loops(stage: Stage) -> list[IterVar]:
    """The ``threadIdx``-bound loops around ``stage``'s attach point: a ``shared`` stage is
    computed once per block for all of the block's threads (they fetch it cooperatively), so
    its region is relaxed over these loops as well as over the loops inside the attach
    point."""
    loops: list[IterVar] = []
    cur = stage
    while cur.attach_type == SCOPE:
        parent, iv = cur.attach_stage, cur.attach_ivar
        assert parent is not None and iv is not None
        for v in parent.leaf_iter_vars[:_index(parent.leaf_iter_vars, iv) + 1]:
            attr = parent.iter_var_attrs.get(v)
            if attr is not None and attr.thread_tag.startswith("threadIdx."):
                loops.append(v)
        cur = parent
    return loops


def _fit(lo: E.PrimExpr, extent: int, size: int,
         bounds: VarRanges) -> tuple[E.PrimExpr, int]:
    """``(lo, extent)`` shifted to stay within ``[0, size)`` when it might leave it."""
    low, high = _const_bound(lo, bounds)
    if high is None or high + extent > size:
        lo = _smin(lo, E.IntImm(size - extent, lo.dtype))
    if low is None or low < 0:
        lo = _smax(lo, E.IntImm(0, lo.dtype))
    return lo, extent


def _fit_symbolic(lo: E.PrimExpr, extent: int, size: E.PrimExpr,
                  bounds: VarRanges) -> tuple[E.PrimExpr, int, E.PrimExpr | None]:
    """``(lo, extent, end)`` for a constant-extent region of a dimension of symbolic
    ``size``: the region keeps its constant extent (a constant-size allocation) and moves up
    to 0 when it might start below; where it might pass ``size`` (a tail tile, or a dimension
    smaller than the tile), ``end`` is ``size`` and the stage guards its rows against it
    rather than shifting the tile back (a tile larger than the dimension could not fit)."""
    low, _ = _const_bound(lo, bounds)
    if low is None:  # ``f % h`` of a fused run-time axis: its interval knows it is >= 0
        start = eval_interval(lo, bounds)
        low = _const_bound(start.lo, bounds)[0] if start is not None else None
    if low is None or low < 0:
        lo = _smax(lo, E.IntImm(0, lo.dtype))
    # the largest start over the loops' (symbolic) ranges: a row loop i < n gives lo <= n - 1
    top = eval_interval(lo, bounds)
    high = top.hi if top is not None else lo
    slack, _ = _const_bound(simplify_index(size - high - E.IntImm(extent, lo.dtype)), bounds)
    return lo, extent, None if slack is not None and slack >= 0 else size


def _dom(iv: IterVar) -> tuple[E.PrimExpr, Extent]:
    dom = iv.dom
    if dom is None:
        raise ValueError(f"iteration variable {iv.name} has no domain")
    if isinstance(dom.extent, E.IntImm):
        return dom.min, dom.extent.value
    return dom.min, as_extent(dom.extent)


def _index(items: list[IterVar], iv: IterVar) -> int:
    for k, v in enumerate(items):
        if v is iv:
            return k
    raise ValueError(f"{iv.name} is not a loop")


def infer_bound(sch: Schedule) -> Bounds:
    """Infer the region, loop extents and iteration-variable values of every stage that is
    not inlined."""
    for stage in sch.compute_stages():
        if stage.attach_type not in (ROOT, INLINE, SCOPE):
            raise ValueError(f"stage {stage.name}: unknown attach type {stage.attach_type}")
    return _Inference(sch).run()
