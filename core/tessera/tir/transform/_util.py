"""Shared helpers of the TIR passes: a mutator that tracks the ranges of enclosing loop and
let variables, fresh copies of binders, and buffer collection."""

from __future__ import annotations

from typing import Any

from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.arith import INF, interval_of
from tessera.tir.functor import IRMutator, Substitute, post_order_visit


class ScopedMutator(IRMutator):
    """An :class:`IRMutator` whose ``bounds`` hold the ranges of the loop and let variables
    around the node being visited (what the simplifier and the provers need)."""

    def __init__(self) -> None:
        self.bounds: dict[E.Var, tuple[Any, Any]] = {}

    def loop_range(self, s: S.For) -> tuple[Any, Any]:
        """The inclusive range of ``s``'s variable."""
        lo, hi = interval_of(s.min, self.bounds)
        _, ext_hi = interval_of(s.extent, self.bounds)
        return lo, hi + ext_hi - 1

    def visit_For(self, s: S.For) -> Any:
        saved = self.bounds.get(s.loop_var)
        self.bounds[s.loop_var] = self.loop_range(s)
        try:
            return self.generic_visit(s)
        finally:
            _restore(self.bounds, s.loop_var, saved)

    def visit_LetStmt(self, s: S.LetStmt) -> Any:
        saved = self.bounds.get(s.var)
        value = s.value
        is_index = E.is_int(value.dtype) and value.lanes == 1
        self.bounds[s.var] = interval_of(value, self.bounds) if is_index else (-INF, INF)
        try:
            return self.generic_visit(s)
        finally:
            _restore(self.bounds, s.var, saved)


class StmtScopedMutator(ScopedMutator):
    """A :class:`ScopedMutator` that rewrites statements only: it has no ``visit_`` method for
    an expression, so every expression would come back as the same object; it is returned
    without walking it."""

    def visit(self, node: Any) -> Any:
        if isinstance(node, E.PrimExpr):
            return node
        return super().visit(node)


def _restore(d: dict, key: Any, saved: Any) -> None:
    if saved is None:
        d.pop(key, None)
    else:
        d[key] = saved


class _Renamer(Substitute):
    """Substitutes variables and gives every binder (loop, let) inside a fresh variable."""

    def _fresh(self, var: E.Var) -> E.Var:
        new = E.Var(var.name, var.dtype)
        self.vmap[var] = new
        return new

    def visit_For(self, s: S.For) -> S.Stmt:
        mn, ext = self.visit(s.min), self.visit(s.extent)
        var = self._fresh(s.loop_var)
        return S.For(var, mn, ext, s.kind, self.visit(s.body), s.thread_tag, s.annotations)

    def visit_LetStmt(self, s: S.LetStmt) -> S.Stmt:
        value = self.visit(s.value)
        var = self._fresh(s.var)
        return S.LetStmt(var, value, self.visit(s.body))

    def visit_Let(self, e: E.Let) -> E.PrimExpr:
        value = self.visit(e.value)
        var = self._fresh(e.var)
        return E.Let(var, value, self.visit(e.body))


def copy_with(node: Any, vmap: dict[E.Var, Any]) -> Any:
    """A copy of ``node`` with ``vmap`` substituted and every variable bound inside it renamed
    to a fresh one (so copies of a loop body stay in single-assignment form)."""
    return _Renamer({k: E.convert(v, k.dtype) for k, v in vmap.items()}).visit(node)


def stmt_count(node: Any) -> int:
    """How many nodes ``node`` holds (a size measure for unrolling limits)."""
    n = 0

    def f(_: Any) -> None:
        nonlocal n
        n += 1

    post_order_visit(node, f)
    return n


def has_loop(node: Any) -> bool:
    """Whether ``node`` contains a ``For``."""
    found = False

    def f(n: Any) -> None:
        nonlocal found
        if isinstance(n, S.For):
            found = True

    post_order_visit(node, f)
    return found
