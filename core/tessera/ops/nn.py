"""Ops: neural-network family: convolutions, pooling, normalizations, softmax, matrix products,
losses and sampling ops.

Spatial ops keep ONNX's NC[D]HW layout and attribute names, but in the IR every padding is
explicit: ``auto_pad`` is resolved into ``pads`` by the ONNX converter (see
:func:`resolve_auto_pad`), and ``ConvTranspose``'s ``output_shape`` is folded into ``pads`` and
``output_padding``. ``None`` for ``strides``/``dilations``/``pads``/``kernel_shape`` means the ONNX
default (ones, zeros, the weight's spatial shape); :func:`spatial_params` fills them in.

The references are vectorized numpy: convolutions use im2col (a strided window view copied once)
followed by one batched matrix product per call; pools loop over the kernel offsets only (each
step is one whole-tensor numpy operation). float16 inputs are computed in float32 and cast back
(except the softmax family, computed in float16 like ONNX's reference); float32 is computed in
float32.
"""

from __future__ import annotations

import itertools
import math
import string
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tessera.errors import OpError
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import Attr, OpPattern, normalize_axis, register_op

FUSABLE = OpPattern.OUT_ELEMWISE_FUSABLE
REDUCE = OpPattern.COMM_REDUCE
OPAQUE = OpPattern.OPAQUE
INJECTIVE = OpPattern.INJECTIVE


# -- shared helpers ------------------------------------------------------------------------------

def compute_dtype(dtype: np.dtype | DType) -> np.dtype:
    """The dtype arithmetic is done in for inputs of ``dtype`` (float16 -> float32)."""
    dt = np.dtype(dtype.numpy if isinstance(dtype, DType) else dtype)
    return np.dtype(np.float32) if dt == np.float16 else dt


def _fc(x: np.ndarray) -> np.ndarray:
    """``x`` in its compute dtype (no copy when it already is)."""
    return x.astype(compute_dtype(x.dtype), copy=False)


def _check_float(t: TensorType, op: str, what: str = "input") -> None:
    if not t.dtype.is_float:
        raise OpError(f"{op}: {what} must be a float tensor, got {t}")


def spatial_params(n: int, kernel_shape: Sequence[int] | None, strides: Sequence[int] | None,
                   pads: Sequence[int] | None, dilations: Sequence[int] | None,
                   op: str = "op") -> tuple[list[int], list[int], list[int], list[int]]:
    """Fill ONNX defaults for ``n`` spatial dims and check lengths.

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


def pool_output_shape(in_spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                      pads: Sequence[int], dilations: Sequence[int], ceil_mode: int,
                      op: str = "Pool") -> list[int]:
    """Spatial output size of a pool (``ceil_mode``: windows starting in the end pad dropped)."""
    if not ceil_mode:
        return conv_output_shape(in_spatial, kernel, strides, pads, dilations, op)
    n = len(in_spatial)
    out = []
    for i in range(n):
        span = (kernel[i] - 1) * dilations[i] + 1
        num = in_spatial[i] + pads[i] + pads[i + n] - span
        o = -(-num // strides[i]) + 1
        if (o - 1) * strides[i] >= in_spatial[i] + pads[i]:
            o -= 1
        if o <= 0:
            raise OpError(f"{op}: spatial input {list(in_spatial)} with kernel {list(kernel)} "
                          f"and pads {list(pads)} gives an empty output")
        out.append(o)
    return out


def _pad_spatial(x: np.ndarray, begin: Sequence[int], end: Sequence[int],
                 value: Any = 0) -> np.ndarray:
    """Pad the trailing ``len(begin)`` axes (no copy when nothing is padded)."""
    if not any(begin) and not any(end):
        return x
    lead = [(0, 0)] * (x.ndim - len(begin))
    return np.pad(x, lead + list(zip(begin, end)), constant_values=value)


def _kernel_slices(kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                   out: Sequence[int]):
    """For every kernel offset: (offsets, index tuple selecting the window elements at that
    offset for every output position from a padded tensor)."""
    for offs in itertools.product(*(range(k) for k in kernel)):
        idx = tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                    for o, d, s, n in zip(offs, dilations, strides, out))
        yield offs, (Ellipsis, *idx)


def _window_sum(xp: np.ndarray, kernel: Sequence[int], strides: Sequence[int],
                dilations: Sequence[int], out: Sequence[int]) -> np.ndarray:
    """The sum of every window over the trailing spatial axes of ``xp`` (already padded), of
    shape ``(*lead, *out)`` and ``xp``'s dtype, accumulated one kernel offset at a time."""
    acc = np.zeros((*xp.shape[:xp.ndim - len(kernel)], *out), xp.dtype)
    for _, idx in _kernel_slices(kernel, strides, dilations, out):
        acc += xp[idx]
    return acc


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
    xp = _pad_spatial(x, pads[:n], pads[n:], pad_value)
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
    for offs, idx in _kernel_slices(kernel, strides, dilations, blocks):
        y[idx] += cols[(slice(None), slice(None), *offs)]
    return y


def _crop_spatial(y: np.ndarray, begin: Sequence[int], end: Sequence[int]) -> np.ndarray:
    """Remove ``begin``/``end`` elements from the trailing axes (negative amounts add zeros)."""
    n = len(begin)
    if any(v < 0 for v in (*begin, *end)):
        y = _pad_spatial(y, [max(0, -b) for b in begin], [max(0, -e) for e in end])
        begin = [max(0, b) for b in begin]
        end = [max(0, e) for e in end]
    idx = tuple(slice(b, y.shape[-n + i] - e) for i, (b, e) in enumerate(zip(begin, end)))
    return y[(Ellipsis, *idx)]


def _channel_view(p: np.ndarray, ndim: int) -> np.ndarray:
    """A per-channel parameter of shape (C,) reshaped to broadcast against (N, C, ...)."""
    return p.reshape(-1, *([1] * (ndim - 2)))


def _need_rank(t: TensorType, lo: int, op: str, what: str = "input") -> None:
    if t.ndim < lo:
        raise OpError(f"{op}: {what} must have rank >= {lo}, got {t}")


# -- Conv ----------------------------------------------------------------------------------------

_CONV_ATTRS = {
    "kernel_shape": Attr.ints(None),
    "strides": Attr.ints(None),
    "pads": Attr.ints(None),
    "dilations": Attr.ints(None),
    "group": Attr.int(1),
}


def _conv_infer(x: TensorType, w: TensorType, b: TensorType | None = None, *,
                kernel_shape: list[int] | None, strides: list[int] | None,
                pads: list[int] | None, dilations: list[int] | None, group: int,
                op: str = "Conv") -> TensorType:
    _need_rank(x, 3, op)
    if w.ndim != x.ndim:
        raise OpError(f"{op}: weight {w} must have the input's rank {x.ndim}")
    n = x.ndim - 2
    kernel, s, p, d = spatial_params(n, kernel_shape, strides, pads, dilations, op)
    if kernel and list(kernel) != list(w.shape[2:]):
        raise OpError(f"{op}: kernel_shape {kernel} does not match weight {w}")
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
    _check_float(x, "Conv")
    return _conv_infer(x, w, b, **attrs)


