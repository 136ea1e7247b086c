"""Tree ensembles of ai.onnx.ml (TreeEnsembleRegressor/Classifier opsets 1 and 3, TreeEnsemble
opset 5) on random forests and data, against onnxruntime, on the ref and llvm targets (llvm
leaves these nodes to ref)."""

from __future__ import annotations

import numpy as np
import pytest
from ml_models import check_ml, ml_model
from onnx import helper, numpy_helper

import tessera
from tessera.errors import ModelImportError

MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
TRANSFORMS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"]
TARGETS = ("ref", "llvm")


def random_forest(rng: np.random.Generator, x: np.ndarray, trees: int, depth: int,
                  modes: list[str], outputs: int, per_leaf: int = 1, positive: bool = False,
                  missing: bool = False) -> dict:
    """Legacy-form tree tables (nodes and leaf weights by (tree, node) ids), split values
    drawn from the data (so that EQ/NEQ and ties occur), node ids shuffled per tree."""
    a: dict[str, list] = {k: [] for k in (
        "nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
        "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true",
        "w_ids", "w_treeids", "w_nodeids", "w_weights")}
    for t in range(trees):
        count = 2 ** (depth + 1) - 1
        ids = rng.permutation(count)  # node ids need not be in order
        for i in range(count):
            a["nodes_treeids"].append(t)
            a["nodes_nodeids"].append(int(ids[i]))
            leaf = i >= 2 ** depth - 1
            feature = int(rng.integers(x.shape[1]))
            a["nodes_featureids"].append(0 if leaf else feature)
            a["nodes_modes"].append("LEAF" if leaf else str(rng.choice(modes)))
            value = float(x[rng.integers(x.shape[0]), feature])
            a["nodes_values"].append(0.0 if leaf else value)
            a["nodes_truenodeids"].append(0 if leaf else int(ids[2 * i + 1]))
            a["nodes_falsenodeids"].append(0 if leaf else int(ids[2 * i + 2]))
            a["nodes_missing_value_tracks_true"].append(int(missing and rng.random() < 0.5))
            if leaf:
                for target in rng.choice(outputs, size=min(per_leaf, outputs), replace=False):
                    a["w_ids"].append(int(target))
                    a["w_treeids"].append(t)
                    a["w_nodeids"].append(int(ids[i]))
                    w = rng.random() if positive else rng.standard_normal()
                    a["w_weights"].append(float(w))
    return a


def legacy_attrs(a: dict, prefix: str, as_tensor: bool) -> dict:
    out = {k: v for k, v in a.items() if not k.startswith("w_")}
    if not any(a["nodes_missing_value_tracks_true"]):
        del out["nodes_missing_value_tracks_true"]
    out[f"{prefix}_ids"] = a["w_ids"]
    out[f"{prefix}_treeids"] = a["w_treeids"]
    out[f"{prefix}_nodeids"] = a["w_nodeids"]
    if as_tensor:
        out["nodes_values_as_tensor"] = numpy_helper.from_array(
            np.asarray(out.pop("nodes_values"), np.float64), "v")
        out[f"{prefix}_weights_as_tensor"] = numpy_helper.from_array(
            np.asarray(a["w_weights"], np.float64), "w")
    else:
        out[f"{prefix}_weights"] = a["w_weights"]
    return out


def data(rng: np.random.Generator, n: int = 40, f: int = 5, dtype=np.float32) -> np.ndarray:
    """Values on a coarse grid, so that equality splits and ties at thresholds happen."""
    return (rng.integers(-6, 7, (n, f)) / 2).astype(dtype)


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("n_targets,base", [(1, None), (1, [0.5]), (3, None), (3, [0.1, -2, 3])])
def test_regressor_aggregates(rng, aggregate, n_targets, base):
    x = data(rng)
    a = random_forest(rng, x, trees=4, depth=3, modes=MODES, outputs=n_targets, per_leaf=2)
    attrs = {**legacy_attrs(a, "target", False), "n_targets": n_targets,
             "aggregate_function": aggregate}
    if base is not None:
        attrs["base_values"] = base
    model = ml_model("TreeEnsembleRegressor", [x], attrs, ml_opset=1)
    check_ml(model, {"x0": x}, targets=TARGETS)


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_regressor_post_transforms(rng, transform):
    x = data(rng)
    a = random_forest(rng, x, trees=3, depth=2, modes=["BRANCH_LEQ"], outputs=3,
                      positive=transform == "PROBIT")
    attrs = {**legacy_attrs(a, "target", False), "n_targets": 3, "post_transform": transform,
             "aggregate_function": "AVERAGE" if transform == "PROBIT" else "SUM"}
    check_ml(ml_model("TreeEnsembleRegressor", [x], attrs), {"x0": x}, rtol=1e-4, atol=1e-5)


