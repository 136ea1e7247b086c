"""numpy int8 references with exactly the semantics the compiled VTA programs have."""

from __future__ import annotations

import numpy as np

from .layers import Conv2dParams


def requantize(acc: np.ndarray, shift: int, relu: bool, rounding: str = "floor") -> np.ndarray:
    """int32 accumulators -> int8: shift right (rounding down, or to nearest with ties to even
    for ``rounding="half_even"``), clip to [-128 or 0, 127]."""
    wide = acc.astype(np.int64)
    if rounding == "half_even" and shift > 0:
        shifted = np.rint(wide.astype(np.float64) / float(1 << shift)).astype(np.int64)
    else:
        shifted = wide >> shift
    return np.clip(shifted, 0 if relu else -128, 127).astype(np.int8)


def conv2d_accumulate(x: np.ndarray, weight: np.ndarray, params: Conv2dParams) -> np.ndarray:
    """The int32 result of conv(x, weight) before bias, computed exactly (im2col in float64)."""
    p = params
    padded = np.pad(
        x.astype(np.float64),
        ((0, 0), (0, 0), (p.pad_top, p.pad_bottom), (p.pad_left, p.pad_right)),
    )
    oh, ow = p.out_height, p.out_width
    columns = np.empty((p.batch, p.in_channels, p.kernel_h, p.kernel_w, oh, ow))
    for kh in range(p.kernel_h):
        for kw in range(p.kernel_w):
            columns[:, :, kh, kw] = padded[
                :,
                :,
                kh : kh + (oh - 1) * p.stride_h + 1 : p.stride_h,
                kw : kw + (ow - 1) * p.stride_w + 1 : p.stride_w,
            ]
    columns = columns.reshape(p.batch, -1, oh * ow)
    kernel = weight.astype(np.float64).reshape(p.out_channels, -1)
    result = np.einsum("ok,nkp->nop", kernel, columns, optimize=True)
    return result.reshape(p.batch, p.out_channels, oh, ow).astype(np.int64).astype(np.int32)


def conv2d_reference(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, params: Conv2dParams
) -> np.ndarray:
    """int8 NCHW conv2d + int32 bias, then shift/clip (and ReLU) to int8."""
    acc = conv2d_accumulate(x, weight, params).astype(np.int64)
    acc = (acc + bias.astype(np.int64)[None, :, None, None]).astype(np.int32)
    return requantize(acc, params.shift, params.relu, params.rounding)


def dense_reference(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray,
    shift: int,
    relu: bool,
    rounding: str = "floor",
) -> np.ndarray:
    """int8 ``x (N, K) @ weight (M, K).T + bias``, then shift/clip (and ReLU) to int8."""
    acc = (x.astype(np.float64) @ weight.astype(np.float64).T).astype(np.int64)
    acc = (acc + bias.astype(np.int64)[None, :]).astype(np.int32)
    return requantize(acc, shift, relu, rounding)
