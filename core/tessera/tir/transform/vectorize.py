"""Turn ``VECTORIZED`` loops into vector code (TVM's ``VectorizeLoop``).

A vectorized loop ``for v in range(m, m + L)`` with a constant extent ``L`` becomes its body
executed once on ``L`` lanes: ``v`` becomes ``ramp(m, 1, L)``, expressions that do not depend on
``v`` stay scalar (and are broadcast where they meet vectors), loads and stores whose index is
affine in ``v`` become vector accesses ``B[ramp(base, stride, L)]``, and arithmetic, casts,
selects and intrinsic calls act lane-wise.

The pass only emits vector code when that is exactly equivalent to running the loop in order.
Otherwise it falls back to an ``UNROLLED`` loop (small extents) or a ``SERIAL`` one:

* a body with a loop, an allocation, an ``Evaluate`` or an ``if`` whose condition depends on
  ``v``;
* an index that does not simplify to ``ramp``/``broadcast`` form (``v * v``, a gather through a
  load);
* a store whose index does not depend on ``v`` (a reduction into one element: always
  ``SERIAL``), or whose stride is not a non-zero constant;
* a buffer that is both written and read in the body at different indices (a dependence
  between iterations);
* a non-constant extent, or one above ``max_lanes`` (``SERIAL``).

With ``predicate=True`` (for code generators that take the two intrinsics below) one kind of
``if`` whose condition depends on ``v`` vectorizes too: the guard of a partial vector,
``if ramp(b, s, L) < n`` (``s > 0``; or ``<=``, or written the other way round), as loop
partitioning leaves it on the last vector of a loop with a run-time extent. Its statements
become *masked*: every load whose index depends on ``v`` is ``masked_load(B[ramp], mask)``
(the lanes outside the mask read nothing and are 0) where the ramp is contiguous, and a gather
whose lanes outside the mask read the first lane's element where it is strided (a transpose's
last vector); every store ``B[ramp] = masked_store(value, mask)`` (only the lanes inside the
mask are written; a contiguous ramp, else the statement stays scalar), under a
scalar ``if b < n`` (the first lane's condition: no lane is inside when it is not), so that
loads that do not depend on ``v`` run only when the original would have run them. A body with
an integer division or remainder by a non-constant stays scalar (a lane outside the mask
would divide by the 0 it read).
"""

from __future__ import annotations

from typing import Any

from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.arith import struct_key
from tessera.tir.functor import post_order_visit, rebuild, substitute
from tessera.tir.simplify import Simplifier
from tessera.tir.transform._util import StmtScopedMutator, stmt_count

__all__ = ["MASKED_LOAD", "MASKED_STORE", "MAX_LANES", "vectorize"]

#: The widest vector the pass emits; wider loops run serially.
MAX_LANES = 64
#: Fallback loops up to this extent (and a small body) become UNROLLED, longer ones SERIAL.
FALLBACK_UNROLL_EXTENT = 16


class _CannotVectorize(Exception):
    """The loop body has something the vectorizer cannot express exactly."""

    def __init__(self, message: str, serial: bool = False) -> None:
        super().__init__(message)
        #: True when the fallback must be a plain serial loop (a reduction).
        self.serial = serial


class _ExprVectorizer:
    """Rewrites a scalar expression of the loop body into its ``lanes``-wide form."""

    def __init__(self, var: E.Var, ramp: E.Ramp, simplifier: Simplifier) -> None:
        self.var = var
        self.ramp = ramp
        self.lanes = ramp.lanes
        self.simp = simplifier

    def widen(self, e: E.PrimExpr) -> E.PrimExpr:
        return e if e.lanes == self.lanes else E.Broadcast(e, self.lanes)

    def visit(self, e: E.PrimExpr) -> E.PrimExpr:
        if e.lanes != 1:
            raise _CannotVectorize(f"already a vector: {e}")
        if e is self.var:
            return self.ramp
        if isinstance(e, E.IntImm | E.FloatImm | E.Var):
            return e
        if isinstance(e, E.BinaryOp):
            a, b = self.visit(e.a), self.visit(e.b)
            if a is e.a and b is e.b:
                return e
            return self.simp.binop(type(e), a, b)
        if isinstance(e, E.Not):
            a = self.visit(e.a)
            return e if a is e.a else self.simp.visit(E.Not(a))
        if isinstance(e, E.Select):
            c, t, f = self.visit(e.condition), self.visit(e.true_value), self.visit(e.false_value)
            if c is e.condition and t is e.true_value and f is e.false_value:
                return e
            if c.lanes == 1 and t.lanes == 1 and f.lanes == 1:
                return E.Select(c, t, f)
            return self.simp.visit(E.Select(c, self.widen(t), self.widen(f)))
        if isinstance(e, E.Cast):
            v = self.visit(e.value)
            return e if v is e.value else self.simp.visit(E.Cast(e.dtype, v))
        if isinstance(e, E.Call):
            args = [self.visit(a) for a in e.args]
            if all(x is y for x, y in zip(args, e.args)):
                return e
            return E.Call(e.name, [self.widen(a) for a in args], e.dtype)
        if isinstance(e, E.BufferLoad):
            return self.load(e)
        if isinstance(e, E.Let):
            # Inline: a vector-valued variable has no scalar form.
            return self.visit(substitute(e.body, {e.var: e.value}))
        raise _CannotVectorize(f"cannot vectorize {type(e).__name__}: {e}")

    def index(self, i: E.PrimExpr) -> E.PrimExpr:
        out = self.simp.visit(self.visit(i))
        if out.lanes == 1 or isinstance(out, E.Broadcast):
            return out if out.lanes == 1 else out.value
        if isinstance(out, E.Ramp) and out.base.lanes == 1 and out.stride.lanes == 1:
            return out
        raise _CannotVectorize(f"index {i} is not affine in {self.var.name}: {out}")

    def load(self, e: E.BufferLoad) -> E.PrimExpr:
        indices = [self.index(i) for i in e.indices]
        if all(x is y for x, y in zip(indices, e.indices)):
            return e
        return E.BufferLoad(e.buffer, indices)


