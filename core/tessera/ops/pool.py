"""Ops: pooling family: ``MaxPool``, ``AveragePool``, ``LpPool``, their global forms and
``MaxUnpool``.

Spatial attributes follow :mod:`tessera.ops.spatial` (explicit pads; ``None`` means the ONNX
default). The references are vectorized numpy that loops over the kernel offsets only (each step
is one whole-tensor numpy operation). float16 inputs are computed in float32 and cast back.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import DType, TensorType
from tessera.ops.dtypes import as_compute_dtype
from tessera.ops.registry import Attr, OpPattern, register_op
from tessera.ops.spatial import (
    conv_output_shape,
    kernel_slices,
    need_rank,
    pad_spatial,
    spatial_params,
)

REDUCE = OpPattern.COMM_REDUCE
OPAQUE = OpPattern.OPAQUE


def pool_output_shape(in_spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                      pads: Sequence[int], dilations: Sequence[int], ceil_mode: int,
                      op: str = "Pool") -> list[int]:
    """Spatial output size of a pool (``ceil_mode``: windows starting in the end pad dropped)."""
    if not ceil_mode:
        return conv_output_shape(in_spatial, kernel, strides, pads, dilations, op)
    n = len(in_spatial)
    out = []
    for i in range(n):
        span = (kernel[i] - 1) * dilations[i] + 1
        num = in_spatial[i] + pads[i] + pads[i + n] - span
        o = -(-num // strides[i]) + 1
        if (o - 1) * strides[i] >= in_spatial[i] + pads[i]:
            o -= 1
        if o <= 0:
            raise OpError(f"{op}: spatial input {list(in_spatial)} with kernel {list(kernel)} "
                          f"and pads {list(pads)} gives an empty output")
        out.append(o)
    return out


def _window_sum(xp: np.ndarray, kernel: Sequence[int], strides: Sequence[int],
                dilations: Sequence[int], out: Sequence[int]) -> np.ndarray:
    """The sum of every window over the trailing spatial axes of ``xp`` (already padded), of
    shape ``(*lead, *out)`` and ``xp``'s dtype, accumulated one kernel offset at a time."""
    acc = np.zeros((*xp.shape[:xp.ndim - len(kernel)], *out), xp.dtype)
    for _, idx in kernel_slices(kernel, strides, dilations, out):
        acc += xp[idx]
    return acc


_POOL_ATTRS = {
    "kernel_shape": Attr.ints(),
    "strides": Attr.ints(None),
    "pads": Attr.ints(None),
    "dilations": Attr.ints(None),
    "ceil_mode": Attr.int(0),
}


def _pool_geometry(x_shape: Sequence[int], kernel_shape: list[int], strides: list[int] | None,
                   pads: list[int] | None, dilations: list[int] | None, ceil_mode: int,
                   op: str) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """(kernel, strides, dilations, output size, pads actually applied [b.., e..]); the applied
    end pads are enlarged so the last (ceil_mode) window fits."""
    n = len(x_shape) - 2
    kernel, s, p, d = spatial_params(n, kernel_shape, strides, pads, dilations, op)
    out = pool_output_shape(x_shape[2:], kernel, s, p, d, ceil_mode, op)
    end = []
    for i in range(n):
        need = (out[i] - 1) * s[i] + (kernel[i] - 1) * d[i] + 1 - x_shape[2 + i] - p[i]
        end.append(max(p[i + n], need))
    return kernel, s, d, out, p[:n] + end


def _pool_infer(x: TensorType, *, kernel_shape: list[int], strides: list[int] | None,
                pads: list[int] | None, dilations: list[int] | None, ceil_mode: int,
                op: str = "Pool", **_: Any) -> TensorType:
    need_rank(x, 3, op)
    _, _, _, out, _ = _pool_geometry(x.shape, kernel_shape, strides, pads, dilations, ceil_mode,
                                     op)
    return TensorType((*x.shape[:2], *out), x.dtype)


def _max_pool_infer(x: TensorType, **attrs: Any) -> tuple[TensorType, TensorType]:
    y = _pool_infer(x, op="MaxPool", **attrs)
    return y, y.with_dtype(DType.int64)


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


