"""Dtypes the numpy op references compute in, shared by the op families.

float16 (and bfloat16) inputs are computed in float32 and cast back (:func:`compute_dtype`; other
dtypes are computed as themselves), except in the families that always compute in floating point
(:func:`float_compute_dtype`: recurrent layers, causal convolution, Det).
"""

from __future__ import annotations

import numpy as np

from tessera.errors import OpError
from tessera.ir.cast import is_low_precision
from tessera.ir.types import DType, TensorType


def compute_dtype(dtype: np.dtype | DType) -> np.dtype:
    """The dtype arithmetic is done in for inputs of ``dtype`` (float16 and the low-precision
    floats such as bfloat16 -> float32)."""
    dt = np.dtype(dtype.numpy if isinstance(dtype, DType) else dtype)
    if dt == np.float16 or (is_low_precision(dt) and DType.from_numpy(dt).is_float):
        return np.dtype(np.float32)
    return dt


def as_compute_dtype(x: np.ndarray) -> np.ndarray:
    """``x`` in its compute dtype (no copy when it already is)."""
    return x.astype(compute_dtype(x.dtype), copy=False)


def float_compute_dtype(dtype: np.dtype) -> np.dtype:
    """float16 is computed in float32; float32/float64 as themselves."""
    return np.result_type(dtype, np.float32)


def check_float(t: TensorType, op: str, what: str = "input") -> None:
    """Raise unless ``t`` is a float tensor."""
    if not t.dtype.is_float:
        raise OpError(f"{op}: {what} must be a float tensor, got {t}")


__all__ = ["as_compute_dtype", "check_float", "compute_dtype", "float_compute_dtype"]
