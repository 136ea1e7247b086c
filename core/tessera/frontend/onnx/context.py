"""What a converter works with: the function under construction and the node being converted."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tessera.errors import ModelImportError, NeedsConstantError, OpError
from tessera.ir.graph import Function, Value, contents_of
from tessera.ir.symbolic import dim_str, has_dim_expr, is_dim_expr
from tessera.ir.types import TensorType, oversize
from tessera.ops.registry import get_schema

if TYPE_CHECKING:
    import onnx

    from tessera.frontend.onnx.subgraphs import Scope

    #: The importer's sub-graph conversion (see :meth:`ConvertContext.subgraph`).
    SubgraphConverter = Callable[["ConvertContext", onnx.GraphProto, str,
                                  Sequence[TensorType]], tuple[Function, list[Value]]]
    #: The importer's node loop (see :meth:`ConvertContext.convert_nodes`).
    NodesConverter = Callable[[Function, Scope, list[onnx.NodeProto], dict[str, int]], None]


class ConvertContext:
    """Adds IR nodes on behalf of one ONNX node, folding nodes whose inputs are all constant.

    ``opset`` is the model's opset for the node's domain; ``node_name`` and ``op_type`` name the
    ONNX node (for messages); ``output_names`` are its ONNX output names (used as value names).
    """

    def __init__(self, graph: Function, fold: bool = True, scope: Scope | None = None,
                 opsets: dict[str, int] | None = None,
                 subgraphs: SubgraphConverter | None = None,
                 nodes: NodesConverter | None = None):
        self.graph = graph
        self.fold = fold
        #: the names visible to the graph being built (sub-graphs resolve outer names in it)
        self.scope = scope
        #: the model's opset per domain (sub-graphs are converted at the same opsets)
        self.opsets = dict(opsets or {})
        self._subgraphs = subgraphs
        self._nodes = nodes
        self.opset = 0
        self.node_name = ""
        self.op_type = ""
        self.output_names: list[str] = []
        self.num_outputs = 1
        #: every value added while converting the current node (constants included)
        self.created: list[Value] = []

    def convert_nodes(self, fn: Function, scope: Scope, nodes: list[onnx.NodeProto]) -> None:
        """Convert ONNX ``nodes`` into ``fn`` with names resolved in ``scope`` (the importer's
        own loop; sub-graphs converted in place use it)."""
        if self._nodes is None:
            raise self.error("nodes are converted only inside an import")
        self._nodes(fn, scope, nodes, self.opsets)

    def subgraph(self, graph: onnx.GraphProto, what: str, input_types: Sequence[TensorType]
                 ) -> tuple[Function, list[Value]]:
        """Convert the node's graph attribute ``what`` (its declared inputs typed
        ``input_types``) into a closed function; returns it and the outer values it reads,
        in the order of the inputs added for them (:mod:`.subgraphs`)."""
        if self._subgraphs is None:
            raise self.error(f"{what}: sub-graphs are converted only inside an import")
        return self._subgraphs(self, graph, what, input_types)

    def begin(self, node_name: str, op_type: str, opset: int, output_names: list[str]) -> None:
        """Start converting one ONNX node."""
        self.node_name, self.op_type, self.opset = node_name, op_type, opset
        self.output_names = list(output_names)
        self.num_outputs = len(output_names)
        self.created = []

    # -- messages ------------------------------------------------------------------------------
    def error(self, message: str) -> ModelImportError:
        """An import error naming the current ONNX node (once: a message from the op registry
        that names the node, or its op, again loses that prefix)."""
        return ModelImportError(f"node {self.node_name!r} ({self.op_type}, opset {self.opset}): "
                                f"{self._unprefixed(message)}")

    def _unprefixed(self, message: str) -> str:
        """``message`` without a leading ``node NAME (OP): `` for this node and ``OP: ``; an
        IR op other than the ONNX node's stays named."""
        op = self.op_type
        prefix = f"node {self.node_name} ("
        if self.node_name and message.startswith(prefix):
            inner, sep, rest = message[len(prefix):].partition("): ")
            if sep and inner and " " not in inner:
                op, message = inner, rest
        if message.startswith(f"{op}: "):
            message = message[len(op) + 2:]
        return message if op == self.op_type else f"{op}: {message}"

    # -- building ------------------------------------------------------------------------------
    def _hint(self, i: int = 0) -> str:
        if i < len(self.output_names) and self.output_names[i]:
            return self.output_names[i]
        return self.node_name or self.op_type.lower()

    def node(self, op: str, inputs: Sequence[Value | None], attrs: dict[str, Any] | None = None,
             num_outputs: int | None = None, name: str | None = None) -> list[Value]:
        """Add IR op ``op`` (or fold it to constants when every input is constant)."""
        inputs = list(inputs)
        attrs = dict(attrs or {})
        if num_outputs is None:
            num_outputs = self.num_outputs if op == self.op_type else None
        if self.fold and all(v is None or v.is_constant for v in inputs) and any(
                v is not None for v in inputs) and not any(
                has_dim_expr(a) for a in attrs.values()):  # sizes known at run time: a node
            schema = get_schema(op)
            full = schema.check(self.node_name or op, inputs, attrs)
            try:
                types = schema.infer_types(self.node_name or op,
                                           [v.type if v is not None else None for v in inputs],
                                           full)
            except OpError:  # a data-dependent shape (NonZero, Unique): known once folded
                types = []
            for t in types:  # check before numpy allocates the folded result
                self.check_size(t, f"{op} would fold to a constant")
            results = schema.evaluate([v.data if v is not None else None for v in inputs], full)
            n = len(results) if num_outputs is None else num_outputs
            values = [self.graph.constant(results[i], self._hint(i)) for i in range(n)]
            self.created.extend(values)
            return values
        node = self.graph.add_node(op, inputs, attrs, name=name or self.node_name or None,
                                   num_outputs=num_outputs, output_names=self.output_names)
        self.created.extend(node.outputs)
        return node.outputs

    def check_size(self, type: TensorType, what: str) -> None:
        """Refuse a tensor too big to plan (before numpy tries to allocate it)."""
        if (why := oversize(type)) is not None:
            raise self.error(f"{what} {why}")

    def op(self, op: str, *inputs: Value | None, **attrs: Any) -> Value:
        """Add a one-output IR op and return its value: ``ctx.op("Relu", x)``."""
        return self.node(op, inputs, attrs, num_outputs=1)[0]

    def const(self, array: Any, dtype: Any = None, name: str = "const") -> Value:
        """A new constant value."""
        value = self.graph.constant(np.asarray(array, dtype=dtype), name)
        self.created.append(value)
        return value

    # -- constants -----------------------------------------------------------------------------
    def const_value(self, value: Value | None, what: str = "input") -> np.ndarray | None:
        """The data of a value that must be known at compile time (a shape, axes, ...).

        Raises :class:`NeedsConstantError` naming the graph inputs the value depends on.
        """
        if value is None:
            return None
        if value.data is not None:
            return value.data
        contents = contents_of(value)
        if contents is not None and any(is_dim_expr(c) for c in contents):
            raise self.error(f"{what} depends on the sizes ({', '.join(map(dim_str, contents))})"
                             f"; this op needs it as a compile-time constant (import with "
                             f"fixed input_shapes)")
        deps = sorted(graph_inputs_feeding(self.graph, value))
        raise NeedsConstantError(
            f"node {self.node_name!r} ({self.op_type}): {what} must be a constant known at "
            f"compile time, but it depends on graph input(s) {', '.join(deps) or '?'}; bind "
            f"them with freeze_inputs={{name: array}}", deps)

    def const_ints(self, value: Value | None, what: str = "input") -> list[Any] | None:
        """The elements of an integer operand known at compile time: ints, and in a graph
        with symbolic shapes size expressions (a ``ShapeValues`` or ``Shape`` node's output:
        :func:`~tessera.ir.graph.contents_of`)."""
        if value is not None and value.data is None and not value.is_held:
            contents = contents_of(value)
            if contents is not None:
                return contents
        data = self.const_value(value, what)
        if data is None:
            return None
        array = np.asarray(data)
        if array.dtype.kind not in "iu":
            raise self.error(f"{what} must be an integer tensor, got {array.dtype}")
        return [int(v) for v in array.reshape(-1)]

    @staticmethod
    def type_of(value: Value) -> TensorType:
        return value.type


def graph_inputs_feeding(graph: Function, value: Value) -> set[str]:
    """Names of the graph inputs that ``value`` is computed from."""
    inputs = {id(v): v.name for v in graph.inputs}
    found: set[str] = set()
    stack = [value]
    seen: set[int] = set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if id(v) in inputs:
            found.add(inputs[id(v)])
        elif v.producer is not None:
            stack.extend(x for x in v.producer.inputs if x is not None)
    return found
