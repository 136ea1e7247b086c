"""Shared helpers of the TIR passes: a mutator that tracks the ranges of enclosing loop and
let variables, fresh copies of binders, and buffer collection."""

from __future__ import annotations

from typing import Any

from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.arith import INF, _norm, interval_of
from tessera.tir.functor import IRMutator, Substitute, post_order_visit
from tessera.tir.simplify import Simplifier, SymBound


class ScopedMutator(IRMutator):
    """An :class:`IRMutator` whose ``bounds`` hold the ranges of the loop and let variables
    around the node being visited (what the simplifier and the provers need).

    Given the function it walks, it starts with the ranges of the function's size variables
    and, in a symbolic function, also tracks the symbolic ranges of loops whose bounds are
    symbolic (``sym``); :meth:`simplifier` makes a :class:`Simplifier` that knows both."""

    def __init__(self, func: S.PrimFunc | None = None) -> None:
        self.bounds: dict[E.Var, tuple[Any, Any]] = {}
        self.size_vars: list[E.Var] = []
        self.sym: dict[E.Var, list[SymBound]] = {}
        if func is not None:
            self.size_vars = list(func.size_vars)
            self.bounds.update({v: _norm(b) for v, b in func.var_bounds().items()})

    def simplifier(self, memo: bool = False) -> Simplifier:
        """A simplifier for the node being visited (its ranges, constant and symbolic)."""
        return Simplifier(self.bounds, memo=memo, sym_bounds=self.sym,
                          size_vars=self.size_vars)

    def loop_range(self, s: S.For) -> tuple[Any, Any]:
        """The inclusive range of ``s``'s variable."""
        lo, hi = interval_of(s.min, self.bounds)
        _, ext_hi = interval_of(s.extent, self.bounds)
        return lo, hi + ext_hi - 1

    def _sym_for(self, var: E.Var, bound: SymBound | None) -> bool:
        if bound is None:
            return False
        self.sym.setdefault(var, []).append(bound)
        return True

    def _sym_pop(self, var: E.Var) -> None:
        stack = self.sym[var]
        stack.pop()
        if not stack:
            del self.sym[var]

    def visit_For(self, s: S.For) -> Any:
        saved = self.bounds.get(s.loop_var)
        pushed = self.size_vars and self._sym_for(
            s.loop_var, self.simplifier().loop_sym_bound(s.min, s.extent))
        self.bounds[s.loop_var] = self.loop_range(s)
        try:
            return self.generic_visit(s)
        finally:
            _restore(self.bounds, s.loop_var, saved)
            if pushed:
                self._sym_pop(s.loop_var)

    def visit_LetStmt(self, s: S.LetStmt) -> Any:
        saved = self.bounds.get(s.var)
        value = s.value
        is_index = E.is_int(value.dtype) and value.lanes == 1
        pushed = bool(self.size_vars) and is_index and self._sym_for(
            s.var, (value, value) if self.simplifier().is_symbolic(value) else None)
        self.bounds[s.var] = interval_of(value, self.bounds) if is_index else (-INF, INF)
        try:
            return self.generic_visit(s)
        finally:
            _restore(self.bounds, s.var, saved)
            if pushed:
                self._sym_pop(s.var)


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
