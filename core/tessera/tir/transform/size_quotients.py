"""Quotients of run-time sizes named once: each ``//``, ``%``, ``min`` and ``max`` of a
symbolic kernel's size variables that a buffer's shape holds becomes a variable bound at the
function's top.

A kernel deep in a symbolic CNN sees its image as ``((((height + 1) // 2 + 1) // 2 + 1) // 2
+ 1) // 2`` rows, and a Winograd convolution tiles that again (``(rows + 3) // 4``); every
flattened index, loop extent and guard of the kernel repeats those chains, so each pass after
flattening (partitioning, vectorization, unrolling, the simplifier) re-derived them in every
statement: half of a symbolic CNN's compile. :func:`bind_size_quotients` binds each
distinct quotient that appears in a buffer's shape (made of size variables and constants,
inner quotients first) to a variable with a ``LetStmt`` at the top of the body, and writes
that variable wherever the quotient appears in the body. Quotients a schedule made (a
sequence split by its tile, ``seq // 12`` and ``seq % 12``) stay as they are: the simplifier
proves facts from their relation (``seq - seq % 12`` is a multiple of 12). What the passes
reason with stays visible: a sum or product of sizes keeps its structure around the new
variables (``batch * tiles_h * tiles_w``), and the simplifier knows each variable's range and
value from its ``LetStmt``. Buffer shapes keep their expressions (memory is planned from
them, and the parameters describe the caller's arrays).

The CPU pipeline runs it first, before the simplifier, and again after flattening (whose
strides come from the shapes); :func:`~tessera.tir.transform.hoist_sizes.hoist_size_exprs`
later binds what remains of the size expressions.
"""

from __future__ import annotations

from typing import Any

from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.arith import struct_key
from tessera.tir.functor import IRMutator, nodes_of, post_order_visit, rebuild

__all__ = ["PREFIX", "bind_size_quotients"]

#: The names of the variables it binds start with this.
PREFIX = "sq"
#: The operations whose results it names.
_QUOTIENTS = (E.FloorDiv, E.FloorMod, E.Min, E.Max)
#: Operations a size expression is made of, besides variables and integer constants.
_PURE = (E.BinaryOp, E.Cast)


class _Namer(IRMutator):
    def __init__(self, size_vars: list[E.Var], dims: set[Any]) -> None:
        #: Variables a size expression may read: the size variables and the names made.
        self.sizes: set[E.Var] = set(size_vars)
        #: struct_key of each quotient in a buffer's shape: the ones to name.
        self.dims = dims
        #: struct_key of a quotient (its inner quotients named) -> (variable, value).
        self.named: dict[Any, tuple[E.Var, E.PrimExpr]] = {}
        #: id(node) -> (node, whether it is made of sizes only); the node keeps its id.
        self._pure: dict[int, tuple[Any, bool]] = {}
        #: id(node) -> (node, what it became).
        self._done: dict[int, tuple[Any, Any]] = {}

    def _of_sizes(self, e: Any) -> bool:
        """Whether ``e`` is an integer scalar made of size variables, constants and
        arithmetic (with at least one variable or not: constants are cheap either way)."""
        if isinstance(e, E.Var):
            return e in self.sizes
        if isinstance(e, E.IntImm):
            return True
        if not isinstance(e, _PURE) or not E.is_int(e.dtype) or e.lanes != 1:
            return False
        hit = self._pure.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        if isinstance(e, E.BinaryOp):
            out = self._of_sizes(e.a) and self._of_sizes(e.b)
        else:
            out = self._of_sizes(e.value)
        self._pure[id(e)] = (e, out)
        return out

    def visit(self, node: Any) -> Any:
        if not isinstance(node, E.PrimExpr) or isinstance(node, E.Var | E.IntImm):
            return super().visit(node)
        hit = self._done.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        if self._of_sizes(node):
            out = self._name(node)
        else:
            out = super().visit(node)
        self._done[id(node)] = (node, out)
        return out

    def _name(self, e: E.PrimExpr) -> E.PrimExpr:
        """A size expression with each quotient in it (and itself, when it is one) a named
        variable."""
        inner = rebuild(e, self.visit)
        if not isinstance(inner, _QUOTIENTS) or struct_key(e) not in self.dims:
            return inner
        key = struct_key(inner)
        hit = self.named.get(key)
        if hit is None:
            var = E.Var(f"{PREFIX}{len(self.named)}", inner.dtype)
            hit = self.named[key] = (var, inner)
            self.sizes.add(var)
        return hit[0]


def _shape_quotients(func: S.PrimFunc) -> set[Any]:
    """The struct_keys of the quotients with variables in the shapes of ``func``'s buffers
    (parameters and allocations)."""
    keys: set[Any] = set()

    def dims(shape: tuple[E.PrimExpr, ...]) -> None:
        for d in shape:
            post_order_visit(d, lambda n: keys.add(struct_key(n))
                             if isinstance(n, _QUOTIENTS) and _has_var(n) else None)

    for p in func.params:
        dims(p.shape)
    stack: list[Any] = [func.body]
    while stack:  # the statements only: allocations are not inside expressions
        s = stack.pop()
        if isinstance(s, S.SeqStmt):
            stack.extend(s.seq)
        elif isinstance(s, S.IfThenElse):
            stack.extend(x for x in (s.then_case, s.else_case) if x is not None)
        elif isinstance(s, S.For | S.LetStmt):
            stack.append(s.body)
        elif isinstance(s, S.Allocate):
            dims(s.buffer.shape)
            stack.append(s.body)
    return keys


def _has_var(e: E.PrimExpr) -> bool:
    return bool(nodes_of(e, E.Var))


def bind_size_quotients(func: S.PrimFunc) -> S.PrimFunc:
    """``func`` with each quotient of its size variables bound once at the top of its body
    (see the module doc); ``func`` itself when it has no size variables or no quotient."""
    if not func.size_vars:
        return func
    dims = _shape_quotients(func)
    if not dims:
        return func
    namer = _Namer(list(func.size_vars), dims)
    body = namer.visit(func.body)
    if not namer.named:
        return func
    for var, value in reversed(list(namer.named.values())):
        body = S.LetStmt(var, value, body)
    return func.with_body(body)
