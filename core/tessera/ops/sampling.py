"""Ops: sampling at computed image locations: ``GridSample``, ``AffineGrid`` (the grids it
samples at) and ``RoiAlign``.

Coordinates are computed in float64 (GridSample) or the compute dtype (float16 -> float32) and
the results cast back to the input's dtype.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import TensorType
from tessera.ops.dtypes import as_compute_dtype, check_float, compute_dtype
from tessera.ops.registry import Attr, OpPattern, register_op

OPAQUE = OpPattern.OPAQUE


# -- GridSample ---------------------------------------------------------------------------------

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
    check_float(x, op)
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


# -- AffineGrid ---------------------------------------------------------------------------------

def _affine_grid_infer(theta: TensorType, *, size: list[int], align_corners: int) -> TensorType:
    op = "AffineGrid"
    check_float(theta, op)
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


# -- RoiAlign -----------------------------------------------------------------------------------

def _roi_align_infer(x: TensorType, rois: TensorType, batch_indices: TensorType, *, mode: str,
                     output_height: int, output_width: int, sampling_ratio: int,
                     spatial_scale: float, coordinate_transformation_mode: str) -> TensorType:
    op = "RoiAlign"
    check_float(x, op)
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
    xc = as_compute_dtype(x)
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
