"""Cutting an ONNX model at the nodes whose output shapes depend on input values.

Tessera's IR has static shapes: ``NonZero``, ``Unique``, ``NonMaxSuppression`` and
``Compress`` (by a computed condition) import only when their operands are constants. A
model that applies them to run-time values is cut here into *stages* (:func:`plan_stages`):

- stage 1: every node that depends neither on a data-dependent node nor on anything after
  one: an ONNX model of its own, compiled like any model;
- the host nodes: the data-dependent nodes stage 1 (and the graph inputs) feed, evaluated on
  the host by Tessera's own converters with every operand known (:func:`fold_node`);
- the rest: an ONNX model whose inputs include the host nodes' outputs, typed with symbolic
  dimensions where their sizes depend on values (so that compiling it gives a
  :class:`~tessera.runtime.dynamic.DynamicModule`, specialised per size on first use), and
  staged again when it holds further data-dependent nodes.

Nodes that read only constants (``Constant``, shape arithmetic on initializers) are copied
into every stage that reads them; the values the host needs of them are folded once, here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tessera.errors import CompileError, TesseraError
from tessera.frontend.onnx.importer import _opsets, _sorted_nodes, convert_nodes, read_initializer
from tessera.frontend.onnx.subgraphs import Scope
from tessera.ir.graph import Function

__all__ = ["DATA_DEPENDENT_OPS", "StagePlan", "data_dependent_nodes", "fold_node",
           "freeze_model", "node_text", "plan_stages"]

#: Default-domain ops whose output shape depends on input values -> the operand positions
#: that decide it (None: every operand). ``Compress`` by a constant condition has a static
#: shape (it imports as a ``Gather``); by a computed one it does not.
DATA_DEPENDENT_OPS: dict[str, tuple[int, ...] | None] = {
    "NonZero": None,
    "Unique": None,
    "NonMaxSuppression": None,
    "Compress": (1,),
}


def node_text(node: onnx.NodeProto) -> str:
    """``'nz' (NonZero)``: a node for messages (its name, else its first output)."""
    return f"{node.name or node.output[0]!r} ({node.op_type})"


def _node_reads(node: onnx.NodeProto) -> list[str]:
    """The names ``node`` reads: its inputs and the outer names its sub-graphs read."""
    reads = [x for x in node.input if x]
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else \
            list(attr.graphs) if attr.type == onnx.AttributeProto.GRAPHS else []
        for g in graphs:
            reads += _outer_reads(g)
    return reads


def _outer_reads(graph: onnx.GraphProto) -> list[str]:
    """The names a sub-graph reads from its enclosing scopes."""
    defined = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    outer: list[str] = []
    for n in graph.node:
        outer += [x for x in _node_reads(n) if x not in defined]
        defined.update(o for o in n.output if o)
    return list(dict.fromkeys(outer))


def _constant_names(graph: onnx.GraphProto) -> set[str]:
    """Initializers, and graph inputs an initializer gives a default (constants to Tessera's
    importer)."""
    return {t.name for t in graph.initializer}


def _input_dependent(graph: onnx.GraphProto, nodes: Sequence[onnx.NodeProto]) -> set[str]:
    """The values computed from the graph's inputs (the inputs included)."""
    constants = _constant_names(graph)
    found = {vi.name for vi in graph.input if vi.name not in constants}
    for n in nodes:
        if any(x in found for x in _node_reads(n)):
            found.update(o for o in n.output if o)
    return found


def _is_data_dependent(node: onnx.NodeProto, dependent: set[str]) -> bool:
    if node.domain not in ("", "ai.onnx") or node.op_type not in DATA_DEPENDENT_OPS:
        return False
    positions = DATA_DEPENDENT_OPS[node.op_type]
    operands = [x for i, x in enumerate(node.input)
                if x and (positions is None or i in positions)]
    return any(x in dependent for x in operands)


