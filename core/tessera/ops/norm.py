"""Ops: normalization family: ``BatchNormalization``, ``InstanceNormalization``,
``LayerNormalization``, ``GroupNormalization``, ``RMSNormalization``, ``LRN``,
``MeanVarianceNormalization`` and ``LpNormalization``.

float16 inputs are computed in float32 (or in ``stash_type`` where the op has one) and cast back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import DType, TensorType
from tessera.ops.dtypes import as_compute_dtype, check_float, compute_dtype
from tessera.ops.registry import Attr, OpPattern, normalize_axis, register_op
from tessera.ops.spatial import channel_view, need_rank

OPAQUE = OpPattern.OPAQUE


def _param_view(p: np.ndarray, ndim: int) -> np.ndarray:
    """A BatchNormalization parameter: (C,) per channel; (C, D1, ...) per activation (opset < 9
    ``spatial=0``)."""
    if p.ndim <= 1:
        return channel_view(p, ndim)
    return p.reshape(1, *p.shape)


def _batch_norm_infer(x: TensorType, scale: TensorType, b: TensorType, mean: TensorType,
                      var: TensorType, *, epsilon: float, momentum: float,
                      training_mode: int) -> TensorType | tuple[TensorType, ...]:
    op = "BatchNormalization"
    check_float(x, op)
    need_rank(x, 2, op)
    c = x.shape[1]
    for name, t in (("scale", scale), ("B", b), ("mean", mean), ("var", var)):
        if t.shape not in ((c,), x.shape[1:]):
            raise OpError(f"{op}: {name} {t} must have shape [{c}] (one value per channel) "
                          f"or {list(x.shape[1:])} (per activation)")
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
    check_float(x, op)
    need_rank(x, 3, op)
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
    y = y * channel_view(scale.astype(ct), x.ndim) + channel_view(b.astype(ct), x.ndim)
    return y.astype(x.dtype, copy=False)


def _stash(x_dtype: DType, stash_type: DType | None) -> DType:
    if stash_type is None:
        return x_dtype
    return stash_type


def _layer_norm_infer(x: TensorType, scale: TensorType, b: TensorType | None = None, *,
                      axis: int, epsilon: float,
                      stash_type: DType | None) -> tuple[TensorType, TensorType, TensorType]:
    op = "LayerNormalization"
    check_float(x, op)
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
    check_float(x, op)
    need_rank(x, 2, op)
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
    y = y * channel_view(sc, x.ndim) + channel_view(bc, x.ndim)
    return y.astype(x.dtype, copy=False)


def _rms_norm_infer(x: TensorType, scale: TensorType, *, axis: int, epsilon: float,
                    stash_type: DType | None) -> TensorType:
    op = "RMSNormalization"
    check_float(x, op)
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
    check_float(x, "LRN")
    need_rank(x, 3, "LRN")
    return x


@register_op("LRN", attrs={"size": Attr.int(), "alpha": Attr.float(1e-4),
                           "beta": Attr.float(0.75), "bias": Attr.float(1.0)},
             infer=_lrn_infer, pattern=OPAQUE)
def lrn(x: np.ndarray, *, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """Local response normalization across channels."""
    xc = as_compute_dtype(x)
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
    check_float(x, "MeanVarianceNormalization")
    for a in axes:
        normalize_axis(a, x.ndim, "MeanVarianceNormalization")
    return x


@register_op("MeanVarianceNormalization", attrs={"axes": Attr.ints([0, 2, 3])},
             infer=_mvn_infer, pattern=OPAQUE)
def mean_variance_normalization(x: np.ndarray, *, axes: list[int]) -> np.ndarray:
    """``(x - E[x]) / (sqrt(Var[x]) + 1e-9)`` over ``axes``: ONNX defines the variance as
    ``E[x^2] - E[x]^2``; it is computed as ``E[(x - E[x])^2]``, equal in exact arithmetic and
    free of the float32 cancellation that makes the first form lose digits (values close
    together: onnxruntime computes it accurately too)."""
    xc = as_compute_dtype(x)
    ax = tuple(sorted({normalize_axis(a, x.ndim) for a in axes}))
    mean = xc.mean(axis=ax, keepdims=True)
    centered = xc - mean
    var = np.mean(centered * centered, axis=ax, keepdims=True)
    y = centered / (np.sqrt(var) + xc.dtype.type(1e-9))
    return y.astype(x.dtype, copy=False)


def _lp_norm_infer(x: TensorType, *, axis: int, p: int) -> TensorType:
    check_float(x, "LpNormalization")
    normalize_axis(axis, x.ndim, "LpNormalization")
    if p not in (1, 2):
        raise OpError(f"LpNormalization: p must be 1 or 2, got {p}")
    return x


@register_op("LpNormalization", attrs={"axis": Attr.int(-1), "p": Attr.int(2)},
             infer=_lp_norm_infer, pattern=OPAQUE)
def lp_normalization(x: np.ndarray, *, axis: int, p: int) -> np.ndarray:
    """``x / ||x||_p`` along ``axis`` (p is 1 or 2); 0 where the norm is 0."""
    xc = as_compute_dtype(x)
    a = normalize_axis(axis, x.ndim)
    if p == 1:
        norm = np.sum(np.abs(xc), axis=a, keepdims=True)
    else:
        norm = np.sqrt(np.sum(xc * xc, axis=a, keepdims=True))
    y = np.where(norm == 0, 0, xc / np.where(norm == 0, 1, norm))
    return y.astype(x.dtype, copy=False)
