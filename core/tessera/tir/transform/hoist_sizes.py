"""Integer index expressions computed once, where their variables are bound (CSE and loop-
invariant code motion of index arithmetic; TVM's ``CommonSubexprElimTIR``).

A kernel with run-time extents (``PrimFunc.size_vars``) carries the same expressions of its
sizes in every index of every unrolled statement: the tile count of a symbolic Winograd
convolution, ``(((((height + 1) // 2) + 1) // 2) + 3) // 4``, and the tile's position
``tile // that``, appear in each of the hundreds of loads and stores of its transforms. Code
generation emits an expression where it meets it, so such a kernel reached LLVM as 100k+
lines of IR whose common subexpressions O3 then spent seconds finding again.

:func:`hoist_size_exprs` gives every integer scalar subexpression made of variables,
constants and arithmetic (no load, no call) a variable bound by a ``LetStmt`` at the top of
the scope of its innermost variable: the function's body for expressions of size variables
only, else the body of the serial or parallel loop (or ``LetStmt``) that binds the innermost
variable it reads. Equal expressions in one scope share one variable; an expression's own
parts that belong to an outer scope are bound there. Buffer shapes keep their expressions
(memory is planned from them). Division in these expressions cannot trap (a backend's integer
division gives 0 for a zero divisor), so computing them ahead of the statement that used
them, even when a condition skipped it, is safe.

Run it last, after the passes that prove facts about these expressions (the simplifier,
loop partitioning and vectorization read their structure; a let-bound variable hides it).
"""

from __future__ import annotations

from typing import Any

from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.arith import struct_key
from tessera.tir.functor import IRMutator, rebuild, substitute
from tessera.tir.transform.size_quotients import PREFIX as QUOTIENT_PREFIX

#: Operations a hoisted expression is made of, besides variables and integer constants.
_PURE = (E.BinaryOp, E.Not, E.Select, E.Cast)
#: Loops whose bodies can hold let statements (the others' variables are never hoisted).
_SCOPED = (S.ForKind.SERIAL, S.ForKind.PARALLEL)
#: The names of the variables it binds start with this.
PREFIX = "cse"
#: The depth of an expression without variables.
_CONSTANT = -1


