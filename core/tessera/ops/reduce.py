"""Ops: reduce family: Reduce*, ArgMax/ArgMin, TopK, CumSum/CumProd.

The IR form of every ``Reduce*`` op has its ``axes`` as an attribute (``None`` reduces every
axis; the ONNX converters always give the explicit list) and ``keepdims``. An empty list reduces
no axis: the op then only applies its elementwise part (``|x|`` for ReduceL1, ``x * x`` for
ReduceSumSquare, ``log x`` for ReduceLogSum, ...), as onnxruntime and the onnx reference do for
``noop_with_empty_axes``. A reduction over an
empty set yields the op's identity element: 0 for sums, 1 for products, the lowest (highest)
value of the type for max (min), ``-inf`` for the log-sums, NaN for the mean.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import Attr, OpPattern, normalize_axis, register_op

REDUCE = OpPattern.COMM_REDUCE


def reduce_axes(ndim: int, axes: list[int] | None) -> tuple[int, ...]:
    """Normalized, sorted axes of a reduction (every axis when ``axes`` is None)."""
    if axes is None:
        return tuple(range(ndim))
    norm = sorted({normalize_axis(a, ndim) for a in axes})
    if len(norm) != len(axes):
        raise OpError(f"axes {axes} repeat an axis")
    return tuple(norm)


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: int) -> tuple[int, ...]:
    """The shape after reducing ``axes`` (kept as 1s when ``keepdims``)."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce_infer(x: TensorType, *, axes: list[int] | None, keepdims: int) -> TensorType:
    return x.with_shape(reduced_shape(x.shape, reduce_axes(x.ndim, axes), keepdims))


def _acc_dtype(dtype: np.dtype) -> np.dtype:
    """Accumulate float16 in float32; other types in themselves."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _lowest(dtype: np.dtype) -> object:
    if dtype.kind == "b":
        return False
    return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


def _highest(dtype: np.dtype) -> object:
    if dtype.kind == "b":
        return True
    return np.iinfo(dtype).max if dtype.kind in "iu" else np.inf


def _sum(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    return np.sum(x, axis=axes, dtype=_acc_dtype(x.dtype), keepdims=True)


def _mean(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    count = int(np.prod([x.shape[a] for a in axes]))
    if x.dtype.kind in "iu":
        total = np.sum(x, axis=axes, dtype=x.dtype, keepdims=True)
        return total // count if count else np.zeros_like(total)
    return _sum(x, axes) / count if count else np.full(
        tuple(1 if i in axes else d for i, d in enumerate(x.shape)), np.nan)


def _log_sum_exp(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    xf = x.astype(_acc_dtype(x.dtype)) if x.dtype.kind == "f" else x.astype(np.float64)
    if xf.size == 0:
        return np.log(np.sum(np.exp(xf), axis=axes, keepdims=True))
    m = np.max(xf, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    return m + np.log(np.sum(np.exp(xf - m), axis=axes, keepdims=True))


_REDUCERS: dict[str, Callable[[np.ndarray, tuple[int, ...]], np.ndarray]] = {
    "ReduceSum": _sum,
    "ReduceMean": _mean,
    "ReduceMax": lambda x, ax: np.max(x, axis=ax, keepdims=True, initial=_lowest(x.dtype)),
    "ReduceMin": lambda x, ax: np.min(x, axis=ax, keepdims=True, initial=_highest(x.dtype)),
    "ReduceProd": lambda x, ax: np.prod(x, axis=ax, dtype=_acc_dtype(x.dtype), keepdims=True),
    "ReduceL1": lambda x, ax: _sum(np.abs(x), ax),
    "ReduceL2": lambda x, ax: np.sqrt(_sum(x.astype(_acc_dtype(x.dtype)) ** 2, ax)),
    "ReduceSumSquare": lambda x, ax: _sum(np.square(x.astype(_acc_dtype(x.dtype))), ax),
    "ReduceLogSum": lambda x, ax: np.log(_sum(x, ax)),
    "ReduceLogSumExp": _log_sum_exp,
}


def _make_reduce(name: str) -> None:
    fn = _REDUCERS[name]

    def reference(x: np.ndarray, *, axes: list[int] | None, keepdims: int) -> np.ndarray:
        ax = reduce_axes(x.ndim, axes)
        out = np.asarray(fn(x, ax))
        if x.dtype.kind in "iu" and out.dtype.kind == "f":
            out = np.trunc(out)
        out = out.astype(x.dtype)
        return out.reshape(reduced_shape(x.shape, ax, keepdims))

    reference.__name__ = name.lower()
    reference.__doc__ = f"ONNX {name} over ``axes`` (every axis when None)."
    register_op(name, attrs={"axes": Attr.ints(None), "keepdims": Attr.int(1)},
                infer=_reduce_infer, pattern=REDUCE)(reference)


for _name in _REDUCERS:
    _make_reduce(_name)


# -- ArgMax / ArgMin -----------------------------------------------------------------------------

def _arg_infer(x: TensorType, *, axis: int, keepdims: int, select_last_index: int) -> TensorType:
    a = normalize_axis(axis, x.ndim)
    if x.shape[a] == 0:
        raise OpError(f"cannot take an arg-reduction over the empty axis {axis} of {x}")
    return TensorType(reduced_shape(x.shape, (a,), keepdims), DType.int64)


def _arg_reduce(x: np.ndarray, axis: int, keepdims: int, last: int,
                fn: Callable[..., np.ndarray]) -> np.ndarray:
    a = normalize_axis(axis, x.ndim)
    if last:
        idx = x.shape[a] - 1 - fn(np.flip(x, axis=a), axis=a)
    else:
        idx = fn(x, axis=a)
    idx = np.asarray(idx, dtype=np.int64)
    return np.expand_dims(idx, a) if keepdims else idx


@register_op("ArgMax", attrs={"axis": Attr.int(0), "keepdims": Attr.int(1),
                              "select_last_index": Attr.int(0)}, infer=_arg_infer, pattern=REDUCE)
def argmax(x: np.ndarray, *, axis: int, keepdims: int, select_last_index: int) -> np.ndarray:
    """Index of the largest element along ``axis`` (first or last one of ties)."""
    return _arg_reduce(x, axis, keepdims, select_last_index, np.argmax)


@register_op("ArgMin", attrs={"axis": Attr.int(0), "keepdims": Attr.int(1),
                              "select_last_index": Attr.int(0)}, infer=_arg_infer, pattern=REDUCE)
def argmin(x: np.ndarray, *, axis: int, keepdims: int, select_last_index: int) -> np.ndarray:
    """Index of the smallest element along ``axis`` (first or last one of ties)."""
    return _arg_reduce(x, axis, keepdims, select_last_index, np.argmin)


# -- TopK ----------------------------------------------------------------------------------------

def _topk_infer(x: TensorType, *, k: int, axis: int, largest: int,
                sorted: int) -> tuple[TensorType, TensorType]:  # noqa: A002
    a = normalize_axis(axis, x.ndim)
    if not 0 <= k <= x.shape[a]:
        raise OpError(f"k = {k} is out of range for axis {axis} of {x}")
    shape = list(x.shape)
    shape[a] = k
    return x.with_shape(shape), TensorType(tuple(shape), DType.int64)


def _descending_key(x: np.ndarray) -> np.ndarray:
    """An array whose ascending order is ``x``'s descending order (no overflow)."""
    if x.dtype.kind == "f":
        return -x
    if x.dtype.kind == "b":
        return ~x
    return np.invert(x)  # ~v = -v - 1 for signed ints, max - v for unsigned ones


