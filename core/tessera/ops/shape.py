"""Ops: values computed from sizes, for graphs with symbolic shapes.

With static shapes the ONNX importer folds a model's shape arithmetic (``Shape -> Gather ->
Concat``, ``Range(0, seq)``, ``ConstantOfShape``) into constants. With symbolic shapes those
values depend on the sizes, so they stay in the graph as these ops, whose attributes may hold
size expressions (:mod:`tessera.ir.symbolic`): evaluated once the sizes are bound
(``Function.specialize``), then folded like any constant.

* ``Shape``: a tensor's dimensions (``start``/``end`` as in ONNX), int64;
* ``ShapeValues``: a small integer tensor whose elements are ``values`` (ints and size
  expressions), reshaped to ``shape``: what the importer leaves for the exporter's shape
  arithmetic (``[batch, seq, 8, 64]``) where a tensor, not an attribute, reads it;
* ``Range``: ``arange(start, limit, delta)`` with bounds that may be size expressions;
* ``ConstantOfShape``: a tensor of ``shape`` (ints and size expressions) filled with ``value``.

The references need ints: a size expression left in an attribute is an :class:`OpError`
saying to bind the sizes first.

``ShapeValues``, ``Range`` and ``ConstantOfShape`` make each element from its index alone:
they are ``INJECTIVE`` and fuse into the kernels that read them, where ``Range(seq)[j]`` is
the loop variable ``j`` itself (an attention mask read at ``Range(seq) + Range(batch) * seq``
becomes ``mask[j + b * seq]``, which the simplifier proves in bounds and a vector loop reads
in place). ``Shape`` stays ``OPAQUE``: it reads its input's dimensions, not its data.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tessera.errors import OpError
from tessera.ir.symbolic import dim_algebra, has_dim_expr, is_dim_expr, normalize_dim
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import Attr, OpPattern, register_op

OPAQUE = OpPattern.OPAQUE
INJECTIVE = OpPattern.INJECTIVE


def _require_ints(op: str, **attrs: Any) -> None:
    for name, value in attrs.items():
        if has_dim_expr(value):
            raise OpError(f"{op}: attribute {name} holds size expressions ({value}); bind "
                          f"the sizes first (Function.specialize)")


# -- Shape -----------------------------------------------------------------------------------

def _shape_slice(rank: int, start: int, end: int | None) -> tuple[int, int]:
    start = start + rank if start < 0 else start
    end = rank if end is None else (end + rank if end < 0 else end)
    return max(0, min(rank, start)), max(0, min(rank, end))


def _shape_infer(x: TensorType, *, start: int, end: int | None) -> TensorType:
    lo, hi = _shape_slice(x.ndim, start, end)
    return TensorType((max(hi - lo, 0),), DType.int64)


@register_op("Shape", attrs={"start": Attr.int(0), "end": Attr.int(None)}, infer=_shape_infer,
             pattern=OPAQUE)
def shape(x: np.ndarray, *, start: int, end: int | None) -> np.ndarray:
    """The dimensions ``start:end`` of ``x``'s shape, int64."""
    lo, hi = _shape_slice(x.ndim, start, end)
    return np.array(x.shape[lo:hi], dtype=np.int64)


# -- ShapeValues -------------------------------------------------------------------------------

def _shape_values_infer(*, values: list[Any], shape: list[int], dtype: DType) -> TensorType:
    if any(d < 0 for d in shape) or math.prod(shape) != len(values):
        raise OpError(f"ShapeValues: {len(values)} values do not fill shape {shape}")
    if not (dtype.is_int or dtype == DType.bool):
        raise OpError(f"ShapeValues: dtype must be an integer type or bool, got {dtype}")
    return TensorType(tuple(shape), dtype)


@register_op("ShapeValues", attrs={"values": Attr.ints(), "shape": Attr.ints(),
                                   "dtype": Attr.dtype(DType.int64)},
             inputs=(0, 0), infer=_shape_values_infer, pattern=INJECTIVE)
def shape_values(*, values: list[Any], shape: list[int], dtype: DType) -> np.ndarray:
    """``values`` as a ``dtype`` tensor of ``shape``."""
    _require_ints("ShapeValues", values=values)
    return np.array(values, dtype=np.int64).astype(dtype.numpy).reshape(shape)


# -- Range ------------------------------------------------------------------------------------

def _range_length(start: Any, limit: Any, delta: Any) -> Any:
    """``max(ceil((limit - start) / delta), 0)``; an expression when a bound is one (then
    ``delta`` must be a non-zero int)."""
    if not any(is_dim_expr(v) for v in (start, limit, delta)):
        if delta == 0:
            raise OpError("Range: delta is 0")
        span = (limit - start) / delta
        if not math.isfinite(span):
            raise OpError(f"Range: start {start}, limit {limit} and delta {delta} give no "
                          f"finite length")
        return max(math.ceil(span), 0)
    if not isinstance(delta, int) or delta == 0:
        raise OpError(f"Range: with size expressions as bounds, delta must be a non-zero int, "
                      f"got {delta}")
    if not all(isinstance(v, int) or is_dim_expr(v) for v in (start, limit)):
        raise OpError("Range: size-expression bounds take integer starts and limits")
    step = delta if delta > 0 else -delta
    span = limit - start if delta > 0 else start - limit
    return dim_algebra().maximum(normalize_dim((span + (step - 1)) // step), 0)


def _range_infer(*, start: Any, limit: Any, delta: Any, dtype: DType) -> TensorType:
    return TensorType((_range_length(start, limit, delta),), dtype)


@register_op("Range", attrs={"start": Attr.any(), "limit": Attr.any(), "delta": Attr.any(1),
                             "dtype": Attr.dtype(DType.int64)},
             inputs=(0, 0), infer=_range_infer, pattern=INJECTIVE)
def range_(*, start: Any, limit: Any, delta: Any, dtype: DType) -> np.ndarray:
    """``arange(start, limit, delta)`` as ``dtype`` (computed in int64 or float64)."""
    _require_ints("Range", start=start, limit=limit, delta=delta)
    compute: Any = np.float64 if dtype.is_float else np.int64
    return np.arange(start, limit, delta, dtype=compute).astype(dtype.numpy)


# -- ConstantOfShape ----------------------------------------------------------------------------

def _cos_value(value: np.ndarray | None) -> np.ndarray:
    v = np.zeros(1, np.float32) if value is None else np.asarray(value)
    if v.size != 1:
        raise OpError(f"ConstantOfShape: value must hold one element, got shape "
                      f"{list(v.shape)}")
    return v.reshape(-1)


def _cos_infer(*, shape: list[Any], value: np.ndarray | None) -> TensorType:
    return TensorType(tuple(shape), DType.from_numpy(_cos_value(value).dtype))


@register_op("ConstantOfShape", attrs={"shape": Attr.ints(), "value": Attr.tensor(None)},
             inputs=(0, 0), infer=_cos_infer, pattern=INJECTIVE)
def constant_of_shape(*, shape: list[Any], value: np.ndarray | None) -> np.ndarray:
    """A tensor of ``shape`` filled with ``value`` (float32 zero by default)."""
    _require_ints("ConstantOfShape", shape=shape)
    v = _cos_value(value)
    return np.full(shape, v[0], dtype=v.dtype)
