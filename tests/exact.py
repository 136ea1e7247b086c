"""Exact oracles for the tests, written independently of Tessera's references.

- Integer products (MatMulInteger, ConvInteger and the accumulators of QLinearMatMul and
  QLinearConv) in numpy int64, which cannot overflow for 8-bit operands: no floating point.
- Requantization of an exact accumulator in float64 (:func:`requantize`); Tessera, like
  onnxruntime, requantizes in float32, which may round differently by one step.
- Tessera's saturating float -> integer conversion (:mod:`tessera.ir.cast`) computed element by
  element with Python integers (:func:`saturating_cast`), and the values that exercise it
  (:func:`cast_values`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

INT_TYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64")


def as_i64(a: np.ndarray | int | None, shape_to: int = 0) -> np.ndarray:
    """``a`` as int64 (0 for None); a vector is reshaped to broadcast along axis ``shape_to``
    counted from the end (0: the last axis)."""
    v = np.asarray(0 if a is None else a, np.int64)
    if v.size == 1:
        return v.reshape(())
    return v.reshape(-1, *([1] * shape_to))


def matmul_integer(a: np.ndarray, b: np.ndarray, a_zp: np.ndarray | None = None,
                   b_zp: np.ndarray | None = None) -> np.ndarray:
    """``(a - a_zp) @ (b - b_zp)`` in int64 (a_zp scalar or per row of a, b_zp scalar or per
    column of b)."""
    return (a.astype(np.int64) - as_i64(a_zp, 1)) @ (b.astype(np.int64) - as_i64(b_zp))


def conv_integer(x: np.ndarray, w: np.ndarray, x_zp: np.ndarray | None = None,
                 w_zp: np.ndarray | None = None, *, strides: Sequence[int] | None = None,
                 pads: Sequence[int] | None = None, dilations: Sequence[int] | None = None,
                 group: int = 1) -> np.ndarray:
    """N-d convolution (NC... layout, explicit ``pads`` as ONNX orders them) of ``x - x_zp``
    and ``w - w_zp`` (w_zp scalar or per output channel) in int64; padding is 0 after the
    shift."""
    nd = x.ndim - 2
    strides = list(strides or [1] * nd)
    dilations = list(dilations or [1] * nd)
    pads = list(pads or [0] * (2 * nd))
    xi = x.astype(np.int64) - as_i64(x_zp)
    wi = w.astype(np.int64) - as_i64(w_zp, w.ndim - 1)
    xi = np.pad(xi, [(0, 0), (0, 0)] + [(pads[i], pads[i + nd]) for i in range(nd)])
    n, c = xi.shape[:2]
    m, cg = wi.shape[:2]
    ks = wi.shape[2:]
    out = [(xi.shape[2 + i] - dilations[i] * (ks[i] - 1) - 1) // strides[i] + 1
           for i in range(nd)]
    y = np.zeros((n, m, *out), np.int64)
    mg = m // group
    for g in range(group):
        xg = xi[:, g * cg:(g + 1) * cg]
        wg = wi[g * mg:(g + 1) * mg]
        for k in itertools.product(*(range(s) for s in ks)):
            window = tuple(slice(k[i] * dilations[i],
                                 k[i] * dilations[i] + strides[i] * (out[i] - 1) + 1,
                                 strides[i]) for i in range(nd))
            patch = xg[(slice(None), slice(None), *window)]
            y[:, g * mg:(g + 1) * mg] += np.einsum("nc...,mc->nm...", patch,
                                                   wg[(slice(None), slice(None), *k)])
    return y


def requantize(acc: np.ndarray, scale: np.ndarray | float, zp: np.ndarray | int,
               dtype: np.dtype | type) -> np.ndarray:
    """``saturate(round_half_even(acc * scale) + zp)`` with the product in float64 (exact to
    within float64 rounding for int32 accumulators)."""
    info = np.iinfo(dtype)
    v = np.rint(acc.astype(np.float64) * np.asarray(scale, np.float64))
    v = v + np.asarray(zp, np.float64)
    return np.clip(v, info.min, info.max).astype(dtype)


def assert_within_one_step(got: np.ndarray, want: np.ndarray) -> None:
    """Same dtype and shape, and no element more than one quantization step from ``want``."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    assert diff.max(initial=0) <= 1, f"{int((diff > 1).sum())} elements off by more than 1"


def saturating_cast(x: np.ndarray, dtype: str | np.dtype) -> np.ndarray:
    """Float -> integer as Tessera defines it: truncate toward zero, clamp to the type's range
    (``±inf`` included), NaN -> 0; one element at a time with Python integers."""
    info = np.iinfo(dtype)

    def one(v: float) -> int:
        if math.isnan(v):
            return 0
        if math.isinf(v):
            return int(info.max) if v > 0 else int(info.min)
        return min(max(math.trunc(v), int(info.min)), int(info.max))

    flat = [one(float(v)) for v in np.asarray(x).reshape(-1)]
    return np.array(flat, dtype=dtype).reshape(np.shape(x))


def cast_values(src: str | np.dtype, dst: str | np.dtype, rng: np.random.Generator,
                n_random: int = 64) -> np.ndarray:
    """Values of float type ``src`` for a cast to integer type ``dst``: NaN, ±inf, ±0, values
    just inside and just beyond both limits, the limits ± 0.5 and ± 1, large magnitudes, then
    random values in range and beyond it (1-D, in a shuffled order)."""
    ft = np.dtype(src)
    info = np.iinfo(dst)
    fmax = float(np.finfo(ft).max)
    lo, hi = float(info.min), float(info.max) + 1.0   # in range: lo <= trunc(x) < hi
    special = [math.nan, math.inf, -math.inf, 0.0, -0.0, 0.5, -0.5, 0.999, -0.999, 1.5, -1.5,
               lo, lo - 0.5, lo - 1, lo + 1, hi - 1, hi - 0.5, hi, hi + 1, hi + 0.5,
               2 * hi, 2 * lo - 1, -hi, 1e10, -1e10, 1e19, -1e19, 1e30, -1e30, fmax, -fmax]
    if ft == np.float64:
        special += [1e300, -1e300]
    vals = np.array(special, np.float64).astype(ft)
    # The neighbours (in src) of both limits.
    for edge in (np.asarray(lo, ft), np.asarray(hi, ft)):
        vals = np.append(vals, [np.nextafter(edge, ft.type(-np.inf)),
                                np.nextafter(edge, ft.type(np.inf))])
    inside = rng.uniform(max(lo, -1e6), min(hi, 1e6), n_random)
    beyond = rng.uniform(1, 4, n_random) * np.where(rng.random(n_random) < 0.5, lo - 1, hi)
    out = np.concatenate([vals, inside.astype(ft), beyond.astype(ft)])
    return out[rng.permutation(out.size)]
