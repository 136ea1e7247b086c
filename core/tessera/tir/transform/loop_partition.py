"""Split loops around the guards of symbolic extents (TVM's ``LoopPartition``).

``te.lower`` guards the last, partial tile of a loop split by a run-time extent ``n``::

    for io in range((n + 7) // 8):
      for ii in range(8):  # vectorized
        if io*8 + ii < n:
          C[io*8 + ii] = A[io*8 + ii] + B[io*8 + ii]

The guard depends on ``ii``, so the vectorizer cannot turn the inner loop into vector code.
This pass splits such a loop into the range where every guard is provably true, with the guards
removed (the *main* loop, which vectorizes), and the ranges before and after it, where the
guards stay (*head* and *tail*)::

    for io in range(n // 8):                  # main: no guard
      for ii in range(8):  # vectorized
        C[io*8 + ii] = A[io*8 + ii] + B[io*8 + ii]
    for io in range(n // 8, (n + 7) // 8):   # tail: guarded
      for ii in range(8):  # vectorized
        if io*8 + ii < n: ...

A *guard* is a conjunct of an ``if`` condition or of a ``select`` condition anywhere in the loop
body: a comparison ``<``, ``<=``, ``>``, ``>=`` of integer expressions that is linear in the
loop variable ``v`` (a non-zero constant coefficient ``c``) and in the variables of the inner
loops around it (constant ranges), the rest invariant in the loop (no loads, no variables bound
inside it; lets inside the loop are inlined). Written ``c*v + q <= 0``, it holds for every value
of the inner variables when ``v <= (-max q) // c`` (``c > 0``) or ``v >= ceil(max q / -c)``
(``c < 0``); the main range is the intersection of these ranges over the loop's guards (clamped
to the loop's range, possibly empty), the head and tail the rest of the loop.

Loops partitioned: ``SERIAL`` and ``PARALLEL`` ones without a GPU ``Barrier`` inside
(vectorized, unrolled and thread-bound loops keep their shape). A ``PARALLEL`` loop's main
part stays parallel; its head and tail are serial (they hold the few partial iterations). The
main loop is partitioned again if other guards qualify; loops inside every part are partitioned
in turn (a 2-D tile guarded in both dimensions gives an unguarded main block). The main part,
without its guards, is simplified (a clamped index ``min(i, n - 1)`` becomes ``i``); every
other part gets fresh variables and fresh buffers for what it allocates.

Only symbolic guards are used unless ``partition_static``: a guard qualifies when its bound, or
the loop's range, mentions a run-time value (a size variable, a loop with a symbolic range), so
static kernels keep exactly the loop nests the other passes give them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.arith import Poly, to_poly, uses_var
from tessera.tir.buffer import Buffer
from tessera.tir.functor import IRMutator, post_order_visit, substitute
from tessera.tir.simplify import Simplifier, _div_bound, is_no_op
from tessera.tir.transform._util import StmtScopedMutator, copy_with

__all__ = ["loop_partition", "Guard", "find_guards"]

_PARTITIONED = (S.ForKind.SERIAL, S.ForKind.PARALLEL)


@dataclass(frozen=True)
class Guard:
    """A guard conjunct of a loop body: ``container`` is the ``IfThenElse`` or ``Select`` whose
    condition holds ``conjunct``; the conjunct is true for every value of the inner loop
    variables when the loop variable is ``>= lower`` (``c < 0``) or ``<= upper`` (``c > 0``)."""

    container: Any
    conjunct: E.PrimExpr
    lower: E.PrimExpr | None
    upper: E.PrimExpr | None
    symbolic: bool


def _bound_inside(node: Any) -> set[E.Var]:
    """Variables bound by loops, lets and ``Let`` expressions inside ``node``."""
    out: set[E.Var] = set()

    def f(n: Any) -> None:
        if isinstance(n, S.For):
            out.add(n.loop_var)
        elif isinstance(n, S.LetStmt | E.Let):
            out.add(n.var)

    post_order_visit(node, f)
    return out


def _opaque(e: E.PrimExpr) -> bool:
    """Whether ``e`` reads memory or binds variables (never a guard's invariant part)."""
    found = False

    def f(n: Any) -> None:
        nonlocal found
        if isinstance(n, E.BufferLoad | E.ProducerLoad | E.Call | E.Let | E.Reduce):
            found = True

    post_order_visit(e, f)
    return found


class _GuardFinder:
    """Collects the guards of one loop's body (module doc)."""

    def __init__(self, loop: S.For, simp: Simplifier, loop_symbolic: bool) -> None:
        self.var = loop.loop_var
        self.simp = simp
        self.loop_symbolic = loop_symbolic
        self.inside = _bound_inside(loop.body)
        self.guards: list[Guard] = []

    def stmt(self, s: Any, inner: dict[E.Var, tuple[int, int]],
             lets: dict[E.Var, E.PrimExpr]) -> None:
        if s is None:
            return
        if isinstance(s, S.SeqStmt):
            for x in s.seq:
                self.stmt(x, inner, lets)
        elif isinstance(s, S.For):
            self.exprs([s.min, s.extent], inner, lets)
            if isinstance(s.min, E.IntImm) and isinstance(s.extent, E.IntImm):
                if s.extent.value <= 0:
                    return  # never runs
                rng = (s.min.value, s.min.value + s.extent.value - 1)
                self.stmt(s.body, {**inner, s.loop_var: rng}, lets)
            else:  # its variable has no constant range: guards that use it do not qualify
                self.stmt(s.body, inner, lets)
        elif isinstance(s, S.IfThenElse):
            self.cond(s, s.condition, inner, lets)
            self.stmt(s.then_case, inner, lets)
            self.stmt(s.else_case, inner, lets)
        elif isinstance(s, S.LetStmt):
            self.exprs([s.value], inner, lets)
            value = substitute(s.value, lets) if lets else s.value
            if E.is_int(value.dtype) and value.lanes == 1:
                lets = {**lets, s.var: value}
            self.stmt(s.body, inner, lets)
        elif isinstance(s, S.Allocate):
            self.stmt(s.body, inner, lets)
        elif isinstance(s, S.BufferStore):
            self.exprs([s.value, *s.indices], inner, lets)
        elif isinstance(s, S.Evaluate):
            self.exprs([s.value], inner, lets)

    def exprs(self, es: list[E.PrimExpr], inner: dict[E.Var, tuple[int, int]],
              lets: dict[E.Var, E.PrimExpr]) -> None:
        selects: list[E.Select] = []
        for e in es:
            post_order_visit(e, lambda n: selects.append(n) if isinstance(n, E.Select)
                             else None)
        for sel in selects:
            if sel.condition.lanes == 1:
                self.cond(sel, sel.condition, inner, lets)

    def cond(self, container: Any, cond: E.PrimExpr, inner: dict[E.Var, tuple[int, int]],
             lets: dict[E.Var, E.PrimExpr]) -> None:
        for c in E.conjuncts(cond):
            g = self.guard(container, c, inner, lets)
            if g is not None:
                self.guards.append(g)

    def guard(self, container: Any, c: E.PrimExpr, inner: dict[E.Var, tuple[int, int]],
              lets: dict[E.Var, E.PrimExpr]) -> Guard | None:
        if not isinstance(c, E.LT | E.LE | E.GT | E.GE) or c.lanes != 1:
            return None
        if c.a.dtype != self.var.dtype or E.is_unsigned(c.a.dtype):
            return None
        a, b = c.a, c.b
        if lets:
            for _ in range(8):  # lets may refer to earlier lets
                na, nb = substitute(a, lets), substitute(b, lets)
                if na is a and nb is b:
                    break
                a, b = na, nb
        if _opaque(a) or _opaque(b):
            return None
        p = to_poly(a).add(to_poly(b), -1)  # p OP 0
        if isinstance(c, E.GT | E.GE):
            p = p.scale(-1)
        if isinstance(c, E.LT | E.GT):  # p < 0  <=>  p + 1 <= 0
            p = p.add(Poly(p.dtype, 1))
        coef = 0
        rest = Poly(p.dtype, p.const)  # the invariant part
        inner_max = 0
        for key, (k, atoms) in p.terms.items():
            if len(atoms) == 1 and atoms[0] is self.var:
                coef = k
            elif len(atoms) == 1 and atoms[0] in inner:
                lo, hi = inner[atoms[0]]
                inner_max += k * (hi if k > 0 else lo)
            elif any(uses_var(x, self.var) or self._uses(x, self.inside) for x in atoms):
                return None
            else:
                rest.terms[key] = [k, list(atoms)]
        if coef == 0:
            return None
        symbolic = self.loop_symbolic or self.simp.is_symbolic(rest)
        q = rest.add(Poly(p.dtype, inner_max))  # coef*v + q <= 0 for every inner value
        if coef > 0:
            return Guard(container, c, None, _div_bound(q.scale(-1), coef, p.dtype), symbolic)
        return Guard(container, c, _div_bound(q, -coef, p.dtype, ceil=True), None, symbolic)

    @staticmethod
    def _uses(e: E.PrimExpr, vs: set[E.Var]) -> bool:
        if not vs:
            return False
        found = False

        def f(n: Any) -> None:
            nonlocal found
            if isinstance(n, E.Var) and n in vs:
                found = True

        post_order_visit(e, f)
        return found


def find_guards(loop: S.For, simp: Simplifier | None = None) -> list[Guard]:
    """The guards of ``loop``'s body (module doc), with bounds in terms of variables defined
    outside the loop; ``simp`` (the context of the loop) tells which are symbolic."""
    simp = simp if simp is not None else Simplifier()
    symbolic = simp.is_symbolic(loop.min) or simp.is_symbolic(loop.extent)
    finder = _GuardFinder(loop, simp, symbolic)
    finder.stmt(loop.body, {}, {})
    return finder.guards


class _DropGuards(IRMutator):
    """Removes the chosen conjuncts (by container and conjunct identity)."""

    def __init__(self, drop: set[tuple[int, int]]) -> None:
        self.drop = drop

    def kept(self, container: Any, cond: E.PrimExpr) -> list[E.PrimExpr] | None:
        parts = E.conjuncts(cond)
        keep = [c for c in parts if (id(container), id(c)) not in self.drop]
        return None if len(keep) == len(parts) else keep

    def visit_IfThenElse(self, s: S.IfThenElse) -> S.Stmt:
        keep = self.kept(s, s.condition)
        if keep is None:
            return self.generic_visit(s)
        then = self.visit(s.then_case)
        other = self.visit(s.else_case)
        if not keep:
            return then
        return S.IfThenElse(self.visit(E.all_of(*keep)), then, other)

    def visit_Select(self, e: E.Select) -> E.PrimExpr:
        keep = self.kept(e, e.condition)
        if keep is None:
            return self.generic_visit(e)
        t = self.visit(e.true_value)
        if not keep:
            return t if t.lanes == e.lanes else E.Broadcast(t, e.lanes)
        return E.Select(self.visit(E.all_of(*keep)), t, self.visit(e.false_value))


def _has_barrier(node: Any) -> bool:
    found = False

    def f(n: Any) -> None:
        nonlocal found
        if isinstance(n, S.Barrier):
            found = True

    post_order_visit(node, f)
    return found


class _FreshAllocations(IRMutator):
    """Gives every buffer allocated inside a copied statement a new Buffer (a copy of a loop
    must not allocate the very buffer its original allocates: once hoisted, one would be
    nested in the other)."""

    def __init__(self) -> None:
        self.map: dict[int, Buffer] = {}

    def visit_Allocate(self, s: S.Allocate) -> S.Stmt:
        b = s.buffer
        new = Buffer(b.name, b.shape, b.dtype, strides=b.strides, scope=b.scope,
                     elem_offset=b.elem_offset)
        saved = self.map.get(id(b))
        self.map[id(b)] = new
        try:
            return S.Allocate(new, self.visit(s.body))
        finally:
            if saved is None:
                del self.map[id(b)]
            else:
                self.map[id(b)] = saved

    def visit_BufferLoad(self, e: E.BufferLoad) -> E.PrimExpr:
        new = self.generic_visit(e)
        b = self.map.get(id(e.buffer))
        return E.BufferLoad(b, new.indices) if b is not None else new

    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        new = self.generic_visit(s)
        b = self.map.get(id(s.buffer))
        return S.BufferStore(b, new.value, new.indices) if b is not None else new


class _Partitioner(StmtScopedMutator):
    def __init__(self, func: S.PrimFunc, partition_static: bool) -> None:
        super().__init__(func)
        self.partition_static = partition_static
        #: loops (head and tail parts) not to partition again on their own variable
        self.done: set[E.Var] = set()

    def visit_For(self, s: S.For) -> Any:
        if s.kind in _PARTITIONED and s.loop_var not in self.done:
            out = self.partition(s)
            if out is not None:
                return out
        return super().visit_For(s)

    def partition(self, s: S.For) -> S.Stmt | None:
        if _has_barrier(s.body):
            return None  # parts of different lengths per thread would split the barriers
        simp = self.simplifier()
        guards = [g for g in find_guards(s, simp) if g.symbolic or self.partition_static]
        if not guards:
            return None
        start, end = s.min, simp.visit(s.min + s.extent)
        lowers = [g.lower for g in guards if g.lower is not None]
        uppers = [g.upper for g in guards if g.upper is not None]
        lo: E.PrimExpr = start
        for x in lowers:
            lo = E.max_(lo, x)
        if lowers:
            lo = simp.visit(E.min_(lo, end))
        hi: E.PrimExpr = end
        for x in uppers:
            hi = E.min_(hi, x + 1)
        if uppers:
            hi = simp.visit(E.max_(hi, lo))
        main_ext = simp.visit(hi - lo)
        if isinstance(main_ext, E.IntImm) and main_ext.value <= 0:
            return None  # the guards hold nowhere: nothing to gain
        drop = {(id(g.container), id(g.conjunct)) for g in guards}
        body = _DropGuards(drop).visit(s.body)
        parts: list[S.Stmt] = []
        side_kind = S.ForKind.SERIAL if s.kind == S.ForKind.PARALLEL else s.kind
        if lowers:
            parts.append(self.side(s, start, simp.visit(lo - start), side_kind))
        main = self.visit(S.For(s.loop_var, lo, main_ext, s.kind, body, s.thread_tag,
                                s.annotations))
        # what the removed guards protected (clamped indices: min(i, n - 1)) simplifies now
        parts.append(self.simplifier().visit(main))
        if uppers:
            parts.append(self.side(s, hi, simp.visit(end - hi), side_kind))
        kept = [x for x in parts if not is_no_op(x)]
        return S.seq(*kept) if kept else S.Evaluate(E.IntImm(0, "int32"))

    def side(self, s: S.For, mn: E.PrimExpr, ext: E.PrimExpr, kind: S.ForKind) -> S.Stmt:
        """A head or tail part: the guarded body over ``[mn, mn + ext)``, fresh variables."""
        if isinstance(ext, E.IntImm) and ext.value <= 0:
            return S.Evaluate(E.IntImm(0, "int32"))
        var = E.Var(s.loop_var.name, s.loop_var.dtype)
        body = _FreshAllocations().visit(copy_with(s.body, {s.loop_var: var}))
        self.done.add(var)
        return self.visit(S.For(var, mn, ext, kind, body, s.thread_tag, s.annotations))


def loop_partition(func: S.PrimFunc, partition_static: bool = False) -> S.PrimFunc:
    """``func`` with its guarded loops split into unguarded main parts and guarded heads and
    tails (module doc). With ``partition_static``, guards with constant bounds in loops with
    constant ranges are used too (off by default: static kernels stay as they are)."""
    body = _Partitioner(func, partition_static).visit(func.body)
    return func if body is func.body else func.with_body(body)

