"""Ops: the ``ai.onnx.ml`` featurizers and linear models (Binarizer, Scaler, Normalizer,
LabelEncoder, OneHotEncoder, ArrayFeatureExtractor, LinearRegressor, LinearClassifier).

Semantics follow onnxruntime's ``ai.onnx.ml`` kernels, the reference implementation of this
domain: computation in float32 (float64 inputs are cast, as onnxruntime does), labels picked
from the raw scores, and post-transforms as :mod:`tessera.ops.ml_transforms` applies them.
String tensors do not exist in Tessera; the importer refuses string keys, labels and categories.
The tree ensembles are in :mod:`tessera.ops.ml_trees`.
"""

from __future__ import annotations

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import DType, TensorType
from tessera.ops.ml_transforms import (
    apply_post_transform,
    check_post_transform,
    logistic,
    single_score_transform,
    two_class_scores,
)
from tessera.ops.registry import Attr, OpPattern, register_op


def _check_numeric(x: TensorType, op: str) -> None:
    if not (x.dtype.is_float or x.dtype.is_int):
        raise OpError(f"{op}: X must be a numeric tensor, got {x}")


def _rows(x: TensorType, op: str) -> tuple[int, int]:
    """(batch, features) of a [C] or [N, C] input."""
    _check_numeric(x, op)
    if x.ndim == 1:
        return 1, x.shape[0]
    if x.ndim == 2:
        return x.shape[0], x.shape[1]
    raise OpError(f"{op}: X must have rank 1 or 2 ([C] or [N, C]), got {x}")


def _as_f32_rows(x: np.ndarray) -> np.ndarray:
    """A [C] or [N, C] input as float32 rows [N, C]."""
    return (x.reshape(1, -1) if x.ndim == 1 else x).astype(np.float32)


# -- Binarizer, Scaler, Normalizer -------------------------------------------------------------

def _binarizer_infer(x: TensorType, *, threshold: float) -> TensorType:
    _check_numeric(x, "Binarizer")
    return x


@register_op("Binarizer", attrs={"threshold": Attr.float(0.0)}, infer=_binarizer_infer,
             pattern=OpPattern.ELEMWISE)
def binarizer(x: np.ndarray, *, threshold: float) -> np.ndarray:
    """1 where ``x > threshold``, else 0 (NaN too, as onnx's reference and scikit-learn give;
    onnxruntime refuses NaN input), in X's type."""
    if x.dtype.kind == "f":
        return (x > x.dtype.type(threshold)).astype(x.dtype)
    return (x.astype(np.float64) > threshold).astype(x.dtype)


def _scaler_infer(x: TensorType, *, offset: list[float], scale: list[float]) -> TensorType:
    _check_numeric(x, "Scaler")
    channels = x.shape[-1] if x.ndim else 1
    for name, values in (("offset", offset), ("scale", scale)):
        if len(values) not in (1, channels):
            raise OpError(f"Scaler: {name} has {len(values)} values; expected 1 or {channels} "
                          f"(X's last dimension, X is {x})")
    return TensorType(x.shape, DType.float32)


@register_op("Scaler", attrs={"offset": Attr.floats([0.0]), "scale": Attr.floats([1.0])},
             infer=_scaler_infer, pattern=OpPattern.BROADCAST)
def scaler(x: np.ndarray, *, offset: list[float], scale: list[float]) -> np.ndarray:
    """``(x - offset) * scale`` per feature (last axis), in float32."""
    off = np.asarray(offset, np.float32)
    sc = np.asarray(scale, np.float32)
    return ((x.astype(np.float32) - off) * sc).astype(np.float32)


_NORMS = ("MAX", "L1", "L2")


def _normalizer_infer(x: TensorType, *, norm: str) -> TensorType:
    _rows(x, "Normalizer")
    if norm not in _NORMS:
        raise OpError(f"Normalizer: norm must be MAX, L1 or L2, got {norm!r}")
    return TensorType(x.shape, DType.float32)


@register_op("Normalizer", attrs={"norm": Attr.str("MAX")}, infer=_normalizer_infer)
def normalizer(x: np.ndarray, *, norm: str) -> np.ndarray:
    """Each row divided by its max (MAX: the largest value, not the largest magnitude), the
    sum of its magnitudes (L1) or its Euclidean norm (L2); a row whose divisor is 0 is kept."""
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    xf = rows.astype(np.float32)
    if norm == "MAX":
        div = xf.max(axis=1, keepdims=True)
    elif norm == "L1":
        div = np.abs(xf).sum(axis=1, keepdims=True, dtype=np.float32)
    else:
        div = np.sqrt((rows * rows).astype(np.float32).sum(axis=1, keepdims=True,
                                                           dtype=np.float32))
    safe = np.where(div == 0, np.float32(1), div)
    return (xf / safe).astype(np.float32).reshape(x.shape)