@register_op("MaxPool", attrs={**_POOL_ATTRS, "storage_order": Attr.int(0)},
             infer=_max_pool_infer, pattern=OPAQUE)
def max_pool(x: np.ndarray, *, kernel_shape: list[int], strides: list[int] | None,
             pads: list[int] | None, dilations: list[int] | None, ceil_mode: int,
             storage_order: int) -> tuple[np.ndarray, np.ndarray]:
    """Max pooling; also returns ``Indices`` (int64 flat indices into the unpadded input,
    row-major, or column-major over the spatial dims when ``storage_order`` is 1)."""
    n = x.ndim - 2
    kernel, s, d, out, pp = _pool_geometry(x.shape, kernel_shape, strides, pads, dilations,
                                           ceil_mode, "MaxPool")
    xp = pad_spatial(x, pp[:n], pp[n:], _lowest(x.dtype))
    y: np.ndarray | None = None
    arg = np.zeros((*x.shape[:2], *out), np.int64)
    for k, (_, idx) in enumerate(kernel_slices(kernel, s, d, out)):
        window = xp[idx]
        if y is None:
            y = window.copy()
            continue
        better = window > y
        np.copyto(y, window, where=better)
        np.putmask(arg, better, k)
    assert y is not None
    # Indices: decode the kernel offset of the winner into input coordinates.
    table = np.array(list(itertools.product(*(range(k) for k in kernel))), np.int64)
    in_sp = x.shape[2:]
    coords = []
    for i in range(n):
        pos = np.arange(out[i], dtype=np.int64).reshape([-1] + [1] * (n - 1 - i)) * s[i] - pp[i]
        coords.append(pos + table[arg, i] * d[i])
    order = range(n) if not storage_order else reversed(range(n))
    flat = np.zeros_like(arg)
    for i in order:
        flat = flat * in_sp[i] + coords[i]
    base = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(
        x.shape[0], x.shape[1], *([1] * n)) * math.prod(in_sp)
    return y, flat + base


def _avg_divisor(x_spatial: Sequence[int], kernel: list[int], s: list[int], d: list[int],
                 out: list[int], pp: list[int], pads: list[int] | None,
                 count_include_pad: int) -> np.ndarray:
    """How many elements each window averages over (spatial shape ``out``)."""
    n = len(x_spatial)
    p = list(pads) if pads else [0] * (2 * n)
    padded = [x_spatial[i] + pp[i] + pp[i + n] for i in range(n)]
    ones = np.zeros(padded, np.float32)
    if count_include_pad:  # count the declared pads, not the extra room for ceil_mode
        region = tuple(slice(pp[i] - p[i], pp[i] + x_spatial[i] + p[i + n]) for i in range(n))
    else:
        region = tuple(slice(pp[i], pp[i] + x_spatial[i]) for i in range(n))
    ones[region] = 1
    return _window_sum(ones, kernel, s, d, out)


@register_op("AveragePool", attrs={**_POOL_ATTRS, "count_include_pad": Attr.int(0)},
             infer=lambda x, **a: _pool_infer(x, op="AveragePool", **a), pattern=OPAQUE)
def average_pool(x: np.ndarray, *, kernel_shape: list[int], strides: list[int] | None,
                 pads: list[int] | None, dilations: list[int] | None, ceil_mode: int,
                 count_include_pad: int) -> np.ndarray:
    """Average pooling; padding is excluded from the divisor unless ``count_include_pad``."""
    n = x.ndim - 2
    kernel, s, d, out, pp = _pool_geometry(x.shape, kernel_shape, strides, pads, dilations,
                                           ceil_mode, "AveragePool")
    acc = _window_sum(pad_spatial(as_compute_dtype(x), pp[:n], pp[n:], 0), kernel, s, d, out)
    count = _avg_divisor(x.shape[2:], kernel, s, d, out, pp, pads, count_include_pad)
    acc /= count.astype(acc.dtype)
    return acc.astype(x.dtype, copy=False)


@register_op("LpPool", attrs={**_POOL_ATTRS, "p": Attr.int(2)},
             infer=lambda x, **a: _pool_infer(x, op="LpPool", **a), pattern=OPAQUE)
