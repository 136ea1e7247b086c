"""Remove bounds checks that always hold (or never do) inside their loops.

The TE lowering guards loads and stores of non-divisible splits, padding and ``compute_at``
regions with ``if``s and ``select``s. This pass drops every condition that is decided:

* by the simplifier, which bounds each variable by its enclosing loops, lets and ifs;
* failing that, by checking it exhaustively: when a condition depends only on loop variables
  with constant ranges (lets are inlined) and those ranges hold at most ``max_points`` points
  together, it is evaluated on all of them at once with numpy; a condition true everywhere is
  removed, one false everywhere takes the other branch. This decides conditions that interval
  analysis cannot, such as ``(i*3 + j) % 7 < 7`` or ``(io*4 + ii) // 2 < 8``.

Conditions that read buffers are never decided by evaluation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.arith import INF
from tessera.tir.functor import post_order_visit, substitute
from tessera.tir.interpreter import _Interpreter
from tessera.tir.simplify import Simplifier, is_no_op

__all__ = ["remove_redundant_checks", "decide_by_enumeration"]

#: The largest iteration space a condition is checked on point by point.
MAX_POINTS = 1 << 16


def decide_by_enumeration(cond: E.PrimExpr, ranges: dict[E.Var, tuple[Any, Any]],
                          max_points: int = MAX_POINTS) -> bool | None:
    """True/False when ``cond`` holds at every/no point of ``ranges`` (inclusive), None when
    it varies or cannot be enumerated (unbounded or unknown variables, loads, vectors)."""
    if cond.lanes != 1:
        return None
    free: list[E.Var] = []
    blocked = False

    def f(n: Any) -> None:
        nonlocal blocked
        if isinstance(n, E.BufferLoad | E.ProducerLoad | E.Ramp | E.Broadcast | E.Call):
            blocked = True
        elif isinstance(n, E.Var) and n not in free:
            free.append(n)

    post_order_visit(cond, f)
    bound_inside: set[E.Var] = set()
    post_order_visit(cond, lambda n: bound_inside.add(n.var) if isinstance(n, E.Let) else None)
    free = [v for v in free if v not in bound_inside]
    if blocked or not free:
        return None
    total = 1
    for v in free:
        lo, hi = ranges.get(v, (-INF, INF))
        if lo == -INF or hi == INF or hi < lo:
            return None
        total *= int(hi - lo + 1)
        if total > max_points:
            return None
    interp = _Interpreter()
    for axis, v in enumerate(free):
        lo, hi = ranges[v]
        shape = [1] * len(free)
        shape[axis] = int(hi - lo + 1)
        interp.env[v] = np.arange(int(lo), int(hi) + 1, dtype=np.dtype(v.dtype)).reshape(shape)
    with np.errstate(all="ignore"):
        try:
            values = np.asarray(interp.eval(cond), dtype=bool)
        except (NotImplementedError, ValueError, TypeError, KeyError, NameError):
            return None
    if values.all():
        return True
    if not values.any():
        return False
    return None


class _CheckRemover(Simplifier):
    """The simplifier plus enumeration, with lets remembered for inlining into conditions."""

    def __init__(self, max_points: int, func: S.PrimFunc | None = None) -> None:
        if func is None:
            super().__init__()
        else:  # the size variables' ranges, as simplify(func) starts with
            super().__init__(func.var_bounds(), size_vars=func.size_vars)
        self.max_points = max_points
        self.lets: dict[E.Var, E.PrimExpr] = {}
        self.loop_vars: set[E.Var] = set()

    def decide(self, cond: E.PrimExpr) -> bool | None:
        inlined = cond
        for _ in range(8):  # lets may refer to earlier lets
            nxt = substitute(inlined, self.lets)
            if nxt is inlined:
                break
            inlined = nxt
        ranges = {v: self.bounds[v] for v in self.loop_vars if v in self.bounds}
        return decide_by_enumeration(inlined, ranges, self.max_points)

    def visit_For(self, s: S.For) -> Any:
        self.loop_vars.add(s.loop_var)
        try:
            return super().visit_For(s)
        finally:
            self.loop_vars.discard(s.loop_var)

    def visit_LetStmt(self, s: S.LetStmt) -> Any:
        self.lets[s.var] = s.value
        try:
            return super().visit_LetStmt(s)
        finally:
            self.lets.pop(s.var, None)

    def visit_IfThenElse(self, s: S.IfThenElse) -> S.Stmt:
        cond = self.visit(s.condition)
        decided = self.decide(cond) if not isinstance(cond, E.IntImm) else None
        if decided is True:
            return self.visit(s.then_case)
        if decided is False:
            if s.else_case is None:
                return S.Evaluate(E.IntImm(0, "int32"))
            return self.visit(s.else_case)
        out = super().visit_IfThenElse(s)
        return out if not is_no_op(out) else S.Evaluate(E.IntImm(0, "int32"))

    def visit_Select(self, e: E.Select) -> E.PrimExpr:
        cond = self.visit(e.condition)
        decided = self.decide(cond) if not isinstance(cond, E.IntImm) else None
        if decided is not None:
            chosen = self.visit(e.true_value if decided else e.false_value)
            return chosen if chosen.lanes == e.lanes else E.Broadcast(chosen, e.lanes)
        return super().visit_Select(e)


def remove_redundant_checks(func: S.PrimFunc, max_points: int = MAX_POINTS) -> S.PrimFunc:
    """``func`` without the ``if``/``select`` conditions its loop ranges decide."""
    return func.with_body(_CheckRemover(max_points, func).visit(func.body))
