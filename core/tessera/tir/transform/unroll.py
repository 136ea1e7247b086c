"""Unroll loops (TVM's ``UnrollLoop``).

Every ``UNROLLED`` loop with a constant extent is replaced by one copy of its body per
iteration, with the loop variable replaced by the iteration's value and the copy simplified under
the enclosing loop ranges, so that index arithmetic on the variable folds to constants (an
accumulator tile ``acc[ii*4 + jj]`` becomes ``acc[0]``, ``acc[1]``, ... which LLVM keeps in
registers). Variables bound inside a copy are renamed so each copy is in single-assignment form.
Inner loops are unrolled before the loops around them.

``auto_max_extent > 0`` also unrolls innermost ``SERIAL`` loops (no loop inside) whose constant
extent is at most that value. ``UNROLLED`` loops with a non-constant extent, or whose unrolled
size would exceed ``max_nodes`` nodes, become ``SERIAL``.
"""

from __future__ import annotations

from typing import Any

from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.transform._util import StmtScopedMutator, copy_with, has_loop, stmt_count

__all__ = ["unroll", "MAX_UNROLLED_NODES"]

#: The largest unrolled loop (in IR nodes) the pass produces.
MAX_UNROLLED_NODES = 1 << 16


class _Unroller(StmtScopedMutator):
    def __init__(self, auto_max_extent: int, max_nodes: int,
                 func: S.PrimFunc | None = None) -> None:
        super().__init__(func)
        self.auto_max_extent = auto_max_extent
        self.max_nodes = max_nodes

    def visit_For(self, s: S.For) -> Any:
        new = super().visit_For(s)
        if not isinstance(new, S.For):
            return new
        unroll = new.kind == S.ForKind.UNROLLED or (
            new.kind == S.ForKind.SERIAL and isinstance(new.extent, E.IntImm)
            and 0 < new.extent.value <= self.auto_max_extent and not has_loop(new.body))
        if not unroll:
            return new
        ext = new.extent
        if not isinstance(ext, E.IntImm) or ext.value * stmt_count(new.body) > self.max_nodes:
            return S.For(new.loop_var, new.min, new.extent, S.ForKind.SERIAL, new.body,
                         new.thread_tag, new.annotations)
        simp = self.simplifier(memo=True)
        copies = []
        for k in range(ext.value):
            value = simp.visit(new.min + k) if k else new.min
            copies.append(simp.visit(copy_with(new.body, {new.loop_var: value})))
        return simp.visit(S.SeqStmt(copies)) if copies else S.SeqStmt([])


def unroll(func: S.PrimFunc, auto_max_extent: int = 0,
           max_nodes: int = MAX_UNROLLED_NODES) -> S.PrimFunc:
    """``func`` with its ``UNROLLED`` loops (and, with ``auto_max_extent``, its small innermost
    serial loops) expanded into straight-line code."""
    return func.with_body(_Unroller(auto_max_extent, max_nodes, func).visit(func.body))
