"""Visitors and mutators over TIR: the one traversal every pass builds on.

:class:`IRVisitor` walks every expression and statement; :class:`IRMutator` rebuilds a node only
when one of its children changed (so unchanged subtrees stay shared). Subclasses override
``visit_<NodeClass>`` methods (``visit_Add``, ``visit_For``, ...) and call ``self.visit`` on
children; the defaults recurse.

Dispatch is by table: the ``visit_<Class>`` function a visitor class uses for a node class
(found on the node class or its nearest base, as :func:`method_for` does) is looked up once per
pair of classes and remembered in the visitor class, and :func:`children` / :func:`rebuild`
pick their case by the node's class in the same way. Methods are looked up on the visitor's
*class*, once: define ``visit_*`` methods in the class body (not on instances, nor later).
"""

from __future__ import annotations

from collections.abc import Callable
from types import FunctionType
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


_MISSING = object()


def _class_method(owner: type, node_cls: type) -> Any:
    """The ``visit_<Class>`` attribute of the class ``owner`` for ``node_cls`` or its nearest
    base, as a function of ``(instance, node)`` (None when there is none)."""
    for cls in node_cls.__mro__:
        name = "visit_" + cls.__name__
        attr = getattr(owner, name, None)
        if attr is not None:
            if isinstance(attr, FunctionType):
                return attr
            return _instance_method(name)  # a staticmethod, classmethod or other callable
    return None


def _instance_method(name: str) -> Callable[[Any, Any], Any]:
    def call(obj: Any, node: Any) -> Any:
        return getattr(obj, name)(node)
    return call


class IRVisitor:
    """Calls ``visit_<Class>`` for each node; the default visits the children."""

    #: node class -> its ``visit_`` function (or None) for this class: each subclass has its
    #: own table (so a class made per call, in a function, takes its table with it)
    _visit_table: dict[type, Any] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._visit_table = {}

    def visit(self, node: Any) -> None:
        if node is None:
            return
        cls = type(node)
        method = self._visit_table.get(cls, _MISSING)
        if method is _MISSING:
            method = self._visit_table[cls] = _class_method(type(self), cls)
        if method is not None:
            method(self, node)
        else:
            self.generic_visit(node)

    def generic_visit(self, node: Any) -> None:
        for child in children(node):
            self.visit(child)


class IRMutator:
    """Returns a new tree; ``visit_<Class>`` may return a replacement node."""

    _visit_table: dict[type, Any] = {}  # as IRVisitor's

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._visit_table = {}

    def visit(self, node: Any) -> Any:
        if node is None:
            return None
        cls = type(node)
        method = self._visit_table.get(cls, _MISSING)
        if method is _MISSING:
            method = self._visit_table[cls] = _class_method(type(self), cls)
        if method is not None:
            return method(self, node)
        return self.generic_visit(node)

    def generic_visit(self, node: Any) -> Any:
        return rebuild(node, self.visit)


# ---- children -------------------------------------------------------------------------------

_CHILDREN: dict[type, Callable[[Any], list[Any]]] = {
    E.BinaryOp: lambda n: [n.a, n.b],
    E.Not: lambda n: [n.a],
    E.Select: lambda n: [n.condition, n.true_value, n.false_value],
    E.Cast: lambda n: [n.value],
    E.Call: lambda n: list(n.args),
    E.BufferLoad: lambda n: list(n.indices),
    E.ProducerLoad: lambda n: list(n.indices),
    E.Ramp: lambda n: [n.base, n.stride],
    E.Broadcast: lambda n: [n.value],
    E.Let: lambda n: [n.var, n.value, n.body],
    E.Reduce: lambda n: [n.source] + ([n.condition] if n.condition is not None else []),
    S.For: lambda n: [n.loop_var, n.min, n.extent, n.body],
    S.BufferStore: lambda n: [n.value, *n.indices],
    S.SeqStmt: lambda n: list(n.seq),
    S.IfThenElse: lambda n: [n.condition, n.then_case, n.else_case],
    S.LetStmt: lambda n: [n.var, n.value, n.body],
    S.Allocate: lambda n: [n.body],
    S.Evaluate: lambda n: [n.value],
}


def _no_children(node: Any) -> list[Any]:
    return []


def _by_class(table: dict[type, Any], cls: type, default: Any) -> Any:
    """The entry of ``cls`` or its nearest base in ``table`` (``default`` when none), cached
    in ``table`` under ``cls``."""
    for base in cls.__mro__:
        if base in table:
            found = table[base]
            break
    else:
        found = default
    table[cls] = found
    return found


def children(node: Any) -> list[Any]:
    """The expressions and statements directly inside ``node``."""
    cls = type(node)
    fn = _CHILDREN.get(cls)
    if fn is None:
        fn = _by_class(_CHILDREN, cls, _no_children)
    return fn(node)


# ---- rebuild --------------------------------------------------------------------------------

def _r_binary(node: Any, f: Any) -> Any:
    a, b = f(node.a), f(node.b)
    if a is node.a and b is node.b:
        return node
    return E._binary(type(node), a, b)


def _r_not(node: Any, f: Any) -> Any:
    a = f(node.a)
    return node if a is node.a else E.Not(a)


def _r_select(node: Any, f: Any) -> Any:
    c, t, e = f(node.condition), f(node.true_value), f(node.false_value)
    if c is node.condition and t is node.true_value and e is node.false_value:
        return node
    return E.Select(c, t, e)