class _Hoist(IRMutator):
    def __init__(self, size_vars: list[E.Var], sizes_only: bool = False) -> None:
        #: Bind only expressions of the size variables (at the top of the function).
        self.sizes_only = sizes_only
        #: The scope each variable is bound in (0: the function's body); None: not hoistable.
        self.depth_of: dict[E.Var, int | None] = {v: 0 for v in size_vars}
        #: Per open scope (outermost first): struct_key -> (variable, expression).
        self.scopes: list[dict[Any, tuple[E.Var, E.PrimExpr]]] = [{}]
        #: id(node) -> (node, depth) within the current scope (cleared when scopes change;
        #: the node is kept so that its id is not reused).
        self._depths: dict[int, tuple[Any, int | None]] = {}
        self.count = 0

    # -- which scope an expression belongs to --------------------------------------------------
    def _depth(self, e: Any) -> int | None:
        """The scope of ``e``'s innermost variable; :data:`_CONSTANT` without variables;
        None when ``e`` reads memory, calls, or uses a variable bound elsewhere."""
        if isinstance(e, E.Var):
            return self.depth_of.get(e)
        if isinstance(e, E.IntImm):
            return _CONSTANT
        if not isinstance(e, _PURE) or e.lanes != 1:
            return None
        hit = self._depths.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        depth: int | None = _CONSTANT
        for k in _operands(e):
            d = self._depth(k)
            if d is None:
                depth = None
                break
            depth = max(depth, d)
        self._depths[id(e)] = (e, depth)
        return depth

    def _hoistable(self, e: Any) -> int | None:
        """The scope to bind ``e`` in, None when ``e`` stays where it is."""
        if not isinstance(e, _PURE) or not E.is_int(e.dtype) or e.lanes != 1:
            return None
        d = self._depth(e)
        if d is None or d == _CONSTANT or (self.sizes_only and d > 0):
            return None
        return d

    def _bound(self, e: E.PrimExpr, depth: int) -> E.Var:
        """The variable bound to ``e`` in scope ``depth`` (made on first use)."""
        lets = self.scopes[depth]
        key = struct_key(e)
        hit = lets.get(key)
        if hit is None:
            value = rebuild(e, lambda k: self._outer(k, depth))
            hit = lets[key] = (E.Var(f"{PREFIX}{self.count}", e.dtype), value)
            self.count += 1
        return hit[0]

    def _outer(self, e: Any, depth: int) -> Any:
        """A part of an expression bound in scope ``depth``: its parts of outer scopes
        bound there, the rest kept in place."""
        d = self._hoistable(e)
        if d is None:
            return e
        if d < depth:
            return self._bound(e, d)
        return rebuild(e, lambda k: self._outer(k, depth))

    # -- traversal ---------------------------------------------------------------------------
    def visit(self, node: Any) -> Any:
        d = self._hoistable(node)
        if d is not None:
            return self._bound(node, d)
        return super().visit(node)

    def _scoped(self, var: E.Var, body: S.Stmt) -> S.Stmt:
        """``body`` visited in a new scope binding ``var``, its lets around it."""
        self.scopes.append({})
        self.depth_of[var] = len(self.scopes) - 1
        self._depths = {}
        try:
            out = self.visit(body)
        finally:
            lets = self.scopes.pop()
            self._depths = {}
        return _wrap(lets, out)

    def visit_For(self, s: S.For) -> S.Stmt:
        mn, extent = self.visit(s.min), self.visit(s.extent)
        if s.kind in _SCOPED:
            body = self._scoped(s.loop_var, s.body)
        else:
            self.depth_of[s.loop_var] = None
            body = self.visit(s.body)
        if mn is s.min and extent is s.extent and body is s.body:
            return s
        return S.For(s.loop_var, mn, extent, s.kind, body, s.thread_tag, s.annotations)

    def visit_LetStmt(self, s: S.LetStmt) -> S.Stmt:
        value = self.visit(s.value)
        body = self._scoped(s.var, s.body)
        if value is s.value and body is s.body:
            return s
        return S.LetStmt(s.var, value, body)


def _operands(e: Any) -> list[Any]:
    if isinstance(e, E.BinaryOp):
        return [e.a, e.b]
    if isinstance(e, E.Not):
        return [e.a]
    if isinstance(e, E.Select):
        return [e.condition, e.true_value, e.false_value]
    return [e.value]


def _wrap(lets: dict[Any, tuple[E.Var, E.PrimExpr]], body: S.Stmt) -> S.Stmt:
    for var, value in reversed(list(lets.values())):
        body = S.LetStmt(var, value, body)
    return body


def hoist_size_exprs(func: S.PrimFunc, sizes_only: bool = False) -> S.PrimFunc:
    """``func`` with its integer index expressions bound once per scope (see the module
    doc), or with ``sizes_only`` only those of its size variables alone (at the top); ``func``
    itself when it has no size variables (a static function's expressions are constants
    folded already, or read loop variables LLVM's own passes handle well)."""
    if not func.size_vars:
        return func
    hoist = _Hoist(list(func.size_vars), sizes_only)
    inner = hoist.visit(func.body)
    body = _wrap(hoist.scopes[0], inner)
    return func if body is func.body else func.with_body(body)


def inline_size_lets(func: S.PrimFunc) -> S.PrimFunc:
    """``func`` with the let statements :func:`hoist_size_exprs` and
    :func:`~tessera.tir.transform.size_quotients.bind_size_quotients` added substituted back:
    the function as the passes before them saw it (what tests and readers compare expressions
    of run-time sizes in)."""

    class _Inline(IRMutator):
        def __init__(self) -> None:
            self.vmap: dict[E.Var, Any] = {}

        def visit_LetStmt(self, s: S.LetStmt) -> Any:
            if not s.var.name.startswith((PREFIX, QUOTIENT_PREFIX)):
                return self.generic_visit(s)
            self.vmap[s.var] = substitute(s.value, self.vmap)
            return self.visit(s.body)

        def visit_Var(self, v: E.Var) -> Any:
            return self.vmap.get(v, v)

    body = _Inline().visit(func.body)
    return func if body is func.body else func.with_body(body)