@register_op("Conv", attrs=_CONV_ATTRS, inputs=(2, 3), infer=_conv_infer_float, pattern=FUSABLE)
def conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
         kernel_shape: list[int] | None, strides: list[int] | None, pads: list[int] | None,
         dilations: list[int] | None, group: int) -> np.ndarray:
    """N-d grouped convolution (cross-correlation) with explicit pads."""
    _, s, p, d = spatial_params(x.ndim - 2, kernel_shape, strides, pads, dilations, "Conv")
    ct = compute_dtype(x.dtype)
    y = conv_nd(x.astype(ct, copy=False), w.astype(ct, copy=False), group, s, p, d)
    if b is not None:
        y += _channel_view(b.astype(ct, copy=False), y.ndim)
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
    _check_float(x, op)
    _need_rank(x, 3, op)
    if w.ndim != x.ndim:
        raise OpError(f"{op}: weight {w} must have the input's rank {x.ndim}")
    n = x.ndim - 2
    kernel, s, p, d = spatial_params(n, kernel_shape, strides, pads, dilations, op)
    if kernel and list(kernel) != list(w.shape[2:]):
        raise OpError(f"{op}: kernel_shape {kernel} does not match weight {w}")
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


@register_op("ConvTranspose", attrs={**_CONV_ATTRS, "output_padding": Attr.ints(None)},
             inputs=(2, 3), infer=_conv_transpose_infer, pattern=FUSABLE)
def conv_transpose(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
                   kernel_shape: list[int] | None, strides: list[int] | None,
                   pads: list[int] | None, dilations: list[int] | None, group: int,
                   output_padding: list[int] | None) -> np.ndarray:
    """N-d grouped transposed convolution: one matmul to columns, then col2im and a crop."""
    n = x.ndim - 2
    _, s, p, d = spatial_params(n, kernel_shape, strides, pads, dilations, "ConvTranspose")
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
        y = y + _channel_view(b.astype(ct, copy=False), y.ndim)
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
    cols = _fc(x).reshape(N, C, *block_shape, *blocks)
    full = [image_shape[i] + p[i] + p[i + n] for i in range(n)]
    y = _col2im(cols, full, s, d, cols.dtype)
    return np.ascontiguousarray(_crop_spatial(y, p[:n], p[n:])).astype(x.dtype, copy=False)


# -- pooling -------------------------------------------------------------------------------------

_POOL_ATTRS = {
    "kernel_shape": Attr.ints(),
    "strides": Attr.ints(None),
    "pads": Attr.ints(None),
    "dilations": Attr.ints(None),
    "ceil_mode": Attr.int(0),
}


def _pool_geometry(x_shape: Sequence[int], kernel_shape: list[int], strides: list[int] | None,
                   pads: list[int] | None, dilations: list[int] | None, ceil_mode: int,
                   op: str) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """(kernel, strides, dilations, output size, pads actually applied [b.., e..]); the applied
    end pads are enlarged so the last (ceil_mode) window fits."""
    n = len(x_shape) - 2
    kernel, s, p, d = spatial_params(n, kernel_shape, strides, pads, dilations, op)
    out = pool_output_shape(x_shape[2:], kernel, s, p, d, ceil_mode, op)
    end = []
    for i in range(n):
        need = (out[i] - 1) * s[i] + (kernel[i] - 1) * d[i] + 1 - x_shape[2 + i] - p[i]
        end.append(max(p[i + n], need))
    return kernel, s, d, out, p[:n] + end


def _pool_infer(x: TensorType, *, kernel_shape: list[int], strides: list[int] | None,
                pads: list[int] | None, dilations: list[int] | None, ceil_mode: int,
                op: str = "Pool", **_: Any) -> TensorType:
    _need_rank(x, 3, op)
    _, _, _, out, _ = _pool_geometry(x.shape, kernel_shape, strides, pads, dilations, ceil_mode,
                                     op)
    return TensorType((*x.shape[:2], *out), x.dtype)


def _max_pool_infer(x: TensorType, **attrs: Any) -> tuple[TensorType, TensorType]:
    y = _pool_infer(x, op="MaxPool", **attrs)
    return y, y.with_dtype(DType.int64)


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


@register_op("MaxPool", attrs={**_POOL_ATTRS, "storage_order": Attr.int(0)},
             infer=_max_pool_infer, pattern=OPAQUE)
def max_pool(x: np.ndarray, *, kernel_shape: list[int], strides: list[int] | None,
             pads: list[int] | None, dilations: list[int] | None, ceil_mode: int,
             storage_order: int) -> tuple[np.ndarray, np.ndarray]:
    """Max pooling; also returns ``Indices`` (int64 flat indices into the unpadded input,
    row-major, or column-major over the spatial dims when ``storage_order`` is 1)."""
    n = x.ndim - 2
    kernel, s, d, out, pp = _pool_geometry(x.shape, kernel_shape, strides, pads, dilations,
                                           ceil_mode, "MaxPool")
    xp = _pad_spatial(x, pp[:n], pp[n:], _lowest(x.dtype))
    y: np.ndarray | None = None
    arg = np.zeros((*x.shape[:2], *out), np.int64)
    for k, (_, idx) in enumerate(_kernel_slices(kernel, s, d, out)):
        window = xp[idx]
        if y is None:
            y = window.copy()
            continue
        better = window > y
        np.copyto(y, window, where=better)
        np.putmask(arg, better, k)
    assert y is not None
    # Indices: decode the kernel offset of the winner into input coordinates.
    table = np.array(list(itertools.product(*(range(k) for k in kernel))), np.int64)
    in_sp = x.shape[2:]
    coords = []
    for i in range(n):
        pos = np.arange(out[i], dtype=np.int64).reshape([-1] + [1] * (n - 1 - i)) * s[i] - pp[i]
        coords.append(pos + table[arg, i] * d[i])
    order = range(n) if not storage_order else reversed(range(n))
    flat = np.zeros_like(arg)
    for i in order:
        flat = flat * in_sp[i] + coords[i]
    base = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(
        x.shape[0], x.shape[1], *([1] * n)) * math.prod(in_sp)
    return y, flat + base


def _avg_divisor(x_spatial: Sequence[int], kernel: list[int], s: list[int], d: list[int],
                 out: list[int], pp: list[int], pads: list[int] | None,
                 count_include_pad: int) -> np.ndarray:
    """How many elements each window averages over (spatial shape ``out``)."""
    n = len(x_spatial)
    p = list(pads) if pads else [0] * (2 * n)
    padded = [x_spatial[i] + pp[i] + pp[i + n] for i in range(n)]
    ones = np.zeros(padded, np.float32)
    if count_include_pad:  # count the declared pads, not the extra room for ceil_mode
        region = tuple(slice(pp[i] - p[i], pp[i] + x_spatial[i] + p[i + n]) for i in range(n))
    else:
        region = tuple(slice(pp[i], pp[i] + x_spatial[i]) for i in range(n))
    ones[region] = 1
    return _window_sum(ones, kernel, s, d, out)


@register_op("AveragePool", attrs={**_POOL_ATTRS, "count_include_pad": Attr.int(0)},
             infer=lambda x, **a: _pool_infer(x, op="AveragePool", **a), pattern=OPAQUE)
def average_pool(x: np.ndarray, *, kernel_shape: list[int], strides: list[int] | None,
                 pads: list[int] | None, dilations: list[int] | None, ceil_mode: int,
                 count_include_pad: int) -> np.ndarray:
    """Average pooling; padding is excluded from the divisor unless ``count_include_pad``."""
    n = x.ndim - 2
    kernel, s, d, out, pp = _pool_geometry(x.shape, kernel_shape, strides, pads, dilations,
                                           ceil_mode, "AveragePool")
    acc = _window_sum(_pad_spatial(_fc(x), pp[:n], pp[n:], 0), kernel, s, d, out)
    count = _avg_divisor(x.shape[2:], kernel, s, d, out, pp, pads, count_include_pad)
    acc /= count.astype(acc.dtype)
    return acc.astype(x.dtype, copy=False)


@register_op("LpPool", attrs={**_POOL_ATTRS, "p": Attr.int(2)},
             infer=lambda x, **a: _pool_infer(x, op="LpPool", **a), pattern=OPAQUE)