def _r_cast(node: Any, f: Any) -> Any:
    v = f(node.value)
    return node if v is node.value else E.Cast(node.dtype, v)


def _same(new: list[Any], old: Any) -> bool:
    for x, y in zip(new, old):
        if x is not y:
            return False
    return True


def _r_call(node: Any, f: Any) -> Any:
    args = [f(a) for a in node.args]
    if _same(args, node.args):
        return node
    return E.Call(node.name, args, node.dtype)


def _r_buffer_load(node: Any, f: Any) -> Any:
    idx = [f(i) for i in node.indices]
    if _same(idx, node.indices):
        return node
    return E.BufferLoad(node.buffer, idx)


def _r_producer_load(node: Any, f: Any) -> Any:
    idx = [f(i) for i in node.indices]
    if _same(idx, node.indices):
        return node
    return E.ProducerLoad(node.producer, idx)


def _r_ramp(node: Any, f: Any) -> Any:
    b, s = f(node.base), f(node.stride)
    return node if b is node.base and s is node.stride else E.Ramp(b, s, node.lanes)


def _r_broadcast(node: Any, f: Any) -> Any:
    v = f(node.value)
    return node if v is node.value else E.Broadcast(v, node.lanes)


def _r_let(node: Any, f: Any) -> Any:
    v, body = f(node.value), f(node.body)
    return node if v is node.value and body is node.body else E.Let(node.var, v, body)


def _r_reduce(node: Any, f: Any) -> Any:
    src = f(node.source)
    cond = f(node.condition) if node.condition is not None else None
    if src is node.source and cond is node.condition:
        return node
    return E.Reduce(node.combiner, src, node.axis, cond, node.init)


def _r_for(node: Any, f: Any) -> Any:
    mn, ext, body = f(node.min), f(node.extent), f(node.body)
    if mn is node.min and ext is node.extent and body is node.body:
        return node
    return S.For(node.loop_var, mn, ext, node.kind, body, node.thread_tag, node.annotations)


def _r_buffer_store(node: Any, f: Any) -> Any:
    v = f(node.value)
    idx = [f(i) for i in node.indices]
    if v is node.value and _same(idx, node.indices):
        return node
    return S.BufferStore(node.buffer, v, idx)


def _r_seq(node: Any, f: Any) -> Any:
    items = [f(s) for s in node.seq]
    if _same(items, node.seq):
        return node
    return S.SeqStmt([s for s in items if s is not None])


def _r_if(node: Any, f: Any) -> Any:
    c, t = f(node.condition), f(node.then_case)
    e = f(node.else_case) if node.else_case is not None else None
    if c is node.condition and t is node.then_case and e is node.else_case:
        return node
    return S.IfThenElse(c, t, e)


def _r_let_stmt(node: Any, f: Any) -> Any:
    v, body = f(node.value), f(node.body)
    return node if v is node.value and body is node.body else S.LetStmt(node.var, v, body)


def _r_allocate(node: Any, f: Any) -> Any:
    body = f(node.body)
    return node if body is node.body else S.Allocate(node.buffer, body)


def _r_evaluate(node: Any, f: Any) -> Any:
    v = f(node.value)
    return node if v is node.value else S.Evaluate(v)


def _r_leaf(node: Any, f: Any) -> Any:
    return node


_REBUILD: dict[type, Callable[[Any, Any], Any]] = {
    E.BinaryOp: _r_binary, E.Not: _r_not, E.Select: _r_select, E.Cast: _r_cast,
    E.Call: _r_call, E.BufferLoad: _r_buffer_load, E.ProducerLoad: _r_producer_load,
    E.Ramp: _r_ramp, E.Broadcast: _r_broadcast, E.Let: _r_let, E.Reduce: _r_reduce,
    S.For: _r_for, S.BufferStore: _r_buffer_store, S.SeqStmt: _r_seq, S.IfThenElse: _r_if,
    S.LetStmt: _r_let_stmt, S.Allocate: _r_allocate, S.Evaluate: _r_evaluate,
}


def rebuild(node: Any, f: Any) -> Any:
    """``node`` with ``f`` applied to each child; the same object when nothing changed."""
    cls = type(node)
    fn = _REBUILD.get(cls)
    if fn is None:
        fn = _by_class(_REBUILD, cls, _r_leaf)
    return fn(node, f)


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
    _post_order(node, fvisit)


def nodes_of(node: Any, kind: type) -> list[Any]:
    """Every node of type ``kind`` below and including ``node``, children first."""
    found: list[Any] = []
    post_order_visit(node, lambda n: found.append(n) if isinstance(n, kind) else None)
    return found


def contains(node: Any, target: Any) -> bool:
    """Whether ``target`` (a node, compared by identity: a variable) is ``node`` or below it
    (the nodes :func:`post_order_visit` visits); stops at the first occurrence."""
    return _contains(node, target)


def _contains(n: Any, target: Any) -> bool:
    if n is target:
        return True
    if n is None:
        return False
    cls = type(n)
    fn = _CHILDREN.get(cls)
    if fn is None:
        fn = _by_class(_CHILDREN, cls, _no_children)
    return any(_contains(c, target) for c in fn(n))


def _post_order(n: Any, fvisit: Any) -> None:
    # a module function: a recursive closure would be a reference cycle left for the garbage
    # collector on every call
    if n is None:
        return
    cls = type(n)
    fn = _CHILDREN.get(cls)
    if fn is None:
        fn = _by_class(_CHILDREN, cls, _no_children)
    for c in fn(n):
        _post_order(c, fvisit)
    fvisit(n)
