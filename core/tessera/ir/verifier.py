"""The IR verifier: checks that a function is well formed, with messages naming the node.

:func:`verify` checks, in this order:

* graph inputs are plain values (no producer, no data) with unique names;
* constants are numpy arrays whose type matches the value's type;
* node names and value names are unique;
* every node output names its node as producer;
* no cycle among the nodes;
* every node input is defined before use (a graph input, a constant, or an output of an earlier
  node), and every function output is defined;
* every op is known to the registry, its attributes and input count fit the schema, and each
  node's stored output types equal what the registry infers from its input types and attributes
  (structural ops ``Region`` and ``DeviceCopy`` are exempt; a node's ``body`` and the
  sub-graphs it holds as attributes, ``If`` branches and ``Loop``/``Scan`` bodies, are verified
  recursively, each as a closed function).
"""

from __future__ import annotations

import numpy as np

from tessera.errors import IRError, OpError
from tessera.ir.graph import COPY_OP, REGION_OP, STRUCTURAL_OPS, Function, Node, Value
from tessera.ir.schema import get_schema, has_op
from tessera.ir.symbolic import dim_bounds_scope
from tessera.ir.types import TensorType


def verify(fn: Function) -> None:
    """Raise :class:`~tessera.errors.IRError` at the first malformation found in ``fn``."""
    _Verifier(fn).run()


def _where(fn: Function) -> str:
    return f"function {fn.name}"


def _node(node: Node) -> str:
    return f"node {node.name} ({node.op})"