def lp_pool(x: np.ndarray, *, kernel_shape: list[int], strides: list[int] | None,
            pads: list[int] | None, dilations: list[int] | None, ceil_mode: int,
            p: int) -> np.ndarray:
    """Lp pooling: ``(sum |x|^p)^(1/p)`` over each window (padding contributes zeros)."""
    n = x.ndim - 2
    kernel, s, d, out, pp = _pool_geometry(x.shape, kernel_shape, strides, pads, dilations,
                                           ceil_mode, "LpPool")
    xp = np.abs(_pad_spatial(_fc(x), pp[:n], pp[n:], 0))
    xp = xp * xp if p == 2 else np.power(xp, p)
    acc = _window_sum(xp, kernel, s, d, out)
    y = np.sqrt(acc) if p == 2 else np.power(acc, 1.0 / p)
    return y.astype(x.dtype, copy=False)


def _global_infer(x: TensorType, **_: Any) -> TensorType:
    _need_rank(x, 3, "global pool")
    return TensorType((*x.shape[:2], *([1] * (x.ndim - 2))), x.dtype)


@register_op("GlobalAveragePool", infer=_global_infer, pattern=REDUCE)
def global_average_pool(x: np.ndarray) -> np.ndarray:
    """Mean over all spatial dims (kept as size 1)."""
    axes = tuple(range(2, x.ndim))
    return np.mean(_fc(x), axis=axes, keepdims=True).astype(x.dtype, copy=False)


@register_op("GlobalMaxPool", infer=_global_infer, pattern=REDUCE)
def global_max_pool(x: np.ndarray) -> np.ndarray:
    """Max over all spatial dims (kept as size 1)."""
    return np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)


@register_op("GlobalLpPool", attrs={"p": Attr.int(2)}, infer=_global_infer, pattern=REDUCE)
def global_lp_pool(x: np.ndarray, *, p: int) -> np.ndarray:
    """``(sum |x|^p)^(1/p)`` over all spatial dims (kept as size 1)."""
    axes = tuple(range(2, x.ndim))
    acc = np.sum(np.power(np.abs(_fc(x)), p), axis=axes, keepdims=True)
    return np.power(acc, 1.0 / p).astype(x.dtype, copy=False)


def _max_unpool_infer(x: TensorType, i: TensorType, *, kernel_shape: list[int],
                      strides: list[int] | None, pads: list[int] | None,
                      output_shape: list[int] | None) -> TensorType:
    op = "MaxUnpool"
    _need_rank(x, 3, op)
    if i.shape != x.shape or not i.dtype.is_int:
        raise OpError(f"{op}: indices {i} must be int64 shaped like the input {x}")
    if output_shape is not None:
        if len(output_shape) != x.ndim or list(output_shape[:2]) != list(x.shape[:2]):
            raise OpError(f"{op}: output_shape {output_shape} does not fit input {x}")
        return TensorType(tuple(output_shape), x.dtype)
    n = x.ndim - 2
    kernel, s, p, _ = spatial_params(n, kernel_shape, strides, pads, None, op)
    out = [(x.shape[2 + k] - 1) * s[k] + kernel[k] - p[k] - p[k + n] for k in range(n)]
    return TensorType((*x.shape[:2], *out), x.dtype)


@register_op("MaxUnpool", attrs={"kernel_shape": Attr.ints(), "strides": Attr.ints(None),
                                 "pads": Attr.ints(None), "output_shape": Attr.ints(None)},
             inputs=2, infer=_max_unpool_infer, pattern=OPAQUE)
def max_unpool(x: np.ndarray, indices: np.ndarray, *, kernel_shape: list[int],
               strides: list[int] | None, pads: list[int] | None,
               output_shape: list[int] | None) -> np.ndarray:
    """Scatter ``x`` to the flat ``indices`` of a zero tensor (``output_shape`` is ONNX's
    optional input 2, made an attribute)."""
    t = _max_unpool_infer(TensorType.of(x), TensorType.of(indices), kernel_shape=kernel_shape,
                          strides=strides, pads=pads, output_shape=output_shape)
    y = np.zeros(t.size, x.dtype)
    y[indices.reshape(-1)] = x.reshape(-1)
    return y.reshape(t.shape)


# -- normalizations ------------------------------------------------------------------------------

def _param_view(p: np.ndarray, ndim: int) -> np.ndarray:
    """A BatchNormalization parameter: (C,) per channel; (C, D1, ...) per activation (opset < 9
    ``spatial=0``)."""
    if p.ndim <= 1:
        return _channel_view(p, ndim)
    return p.reshape(1, *p.shape)


def _batch_norm_infer(x: TensorType, scale: TensorType, b: TensorType, mean: TensorType,
                      var: TensorType, *, epsilon: float, momentum: float,
                      training_mode: int) -> TensorType | tuple[TensorType, ...]:
    op = "BatchNormalization"
    _check_float(x, op)
    _need_rank(x, 2, op)
    c = x.shape[1]
    for name, t in (("scale", scale), ("B", b), ("mean", mean), ("var", var)):
        if not t.shape or t.shape[0] != c:
            raise OpError(f"{op}: {name} {t} must have {c} channels")
    if training_mode:
        return x, mean, var
    return x


@register_op("BatchNormalization",
             attrs={"epsilon": Attr.float(1e-5), "momentum": Attr.float(0.9),
                    "training_mode": Attr.int(0)},
             inputs=5, infer=_batch_norm_infer, pattern=OPAQUE)
def batch_normalization(x: np.ndarray, scale: np.ndarray, b: np.ndarray, mean: np.ndarray,
                        var: np.ndarray, *, epsilon: float, momentum: float,
                        training_mode: int) -> np.ndarray | tuple[np.ndarray, ...]:
    """``(x - mean) / sqrt(var + epsilon) * scale + B`` per channel.

    With ``training_mode`` the batch's statistics are used and the updated running mean and
    variance (``running * momentum + batch * (1 - momentum)``) are returned too.
    """
    ct = compute_dtype(x.dtype)
    xc = x.astype(ct, copy=False)
    sc, bc = scale.astype(ct), b.astype(ct)
    if training_mode:
        axes = (0, *range(2, x.ndim))
        bm = xc.mean(axis=axes)
        bv = xc.var(axis=axes)
        a = sc / np.sqrt(bv + ct.type(epsilon))
        shift = bc - bm * a
        y = xc * _param_view(a, x.ndim) + _param_view(shift, x.ndim)
        rm = mean.astype(ct) * ct.type(momentum) + bm * ct.type(1 - momentum)
        rv = var.astype(ct) * ct.type(momentum) + bv * ct.type(1 - momentum)
        return (y.astype(x.dtype, copy=False), rm.astype(mean.dtype), rv.astype(var.dtype))
    a = sc / np.sqrt(var.astype(ct) + ct.type(epsilon))
    shift = bc - mean.astype(ct) * a
    y = xc * _param_view(a, x.ndim)
    y += _param_view(shift, x.ndim)
    return y.astype(x.dtype, copy=False)


def _instance_norm_infer(x: TensorType, scale: TensorType, b: TensorType, *,
                         epsilon: float) -> TensorType:
    op = "InstanceNormalization"
    _check_float(x, op)
    _need_rank(x, 3, op)
    for name, t in (("scale", scale), ("B", b)):
        if t.shape != (x.shape[1],):
            raise OpError(f"{op}: {name} {t} must have shape [{x.shape[1]}]")
    return x


@register_op("InstanceNormalization", attrs={"epsilon": Attr.float(1e-5)}, inputs=3,
             infer=_instance_norm_infer, pattern=OPAQUE)
