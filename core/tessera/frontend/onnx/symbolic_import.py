"""The importer's symbolic mode: one graph for every size of the model's variables.

``import_onnx(model, symbolic=True)`` keeps the inputs' symbolic dimensions (``batch``,
``seq``) as size variables: every type is a :class:`~tessera.ir.types.TensorType` whose
dimensions may be expressions of them. Alongside the conversion, node by node,
:mod:`.symbolic_shapes` infers each ONNX value's shape and, for the small integer tensors
exporters compute shapes with (``Shape -> Gather -> Unsqueeze -> Concat``), its contents as
expressions. Such a value never becomes a node chain: it is a constant when its contents are
ints, else one ``ShapeValues`` node (its ``values`` are the expressions), and the converters
that need it as an attribute (Reshape's shape, Expand's shape, Slice's ends, Range's limit,
ConstantOfShape's shape) read the expressions from there (:func:`contents_of`): the
attributes of the graph hold ``[batch, seq, 8, 64]``, not one size's numbers.

Whatever the inference does not know about a value (an op it has no rule for) it takes from
the IR type the converter produced, so later shape arithmetic on it is still folded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from tessera.frontend.onnx.context import ConvertContext
from tessera.frontend.onnx.dtypes import onnx_dtype
from tessera.frontend.onnx.symbolic_shapes import CONTENT_LIMIT, SymValue, _Inference
from tessera.ir.graph import Function, Value, contents_of
from tessera.ir.symbolic import normalize_dim
from tessera.ir.types import DType
from tessera.tir import expr as E

__all__ = ["emit_known_contents", "prune_shape_values", "record_outputs"]

#: ONNX ops whose outputs are bool.
_BOOL_OPS = frozenset({"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And",
                       "Or", "Not", "Xor", "IsNaN", "IsInf"})


def _content_dtype(node: onnx.NodeProto, attrs: dict[str, Any],
                   inputs: Sequence[Any]) -> DType | None:
    """The dtype of a node's outputs, for the ops shape arithmetic uses (None: unknown)."""
    op = node.op_type
    if op in ("Shape", "Size"):
        return DType.int64
    if op == "Cast" and "to" in attrs:
        return onnx_dtype(int(attrs["to"]), "to")
    if op in _BOOL_OPS:
        return DType.bool
    if op == "ConstantOfShape":
        value = attrs.get("value")
        return DType.from_numpy(np.asarray(value).dtype) if value is not None else DType.float32
    pick = {"CastLike": 1, "Where": 1}.get(op, 0)
    if pick < len(inputs) and isinstance(inputs[pick], Value):
        return inputs[pick].type.dtype
    return None


def _static_shape(shape: tuple[E.PrimExpr, ...] | None) -> tuple[int, ...] | None:
    if shape is None or not all(isinstance(d, E.IntImm) for d in shape):
        return None
    return tuple(int(d.value) for d in shape)  # type: ignore[attr-defined]


def emit_known_contents(ctx: ConvertContext, inference: _Inference, node: onnx.NodeProto,
                        attrs: dict[str, Any], inputs: Sequence[Any]) -> list[Value] | None:
    """For a node whose every output has known contents (inferred before), those values:
    constants, or ``ShapeValues`` nodes for contents that depend on the sizes; None when the
    node must be converted (some contents unknown, or not an integer or bool result)."""
    if node.op_type in ("Constant", "If", "Loop", "Scan") or not node.output:
        return None
    known = [inference.values.get(name) for name in node.output]
    if any(v is None or v.contents is None or _static_shape(v.shape) is None for v in known):
        return None
    dtype = _content_dtype(node, attrs, inputs)
    if dtype is None or not (dtype.is_int or dtype == DType.bool):
        return None
    out: list[Value] = []
    for i, v in enumerate(known):
        assert v is not None and v.contents is not None
        shape = _static_shape(v.shape)
        assert shape is not None
        values = [normalize_dim(c) for c in v.contents]
        if len(values) != int(np.prod(shape, dtype=np.int64)):
            return None
        name = node.output[i] or ctx.op_type.lower()
        if all(isinstance(x, int) for x in values):
            out.append(ctx.const(np.array(values, np.int64).astype(dtype.numpy).reshape(shape),
                                 name=name))
        else:
            out.append(ctx.graph.add_node("ShapeValues", [], {
                "values": values, "shape": list(shape), "dtype": dtype},
                name=f"{name}_values", num_outputs=1, output_names=[name]).outputs[0])
            ctx.created.extend(out[-1:])
    return out


def record_outputs(inference: _Inference, node: onnx.NodeProto,
                   outputs: Sequence[Any]) -> None:
    """Complete the inference with what the conversion knows: an output whose shape it left
    unknown gets the IR type's, and one the IR knows the contents of gets those."""
    for name, value in zip(node.output, outputs):
        if not name or not isinstance(value, Value):
            continue
        known = inference.values.get(name)
        shape = known.shape if known is not None else None
        if shape is None:
            shape = tuple(E.IntImm(d, "int64") if isinstance(d, int) else d
                          for d in value.type.shape)
        contents = known.contents if known is not None else None
        if contents is None and value.type.is_static and value.type.size <= CONTENT_LIMIT:
            elements = contents_of(value)
            if elements is not None:
                contents = tuple(E.IntImm(int(x), "int64") if isinstance(x, (int, np.integer))
                                 else x for x in elements)
        inference.values[name] = SymValue(shape, contents)


def prune_shape_values(fn: Function) -> None:
    """Drop ``ShapeValues`` and ``Shape`` nodes nobody reads (their values went into
    attributes)."""
    while True:
        read = {id(v) for n in fn.nodes for v in n.inputs if v is not None}
        read |= {id(v) for v in fn.outputs}
        dead = [n for n in fn.nodes if n.op in ("ShapeValues", "Shape")
                and not any(id(o) in read for o in n.outputs)]
        if not dead:
            return
        fn.remove_nodes(dead)
