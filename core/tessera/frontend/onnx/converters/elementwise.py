"""ONNX converters: elementwise family.

Most of these ops map one to one onto the IR op of the same name: their later opset versions
only widened the set of element types (bfloat16, float8, ...). Those whose form changed:

* ``Clip``: opset 6 to 10 give ``min``/``max`` as attributes, opset 11 on as optional inputs;
  both become the IR's ``Clip(input, min?, max?)`` (attributes turn into scalar constants).
* ``Cast``: ``to`` (an ONNX ``TensorProto`` type number) becomes a :class:`DType`; ``saturate``
  (opset 19: float8 targets) and ``round_mode`` (opset 24: float8 e8m0 targets) are kept on the
  IR's ``Cast`` only when the target is one they concern (so other casts keep one form).
  ``CastLike`` becomes a ``Cast`` to the type of its second input, with its ``saturate``. A cast
  to the value's own type is no node at all.
* ``PRelu``: opset 7 on, the slope broadcasts to the input (unidirectionally), as in the IR.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.frontend.onnx.context import ConvertContext
from tessera.frontend.onnx.dtypes import onnx_dtype
from tessera.frontend.onnx.registry import converter, simple
from tessera.ir.cast import FLOAT8
from tessera.ir.graph import Value
from tessera.ir.types import DType

LEGACY = ("consumed_inputs",)  # opset < 6 memory-reuse hint, without meaning here

simple("Identity")
simple("Relu", drop=LEGACY)

# Unchanged in form since before opset 7 (later versions added element types only).
for _op in ("Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Abs", "Neg", "Ceil", "Floor",
            "Reciprocal", "Elu", "Selu", "LeakyRelu", "HardSigmoid", "Softplus", "Softsign",
            "Not"):
    simple(_op, drop=LEGACY)

# Introduced at opset 7 or later (the since version is the op's first).
for _op, _since in (("Sin", 7), ("Cos", 7), ("Tan", 7), ("Asin", 7), ("Acos", 7), ("Atan", 7),
                    ("Erf", 9), ("Sign", 9), ("Sinh", 9), ("Cosh", 9), ("Asinh", 9),
                    ("Acosh", 9), ("Atanh", 9), ("Shrink", 9), ("IsNaN", 9), ("IsInf", 10),
                    ("ThresholdedRelu", 10), ("Round", 11), ("Celu", 12), ("HardSwish", 14),
                    ("Mish", 18), ("BitwiseNot", 18), ("Gelu", 20), ("Swish", 24)):
    simple(_op, since=_since)

simple("PRelu", since=7)


@converter("Clip", since=6)
def clip_attrs(ctx: ConvertContext, inputs: list[Value | None], attrs: dict[str, Any]) -> Value:
    """Opset 6-10: ``min``/``max`` attributes (defaults: the float range) -> scalar inputs."""
    x = inputs[0]
    assert x is not None
    dtype = x.type.dtype.numpy
    lo = ctx.const(np.asarray(attrs["min"], dtype)) if "min" in attrs else None
    hi = ctx.const(np.asarray(attrs["max"], dtype)) if "max" in attrs else None
    return ctx.op("Clip", x, lo, hi)


@converter("Clip", since=11)
def clip_inputs(ctx: ConvertContext, inputs: list[Value | None], attrs: dict[str, Any]) -> Value:
    """Opset 11 on: ``Clip(input, min?, max?)``, as in the IR."""
    x, lo, hi = (list(inputs) + [None, None])[:3]
    return ctx.op("Clip", x, lo, hi)


def _cast(ctx: ConvertContext, x: Value, to: DType, attrs: dict[str, Any]) -> Value:
    if x.type.dtype == to:
        return x
    extra: dict[str, Any] = {}
    if to in FLOAT8 or to == DType.float8_e8m0fnu:
        extra["saturate"] = int(attrs.get("saturate", 1))
    if to == DType.float8_e8m0fnu:
        mode = attrs.get("round_mode", "up")
        extra["round_mode"] = mode.decode() if isinstance(mode, bytes) else str(mode)
    return ctx.op("Cast", x, to=to, **extra)


@converter("Cast", since=6)
def cast(ctx: ConvertContext, inputs: list[Value | None], attrs: dict[str, Any]) -> Value:
    """``to`` -> DType; ``saturate``/``round_mode`` kept for the targets they concern."""
    x = inputs[0]
    assert x is not None
    if "to" not in attrs:
        raise ctx.error("attribute 'to' is required")
    return _cast(ctx, x, onnx_dtype(int(attrs["to"]), "attribute 'to'"), attrs)


@converter("CastLike", since=15)
def cast_like(ctx: ConvertContext, inputs: list[Value | None], attrs: dict[str, Any]) -> Value:
    """``CastLike(input, target_type)`` -> ``Cast(input, to=target_type's type)``."""
    x, like = inputs[0], inputs[1]
    assert x is not None and like is not None
    return _cast(ctx, x, like.type.dtype, attrs)