def instance_normalization(x: np.ndarray, scale: np.ndarray, b: np.ndarray, *,
                           epsilon: float) -> np.ndarray:
    """Normalize each (sample, channel) over its spatial dims, then scale and shift."""
    ct = compute_dtype(x.dtype)
    xc = x.astype(ct, copy=False)
    axes = tuple(range(2, x.ndim))
    mean = xc.mean(axis=axes, keepdims=True)
    var = np.square(xc - mean).mean(axis=axes, keepdims=True)
    y = (xc - mean) / np.sqrt(var + ct.type(epsilon))
    y = y * _channel_view(scale.astype(ct), x.ndim) + _channel_view(b.astype(ct), x.ndim)
    return y.astype(x.dtype, copy=False)


def _stash(x_dtype: DType, stash_type: DType | None) -> DType:
    if stash_type is None:
        return x_dtype
    return stash_type


def _layer_norm_infer(x: TensorType, scale: TensorType, b: TensorType | None = None, *,
                      axis: int, epsilon: float,
                      stash_type: DType | None) -> tuple[TensorType, TensorType, TensorType]:
    op = "LayerNormalization"
    _check_float(x, op)
    a = normalize_axis(axis, x.ndim, op)
    norm_shape = x.shape[a:]
    for name, t in (("Scale", scale), ("B", b)):
        if t is not None:
            try:
                np.broadcast_shapes(t.shape, norm_shape)
            except ValueError:
                raise OpError(f"{op}: {name} {t} does not broadcast to the normalized shape "
                              f"{list(norm_shape)}") from None
    stat = TensorType((*x.shape[:a], *([1] * (x.ndim - a))), _stash(x.dtype, stash_type))
    return x, stat, stat


@register_op("LayerNormalization",
             attrs={"axis": Attr.int(-1), "epsilon": Attr.float(1e-5),
                    "stash_type": Attr.dtype(DType.float32)},
             inputs=(2, 3), infer=_layer_norm_infer, pattern=OPAQUE)
