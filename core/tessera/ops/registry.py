"""The operator registry: one schema per op with attributes, type inference and a numpy reference.

An op is registered once, with a decorator on its numpy reference implementation::

    @register_op("LeakyRelu", attrs={"alpha": Attr.float(0.01)}, pattern=OpPattern.ELEMWISE)
    def leaky_relu(x, *, alpha):
        return np.where(x >= 0, x, x * alpha).astype(x.dtype)

The reference takes the input arrays positionally (``None`` for an omitted optional input) and
the attributes as keywords (defaults filled in) and returns one array or a tuple of arrays.
``infer`` takes the input :class:`TensorType` objects the same way and returns one type or a tuple;
when an op gives no ``infer``, its types are found by running the reference on zero-filled inputs
(fine for small, rarely used ops; every op of the common model families has an explicit one).

The reference backend, constant folding and every test oracle use these same implementations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.errors import OpError
from tessera.ir.schema import (
    _SCHEMAS,
    REQUIRED,
    Attr,
    InferFn,
    OpPattern,
    OpSchema,
    RefFn,
    add_schema,
    all_ops,
    get_schema,
    has_op,
)
from tessera.ir.types import DType, TensorType

__all__ = ["REQUIRED", "Attr", "InferFn", "OpPattern", "OpSchema", "RefFn", "add_schema",
           "all_ops", "broadcast_bool_infer", "broadcast_infer", "broadcast_shapes",
           "get_schema", "has_op", "normalize_axis", "register_op", "same_as_first"]

#: The table itself lives in :mod:`tessera.ir.schema` (the IR consults it); this name is kept.
_REGISTRY = _SCHEMAS


def register_op(name: str, *, attrs: dict[str, Attr] | None = None,
                inputs: int | tuple[int, int | None] = 1, infer: InferFn | None = None,
                pattern: OpPattern = OpPattern.OPAQUE) -> Callable[[RefFn], RefFn]:
    """Decorator registering a numpy reference implementation as op ``name``."""
    num_inputs = (inputs, inputs) if isinstance(inputs, int) else inputs

    def deco(fn: RefFn) -> RefFn:
        add_schema(OpSchema(name, fn, infer, dict(attrs or {}), num_inputs, pattern,
                            (fn.__doc__ or "").strip()))
        return fn

    return deco


# -- shared inference helpers ------------------------------------------------------------------

def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """Numpy broadcasting of shapes, with an error that shows them."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        listed = ", ".join(str(list(s)) for s in shapes)
        raise OpError(f"shapes {listed} do not broadcast") from None


def same_as_first(x: TensorType, *rest: Any, **attrs: Any) -> TensorType:
    """Inference for ops whose output has the type of their first input."""
    return x


def broadcast_infer(*types: TensorType | None, **attrs: Any) -> TensorType:
    """Inference for broadcasting ops whose output dtype is the first input's."""
    present = [t for t in types if t is not None]
    return TensorType(broadcast_shapes(*(t.shape for t in present)), present[0].dtype)


def broadcast_bool_infer(*types: TensorType | None, **attrs: Any) -> TensorType:
    """Inference for broadcasting comparisons and logical ops (bool output)."""
    present = [t for t in types if t is not None]
    return TensorType(broadcast_shapes(*(t.shape for t in present)), DType.bool)


def normalize_axis(axis: int, ndim: int, node: str = "") -> int:
    """Map a possibly negative axis into [0, ndim)."""
    if not -ndim <= axis < max(ndim, 1):
        raise OpError(f"{node + ': ' if node else ''}axis {axis} out of range for rank {ndim}")
    return axis % ndim if ndim else 0
