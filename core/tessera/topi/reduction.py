"""Reductions: sum, mean, max, min, prod, L1/L2, sum of squares, log-sum(-exp), arg-max/min and
cumulative sums, over axes with ``keepdims``.

Each reduction stage is a compute tagged ``"reduce"`` whose body is one plain
:func:`te.sum`/:func:`te.max`/:func:`te.min` over one reduce axis per reduced dimension, with
attrs ``axes`` (the reduced input axes), ``keepdims`` and ``combiner``. Ops that finish with an
elementwise step (mean, L2, log-sum-exp, casts back from float32) add an ``"elemwise"`` stage
after it. Accumulation is in float32 for float16 (as the references), in the input type
otherwise.

An empty ``axes`` list reduces nothing: only the elementwise part of the op applies
(``|x|`` for L1, ``x * x`` for sum-square, ...). ``ReduceProd`` has no product combiner in TIR;
it is written as an explicit chain of multiplications, for reduced sizes up to
:data:`MAX_PROD_TERMS`. ``ArgMax``/``ArgMin`` find the extreme value, then the first (or last)
index holding it; NaN inputs are not handled like numpy (which returns the first NaN).

Reduced and kept dimensions may be run-time sizes (:func:`~tessera.topi.utils.dims_of`): the
reduce axes then have expression extents, and a mean divides by the element count computed at
run time (an empty integer mean gives 0, an empty float one NaN, as with static sizes).
``ReduceProd`` needs a static reduced size.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from tessera import te, tir
from tessera.topi import tag
from tessera.topi.registry import register_compute
from tessera.topi.utils import (
    Dim,
    as_dim,
    cast,
    compute_dtype,
    const,
    dim_prod,
    dims_of,
    is_float,
    is_static,
    normalize_axis,
    prod,
    shape_of,
)

Expr = tir.PrimExpr
#: ReduceProd is unrolled into this many multiplications at most.
MAX_PROD_TERMS = 64


def reduce_axes(ndim: int, axes: Sequence[int] | None) -> tuple[int, ...]:
    """Sorted normalized axes (every axis when None)."""
    if axes is None:
        return tuple(range(ndim))
    return tuple(sorted({normalize_axis(a, ndim) for a in axes}))


def reduced_shape(shape: Sequence[Dim], axes: Sequence[int], keepdims: bool
                  ) -> tuple[Dim, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def full_index(out_index: Sequence[Any], ndim: int, axes: Sequence[int], keepdims: bool,
               fill: Callable[[int], Any]) -> list[Any]:
    """The input index of an output point: ``fill(axis)`` on reduced axes, the output's
    indices elsewhere."""
    idx: list[Any] = []
    j = 0
    for d in range(ndim):
        if d in axes:
            idx.append(fill(d))
            if keepdims:
                j += 1
        else:
            idx.append(out_index[j])
            j += 1
    return idx


def kept_index(full: Sequence[Any], axes: Sequence[int]) -> list[Any]:
    """Index into a keepdims-shaped stage for a full input index (0 on reduced axes)."""
    return [0 if d in axes else i for d, i in enumerate(full)]


MapFn = Callable[[Expr, list[Any]], Expr]


def reduce_compute(x: te.Tensor, axes: Sequence[int] | None, keepdims: bool, combiner: str,
                   map_fn: MapFn | None = None, acc_dtype: str | None = None,
                   name: str = "reduce", where: Callable[[list[Any]], Expr] | None = None
                   ) -> te.Tensor:
    """``combiner`` (``"sum"``, ``"max"``, ``"min"``) over ``axes`` of
    ``map_fn(cast(x[idx], acc_dtype), idx)`` (``idx``: the full input index). With no axis to
    reduce it is the elementwise ``map_fn`` alone (tag ``"elemwise"``)."""
    shape = dims_of(x)
    ndim = len(shape)
    ax = reduce_axes(ndim, axes)
    acc = acc_dtype or x.dtype
    fn: MapFn = map_fn or (lambda v, idx: v)
    if not ax:
        return te.compute(shape, lambda *i: fn(cast(x[i], acc), list(i)), name=name,
                          tag=tag.ELEMWISE)
    rvars = {a: te.reduce_axis((0, shape[a]), name=f"k{a}") for a in ax}
    reducer = {"sum": te.sum, "max": te.max, "min": te.min}[combiner]

    def body(*oi: Any) -> Expr:
        idx = full_index(oi, ndim, ax, keepdims, lambda d: rvars[d])
        value = fn(cast(x[tuple(idx)], acc), idx)
        cond = where(idx) if where is not None else None
        return reducer(value, axis=[rvars[a] for a in ax], where=cond)

    return te.compute(reduced_shape(shape, ax, keepdims), body, name=name, tag=tag.REDUCE,
                      attrs={"axes": ax, "keepdims": bool(keepdims), "combiner": combiner})


def _finish(t: te.Tensor, fn: Callable[[Expr], Expr], dtype: str, name: str) -> te.Tensor:
    """An elementwise stage ``cast(fn(t[i]), dtype)``."""
    return te.compute(t.shape, lambda *i: cast(fn(t[i]), dtype), name=name, tag=tag.ELEMWISE)


def _acc(dtype: str) -> str:
    return compute_dtype(dtype)


def _cast_back(t: te.Tensor, dtype: str, name: str) -> te.Tensor:
    if t.dtype == dtype:
        return t
    return _finish(t, lambda v: v, dtype, name)


# -- public reductions -------------------------------------------------------------------------

def sum(x: te.Tensor, axes: Sequence[int] | None = None,  # noqa: A001 - TVM's name
        keepdims: bool = False) -> te.Tensor:
    """Sum over ``axes`` (float16 accumulated in float32)."""
    return _cast_back(reduce_compute(x, axes, keepdims, "sum", acc_dtype=_acc(x.dtype),
                                     name="sum"), x.dtype, "sum_cast")


def _extreme(x: te.Tensor, axes: Sequence[int] | None, keepdims: bool,
             combiner: str) -> te.Tensor:
    if x.dtype != "bool":
        return reduce_compute(x, axes, keepdims, combiner, name=combiner)
    # bool: as uint8 (any / all), then back
    r = reduce_compute(x, axes, keepdims, combiner, acc_dtype="uint8", name=combiner)
    return _finish(r, lambda v: tir.ne(v, const(0, "uint8")), "bool", f"{combiner}_bool")


def max(x: te.Tensor, axes: Sequence[int] | None = None,  # noqa: A001
        keepdims: bool = False) -> te.Tensor:
    """Maximum over ``axes`` (bool: any)."""
    return _extreme(x, axes, keepdims, "max")


def min(x: te.Tensor, axes: Sequence[int] | None = None,  # noqa: A001
        keepdims: bool = False) -> te.Tensor:
    """Minimum over ``axes`` (bool: all)."""
    return _extreme(x, axes, keepdims, "min")


def _count(x: te.Tensor, axes: Sequence[int] | None) -> Dim:
    shape = dims_of(x)
    return dim_prod([shape[a] for a in reduce_axes(len(shape), axes)])


def _mean_dims(x: te.Tensor, axes: Sequence[int] | None, keepdims: bool,
               count: tir.PrimExpr) -> te.Tensor:
    """:func:`mean` over a run-time number of elements ``count``."""
    if not is_float(x.dtype):
        s = reduce_compute(x, axes, keepdims, "sum", name="sum")
        n = cast(count, x.dtype)
        zero = const(0, x.dtype)

        def int_mean(v: Expr) -> Expr:
            empty = tir.eq(n, zero)
            return tir.select(empty, zero, v // tir.select(empty, const(1, x.dtype), n))

        return _finish(s, int_mean, x.dtype, "mean")
    s = reduce_compute(x, axes, keepdims, "sum", acc_dtype=_acc(x.dtype), name="sum")
    return _finish(s, lambda v: v / cast(count, v.dtype), x.dtype, "mean")


def mean(x: te.Tensor, axes: Sequence[int] | None = None, keepdims: bool = False) -> te.Tensor:
    """Mean over ``axes``: floats divide the (float32 for float16) sum, integers floor-divide
    it; an empty reduction gives NaN (floats) or 0 (integers)."""
    count = _count(x, axes)
    if not isinstance(count, int):
        return _mean_dims(x, axes, keepdims, count)
    if not is_float(x.dtype):
        s = reduce_compute(x, axes, keepdims, "sum", name="sum")
        if count == 0:
            return _finish(s, lambda v: const(0, x.dtype), x.dtype, "mean")
        return _finish(s, lambda v: v // const(count, x.dtype), x.dtype, "mean")
    s = reduce_compute(x, axes, keepdims, "sum", acc_dtype=_acc(x.dtype), name="sum")
    if count == 0:
        return _finish(s, lambda v: const(float("nan"), v.dtype), x.dtype, "mean")
    return _finish(s, lambda v: v / float(count), x.dtype, "mean")


def prod_reduce(x: te.Tensor, axes: Sequence[int] | None = None,
                keepdims: bool = False) -> te.Tensor:
    """Product over ``axes`` as an unrolled chain of multiplications (float16 in float32)."""
    shape = shape_of(x)
    ndim = len(shape)
    ax = reduce_axes(ndim, axes)
    acc = _acc(x.dtype)
    combos = list(itertools.product(*(range(shape[a]) for a in ax)))
    if len(combos) > MAX_PROD_TERMS:
        raise ValueError(f"prod_reduce: {len(combos)} terms exceed {MAX_PROD_TERMS}")

    def body(*oi: Any) -> Expr:
        result: Expr = const(1, acc)
        first = True
        for combo in combos:
            pos = dict(zip(ax, combo))
            idx = full_index(oi, ndim, ax, keepdims, lambda d, p=pos: p[d])
            v = cast(x[tuple(idx)], acc)
            result = v if first else result * v
            first = False
        return cast(result, x.dtype)

    return te.compute(reduced_shape(shape, ax, keepdims), body, name="prod", tag=tag.INJECTIVE,
                      attrs={"axes": ax, "keepdims": bool(keepdims)})


def l1(x: te.Tensor, axes: Sequence[int] | None = None, keepdims: bool = False) -> te.Tensor:
    """Sum of absolute values."""
    def absval(v: Expr, idx: list[Any]) -> Expr:
        if is_float(v.dtype):
            return tir.fabs(v)
        if v.dtype.startswith("uint"):
            return v
        return tir.select(v < const(0, v.dtype), const(0, v.dtype) - v, v)

    s = reduce_compute(x, axes, keepdims, "sum", absval, _acc(x.dtype), name="l1")
    return _cast_back(s, x.dtype, "l1_cast")


def sum_square(x: te.Tensor, axes: Sequence[int] | None = None,
               keepdims: bool = False) -> te.Tensor:
    """Sum of squares."""
    s = reduce_compute(x, axes, keepdims, "sum", lambda v, idx: v * v, _acc(x.dtype),
                       name="sum_square")
    return _cast_back(s, x.dtype, "sum_square_cast")


def _float_of(dtype: str) -> str:
    return compute_dtype(dtype) if is_float(dtype) else "float64"


def l2(x: te.Tensor, axes: Sequence[int] | None = None, keepdims: bool = False) -> te.Tensor:
    """Square root of the sum of squares (integers: through float64, truncated)."""
    s = reduce_compute(x, axes, keepdims, "sum", lambda v, idx: v * v, _acc(x.dtype),
                       name="sum_square")
    ft = _float_of(x.dtype)
    return _finish(s, lambda v: tir.sqrt(cast(v, ft)), x.dtype, "l2")


def log_sum(x: te.Tensor, axes: Sequence[int] | None = None,
            keepdims: bool = False) -> te.Tensor:
    """Log of the sum."""
    s = reduce_compute(x, axes, keepdims, "sum", acc_dtype=_acc(x.dtype), name="sum")
    ft = _float_of(x.dtype)
    return _finish(s, lambda v: tir.log(cast(v, ft)), x.dtype, "log_sum")


def log_sum_exp(x: te.Tensor, axes: Sequence[int] | None = None,
                keepdims: bool = False) -> te.Tensor:
    """``m + log(sum(exp(x - m)))`` with ``m`` the maximum (0 where it is not finite)."""
    shape = dims_of(x)
    ax = reduce_axes(len(shape), axes)
    ft = _float_of(x.dtype)
    m = reduce_compute(x, ax, True, "max", acc_dtype=ft, name="max")

    def safe(v: Expr) -> Expr:
        finite = tir.all_of(v > tir.min_value(v.dtype), v < tir.max_value(v.dtype))
        return tir.select(finite, v, const(0, v.dtype))

    s = reduce_compute(x, ax, keepdims, "sum",
                       lambda v, idx: tir.exp(v - safe(m[tuple(kept_index(idx, ax))])),
                       ft, name="exp_sum")

    def body(*oi: Any) -> Expr:
        full = full_index(oi, len(shape), ax, keepdims, lambda d: 0)
        return cast(safe(m[tuple(kept_index(full, ax))]) + tir.log(s[oi]), x.dtype)

    return te.compute(s.shape, body, name="log_sum_exp", tag=tag.ELEMWISE)


def arg_reduce(x: te.Tensor, axis: int, keepdims: bool = True, select_last_index: bool = False,
               mode: str = "max") -> te.Tensor:
    """Index (int64) of the largest (``mode="max"``) or smallest element along ``axis``; the
    first of ties, or the last with ``select_last_index``."""
    shape = dims_of(x)
    a = normalize_axis(axis, len(shape))
    m = reduce_compute(x, (a,), True, mode, name=f"{mode}")
    k = te.reduce_axis((0, shape[a]), name="k")
    combiner = te.max if select_last_index else te.min

    def body(*oi: Any) -> Expr:
        idx = full_index(oi, len(shape), (a,), keepdims, lambda d: k)
        hit = tir.eq(x[tuple(idx)], m[tuple(kept_index(idx, (a,)))])
        return combiner(k, axis=k, where=hit)

    return te.compute(reduced_shape(shape, (a,), keepdims), body, name=f"arg{mode}",
                      tag=tag.REDUCE, attrs={"axes": (a,), "keepdims": bool(keepdims),
                                             "combiner": "argmax" if mode == "max" else "argmin"})


def argmax(x: te.Tensor, axis: int = 0, keepdims: bool = True,
           select_last_index: bool = False) -> te.Tensor:
    return arg_reduce(x, axis, keepdims, select_last_index, "max")


def argmin(x: te.Tensor, axis: int = 0, keepdims: bool = True,
           select_last_index: bool = False) -> te.Tensor:
    return arg_reduce(x, axis, keepdims, select_last_index, "min")


def cumsum(x: te.Tensor, axis: int, exclusive: bool = False, reverse: bool = False) -> te.Tensor:
    """Running sums along ``axis`` (a masked reduction per output point: quadratic work, for
    the short axes models use it on)."""
    shape = dims_of(x)
    a = normalize_axis(axis, len(shape))
    acc = _acc(x.dtype)
    k = te.reduce_axis((0, shape[a]), name="k")

    def body(*i: Any) -> Expr:
        idx = list(i)
        idx[a] = k
        pos = i[a]
        if reverse:
            cond = k > pos if exclusive else k >= pos
        else:
            cond = k < pos if exclusive else k <= pos
        return te.sum(cast(x[tuple(idx)], acc), axis=k, where=cond)

    s = te.compute(shape, body, name="cumsum", tag=tag.REDUCE,
                   attrs={"axes": (a,), "keepdims": True, "combiner": "sum"})
    return _cast_back(s, x.dtype, "cumsum_cast")


# -- graph ops ----------------------------------------------------------------------------------

_REDUCE_OPS: dict[str, Callable[..., te.Tensor]] = {
    "ReduceSum": sum, "ReduceMean": mean, "ReduceMax": max, "ReduceMin": min,
    "ReduceL1": l1, "ReduceL2": l2, "ReduceSumSquare": sum_square, "ReduceLogSum": log_sum,
    "ReduceLogSumExp": log_sum_exp, "ReduceProd": prod_reduce,
}


def _reduce_supports(node: Any) -> str | None:
    x = node.inputs[0].type
    if x.dtype.value == "bool" and node.op not in ("ReduceMax", "ReduceMin"):
        return "bool input is not supported"
    if node.op == "ReduceProd":
        ax = reduce_axes(x.ndim, node.attrs.get("axes"))
        dims = [as_dim(x.shape[a]) for a in ax]
        if not is_static(dims):
            return "reduces a run-time number of elements; the product is unrolled"
        terms = prod(dims)  # type: ignore[arg-type]
        if terms > MAX_PROD_TERMS:
            return (f"reduces {terms} elements per output; the product is unrolled up to "
                    f"{MAX_PROD_TERMS}")
    return None


def _bind_reduce(op: str, fn: Callable[..., te.Tensor]) -> None:
    def compute(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
        return [fn(inputs[0], attrs["axes"], bool(attrs["keepdims"]))]

    compute.__name__ = f"compute_{op}"
    register_compute(op, supports=_reduce_supports)(compute)


for _op, _fn in _REDUCE_OPS.items():
    _bind_reduce(_op, _fn)


def _arg_supports(node: Any) -> str | None:
    if node.inputs[0].type.dtype.value == "bool":
        return "bool input is not supported"
    return None


@register_compute("ArgMax", supports=_arg_supports)
def _argmax(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [argmax(inputs[0], attrs["axis"], bool(attrs["keepdims"]),
                   bool(attrs["select_last_index"]))]


@register_compute("ArgMin", supports=_arg_supports)
def _argmin(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [argmin(inputs[0], attrs["axis"], bool(attrs["keepdims"]),
                   bool(attrs["select_last_index"]))]


@register_compute("CumSum", supports=_arg_supports)
def _cumsum(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [cumsum(inputs[0], attrs["axis"], bool(attrs["exclusive"]), bool(attrs["reverse"]))]


__all__ = [
    "MAX_PROD_TERMS", "arg_reduce", "argmax", "argmin", "cumsum", "full_index", "kept_index",
    "l1", "l2", "log_sum", "log_sum_exp", "max", "mean", "min", "prod_reduce", "reduce_axes",
    "reduce_compute", "reduced_shape", "sum", "sum_square",
]
