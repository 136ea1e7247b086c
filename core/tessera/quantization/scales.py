"""Power-of-two scales for symmetric int8 quantization (zero point 0).

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


def quantize_array(x: np.ndarray, scale: float, dtype: type = np.int8) -> np.ndarray:
    """``saturate(round_half_even(x / scale))`` as ``dtype`` (ONNX QuantizeLinear with zero
    point 0)."""
    info = np.iinfo(dtype)
    q = np.rint(np.asarray(x, np.float64) / scale)
    return np.clip(q, info.min, info.max).astype(dtype)


def weight_scale(w: np.ndarray, qmax: int = INT8_MAX) -> float:
    """The power-of-two per-tensor scale of a weight tensor."""
    return pow2_scale(float(np.max(np.abs(w))) if w.size else 0.0, qmax)
