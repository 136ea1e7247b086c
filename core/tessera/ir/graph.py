"""The graph IR: SSA values, nodes with typed attributes, and functions (graphs and regions).

A :class:`Function` owns an ordered list of nodes (kept topologically sorted), its input values and
its output values. Constants (parameters) are values that carry ``data`` and have no producer; they
are reachable through node inputs. A region is a function whose ``attrs`` name a ``backend`` and a
``device``; the partitioned model is a function whose nodes are ``Region`` nodes (each with a
``body``) and ``DeviceCopy`` nodes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from tessera.errors import IRError, OpError
from tessera.ir import printer
from tessera.ir.schema import get_schema
from tessera.ir.symbolic import attr_vars, dim_bounds_scope, dim_vars, has_dim_expr, substitute
from tessera.ir.types import TensorType, oversize

#: The op of a node whose ``body`` is a region (a function one backend compiles).
REGION_OP = "Region"
#: The op of an explicit copy of a value between devices (attribute ``dst``: the device).
COPY_OP = "DeviceCopy"
#: Ops that structure a partitioned graph and are not in the op-schema table.
STRUCTURAL_OPS = frozenset({REGION_OP, COPY_OP})


class Value:
    """An SSA value: a graph input, a constant, or one output of one node.

    A constant carries its ``data``, or is *held* by a backend (``held_by`` names it): a
    region loaded from an artifact whose backend keeps that constant in its own compiled form
    (packed weights), so the artifact stores no other copy. A held constant is a constant
    like any other, but reading its ``data`` raises :class:`IRError`.
    """

    __slots__ = ("name", "type", "producer", "_data", "held_by")

    def __init__(self, name: str, type: TensorType, producer: Node | None = None,
                 data: np.ndarray | None = None, held_by: str | None = None):
        self.name = name
        self.type = type
        self.producer = producer
        self._data = data
        self.held_by = held_by

    @property
    def data(self) -> np.ndarray | None:
        if self._data is None and self.held_by is not None:
            raise IRError(f"constant %{self.name} has no data here: backend "
                          f"{self.held_by!r} holds it in its compiled form (a region loaded "
                          f"from an artifact); compile the model again to change it")
        return self._data

    @data.setter
    def data(self, data: np.ndarray | None) -> None:
        self._data = data

    @property
    def is_constant(self) -> bool:
        return self._data is not None or self.held_by is not None

    @property
    def is_held(self) -> bool:
        """A constant whose data a backend holds in its compiled form (see the class)."""
        return self._data is None and self.held_by is not None

    def __repr__(self) -> str:
        kind = "const " if self.is_constant else ""
        return f"<Value {kind}%{self.name}: {self.type}>"


class Node:
    """One operation. ``inputs`` may hold ``None`` for an omitted optional input."""

    __slots__ = ("op", "name", "inputs", "outputs", "attrs", "body")

    def __init__(self, op: str, name: str, inputs: list[Value | None], outputs: list[Value],
                 attrs: dict[str, Any] | None = None, body: Function | None = None):
        self.op = op
        self.name = name
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.attrs = dict(attrs or {})
        self.body = body
        for out in self.outputs:
            out.producer = self

    @property
    def subgraphs(self) -> list[tuple[str, Function]]:
        """The graphs this node owns as attributes, by attribute name: an ``If``'s branches,
        a ``Loop``'s or ``Scan``'s body. Each is a closed function: the values of enclosing
        scopes it reads are inputs of the node and of the graph (the importer turns outer-scope
        references into them)."""
        return [(k, v) for k, v in self.attrs.items() if isinstance(v, Function)]

    @property
    def output(self) -> Value:
        """The single output of a one-output node."""
        if len(self.outputs) != 1:
            raise IRError(f"node {self.name} ({self.op}) has {len(self.outputs)} outputs, not 1")
        return self.outputs[0]

    def __repr__(self) -> str:
        return f"<Node {self.name}: {self.op}>"


class Function:
    """A graph with inputs and outputs. The model itself, a region, a fused group: all functions."""

    def __init__(self, name: str = "main", attrs: dict[str, Any] | None = None):
        self.name = name
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.nodes: list[Node] = []
        self.attrs: dict[str, Any] = dict(attrs or {})
        self._names: set[str] = set()
        self._node_names: set[str] = set()
        self._counter = itertools.count()

    # -- naming -------------------------------------------------------------------------------
    def fresh_name(self, hint: str = "v") -> str:
        """A value or node name not used in this function yet, derived from ``hint``."""
        hint = hint or "v"
        if hint not in self._names:
            self._names.add(hint)
            return hint
        while True:
            name = f"{hint}_{next(self._counter)}"
            if name not in self._names:
                self._names.add(name)
                return name

    def reserve_name(self, name: str) -> None:
        self._names.add(name)

    def fresh_node_name(self, hint: str = "node") -> str:
        """A node name not used in this function yet (nodes and values are named apart)."""
        hint = hint or "node"
        name = hint
        while name in self._node_names:
            name = f"{hint}_{next(self._counter)}"
        self._node_names.add(name)
        return name

    # -- construction ---------------------------------------------------------------------------
    def add_input(self, name: str, type: TensorType) -> Value:
        if name in self._names:
            raise IRError(f"duplicate name {name!r} for a graph input")
        self._names.add(name)
        value = Value(name, type)
        self.inputs.append(value)
        return value

    def add_fresh_input(self, hint: str, type: TensorType) -> Value:
        """A new graph input named after ``hint`` (made unique)."""
        name = self.fresh_name(hint)
        value = Value(name, type)
        self.inputs.append(value)
        return value

    def constant(self, data: np.ndarray | Any, name: str = "const") -> Value:
        """A constant value (parameter). The array is kept as given (made contiguous)."""
        array = np.asarray(data, order="C")
        return Value(self.fresh_name(name), TensorType.of(array), data=array)

    def add_node(self, op: str, inputs: Iterable[Value | None], attrs: dict[str, Any] | None = None,
                 name: str | None = None, num_outputs: int | None = None,
                 output_names: list[str] | None = None) -> Node:
        """Append a node, filling attribute defaults and inferring its output types.

        The schema comes from the operator registry: unknown attributes or input counts raise
        :class:`~tessera.errors.OpError` naming the node.
        """
        inputs = list(inputs)
        node_name = self.fresh_node_name(name or op.lower())
        schema = get_schema(op)
        with dim_bounds_scope(self.attrs.get("dim_bounds")):
            full_attrs = schema.check(node_name, inputs, attrs or {})
            types = schema.infer_types(node_name,
                                       [v.type if v is not None else None for v in inputs],
                                       full_attrs)
        count = len(types) if num_outputs is None else num_outputs
        if count > len(types):
            raise IRError(f"node {node_name} ({op}): {count} outputs asked, the op has "
                          f"{len(types)}")
        for i, t in enumerate(types[:count]):
            if (why := oversize(t)) is not None:
                raise OpError(f"node {node_name} ({op}): output {i}: {why}")
        outputs = []
        for i in range(count):
            hint = output_names[i] if output_names and i < len(output_names) else (
                node_name if count == 1 else f"{node_name}_out{i}")
            outputs.append(Value(self.fresh_name(hint), types[i]))
        node = Node(op, node_name, inputs, outputs, full_attrs)
        self.nodes.append(node)
        return node

    def op(self, op: str, *inputs: Value | None, name: str | None = None, **attrs: Any) -> Value:
        """Append a one-output node and return its output: ``g.op("Relu", x)``."""
        return self.add_node(op, inputs, attrs, name=name, num_outputs=1).outputs[0]

    def append(self, node: Node) -> Node:
        """Append an already built node (names must be unique; they are reserved here)."""
        self._node_names.add(node.name)
        for out in node.outputs:
            self._names.add(out.name)
        self.nodes.append(node)
        return node

    # -- queries -------------------------------------------------------------------------------
    def users(self) -> dict[Value, list[tuple[Node, int]]]:
        """Every value mapped to the (node, input index) pairs that read it."""
        uses: dict[Value, list[tuple[Node, int]]] = {}
        for node in self.nodes:
            for i, v in enumerate(node.inputs):
                if v is not None:
                    uses.setdefault(v, []).append((node, i))
        return uses

    def constants(self) -> list[Value]:
        """The constant values the nodes or outputs use, each once, in first-use order."""
        seen: dict[int, Value] = {}
        for node in self.nodes:
            for v in node.inputs:
                if v is not None and v.is_constant and id(v) not in seen:
                    seen[id(v)] = v
        for v in self.outputs:
            if v.is_constant and id(v) not in seen:
                seen[id(v)] = v
        return list(seen.values())

    def values(self) -> Iterator[Value]:
        """Inputs, constants and node outputs, each once."""
        yield from self.inputs
        yield from self.constants()
        for node in self.nodes:
            yield from node.outputs

    def node_by_name(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise IRError(f"no node named {name!r} in {self.name}")

    # -- editing -------------------------------------------------------------------------------
    def replace_all_uses(self, old: Value, new: Value) -> None:
        """Make every reader of ``old`` (nodes and function outputs) read ``new`` instead."""
        for node in self.nodes:
            node.inputs = [new if v is old else v for v in node.inputs]
        self.outputs = [new if v is old else v for v in self.outputs]

    def remove_nodes(self, dead: Iterable[Node]) -> None:
        dead_ids = {id(n) for n in dead}
        self.nodes = [n for n in self.nodes if id(n) not in dead_ids]

    def topological_order(self) -> list[Node]:
        """The nodes in a topological order, stable (the current order where it is legal).

        Raises :class:`IRError` naming a node on a cycle.
        """
        produced_by = {id(out): node for node in self.nodes for out in node.outputs}
        order: list[Node] = []
        state: dict[int, int] = {}  # 1 = on the current path, 2 = done

        for root in self.nodes:
            if state.get(id(root)) == 2:
                continue
            stack: list[tuple[Node, int]] = [(root, 0)]
            state[id(root)] = 1
            while stack:
                node, i = stack.pop()
                if i < len(node.inputs):
                    stack.append((node, i + 1))
                    v = node.inputs[i]
                    dep = produced_by.get(id(v)) if v is not None else None
                    if dep is not None:
                        s = state.get(id(dep))
                        if s == 1:
                            raise IRError(f"cycle through node {dep.name} ({dep.op}), reached "
                                          f"again from node {node.name} ({node.op})")
                        if s is None:
                            state[id(dep)] = 1
                            stack.append((dep, 0))
                else:
                    state[id(node)] = 2
                    order.append(node)
        return order

    def topo_sort(self) -> None:
        """Reorder nodes topologically (stable: keeps the current order where it is legal)."""
        self.nodes = self.topological_order()

    def copy(self) -> Function:
        """A structural copy: new Value and Node objects, constants share their arrays."""
        mapping: dict[int, Value] = {}

        def m(v: Value | None) -> Value | None:
            if v is None:
                return None
            if id(v) not in mapping:
                mapping[id(v)] = Value(v.name, v.type, data=v._data, held_by=v.held_by)
            return mapping[id(v)]

        new = Function(self.name, dict(self.attrs))
        new._names = set(self._names)
        new._node_names = set(self._node_names)
        new._counter = itertools.count(next(self._counter))
        new.inputs = [m(v) for v in self.inputs]  # type: ignore[misc]
        for node in self.nodes:
            outs = [m(o) for o in node.outputs]
            attrs = {k: v.copy() if isinstance(v, Function) else v for k, v in node.attrs.items()}
            new.nodes.append(Node(node.op, node.name, [m(v) for v in node.inputs], outs,  # type: ignore[arg-type]
                                  attrs, node.body.copy() if node.body else None))
        new.outputs = [m(v) for v in self.outputs]  # type: ignore[misc]
        return new

    # -- symbolic shapes ---------------------------------------------------------------------
    @property
    def is_symbolic(self) -> bool:
        """Whether a value's type or a node's attribute has a size expression."""
        return any(not v.type.is_static for v in self.values()) or any(
            has_dim_expr(a) for n in self.nodes for a in n.attrs.values()
            if not isinstance(a, Function))

    @property
    def size_variables(self) -> list[str]:
        """The size variables of the inputs' types, in order of appearance."""
        seen: list[str] = []
        for v in self.inputs:
            for d in v.type.shape:
                seen += [x for x in sorted(dim_vars(d)) if x not in seen]
        return seen

    @property
    def used_size_variables(self) -> list[str]:
        """Every size variable the function's types and node attributes use: those of the
        inputs first (:attr:`size_variables` order), then the rest sorted. A compiled region
        takes its sizes in this order (``CompiledRegion.size_names``)."""
        found: set[str] = set()
        for v in self.values():
            found |= v.type.variables
        for node in self.nodes:
            for a in node.attrs.values():
                if not isinstance(a, Function):
                    found |= attr_vars(a)
        first = [n for n in self.size_variables if n in found]
        return first + sorted(found - set(first))

    def specialize(self, sizes: Mapping[str, int]) -> Function:
        """A copy at the variables' ``sizes``: every type static, every size expression in an
        attribute evaluated (sub-graphs too). Constants share their arrays."""
        new = self.copy()
        new._specialize_in_place({str(k): int(v) for k, v in sizes.items()})
        return new

    def _specialize_in_place(self, sizes: dict[str, int]) -> None:
        values: dict[int, Value] = {}
        for v in [*self.inputs, *(o for n in self.nodes for o in n.outputs), *self.outputs]:
            values[id(v)] = v
        for n in self.nodes:
            for v in n.inputs:
                if v is not None:
                    values[id(v)] = v
        for v in values.values():
            v.type = v.type.evaluate(sizes)
        for n in self.nodes:
            for k, a in n.attrs.items():
                if isinstance(a, Function):
                    a._specialize_in_place(sizes)
                else:
                    n.attrs[k] = substitute(a, sizes)
            if n.body is not None:
                n.body._specialize_in_place(sizes)
        self.attrs.pop("dim_bounds", None)

    def __repr__(self) -> str:
        return f"<Function {self.name}: {len(self.nodes)} nodes>"

    def __str__(self) -> str:
        return printer.format_function(self)


#: The whole model is a function too.
Graph = Function



#: Integer tensors up to this many elements have their contents tracked (:func:`contents_of`).
CONTENTS_LIMIT = 64


def contents_of(value: Value) -> list[Any] | None:
    """The elements of a small integer tensor known before run time, flattened: ints and size
    expressions. Known for a constant, a ``ShapeValues`` node's output (its ``values``) and a
    ``Shape`` node's output (its input's dimensions); None otherwise."""
    t = value.type
    if not t.is_static or t.size > CONTENTS_LIMIT or not (t.dtype.is_int or
                                                          t.dtype.value == "bool"):
        return None
    if value.is_constant and not value.is_held:
        return [int(x) for x in np.asarray(value.data).reshape(-1)]
    node = value.producer
    if node is None:
        return None
    if node.op == "ShapeValues":
        return list(node.attrs["values"])
    if node.op == "Shape" and node.inputs and node.inputs[0] is not None:
        shape = node.inputs[0].type.shape
        return list(shape[node.attrs.get("start", 0):node.attrs.get("end")])
    return None
