"""Geometry shared by the NC[D]HW op families (convolutions, pools, per-channel normalizations).

These ops keep ONNX's NC[D]HW layout and attribute names, but in the IR every padding is
explicit: ``auto_pad`` is resolved into ``pads`` by the ONNX converter (see
:func:`resolve_auto_pad`). ``None`` for ``strides``/``dilations``/``pads``/``kernel_shape`` means
the ONNX default (ones, zeros, the weight's spatial shape); :func:`spatial_params` fills them in.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import TensorType


def spatial_params(n: int, kernel_shape: Sequence[int] | None, strides: Sequence[int] | None,
                   pads: Sequence[int] | None, dilations: Sequence[int] | None,
                   op: str = "op", negative_pads: bool = False
                   ) -> tuple[list[int], list[int], list[int], list[int]]:
    """Fill ONNX defaults for ``n`` spatial dims and check lengths (and that pads are not
    negative, unless ``negative_pads``: ConvTranspose crops with them).

    Returns ``(kernel, strides, pads, dilations)`` with ``pads`` as ``[b1.., e1..]``.
    """
    kernel = list(kernel_shape) if kernel_shape is not None else []
    s = list(strides) if strides else [1] * n
    d = list(dilations) if dilations else [1] * n
    p = list(pads) if pads else [0] * (2 * n)
    if kernel_shape is not None and len(kernel) != n:
        raise OpError(f"{op}: kernel_shape {kernel} has {len(kernel)} dims, the input has {n} "
                      f"spatial dims")
    if len(s) != n or len(d) != n or len(p) != 2 * n:
        raise OpError(f"{op}: strides {s}, dilations {d} and pads {p} do not fit {n} spatial "
                      f"dims")
    if any(v <= 0 for v in s) or any(v <= 0 for v in d):
        raise OpError(f"{op}: strides {s} and dilations {d} must be positive")
    if not negative_pads and any(v < 0 for v in p):
        raise OpError(f"{op}: pads {p} must not be negative")
    return kernel, s, p, d


def resolve_auto_pad(auto_pad: str, in_spatial: Sequence[int], kernel: Sequence[int],
                     strides: Sequence[int], dilations: Sequence[int],
                     pads: Sequence[int] | None = None) -> list[int]:
    """Explicit ``pads`` for ONNX ``auto_pad`` (``NOTSET`` returns ``pads`` or zeros).

    ``SAME_UPPER``/``SAME_LOWER`` pad so that the output size is ``ceil(in / stride)``, the odd
    pixel going at the end (UPPER) or the beginning (LOWER); ``VALID`` pads nothing.
    """
    n = len(in_spatial)
    mode = (auto_pad or "NOTSET").upper()
    if mode == "NOTSET":
        return list(pads) if pads else [0] * (2 * n)
    if mode == "VALID":
        return [0] * (2 * n)
    if mode not in ("SAME_UPPER", "SAME_LOWER"):
        raise OpError(f"unknown auto_pad {auto_pad!r} (expected NOTSET, SAME_UPPER, SAME_LOWER "
                      f"or VALID)")
    begin, end = [], []
    for i in range(n):
        out = -(-in_spatial[i] // strides[i])
        total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_spatial[i])
        small, big = total // 2, total - total // 2
        begin.append(small if mode == "SAME_UPPER" else big)
        end.append(big if mode == "SAME_UPPER" else small)
    return begin + end


def conv_output_shape(in_spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                      pads: Sequence[int], dilations: Sequence[int], op: str = "Conv") -> list[int]:
    """Spatial output size of a convolution with explicit pads."""
    n = len(in_spatial)
    out = []
    for i in range(n):
        span = (kernel[i] - 1) * dilations[i] + 1
        o = (in_spatial[i] + pads[i] + pads[i + n] - span) // strides[i] + 1
        if o <= 0:
            raise OpError(f"{op}: spatial input {list(in_spatial)} with kernel {list(kernel)}, "
                          f"dilations {list(dilations)} and pads {list(pads)} gives an empty "
                          f"output")
        out.append(o)
    return out


def pad_spatial(x: np.ndarray, begin: Sequence[int], end: Sequence[int],
                 value: Any = 0) -> np.ndarray:
    """Pad the trailing ``len(begin)`` axes (no copy when nothing is padded)."""
    if not any(begin) and not any(end):
        return x
    lead = [(0, 0)] * (x.ndim - len(begin))
    return np.pad(x, lead + list(zip(begin, end)), constant_values=value)


def kernel_slices(kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                   out: Sequence[int]):
    """For every kernel offset: (offsets, index tuple selecting the window elements at that
    offset for every output position from a padded tensor)."""
    for offs in itertools.product(*(range(k) for k in kernel)):
        idx = tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                    for o, d, s, n in zip(offs, dilations, strides, out))
        yield offs, (Ellipsis, *idx)


def channel_view(p: np.ndarray, ndim: int) -> np.ndarray:
    """A per-channel parameter of shape (C,) reshaped to broadcast against (N, C, ...)."""
    return p.reshape(-1, *([1] * (ndim - 2)))


def need_rank(t: TensorType, lo: int, op: str, what: str = "input") -> None:
    """Raise unless ``t`` has rank ``lo`` or more."""
    if t.ndim < lo:
        raise OpError(f"{op}: {what} must have rank >= {lo}, got {t}")


__all__ = [
    "channel_view", "conv_output_shape", "kernel_slices", "need_rank", "pad_spatial",
    "resolve_auto_pad", "spatial_params",
]