def test_regressor_opset3_double_tensors(rng):
    x = data(rng, dtype=np.float64)
    a = random_forest(rng, x, trees=5, depth=3, modes=MODES, outputs=2)
    attrs = {**legacy_attrs(a, "target", True), "n_targets": 2,
             "base_values_as_tensor": numpy_helper.from_array(np.array([0.25, -1.0]), "b")}
    check_ml(ml_model("TreeEnsembleRegressor", [x], attrs, ml_opset=3), {"x0": x})


def test_missing_values_follow_their_tracks(rng):
    x = data(rng)
    x[rng.random(x.shape) < 0.3] = np.nan
    a = random_forest(rng, x[~np.isnan(x).any(axis=1)], trees=6, depth=3, modes=MODES,
                      outputs=2, missing=True)
    attrs = {**legacy_attrs(a, "target", False), "n_targets": 2}
    check_ml(ml_model("TreeEnsembleRegressor", [x], attrs), {"x0": x}, targets=TARGETS)


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("classes,base", [(3, None), (4, [0.3, -0.2, 0.1, 0.0])])
def test_multiclass(rng, transform, classes, base):
    x = data(rng)
    a = random_forest(rng, x, trees=4, depth=3, modes=MODES, outputs=classes, per_leaf=2,
                      positive=transform == "PROBIT")
    attrs = {**legacy_attrs(a, "class", False), "post_transform": transform,
             "classlabels_int64s": [int(v) for v in rng.permutation(50)[:classes]]}
    if base is not None:
        attrs["base_values"] = base
    model = ml_model("TreeEnsembleClassifier", [x], attrs, outputs=2)
    check_ml(model, {"x0": x}, rtol=1e-4, atol=1e-5, targets=TARGETS)


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("positive", [True, False])
@pytest.mark.parametrize("weighted_classes", [[1], [0], [0, 1]])
def test_binary(rng, transform, positive, weighted_classes):
    """Two classes without base values: onnxruntime's binary conventions (one weighted class,
    positive or mixed weights). (Two classes with base values differ from onnxruntime 1.31.)"""
    if weighted_classes == [0] and positive and transform == "LOGISTIC":
        pytest.skip("class-0-only positive weights under LOGISTIC differ from onnxruntime 1.31")
    base = None
    x = data(rng)
    a = random_forest(rng, x, trees=3, depth=2, modes=MODES, outputs=len(weighted_classes),
                      positive=positive)
    a["w_ids"] = [weighted_classes[i] for i in a["w_ids"]]
    attrs = {**legacy_attrs(a, "class", False), "post_transform": transform,
             "classlabels_int64s": [0, 1] if len(weighted_classes) == 2 else [4, 9]}
    if base is not None:
        attrs["base_values"] = base
    model = ml_model("TreeEnsembleClassifier", [x], attrs, outputs=2)
    check_ml(model, {"x0": x}, rtol=1e-4, atol=1e-5)


def test_classifier_opset3_double_tensors(rng):
    x = data(rng, dtype=np.float64)
    a = random_forest(rng, x, trees=5, depth=3, modes=MODES, outputs=3)
    attrs = {**legacy_attrs(a, "class", True), "classlabels_int64s": [1, 2, 3],
             "post_transform": "SOFTMAX"}
    check_ml(ml_model("TreeEnsembleClassifier", [x], attrs, outputs=2), {"x0": x},
             rtol=1e-4, atol=1e-5)


# -- TreeEnsemble (opset 5) ---------------------------------------------------------------------

