"""Ops: text featurization: ``TfIdfVectorizer`` (integer n-grams; string inputs are rejected by
the importer)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import Attr, register_op


def _ngram_total(pool_size: int, ngram_counts: list[int]) -> int:
    bounds = list(ngram_counts) + [pool_size]
    return sum((bounds[i + 1] - bounds[i]) // (i + 1) for i in range(len(ngram_counts)))


def _tfidf_infer(x: TensorType, *, ngram_indexes: list[int], ngram_counts: list[int],
                 pool_int64s: list[int], weights: list[float] | None,
                 **attrs: Any) -> TensorType:
    if not x.dtype.is_int or x.ndim not in (1, 2):
        raise OpError(f"TfIdfVectorizer: X must be an integer tensor [C] or [B, C], got {x}")
    total = _ngram_total(len(pool_int64s), ngram_counts)
    if len(ngram_indexes) != total or (weights and len(weights) != total):
        raise OpError(f"TfIdfVectorizer: the pool holds {total} n-grams but ngram_indexes has "
                      f"{len(ngram_indexes)} entries and weights "
                      f"{len(weights) if weights else 0}")
    size = max(ngram_indexes) + 1 if ngram_indexes else 0
    return TensorType((size,) if x.ndim == 1 else (x.shape[0], size), DType.float32)


def _ngram_table(pool: list[int], ngram_counts: list[int], ngram_indexes: list[int],
                 min_n: int, max_n: int) -> dict[tuple[int, ...], int]:
    """n-gram (as a tuple) -> output column, for the sizes in [min_n, max_n]."""
    table: dict[tuple[int, ...], int] = {}
    index = 0
    for size_minus_1, start in enumerate(ngram_counts):
        size = size_minus_1 + 1
        end = ngram_counts[size_minus_1 + 1] if size_minus_1 + 1 < len(ngram_counts) \
            else len(pool)
        count = (end - start) // size
        if min_n <= size <= max_n:
            for g in range(count):
                gram = tuple(pool[start + g * size:start + (g + 1) * size])
                table[gram] = ngram_indexes[index + g]
        index += count
    return table


@register_op("TfIdfVectorizer", attrs={
    "mode": Attr.str(), "min_gram_length": Attr.int(), "max_gram_length": Attr.int(),
    "max_skip_count": Attr.int(), "ngram_counts": Attr.ints(), "ngram_indexes": Attr.ints(),
    "pool_int64s": Attr.ints(), "weights": Attr.floats(None)}, infer=_tfidf_infer)
def tfidf_vectorizer(x: np.ndarray, *, mode: str, min_gram_length: int, max_gram_length: int,
                     max_skip_count: int, ngram_counts: list[int], ngram_indexes: list[int],
                     pool_int64s: list[int], weights: list[float] | None) -> np.ndarray:
    """Counts the pool's integer n-grams (sizes min..max, items up to ``max_skip_count``
    apart; unigrams once) in each row and weights them (TF, IDF or TFIDF; ``weights[i]`` is
    the weight of the pool's i-th n-gram, as in the specification and onnxruntime)."""
    if mode not in ("TF", "IDF", "TFIDF"):
        raise ValueError(f"TfIdfVectorizer: mode must be TF, IDF or TFIDF, got {mode!r}")
    size = max(ngram_indexes) + 1 if ngram_indexes else 0
    table = _ngram_table(pool_int64s, ngram_counts, ngram_indexes, min_gram_length,
                         max_gram_length)
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    counts = np.zeros((rows.shape[0], size), dtype=np.int64)
    length = rows.shape[1]
    for n in range(max(min_gram_length, 1), max_gram_length + 1):
        skips = range(1) if n == 1 else range(max_skip_count + 1)
        for skip in skips:
            step = skip + 1
            starts = length - (n - 1) * step
            if starts <= 0:
                continue
            for r, row in enumerate(rows.tolist()):
                for s in range(starts):
                    col = table.get(tuple(row[s:s + (n - 1) * step + 1:step]))
                    if col is not None:
                        counts[r, col] += 1
    w = None
    if weights:  # weights[i] belongs to the i-th n-gram of the pool, i.e. column ngram_indexes[i]
        w = np.zeros(size, np.float32)
        w[np.asarray(ngram_indexes[:len(weights)])] = np.asarray(weights, np.float32)
    if mode == "TF":
        out = counts.astype(np.float32)
    elif mode == "IDF":
        out = (counts > 0).astype(np.float32) * (w if w is not None else 1.0)
    else:
        out = counts.astype(np.float32) * (w if w is not None else 1.0)
    out = out.astype(np.float32)
    return out[0] if x.ndim == 1 else out