def data_dependent_nodes(proto: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The top-level nodes of ``proto`` whose output shapes depend on run-time values (a
    data-dependent op whose deciding operands depend on graph inputs); empty for almost
    every model, cheaply (one look at each node's op type first)."""
    graph = proto.graph
    if not any(n.op_type in DATA_DEPENDENT_OPS for n in graph.node):
        return []
    nodes = _sorted_nodes(graph)
    dependent = _input_dependent(graph, nodes)
    return [n for n in nodes if _is_data_dependent(n, dependent)]


def freeze_model(proto: onnx.ModelProto, input_shapes: Mapping[str, Sequence[object]] | None,
                 freeze_inputs: Mapping[str, np.ndarray] | None) -> onnx.ModelProto:
    """A copy of ``proto`` with ``freeze_inputs`` made initializers and ``input_shapes``
    written into its inputs' declared shapes (ints as sizes, names as ``dim_param``)."""
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    g = model.graph
    frozen = dict(freeze_inputs or {})
    shapes = dict(input_shapes or {})
    kept = []
    for vi in g.input:
        if vi.name in frozen:
            g.initializer.append(numpy_helper.from_array(np.asarray(frozen[vi.name]), vi.name))
            continue
        if vi.name in shapes:
            dims = vi.type.tensor_type.shape.dim
            old = list(dims)
            del dims[:]
            for i, d in enumerate(shapes[vi.name]):
                new = dims.add()
                if d is None or (isinstance(d, str) and d.strip() == "?"):
                    if i < len(old):
                        new.CopyFrom(old[i])
                elif isinstance(d, str):
                    new.dim_param = d.strip()
                else:
                    new.dim_value = int(d)  # type: ignore[call-overload]
        kept.append(vi)
    del g.input[:]
    g.input.extend(kept)
    return model


def fold_node(node: onnx.NodeProto, values: Mapping[str, np.ndarray],
              opsets: dict[str, int]) -> dict[str, np.ndarray]:
    """Evaluate one node on known operands with Tessera's importer: its converter runs with
    every operand a constant, so the node folds through the op registry's numpy
    implementation. Returns its outputs by name; raises the importer's errors."""
    fn = Function("host")
    env = {name: fn.constant(np.asarray(values[name]), name)
           for name in dict.fromkeys(_node_reads(node))}
    convert_nodes(fn, Scope(fn, env), [node], opsets)
    out: dict[str, np.ndarray] = {}
    for name in node.output:
        if not name:
            continue
        value = env.get(name)
        if value is None or value.data is None:
            raise TesseraError(f"node {node.name!r} ({node.op_type}) did not fold to a "
                               f"constant on constant operands")
        out[name] = value.data
    return out


@dataclass
class StagePlan:
    """How a model is cut: ``stage1`` (None when nothing precedes the host nodes) with its
    input and output names, the ``host`` nodes in order, and the ``rest`` model (None when
    the host nodes end the model) with its inputs; ``constants``: the values the host nodes
    and the outputs read that only constants decide."""

    input_names: list[str]
    output_names: list[str]
    stage1: onnx.ModelProto | None
    stage1_inputs: list[str]
    stage1_outputs: list[str]
    host: list[onnx.NodeProto]
    rest: onnx.ModelProto | None
    rest_inputs: list[str]
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    opsets: dict[str, int] = field(default_factory=dict)


def _dim_name(value: str, axis: int) -> str:
    """A ``dim_param`` for a size only a run knows: the value's name (as an identifier) and
    the axis."""
    base = re.sub(r"\W", "_", value).strip("_") or "value"
    if base[0].isdigit():
        base = f"v{base}"
    return f"{base}_{axis}"


def _inferred_types(proto: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """Every value's type as ONNX shape inference finds it (graph outputs included: their
    declared types are dropped first so that inference fills them in)."""
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    names = [o.name for o in model.graph.output]
    del model.graph.output[:]
    model.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - inference is a help here; declared types remain
        model = proto
    found = {vi.name: vi for vi in model.graph.value_info}
    found.update({vi.name: vi for vi in model.graph.output if vi.type.HasField("tensor_type")})
    found.update({vi.name: vi for vi in proto.graph.input})
    for vi in proto.graph.output:  # a declared shape wins where inference has none
        have = found.get(vi.name)
        if have is None or not have.type.tensor_type.HasField("shape"):
            found[vi.name] = vi
    return found


def _typed(name: str, types: Mapping[str, onnx.ValueInfoProto], what: str,
           symbolic: bool) -> onnx.ValueInfoProto:
    """``name``'s value info for a stage's signature; with ``symbolic``, every size not known
    before a run becomes a ``dim_param`` of its own."""
    vi = types.get(name)
    tt = vi.type.tensor_type if vi is not None and vi.type.HasField("tensor_type") else None
    if tt is None or not tt.elem_type or not tt.HasField("shape"):
        raise CompileError(f"staging a model with data-dependent shapes: the type (element "
                           f"type and rank) of {what} {name!r} cannot be inferred")
    out = onnx.ValueInfoProto()
    out.CopyFrom(vi)
    out.name = name
    for axis, d in enumerate(out.type.tensor_type.shape.dim):
        known = d.HasField("dim_value") or (d.dim_param and not d.dim_param.startswith("unk__")
                                            and d.dim_param.isidentifier())
        if symbolic and not known:
            d.Clear()
            d.dim_param = _dim_name(name, axis)
    return out


def _sub_model(proto: onnx.ModelProto, nodes: Iterable[onnx.NodeProto],
               inputs: Sequence[onnx.ValueInfoProto], outputs: Sequence[onnx.ValueInfoProto],
               name: str) -> onnx.ModelProto:
    """An ONNX model of ``nodes`` (in order) with the initializers they read."""
    nodes = list(nodes)
    reads = {x for n in nodes for x in _node_reads(n)}
    inits = [t for t in proto.graph.initializer if t.name in reads]
    graph = helper.make_graph(nodes, name, list(inputs), list(outputs), inits)
    model = helper.make_model(graph, opset_imports=list(proto.opset_import),
                              ir_version=proto.ir_version)
    model.functions.extend(proto.functions)
    return model


def _closure(wanted: Iterable[str], producers: Mapping[str, onnx.NodeProto]
             ) -> list[onnx.NodeProto]:
    """The constant-only nodes that compute ``wanted`` (those it needs first), each once."""
    order: list[onnx.NodeProto] = []
    seen: set[int] = set()

    def visit(name: str) -> None:
        node = producers.get(name)
        if node is None or id(node) in seen:
            return
        seen.add(id(node))
        for x in _node_reads(node):
            visit(x)
        order.append(node)

    for name in wanted:
        visit(name)
    return order


def plan_stages(proto: onnx.ModelProto) -> StagePlan:
    """Cut ``proto`` (inputs frozen and shapes applied: :func:`freeze_model`) at its
    data-dependent nodes. Raises :class:`CompileError` when it has none."""
    graph = proto.graph
    nodes = _sorted_nodes(graph)
    opsets = _opsets(proto)
    constants = _constant_names(graph)
    inputs = [vi.name for vi in graph.input if vi.name not in constants]
    dependent = _input_dependent(graph, nodes)
    host_all = [n for n in nodes if _is_data_dependent(n, dependent)]
    if not host_all:
        raise CompileError("the model has no node whose output shape depends on input values")
    # constant-only nodes: copied into each stage that reads them
    const_producers = {o: n for n in nodes if not any(x in dependent for x in _node_reads(n))
                       for o in n.output if o}
    tainted: set[str] = set()  # values after a data-dependent node
    for n in nodes:
        if any(n is h for h in host_all) or any(x in tainted for x in _node_reads(n)):
            tainted.update(o for o in n.output if o)
    host = [n for n in host_all if not any(x in tainted for x in _node_reads(n))]
    host_ids = {id(n) for n in host}
    stage1_nodes = [n for n in nodes if n.output and n.output[0] not in const_producers
                    and id(n) not in host_ids
                    and not any(x in tainted for x in _node_reads(n))]
    rest_nodes = [n for n in nodes if any(o in tainted for o in n.output if o)
                  and id(n) not in host_ids]
    stage1_made = {o for n in stage1_nodes for o in n.output if o}
    host_made = {o for n in host for o in n.output if o}
    output_names = [o.name for o in graph.output]
    types = _inferred_types(proto)

    rest_reads = list(dict.fromkeys(x for n in rest_nodes for x in _node_reads(n)))
    rest_outer = [x for x in rest_reads if x not in {o for n in rest_nodes for o in n.output}]
    rest_inputs = [x for x in rest_outer if x in stage1_made or x in host_made
                   or x in inputs]
    host_reads = list(dict.fromkeys(x for n in host for x in _node_reads(n)))
    stage1_outputs = list(dict.fromkeys(
        x for x in [*host_reads, *rest_inputs, *output_names] if x in stage1_made))
    stage1_reads = {x for n in stage1_nodes for x in _node_reads(n)}
    stage1_inputs = [x for x in inputs if x in stage1_reads]

    stage1 = None
    if stage1_nodes and stage1_outputs:
        s1_consts = _closure(sorted(stage1_reads), const_producers)
        stage1 = _sub_model(proto, [*s1_consts, *stage1_nodes],
                            [_typed(x, types, "graph input", False) for x in stage1_inputs],
                            [_typed(x, types, "value", False) for x in stage1_outputs],
                            f"{graph.name or 'model'}_stage1")
    rest = None
    rest_outputs = [x for x in output_names if x in tainted and x not in host_made]
    if rest_nodes and rest_outputs:
        rest_consts = _closure(rest_reads, const_producers)
        rest = _sub_model(proto, [*rest_consts, *rest_nodes],
                          [_typed(x, types, "value", True) for x in rest_inputs],
                          [_typed(x, types, "value", True) for x in rest_outputs],
                          f"{graph.name or 'model'}_rest")
    else:
        rest_inputs = []

    # the values only constants decide that the host nodes read or the model outputs
    wanted = [x for x in [*host_reads, *output_names] if x in const_producers or x in constants]
    folding = _closure(wanted, const_producers)
    needed = set(wanted) | {x for n in folding for x in _node_reads(n)}
    known: dict[str, np.ndarray] = {t.name: read_initializer(t) for t in graph.initializer
                                    if t.name in needed}
    for n in folding:
        known.update(fold_node(n, known, opsets))
    return StagePlan(inputs, output_names, stage1, stage1_inputs, stage1_outputs, host, rest,
                     rest_inputs, {k: v for k, v in known.items() if k in wanted}, opsets)
