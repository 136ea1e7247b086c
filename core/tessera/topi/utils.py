"""Helpers shared by the topi computes: shapes, dtypes, broadcasting reads, inlined constants.

Index expressions are built with :func:`mul`/:func:`add`, which leave out multiplications by 1
and additions of 0, so the loop nests a schedule sees are as plain as the math.

Shapes may hold run-time sizes (``tir.Var("seq")`` and expressions of them): :func:`dims_of`
gives a tensor's dimensions as ``int`` where static and as ``int64`` index expressions where
not (:data:`Dim`); :func:`shape_of` stays the all-static view (ints only). Dimensions are
compared with :func:`dim_equal` (equal ints, or expressions equal as polynomials: ``s * 8`` and
``8 * s``), never with ``==``; the other ``dim_*`` helpers compute with them, folding back to
``int`` whatever is constant, so static shapes build exactly the computes they always did.

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
from tessera.tir.arith import struct_equal, to_poly
from tessera.topi import tag as _tag

FLOAT_DTYPES = ("float16", "float32", "float64")

#: A dimension: an ``int`` when static, an ``int64`` index expression when it is a run-time
#: size (a size variable or an expression of size variables).
Dim = int | tir.PrimExpr


def shape_of(t: te.Tensor) -> tuple[int, ...]:
    """A tensor's shape as Python ints (an error naming the dimension when one is a run-time
    size: computes that accept those read :func:`dims_of`)."""
    return t.const_shape()


def as_dim(d: Any) -> Dim:
    """``d`` (an int, a numpy integer, an index expression) as a :data:`Dim`: an ``int`` when
    it is a constant, else the ``int64`` expression (in a canonical polynomial form when it
    is a sum of products: ``s * 8 + 0`` -> ``s * 8``)."""
    if isinstance(d, tir.IntImm):
        return int(d.value)
    if isinstance(d, tir.PrimExpr):
        if d.dtype != "int64":
            d = tir.cast("int64", d)
        if isinstance(d, tir.Var):
            return d
        p = to_poly(d)
        return int(p.const) if p.is_const() else p.to_expr()
    if isinstance(d, bool):
        return int(d)
    if isinstance(d, int | np.integer):
        return int(d)
    raise TypeError(f"{d!r} is not a dimension (an int or an integer expression)")


def dims_of(t: te.Tensor) -> tuple[Dim, ...]:
    """``t``'s shape with its static dimensions as ints and its run-time ones as index
    expressions (those of the tensor itself)."""
    return tuple(int(d.value) if isinstance(d, tir.IntImm) else d for d in t.shape)


def is_static(dims: Sequence[Dim] | Dim) -> bool:
    """Whether a dimension (or every dimension of a shape) is a Python int."""
    if isinstance(dims, int | tir.PrimExpr):
        return isinstance(dims, int)
    return all(isinstance(d, int) for d in dims)


def is_const_dim(d: Dim, value: int) -> bool:
    """Whether ``d`` is the constant ``value`` (an expression never is)."""
    if isinstance(d, tir.IntImm):
        return d.value == value
    return isinstance(d, int) and d == value


def dim_equal(a: Dim, b: Dim) -> bool:
    """Whether two dimensions are provably equal: equal ints, or expressions that are
    structurally equal or equal as polynomials (the same size variables)."""
    a, b = as_dim(a), as_dim(b)
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, int) or isinstance(b, int):
        return False
    if struct_equal(a, b):
        return True
    diff = to_poly(a).add(to_poly(b), -1)
    return diff.is_const() and diff.const == 0


def shapes_equal(a: Sequence[Dim], b: Sequence[Dim]) -> bool:
    """Whether two shapes have the same rank and provably equal dimensions."""
    return len(a) == len(b) and all(dim_equal(x, y) for x, y in zip(a, b))


def dim_add(a: Dim, b: Dim) -> Dim:
    """``a + b`` (an int when both are)."""
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return as_dim(tir.convert(a, "int64") + tir.convert(b, "int64"))


def dim_sub(a: Dim, b: Dim) -> Dim:
    """``a - b`` (an int when both are)."""
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    return as_dim(tir.convert(a, "int64") - tir.convert(b, "int64"))


def dim_prod(dims: Sequence[Dim]) -> Dim:
    """The product of dimensions (an int when every one is)."""
    if is_static(dims):
        return math.prod(dims)  # type: ignore[arg-type]
    out: Any = tir.const(1, "int64")
    for d in dims:
        out = out * tir.convert(d, "int64")
    return as_dim(out)


def dim_text(d: Dim) -> int | str:
    """A dimension for workload keys and messages: the int, or the expression's text."""
    d = as_dim(d)
    return d if isinstance(d, int) else str(d)