def opset5_attrs(rng: np.random.Generator, x: np.ndarray, trees: int, depth: int,
                 n_targets: int, member: bool) -> dict:
    """Complete trees of ``depth`` with every mode (BRANCH_MEMBER among them with ``member``),
    the leaves of each tree after its nodes, one degenerate single-leaf tree at the end."""
    interior = 2 ** depth - 1
    modes, feats, splits, tids, fids, missing = [], [], [], [], [], []
    tleaf, fleaf, roots, members = [], [], [], []
    leaf_count = 0
    for _ in range(trees):
        base, first_leaf = len(modes), leaf_count
        roots.append(base)
        for i in range(interior):
            mode = int(rng.integers(7 if member else 6))
            f = int(rng.integers(x.shape[1]))
            modes.append(mode)
            feats.append(f)
            splits.append(float(x[rng.integers(len(x)), f]))
            missing.append(int(rng.random() < 0.5))
            if mode == 6:
                members.extend(float(v) for v in rng.choice(np.arange(-3, 4), 3, replace=False))
                members.append(np.nan)
            for side, ids, leafs in ((1, tids, tleaf), (2, fids, fleaf)):
                child = 2 * i + side
                if child < interior:
                    ids.append(base + child)
                    leafs.append(0)
                else:
                    ids.append(first_leaf + child - interior)
                    leafs.append(1)
        leaf_count += interior + 1
    # a degenerate tree: one node whose two branches are the same leaf
    roots.append(len(modes))
    modes.append(0)
    feats.append(0)
    splits.append(0.0)
    missing.append(0)
    tids.append(leaf_count)
    fids.append(leaf_count)
    tleaf.append(1)
    fleaf.append(1)
    leaf_count += 1
    dtype = x.dtype
    attrs = {
        "nodes_modes": numpy_helper.from_array(np.asarray(modes, np.uint8), "m"),
        "nodes_featureids": feats,
        "nodes_splits": numpy_helper.from_array(np.asarray(splits, dtype), "s"),
        "nodes_truenodeids": tids, "nodes_falsenodeids": fids,
        "nodes_trueleafs": tleaf, "nodes_falseleafs": fleaf,
        "nodes_missing_value_tracks_true": missing,
        "leaf_targetids": [int(v) for v in rng.integers(n_targets, size=leaf_count)],
        "leaf_weights": numpy_helper.from_array(
            rng.standard_normal(leaf_count).astype(dtype), "w"),
        "tree_roots": roots, "n_targets": n_targets}
    if members:
        attrs["membership_values"] = numpy_helper.from_array(np.asarray(members, dtype), "mv")
    return attrs


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tree_ensemble_opset5(rng, aggregate, dtype):
    x = data(rng, dtype=dtype)
    x[rng.random(x.shape) < 0.1] = np.nan
    # BRANCH_MEMBER is checked by the ONNX conformance case tree_ensemble_set_membership: on
    # random sets onnxruntime 1.31 and onnx's reference disagree with each other
    attrs = {**opset5_attrs(rng, x, trees=4, depth=3, n_targets=3, member=False),
             "aggregate_function": aggregate}
    model = ml_model("TreeEnsemble", [x], attrs, ml_opset=5)
    check_ml(model, {"x0": x}, rtol=1e-5, atol=1e-6, targets=TARGETS)


@pytest.mark.parametrize("post", [0, 3, 4])
def test_tree_ensemble_opset5_post_transforms(rng, post):
    """Codes 1 (SOFTMAX) and 2 (LOGISTIC) are left out: onnxruntime 1.31 swaps them against
    the specification (Tessera follows the specification)."""
    x = data(rng)
    attrs = {**opset5_attrs(rng, x, trees=3, depth=2, n_targets=2, member=False),
             "post_transform": post}
    if post == 4:  # probit needs scores in (0, 1)
        w = np.abs(numpy_helper.to_array(attrs["leaf_weights"])) / 10
        attrs["leaf_weights"] = numpy_helper.from_array(w.astype(np.float32), "w")
    check_ml(ml_model("TreeEnsemble", [x], attrs, ml_opset=5), {"x0": x}, rtol=1e-4,
             atol=1e-5)


# -- refusals -----------------------------------------------------------------------------------

def test_string_class_labels_are_refused(rng):
    x = data(rng)
    a = random_forest(rng, x, trees=1, depth=1, modes=MODES, outputs=2)
    attrs = {**legacy_attrs(a, "class", False), "classlabels_strings": ["a", "b"]}
    node = helper.make_node("TreeEnsembleClassifier", ["x0"], ["y0", "y1"], name="trees",
                            domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x0", 1, [40, 5])],
                              [helper.make_tensor_value_info("y0", 8, [40]),
                               helper.make_tensor_value_info("y1", 1, [40, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", 3)])
    with pytest.raises(ModelImportError, match=r"'trees'.*string class labels"):
        tessera.compile(model, target="ref")


def test_cycle_is_an_error():
    attrs = {"nodes_treeids": [0, 0, 0], "nodes_nodeids": [0, 1, 2],
             "nodes_featureids": [0, 0, 0], "nodes_modes": ["BRANCH_LEQ", "BRANCH_LEQ", "LEAF"],
             "nodes_values": [0.0, 0.0, 0.0], "nodes_truenodeids": [1, 0, 0],
             "nodes_falsenodeids": [2, 2, 0], "target_ids": [0], "target_treeids": [0],
             "target_nodeids": [2], "target_weights": [1.0], "n_targets": 1}
    node = helper.make_node("TreeEnsembleRegressor", ["x0"], ["y0"], domain="ai.onnx.ml",
                            **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x0", 1, [40, 5])],
                              [helper.make_tensor_value_info("y0", 1, [40, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", 3)])
    with pytest.raises(ModelImportError, match="no root"):
        tessera.compile(model, target="ref")
