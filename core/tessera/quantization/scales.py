"""Scales for int8 quantization: power-of-two ones (symmetric, zero point 0) for VTA, and the
affine ones of the CPU scheme (any scale; symmetric int8 or asymmetric uint8 with a zero point;
per-channel weights).

VTA requantizes int32 accumulators with an arithmetic shift, so the ratio of the scales of a
layer's input, weight and output must be a power of two; making every scale a power of two
guarantees that (and keeps the float computation of a QDQ model exact, see
``tessera_vta.patterns``). A scale covers the calibrated maximum without clipping:
``scale = 2**ceil(log2(max_abs / qmax))``.
"""

from __future__ import annotations

import math

import numpy as np

#: The largest magnitude of symmetric int8 values (-127..127; -128 is not produced).
INT8_MAX = 127


def pow2_scale(max_abs: float, qmax: int = INT8_MAX) -> float:
    """The smallest power of two ``s`` with ``max_abs / s <= qmax`` (1.0 for an all-zero
    tensor)."""
    if not math.isfinite(max_abs):
        raise ValueError(f"cannot choose a scale for a tensor whose maximum is {max_abs}")
    if max_abs <= 0.0:
        return 1.0
    exponent = math.ceil(math.log2(max_abs / qmax))
    # guard against log2 rounding at exact powers of two
    if max_abs / 2.0 ** exponent > qmax:
        exponent += 1
    elif max_abs / 2.0 ** (exponent - 1) <= qmax:
        exponent -= 1
    return 2.0 ** exponent


def quantize_array(x: np.ndarray, scale: float | np.ndarray, dtype: type = np.int8,
                   zero_point: int | np.ndarray = 0, axis: int | None = None) -> np.ndarray:
    """``saturate(round_half_even(x / scale) + zero_point)`` as ``dtype`` (ONNX
    QuantizeLinear); with ``axis``, ``scale`` and ``zero_point`` hold one value per index of
    that axis (per-channel)."""
    info = np.iinfo(dtype)
    scale = np.asarray(scale, np.float64)
    zero = np.asarray(zero_point, np.float64)
    if axis is not None:
        shape = [1] * np.ndim(x)
        shape[axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape) if zero.ndim else zero
    q = np.rint(np.asarray(x, np.float64) / scale) + zero
    return np.clip(q, info.min, info.max).astype(dtype)


def affine_params(low: float, high: float, symmetric: bool) -> tuple[float, int, type]:
    """``(scale, zero_point, dtype)`` of an activation whose values lie in ``[low, high]``:
    symmetric, int8 with zero point 0 and ``scale = max(|low|, |high|) / 127``; otherwise
    uint8 over ``[min(low, 0), max(high, 0)]`` (0 exactly representable) with ``scale = range
    / 255`` and the zero point that maps 0.0 to an integer. A range of zero width gets scale
    1.0."""
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"cannot choose a scale for the range [{low}, {high}]")
    if symmetric:
        bound = max(abs(low), abs(high))
        return (bound / INT8_MAX if bound > 0 else 1.0), 0, np.int8
    low, high = min(low, 0.0), max(high, 0.0)
    if high - low <= 0:
        return 1.0, 0, np.uint8
    scale = (high - low) / 255.0
    zero = int(np.clip(np.rint(-low / scale), 0, 255))
    return scale, zero, np.uint8


def tensor_scale(w: np.ndarray, qmax: int = INT8_MAX) -> float:
    """The symmetric per-tensor scale of a weight tensor, ``max|w| / qmax`` (1.0 for an
    all-zero tensor)."""
    peak = float(np.max(np.abs(w))) if w.size else 0.0
    return peak / qmax if peak > 0 else 1.0


def channel_scales(w: np.ndarray, axis: int, qmax: int = INT8_MAX) -> np.ndarray:
    """Symmetric per-channel scales of a weight tensor along ``axis``: ``max|w| / qmax`` of
    each channel (1.0 for an all-zero channel)."""
    others = tuple(i for i in range(w.ndim) if i != axis)
    peak = np.max(np.abs(w), axis=others) if w.size else np.zeros(w.shape[axis])
    return np.where(peak > 0, peak / qmax, 1.0).astype(np.float64)


def weight_scale(w: np.ndarray, qmax: int = INT8_MAX) -> float:
    """The power-of-two per-tensor scale of a weight tensor."""
    return pow2_scale(float(np.max(np.abs(w))) if w.size else 0.0, qmax)