def _loads(node: Any) -> list[E.BufferLoad]:
    out: list[E.BufferLoad] = []
    post_order_visit(node, lambda n: out.append(n) if isinstance(n, E.BufferLoad) else None)
    return out


MASKED_LOAD, MASKED_STORE = E.MASKED_LOAD, E.MASKED_STORE


def _first_lane_condition(cond: E.PrimExpr) -> E.PrimExpr | None:
    """The scalar condition of lane 0 of ``cond`` when ``cond`` compares an increasing ramp
    with a broadcast (``ramp(b, s, L) < n`` and the like, so that no lane holds when lane 0
    does not); None for any other condition."""
    for kind, flipped in ((E.LT, E.GT), (E.LE, E.GE)):
        if isinstance(cond, kind):
            ramp, bound = cond.a, cond.b
        elif isinstance(cond, flipped):
            ramp, bound = cond.b, cond.a
        else:
            continue
        if isinstance(ramp, E.Ramp) and isinstance(bound, E.Broadcast) and \
                isinstance(ramp.stride, E.IntImm) and ramp.stride.value > 0:
            return kind(ramp.base, bound.value)
    return None


def _divides_by_a_variable(e: E.PrimExpr) -> bool:
    """Whether ``e`` holds an integer division or remainder by a non-constant."""
    found = False

    def f(n: Any) -> None:
        nonlocal found
        if isinstance(n, E.Div | E.FloorDiv | E.FloorMod) and E.is_int(n.dtype) and \
                not isinstance(n.b, E.IntImm | E.Broadcast):
            found = True

    post_order_visit(e, f)
    return found


def _contiguous(indices: Any) -> bool:
    """Whether the (flattened) index is a ramp of stride 1: what masked access takes."""
    return len(indices) == 1 and isinstance(indices[0], E.Ramp) and \
        isinstance(indices[0].stride, E.IntImm) and indices[0].stride.value == 1


def _safe_gather(e: E.BufferLoad, mask: E.PrimExpr) -> E.PrimExpr:
    """A masked load of a strided ramp (a gather, one load per lane): the lanes outside
    ``mask`` read the first lane's element instead, which the statement's scalar guard (the
    first lane's condition) makes one the loop reads; their values are never stored."""
    index = e.indices[0] if len(e.indices) == 1 else None
    if not isinstance(index, E.Ramp) or index.lanes != mask.lanes:
        raise _CannotVectorize(f"a masked load of {e.buffer.name} is not a ramp")
    first = E.Broadcast(index.base, index.lanes)
    return E.BufferLoad(e.buffer, [E.Select(mask, index, first)])


def _mask_loads(e: E.PrimExpr, mask: E.PrimExpr) -> E.PrimExpr:
    """``e`` with every load of a vector index read under ``mask``."""
    if isinstance(e, E.BufferLoad):
        if e.lanes == 1:
            return e
        if not _contiguous(e.indices):
            return _safe_gather(e, mask)
        return E.Call(MASKED_LOAD, [e, mask], e.dtype)
    if isinstance(e, E.Call) and e.name == MASKED_LOAD:
        return e
    return rebuild(e, lambda x: _mask_loads(x, mask))


