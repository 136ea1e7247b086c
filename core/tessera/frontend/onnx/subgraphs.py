"""Sub-graphs of ONNX nodes (``If`` branches, ``Loop`` and ``Scan`` bodies) as closed functions.

An ONNX body may read any value of an enclosing scope by name. The importer converts each body
into its own :class:`~tessera.ir.graph.Function` inside a :class:`Scope` chained to the scope
of the function being built; the first read of an outer value adds an input to the body (and,
through the chain, to every body between the two scopes) and records the outer value, which the
control-flow node then takes as an extra input. Outer constants are read directly (they belong
to no function). Names resolve innermost first, as ONNX's scoping rules say.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import onnx

from tessera.frontend.onnx.context import graph_inputs_feeding
from tessera.frontend.onnx.sequence_value import ABSENT, SequenceValue
from tessera.ir.graph import Function, Value

if TYPE_CHECKING:
    from tessera.frontend.onnx.context import ConvertContext


class Scope:
    """The names visible while converting one function: its own, then its parents'."""

    def __init__(self, fn: Function, env: dict[str, Any], parent: Scope | None = None):
        self.fn = fn
        self.env = env
        self.parent = parent
        #: (value in the parent scope, the input of ``fn`` standing for it), in input order
        self.captured: list[tuple[Value, Value]] = []

    def lookup(self, name: str) -> Any:
        """The value ``name`` denotes here (a :class:`Value`, or a :class:`SequenceValue` or
        :data:`ABSENT`), capturing it from an enclosing scope on first use; None when no
        scope defines it."""
        value = self.env.get(name)
        if value is not None or self.parent is None:
            return value
        outer = self.parent.lookup(name)
        if outer is None:
            return None
        if isinstance(outer, SequenceValue):  # each element captured
            self.env[name] = SequenceValue([self._capture(f"{name}[{i}]", e)
                                            for i, e in enumerate(outer.elements)], outer.dtype)
        elif outer is ABSENT:
            self.env[name] = outer
        else:
            self.env[name] = self._capture(name, outer)
        return self.env[name]

    def _capture(self, name: str, outer: Value) -> Value:
        if outer.is_constant:
            return outer
        inner = self.fn.add_fresh_input(name, outer.type)
        self.captured.append((outer, inner))
        return inner

    def graph_inputs(self, names: Sequence[str]) -> list[str]:
        """The top-level graph inputs that the values ``names`` (inputs of this scope's
        function) come from, for a :class:`NeedsConstantError` raised inside a body."""
        if self.parent is None:
            return sorted(set(names))
        outer_of = {inner.name: outer for outer, inner in self.captured}
        found: set[str] = set()
        for name in names:
            outer = outer_of.get(name)
            if outer is None:
                continue  # a body's own input (iteration number, carried value): not constant
            found.update(self.parent.graph_inputs(
                sorted(graph_inputs_feeding(self.parent.fn, outer))))
        return sorted(found)


def share_captures(graphs: list[tuple[Function, list[Value]]]) -> list[Value]:
    """Give sub-graphs of one node the same captured inputs, in one order: each gets an
    (unused) input for the values only the others read. Returns the outer values."""
    order: list[Value] = []
    for _, captured in graphs:
        for v in captured:
            if all(v is not o for o in order):
                order.append(v)
    for fn, captured in graphs:
        declared = fn.inputs[:len(fn.inputs) - len(captured)]
        inner_of = {id(o): i for o, i in zip(captured, fn.inputs[len(declared):])}
        ordered = []
        for outer in order:
            inner = None
            if id(outer) in inner_of:
                inner = inner_of[id(outer)]
            else:
                inner = fn.add_fresh_input(outer.name, outer.type)
            ordered.append(inner)
        fn.inputs = declared + ordered
    return order


def graph_outputs(ctx: ConvertContext, scope: Scope, graph: onnx.GraphProto,
                  what: str) -> list[Any]:
    """The values (or sequences) ``graph``'s outputs name in ``scope``, after its nodes were
    converted; a name nothing defines is an import error naming the node holding ``what``."""
    values = []
    for vi in graph.output:
        value = scope.lookup(vi.name)
        if value is None:
            raise ctx.error(f"{what} output {vi.name!r} is not produced by any node")
        values.append(value)
    return values
