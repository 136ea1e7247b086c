"""Image resizing (ONNX ``Resize``): nearest, linear and cubic, separable over the axes.

Each output point mixes a fixed number of input taps per resized axis (1 for nearest, 2 for
linear, 4 for cubic, more when antialiasing a downscale). Nearest computes its source index
inline from the output index. Linear and cubic read, per resized axis, small ``(out_len, taps)``
tables of clamped indices and weights (computes of their own, normalized by a sum over the taps
when antialiasing or excluding outside taps); the output is the sum over the tap combinations of
the product of the axes' weights and the input at the tabled indices. Coordinates and weights
are float64 with the reference's formulas (the result is cast back; integer types are rounded
half to even and saturated). ``tf_crop_and_resize`` is not supported.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import product
from typing import Any

import numpy as np

from tessera import te, tir
from tessera.ir.symbolic import dims_equal
from tessera.topi import tag
from tessera.topi.registry import register_compute
from tessera.topi.utils import cast, clamp, const, dim_equal, dims_of, shape_of

Expr = tir.PrimExpr
F64 = "float64"
#: Resize is unrolled into at most this many taps per output point.
MAX_TAPS = 256


def _f(v: float) -> Expr:
    return const(v, F64)


def source_coord(mode: str, y: Expr, out_len: int, in_len: int, scale: float) -> Expr:
    """The input coordinate of output index ``y`` along one axis (float64)."""
    yf = cast(y, F64)
    length = scale * in_len
    if mode == "align_corners":
        return _f(0.0) if length == 1 else yf * _f(in_len - 1) / _f(length - 1)
    if mode == "asymmetric":
        return yf / _f(scale)
    if mode == "pytorch_half_pixel":
        return _f(-0.5) if length == 1 else (yf + 0.5) / _f(scale) - 0.5
    if mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / length)
        return (_f(offset) + (yf + 0.5) / _f(scale)) - 0.5
    if mode == "half_pixel":
        return (yf + 0.5) / _f(scale) - 0.5
    raise ValueError(f"resize: coordinate transformation {mode!r} is not supported")


def _cubic(d: Expr, a: float) -> Expr:
    d = tir.fabs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1.0
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return tir.select(d <= 1.0, near, tir.select(d < 2.0, far, _f(0.0)))


def _nearest_index(x: Expr, in_len: int, scale: float, nearest_mode: str) -> Expr:
    """The clamped input index nearest to coordinate ``x``."""
    if nearest_mode == "simple":
        nearest_mode = "ceil" if scale < 1 else "floor"
    rounders: dict[str, Callable[[Expr], Expr]] = {
        "floor": tir.floor, "ceil": tir.ceil,
        "round_prefer_ceil": lambda v: tir.floor(v + 0.5),
        "round_prefer_floor": lambda v: tir.ceil(v - 0.5),
    }
    return clamp(cast(rounders[nearest_mode](x), "int64"), 0, in_len - 1)


def _first_tap(mode: str, scale: float, antialias: bool) -> tuple[int, float]:
    """(offset of the first tap from ``ceil(x) - 1``, the kernel's scale)."""
    radius = 1 if mode == "linear" else 2
    s = min(scale, 1.0) if antialias else 1.0
    return math.floor(-radius / s) + 1, s


def _normalized(w: te.Tensor, name: str) -> te.Tensor:
    """``w[o, t] / sum_t w[o, t]`` (a sum over the taps, then a division)."""
    t = te.reduce_axis((0, shape_of(w)[1]), name="t")
    total = te.compute((shape_of(w)[0],), lambda o: te.sum(w[o, t], axis=t),
                       name=f"{name}_sum", tag=tag.REDUCE)
    return te.compute(w.shape, lambda o, k: w[o, k] / total[o], name=name, tag=tag.ELEMWISE)


def axis_tables(out_len: int, in_len: int, scale: float, mode: str, coord_mode: str,
                cubic_a: float, antialias: bool, exclude_outside: bool
                ) -> tuple[te.Tensor, te.Tensor]:
    """(indices int64, weights float64), each ``(out_len, taps)``: the input samples each
    output position of one axis mixes (linear or cubic)."""
    first, s = _first_tap(mode, scale, antialias)
    taps = 2 - 2 * first

    def position(o: Expr, k: Expr) -> tuple[Expr, Expr]:
        x = source_coord(coord_mode, o, out_len, in_len, scale)
        return (tir.ceil(x) - 1.0) + cast(k + first, F64), x

    def raw(o: Expr, k: Expr) -> Expr:
        pos, x = position(o, k)
        dist = (pos - x) * s if s != 1.0 else pos - x
        if mode == "linear":
            return tir.min_(tir.max_(1.0 - tir.fabs(dist), 0.0), 1.0)
        return _cubic(dist, cubic_a)

    # the tags name the tables so that schedules compute them once, at root (KEEP_AT_ROOT),
    # not inline at every output point
    weights = te.compute((out_len, taps), raw, name="resize_weight",
                         tag=f"{tag.INJECTIVE},resize_weight")
    if antialias:
        weights = _normalized(weights, "resize_weight_aa")
    if exclude_outside:
        inner = weights

        def masked(o: Expr, k: Expr) -> Expr:
            pos, _ = position(o, k)
            outside = tir.any_of(pos < 0.0, pos >= float(in_len))
            return tir.select(outside, _f(0.0), inner[o, k])

        w_masked = te.compute((out_len, taps), masked, name="resize_weight_in",
                              tag=tag.INJECTIVE)
        t = te.reduce_axis((0, taps), name="t")
        total = te.compute((out_len,), lambda o: te.sum(w_masked[o, t], axis=t),
                           name="resize_weight_sum", tag=tag.REDUCE)
        weights = te.compute((out_len, taps), lambda o, k: w_masked[o, k] / tir.select(
            tir.eq(total[o], 0.0), _f(1.0), total[o]), name="resize_weight_ex",
            tag=tag.ELEMWISE)
    index = te.compute((out_len, taps), lambda o, k: clamp(cast(position(o, k)[0], "int64"),
                                                           0, in_len - 1),
                       name="resize_index", tag=f"{tag.INJECTIVE},resize_index")
    return index, weights


def _sum(values: list[Expr]) -> Expr:
    total = values[0]
    for v in values[1:]:
        total = total + v
    return total


def tap_count(mode: str, scale: float, antialias: bool) -> int:
    """Taps per output point along one resized axis."""
    if mode == "nearest":
        return 1
    return 2 - 2 * _first_tap(mode, scale, antialias)[0]


def resize(x: te.Tensor, sizes: list[int], scales: list[float], mode: str = "nearest",
           coordinate_transformation_mode: str = "half_pixel",
           nearest_mode: str = "round_prefer_floor", cubic_coeff_a: float = -0.75,
           exclude_outside: bool = False, antialias: bool = False) -> te.Tensor:
    """ONNX Resize with static ``sizes`` (the output shape) and ``scales`` (used by the
    coordinate transformation). Nearest computes its indices inline; linear and cubic read
    per-axis ``(out_len, taps)`` tables of indices and weights (small computes of their own)."""
    shape = dims_of(x)  # a run-time size only on axes left as they are (a batch)
    resized = [a for a in range(len(shape))
               if not (math.isclose(scales[a], 1.0) and dim_equal(shape[a], sizes[a]))]
    tables = {}
    if mode != "nearest":
        for a in resized:
            tables[a] = axis_tables(sizes[a], shape[a], scales[a], mode,
                                    coordinate_transformation_mode, cubic_coeff_a, antialias,
                                    exclude_outside)

    def body(*oi: Any) -> Expr:
        if mode == "nearest" or not resized:
            idx = list(oi)
            for a in resized:
                coord = source_coord(coordinate_transformation_mode, oi[a], sizes[a], shape[a],
                                     scales[a])
                idx[a] = _nearest_index(coord, shape[a], scales[a], nearest_mode)
            return x[tuple(idx)]
        terms = []
        for combo in product(*(range(shape_of(tables[a][0])[1]) for a in resized)):
            idx = list(oi)
            weight: Expr | None = None
            for a, k in zip(resized, combo):
                index, w = tables[a]
                idx[a] = index[oi[a], k]
                weight = w[oi[a], k] if weight is None else weight * w[oi[a], k]
            assert weight is not None
            terms.append(cast(x[tuple(idx)], F64) * weight)
        total = _sum(terms)
        if x.dtype.startswith(("int", "uint")):
            info = np.iinfo(x.dtype)
            total = tir.min_(tir.max_(tir.round_even(total), float(info.min)), float(info.max))
        return cast(total, x.dtype)

    return te.compute(tuple(sizes), body, name="resize", tag=tag.INJECTIVE,
                      attrs={"mode": mode, "scales": tuple(scales)})


def _supports(node: Any) -> str | None:
    a = node.attrs
    if a.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        return "coordinate_transformation_mode tf_crop_and_resize is not supported"
    shape = node.inputs[0].type.shape
    if any(isinstance(d, int) and d == 0 for d in (*shape, *a["sizes"])):
        return "empty tensors are not supported"
    if node.inputs[0].type.dtype.value == "bool":
        return "bool input is not supported"
    taps = 1
    for d, (n, s) in enumerate(zip(a["sizes"], a["scales"])):
        if not (math.isclose(s, 1.0) and dims_equal(n, shape[d])):
            # (an axis of run-time size resized: the backend refuses it, naming the node)
            taps *= tap_count(a["mode"], s, bool(a["antialias"]))
    if taps > MAX_TAPS:
        return f"{taps} taps per output point exceed {MAX_TAPS}"
    return None


@register_compute("Resize", supports=_supports)
def _resize(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [resize(inputs[0], list(attrs["sizes"]), list(attrs["scales"]), attrs["mode"],
                   attrs["coordinate_transformation_mode"], attrs["nearest_mode"],
                   attrs["cubic_coeff_a"], bool(attrs["exclude_outside"]),
                   bool(attrs["antialias"]))]


__all__ = ["MAX_TAPS", "resize", "source_coord", "tap_count"]