# -- LabelEncoder, OneHotEncoder, ArrayFeatureExtractor -----------------------------------------

def _label_encoder_infer(x: TensorType, *, keys: np.ndarray, values: np.ndarray,
                         default: np.ndarray) -> TensorType:
    _check_numeric(x, "LabelEncoder")
    if keys.ndim != 1 or values.shape != keys.shape:
        raise OpError(f"LabelEncoder: {keys.size} keys but {values.size} values")
    return TensorType(x.shape, DType.from_numpy(values.dtype))


@register_op("LabelEncoder", attrs={"keys": Attr.tensor(), "values": Attr.tensor(),
                                    "default": Attr.tensor()}, infer=_label_encoder_infer)
def label_encoder(x: np.ndarray, *, keys: np.ndarray, values: np.ndarray,
                  default: np.ndarray) -> np.ndarray:
    """Each element mapped through ``keys -> values`` (``default`` where it is no key; a NaN
    key matches NaN)."""
    out = np.full(x.shape, np.asarray(default).reshape(-1)[0], dtype=values.dtype)
    if keys.size == 0:
        return out
    k = keys.astype(x.dtype) if x.dtype.kind == "f" else keys
    order = np.argsort(k, kind="stable")
    sorted_keys = k[order]
    pos = np.clip(np.searchsorted(sorted_keys, x), 0, len(k) - 1)
    hit = sorted_keys[pos] == x
    if x.dtype.kind == "f" and np.isnan(k).any():
        nan_value = values[np.flatnonzero(np.isnan(k))[0]]
        out = np.where(np.isnan(x), nan_value, out)
    return np.where(hit, values[order[pos]], out).astype(values.dtype)


def _one_hot_infer(x: TensorType, *, cats_int64s: list[int], zeros: int) -> TensorType:
    _check_numeric(x, "OneHotEncoder")
    if not cats_int64s:
        raise OpError("OneHotEncoder: cats_int64s is empty")
    return TensorType((*x.shape, len(cats_int64s)), DType.float32)


@register_op("OneHotEncoder", attrs={"cats_int64s": Attr.ints(), "zeros": Attr.int(1)},
             infer=_one_hot_infer)
def one_hot_encoder(x: np.ndarray, *, cats_int64s: list[int], zeros: int) -> np.ndarray:
    """A float32 one-hot vector per element over the categories (floats truncated to int64); an
    element of no category is all zeros, or an error when ``zeros`` is 0."""
    cats = np.asarray(cats_int64s, np.int64)
    xi = x.astype(np.int64)
    out = (xi[..., None] == cats).astype(np.float32)
    if not zeros and x.size and not out.any(axis=-1).all():
        bad = xi[~out.any(axis=-1)].reshape(-1)[:5]
        raise ValueError(f"OneHotEncoder: value(s) {bad.tolist()} are no category and zeros=0")
    return out


def _afe_shape(x: TensorType, n: int) -> tuple[int, ...]:
    return (1, n) if x.ndim == 1 else (*x.shape[:-1], n)


def _afe_infer(x: TensorType, indices: TensorType) -> TensorType:
    if x.ndim < 1:
        raise OpError(f"ArrayFeatureExtractor: X must have rank 1 or more, got {x}")
    if not indices.dtype.is_int:
        raise OpError(f"ArrayFeatureExtractor: Y (indices) must be int64, got {indices}")
    return TensorType(_afe_shape(x, int(np.prod(indices.shape, dtype=np.int64))), x.dtype)


