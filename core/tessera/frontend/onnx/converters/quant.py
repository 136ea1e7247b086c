"""ONNX converters: quant family.

QuantizeLinear/DequantizeLinear of every opset map to one IR form (``axis``, ``block_size``,
``output_dtype`` and ``precision`` as DTypes), float8, float4, 4-bit and 2-bit types included.
QLinearConv and ConvInteger get explicit pads like Conv.
"""

from __future__ import annotations

from typing import Any

from tessera.frontend.onnx.context import ConvertContext
from tessera.frontend.onnx.converters.nn import conv_window_attrs, onnx_elem_dtype, operands
from tessera.frontend.onnx.registry import converter, simple
from tessera.ir.graph import Value
from tessera.ir.types import DType
from tessera.ops.quant import QUANT_DTYPES

Inputs = list[Value | None]
Attrs = dict[str, Any]


def _dtype_attr(ctx: ConvertContext, attrs: Attrs, name: str) -> DType | None:
    value = int(attrs.get(name, 0) or 0)
    if not value:
        return None
    dtype = onnx_elem_dtype(ctx, value, name)
    return dtype


def _check_quant_type(ctx: ConvertContext, dtype: DType | None, what: str) -> None:
    if dtype is not None and dtype not in QUANT_DTYPES:
        raise ctx.error(f"{what} {dtype} is not a supported quantized type (supported: "
                        f"{', '.join(d.value for d in QUANT_DTYPES)})")


@converter("QuantizeLinear", since=10)
def convert_quantize_linear(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    out = _dtype_attr(ctx, attrs, "output_dtype")
    _check_quant_type(ctx, out, "output_dtype")
    zp = inputs[2] if len(inputs) > 2 else None
    if zp is not None:
        _check_quant_type(ctx, zp.type.dtype, "y_zero_point type")
    return ctx.op("QuantizeLinear", *operands(inputs[0], inputs[1], zp), axis=attrs.get("axis", 1),
                  block_size=attrs.get("block_size", 0), output_dtype=out,
                  saturate=attrs.get("saturate", 1),
                  precision=_dtype_attr(ctx, attrs, "precision"))


@converter("DequantizeLinear", since=10)
def convert_dequantize_linear(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x = inputs[0]
    assert x is not None
    _check_quant_type(ctx, x.type.dtype, "input type")
    zp = inputs[2] if len(inputs) > 2 else None
    fold = ctx.fold
    if x.is_constant and x.type.dtype in (DType.int8, DType.uint8):
        # an 8-bit weight stays a node: the QDQToInteger pass reads its integers (and
        # FoldConstants, after it, folds those it leaves)
        ctx.fold = False
    try:
        return ctx.op("DequantizeLinear", *operands(x, inputs[1], zp), axis=attrs.get("axis", 1),
                      block_size=attrs.get("block_size", 0),
                      output_dtype=_dtype_attr(ctx, attrs, "output_dtype"))
    finally:
        ctx.fold = fold


simple("DynamicQuantizeLinear", since=11)
simple("MatMulInteger", since=10)
simple("QLinearMatMul", since=10)


def _conv_like(op: str, weight_index: int):
    def convert(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
        x, w = inputs[0], inputs[weight_index]
        assert x is not None and w is not None
        ir = conv_window_attrs(ctx, x, w, attrs)
        return ctx.op(op, *operands(*inputs), group=attrs.get("group", 1), **ir)

    convert.__name__ = f"convert_{op}"
    return convert


converter("QLinearConv", since=10)(_conv_like("QLinearConv", 3))
converter("ConvInteger", since=10)(_conv_like("ConvInteger", 1))