def shape_text(dims: Sequence[Dim]) -> list[int | str]:
    return [dim_text(d) for d in dims]


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


def clamp(e: tir.PrimExpr, lo: Dim | None, hi: Dim | None) -> tir.PrimExpr:
    """``e`` limited to ``[lo, hi]`` (a side that is None is left open; a bound may be a
    run-time expression)."""
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


def broadcast_shape(*shapes: Sequence[Dim]) -> tuple[Dim, ...]:
    """numpy broadcasting of shapes (right-aligned). Static shapes follow numpy exactly; a
    run-time dimension matches a provably equal one (:func:`dim_equal`) and is what a static
    1 broadcasts to, but is never broadcast itself (it could be 1 at run time only if the
    graph said so with a static 1): a run-time dimension against a different one is an
    :class:`~tessera.errors.OpError`."""
    if all(is_static(s) for s in shapes):
        try:
            return tuple(np.broadcast_shapes(*(tuple(s) for s in shapes)))
        except ValueError:
            raise OpError(f"shapes {[list(s) for s in shapes]} do not broadcast") from None
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for k in range(rank):
        dim: Dim = 1
        for s in shapes:
            pos = k - rank + len(s)
            if pos < 0:
                continue
            d = as_dim(s[pos])
            if is_const_dim(d, 1):
                continue
            if is_const_dim(dim, 1):
                dim = d
            elif not dim_equal(dim, d):
                raise OpError(f"shapes {[shape_text(s) for s in shapes]} do not broadcast: "
                              f"dimension {dim_text(dim)} against {dim_text(d)} (a run-time "
                              f"size broadcasts only against a static 1 or the same size)")
        out.append(dim)
    return tuple(out)


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


def broadcast_index(in_shape: Sequence[Dim], out_indices: Sequence[Any]) -> list[Any]:
    """Indices into a tensor of ``in_shape`` broadcast (numpy rules, right-aligned) against an
    output indexed by ``out_indices``: size-1 input dimensions read index 0 (a run-time
    dimension is never broadcast, see :func:`broadcast_shape`)."""
    lead = len(out_indices) - len(in_shape)
    return [0 if is_const_dim(d, 1) else out_indices[lead + k] for k, d in enumerate(in_shape)]


def broadcast_read(t: te.Tensor, out_indices: Sequence[Any]) -> tir.PrimExpr:
    """``t`` read at the broadcast position of an output point."""
    return read(t, broadcast_index(dims_of(t), out_indices))


def unravel(flat: tir.PrimExpr, shape: Sequence[Dim]) -> list[tir.PrimExpr]:
    """Row-major indices of a flat index into ``shape`` (size-1 dims give 0)."""
    if not is_static(shape):
        return _unravel_dims(flat, shape)
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


def _unravel_dims(flat: tir.PrimExpr, shape: Sequence[Dim]) -> list[tir.PrimExpr]:
    """:func:`unravel` of a shape with run-time dimensions (the same cases, compared with
    :func:`dim_equal`)."""
    total = dim_prod(shape)
    out: list[Any] = []
    stride: Dim = 1
    for d in reversed(shape):
        if is_const_dim(d, 1):
            out.append(tir.const(0))
        elif is_const_dim(stride, 1):
            out.append(flat if dim_equal(d, total) else flat % d)
        else:
            q = flat // stride
            out.append(q if dim_equal(dim_prod([stride, d]), total) else q % d)
        stride = dim_prod([stride, d])
    return list(reversed(out))


def ravel(indices: Sequence[Any], shape: Sequence[Dim]) -> tir.PrimExpr:
    """The row-major flat index of ``indices`` into ``shape`` (size-1 dims are skipped)."""
    flat: Any = None
    for i, d in zip(indices, shape):
        if is_const_dim(d, 1):
            continue
        flat = tir.convert(i) if flat is None else flat * d + i
    return flat if flat is not None else tir.const(0)


__all__ = [
    "Dim", "add", "as_dim", "broadcast_index", "broadcast_read", "broadcast_shape", "cast",
    "clamp", "compute_dtype", "const", "const_tensor", "constant_scalar", "constant_value",
    "dim_add", "dim_equal", "dim_prod", "dim_sub", "dim_text", "dims_of", "is_const_dim",
    "is_float", "is_int", "is_static", "mul", "named_axes", "normalize_axis", "prod", "ravel",
    "read", "scalar", "shape_of", "shape_text", "shapes_equal", "unravel",
]
