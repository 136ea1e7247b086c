"""Ops: tensor manipulation family: shape changes, data movement, indexing, padding, resizing.

Every op here is static-shape: operands that fix an output shape in ONNX (Reshape's ``shape``,
Slice's ``starts``/``ends``, Pad's ``pads``, Resize's ``scales``/``sizes``, ...) are attributes
in the IR, filled in by the ONNX converters. Attribute names and meanings follow ONNX.

Ops whose output shape depends on input *values* (``NonZero``, ``Unique``) are registered for
constant folding only: their ``infer`` refuses non-constant use.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import Attr, OpPattern, normalize_axis, register_op

INJ = OpPattern.INJECTIVE
OPAQUE = OpPattern.OPAQUE


def _axis(axis: int, ndim: int) -> int:
    return normalize_axis(axis, ndim)


def _axes(axes: list[int], ndim: int, what: str = "axes") -> list[int]:
    """Normalize a list of axes against rank ``ndim``; duplicates are an error."""
    out = [normalize_axis(a, ndim) for a in axes]
    if len(set(out)) != len(out):
        raise OpError(f"{what} {axes} repeat an axis")
    return out


def _check_int_indices(t: TensorType, what: str = "indices") -> None:
    if t.dtype not in (DType.int32, DType.int64):
        raise OpError(f"{what} must be int32 or int64, got {t.dtype}")


def _norm_index(idx: np.ndarray, dim: int | np.ndarray) -> np.ndarray:
    """Indices with negative values counted from the end; out of range is an error."""
    idx = np.asarray(idx).astype(np.int64)
    idx = np.where(idx < 0, idx + dim, idx)
    if idx.size and (np.any(idx < 0) or np.any(idx >= dim)):
        bad = np.asarray(idx)[(idx < 0) | (idx >= dim)].reshape(-1)[0]
        raise OpError(f"index {int(bad)} is out of range for a dimension of size "
                      f"{np.max(dim) if np.ndim(dim) else dim} (negative indices count from "
                      f"the end)")
    return idx


# -- Reshape, Flatten, Transpose, Squeeze, Unsqueeze ---------------------------------------------

def reshape_target(in_shape: tuple[int, ...], shape: list[int], allowzero: int) -> tuple[int, ...]:
    """The output shape of ONNX Reshape (``0`` copies a dimension unless ``allowzero``, one
    ``-1`` is inferred)."""
    out: list[int] = []
    unknown = None
    for i, d in enumerate(shape):
        if d == -1:
            if unknown is not None:
                raise OpError(f"shape {shape} has more than one -1")
            unknown = i
            out.append(1)
        elif d == 0 and not allowzero:
            if i >= len(in_shape):
                raise OpError(f"shape {shape}: 0 at position {i} copies a dimension the input "
                              f"{list(in_shape)} does not have")
            out.append(in_shape[i])
        elif d < 0:
            raise OpError(f"shape {shape} has a negative dimension {d}")
        else:
            out.append(d)
    total = math.prod(in_shape)
    if unknown is not None:
        known = math.prod(out)
        if known == 0:
            if total != 0:
                raise OpError(f"cannot reshape {list(in_shape)} to {shape}")
            out[unknown] = 0
        else:
            if total % known:
                raise OpError(f"cannot reshape {list(in_shape)} ({total} elements) to {shape}")
            out[unknown] = total // known
    if math.prod(out) != total:
        raise OpError(f"cannot reshape {list(in_shape)} ({total} elements) to {shape} "
                      f"({math.prod(out)} elements)")
    return tuple(out)


def _reshape_infer(x: TensorType, *, shape: list[int], allowzero: int) -> TensorType:
    return x.with_shape(reshape_target(x.shape, shape, allowzero))


@register_op("Reshape", attrs={"shape": Attr.ints(), "allowzero": Attr.int(0)},
             infer=_reshape_infer, pattern=INJ)
def reshape(x: np.ndarray, *, shape: list[int], allowzero: int) -> np.ndarray:
    """ONNX Reshape with the target shape as an attribute."""
    return x.reshape(reshape_target(x.shape, shape, allowzero)).copy()


def _flatten_shape(shape: tuple[int, ...], axis: int) -> tuple[int, int]:
    r = len(shape)
    if not -r <= axis <= r:
        raise OpError(f"axis {axis} out of range for rank {r}")
    axis = axis + r if axis < 0 else axis
    return (math.prod(shape[:axis]), math.prod(shape[axis:]))


@register_op("Flatten", attrs={"axis": Attr.int(1)},
             infer=lambda x, *, axis: x.with_shape(_flatten_shape(x.shape, axis)), pattern=INJ)
def flatten(x: np.ndarray, *, axis: int) -> np.ndarray:
    """Reshape to 2-D: dimensions before ``axis`` and from ``axis`` on."""
    return x.reshape(_flatten_shape(x.shape, axis)).copy()


def _perm(ndim: int, perm: list[int] | None) -> list[int]:
    if perm is None:
        return list(range(ndim))[::-1]
    if sorted(normalize_axis(p, ndim) for p in perm) != list(range(ndim)) or len(perm) != ndim:
        raise OpError(f"perm {perm} is not a permutation of the {ndim} axes")
    return [normalize_axis(p, ndim) for p in perm]


@register_op("Transpose", attrs={"perm": Attr.ints(None)},
             infer=lambda x, *, perm: x.with_shape([x.shape[p] for p in _perm(x.ndim, perm)]),
             pattern=INJ)
def transpose(x: np.ndarray, *, perm: list[int] | None) -> np.ndarray:
    """Permute axes (reverse them when ``perm`` is absent)."""
    return np.transpose(x, _perm(x.ndim, perm)).copy()


def _squeeze_shape(shape: tuple[int, ...], axes: list[int] | None) -> tuple[int, ...]:
    if axes is None:
        return tuple(d for d in shape if d != 1)
    norm = _axes(axes, len(shape))
    for a in norm:
        if shape[a] != 1:
            raise OpError(f"cannot squeeze axis {a} of shape {list(shape)}: size is not 1")
    return tuple(d for i, d in enumerate(shape) if i not in norm)


@register_op("Squeeze", attrs={"axes": Attr.ints(None)},
             infer=lambda x, *, axes: x.with_shape(_squeeze_shape(x.shape, axes)), pattern=INJ)
def squeeze(x: np.ndarray, *, axes: list[int] | None) -> np.ndarray:
    """Remove size-1 axes (all of them when ``axes`` is absent)."""
    return x.reshape(_squeeze_shape(x.shape, axes)).copy()


def _unsqueeze_shape(shape: tuple[int, ...], axes: list[int]) -> tuple[int, ...]:
    rank = len(shape) + len(axes)
    norm = set(_axes(axes, rank))
    it = iter(shape)
    return tuple(1 if i in norm else next(it) for i in range(rank))


@register_op("Unsqueeze", attrs={"axes": Attr.ints()},
             infer=lambda x, *, axes: x.with_shape(_unsqueeze_shape(x.shape, axes)), pattern=INJ)
def unsqueeze(x: np.ndarray, *, axes: list[int]) -> np.ndarray:
    """Insert size-1 axes at ``axes`` (positions in the output)."""
    return x.reshape(_unsqueeze_shape(x.shape, axes)).copy()


# -- Concat, Split, Slice ------------------------------------------------------------------------

def _concat_infer(*xs: TensorType, axis: int) -> TensorType:
    first = xs[0]
    a = _axis(axis, first.ndim)
    total = 0
    for x in xs:
        if x.ndim != first.ndim or x.dtype != first.dtype:
            raise OpError(f"inputs {first} and {x} differ in rank or element type")
        if any(x.shape[i] != first.shape[i] for i in range(first.ndim) if i != a):
            raise OpError(f"input shapes {list(first.shape)} and {list(x.shape)} differ "
                          f"outside axis {axis}")
        total += x.shape[a]
    shape = list(first.shape)
    shape[a] = total
    return first.with_shape(shape)


@register_op("Concat", attrs={"axis": Attr.int()}, inputs=(1, None), infer=_concat_infer,
             pattern=INJ)
def concat(*xs: np.ndarray, axis: int) -> np.ndarray:
    """Join tensors along ``axis``."""
    return np.concatenate(xs, axis=_axis(axis, xs[0].ndim))


def _split_infer(x: TensorType, *, axis: int, split: list[int]) -> tuple[TensorType, ...]:
    a = _axis(axis, x.ndim)
    if any(s < 0 for s in split) or sum(split) != x.shape[a]:
        raise OpError(f"split sizes {split} do not add up to dimension {a} of {x}")
    outs = []
    for s in split:
        shape = list(x.shape)
        shape[a] = s
        outs.append(x.with_shape(shape))
    return tuple(outs)


@register_op("Split", attrs={"axis": Attr.int(0), "split": Attr.ints()}, infer=_split_infer,
             pattern=INJ)
def split(x: np.ndarray, *, axis: int, split: list[int]) -> tuple[np.ndarray, ...]:
    """Split along ``axis`` into pieces of the given sizes (one output per size)."""
    a = _axis(axis, x.ndim)
    bounds = np.cumsum(split)[:-1]
    return tuple(p.copy() for p in np.split(x, bounds, axis=a))


def slice_tuple(shape: tuple[int, ...], starts: list[int], ends: list[int],
                axes: list[int] | None, steps: list[int] | None) -> tuple[slice, ...]:
    """Python slices for ONNX Slice parameters (negative indices, clamping, negative steps)."""
    n = len(starts)
    if len(ends) != n:
        raise OpError(f"starts {starts} and ends {ends} differ in length")
    axes = list(range(n)) if axes is None else _axes(list(axes), len(shape))
    steps = [1] * n if steps is None else list(steps)
    if len(axes) != n or len(steps) != n:
        raise OpError(f"starts, ends, axes and steps differ in length ({n}, {len(ends)}, "
                      f"{len(axes)}, {len(steps)})")
    out = [slice(None)] * len(shape)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        dim = shape[axis]
        if step == 0:
            raise OpError("slice step cannot be 0")
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start = min(max(start, 0), dim)
            end = min(max(end, 0), dim)
            out[axis] = slice(start, end, step)
        else:
            start = min(max(start, 0), dim - 1)
            end = min(max(end, -1), dim - 1)
            out[axis] = slice(start, end if end >= 0 else None, step)
    return tuple(out)


def _slice_len(sl: slice, dim: int) -> int:
    return len(range(*sl.indices(dim)))


def _slice_infer(x: TensorType, *, starts: list[int], ends: list[int], axes: list[int] | None,
                 steps: list[int] | None) -> TensorType:
    sls = slice_tuple(x.shape, starts, ends, axes, steps)
    return x.with_shape([_slice_len(s, d) for s, d in zip(sls, x.shape)])


@register_op("Slice", attrs={"starts": Attr.ints(), "ends": Attr.ints(), "axes": Attr.ints(None),
                             "steps": Attr.ints(None)}, infer=_slice_infer, pattern=INJ)
def slice_(x: np.ndarray, *, starts: list[int], ends: list[int], axes: list[int] | None,
           steps: list[int] | None) -> np.ndarray:
    """ONNX Slice with all parameters as attributes."""
    return x[slice_tuple(x.shape, starts, ends, axes, steps)].copy()


# -- Gather and Scatter --------------------------------------------------------------------------

def _gather_infer(data: TensorType, indices: TensorType, *, axis: int) -> TensorType:
    _check_int_indices(indices)
    a = _axis(axis, data.ndim)
    return data.with_shape(data.shape[:a] + indices.shape + data.shape[a + 1:])


@register_op("Gather", attrs={"axis": Attr.int(0)}, inputs=2, infer=_gather_infer, pattern=INJ)
def gather(data: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    """Take entries of ``data`` along ``axis`` (negative indices count from the end)."""
    a = _axis(axis, data.ndim)
    return np.take(data, _norm_index(indices, data.shape[a]), axis=a)


def _gather_elements_infer(data: TensorType, indices: TensorType, *, axis: int) -> TensorType:
    _check_int_indices(indices)
    _axis(axis, data.ndim)
    if indices.ndim != data.ndim:
        raise OpError(f"indices {indices} and data {data} differ in rank")
    return data.with_shape(indices.shape)


@register_op("GatherElements", attrs={"axis": Attr.int(0)}, inputs=2,
             infer=_gather_elements_infer, pattern=INJ)
def gather_elements(data: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    """``out[i][j][k] = data[indices[i][j][k]][j][k]`` for axis 0, and so on."""
    a = _axis(axis, data.ndim)
    return np.take_along_axis(data, _norm_index(indices, data.shape[a]), axis=a)


def _gather_nd_infer(data: TensorType, indices: TensorType, *, batch_dims: int) -> TensorType:
    _check_int_indices(indices)
    b = batch_dims
    if indices.ndim < 1 or b < 0 or b >= min(data.ndim, indices.ndim):
        raise OpError(f"batch_dims {b} invalid for data {data} and indices {indices}")
    m = indices.shape[-1]
    if data.shape[:b] != indices.shape[:b] or b + m > data.ndim:
        raise OpError(f"indices {indices} do not fit data {data} with batch_dims {b}")
    return data.with_shape(indices.shape[:-1] + data.shape[b + m:])


@register_op("GatherND", attrs={"batch_dims": Attr.int(0)}, inputs=2, infer=_gather_nd_infer,
             pattern=INJ)
def gather_nd(data: np.ndarray, indices: np.ndarray, *, batch_dims: int) -> np.ndarray:
    """Gather slices of ``data`` addressed by the last axis of ``indices``."""
    b = batch_dims
    m = indices.shape[-1]
    batch = math.prod(data.shape[:b])
    d = data.reshape((batch,) + data.shape[b:])
    idx = indices.reshape((batch, -1, m)).astype(np.int64)
    dims = np.asarray(data.shape[b:b + m], dtype=np.int64)
    idx = _norm_index(idx, dims)
    key = (np.arange(batch)[:, None],) + tuple(idx[..., j] for j in range(m))
    out = d[key]
    return out.reshape(indices.shape[:-1] + data.shape[b + m:])


_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_at(out: np.ndarray, key: tuple, updates: np.ndarray, reduction: str) -> None:
    if reduction == "none":
        out[key] = updates
    elif reduction in _UFUNCS:
        _UFUNCS[reduction].at(out, key, updates)
    else:
        raise OpError(f"unknown reduction {reduction!r} (none, add, mul, max, min)")


def _scatter_elements_infer(data: TensorType, indices: TensorType, updates: TensorType, *,
                            axis: int, reduction: str) -> TensorType:
    _check_int_indices(indices)
    _axis(axis, data.ndim)
    if indices.shape != updates.shape or indices.ndim != data.ndim:
        raise OpError(f"indices {indices} and updates {updates} must have one shape, of the "
                      f"rank of data {data}")
    if reduction not in ("none", *_UFUNCS):
        raise OpError(f"unknown reduction {reduction!r} (none, add, mul, max, min)")
    return data


@register_op("ScatterElements", attrs={"axis": Attr.int(0), "reduction": Attr.str("none")},
             inputs=3, infer=_scatter_elements_infer, pattern=INJ)
def scatter_elements(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, axis: int,
                     reduction: str) -> np.ndarray:
    """Write (or combine) ``updates`` into a copy of ``data`` at per-element positions."""
    a = _axis(axis, data.ndim)
    out = data.copy()
    grid = list(np.indices(indices.shape, sparse=True))
    grid[a] = _norm_index(indices, data.shape[a])
    _scatter_at(out, tuple(grid), updates, reduction)
    return out


def _scatter_nd_infer(data: TensorType, indices: TensorType, updates: TensorType, *,
                      reduction: str) -> TensorType:
    _check_int_indices(indices)
    k = indices.shape[-1] if indices.ndim else 0
    want = indices.shape[:-1] + data.shape[k:]
    if indices.ndim < 1 or k > data.ndim or updates.shape != want:
        raise OpError(f"updates {updates} must have shape {list(want)} for data {data} and "
                      f"indices {indices}")
    if reduction not in ("none", *_UFUNCS):
        raise OpError(f"unknown reduction {reduction!r} (none, add, mul, max, min)")
    return data


@register_op("ScatterND", attrs={"reduction": Attr.str("none")}, inputs=3,
             infer=_scatter_nd_infer, pattern=INJ)
def scatter_nd(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *,
               reduction: str) -> np.ndarray:
    """Write (or combine) slices of ``updates`` into a copy of ``data`` at index tuples."""
    k = indices.shape[-1]
    out = data.copy()
    idx = _norm_index(indices.reshape(-1, k), np.asarray(data.shape[:k], dtype=np.int64))
    upd = updates.reshape((idx.shape[0],) + data.shape[k:])
    _scatter_at(out, tuple(idx[:, j] for j in range(k)), upd, reduction)
    return out


# -- Expand, Tile, Pad, Trilu, OneHot, ReverseSequence ------------------------------------------

def _expand_shape(in_shape: tuple[int, ...], shape: list[int]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(in_shape, tuple(shape)))
    except ValueError:
        raise OpError(f"shape {list(in_shape)} cannot be expanded to {shape}") from None


@register_op("Expand", attrs={"shape": Attr.ints()},
             infer=lambda x, *, shape: x.with_shape(_expand_shape(x.shape, shape)),
             pattern=OpPattern.BROADCAST)
def expand(x: np.ndarray, *, shape: list[int]) -> np.ndarray:
    """Broadcast ``x`` against ``shape`` (two-way, like numpy)."""
    return np.array(np.broadcast_to(x, _expand_shape(x.shape, shape)))


def _tile_infer(x: TensorType, *, repeats: list[int]) -> TensorType:
    if len(repeats) != x.ndim or any(r < 0 for r in repeats):
        raise OpError(f"repeats {repeats} must be {x.ndim} non-negative numbers")
    return x.with_shape([d * r for d, r in zip(x.shape, repeats)])


@register_op("Tile", attrs={"repeats": Attr.ints()}, infer=_tile_infer, pattern=INJ)
def tile(x: np.ndarray, *, repeats: list[int]) -> np.ndarray:
    """Repeat ``x`` ``repeats[i]`` times along each axis."""
    return np.tile(x, repeats)


_PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_infer(x: TensorType, value: TensorType | None = None, *, pads: list[int],
               mode: str) -> TensorType:
    r = x.ndim
    if len(pads) != 2 * r:
        raise OpError(f"pads {pads} must have 2 * rank = {2 * r} numbers")
    if mode not in _PAD_MODES:
        raise OpError(f"mode {mode!r} is not one of {', '.join(_PAD_MODES)}")
    shape = [x.shape[i] + pads[i] + pads[i + r] for i in range(r)]
    if any(d < 0 for d in shape):
        raise OpError(f"pads {pads} crop more than the input {x} has")
    if mode != "constant" and any(x.shape[i] == 0 and (pads[i] > 0 or pads[i + r] > 0)
                                  for i in range(r)):
        raise OpError(f"mode {mode} cannot pad an empty axis of {x}")
    return x.with_shape(shape)


@register_op("Pad", attrs={"pads": Attr.ints(), "mode": Attr.str("constant")}, inputs=(1, 2),
             infer=_pad_infer, pattern=INJ)
def pad(x: np.ndarray, value: np.ndarray | None = None, *, pads: list[int],
        mode: str) -> np.ndarray:
    """Pad (positive ``pads``) or crop (negative ``pads``): begins of every axis, then ends.

    ``value`` (a scalar, 0 when omitted) fills in mode ``constant``.
    """
    r = x.ndim
    crop = tuple(slice(max(-pads[i], 0), x.shape[i] - max(-pads[i + r], 0)) for i in range(r))
    x = x[crop]
    width = [(max(pads[i], 0), max(pads[i + r], 0)) for i in range(r)]
    if mode == "constant":
        fill = 0 if value is None or np.asarray(value).size == 0 else \
            np.asarray(value).reshape(-1)[0]
        return np.pad(x, width, mode="constant", constant_values=fill).astype(x.dtype)
    return np.pad(x, width, mode=mode)


@register_op("Trilu", attrs={"upper": Attr.int(1), "k": Attr.int(0)}, pattern=INJ,
             infer=lambda x, *, upper, k: _check_rank2(x))
def trilu(x: np.ndarray, *, upper: int, k: int) -> np.ndarray:
    """Keep the upper (or lower) triangle of the last two axes, from diagonal ``k``."""
    return np.triu(x, k) if upper else np.tril(x, k)


def _check_rank2(x: TensorType) -> TensorType:
    if x.ndim < 2:
        raise OpError(f"input {x} must have rank 2 or more")
    return x


def _one_hot_infer(indices: TensorType, values: TensorType, *, depth: int,
                   axis: int) -> TensorType:
    if values.size != 2:
        raise OpError(f"values {values} must hold two numbers [off, on]")
    if depth < 0:
        raise OpError(f"depth {depth} is negative")
    r = indices.ndim + 1
    a = normalize_axis(axis, r)
    shape = list(indices.shape)
    shape.insert(a, depth)
    return values.with_shape(shape)


@register_op("OneHot", attrs={"depth": Attr.int(), "axis": Attr.int(-1)}, inputs=2,
             infer=_one_hot_infer, pattern=INJ)
def one_hot(indices: np.ndarray, values: np.ndarray, *, depth: int, axis: int) -> np.ndarray:
    """A one-hot encoding of ``indices`` with ``values = [off, on]`` inserted at ``axis``."""
    a = normalize_axis(axis, indices.ndim + 1)
    idx = np.asarray(indices)
    if idx.dtype.kind == "f":
        idx = np.trunc(idx)
    idx = idx.astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    idx = np.expand_dims(idx, a)
    targets = np.arange(depth).reshape((1,) * a + (depth,) + (1,) * (indices.ndim - a))
    off, on = np.asarray(values).reshape(-1)
    return np.where(idx == targets, on, off).astype(values.dtype)


def _reverse_sequence_infer(x: TensorType, lens: TensorType, *, batch_axis: int,
                            time_axis: int) -> TensorType:
    if x.ndim < 2 or {batch_axis, time_axis} != {0, 1}:
        raise OpError(f"batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1 "
                      f"(in some order) for input {x}")
    if lens.shape != (x.shape[batch_axis],):
        raise OpError(f"sequence_lens {lens} must have shape [{x.shape[batch_axis]}]")
    return x


@register_op("ReverseSequence", attrs={"batch_axis": Attr.int(1), "time_axis": Attr.int(0)},
             inputs=2, infer=_reverse_sequence_infer, pattern=INJ)
def reverse_sequence(x: np.ndarray, lens: np.ndarray, *, batch_axis: int,
                     time_axis: int) -> np.ndarray:
    """Reverse the first ``lens[b]`` steps along ``time_axis`` of every batch entry ``b``."""
    t = np.arange(x.shape[time_axis])
    lens = np.asarray(lens, np.int64)
    # src[b, t] with shape laid out on (batch_axis, time_axis)
    grid = np.where(t[None, :] < lens[:, None], lens[:, None] - 1 - t[None, :], t[None, :])
    if time_axis < batch_axis:
        grid = grid.T
    grid = grid.reshape(grid.shape + (1,) * (x.ndim - 2))
    return np.take_along_axis(x, np.broadcast_to(grid, x.shape), axis=time_axis)


# -- data-dependent shapes: constant folding only -----------------------------------------------

def _data_dependent(*types: Any, **attrs: Any) -> Any:
    raise OpError("the output shape depends on input values; the op can only be folded on "
                  "constants with static shapes")


@register_op("NonZero", infer=_data_dependent, pattern=OPAQUE)
def non_zero(x: np.ndarray) -> np.ndarray:
    """Indices of the non-zero elements, one row per axis (constant folding only)."""
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


@register_op("Unique", attrs={"axis": Attr.int(None), "sorted": Attr.int(1)},
             infer=_data_dependent, pattern=OPAQUE)
def unique(x: np.ndarray, *, axis: int | None, sorted: int) -> tuple[np.ndarray, ...]:  # noqa: A002
    """Unique values (or slices along ``axis``), first indices, inverse indices, counts."""
    a = None if axis is None else normalize_axis(axis, x.ndim)
    y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True,
                                          return_counts=True, axis=a)
    inverse = inverse.reshape(-1)
    if not sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        first, counts, inverse = first[order], counts[order], rank[inverse]
        y = np.take(x.reshape(-1) if a is None else x, first, axis=0 if a is None else a)
    return (y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64))


# -- Resize --------------------------------------------------------------------------------------

_COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                "asymmetric", "tf_crop_and_resize")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")


def _resize_infer(x: TensorType, *, mode: str, coordinate_transformation_mode: str,
                  nearest_mode: str, cubic_coeff_a: float, exclude_outside: int,
                  extrapolation_value: float, antialias: int, scales: list[float],
                  sizes: list[int], roi: list[float] | None) -> TensorType:
    if len(scales) != x.ndim or len(sizes) != x.ndim:
        raise OpError(f"scales {scales} and sizes {sizes} must have one entry per axis of {x}")
    if mode not in ("nearest", "linear", "cubic"):
        raise OpError(f"mode {mode!r} is not nearest, linear or cubic")
    if coordinate_transformation_mode not in _COORD_MODES:
        raise OpError(f"coordinate_transformation_mode {coordinate_transformation_mode!r} is "
                      f"not one of {', '.join(_COORD_MODES)}")
    if nearest_mode not in _NEAREST_MODES:
        raise OpError(f"nearest_mode {nearest_mode!r} is not one of {', '.join(_NEAREST_MODES)}")
    if coordinate_transformation_mode == "tf_crop_and_resize" and (
            roi is None or len(roi) != 2 * x.ndim):
        raise OpError(f"tf_crop_and_resize needs roi with {2 * x.ndim} numbers, got {roi}")
    if any(s <= 0 for s in scales) or any(d < 0 for d in sizes):
        raise OpError(f"scales {scales} must be positive and sizes {sizes} non-negative")
    return x.with_shape(sizes)


def _source_coords(mode: str, out_len: int, in_len: int, scale: float,
                   roi: tuple[float, float] | None) -> np.ndarray:
    """Input coordinates of the output positions along one axis (ONNX's formulas)."""
    y = np.arange(out_len, dtype=np.float64)
    length = scale * in_len
    if mode == "align_corners":
        return np.zeros(out_len) if length == 1 else y * (in_len - 1) / (length - 1)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_crop_and_resize":
        assert roi is not None
        # roi arithmetic in float32 as the onnx reference does (exact ties round alike)
        lo = np.float32(roi[0])
        extent = float(np.float32(roi[1]) - lo)
        offset = float(lo * np.float32(in_len - 1))
        if length == 1:
            x = np.full(out_len, extent * (in_len - 1) / 2)
        else:
            x = y * extent * (in_len - 1) / (length - 1)
        return x + offset
    if mode == "pytorch_half_pixel":
        return np.full(out_len, -0.5) if length == 1 else (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / length)
        return offset + (y + 0.5) / scale - 0.5
    return (y + 0.5) / scale - 0.5  # half_pixel


def _cubic_kernel(d: np.ndarray, a: float) -> np.ndarray:
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _axis_taps(x: np.ndarray, in_len: int, scale: float, mode: str, nearest_mode: str,
               cubic_a: float, antialias: int, exclude_outside: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each [out_len, taps], of the input samples every output mixes."""
    if mode == "nearest":
        if nearest_mode == "simple":  # onnxruntime's rule for Resize-10: ceil when shrinking
            nearest_mode = "ceil" if scale < 1 else "floor"
        if nearest_mode == "floor":
            idx = np.floor(x)
        elif nearest_mode == "ceil":
            idx = np.ceil(x)
        elif nearest_mode == "round_prefer_ceil":
            idx = np.floor(x + 0.5)
        else:  # round_prefer_floor
            idx = np.ceil(x - 0.5)
        idx = np.clip(idx.astype(np.int64), 0, in_len - 1)
        return idx[:, None], np.ones((len(x), 1))
    radius = 1 if mode == "linear" else 2
    s = min(scale, 1.0) if antialias else 1.0
    first = math.floor(-radius / s) + 1
    offsets = np.arange(first, 2 - first)
    base = np.ceil(x) - 1  # the sample left of x, or x - 1 when x is integral (as ONNX does)
    taps = base[:, None] + offsets[None, :]
    dist = (taps - x[:, None]) * s
    if mode == "linear":
        w = np.clip(1 - np.abs(dist), 0, 1)
    else:
        w = _cubic_kernel(dist, cubic_a)
    if antialias:
        w = w / w.sum(axis=1, keepdims=True)
    if exclude_outside:
        w = np.where((taps < 0) | (taps >= in_len), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    idx = np.clip(taps, 0, in_len - 1).astype(np.int64)
    return idx, w


@register_op("Resize", attrs={
    "mode": Attr.str("nearest"), "coordinate_transformation_mode": Attr.str("half_pixel"),
    "nearest_mode": Attr.str("round_prefer_floor"), "cubic_coeff_a": Attr.float(-0.75),
    "exclude_outside": Attr.int(0), "extrapolation_value": Attr.float(0.0),
    "antialias": Attr.int(0), "scales": Attr.floats(), "sizes": Attr.ints(),
    "roi": Attr.floats(None)}, infer=_resize_infer, pattern=INJ)
def resize(x: np.ndarray, *, mode: str, coordinate_transformation_mode: str, nearest_mode: str,
           cubic_coeff_a: float, exclude_outside: int, extrapolation_value: float,
           antialias: int, scales: list[float], sizes: list[int],
           roi: list[float] | None) -> np.ndarray:
    """ONNX Resize with static per-axis ``scales`` (used by the coordinate transformation) and
    output ``sizes``; ``roi`` (starts then ends, one per axis) for tf_crop_and_resize.

    Separable: each axis whose size or scale changes is resized in turn.
    """
    r = x.ndim
    result = x.astype(np.float64)
    for axis in range(r):
        in_len, out_len, scale = x.shape[axis], sizes[axis], scales[axis]
        axis_roi = None if roi is None else (roi[axis], roi[axis + r])
        trivial_roi = axis_roi is None or (math.isclose(axis_roi[0], 0.0) and
                                           math.isclose(axis_roi[1], 1.0))
        if math.isclose(scale, 1.0) and in_len == out_len and trivial_roi:
            continue
        if out_len == 0 or in_len == 0:
            shape = list(result.shape)
            shape[axis] = out_len
            result = np.zeros(shape)
            continue
        coords = _source_coords(coordinate_transformation_mode, out_len, in_len, scale,
                                axis_roi)
        idx, w = _axis_taps(coords, in_len, scale, mode, nearest_mode, cubic_coeff_a,
                            antialias, exclude_outside)
        gathered = np.take(result, idx, axis=axis)  # axis -> (out_len, taps)
        wshape = (1,) * axis + w.shape + (1,) * (r - axis - 1)
        result = (gathered * w.reshape(wshape)).sum(axis=axis + 1)
        if coordinate_transformation_mode == "tf_crop_and_resize":
            outside = (coords < 0) | (coords > in_len - 1)
            mask = outside.reshape((1,) * axis + (out_len,) + (1,) * (r - axis - 1))
            result = np.where(mask, extrapolation_value, result)
    if x.dtype.kind in "iub":
        info = np.iinfo(x.dtype) if x.dtype.kind != "b" else None
        result = np.round(result)
        if info is not None:
            result = np.clip(result, info.min, info.max)
    return result.astype(x.dtype)
