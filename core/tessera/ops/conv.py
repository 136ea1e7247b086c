"""Ops: convolution family: ``Conv``, ``ConvTranspose``, ``DeformConv`` and ``Col2Im``.

Spatial attributes follow :mod:`tessera.ops.spatial` (explicit pads; ``None`` means the ONNX
default); ``ConvTranspose``'s ``output_shape`` is folded into ``pads`` and ``output_padding`` by
the ONNX converter. The references are vectorized numpy: convolutions use im2col (a strided
window view copied once) followed by one batched matrix product per call. float16 inputs are
computed in float32 and cast back; float32 is computed in float32.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tessera.errors import OpError
from tessera.ir.types import TensorType
from tessera.ops.dtypes import as_compute_dtype, check_float, compute_dtype
from tessera.ops.registry import Attr, OpPattern, register_op
from tessera.ops.spatial import (
    channel_view,
    conv_output_shape,
    kernel_slices,
    need_rank,
    pad_spatial,
    spatial_params,
)

FUSABLE = OpPattern.OUT_ELEMWISE_FUSABLE
OPAQUE = OpPattern.OPAQUE


# -- im2col and col2im --------------------------------------------------------------------------

def _windows(xp: np.ndarray, kernel: Sequence[int], strides: Sequence[int],
             dilations: Sequence[int], out: Sequence[int]) -> np.ndarray:
    """A strided view of shape ``(*lead, *kernel, *out)`` over the trailing spatial axes of
    ``xp`` (already padded): element ``[..., k.., o..]`` is ``xp[..., o*s + k*d]``."""
    n = len(kernel)
    lead_shape = xp.shape[:-n]
    lead_strides = xp.strides[:-n]
    sp = xp.strides[-n:]
    shape = (*lead_shape, *kernel, *out)
    strides_ = (*lead_strides, *(st * d for st, d in zip(sp, dilations)),
                *(st * s for st, s in zip(sp, strides)))
    return as_strided(xp, shape=shape, strides=strides_, writeable=False)


def im2col(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int], pads: Sequence[int],
           dilations: Sequence[int], pad_value: Any = 0) -> tuple[np.ndarray, list[int]]:
    """Columns of a convolution: ``(N, C, *kernel, *out)`` contiguous, and the output size."""
    n = len(kernel)
    out = conv_output_shape(x.shape[2:], kernel, strides, pads, dilations)
    xp = pad_spatial(x, pads[:n], pads[n:], pad_value)
    return np.ascontiguousarray(_windows(xp, kernel, strides, dilations, out)), out


def conv_nd(x: np.ndarray, w: np.ndarray, group: int, strides: Sequence[int],
            pads: Sequence[int], dilations: Sequence[int]) -> np.ndarray:
    """Grouped N-d convolution of same-dtype arrays by im2col + one batched matmul.

    The result has the arrays' dtype (float32 accumulation for float32; use float64 inputs for
    exact integer convolutions).
    """
    N, C = x.shape[:2]
    M = w.shape[0]
    kernel = list(w.shape[2:])
    G = group
    Mg = M // G
    K = (C // G) * math.prod(kernel)
    if all(k == 1 for k in kernel) and not any(pads) and all(s == 1 for s in strides):
        out = list(x.shape[2:])
        cols = x.reshape(N, G, K, math.prod(out))
    else:
        cols_full, out = im2col(x, kernel, strides, pads, dilations)
        cols = cols_full.reshape(N, G, K, math.prod(out))
    wm = w.reshape(G, Mg, K)
    if N == 1:
        y = np.matmul(wm, cols[0])[None]
    else:
        y = np.matmul(wm, cols)
    return y.reshape(N, M, *out)


def _col2im(cols: np.ndarray, full: Sequence[int], strides: Sequence[int],
            dilations: Sequence[int], dtype: np.dtype) -> np.ndarray:
    """Scatter-add ``cols`` of shape ``(N, C, *kernel, *blocks)`` into an image of spatial size
    ``full`` (the padded image)."""
    n = len(full)
    kernel = cols.shape[2:2 + n]
    blocks = cols.shape[2 + n:]
    y = np.zeros((*cols.shape[:2], *full), dtype)
    for offs, idx in kernel_slices(kernel, strides, dilations, blocks):
        y[idx] += cols[(slice(None), slice(None), *offs)]
    return y


def _crop_spatial(y: np.ndarray, begin: Sequence[int], end: Sequence[int]) -> np.ndarray:
    """Remove ``begin``/``end`` elements from the trailing axes (negative amounts add zeros)."""
    n = len(begin)
    if any(v < 0 for v in (*begin, *end)):
        y = pad_spatial(y, [max(0, -b) for b in begin], [max(0, -e) for e in end])
        begin = [max(0, b) for b in begin]
        end = [max(0, e) for e in end]
    idx = tuple(slice(b, y.shape[-n + i] - e) for i, (b, e) in enumerate(zip(begin, end)))
    return y[(Ellipsis, *idx)]


# -- Conv ----------------------------------------------------------------------------------------

CONV_ATTRS = {
    "kernel_shape": Attr.ints(None),
    "strides": Attr.ints(None),
    "pads": Attr.ints(None),
    "dilations": Attr.ints(None),
    "group": Attr.int(1),
}


def _window_params(x: TensorType, w: TensorType, kernel_shape: list[int] | None,
                   strides: list[int] | None, pads: list[int] | None,
                   dilations: list[int] | None, op: str) -> tuple[list[int], list[int], list[int]]:
    """Check a convolution's input and weight ranks and kernel shape; return its strides, pads
    and dilations with defaults filled."""
    need_rank(x, 3, op)
    if w.ndim != x.ndim:
        raise OpError(f"{op}: weight {w} must have the input's rank {x.ndim}")
    kernel, s, p, d = spatial_params(x.ndim - 2, kernel_shape, strides, pads, dilations, op,
                                     negative_pads=op == "ConvTranspose")
    if kernel and list(kernel) != list(w.shape[2:]):
        raise OpError(f"{op}: kernel_shape {kernel} does not match weight {w}")
    return s, p, d


def conv_infer(x: TensorType, w: TensorType, b: TensorType | None = None, *,
                kernel_shape: list[int] | None, strides: list[int] | None,
                pads: list[int] | None, dilations: list[int] | None, group: int,
                op: str = "Conv") -> TensorType:
    s, p, d = _window_params(x, w, kernel_shape, strides, pads, dilations, op)
    if group <= 0 or x.shape[1] % group or w.shape[0] % group:
        raise OpError(f"{op}: group {group} must divide input channels {x.shape[1]} and output "
                      f"channels {w.shape[0]}")
    if w.shape[1] * group != x.shape[1]:
        raise OpError(f"{op}: weight {w} expects {w.shape[1] * group} input channels "
                      f"(group {group}), the input {x} has {x.shape[1]}")
    if b is not None and b.shape != (w.shape[0],):
        raise OpError(f"{op}: bias {b} must have shape [{w.shape[0]}]")
    out = conv_output_shape(x.shape[2:], list(w.shape[2:]), s, p, d, op)
    return TensorType((x.shape[0], w.shape[0], *out), x.dtype)


def _conv_infer_float(x: TensorType, w: TensorType, b: TensorType | None = None,
                      **attrs: Any) -> TensorType:
    check_float(x, "Conv")
    return conv_infer(x, w, b, **attrs)


@register_op("Conv", attrs=CONV_ATTRS, inputs=(2, 3), infer=_conv_infer_float, pattern=FUSABLE)
def conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
         kernel_shape: list[int] | None, strides: list[int] | None, pads: list[int] | None,
         dilations: list[int] | None, group: int) -> np.ndarray:
    """N-d grouped convolution (cross-correlation) with explicit pads."""
    _, s, p, d = spatial_params(x.ndim - 2, kernel_shape, strides, pads, dilations, "Conv")
    ct = compute_dtype(x.dtype)
    y = conv_nd(x.astype(ct, copy=False), w.astype(ct, copy=False), group, s, p, d)
    if b is not None:
        y += channel_view(b.astype(ct, copy=False), y.ndim)
    return y.astype(x.dtype, copy=False)


# -- ConvTranspose -------------------------------------------------------------------------------

def conv_transpose_output_shape(in_spatial: Sequence[int], kernel: Sequence[int],
                                strides: Sequence[int], pads: Sequence[int],
                                dilations: Sequence[int],
                                output_padding: Sequence[int]) -> list[int]:
    """Spatial output size of a transposed convolution with explicit pads."""
    n = len(in_spatial)
    return [strides[i] * (in_spatial[i] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i]
            + 1 - pads[i] - pads[i + n] for i in range(n)]


def _conv_transpose_infer(x: TensorType, w: TensorType, b: TensorType | None = None, *,
                          kernel_shape: list[int] | None, strides: list[int] | None,
                          pads: list[int] | None, dilations: list[int] | None, group: int,
                          output_padding: list[int] | None) -> TensorType:
    op = "ConvTranspose"
    check_float(x, op)
    s, p, d = _window_params(x, w, kernel_shape, strides, pads, dilations, op)
    n = x.ndim - 2
    if group <= 0 or x.shape[1] % group or w.shape[0] != x.shape[1]:
        raise OpError(f"{op}: weight {w} must have {x.shape[1]} input channels and group "
                      f"{group} must divide them")
    op_ = list(output_padding) if output_padding else [0] * n
    if len(op_) != n:
        raise OpError(f"{op}: output_padding {op_} does not fit {n} spatial dims")
    m = w.shape[1] * group
    if b is not None and b.shape != (m,):
        raise OpError(f"{op}: bias {b} must have shape [{m}]")
    out = conv_transpose_output_shape(x.shape[2:], list(w.shape[2:]), s, p, d, op_)
    if any(o <= 0 for o in out):
        raise OpError(f"{op}: output spatial shape {out} is empty")
    return TensorType((x.shape[0], m, *out), x.dtype)


@register_op("ConvTranspose", attrs={**CONV_ATTRS, "output_padding": Attr.ints(None)},
             inputs=(2, 3), infer=_conv_transpose_infer, pattern=FUSABLE)
def conv_transpose(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
                   kernel_shape: list[int] | None, strides: list[int] | None,
                   pads: list[int] | None, dilations: list[int] | None, group: int,
                   output_padding: list[int] | None) -> np.ndarray:
    """N-d grouped transposed convolution: one matmul to columns, then col2im and a crop."""
    n = x.ndim - 2
    _, s, p, d = spatial_params(n, kernel_shape, strides, pads, dilations, "ConvTranspose",
                                negative_pads=True)
    op_ = list(output_padding) if output_padding else [0] * n
    ct = compute_dtype(x.dtype)
    N, C = x.shape[:2]
    G = group
    Cg, Mg = C // G, w.shape[1]
    kernel = list(w.shape[2:])
    in_sp = list(x.shape[2:])
    K = math.prod(kernel)
    xm = x.astype(ct, copy=False).reshape(N, G, Cg, math.prod(in_sp))
    wm = w.astype(ct, copy=False).reshape(G, Cg, Mg * K).transpose(0, 2, 1)
    cols = np.matmul(wm, xm).reshape(N, G * Mg, *kernel, *in_sp)
    full = [(in_sp[i] - 1) * s[i] + (kernel[i] - 1) * d[i] + 1 + op_[i] for i in range(n)]
    y = _col2im(cols, full, s, d, ct)
    y = _crop_spatial(y, p[:n], p[n:])
    if b is not None:
        y = y + channel_view(b.astype(ct, copy=False), y.ndim)
    return np.ascontiguousarray(y).astype(x.dtype, copy=False)


# -- Col2Im --------------------------------------------------------------------------------------

def _col2im_infer(x: TensorType, *, image_shape: list[int], block_shape: list[int],
                  dilations: list[int] | None, pads: list[int] | None,
                  strides: list[int] | None) -> TensorType:
    op = "Col2Im"
    n = len(image_shape)
    if len(block_shape) != n:
        raise OpError(f"{op}: block_shape {block_shape} and image_shape {image_shape} differ in "
                      f"length")
    _, s, p, d = spatial_params(n, block_shape, strides, pads, dilations, op)
    if x.ndim != 3:
        raise OpError(f"{op}: input must be (N, C*prod(block_shape), L), got {x}")
    K = math.prod(block_shape)
    if x.shape[1] % K:
        raise OpError(f"{op}: input dim 1 ({x.shape[1]}) is not a multiple of prod(block_shape) "
                      f"({K})")
    blocks = conv_output_shape(image_shape, block_shape, s, p, d, op)
    if math.prod(blocks) != x.shape[2]:
        raise OpError(f"{op}: input has {x.shape[2]} blocks, image_shape {image_shape} gives "
                      f"{math.prod(blocks)}")
    return TensorType((x.shape[0], x.shape[1] // K, *image_shape), x.dtype)


@register_op("Col2Im", attrs={"image_shape": Attr.ints(), "block_shape": Attr.ints(),
                              "dilations": Attr.ints(None), "pads": Attr.ints(None),
                              "strides": Attr.ints(None)},
             infer=_col2im_infer, pattern=OPAQUE)
def col2im(x: np.ndarray, *, image_shape: list[int], block_shape: list[int],
           dilations: list[int] | None, pads: list[int] | None,
           strides: list[int] | None) -> np.ndarray:
    """Rearrange column blocks back into an image, summing overlaps (``image_shape`` and
    ``block_shape`` are ONNX's inputs 1 and 2, made attributes)."""
    n = len(image_shape)
    _, s, p, d = spatial_params(n, block_shape, strides, pads, dilations, "Col2Im")
    blocks = conv_output_shape(image_shape, block_shape, s, p, d, "Col2Im")
    N = x.shape[0]
    C = x.shape[1] // math.prod(block_shape)
    cols = as_compute_dtype(x).reshape(N, C, *block_shape, *blocks)
    full = [image_shape[i] + p[i] + p[i + n] for i in range(n)]
    y = _col2im(cols, full, s, d, cols.dtype)
    return np.ascontiguousarray(_crop_spatial(y, p[:n], p[n:])).astype(x.dtype, copy=False)


# -- DeformConv ---------------------------------------------------------------------------------

def _deform_conv_infer(x: TensorType, w: TensorType, offset: TensorType,
                       b: TensorType | None = None, mask: TensorType | None = None, *,
                       kernel_shape: list[int] | None, strides: list[int] | None,
                       pads: list[int] | None, dilations: list[int] | None, group: int,
                       offset_group: int) -> TensorType:
    op = "DeformConv"
    y = conv_infer(x, w, b, kernel_shape=kernel_shape, strides=strides, pads=pads,
                    dilations=dilations, group=group, op=op)
    n = x.ndim - 2
    K = math.prod(w.shape[2:])
    want = (x.shape[0], offset_group * K * n, *y.shape[2:])
    if offset.shape != want:
        raise OpError(f"{op}: offset {offset} must have shape {list(want)}")
    if mask is not None and mask.shape != (x.shape[0], offset_group * K, *y.shape[2:]):
        raise OpError(f"{op}: mask {mask} must have shape "
                      f"{[x.shape[0], offset_group * K, *y.shape[2:]]}")
    if x.shape[1] % offset_group:
        raise OpError(f"{op}: offset_group {offset_group} must divide {x.shape[1]} channels")
    return y


@register_op("DeformConv", attrs={**CONV_ATTRS, "offset_group": Attr.int(1)}, inputs=(3, 5),
             infer=_deform_conv_infer, pattern=OPAQUE)
def deform_conv(x: np.ndarray, w: np.ndarray, offset: np.ndarray, b: np.ndarray | None = None,
                mask: np.ndarray | None = None, *, kernel_shape: list[int] | None,
                strides: list[int] | None, pads: list[int] | None,
                dilations: list[int] | None, group: int, offset_group: int) -> np.ndarray:
    """Deformable convolution: bilinear samples at offset kernel positions (zero outside the
    image), optionally masked, then one grouped matmul."""
    n = x.ndim - 2
    _, s, p, d = spatial_params(n, kernel_shape, strides, pads, dilations, "DeformConv")
    kernel = list(w.shape[2:])
    K = math.prod(kernel)
    N, C = x.shape[:2]
    out = list(offset.shape[2:])
    dims = x.shape[2:]
    ct = compute_dtype(x.dtype)
    xc = x.astype(ct, copy=False)
    og = offset_group
    Cog = C // og
    off = offset.astype(np.float64).reshape(N, og, K, n, *out)
    msk = (mask.astype(ct).reshape(N, og, K, *out) if mask is not None
           else np.ones((N, og, K, *out), ct))
    table = np.array(list(itertools.product(*(range(k) for k in kernel))))  # (K, n)
    pos = []
    for i in range(n):
        grid_i = (np.arange(out[i]) * s[i] - p[i]).reshape([-1] + [1] * (n - 1 - i))
        kern_i = (table[:, i] * d[i]).reshape([K] + [1] * n)
        pos.append(grid_i[None] + kern_i + off[:, :, :, i])  # (N, og, K, *out)
    flat = xc.reshape(N, og, Cog, -1)
    cols = np.zeros((N, og, Cog, K, *out), ct)
    base = [np.floor(q) for q in pos]
    nidx = np.arange(N).reshape(N, 1, 1, *([1] * n))
    gidx = np.arange(og).reshape(1, og, 1, *([1] * n))
    for corner in itertools.product((0, 1), repeat=n):
        wgt = np.ones(pos[0].shape)
        valid = np.ones(pos[0].shape, bool)
        lin = np.zeros(pos[0].shape, np.int64)
        for i, bit in enumerate(corner):
            ix = base[i].astype(np.int64) + bit
            frac = pos[i] - base[i]
            wgt = wgt * (frac if bit else 1 - frac)
            valid &= (ix >= 0) & (ix < dims[i])
            lin = lin * dims[i] + np.clip(ix, 0, dims[i] - 1)
        vals = flat[nidx, gidx, :, lin]  # (N, og, K, *out, Cog)
        vals = np.moveaxis(vals, -1, 2)  # (N, og, Cog, K, *out)
        cols += vals * np.expand_dims((wgt * valid).astype(ct), 2)
    cols *= np.expand_dims(msk, 2)
    G = group
    Cg, M = C // G, w.shape[0]
    cols = cols.reshape(N, G, Cg * K, math.prod(out))
    y = np.matmul(w.astype(ct).reshape(G, M // G, Cg * K), cols).reshape(N, M, *out)
    if b is not None:
        y += channel_view(b.astype(ct), y.ndim)
    return y.astype(x.dtype, copy=False)


__all__ = ["conv_nd", "conv_transpose_output_shape", "im2col"]
