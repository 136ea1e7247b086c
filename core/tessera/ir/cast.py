"""Tessera's element-type conversion: numpy ``astype``, except that floats convert to integers
by SATURATING, and the low-precision types convert as ONNX's ``Cast`` defines.

A float converts to an integer type by truncating toward zero; values beyond the type's range
clamp to its minimum or maximum (so ``+inf`` gives the maximum and ``-inf`` the minimum) and NaN
gives 0. ONNX leaves such conversions undefined and numpy's result for them depends on its
version and the CPU; Tessera defines them, the same on every backend (the ``Cast`` op's
reference, constant folding, the TIR interpreter and the llvm backend's ``llvm.fptosi.sat`` /
``llvm.fptoui.sat``). Every other conversion is numpy's: to bool is ``x != 0`` (NaN is true),
integers to narrower integers wrap, floats to floats round to nearest.

The low-precision types (``ml_dtypes``: see :mod:`tessera.ir.types`) convert through float32 or
int8, which hold each of their values exactly, so a conversion rounds once:

* to bfloat16, float8 and float4 e2m1: round to nearest even. A float64 value is first narrowed
  to float32 rounding to odd, so that the second rounding is exact (``ml_dtypes`` rounds float64
  to float32 to nearest first, which can round twice). To the four float8 types, ``saturate``
  (ONNX's default) clamps out-of-range values and infinities to ``±FLT_MAX``; without it they
  become inf (e5m2) or NaN (the others), as ONNX's tables say. float4 e2m1 has neither inf nor
  NaN: out-of-range values clamp to ±6 and NaN gives -0 (onnx's reference, ``ml_dtypes``).
* to float8 e8m0 (a power of two, ``2**(e - 127)``, no sign, no zero): the exponent of ``|x|``
  rounded by ``round_mode`` (``up``: away from zero, the default; ``down``; ``nearest``: ties
  up). Zero gives the smallest value 2**-127 and values out of range the nearest end when
  saturating, NaN otherwise; infinities give the largest value 2**127 when saturating (ONNX's
  table; onnx's reference gives NaN), NaN gives NaN.
* to int4/uint4/int2/uint2: floats truncate toward zero, then the value WRAPS to the type's
  width like an integer (two's complement), as onnx's reference and its conformance data do;
  NaN and infinities give 0. This differs from the wider integers, which saturate.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from numpy.typing import DTypeLike

from tessera.ir.types import DType

#: The four float8 types the ``saturate`` attribute applies to.
FLOAT8 = frozenset({DType.float8_e4m3fn, DType.float8_e4m3fnuz, DType.float8_e5m2,
                    DType.float8_e5m2fnuz})
#: Sub-byte integers: width in bits and whether they are signed.
SUB_BYTE_INTS = {DType.int4: (4, True), DType.uint4: (4, False), DType.int2: (2, True),
                 DType.uint2: (2, False)}
E8M0_MAX_BITS = 254  # 2**127; 255 is NaN
ROUND_MODES = ("up", "down", "nearest")


def saturating_astype(x: np.ndarray, dtype: DTypeLike) -> np.ndarray:
    """``x`` converted to ``dtype``; float to integer saturates (see the module docstring)."""
    x = np.asarray(x)
    dt = np.dtype(dtype)
    if is_low_precision(x.dtype) or is_low_precision(dt):
        return convert(x, DType.from_numpy(dt))
    if x.dtype.kind != "f" or dt.kind not in "iu":
        return x.astype(dt)
    info = np.iinfo(dt)
    # Powers of two, exact in float64: in range means lo <= trunc(x) < hi.
    lo, hi = float(info.min), float(info.max) + 1.0
    t = np.trunc(x.astype(np.float64))
    inside = (t >= lo) & (t < hi)
    out = np.where(inside, t, 0.0).astype(dt)
    out[t >= hi] = info.max
    out[t < lo] = info.min
    return out


def convert(x: np.ndarray, to: DType, saturate: bool = True,
            round_mode: str = "up") -> np.ndarray:
    """``x`` converted to ``to`` as ONNX's ``Cast`` (``saturate`` and ``round_mode`` concern
    float8 and float8 e8m0 targets only; see the module docstring)."""
    x = widen(np.asarray(x))
    if not to.is_low_precision:
        return saturating_astype(x, to.numpy)
    if x.dtype == np.bool_:
        x = x.astype(np.int8)
    if to in SUB_BYTE_INTS:
        return _to_sub_byte_int(x, to)
    if to == DType.float8_e8m0fnu:
        return _to_e8m0(x, saturate, round_mode)
    if x.dtype.kind in "iu":
        x = x.astype(np.float64)
    if x.dtype == np.float64:
        x = _float32_round_to_odd(x)
    if to in FLOAT8 and saturate:
        big = float(ml_dtypes.finfo(to.numpy).max)
        x = np.clip(x, -big, big)  # NaN stays NaN
    return x.astype(to.numpy)


def widen(x: np.ndarray) -> np.ndarray:
    """A low-precision array as float32 (floats) or int8 (sub-byte ints), exactly; any other
    array as itself."""
    if not is_low_precision(x.dtype):
        return x
    dtype = DType.from_numpy(x.dtype)
    return x.astype(np.float32 if dtype.is_float else np.int8)


def is_low_precision(dt: np.dtype) -> bool:
    """Whether numpy dtype ``dt`` is one of the low-precision types (``ml_dtypes``)."""
    return dt.name in _LOW_NAMES


_LOW_NAMES = frozenset(d.value for d in DType if d.is_low_precision)


def _float32_round_to_odd(x: np.ndarray) -> np.ndarray:
    """float64 ``x`` as float32, rounded toward zero with the last bit set when inexact."""
    y = x.astype(np.float32)
    inexact = np.isfinite(x) & (y.astype(np.float64) != x)
    if not inexact.any():
        return y
    toward_zero = inexact & (np.abs(y.astype(np.float64)) > np.abs(x))
    y = np.where(toward_zero, np.nextafter(y, np.float32(0)), y)
    bits = y.view(np.uint32).copy()
    bits[inexact] |= np.uint32(1)
    return bits.view(np.float32)


def _to_sub_byte_int(x: np.ndarray, to: DType) -> np.ndarray:
    width, signed = SUB_BYTE_INTS[to]
    if x.dtype.kind == "f":
        t = np.trunc(x.astype(np.float64))
        t[~np.isfinite(t)] = 0.0
        v = np.fmod(t, float(1 << width)).astype(np.int64)
    else:
        v = x.astype(np.int64)
    v = v & ((1 << width) - 1)
    if signed:
        v = np.where(v >= 1 << (width - 1), v - (1 << width), v)
    return v.astype(np.int8).astype(to.numpy)


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    if round_mode not in ROUND_MODES:
        raise ValueError(f"round_mode {round_mode!r} is not one of {', '.join(ROUND_MODES)}")
    a = np.abs(x.astype(np.float64))
    nan = np.isnan(a)
    inf = np.isinf(a)
    zero = a == 0
    finite = ~(nan | inf | zero)
    m, k = np.frexp(np.where(finite, a, 1.0))  # a = m * 2**k, 0.5 <= m < 1
    lo = k - 1  # floor(log2(a))
    exact = m == 0.5
    if round_mode == "up":
        e = np.where(exact, lo, lo + 1)
    elif round_mode == "down":
        e = lo
    else:
        e = np.where(m >= 0.75, lo + 1, lo)  # a >= 1.5 * 2**lo: nearer the next power
    biased = e.astype(np.int64) + 127
    over, under = biased > E8M0_MAX_BITS, biased < 0
    if saturate:
        bits = np.clip(biased, 0, E8M0_MAX_BITS)
        bits = np.where(zero, 0, np.where(inf, E8M0_MAX_BITS, bits))
        bits = np.where(nan, 255, bits)
    else:
        bits = np.where(nan | inf | zero | over | under, 255, biased)
    return bits.astype(np.uint8).view(DType.float8_e8m0fnu.numpy)


__all__ = [
    "FLOAT8", "ROUND_MODES", "SUB_BYTE_INTS", "convert", "is_low_precision", "saturating_astype",
    "widen",
]
