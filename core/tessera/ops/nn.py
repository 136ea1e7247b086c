"""Ops: neural-network layers that fit no larger family: the softmax family (``Softmax``,
``LogSoftmax``, ``Hardmax``) and the losses built on it (``NegativeLogLikelihoodLoss``,
``SoftmaxCrossEntropyLoss``), training-mode ``Dropout``, ``DepthToSpace`` and ``SpaceToDepth``.

Convolutions, pools, normalizations, matrix products and sampling ops have their own modules
(:mod:`tessera.ops.conv`, :mod:`~tessera.ops.pool`, :mod:`~tessera.ops.norm`,
:mod:`~tessera.ops.linalg`, :mod:`~tessera.ops.sampling`). The softmax family is computed in the
input's dtype (float16 in float16, like ONNX's reference); the other ops compute float16 in
float32 and cast back.
"""

from __future__ import annotations

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import DType, TensorType
from tessera.ops.dtypes import as_compute_dtype, check_float, compute_dtype
from tessera.ops.registry import Attr, OpPattern, normalize_axis, register_op

OPAQUE = OpPattern.OPAQUE
INJECTIVE = OpPattern.INJECTIVE


# -- softmax family ------------------------------------------------------------------------------

def _softmax_infer(x: TensorType, *, axis: int) -> TensorType:
    check_float(x, "Softmax")
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
    y = as_compute_dtype(x) * mask * compute_dtype(x.dtype).type(scale)
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


# -- losses --------------------------------------------------------------------------------------

def _nll_infer(x: TensorType, target: TensorType, weight: TensorType | None = None, *,
               reduction: str, ignore_index: int | None) -> TensorType:
    op = "NegativeLogLikelihoodLoss"
    check_float(x, op)
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
    return _nll(as_compute_dtype(x), target, weight, reduction, ignore_index).astype(x.dtype)


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
    logp = log_softmax(as_compute_dtype(scores), axis=1)
    loss = _nll(logp, labels, weights, reduction, ignore_index)
    return loss.astype(scores.dtype), logp.astype(scores.dtype)
