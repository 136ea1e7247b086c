"""ONNX converters: reduce family (Reduce*, ArgMax/ArgMin, TopK, CumSum/CumProd).

Every ``Reduce*`` node becomes the IR op of the same name with explicit, sorted, non-negative
``axes`` and ``keepdims``: the axes come from the attribute before opset 18 (13 for ReduceSum) and
from the constant second input after; ``noop_with_empty_axes`` with no axes becomes Identity
(or, for ReduceL1/L2/SumSquare/LogSum/LogSumExp, the op over no axes: its elementwise part).
"""

from __future__ import annotations

from typing import Any

from tessera.frontend.onnx.context import ConvertContext
from tessera.frontend.onnx.registry import converter, simple
from tessera.ir.graph import Value
from tessera.ops.registry import normalize_axis

Inputs = list[Value | None]
Attrs = dict[str, Any]

#: Reduce op -> the opset from which its axes are an input instead of an attribute.
AXES_INPUT_SINCE = {
    "ReduceSum": 13,
    "ReduceMean": 18,
    "ReduceMax": 18,
    "ReduceMin": 18,
    "ReduceProd": 18,
    "ReduceL1": 18,
    "ReduceL2": 18,
    "ReduceLogSum": 18,
    "ReduceLogSumExp": 18,
    "ReduceSumSquare": 18,
}

#: Reductions that are the identity over no axes (the others still map every element:
#: onnxruntime and the onnx reference give ReduceL1 |x|, ReduceSumSquare x * x, ...).
IDENTITY_WHEN_NOOP = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"}


def _register_reduce(op: str, axes_since: int) -> None:
    def convert(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
        x = inputs[0]
        assert x is not None
        if ctx.opset >= axes_since:
            axis_input = inputs[1] if len(inputs) > 1 else None
            axes = ctx.const_ints(axis_input, "axes")
        else:
            axes = attrs.get("axes")
        if not axes:
            if attrs.get("noop_with_empty_axes", 0):
                if op in IDENTITY_WHEN_NOOP:
                    return ctx.op("Identity", x)
                return ctx.op(op, x, axes=[], keepdims=1)  # only the elementwise part
            axes = list(range(x.type.ndim))
        norm = sorted({normalize_axis(int(a), x.type.ndim) for a in axes})
        if len(norm) != len(axes):
            raise ctx.error(f"axes {list(axes)} repeat an axis")
        return ctx.op(op, x, axes=norm, keepdims=attrs.get("keepdims", 1))

    convert.__name__ = f"convert_{op}"
    converter(op, since=1)(convert)


for _op, _since in AXES_INPUT_SINCE.items():
    _register_reduce(_op, _since)

simple("ArgMax", since=1)
simple("ArgMin", since=1)


def _topk(ctx: ConvertContext, x: Value, k: int, attrs: Attrs) -> list[Value]:
    return ctx.node("TopK", [x], {"k": k, "axis": attrs.get("axis", -1),
                                  "largest": attrs.get("largest", 1),
                                  "sorted": attrs.get("sorted", 1)}, num_outputs=2)


@converter("TopK", since=1)
def convert_topk_1(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> list[Value]:
    x = inputs[0]
    assert x is not None
    return _topk(ctx, x, int(attrs["k"]), attrs)


@converter("TopK", since=10)
def convert_topk_10(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> list[Value]:
    x = inputs[0]
    assert x is not None
    k = ctx.const_ints(inputs[1], "k") or []
    if len(k) != 1:
        raise ctx.error(f"K must hold one number, got {k}")
    return _topk(ctx, x, k[0], attrs)


def _register_cumulative(op: str, since: int) -> None:
    def convert(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
        axis = ctx.const_ints(inputs[1], "axis") or []
        if len(axis) != 1:
            raise ctx.error(f"axis must hold one number, got {axis}")
        return ctx.op(op, inputs[0], axis=axis[0], exclusive=attrs.get("exclusive", 0),
                      reverse=attrs.get("reverse", 0))

    convert.__name__ = f"convert_{op}"
    converter(op, since=since)(convert)


_register_cumulative("CumSum", 11)
_register_cumulative("CumProd", 26)
