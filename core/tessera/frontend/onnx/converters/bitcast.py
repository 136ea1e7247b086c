"""ONNX converter: ``BitCast`` (opset 26), one to one onto the IR op of the same name."""

from __future__ import annotations

from typing import Any

from tessera.frontend.onnx.context import ConvertContext
from tessera.frontend.onnx.dtypes import onnx_dtype
from tessera.frontend.onnx.registry import converter
from tessera.ir.graph import Value


@converter("BitCast", since=26)
def convert_bitcast(ctx: ConvertContext, inputs: list[Value | None],
                    attrs: dict[str, Any]) -> Value:
    """``to`` -> DType; a bit cast to the input's own type is the input."""
    x = inputs[0] if inputs else None
    if x is None:
        raise ctx.error("input is required")
    if "to" not in attrs:
        raise ctx.error("attribute 'to' is required")
    to = onnx_dtype(int(attrs["to"]), "attribute 'to'")
    if to == x.type.dtype:
        return x
    return ctx.op("BitCast", x, to=to)