@register_op("ArrayFeatureExtractor", inputs=2, infer=_afe_infer, pattern=OpPattern.INJECTIVE)
def array_feature_extractor(x: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The elements of X's last axis at ``indices`` (a 1-D X gives one row)."""
    idx = np.asarray(indices, np.int64).reshape(-1)
    size = x.shape[-1]
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        raise ValueError(f"ArrayFeatureExtractor: indices {idx.tolist()} out of range for a "
                         f"last dimension of {size}")
    return np.take(x, idx, axis=-1).reshape(_afe_shape(TensorType.of(x), idx.size))


# -- linear models ------------------------------------------------------------------------------

def _linear_scores(x: np.ndarray, coefficients: list[float], intercepts: list[float] | None,
                   targets: int) -> np.ndarray:
    rows = _as_f32_rows(x)
    w = np.asarray(coefficients, np.float32).reshape(targets, rows.shape[1])
    scores = rows @ w.T
    if intercepts:
        scores = scores + np.asarray(intercepts, np.float32)
    return scores.astype(np.float32)


def _check_coefficients(op: str, coefficients: list[float], targets: int, features: int,
                        intercepts: list[float] | None) -> None:
    if len(coefficients) != targets * features:
        raise OpError(f"{op}: {len(coefficients)} coefficients; expected {targets} x "
                      f"{features} (targets x features)")
    if intercepts and len(intercepts) != targets:
        raise OpError(f"{op}: {len(intercepts)} intercepts; expected {targets}")


def _linear_regressor_infer(x: TensorType, *, coefficients: list[float],
                            intercepts: list[float] | None, targets: int,
                            post_transform: str) -> TensorType:
    n, c = _rows(x, "LinearRegressor")
    check_post_transform(post_transform, "LinearRegressor")
    _check_coefficients("LinearRegressor", coefficients, targets, c, intercepts)
    return TensorType((n, targets), DType.float32)


@register_op("LinearRegressor", attrs={
    "coefficients": Attr.floats(), "intercepts": Attr.floats(None), "targets": Attr.int(1),
    "post_transform": Attr.str("NONE")}, infer=_linear_regressor_infer)
def linear_regressor(x: np.ndarray, *, coefficients: list[float], intercepts: list[float] | None,
                     targets: int, post_transform: str) -> np.ndarray:
    """``X @ coefficients^T + intercepts`` ([N, targets], float32), then the post-transform
    (with one target only PROBIT applies, as in onnxruntime)."""
    scores = _linear_scores(x, coefficients, intercepts, targets)
    if targets == 1:
        return single_score_transform(scores, post_transform)
    return apply_post_transform(scores, post_transform)


def _linear_classifier_infer(x: TensorType, *, coefficients: list[float],
                             intercepts: list[float], classlabels_ints: list[int],
                             multi_class: int, post_transform: str
                             ) -> tuple[TensorType, TensorType]:
    n, c = _rows(x, "LinearClassifier")
    check_post_transform(post_transform, "LinearClassifier")
    targets = len(intercepts)
    if targets == 0:
        raise OpError("LinearClassifier: intercepts is empty (one per class is required)")
    _check_coefficients("LinearClassifier", coefficients, targets, c, intercepts)
    if targets > 1 and len(classlabels_ints) != targets:
        raise OpError(f"LinearClassifier: {targets} classes (intercepts) but "
                      f"{len(classlabels_ints)} class labels")
    columns = 2 if targets == 1 and len(classlabels_ints) == 2 else targets
    return TensorType((n,), DType.int64), TensorType((n, columns), DType.float32)


@register_op("LinearClassifier", attrs={
    "coefficients": Attr.floats(), "intercepts": Attr.floats(), "classlabels_ints": Attr.ints(),
    "multi_class": Attr.int(0), "post_transform": Attr.str("NONE")},
    infer=_linear_classifier_infer)
def linear_classifier(x: np.ndarray, *, coefficients: list[float], intercepts: list[float],
                      classlabels_ints: list[int], multi_class: int, post_transform: str
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Labels and scores of a linear classifier. Several classes: the label of the first
    largest raw score, scores post-transformed. One score per row: label ``classlabels[1]``
    (or 1) where it is positive, else ``classlabels[0]`` (or 0); with two class labels the
    scores become ``[1 - s, s]`` (onnxruntime's layout; s after LOGISTIC), otherwise only
    PROBIT applies."""
    targets = len(intercepts)
    scores = _linear_scores(x, coefficients, intercepts, targets)
    if targets == 1:
        two = len(classlabels_ints) == 2
        pos, neg = (classlabels_ints[1], classlabels_ints[0]) if two else (1, 0)
        labels = np.where(scores[:, 0] > 0, pos, neg).astype(np.int64)
        if two:  # onnxruntime: LOGISTIC applies to the score, then [1 - s, s]
            s = logistic(scores[:, 0]) if post_transform == "LOGISTIC" else scores[:, 0]
            return labels, two_class_scores(s, 1, post_transform)
        return labels, single_score_transform(scores, post_transform)
    labels = np.asarray(classlabels_ints, np.int64)[np.argmax(scores, axis=1)]
    return labels, apply_post_transform(scores, post_transform)


__all__ = ["array_feature_extractor", "binarizer", "label_encoder", "linear_classifier",
           "linear_regressor", "normalizer", "one_hot_encoder", "scaler"]