class _Verifier:
    def __init__(self, fn: Function):
        self.fn = fn
        self.names: dict[str, Value] = {}

    def fail(self, message: str) -> IRError:
        return IRError(f"{_where(self.fn)}: {message}")

    def claim_name(self, v: Value, what: str) -> None:
        other = self.names.get(v.name)
        if other is not None and other is not v:
            raise self.fail(f"value name %{v.name} is used twice ({what})")
        self.names[v.name] = v

    def run(self) -> None:
        fn = self.fn
        self.check_inputs()
        self.check_constants()
        self.check_nodes_unique()
        self.check_acyclic()
        self.check_order()
        for node in fn.nodes:
            self.check_types(node)

    # -- values --------------------------------------------------------------------------------
    def check_inputs(self) -> None:
        for v in self.fn.inputs:
            if not isinstance(v.type, TensorType):
                raise self.fail(f"graph input %{v.name} has no tensor type ({v.type!r})")
            if v.producer is not None:
                raise self.fail(f"graph input %{v.name} is also an output of "
                                f"{_node(v.producer)}")
            if v.data is not None:
                raise self.fail(f"graph input %{v.name} carries constant data")
            if v.name in self.names:
                raise self.fail(f"graph input name %{v.name} is used twice")
            self.names[v.name] = v

    def check_constants(self) -> None:
        fn = self.fn
        readers: dict[int, str] = {}
        for node in fn.nodes:
            for v in node.inputs:
                if v is not None and v.is_constant:
                    readers.setdefault(id(v), _node(node))
        for v in fn.constants():
            where = readers.get(id(v), "the function outputs")
            if v.producer is not None:
                raise self.fail(f"constant %{v.name} read by {where} also has producer "
                                f"{_node(v.producer)}")
            if v.is_held:  # data kept by a backend in its compiled form
                self.claim_name(v, f"constant read by {where}")
                continue
            if not isinstance(v.data, np.ndarray):
                raise self.fail(f"constant %{v.name} read by {where}: data is a "
                                f"{type(v.data).__name__}, not a numpy array")
            try:
                actual = TensorType.of(v.data)
            except IRError as e:
                raise self.fail(f"constant %{v.name} read by {where}: {e}") from None
            if actual != v.type:
                raise self.fail(f"constant %{v.name} read by {where}: data is {actual}, "
                                f"its type says {v.type}")
            self.claim_name(v, f"constant read by {where}")

    # -- nodes ---------------------------------------------------------------------------------
    def check_nodes_unique(self) -> None:
        seen_nodes: dict[str, Node] = {}
        for node in self.fn.nodes:
            if node.name in seen_nodes:
                if seen_nodes[node.name] is node:
                    raise self.fail(f"{_node(node)} appears twice in the node list")
                raise self.fail(f"node name {node.name} is used twice "
                                f"({seen_nodes[node.name].op} and {node.op})")
            seen_nodes[node.name] = node
            for out in node.outputs:
                if out.producer is not node:
                    other = _node(out.producer) if out.producer is not None else "no node"
                    raise self.fail(f"{_node(node)}: output %{out.name} names {other} as its "
                                    f"producer")
                if out.data is not None:
                    raise self.fail(f"{_node(node)}: output %{out.name} carries constant data")
                self.claim_name(out, f"output of {_node(node)}")

    def check_acyclic(self) -> None:
        try:
            self.fn.topological_order()
        except IRError as e:
            raise self.fail(str(e)) from None

    def check_order(self) -> None:
        fn = self.fn
        defined: set[int] = {id(v) for v in fn.inputs}
        position = {id(n): i for i, n in enumerate(fn.nodes)}
        for node in fn.nodes:
            for i, v in enumerate(node.inputs):
                if v is None or v.is_constant or id(v) in defined:
                    continue
                producer = v.producer
                if producer is not None and id(producer) in position:
                    raise self.fail(f"{_node(node)}: input {i} %{v.name} is used before "
                                    f"{_node(producer)} defines it")
                raise self.fail(f"{_node(node)}: input {i} %{v.name} is not defined (not a "
                                f"graph input, constant or node output of this function)")
            defined.update(id(o) for o in node.outputs)
        for i, v in enumerate(fn.outputs):
            if v is None:
                raise self.fail(f"function output {i} is missing")
            if not (v.is_constant or id(v) in defined):
                raise self.fail(f"function output {i} %{v.name} is not defined")

    def check_region(self, node: Node) -> None:
        """A Region passes its inputs to its body's inputs and returns its body's outputs, in
        order, so their counts and types must agree."""
        body = node.body
        if body is None:
            raise self.fail(f"{_node(node)} has no body")
        for what, outer, inner in (("inputs", node.inputs, body.inputs),
                                   ("outputs", node.outputs, body.outputs)):
            if len(outer) != len(inner):
                raise self.fail(f"{_node(node)} has {len(outer)} {what}, its body "
                                f"{len(inner)}")
            for i, (a, b) in enumerate(zip(outer, inner)):
                if a is None or b is None or a.type != b.type:
                    have = a.type if a is not None else "nothing"
                    want = b.type if b is not None else "nothing"
                    raise self.fail(f"{_node(node)}: {what[:-1]} {i} is {have}, its body's "
                                    f"is {want}")

    def check_types(self, node: Node) -> None:
        if node.body is not None:
            try:
                verify(node.body)
            except IRError as e:
                raise self.fail(f"{_node(node)}: in its body: {e}") from None
        for key, graph in node.subgraphs:
            try:
                verify(graph)
            except IRError as e:
                raise self.fail(f"{_node(node)}: in its {key}: {e}") from None
        if node.op in STRUCTURAL_OPS:
            if node.op == REGION_OP:
                self.check_region(node)
            if node.op == COPY_OP:
                if len(node.inputs) != 1 or node.inputs[0] is None or len(node.outputs) != 1:
                    raise self.fail(f"{_node(node)} must have one input and one output")
                if node.outputs[0].type != node.inputs[0].type:
                    raise self.fail(f"{_node(node)}: output is typed {node.outputs[0].type}, "
                                    f"its input {node.inputs[0].type}")
            return
        if not has_op(node.op):
            raise self.fail(f"{_node(node)}: unknown op {node.op!r}")
        schema = get_schema(node.op)
        try:
            with dim_bounds_scope(self.fn.attrs.get("dim_bounds")):
                attrs = schema.check(node.name, node.inputs, node.attrs)
                inferred = schema.infer_types(
                    node.name, [v.type if v is not None else None for v in node.inputs], attrs)
        except OpError as e:
            message = str(e)
            prefix = f"node {node.name} ({node.op}): "
            raise self.fail(message if message.startswith(prefix) else prefix + message) from None
        if len(node.outputs) > len(inferred):
            raise self.fail(f"{_node(node)} has {len(node.outputs)} outputs, the op has "
                            f"{len(inferred)}")
        if not node.outputs:
            raise self.fail(f"{_node(node)} has no outputs")
        for out, want in zip(node.outputs, inferred):
            if out.type != want:
                raise self.fail(f"{_node(node)}: output %{out.name} is typed {out.type}, the "
                                f"registry infers {want}")
