"""Visitors and mutators over TIR: the one traversal every pass builds on.

:class:`IRVisitor` walks every expression and statement; :class:`IRMutator` rebuilds a node only
when one of its children changed (so unchanged subtrees stay shared). Subclasses override
``visit_<NodeClass>`` methods (``visit_Add``, ``visit_For``, ...) and call ``self.visit`` on
children; the defaults recurse.
"""

from __future__ import annotations

from typing import Any

from tessera.tir import expr as E
from tessera.tir import stmt as S


def method_for(obj: Any, prefix: str, node: Any) -> Any:
    """The ``prefix + ClassName`` method of ``obj`` for ``node``'s class or its nearest base
    (so subclasses such as te.IterVar are handled as tir.Var)."""
    for cls in type(node).__mro__:
        method = getattr(obj, prefix + cls.__name__, None)
        if method is not None:
            return method
    return None


class IRVisitor:
    """Calls ``visit_<Class>`` for each node; the default visits the children."""

    def visit(self, node: Any) -> None:
        if node is None:
            return
        method = method_for(self, "visit_", node)
        if method is not None:
            method(node)
        else:
            self.generic_visit(node)

    def generic_visit(self, node: Any) -> None:
        for child in children(node):
            self.visit(child)


class IRMutator:
    """Returns a new tree; ``visit_<Class>`` may return a replacement node."""

    def visit(self, node: Any) -> Any:
        if node is None:
            return None
        method = method_for(self, "visit_", node)
        if method is not None:
            return method(node)
        return self.generic_visit(node)

    def generic_visit(self, node: Any) -> Any:
        return rebuild(node, self.visit)


def children(node: Any) -> list[Any]:
    """The expressions and statements directly inside ``node``."""
    if isinstance(node, E.BinaryOp):
        return [node.a, node.b]
    if isinstance(node, E.Not):
        return [node.a]
    if isinstance(node, E.Select):
        return [node.condition, node.true_value, node.false_value]
    if isinstance(node, E.Cast):
        return [node.value]
    if isinstance(node, E.Call):
        return list(node.args)
    if isinstance(node, E.BufferLoad):
        return list(node.indices)
    if isinstance(node, E.ProducerLoad):
        return list(node.indices)
    if isinstance(node, E.Ramp):
        return [node.base, node.stride]
    if isinstance(node, E.Broadcast):
        return [node.value]
    if isinstance(node, E.Let):
        return [node.var, node.value, node.body]
    if isinstance(node, E.Reduce):
        return [node.source] + ([node.condition] if node.condition is not None else [])
    if isinstance(node, S.For):
        return [node.loop_var, node.min, node.extent, node.body]
    if isinstance(node, S.BufferStore):
        return [node.value, *node.indices]
    if isinstance(node, S.SeqStmt):
        return list(node.seq)
    if isinstance(node, S.IfThenElse):
        return [node.condition, node.then_case, node.else_case]
    if isinstance(node, S.LetStmt):
        return [node.var, node.value, node.body]
    if isinstance(node, S.Allocate):
        return [node.body]
    if isinstance(node, S.Evaluate):
        return [node.value]
    return []


def rebuild(node: Any, f: Any) -> Any:
    """``node`` with ``f`` applied to each child; the same object when nothing changed."""
    if isinstance(node, E.BinaryOp):
        a, b = f(node.a), f(node.b)
        if a is node.a and b is node.b:
            return node
        return E._binary(type(node), a, b)
    if isinstance(node, E.Not):
        a = f(node.a)
        return node if a is node.a else E.Not(a)
    if isinstance(node, E.Select):
        c, t, e = f(node.condition), f(node.true_value), f(node.false_value)
        if c is node.condition and t is node.true_value and e is node.false_value:
            return node
        return E.Select(c, t, e)
    if isinstance(node, E.Cast):
        v = f(node.value)
        return node if v is node.value else E.Cast(node.dtype, v)
    if isinstance(node, E.Call):
        args = [f(a) for a in node.args]
        if all(x is y for x, y in zip(args, node.args)):
            return node
        return E.Call(node.name, args, node.dtype)
    if isinstance(node, E.BufferLoad):
        idx = [f(i) for i in node.indices]
        if all(x is y for x, y in zip(idx, node.indices)):
            return node
        return E.BufferLoad(node.buffer, idx)
    if isinstance(node, E.ProducerLoad):
        idx = [f(i) for i in node.indices]
        if all(x is y for x, y in zip(idx, node.indices)):
            return node
        return E.ProducerLoad(node.producer, idx)
    if isinstance(node, E.Ramp):
        b, s = f(node.base), f(node.stride)
        return node if b is node.base and s is node.stride else E.Ramp(b, s, node.lanes)
    if isinstance(node, E.Broadcast):
        v = f(node.value)
        return node if v is node.value else E.Broadcast(v, node.lanes)
    if isinstance(node, E.Let):
        v, body = f(node.value), f(node.body)
        return node if v is node.value and body is node.body else E.Let(node.var, v, body)
    if isinstance(node, E.Reduce):
        src = f(node.source)
        cond = f(node.condition) if node.condition is not None else None
        if src is node.source and cond is node.condition:
            return node
        return E.Reduce(node.combiner, src, node.axis, cond, node.init)
    if isinstance(node, S.For):
        mn, ext, body = f(node.min), f(node.extent), f(node.body)
        if mn is node.min and ext is node.extent and body is node.body:
            return node
        return S.For(node.loop_var, mn, ext, node.kind, body, node.thread_tag, node.annotations)
    if isinstance(node, S.BufferStore):
        v = f(node.value)
        idx = [f(i) for i in node.indices]
        if v is node.value and all(x is y for x, y in zip(idx, node.indices)):
            return node
        return S.BufferStore(node.buffer, v, idx)
    if isinstance(node, S.SeqStmt):
        items = [f(s) for s in node.seq]
        if all(x is y for x, y in zip(items, node.seq)):
            return node
        return S.SeqStmt([s for s in items if s is not None])
    if isinstance(node, S.IfThenElse):
        c, t = f(node.condition), f(node.then_case)
        e = f(node.else_case) if node.else_case is not None else None
        if c is node.condition and t is node.then_case and e is node.else_case:
            return node
        return S.IfThenElse(c, t, e)
    if isinstance(node, S.LetStmt):
        v, body = f(node.value), f(node.body)
        return node if v is node.value and body is node.body else S.LetStmt(node.var, v, body)
    if isinstance(node, S.Allocate):
        body = f(node.body)
        return node if body is node.body else S.Allocate(node.buffer, body)
    if isinstance(node, S.Evaluate):
        v = f(node.value)
        return node if v is node.value else S.Evaluate(v)
    return node


class Substitute(IRMutator):
    """Replace variables by expressions (``vmap``: Var -> PrimExpr)."""

    def __init__(self, vmap: dict[E.Var, E.PrimExpr]) -> None:
        self.vmap = vmap

    def visit_Var(self, node: E.Var) -> E.PrimExpr:
        return self.vmap.get(node, node)


def substitute(node: Any, vmap: dict[E.Var, Any]) -> Any:
    """``node`` with each variable in ``vmap`` replaced (values may be Python ints)."""
    if not vmap:
        return node
    return Substitute({k: E.convert(v, k.dtype) for k, v in vmap.items()}).visit(node)


def post_order_visit(node: Any, fvisit: Any) -> None:
    """Call ``fvisit`` on every node below and including ``node``, children first."""

    class _V(IRVisitor):
        def visit(self, n: Any) -> None:
            if n is None:
                return
            for c in children(n):
                self.visit(c)
            fvisit(n)

    _V().visit(node)
