"""ai.onnx.ml featurizers and linear models against onnxruntime, on ref and llvm (llvm leaves
these nodes to ref); a scikit-learn pipeline exported by skl2onnx where it is installed."""

from __future__ import annotations

import numpy as np
import pytest
from ml_models import check_ml, ml_model

TARGETS = ("ref", "llvm")
TRANSFORMS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"]


def test_binarizer_scaler_normalizer(rng):
    x = rng.standard_normal((6, 4)).astype(np.float32)
    check_ml(ml_model("Binarizer", [x], {"threshold": 0.3}), {"x0": x}, targets=TARGETS)
    check_ml(ml_model("Scaler", [x], {"offset": [0.5, -1, 2, 0], "scale": [2, 0.5, 1, 3]}),
             {"x0": x}, targets=TARGETS)
    for norm in ("MAX", "L1", "L2"):
        check_ml(ml_model("Normalizer", [x], {"norm": norm}), {"x0": x})


def test_label_and_one_hot_encoders(rng):
    x = rng.integers(0, 6, (5, 3)).astype(np.int64)
    check_ml(ml_model("LabelEncoder", [x], {"keys_int64s": [1, 3, 4], "values_floats": [
        0.5, -2.0, 7.0]}, ml_opset=2), {"x0": x})
    check_ml(ml_model("OneHotEncoder", [x], {"cats_int64s": [4, 1, 2]}), {"x0": x})
    f = rng.integers(0, 4, (2, 5)).astype(np.float32)
    check_ml(ml_model("ArrayFeatureExtractor", [f], {},
                      consts={"idx": np.array([4, 0, 2], np.int64)}), {"x0": f})


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("classes", [1, 3])
def test_linear_models(rng, transform, classes):
    x = rng.standard_normal((7, 4)).astype(np.float32)
    coef = [float(v) for v in rng.standard_normal(4 * classes)]
    icpt = [float(v) for v in rng.standard_normal(classes)]
    labels = [3, 8] if classes == 1 else [5, 2, 9]
    check_ml(ml_model("LinearClassifier", [x], {"coefficients": coef, "intercepts": icpt,
                                               "classlabels_ints": labels,
                                               "post_transform": transform}, outputs=2),
             {"x0": x}, rtol=1e-5, atol=1e-5, targets=TARGETS)
    check_ml(ml_model("LinearRegressor", [x], {"coefficients": coef, "intercepts": icpt,
                                              "targets": classes,
                                              "post_transform": transform}),
             {"x0": x}, rtol=1e-5, atol=1e-5)


def test_sklearn_pipelines(rng):
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x = rng.standard_normal((60, 4)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] * x[:, 2] > 0).astype(np.int64) + (x[:, 3] > 1)
    for est in (LogisticRegression(max_iter=200), RandomForestClassifier(4, max_depth=4),
                GradientBoostingClassifier(n_estimators=5, max_depth=3)):
        pipe = make_pipeline(StandardScaler(), est).fit(x, y)
        model = skl2onnx.to_onnx(pipe, x[:1], options={id(pipe): {"zipmap": False}},
                                 target_opset={"": 17, "ai.onnx.ml": 3})
        check_ml(model, {"X": x}, rtol=1e-4, atol=1e-5, targets=TARGETS)
