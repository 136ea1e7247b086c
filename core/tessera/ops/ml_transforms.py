"""Score post-transforms of the ``ai.onnx.ml`` classifiers and regressors (NONE, LOGISTIC,
SOFTMAX, SOFTMAX_ZERO, PROBIT), in float32 as onnxruntime computes them.

PROBIT uses the same closed-form approximation of erf^-1 as onnxruntime and onnx's reference
(Winitzki's, ``a = 0.147``), so that results agree with them rather than with an exact probit.
"""

from __future__ import annotations

import numpy as np

from tessera.errors import OpError

POST_TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")

#: TreeEnsemble (ai.onnx.ml opset 5) numbers its post_transform and aggregate_function.
POST_TRANSFORM_CODES = {0: "NONE", 1: "SOFTMAX", 2: "LOGISTIC", 3: "SOFTMAX_ZERO", 4: "PROBIT"}


def check_post_transform(name: str, op: str) -> None:
    """Raise unless ``name`` is one of :data:`POST_TRANSFORMS`."""
    if name not in POST_TRANSFORMS:
        raise OpError(f"{op}: post_transform must be one of {', '.join(POST_TRANSFORMS)}, "
                      f"got {name!r}")


def logistic(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), computed from |x| (no overflow) in float32."""
    x = np.asarray(x, np.float32)
    v = np.float32(1) / (np.float32(1) + np.exp(-np.abs(x)))
    return np.where(x < 0, np.float32(1) - v, v).astype(np.float32)


def _erf_inv(x: np.ndarray) -> np.ndarray:
    sign = np.where(x < 0, np.float32(-1), np.float32(1))
    x = (np.float32(1) - x) * (np.float32(1) + x)
    log = np.log(x)
    v = np.float32(2 / (np.pi * 0.147)) + np.float32(0.5) * log
    v2 = np.float32(1 / 0.147) * log
    v3 = -v + np.sqrt(v * v - v2)
    return (sign * np.sqrt(v3)).astype(np.float32)


def probit(x: np.ndarray) -> np.ndarray:
    """sqrt(2) * erf^-1(2x - 1) (approximated as onnxruntime does)."""
    x = np.asarray(x, np.float32)
    return (np.float32(np.sqrt(2)) * _erf_inv(np.float32(2) * x - np.float32(1))).astype(
        np.float32)


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis."""
    x = np.asarray(x, np.float32)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def softmax_zero(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis in which (near-)zero scores stay (near-)zero."""
    x = np.asarray(x, np.float32)
    top = x.max(axis=-1, keepdims=True)
    nonzero = np.abs(x) > np.float32(1e-7)
    e = np.where(nonzero, np.exp(x - top), x * np.exp(-top))
    total = np.where(nonzero, e, 0).sum(axis=-1, keepdims=True)
    return (e / total).astype(np.float32)


def apply_post_transform(scores: np.ndarray, name: str) -> np.ndarray:
    """``scores`` [N, K] (K >= 2) transformed row by row."""
    if name == "LOGISTIC":
        return logistic(scores)
    if name == "SOFTMAX":
        return softmax(scores)
    if name == "SOFTMAX_ZERO":
        return softmax_zero(scores)
    if name == "PROBIT":
        return probit(scores)
    return np.asarray(scores, np.float32)


def single_score_transform(scores: np.ndarray, name: str) -> np.ndarray:
    """What onnxruntime does to one score per row (one target, no second class added): only
    PROBIT changes it."""
    return probit(scores) if name == "PROBIT" else np.asarray(scores, np.float32)


def two_class_scores(score: np.ndarray, mode: np.ndarray | int, name: str) -> np.ndarray:
    """[N, 2] scores from one score per row, as onnxruntime writes a binary classifier's, by
    the row's ``mode``: 0/1 (weights all positive): ``[1 - s, s]``; 2/3 (mixed weights):
    ``[-s, s]``, or ``[logistic(-s), logistic(s)]`` under LOGISTIC; -1: ``[s, 0]``. Under
    PROBIT every row is ``[probit(s), 0]`` (onnxruntime writes the first column only; the
    second is 0 here)."""
    s = np.asarray(score, np.float32)
    zero = np.zeros_like(s)
    if name == "PROBIT":
        return np.stack([probit(s), zero], axis=-1)
    m = np.broadcast_to(np.asarray(mode), s.shape)
    if name == "LOGISTIC":
        mixed = np.stack([logistic(-s), logistic(s)], axis=-1)
    else:
        mixed = np.stack([-s, s], axis=-1)
    positive = np.stack([np.float32(1) - s, s], axis=-1)
    alone = np.stack([s, zero], axis=-1)
    out = np.where((m == 0) | (m == 1), positive.T, np.where(m >= 2, mixed.T, alone.T)).T
    return out.astype(np.float32)


__all__ = ["POST_TRANSFORMS", "POST_TRANSFORM_CODES", "apply_post_transform",
           "check_post_transform", "logistic", "probit", "single_score_transform", "softmax",
           "softmax_zero", "two_class_scores"]
