"""Helpers shared by the topi computes: shapes, dtypes, broadcasting reads, inlined constants.

Index expressions are built with :func:`mul`/:func:`add`, which leave out multiplications by 1
and additions of 0, so the loop nests a schedule sees are as plain as the math.

Small graph constants (one element) become :func:`const_tensor` computes tagged ``"constant"``;
:func:`read` of such a tensor gives the constant itself, so a compute that reads it through
:func:`read` never loads it and the schedule never sees it as an input.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tessera import te, tir
from tessera.errors import OpError
from tessera.topi import tag as _tag

FLOAT_DTYPES = ("float16", "float32", "float64")


def shape_of(t: te.Tensor) -> tuple[int, ...]:
    """A tensor's shape as Python ints."""
    return t.const_shape()


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def is_int(dtype: str) -> bool:
    return dtype.startswith("int") or dtype.startswith("uint")


def compute_dtype(dtype: str) -> str:
    """The dtype arithmetic is done in for ``dtype`` (float16 in float32, as the references)."""
    return "float32" if dtype == "float16" else dtype


def cast(value: Any, dtype: str) -> tir.PrimExpr:
    """``value`` as ``dtype`` (no node when it already is)."""
    return tir.cast(dtype, value)


def const(value: Any, dtype: str) -> tir.PrimExpr:
    """A constant of ``dtype`` (``True``/``False`` for bool)."""
    if dtype == "bool":
        return tir.IntImm(int(bool(value)), "bool")
    if is_float(dtype):
        return tir.FloatImm(float(value), dtype)
    return tir.IntImm(int(value), dtype)


def mul(e: Any, k: int) -> tir.PrimExpr:
    """``e * k`` for an index ``e`` and a Python int ``k`` (``e`` itself when k == 1)."""
    if k == 1:
        return tir.convert(e)
    if k == 0:
        return tir.const(0)
    return e * k


def add(e: Any, k: Any) -> tir.PrimExpr:
    """``e + k`` for an index (``e`` itself when k is the Python int 0)."""
    if isinstance(k, int) and k == 0:
        return tir.convert(e)
    if isinstance(k, int) and k < 0:
        return e - (-k)
    return e + k


def clamp(e: tir.PrimExpr, lo: int | None, hi: int | None) -> tir.PrimExpr:
    """``e`` limited to ``[lo, hi]`` (a side that is None is left open)."""
    if hi is not None:
        e = tir.min_(e, hi)
    if lo is not None:
        e = tir.max_(e, lo)
    return e


def normalize_axis(axis: int, ndim: int) -> int:
    """``axis`` in ``[0, ndim)`` (negative counts from the end)."""
    if not -ndim <= axis < max(ndim, 1):
        raise OpError(f"axis {axis} out of range for rank {ndim}")
    return axis % ndim if ndim else 0


def prod(values: Sequence[int]) -> int:
    return math.prod(values)


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...]:
    """numpy broadcasting of shapes."""
    try:
        return tuple(np.broadcast_shapes(*(tuple(s) for s in shapes)))
    except ValueError:
        raise OpError(f"shapes {[list(s) for s in shapes]} do not broadcast") from None


def named_axes(fn: Callable[..., tir.PrimExpr], names: Sequence[str]
               ) -> Callable[..., tir.PrimExpr]:
    """``fn`` (taking ``*indices``) as a function whose parameters are ``names``, so that
    :func:`te.compute` names the axes after them (``n``, ``oc``, ``oh``, ...)."""
    def wrapper(*indices: tir.PrimExpr) -> tir.PrimExpr:
        return fn(*indices)

    wrapper.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names])
    return wrapper


# -- constants ------------------------------------------------------------------------------------

def const_tensor(value: np.ndarray, name: str = "const") -> te.Tensor:
    """A small constant as a compute of its shape tagged ``"constant"`` (attrs ``value``).

    Only one-element constants are supported: every element is the same immediate."""
    value = np.asarray(value)
    if value.size != 1:
        raise ValueError(f"const_tensor takes a one-element array, got shape {value.shape}")
    dtype = str(value.dtype)
    imm = const(value.reshape(-1)[0].item(), dtype)
    return te.compute(value.shape, lambda *i: imm, name=name, tag=_tag.CONSTANT,
                      attrs={"value": value})


def constant_value(t: te.Tensor | None) -> np.ndarray | None:
    """The array of a :func:`const_tensor`, else None."""
    if t is None or not isinstance(t.op, te.ComputeOp) or t.op.tag != _tag.CONSTANT:
        return None
    return t.op.attrs.get("value")


def constant_scalar(t: te.Tensor | None) -> Any:
    """The Python value of a one-element :func:`const_tensor`, else None."""
    v = constant_value(t)
    if v is None or v.size != 1:
        return None
    return v.reshape(-1)[0].item()


def read(t: te.Tensor, indices: Sequence[Any]) -> tir.PrimExpr:
    """``t[indices]``, or the immediate when ``t`` is an inlined constant."""
    v = constant_value(t)
    if v is not None and v.size == 1:
        return const(v.reshape(-1)[0].item(), t.dtype)
    return t[tuple(indices)]


def scalar(t: te.Tensor) -> tir.PrimExpr:
    """The only element of a one-element tensor (of any rank)."""
    return read(t, [0] * t.ndim)


def broadcast_index(in_shape: Sequence[int], out_indices: Sequence[Any]) -> list[Any]:
    """Indices into a tensor of ``in_shape`` broadcast (numpy rules, right-aligned) against an
    output indexed by ``out_indices``: size-1 input dimensions read index 0."""
    lead = len(out_indices) - len(in_shape)
    return [0 if d == 1 else out_indices[lead + k] for k, d in enumerate(in_shape)]


def broadcast_read(t: te.Tensor, out_indices: Sequence[Any]) -> tir.PrimExpr:
    """``t`` read at the broadcast position of an output point."""
    return read(t, broadcast_index(shape_of(t), out_indices))


def unravel(flat: tir.PrimExpr, shape: Sequence[int]) -> list[tir.PrimExpr]:
    """Row-major indices of a flat index into ``shape`` (size-1 dims give 0)."""
    out: list[Any] = []
    stride = 1
    for d in reversed(shape):
        if d == 1:
            out.append(tir.const(0))
        elif stride == 1:
            out.append(flat % d if d != prod(shape) else flat)
        else:
            q = flat // stride
            out.append(q if stride * d == prod(shape) else q % d)
        stride *= d
    return list(reversed(out))


def ravel(indices: Sequence[Any], shape: Sequence[int]) -> tir.PrimExpr:
    """The row-major flat index of ``indices`` into ``shape`` (size-1 dims are skipped)."""
    flat: Any = None
    for i, d in zip(indices, shape):
        if d == 1:
            continue
        flat = tir.convert(i) if flat is None else flat * d + i
    return flat if flat is not None else tir.const(0)


__all__ = [
    "add", "broadcast_index", "broadcast_read", "broadcast_shape", "cast", "clamp",
    "compute_dtype", "const", "const_tensor", "constant_scalar", "constant_value",
    "is_float", "is_int", "mul", "named_axes", "normalize_axis", "prod", "ravel", "read",
    "scalar", "shape_of", "unravel",
]
