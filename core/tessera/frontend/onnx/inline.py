"""Convert an ONNX sub-graph in place, into the function being built, once per use: how
``SequenceMap`` runs its body on each element and how a ``Loop`` that carries sequences is
unrolled (:mod:`.converters.sequences`). Its inputs may be tensors, sequences
(:class:`~tessera.frontend.onnx.sequence_value.SequenceValue`) or empty optionals, and so
may its outputs, which a closed sub-graph function could not carry.

The names the sub-graph defines are prefixed per use, so that each copy's values are named
apart; names of enclosing scopes resolve as ONNX's scoping rules say.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx

from tessera.errors import ModelImportError, NeedsConstantError
from tessera.frontend.onnx.context import ConvertContext
from tessera.frontend.onnx.dtypes import read_initializer
from tessera.frontend.onnx.subgraphs import Scope, graph_outputs

__all__ = ["convert_inline"]


class _InlineScope(Scope):
    """The names of a sub-graph converted into its parent's function: its own, then the
    parent's (read directly: it is the same function)."""

    def __init__(self, env: dict[str, Any], parent: Scope):
        super().__init__(parent.fn, env, parent)

    def lookup(self, name: str) -> Any:
        value = self.env.get(name)
        if value is not None:
            return value
        return self.parent.lookup(name) if self.parent is not None else None

    def graph_inputs(self, names: Sequence[str]) -> list[str]:
        return self.parent.graph_inputs(names) if self.parent is not None else sorted(names)


def _renamed(graph: onnx.GraphProto, prefix: str) -> onnx.GraphProto:
    """``graph`` with every name its nodes define (and every read of one, nested sub-graphs
    included) prefixed."""
    renames = {out: prefix + out for n in graph.node for out in n.output if out}
    copy = onnx.GraphProto()
    copy.CopyFrom(graph)

    def apply(g: onnx.GraphProto) -> None:
        for node in g.node:
            node.input[:] = [renames.get(x, x) for x in node.input]
            node.output[:] = [renames.get(x, x) for x in node.output]
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    apply(a.g)
                for sub in a.graphs:
                    apply(sub)
        for vi in g.output:
            vi.name = renames.get(vi.name, vi.name)

    apply(copy)
    return copy


def convert_inline(ctx: ConvertContext, graph: onnx.GraphProto, what: str,
                   args: Sequence[Any], copy: int) -> list[Any]:
    """Convert ``graph`` (attribute ``what`` of the node ``ctx`` converts) into ``ctx``'s
    function with its inputs bound to ``args``; ``copy`` numbers this use (for names).
    Returns its outputs (values, sequences or :data:`ABSENT`)."""
    if len(graph.input) != len(args):
        raise ctx.error(f"{what} declares {len(graph.input)} inputs, the node gives it "
                        f"{len(args)}")
    if ctx.scope is None:
        raise ctx.error(f"{what}: sub-graphs are converted only inside an import")
    body = _renamed(graph, f"{ctx.node_name}/{copy}/")
    env: dict[str, Any] = {vi.name: a for vi, a in zip(body.input, args)}
    for t in body.initializer:
        env[t.name] = ctx.graph.constant(read_initializer(t), t.name)
    scope = _InlineScope(env, ctx.scope)
    try:
        ctx.convert_nodes(ctx.graph, scope, list(body.node))
    except NeedsConstantError:
        raise
    except ModelImportError as e:
        raise ctx.error(f"in its {what}: {e}") from None
    return graph_outputs(ctx, scope, body, what)