class _StmtVectorizer:
    def __init__(self, ev: _ExprVectorizer, predicate: bool = False) -> None:
        self.ev = ev
        #: buffer id -> (index keys seen in stores)
        self.stores: dict[int, set[Any]] = {}
        #: whether a partial vector's guard may become a mask (module doc)
        self.predicate = predicate
        #: the mask of the guarded statements being vectorized (None outside them)
        self.mask: E.PrimExpr | None = None

    def visit(self, s: S.Stmt) -> S.Stmt:
        ev = self.ev
        if isinstance(s, S.SeqStmt):
            return S.SeqStmt([self.visit(x) for x in s.seq])
        if isinstance(s, S.BufferStore):
            indices = [ev.index(i) for i in s.indices]
            if all(i.lanes == 1 for i in indices):
                raise _CannotVectorize(f"store to {s.buffer.name} does not depend on "
                                       f"{ev.var.name} (a reduction)", serial=True)
            for i in indices:
                if isinstance(i, E.Ramp) and not (isinstance(i.stride, E.IntImm)
                                                  and i.stride.value != 0):
                    raise _CannotVectorize(f"store stride {i.stride} is not a non-zero "
                                           f"constant")
            value = ev.widen(ev.simp.visit(ev.visit(s.value)))
            self.stores.setdefault(id(s.buffer), set()).add(
                tuple(struct_key(i) for i in indices))
            if self.mask is not None:
                if _divides_by_a_variable(value) or any(_divides_by_a_variable(i)
                                                         for i in indices):
                    raise _CannotVectorize("a masked statement divides by a variable")
                if not _contiguous(indices):
                    raise _CannotVectorize(f"a masked store to {s.buffer.name} is not "
                                           f"contiguous")
                value = E.Call(MASKED_STORE, [_mask_loads(value, self.mask), self.mask],
                               value.dtype)
            return S.BufferStore(s.buffer, value, indices)
        if isinstance(s, S.LetStmt):
            value = ev.visit(s.value)
            if value.lanes == 1:
                return S.LetStmt(s.var, value, self.visit(s.body))
            return self.visit(substitute(s.body, {s.var: s.value}))
        if isinstance(s, S.IfThenElse):
            cond = ev.simp.visit(ev.visit(s.condition))
            if cond.lanes != 1:
                return self.masked(s, cond)
            other = self.visit(s.else_case) if s.else_case is not None else None
            return S.IfThenElse(cond, self.visit(s.then_case), other)
        raise _CannotVectorize(f"cannot vectorize a {type(s).__name__}")

    def masked(self, s: S.IfThenElse, cond: E.PrimExpr) -> S.Stmt:
        """The guard of a partial vector as a mask over its statements (module doc)."""
        lead = _first_lane_condition(cond) if self.predicate else None
        if lead is None or s.else_case is not None or self.mask is not None:
            raise _CannotVectorize(f"condition {s.condition} depends on {self.ev.var.name}")
        self.mask = cond
        try:
            body = self.visit(s.then_case)
        finally:
            self.mask = None
        return S.IfThenElse(self.ev.simp.visit(lead), body)

    def check_dependences(self, body: S.Stmt) -> None:
        """Every load from a buffer the body writes must read exactly the stored lanes."""
        for ld in _loads(body):
            keys = self.stores.get(id(ld.buffer))
            if keys is None:
                continue
            key = tuple(struct_key(i) for i in ld.indices)
            if keys != {key}:
                raise _CannotVectorize(f"{ld.buffer.name} is written and read at different "
                                       f"indices")
        for keys in self.stores.values():
            if len(keys) > 1:
                raise _CannotVectorize("a buffer is stored at different indices")


class _Vectorizer(StmtScopedMutator):
    def __init__(self, max_lanes: int, func: S.PrimFunc | None = None,
                 predicate: bool = False) -> None:
        super().__init__(func)
        self.max_lanes = max_lanes
        self.predicate = predicate

    def visit_For(self, s: S.For) -> Any:
        new = super().visit_For(s)
        if not isinstance(new, S.For) or new.kind != S.ForKind.VECTORIZED:
            return new
        try:
            return self.try_vectorize(new)
        except _CannotVectorize as err:
            return _fallback(new, serial=err.serial)

    def try_vectorize(self, s: S.For) -> S.Stmt:
        ext = s.extent
        if not isinstance(ext, E.IntImm) or ext.value > self.max_lanes or ext.value < 1:
            raise _CannotVectorize(f"extent {ext} is not a constant in [1, {self.max_lanes}]",
                                   serial=True)
        if ext.value == 1:
            return substitute(s.body, {s.loop_var: s.min})
        lanes = ext.value
        simp = self.simplifier(memo=True)
        ramp = E.Ramp(s.min, E.IntImm(1, s.loop_var.dtype), lanes)
        ev = _ExprVectorizer(s.loop_var, ramp, simp)
        sv = _StmtVectorizer(ev, self.predicate)
        body = sv.visit(s.body)
        sv.check_dependences(body)
        return body


def _fallback(s: S.For, serial: bool) -> S.For:
    small = (not serial and isinstance(s.extent, E.IntImm)
             and s.extent.value <= FALLBACK_UNROLL_EXTENT
             and stmt_count(s.body) * s.extent.value <= 2048)
    kind = S.ForKind.UNROLLED if small else S.ForKind.SERIAL
    return S.For(s.loop_var, s.min, s.extent, kind, s.body, s.thread_tag, s.annotations)


def vectorize(func: S.PrimFunc, max_lanes: int = MAX_LANES,
              predicate: bool = False) -> S.PrimFunc:
    """``func`` with its ``VECTORIZED`` loops turned into vector code (or safe fallbacks);
    ``predicate``: partial vectors' guards become masks (module doc)."""
    return func.with_body(_Vectorizer(max_lanes, func, predicate).visit(func.body))
