"""Tessera's element-type conversion: numpy ``astype``, except that floats convert to integers
by SATURATING.

A float converts to an integer type by truncating toward zero; values beyond the type's range
clamp to its minimum or maximum (so ``+inf`` gives the maximum and ``-inf`` the minimum) and NaN
gives 0. ONNX leaves such conversions undefined and numpy's result for them depends on its
version and the CPU; Tessera defines them, the same on every backend (the ``Cast`` op's
reference, constant folding, the TIR interpreter and the llvm backend's ``llvm.fptosi.sat`` /
``llvm.fptoui.sat``). Every other conversion is numpy's: to bool is ``x != 0`` (NaN is true),
integers to narrower integers wrap, floats to floats round to nearest.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike


def saturating_astype(x: np.ndarray, dtype: DTypeLike) -> np.ndarray:
    """``x`` converted to ``dtype``; float to integer saturates (see the module docstring)."""
    x = np.asarray(x)
    dt = np.dtype(dtype)
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


__all__ = ["saturating_astype"]