def lp_pool(x: np.ndarray, *, kernel_shape: list[int], strides: list[int] | None,
            pads: list[int] | None, dilations: list[int] | None, ceil_mode: int,
            p: int) -> np.ndarray:
    """Lp pooling: ``(sum |x|^p)^(1/p)`` over each window (padding contributes zeros)."""
    n = x.ndim - 2
    kernel, s, d, out, pp = _pool_geometry(x.shape, kernel_shape, strides, pads, dilations,
                                           ceil_mode, "LpPool")
    xp = np.abs(pad_spatial(as_compute_dtype(x), pp[:n], pp[n:], 0))
    xp = xp * xp if p == 2 else np.power(xp, p)
    acc = _window_sum(xp, kernel, s, d, out)
    y = np.sqrt(acc) if p == 2 else np.power(acc, 1.0 / p)
    return y.astype(x.dtype, copy=False)


def _global_infer(x: TensorType, **_: Any) -> TensorType:
    need_rank(x, 3, "global pool")
    return TensorType((*x.shape[:2], *([1] * (x.ndim - 2))), x.dtype)


@register_op("GlobalAveragePool", infer=_global_infer, pattern=REDUCE)
def global_average_pool(x: np.ndarray) -> np.ndarray:
    """Mean over all spatial dims (kept as size 1)."""
    axes = tuple(range(2, x.ndim))
    return np.mean(as_compute_dtype(x), axis=axes, keepdims=True).astype(x.dtype, copy=False)


@register_op("GlobalMaxPool", infer=_global_infer, pattern=REDUCE)
def global_max_pool(x: np.ndarray) -> np.ndarray:
    """Max over all spatial dims (kept as size 1)."""
    return np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)


@register_op("GlobalLpPool", attrs={"p": Attr.int(2)}, infer=_global_infer, pattern=REDUCE)
def global_lp_pool(x: np.ndarray, *, p: int) -> np.ndarray:
    """``(sum |x|^p)^(1/p)`` over all spatial dims (kept as size 1)."""
    axes = tuple(range(2, x.ndim))
    acc = np.sum(np.power(np.abs(as_compute_dtype(x)), p), axis=axes, keepdims=True)
    return np.power(acc, 1.0 / p).astype(x.dtype, copy=False)


def _max_unpool_infer(x: TensorType, i: TensorType, *, kernel_shape: list[int],
                      strides: list[int] | None, pads: list[int] | None,
                      output_shape: list[int] | None) -> TensorType:
    op = "MaxUnpool"
    need_rank(x, 3, op)
    if i.shape != x.shape or not i.dtype.is_int:
        raise OpError(f"{op}: indices {i} must be int64 shaped like the input {x}")
    if output_shape is not None:
        if len(output_shape) != x.ndim or list(output_shape[:2]) != list(x.shape[:2]):
            raise OpError(f"{op}: output_shape {output_shape} does not fit input {x}")
        return TensorType(tuple(output_shape), x.dtype)
    n = x.ndim - 2
    kernel, s, p, _ = spatial_params(n, kernel_shape, strides, pads, None, op)
    out = [(x.shape[2 + k] - 1) * s[k] + kernel[k] - p[k] - p[k + n] for k in range(n)]
    return TensorType((*x.shape[:2], *out), x.dtype)


@register_op("MaxUnpool", attrs={"kernel_shape": Attr.ints(), "strides": Attr.ints(None),
                                 "pads": Attr.ints(None), "output_shape": Attr.ints(None)},
             inputs=2, infer=_max_unpool_infer, pattern=OPAQUE)
def max_unpool(x: np.ndarray, indices: np.ndarray, *, kernel_shape: list[int],
               strides: list[int] | None, pads: list[int] | None,
               output_shape: list[int] | None) -> np.ndarray:
    """Scatter ``x`` to the flat ``indices`` of a zero tensor (``output_shape`` is ONNX's
    optional input 2, made an attribute)."""
    t = _max_unpool_infer(TensorType.of(x), TensorType.of(indices), kernel_shape=kernel_shape,
                          strides=strides, pads=pads, output_shape=output_shape)
    y = np.zeros(t.size, x.dtype)
    y[indices.reshape(-1)] = x.reshape(-1)
    return y.reshape(t.shape)


__all__ = ["pool_output_shape"]