@register_op("TopK", attrs={"k": Attr.int(), "axis": Attr.int(-1), "largest": Attr.int(1),
                            "sorted": Attr.int(1)}, infer=_topk_infer, pattern=OpPattern.OPAQUE)
def topk(x: np.ndarray, *, k: int, axis: int, largest: int,
         sorted: int) -> tuple[np.ndarray, np.ndarray]:  # noqa: A002
    """The ``k`` largest (or smallest) entries along ``axis`` and their indices; ties keep
    the lower index first. Results are always sorted."""
    a = normalize_axis(axis, x.ndim)
    key = _descending_key(x) if largest else x
    order = np.argsort(key, axis=a, kind="stable")
    idx = np.take(order, np.arange(k), axis=a)
    return np.take_along_axis(x, idx, axis=a), idx.astype(np.int64)


# -- CumSum / CumProd ----------------------------------------------------------------------------

def _cumulative(x: np.ndarray, axis: int, exclusive: int, reverse: int,
                fn: Callable[..., np.ndarray], identity: int) -> np.ndarray:
    a = normalize_axis(axis, x.ndim)
    if reverse:
        x = np.flip(x, axis=a)
    out = fn(x, axis=a, dtype=_acc_dtype(x.dtype))
    if exclusive:
        shape = list(x.shape)
        shape[a] = 1
        first = np.full(shape, identity, dtype=out.dtype)
        out = np.concatenate([first, np.delete(out, -1, axis=a)], axis=a) if x.shape[a] else out
    if reverse:
        out = np.flip(out, axis=a)
    return out.astype(x.dtype)  # astype copies: a C-contiguous result


def _cum_infer(x: TensorType, *, axis: int, exclusive: int, reverse: int) -> TensorType:
    normalize_axis(axis, x.ndim)
    return x


@register_op("CumSum", attrs={"axis": Attr.int(), "exclusive": Attr.int(0),
                              "reverse": Attr.int(0)}, infer=_cum_infer, pattern=OpPattern.OPAQUE)
def cumsum(x: np.ndarray, *, axis: int, exclusive: int, reverse: int) -> np.ndarray:
    """Running sums along ``axis`` (exclusive: shifted by one; reverse: from the end)."""
    return _cumulative(x, axis, exclusive, reverse, np.cumsum, 0)


@register_op("CumProd", attrs={"axis": Attr.int(), "exclusive": Attr.int(0),
                               "reverse": Attr.int(0)}, infer=_cum_infer,
             pattern=OpPattern.OPAQUE)
def cumprod(x: np.ndarray, *, axis: int, exclusive: int, reverse: int) -> np.ndarray:
    """Running products along ``axis`` (exclusive: shifted by one; reverse: from the end)."""
    return _cumulative(x, axis, exclusive, reverse, np.cumprod, 1)
