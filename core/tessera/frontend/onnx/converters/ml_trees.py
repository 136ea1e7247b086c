"""ONNX converters: the ``ai.onnx.ml`` tree ensembles (tessera.ops.ml_trees).

TreeEnsembleRegressor and TreeEnsembleClassifier (opsets 1 and 3: ``*_as_tensor`` attributes)
name nodes by (tree id, node id) and leaves' weights by the same pair; TreeEnsemble (opset 5)
indexes interior nodes and leaves separately. Both become the flat tables of the IR ops: one
node table (interior nodes and leaves), children as indices into it, leaf weights as triples.
Thresholds are kept in float64 for a float64 X and rounded to float32 otherwise (what
onnxruntime compares them in).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tessera.frontend.onnx.context import ConvertContext
from tessera.frontend.onnx.converters.ml import ML, refuse_strings
from tessera.frontend.onnx.registry import converter
from tessera.ir.graph import Value
from tessera.ir.types import DType
from tessera.ops.ml_transforms import POST_TRANSFORM_CODES
from tessera.ops.ml_trees import LEAF, MEMBER

Inputs = list[Value | None]
Attrs = dict[str, Any]

_MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4,
          "BRANCH_NEQ": 5, "LEAF": LEAF}
_AGGREGATE_CODES = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}


def _floats(attrs: Attrs, name: str) -> np.ndarray | None:
    """A float attribute given as a list or as ``NAME_as_tensor`` (float64 kept)."""
    if f"{name}_as_tensor" in attrs:
        return np.asarray(attrs[f"{name}_as_tensor"]).reshape(-1)
    if name in attrs:
        return np.asarray(attrs[name], np.float32)
    return None


def _thresholds(values: np.ndarray, x: Value) -> np.ndarray:
    return values.astype(np.float64 if x.type.dtype == DType.float64 else np.float32)


def _x(ctx: ConvertContext, inputs: Inputs) -> Value:
    x = inputs[0]
    assert x is not None
    if x.type.ndim not in (1, 2):
        raise ctx.error(f"X must be [N, F] or [F], got {x.type}")
    return x


def _legacy_tables(ctx: ConvertContext, x: Value, attrs: Attrs, prefix: str) -> Attrs:
    """The flat tables of a TreeEnsembleRegressor/Classifier (opset 1 or 3)."""
    tree_ids = [int(t) for t in attrs.get("nodes_treeids", [])]
    node_ids = [int(n) for n in attrs.get("nodes_nodeids", [])]
    n = len(tree_ids)
    if not n or len(node_ids) != n:
        raise ctx.error("nodes_treeids and nodes_nodeids must be given, of one length")
    index: dict[tuple[int, int], int] = {}
    for i, key in enumerate(zip(tree_ids, node_ids)):
        if key in index:
            raise ctx.error(f"tree {key[0]} lists node {key[1]} twice")
        index[key] = i
    names = list(attrs.get("nodes_modes", []))
    unknown = sorted({m for m in names if m not in _MODES})
    if len(names) != n or unknown:
        raise ctx.error(f"nodes_modes must hold {n} modes of {', '.join(_MODES)}"
                        + (f"; got {', '.join(unknown)}" if unknown else ""))
    modes = [_MODES[m] for m in names]
    values = _floats(attrs, "nodes_values")
    values = np.zeros(n) if values is None else values
    missing = list(attrs.get("nodes_missing_value_tracks_true", [])) or [0] * n

    def child(i: int, name: str) -> int:
        if modes[i] == LEAF:
            return i
        key = (tree_ids[i], int(attrs[name][i]))
        if key not in index:
            raise ctx.error(f"{name}[{i}]: tree {key[0]} has no node {key[1]}")
        return index[key]

    for name in ("nodes_truenodeids", "nodes_falsenodeids", "nodes_featureids"):
        if len(attrs.get(name, [])) != n:
            raise ctx.error(f"{name} must hold {n} entries")
    true_ids = [child(i, "nodes_truenodeids") for i in range(n)]
    false_ids = [child(i, "nodes_falsenodeids") for i in range(n)]
    has_parent = set(true_ids[i] for i in range(n) if modes[i] != LEAF) | \
        set(false_ids[i] for i in range(n) if modes[i] != LEAF)
    roots: dict[int, int] = {}
    for i, t in enumerate(tree_ids):
        if i not in has_parent and t not in roots:
            roots[t] = i
    if set(roots) != set(tree_ids):
        raise ctx.error(f"trees {sorted(set(tree_ids) - set(roots))} have no root (a node that "
                        f"no other node points to)")
    ids = [int(v) for v in attrs.get(f"{prefix}_ids", [])]
    leaf_trees = attrs.get(f"{prefix}_treeids", [])
    leaf_nodes = attrs.get(f"{prefix}_nodeids", [])
    weights = _floats(attrs, f"{prefix}_weights")
    weights = np.zeros(0) if weights is None else weights
    if not (len(ids) == len(leaf_trees) == len(leaf_nodes) == weights.size):
        raise ctx.error(f"{prefix}_ids, {prefix}_treeids, {prefix}_nodeids and "
                        f"{prefix}_weights differ in length")
    leaves = []
    for t, node in zip(leaf_trees, leaf_nodes):
        key = (int(t), int(node))
        if key not in index or modes[index[key]] != LEAF:
            raise ctx.error(f"{prefix} weight of tree {key[0]} node {key[1]}: no such leaf")
        leaves.append(index[key])
    base = _floats(attrs, "base_values")
    return {"nodes_featureids": [int(f) for f in attrs["nodes_featureids"]],
            "nodes_modes": modes, "nodes_values": _thresholds(values, x),
            "nodes_truenodeids": true_ids, "nodes_falsenodeids": false_ids,
            "nodes_missing_value_tracks_true": [int(m) for m in missing],
            "tree_roots": list(roots.values()), "leaf_nodeids": leaves,
            "leaf_targetids": ids, "leaf_weights": weights.astype(np.float64),
            "base_values": None if base is None else [float(b) for b in base],
            "post_transform": attrs.get("post_transform", "NONE")}


@converter("TreeEnsembleRegressor", domain=ML)
def convert_tree_regressor(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x = _x(ctx, inputs)
    tables = _legacy_tables(ctx, x, attrs, "target")
    return ctx.op("TreeEnsemble", x, n_targets=int(attrs.get("n_targets", 1)),
                  aggregate_function=attrs.get("aggregate_function", "SUM"),
                  output_dtype=DType.float32, **tables)


@converter("TreeEnsembleClassifier", domain=ML)
def convert_tree_classifier(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> list[Value]:
    refuse_strings(ctx, attrs, ("classlabels_strings",), "class labels")
    labels = attrs.get("classlabels_int64s")
    if not labels:
        raise ctx.error("classlabels_int64s is required (the int64 class labels)")
    x = _x(ctx, inputs)
    tables = _legacy_tables(ctx, x, attrs, "class")
    return ctx.node("TreeEnsembleClassifier", [x], {"classlabels_ints": list(labels), **tables},
                    num_outputs=2)


def _membership(ctx: ConvertContext, attrs: Attrs, member_count: int) -> np.ndarray:
    """The NaN-separated member lists as rows of a NaN-padded matrix, one per MEMBER node."""
    flat = attrs.get("membership_values")
    if member_count == 0:
        return np.zeros((0, 0))
    if flat is None:
        raise ctx.error("BRANCH_MEMBER nodes need membership_values")
    sets: list[list[float]] = [[]]
    for v in np.asarray(flat, np.float64).reshape(-1).tolist():
        if math.isnan(v):
            sets.append([])
        else:
            sets[-1].append(v)
    if sets and not sets[-1]:
        sets.pop()
    if len(sets) != member_count:
        raise ctx.error(f"membership_values lists {len(sets)} sets for {member_count} "
                        f"BRANCH_MEMBER nodes")
    width = max(1, max(len(s) for s in sets))
    table = np.full((member_count, width), np.nan)
    for i, s in enumerate(sets):
        table[i, :len(s)] = s
    return table


@converter("TreeEnsemble", since=5, domain=ML)
def convert_tree_ensemble(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    x = _x(ctx, inputs)
    if not x.type.dtype.is_float:
        raise ctx.error(f"X must be a float tensor, got {x.type}")
    modes = [int(m) for m in np.asarray(attrs["nodes_modes"]).reshape(-1)]
    n = len(modes)
    if any(m < 0 or m > MEMBER for m in modes):
        raise ctx.error(f"nodes_modes must be in [0, {MEMBER}]")
    splits = np.asarray(attrs["nodes_splits"], np.float64).reshape(-1)
    weights = np.asarray(attrs["leaf_weights"], np.float64).reshape(-1)
    leaf_count = weights.size
    true_leaf = [bool(v) for v in attrs["nodes_trueleafs"]]
    false_leaf = [bool(v) for v in attrs["nodes_falseleafs"]]
    true_ids = [int(v) for v in attrs["nodes_truenodeids"]]
    false_ids = [int(v) for v in attrs["nodes_falsenodeids"]]
    for name, seq in (("nodes_splits", splits), ("nodes_trueleafs", true_leaf),
                      ("nodes_falseleafs", false_leaf), ("nodes_truenodeids", true_ids),
                      ("nodes_falsenodeids", false_ids), ("nodes_featureids",
                                                          attrs["nodes_featureids"])):
        if len(seq) != n:
            raise ctx.error(f"{name} has {len(seq)} entries; nodes_modes has {n}")
    targets = [int(t) for t in attrs["leaf_targetids"]]
    if len(targets) != leaf_count:
        raise ctx.error(f"leaf_targetids has {len(targets)} entries; leaf_weights has "
                        f"{leaf_count}")

    def child(ids: list[int], leaf: list[bool], i: int) -> int:
        limit = leaf_count if leaf[i] else n
        if not 0 <= ids[i] < limit:
            raise ctx.error(f"node {i} points to {'leaf' if leaf[i] else 'node'} {ids[i]} of "
                            f"{limit}")
        return n + ids[i] if leaf[i] else ids[i]

    member_rows = np.cumsum([m == MEMBER for m in modes]) - 1
    values = np.concatenate([np.where(np.asarray(modes) == MEMBER, member_rows, splits)
                             if n else splits, np.zeros(leaf_count)])
    roots = []
    for r in (int(v) for v in attrs["tree_roots"]):
        if not 0 <= r < n:
            raise ctx.error(f"tree root {r} is not a node (there are {n})")
        degenerate = true_leaf[r] and false_leaf[r] and true_ids[r] == false_ids[r]
        roots.append(child(true_ids, true_leaf, r) if degenerate else r)
    missing = attrs.get("nodes_missing_value_tracks_true")
    missing = [int(m) for m in missing] if missing is not None and len(missing) else [0] * n
    post = int(attrs.get("post_transform", 0))
    aggregate = int(attrs.get("aggregate_function", 1))
    if post not in POST_TRANSFORM_CODES or aggregate not in _AGGREGATE_CODES:
        raise ctx.error(f"post_transform {post} / aggregate_function {aggregate} unknown")
    return ctx.op(
        "TreeEnsemble", x,
        nodes_featureids=[int(f) for f in attrs["nodes_featureids"]] + [0] * leaf_count,
        nodes_modes=modes + [LEAF] * leaf_count,
        nodes_values=_thresholds(values, x),
        nodes_truenodeids=[child(true_ids, true_leaf, i) for i in range(n)]
        + list(range(n, n + leaf_count)),
        nodes_falsenodeids=[child(false_ids, false_leaf, i) for i in range(n)]
        + list(range(n, n + leaf_count)),
        nodes_missing_value_tracks_true=missing + [0] * leaf_count,
        tree_roots=roots, membership=_membership(ctx, attrs, modes.count(MEMBER)),
        leaf_nodeids=list(range(n, n + leaf_count)), leaf_targetids=targets,
        leaf_weights=weights, n_targets=int(attrs["n_targets"]),
        aggregate_function=_AGGREGATE_CODES[aggregate],
        post_transform=POST_TRANSFORM_CODES[post], output_dtype=x.type.dtype)