def layer_normalization(x: np.ndarray, scale: np.ndarray, b: np.ndarray | None = None, *,
                        axis: int, epsilon: float,
                        stash_type: DType | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normalize over axes ``[axis, rank)``; returns ``(Y, Mean, InvStdDev)``."""
    st = _stash(DType.from_numpy(x.dtype), stash_type)
    ct = compute_dtype(st.numpy) if st.is_float else compute_dtype(x.dtype)
    a = normalize_axis(axis, x.ndim)
    axes = tuple(range(a, x.ndim))
    xc = x.astype(ct, copy=False)
    mean = xc.mean(axis=axes, keepdims=True)
    diff = xc - mean
    var = np.mean(diff * diff, axis=axes, keepdims=True)
    inv = 1 / np.sqrt(var + ct.type(epsilon))
    y = diff * inv * scale.astype(ct, copy=False)
    if b is not None:
        y = y + b.astype(ct, copy=False)
    return (y.astype(x.dtype, copy=False), mean.astype(st.numpy, copy=False),
            inv.astype(st.numpy, copy=False))


def _group_norm_infer(x: TensorType, scale: TensorType, b: TensorType, *, num_groups: int,
                      epsilon: float, stash_type: DType | None) -> TensorType:
    op = "GroupNormalization"
    _check_float(x, op)
    _need_rank(x, 2, op)
    c = x.shape[1]
    if num_groups <= 0 or c % num_groups:
        raise OpError(f"{op}: num_groups {num_groups} must divide the {c} channels")
    for name, t in (("scale", scale), ("bias", b)):
        if t.shape not in ((c,), (num_groups,)):
            raise OpError(f"{op}: {name} {t} must have shape [{c}] (or [{num_groups}])")
    return x


@register_op("GroupNormalization",
             attrs={"num_groups": Attr.int(), "epsilon": Attr.float(1e-5),
                    "stash_type": Attr.dtype(DType.float32)},
             inputs=3, infer=_group_norm_infer, pattern=OPAQUE)
def group_normalization(x: np.ndarray, scale: np.ndarray, b: np.ndarray, *, num_groups: int,
                        epsilon: float, stash_type: DType | None) -> np.ndarray:
    """Normalize each group of channels of each sample; ``scale``/``bias`` are per channel
    (a length-``num_groups`` vector, opset 18's form, is repeated per group)."""
    st = _stash(DType.from_numpy(x.dtype), stash_type)
    ct = compute_dtype(st.numpy)
    n, c = x.shape[:2]
    xg = x.astype(ct, copy=False).reshape(n, num_groups, -1)
    mean = xg.mean(axis=2, keepdims=True)
    var = np.square(xg - mean).mean(axis=2, keepdims=True)
    y = ((xg - mean) / np.sqrt(var + ct.type(epsilon))).reshape(x.shape)
    sc, bc = scale.astype(ct), b.astype(ct)
    if sc.shape[0] != c:
        sc = np.repeat(sc, c // num_groups)
    if bc.shape[0] != c:
        bc = np.repeat(bc, c // num_groups)
    y = y * _channel_view(sc, x.ndim) + _channel_view(bc, x.ndim)
    return y.astype(x.dtype, copy=False)


def _rms_norm_infer(x: TensorType, scale: TensorType, *, axis: int, epsilon: float,
                    stash_type: DType | None) -> TensorType:
    op = "RMSNormalization"
    _check_float(x, op)
    a = normalize_axis(axis, x.ndim, op)
    try:
        np.broadcast_shapes(scale.shape, x.shape[a:])
    except ValueError:
        raise OpError(f"{op}: scale {scale} does not broadcast to the normalized shape "
                      f"{list(x.shape[a:])}") from None
    return x


@register_op("RMSNormalization",
             attrs={"axis": Attr.int(-1), "epsilon": Attr.float(1e-5),
                    "stash_type": Attr.dtype(DType.float32)},
             inputs=2, infer=_rms_norm_infer, pattern=OPAQUE)
def rms_normalization(x: np.ndarray, scale: np.ndarray, *, axis: int, epsilon: float,
                      stash_type: DType | None) -> np.ndarray:
    """``x / sqrt(mean(x^2 over [axis, rank)) + epsilon) * scale``."""
    st = _stash(DType.from_numpy(x.dtype), stash_type)
    ct = compute_dtype(st.numpy)
    a = normalize_axis(axis, x.ndim)
    xc = x.astype(ct, copy=False)
    ms = np.mean(xc * xc, axis=tuple(range(a, x.ndim)), keepdims=True)
    y = xc / np.sqrt(ms + ct.type(epsilon)) * scale.astype(ct, copy=False)
    return y.astype(x.dtype, copy=False)


def _lrn_infer(x: TensorType, **_: Any) -> TensorType:
    _check_float(x, "LRN")
    _need_rank(x, 3, "LRN")
    return x


@register_op("LRN", attrs={"size": Attr.int(), "alpha": Attr.float(1e-4),
                           "beta": Attr.float(0.75), "bias": Attr.float(1.0)},
             infer=_lrn_infer, pattern=OPAQUE)
def lrn(x: np.ndarray, *, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """Local response normalization across channels."""
    xc = _fc(x)
    sq = xc * xc
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded = np.pad(sq, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    c = x.shape[1]
    acc = np.zeros_like(sq)
    for k in range(size):
        acc += padded[:, k:k + c]
    y = xc / np.power(xc.dtype.type(bias) + xc.dtype.type(alpha / size) * acc, beta)
    return y.astype(x.dtype, copy=False)


def _mvn_infer(x: TensorType, *, axes: list[int]) -> TensorType:
    _check_float(x, "MeanVarianceNormalization")
    for a in axes:
        normalize_axis(a, x.ndim, "MeanVarianceNormalization")
    return x


@register_op("MeanVarianceNormalization", attrs={"axes": Attr.ints([0, 2, 3])},
             infer=_mvn_infer, pattern=OPAQUE)
def mean_variance_normalization(x: np.ndarray, *, axes: list[int]) -> np.ndarray:
    """``(x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9)`` over ``axes``."""
    xc = _fc(x)
    ax = tuple(sorted({normalize_axis(a, x.ndim) for a in axes}))
    mean = xc.mean(axis=ax, keepdims=True)
    var = np.mean(xc * xc, axis=ax, keepdims=True) - mean * mean
    y = (xc - mean) / (np.sqrt(np.maximum(var, 0)) + xc.dtype.type(1e-9))
    return y.astype(x.dtype, copy=False)


def _lp_norm_infer(x: TensorType, *, axis: int, p: int) -> TensorType:
    _check_float(x, "LpNormalization")
    normalize_axis(axis, x.ndim, "LpNormalization")
    if p not in (1, 2):
        raise OpError(f"LpNormalization: p must be 1 or 2, got {p}")
    return x


@register_op("LpNormalization", attrs={"axis": Attr.int(-1), "p": Attr.int(2)},
             infer=_lp_norm_infer, pattern=OPAQUE)
def lp_normalization(x: np.ndarray, *, axis: int, p: int) -> np.ndarray:
    """``x / ||x||_p`` along ``axis`` (p is 1 or 2); 0 where the norm is 0."""
    xc = _fc(x)
    a = normalize_axis(axis, x.ndim)
    if p == 1:
        norm = np.sum(np.abs(xc), axis=a, keepdims=True)
    else:
        norm = np.sqrt(np.sum(xc * xc, axis=a, keepdims=True))
    y = np.where(norm == 0, 0, xc / np.where(norm == 0, 1, norm))
    return y.astype(x.dtype, copy=False)


# -- softmax family ------------------------------------------------------------------------------

def _softmax_infer(x: TensorType, *, axis: int) -> TensorType:
    _check_float(x, "Softmax")
    normalize_axis(axis, x.ndim, "Softmax")
    return x


@register_op("Softmax", attrs={"axis": Attr.int(-1)}, infer=_softmax_infer, pattern=OPAQUE)
def softmax(x: np.ndarray, *, axis: int) -> np.ndarray:
    """``exp(x) / sum(exp(x))`` along one axis (opset >= 13 semantics).

    float16 is computed in float16 (each numpy step rounded to float16), like ONNX's reference.
    """
    xc = x
    a = normalize_axis(axis, x.ndim)
    e = np.exp(xc - np.max(xc, axis=a, keepdims=True))
    e /= np.sum(e, axis=a, keepdims=True)
    return e.astype(x.dtype, copy=False)


@register_op("LogSoftmax", attrs={"axis": Attr.int(-1)}, infer=_softmax_infer, pattern=OPAQUE)
def log_softmax(x: np.ndarray, *, axis: int) -> np.ndarray:
    """``x - log(sum(exp(x)))`` along one axis (opset >= 13 semantics); float16 in float16."""
    xc = x
    a = normalize_axis(axis, x.ndim)
    shifted = xc - np.max(xc, axis=a, keepdims=True)
    y = shifted - np.log(np.sum(np.exp(shifted), axis=a, keepdims=True))
    return y.astype(x.dtype, copy=False)


@register_op("Hardmax", attrs={"axis": Attr.int(-1)}, infer=_softmax_infer, pattern=OPAQUE)
def hardmax(x: np.ndarray, *, axis: int) -> np.ndarray:
    """1 at the first maximum along one axis, 0 elsewhere (opset >= 13 semantics)."""
    a = normalize_axis(axis, x.ndim)
    idx = np.expand_dims(np.argmax(x, axis=a), a)
    y = np.zeros_like(x)
    np.put_along_axis(y, idx, 1, axis=a)
    return y


# -- matrix products -----------------------------------------------------------------------------

def matmul_shape(a: Sequence[int], b: Sequence[int], op: str = "MatMul") -> tuple[int, ...]:
    """numpy.matmul's output shape, with an error naming both shapes."""
    if not a or not b:
        raise OpError(f"{op}: operands must have rank >= 1, got {list(a)} and {list(b)}")
    a2 = (1, a[0]) if len(a) == 1 else tuple(a)
    b2 = (b[0], 1) if len(b) == 1 else tuple(b)
    if a2[-1] != b2[-2]:
        raise OpError(f"{op}: inner dimensions differ: {list(a)} @ {list(b)}")
    try:
        batch = np.broadcast_shapes(a2[:-2], b2[:-2])
    except ValueError:
        raise OpError(f"{op}: batch dimensions of {list(a)} and {list(b)} do not "
                      f"broadcast") from None
    out = (*batch, a2[-2], b2[-1])
    if len(b) == 1:
        out = out[:-1]
    if len(a) == 1:
        out = out[:-2] + out[-1:] if len(b) != 1 else out[:-1]
    return tuple(out)


def _matmul_infer(a: TensorType, b: TensorType) -> TensorType:
    if a.dtype != b.dtype:
        raise OpError(f"MatMul: operand dtypes differ: {a} and {b}")
    return TensorType(matmul_shape(a.shape, b.shape), a.dtype)


def _matmul_compute(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ct = compute_dtype(a.dtype)
    return np.matmul(a.astype(ct, copy=False), b.astype(ct, copy=False))


@register_op("MatMul", inputs=2, infer=_matmul_infer, pattern=FUSABLE)
def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy.matmul semantics (batch broadcasting, 1-D operands promoted and squeezed)."""
    return np.asarray(_matmul_compute(a, b)).astype(a.dtype, copy=False)


def _gemm_infer(a: TensorType, b: TensorType, c: TensorType | None = None, *, alpha: float,
                beta: float, transA: int, transB: int) -> TensorType:
    op = "Gemm"
    if a.ndim != 2 or b.ndim != 2:
        raise OpError(f"{op}: A and B must be matrices, got {a} and {b}")
    m, k = a.shape[::-1] if transA else a.shape
    k2, n = b.shape[::-1] if transB else b.shape
    if k != k2:
        raise OpError(f"{op}: inner dimensions differ: A {a} (transA={transA}), B {b} "
                      f"(transB={transB})")
    if c is not None:
        try:
            if np.broadcast_shapes(c.shape, (m, n)) != (m, n):
                raise ValueError
        except ValueError:
            raise OpError(f"{op}: C {c} does not broadcast to [{m}, {n}]") from None
    return TensorType((m, n), a.dtype)


@register_op("Gemm", attrs={"alpha": Attr.float(1.0), "beta": Attr.float(1.0),
                            "transA": Attr.int(0), "transB": Attr.int(0)},
             inputs=(2, 3), infer=_gemm_infer, pattern=FUSABLE)
def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None, *, alpha: float,
         beta: float, transA: int, transB: int) -> np.ndarray:
    """``alpha * op(A) @ op(B) + beta * C`` (C broadcast; optional)."""
    ct = compute_dtype(a.dtype)
    am = a.astype(ct, copy=False)
    bm = b.astype(ct, copy=False)
    y = np.matmul(am.T if transA else am, bm.T if transB else bm)
    if alpha != 1.0:
        y = y * ct.type(alpha) if ct.kind == "f" else (y * alpha).astype(ct)
    if c is not None and beta != 0.0:
        cc = c.astype(ct, copy=False)
        if beta != 1.0:
            cc = cc * ct.type(beta) if ct.kind == "f" else (cc * beta).astype(ct)
        y = y + cc
    return np.asarray(y).astype(a.dtype, copy=False)


# -- Einsum --------------------------------------------------------------------------------------

def _einsum_parse(equation: str, shapes: Sequence[Sequence[int]]) -> tuple[str, list[str], str]:
    """Normalize an einsum equation: ellipses replaced by unused letters, the implicit output
    made explicit. Returns (equation, input terms, output term)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise OpError(f"Einsum: equation {equation!r} has {len(terms)} operands, got "
                      f"{len(shapes)} inputs")
    used = set(eq) - set(".,->")
    spare = [ch for ch in string.ascii_letters if ch not in used]
    ell_rank = 0
    for term, shape in zip(terms, shapes):
        if "..." in term:
            ell_rank = max(ell_rank, len(shape) - (len(term) - 3))
    ell = "".join(spare[:ell_rank])
    new_terms = []
    for term, shape in zip(terms, shapes):
        if "..." in term:
            k = len(shape) - (len(term) - 3)
            term = term.replace("...", ell[ell_rank - k:] if k else "")
        if len(term) != len(shape):
            raise OpError(f"Einsum: term {term!r} does not fit operand shape {list(shape)}")
        new_terms.append(term)
    if arrow:
        out = rhs.replace("...", ell)
    else:
        counts: dict[str, int] = {}
        for term in new_terms:
            for ch in term:
                counts[ch] = counts.get(ch, 0) + 1
        out = ell + "".join(sorted(ch for ch, k in counts.items() if k == 1 and ch not in ell))
    return ",".join(new_terms) + "->" + out, new_terms, out


def _einsum_infer(*types: TensorType, equation: str) -> TensorType:
    _, terms, out = _einsum_parse(equation, [t.shape for t in types])
    sizes: dict[str, int] = {}
    for term, t in zip(terms, types):
        for ch, dim in zip(term, t.shape):
            if ch not in sizes or sizes[ch] == 1:
                sizes[ch] = dim
            elif dim not in (1, sizes[ch]):
                raise OpError(f"Einsum: index {ch!r} has sizes {sizes[ch]} and {dim}")
    for ch in out:
        if ch not in sizes:
            raise OpError(f"Einsum: output index {ch!r} is not in any input of {equation!r}")
    return TensorType(tuple(sizes[ch] for ch in out), types[0].dtype)


@register_op("Einsum", attrs={"equation": Attr.str()}, inputs=(1, None), infer=_einsum_infer,
             pattern=OPAQUE)
def einsum(*xs: np.ndarray, equation: str) -> np.ndarray:
    """Einstein summation (numpy.einsum with the ONNX equation)."""
    eq, _, _ = _einsum_parse(equation, [x.shape for x in xs])
    ct = compute_dtype(xs[0].dtype)
    y = np.einsum(eq, *(x.astype(ct, copy=False) for x in xs), optimize=len(xs) > 2)
    return np.asarray(y).astype(xs[0].dtype, copy=False)


# -- Dropout (training mode; inference-mode Dropout is removed by the converter) ----------------

def _dropout_infer(x: TensorType, *, ratio: float, seed: int | None) -> tuple[TensorType, ...]:
    return x, x.with_dtype(DType.bool)


@register_op("Dropout", attrs={"ratio": Attr.float(0.5), "seed": Attr.int(None)},
             infer=_dropout_infer, pattern=OPAQUE)
def dropout(x: np.ndarray, *, ratio: float, seed: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Training-mode dropout: keep where ``uniform[0, 1) >= ratio`` (drawn from a
    ``RandomState(seed)``, deterministic per seed), scale kept values by ``1 / (1 - ratio)``;
    returns ``(output, mask)``."""
    if ratio <= 0:
        return x.copy(), np.ones(x.shape, bool)
    rng = np.random.RandomState(0 if seed is None else seed)
    mask = rng.uniform(0.0, 1.0, x.shape) >= ratio
    scale = 1.0 / (1.0 - ratio) if ratio < 1 else 0.0
    y = _fc(x) * mask * compute_dtype(x.dtype).type(scale)
    return y.astype(x.dtype, copy=False), mask


# -- DepthToSpace / SpaceToDepth -----------------------------------------------------------------

def _d2s_infer(x: TensorType, *, blocksize: int, mode: str) -> TensorType:
    op = "DepthToSpace"
    if x.ndim != 4:
        raise OpError(f"{op}: input must be 4-D, got {x}")
    if mode not in ("DCR", "CRD"):
        raise OpError(f"{op}: mode must be DCR or CRD, got {mode!r}")
    b, c, h, w = x.shape
    if blocksize <= 0 or c % (blocksize * blocksize):
        raise OpError(f"{op}: channels {c} not divisible by blocksize^2 ({blocksize}^2)")
    return TensorType((b, c // blocksize ** 2, h * blocksize, w * blocksize), x.dtype)


@register_op("DepthToSpace", attrs={"blocksize": Attr.int(), "mode": Attr.str("DCR")},
             infer=_d2s_infer, pattern=INJECTIVE)
def depth_to_space(x: np.ndarray, *, blocksize: int, mode: str) -> np.ndarray:
    """Move channel blocks into spatial blocks (DCR or CRD order)."""
    b, c, h, w = x.shape
    bs = blocksize
    if mode == "DCR":
        t = x.reshape(b, bs, bs, c // bs ** 2, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(b, c // bs ** 2, bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    return np.ascontiguousarray(t).reshape(b, c // bs ** 2, h * bs, w * bs)


def _s2d_infer(x: TensorType, *, blocksize: int, mode: str) -> TensorType:
    op = "SpaceToDepth"
    if x.ndim != 4:
        raise OpError(f"{op}: input must be 4-D, got {x}")
    if mode not in ("DCR", "CRD"):
        raise OpError(f"{op}: mode must be DCR or CRD, got {mode!r}")
    b, c, h, w = x.shape
    if blocksize <= 0 or h % blocksize or w % blocksize:
        raise OpError(f"{op}: spatial dims {h}x{w} not divisible by blocksize {blocksize}")
    return TensorType((b, c * blocksize ** 2, h // blocksize, w // blocksize), x.dtype)


@register_op("SpaceToDepth", attrs={"blocksize": Attr.int(), "mode": Attr.str("DCR")},
             infer=_s2d_infer, pattern=INJECTIVE)
def space_to_depth(x: np.ndarray, *, blocksize: int, mode: str) -> np.ndarray:
    """Move spatial blocks into channels (the inverse of DepthToSpace with the same mode)."""
    b, c, h, w = x.shape
    bs = blocksize
    t = x.reshape(b, c, h // bs, bs, w // bs, bs)
    if mode == "DCR":
        t = t.transpose(0, 3, 5, 1, 2, 4)
    else:
        t = t.transpose(0, 1, 3, 5, 2, 4)
    return np.ascontiguousarray(t).reshape(b, c * bs * bs, h // bs, w // bs)


# -- sampling: GridSample, AffineGrid, RoiAlign, DeformConv --------------------------------------

def _gs_unnormalize(g: np.ndarray, size: int, align_corners: int) -> np.ndarray:
    if align_corners:
        return (g + 1) / 2 * (size - 1)
    return ((g + 1) * size - 1) / 2


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Reflect coordinates into [lo, hi] (repeatedly, like PyTorch's grid sampler)."""
    rng = hi - lo
    if rng <= 0:
        return np.zeros_like(x) + lo
    below = x < lo
    above = x > hi
    dx = np.where(below, lo - x, x - hi)
    n = np.floor(dx / rng)
    r = dx - n * rng
    even = (n % 2) == 0
    low_side = np.where(even, lo + r, hi - r)
    high_side = np.where(even, hi - r, lo + r)
    return np.where(below, low_side, np.where(above, high_side, x))


def _cubic_coeffs(t: np.ndarray) -> list[np.ndarray]:
    a = -0.75
    t1 = t + 1
    t2 = 1 - t
    t3 = 2 - t
    return [((a * t1 - 5 * a) * t1 + 8 * a) * t1 - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * t2 - (a + 3)) * t2 * t2 + 1,
            ((a * t3 - 5 * a) * t3 + 8 * a) * t3 - 4 * a]


def _grid_sample_infer(x: TensorType, grid: TensorType, *, mode: str, padding_mode: str,
                       align_corners: int) -> TensorType:
    op = "GridSample"
    _check_float(x, op)
    n = x.ndim - 2
    if n < 1 or grid.ndim != x.ndim or grid.shape[0] != x.shape[0] or grid.shape[-1] != n:
        raise OpError(f"{op}: grid {grid} must be (N, *out, {n}) for input {x}")
    if mode not in ("linear", "nearest", "cubic"):
        raise OpError(f"{op}: mode must be linear, nearest or cubic, got {mode!r}")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise OpError(f"{op}: padding_mode must be zeros, border or reflection, got "
                      f"{padding_mode!r}")
    if mode == "cubic" and n != 2:
        raise OpError(f"{op}: cubic mode needs a 4-D input, got {x}")
    return TensorType((*x.shape[:2], *grid.shape[1:-1]), x.dtype)


@register_op("GridSample", attrs={"mode": Attr.str("linear"), "padding_mode": Attr.str("zeros"),
                                  "align_corners": Attr.int(0)},
             inputs=2, infer=_grid_sample_infer, pattern=OPAQUE)
def grid_sample(x: np.ndarray, grid: np.ndarray, *, mode: str, padding_mode: str,
                align_corners: int) -> np.ndarray:
    """Sample ``x`` at normalized grid locations (opset 20 mode names: linear, nearest,
    cubic; the grid's last axis lists coordinates innermost-dimension first)."""
    n = x.ndim - 2
    N, C = x.shape[:2]
    dims = x.shape[2:]
    xc = x.astype(np.float64)
    g = grid.astype(np.float64)
    out_sp = grid.shape[1:-1]
    coords = []  # per spatial dim (outermost first), shape (N, *out)
    for i in range(n):
        c = _gs_unnormalize(g[..., n - 1 - i], dims[i], align_corners)
        if mode == "nearest":
            c = np.rint(c)
        lo, hi = (0.0, dims[i] - 1.0) if align_corners else (-0.5, dims[i] - 0.5)
        # Like PyTorch and onnxruntime, cubic applies the padding mode to each tap instead.
        if padding_mode == "border" and mode != "cubic":
            c = np.clip(c, 0, dims[i] - 1)
        elif padding_mode == "reflection" and mode != "cubic":
            c = _reflect(c, lo, hi)
        coords.append(c)
    flat = xc.reshape(N, C, -1)
    bidx = np.arange(N).reshape(N, *([1] * len(out_sp)))

    def fetch(idx: list[np.ndarray]) -> np.ndarray:
        """Pixel values at integer indices (N, *out) per dim -> (N, C, *out)."""
        valid = np.ones(idx[0].shape, bool)
        fixed = []
        for i, ix in enumerate(idx):
            if padding_mode == "zeros":
                valid &= (ix >= 0) & (ix < dims[i])
                ix = np.clip(ix, 0, dims[i] - 1)
            elif padding_mode == "border":
                ix = np.clip(ix, 0, dims[i] - 1)
            else:
                lo, hi = (0.0, dims[i] - 1.0) if align_corners else (-0.5, dims[i] - 0.5)
                ix = _reflect(ix.astype(np.float64), lo, hi).astype(np.int64)
                ix = np.clip(ix, 0, dims[i] - 1)
            fixed.append(ix)
        lin = np.zeros(idx[0].shape, np.int64)
        for i, ix in enumerate(fixed):
            lin = lin * dims[i] + ix
        vals = flat[bidx, :, lin]  # (N, *out, C)
        vals = np.moveaxis(vals, -1, 1)
        return vals * np.expand_dims(valid, 1)

    if mode == "nearest":
        y = fetch([c.astype(np.int64) for c in coords])
    elif mode == "linear":
        base = [np.floor(c) for c in coords]
        frac = [c - b for c, b in zip(coords, base)]
        y = np.zeros((N, C, *out_sp))
        for corner in itertools.product((0, 1), repeat=n):
            w = np.ones(coords[0].shape)
            idx = []
            for i, bit in enumerate(corner):
                w = w * (frac[i] if bit else 1 - frac[i])
                idx.append(base[i].astype(np.int64) + bit)
            y += fetch(idx) * np.expand_dims(w, 1)
    else:
        base = [np.floor(c) for c in coords]
        cw = [_cubic_coeffs(c - b) for c, b in zip(coords, base)]
        y = np.zeros((N, C, *out_sp))
        for corner in itertools.product(range(4), repeat=n):
            w = np.ones(coords[0].shape)
            idx = []
            for i, k in enumerate(corner):
                w = w * cw[i][k]
                idx.append(base[i].astype(np.int64) + k - 1)
            y += fetch(idx) * np.expand_dims(w, 1)
    return y.astype(x.dtype)


def _affine_grid_infer(theta: TensorType, *, size: list[int], align_corners: int) -> TensorType:
    op = "AffineGrid"
    _check_float(theta, op)
    if len(size) not in (4, 5):
        raise OpError(f"{op}: size must be (N, C, H, W) or (N, C, D, H, W), got {size}")
    n = len(size) - 2
    if theta.shape != (size[0], n, n + 1):
        raise OpError(f"{op}: theta {theta} must have shape [{size[0]}, {n}, {n + 1}]")
    return TensorType((size[0], *size[2:], n), theta.dtype)


@register_op("AffineGrid", attrs={"size": Attr.ints(), "align_corners": Attr.int(0)},
             infer=_affine_grid_infer, pattern=OPAQUE)
def affine_grid(theta: np.ndarray, *, size: list[int], align_corners: int) -> np.ndarray:
    """Sampling grid of an affine transform (``size`` is ONNX's input 1, made an attribute)."""
    n = len(size) - 2
    sp = size[2:]
    axes = []
    for d in sp:  # outermost first
        if align_corners:
            axes.append(np.linspace(-1, 1, d) if d > 1 else np.zeros(1))
        else:
            axes.append((np.arange(d) * 2 + 1) / d - 1)
    mesh = np.meshgrid(*axes, indexing="ij")
    # Homogeneous base coordinates, innermost dimension first (x, y[, z], 1).
    base = np.stack([*reversed(mesh), np.ones(sp)], axis=-1).reshape(-1, n + 1)
    ct = compute_dtype(theta.dtype)
    grid = np.einsum("pk,njk->npj", base.astype(ct), theta.astype(ct))
    return grid.reshape(size[0], *sp, n).astype(theta.dtype)


def _roi_align_infer(x: TensorType, rois: TensorType, batch_indices: TensorType, *, mode: str,
                     output_height: int, output_width: int, sampling_ratio: int,
                     spatial_scale: float, coordinate_transformation_mode: str) -> TensorType:
    op = "RoiAlign"
    _check_float(x, op)
    if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4 or batch_indices.ndim != 1 or \
            batch_indices.shape[0] != rois.shape[0]:
        raise OpError(f"{op}: expected X (N, C, H, W), rois (R, 4), batch_indices (R,); got "
                      f"{x}, {rois}, {batch_indices}")
    if mode not in ("avg", "max"):
        raise OpError(f"{op}: mode must be avg or max, got {mode!r}")
    if coordinate_transformation_mode not in ("half_pixel", "output_half_pixel"):
        raise OpError(f"{op}: unknown coordinate_transformation_mode "
                      f"{coordinate_transformation_mode!r}")
    return TensorType((rois.shape[0], x.shape[1], output_height, output_width), x.dtype)


@register_op("RoiAlign",
             attrs={"mode": Attr.str("avg"), "output_height": Attr.int(1),
                    "output_width": Attr.int(1), "sampling_ratio": Attr.int(0),
                    "spatial_scale": Attr.float(1.0),
                    "coordinate_transformation_mode": Attr.str("half_pixel")},
             inputs=3, infer=_roi_align_infer, pattern=OPAQUE)
def roi_align(x: np.ndarray, rois: np.ndarray, batch_indices: np.ndarray, *, mode: str,
              output_height: int, output_width: int, sampling_ratio: int, spatial_scale: float,
              coordinate_transformation_mode: str) -> np.ndarray:
    """Region-of-interest align (bilinear samples averaged, or maxed, per output bin)."""
    R = rois.shape[0]
    _, C, H, W = x.shape
    ph, pw = output_height, output_width
    xc = _fc(x)
    y = np.zeros((R, C, ph, pw), xc.dtype)
    half = coordinate_transformation_mode == "half_pixel"
    offset = 0.5 if half else 0.0
    for r in range(R):  # loop over regions only; each is vectorized over bins and samples
        x0, y0, x1, y1 = (float(v) * spatial_scale - offset for v in rois[r])
        rw, rh = x1 - x0, y1 - y0
        if not half:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / ph, rw / pw
        gh = sampling_ratio if sampling_ratio > 0 else int(math.ceil(rh / ph))
        gw = sampling_ratio if sampling_ratio > 0 else int(math.ceil(rw / pw))
        gh, gw = max(gh, 0), max(gw, 0)
        count = max(gh * gw, 1)
        if gh == 0 or gw == 0:
            continue
        ys = y0 + np.arange(ph)[:, None] * bh + (np.arange(gh)[None, :] + 0.5) * bh / gh
        xs = x0 + np.arange(pw)[:, None] * bw + (np.arange(gw)[None, :] + 0.5) * bw / gw
        yy = ys[:, :, None, None]  # (ph, gh, 1, 1)
        xx = xs[None, None, :, :]  # (1, 1, pw, gw)
        yy, xx = np.broadcast_arrays(yy, xx)
        outside = (yy < -1.0) | (yy > H) | (xx < -1.0) | (xx > W)
        yv = np.maximum(yy, 0)
        xv = np.maximum(xx, 0)
        yl = yv.astype(np.int64)
        xl = xv.astype(np.int64)
        ytop = yl >= H - 1
        xtop = xl >= W - 1
        yl = np.where(ytop, H - 1, yl)
        xl = np.where(xtop, W - 1, xl)
        yh = np.where(ytop, H - 1, yl + 1)
        xh = np.where(xtop, W - 1, xl + 1)
        yv = np.where(ytop, yl, yv)
        xv = np.where(xtop, xl, xv)
        ly, lx = yv - yl, xv - xl
        hy, hx = 1 - ly, 1 - lx
        ws = [hy * hx, hy * lx, ly * hx, ly * lx]
        ws = [np.where(outside, 0, w) for w in ws]
        img = xc[int(batch_indices[r])]  # (C, H, W)
        vals = [img[:, yl, xl], img[:, yl, xh], img[:, yh, xl], img[:, yh, xh]]
        if mode == "avg":
            acc = sum(v * w.astype(xc.dtype) for v, w in zip(vals, ws))
            y[r] = acc.sum(axis=(2, 4)) / count
        else:
            m = np.max(np.stack([v * w.astype(xc.dtype) for v, w in zip(vals, ws)]), axis=0)
            y[r] = m.max(axis=(2, 4))
    return y.astype(x.dtype, copy=False)


def _deform_conv_infer(x: TensorType, w: TensorType, offset: TensorType,
                       b: TensorType | None = None, mask: TensorType | None = None, *,
                       kernel_shape: list[int] | None, strides: list[int] | None,
                       pads: list[int] | None, dilations: list[int] | None, group: int,
                       offset_group: int) -> TensorType:
    op = "DeformConv"
    y = _conv_infer(x, w, b, kernel_shape=kernel_shape, strides=strides, pads=pads,
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


@register_op("DeformConv", attrs={**_CONV_ATTRS, "offset_group": Attr.int(1)}, inputs=(3, 5),
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
        y += _channel_view(b.astype(ct), y.ndim)
    return y.astype(x.dtype, copy=False)


# -- losses --------------------------------------------------------------------------------------

def _nll_infer(x: TensorType, target: TensorType, weight: TensorType | None = None, *,
               reduction: str, ignore_index: int | None) -> TensorType:
    op = "NegativeLogLikelihoodLoss"
    _check_float(x, op)
    if x.ndim < 2 or target.shape != (x.shape[0], *x.shape[2:]) or not target.dtype.is_int:
        raise OpError(f"{op}: expected input (N, C, d...) and integer target (N, d...); got "
                      f"{x} and {target}")
    if weight is not None and weight.shape != (x.shape[1],):
        raise OpError(f"{op}: weight {weight} must have shape [{x.shape[1]}]")
    if reduction not in ("none", "sum", "mean"):
        raise OpError(f"{op}: reduction must be none, sum or mean, got {reduction!r}")
    return TensorType(target.shape if reduction == "none" else (), x.dtype)


def _nll(logp: np.ndarray, target: np.ndarray, weight: np.ndarray | None, reduction: str,
         ignore_index: int | None) -> np.ndarray:
    """Negative log likelihood in the dtype of ``logp``."""
    c = logp.shape[1]
    t = target.astype(np.int64)
    ignored = (t == ignore_index) if ignore_index is not None else np.zeros(t.shape, bool)
    safe = np.where(ignored, 0, t)
    safe = np.where(safe < 0, safe + c, safe)
    picked = np.take_along_axis(logp, np.expand_dims(safe, 1), axis=1)[:, 0]
    w = weight.astype(logp.dtype)[safe] if weight is not None else np.ones(t.shape, logp.dtype)
    w = np.where(ignored, 0, w).astype(logp.dtype)
    loss = -picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.asarray(loss.sum(dtype=logp.dtype))
    return np.asarray(loss.sum(dtype=logp.dtype) / w.sum(dtype=logp.dtype))


@register_op("NegativeLogLikelihoodLoss",
             attrs={"reduction": Attr.str("mean"), "ignore_index": Attr.int(None)},
             inputs=(2, 3), infer=_nll_infer, pattern=OPAQUE)
def negative_log_likelihood_loss(x: np.ndarray, target: np.ndarray,
                                 weight: np.ndarray | None = None, *, reduction: str,
                                 ignore_index: int | None) -> np.ndarray:
    """``-x[n, target[n, d...], d...] * weight[target]``, reduced by none/sum/weighted mean."""
    return _nll(_fc(x), target, weight, reduction, ignore_index).astype(x.dtype)


def _sce_infer(scores: TensorType, labels: TensorType, weights: TensorType | None = None, *,
               reduction: str, ignore_index: int | None) -> tuple[TensorType, TensorType]:
    loss = _nll_infer(scores, labels, weights, reduction=reduction, ignore_index=ignore_index)
    return loss, scores


@register_op("SoftmaxCrossEntropyLoss",
             attrs={"reduction": Attr.str("mean"), "ignore_index": Attr.int(None)},
             inputs=(2, 3), infer=_sce_infer, pattern=OPAQUE)
def softmax_cross_entropy_loss(scores: np.ndarray, labels: np.ndarray,
                               weights: np.ndarray | None = None, *, reduction: str,
                               ignore_index: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Negative log likelihood of ``log_softmax(scores, axis=1)``; returns (loss, log_prob)."""
    logp = log_softmax(_fc(scores), axis=1)
    loss = _nll(logp, labels, weights, reduction, ignore_index)
    return loss.astype(scores.dtype), logp.astype(scores.dtype)


__all__ = [
    "compute_dtype", "conv_nd", "conv_output_shape", "conv_transpose_output_shape", "im2col",
    "matmul_shape", "pool_output_shape", "resolve_auto_pad", "spatial_params",
]
