"""Text ops (tessera.ops.text: TfIdfVectorizer) and their ONNX converters: one-node models on
random data checked against onnxruntime."""

from __future__ import annotations

from functools import partial

import numpy as np
import onnx_node
import pytest
from onnx_node import one_node_model

from tessera.errors import ModelImportError
from tessera.frontend.onnx import import_onnx

# -- harness ------------------------------------------------------------------------------------

check = partial(onnx_node.check, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode,weights", [("TF", None), ("IDF", None), ("TFIDF", None),
                                          ("IDF", True), ("TFIDF", True)])
@pytest.mark.parametrize("grams,skip", [((1, 1), 0), ((2, 2), 0), ((1, 2), 2), ((2, 3), 1),
                                        ((1, 3), 3)])
@pytest.mark.parametrize("batched", [False, True])
def test_tfidf_vectorizer(rng, mode, weights, grams, skip, batched):
    pool = [2, 3, 5, 4,  # unigrams
            5, 6, 7, 8, 6, 7, 2, 2,  # bigrams
            1, 2, 3, 2, 4, 6]  # trigrams
    counts = [0, 4, 12]
    indexes = [int(i) for i in rng.permutation(10)]
    attrs = {"mode": mode, "min_gram_length": grams[0], "max_gram_length": grams[1],
             "max_skip_count": skip, "ngram_counts": counts, "ngram_indexes": indexes,
             "pool_int64s": pool}
    if weights:
        attrs["weights"] = [float(w) for w in rng.random(10) + 0.5]
    x = rng.integers(1, 9, (3, 12) if batched else (15,)).astype(np.int64)
    check("TfIdfVectorizer", [x], attrs, opset=9)


def test_tfidf_int32_input(rng):
    x = rng.integers(1, 5, (2, 9)).astype(np.int32)
    check("TfIdfVectorizer", [x], {"mode": "TF", "min_gram_length": 1, "max_gram_length": 2,
                                   "max_skip_count": 1, "ngram_counts": [0, 3],
                                   "ngram_indexes": [0, 1, 2, 3, 4],
                                   "pool_int64s": [1, 2, 3, 1, 2, 3, 3]}, opset=9)


def test_tfidf_index_count_is_checked():
    x = np.array([1, 2], dtype=np.int64)
    model = one_node_model("TfIdfVectorizer", [x], {
        "mode": "TF", "min_gram_length": 1, "max_gram_length": 1, "max_skip_count": 0,
        "ngram_counts": [0], "ngram_indexes": [0], "pool_int64s": [1, 2]}, opset=9)
    with pytest.raises(ModelImportError, match="2 n-grams"):
        import_onnx(model, check=False)


def test_tfidf_strings_are_rejected():
    x = np.array([1, 2], dtype=np.int64)
    model = one_node_model("TfIdfVectorizer", [x], {
        "mode": "TF", "min_gram_length": 1, "max_gram_length": 1, "max_skip_count": 0,
        "ngram_counts": [0], "ngram_indexes": [0], "pool_strings": ["a"]}, opset=9)
    with pytest.raises(ModelImportError, match="string"):
        import_onnx(model, check=False)
