"""Ops: tree ensembles of ``ai.onnx.ml`` (``TreeEnsemble``: regression, ``TreeEnsembleClassifier``).

Every ONNX form (TreeEnsembleRegressor/Classifier opsets 1 and 3, TreeEnsemble opset 5) is
converted to one flat form: the nodes of all trees in one table, children as indices into it,
a leaf as a node of mode ``LEAF`` whose children are itself, and the leaf weights as
``(leaf node, target, weight)`` triples. Evaluation is vectorised: every (sample, tree) pair
walks down one level per step (one numpy pass per level of the deepest tree), then the reached
leaves' weights are gathered and aggregated.

Branch modes (``nodes_modes``): 0 ``x <= v``, 1 ``x < v``, 2 ``x >= v``, 3 ``x > v``, 4 ``x == v``,
5 ``x != v``, 6 ``x`` in the set of row ``v`` of ``membership`` (NaN-padded), 7 leaf. A NaN
feature goes to the true branch where ``nodes_missing_value_tracks_true`` is set (else it
follows the comparison, which NaN fails except ``!=``).

Aggregation and post-transforms follow onnxruntime (the reference for this domain), including
its binary-classifier conventions; see :func:`_classify`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import DType, TensorType
from tessera.ops.ml_transforms import (
    apply_post_transform,
    check_post_transform,
    single_score_transform,
    two_class_scores,
)
from tessera.ops.registry import Attr, register_op

LEAF = 7
MEMBER = 6
AGGREGATES = ("SUM", "AVERAGE", "MIN", "MAX")
#: Elements of the per-chunk gather ([samples, trees, targets]) before trees are split.
_CHUNK_ELEMENTS = 1 << 22

_TREE_ATTRS: dict[str, Attr] = {
    "nodes_featureids": Attr.ints(), "nodes_modes": Attr.ints(), "nodes_values": Attr.tensor(),
    "nodes_truenodeids": Attr.ints(), "nodes_falsenodeids": Attr.ints(),
    "nodes_missing_value_tracks_true": Attr.ints(), "tree_roots": Attr.ints(),
    "membership": Attr.tensor(np.zeros((0, 0))), "leaf_nodeids": Attr.ints(),
    "leaf_targetids": Attr.ints(), "leaf_weights": Attr.tensor(),
    "base_values": Attr.floats(None), "post_transform": Attr.str("NONE")}


def _check_trees(op: str, x: TensorType, n_targets: int, a: dict[str, Any]) -> int:
    """Validate the flat tree tables against X; the batch size."""
    if not (x.dtype.is_float or x.dtype.is_int) or x.ndim not in (1, 2):
        raise OpError(f"{op}: X must be a numeric tensor [N, F] or [F], got {x}")
    check_post_transform(a["post_transform"], op)
    features = x.shape[-1]
    modes = np.asarray(a["nodes_modes"], np.int64)
    n = modes.size
    names = ("nodes_featureids", "nodes_truenodeids", "nodes_falsenodeids",
             "nodes_missing_value_tracks_true")
    for name in names:
        if len(a[name]) != n:
            raise OpError(f"{op}: {name} has {len(a[name])} entries; nodes_modes has {n}")
    if np.asarray(a["nodes_values"]).shape != (n,):
        raise OpError(f"{op}: nodes_values must hold {n} values")
    if n and (modes.min() < 0 or modes.max() > LEAF):
        raise OpError(f"{op}: nodes_modes must be in [0, {LEAF}]")
    branch = modes != LEAF
    feats = np.asarray(a["nodes_featureids"], np.int64)[branch]
    if feats.size and (feats.min() < 0 or feats.max() >= features):
        raise OpError(f"{op}: a node reads feature {int(feats.max())}; X has {features} "
                      f"features ({x})")
    for name in ("nodes_truenodeids", "nodes_falsenodeids", "tree_roots", "leaf_nodeids"):
        ids = np.asarray(a[name], np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            raise OpError(f"{op}: {name} refers to node {int(ids.max())} of {n}")
    if not a["tree_roots"]:
        raise OpError(f"{op}: the ensemble has no tree")
    member = modes == MEMBER
    if member.any():
        rows = np.asarray(a["nodes_values"])[member].astype(np.int64)
        if rows.min() < 0 or rows.max() >= np.asarray(a["membership"]).shape[0]:
            raise OpError(f"{op}: a BRANCH_MEMBER node has no set of members")
    k = len(a["leaf_nodeids"])
    if len(a["leaf_targetids"]) != k or np.asarray(a["leaf_weights"]).shape != (k,):
        raise OpError(f"{op}: leaf_nodeids, leaf_targetids and leaf_weights differ in length")
    targets = np.asarray(a["leaf_targetids"], np.int64)
    if targets.size and (targets.min() < 0 or targets.max() >= n_targets):
        raise OpError(f"{op}: a leaf weight goes to target/class {int(targets.max())}; there "
                      f"are {n_targets}")
    return 1 if x.ndim == 1 else x.shape[0]


def _compare(mode: np.ndarray, v: np.ndarray, t: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.select([mode == 0, mode == 1, mode == 2, mode == 3, mode == 4],
                         [v <= t, v < t, v >= t, v > t, v == t], default=v != t)


def _reached_leaves(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    """The leaf node each (sample, tree) pair reaches: [N, trees]."""
    rows = (x.reshape(1, -1) if x.ndim == 1 else x)
    xv = rows.astype(np.float64 if rows.dtype == np.float64 else np.float32).astype(np.float64)
    modes = np.asarray(a["nodes_modes"], np.int64)
    feats = np.asarray(a["nodes_featureids"], np.int64)
    values = np.asarray(a["nodes_values"], np.float64)
    true_ids = np.asarray(a["nodes_truenodeids"], np.int64)
    false_ids = np.asarray(a["nodes_falsenodeids"], np.int64)
    missing = np.asarray(a["nodes_missing_value_tracks_true"], bool)
    membership = np.asarray(a["membership"], np.float64)
    idx = np.broadcast_to(np.asarray(a["tree_roots"], np.int64),
                          (xv.shape[0], len(a["tree_roots"]))).copy()
    r, c = np.nonzero(modes[idx] != LEAF)
    for _ in range(modes.size + 1):
        if r.size == 0:
            return idx
        nodes = idx[r, c]
        v = xv[r, feats[nodes]]
        mode = modes[nodes]
        cond = _compare(mode, v, values[nodes])
        is_member = mode == MEMBER
        if is_member.any():
            sets = membership[values[nodes[is_member]].astype(np.int64)]
            cond[is_member] = (sets == v[is_member, None]).any(axis=1)
        cond |= missing[nodes] & np.isnan(v)
        nxt = np.where(cond, true_ids[nodes], false_ids[nodes])
        idx[r, c] = nxt
        keep = modes[nxt] != LEAF
        r, c = r[keep], c[keep]
    raise ValueError("the trees have a cycle (a path longer than the number of nodes)")


def _aggregate(x: np.ndarray, a: dict[str, Any], n_targets: int,
               aggregate: str) -> tuple[np.ndarray, np.ndarray]:
    """Per sample and target: the aggregated leaf weights [N, K] (float64) and whether any
    reached leaf gave that target a weight [N, K]."""
    leaves = _reached_leaves(x, a)
    n_nodes = len(a["nodes_modes"])
    leaf_nodes = np.asarray(a["leaf_nodeids"], np.int64)
    targets = np.asarray(a["leaf_targetids"], np.int64)
    weights = np.asarray(a["leaf_weights"], np.float64)
    unique = np.unique(leaf_nodes)
    row_of = np.full(n_nodes, unique.size, np.int64)  # the last row: a leaf without weights
    row_of[unique] = np.arange(unique.size)
    rows = row_of[leaf_nodes]
    hits = np.zeros((unique.size + 1, n_targets), bool)
    hits[rows, targets] = True
    if aggregate in ("SUM", "AVERAGE"):
        table = np.zeros((unique.size + 1, n_targets))
        np.add.at(table, (rows, targets), weights)
    else:
        fill = np.inf if aggregate == "MIN" else -np.inf
        table = np.full((unique.size + 1, n_targets), fill)
        (np.minimum if aggregate == "MIN" else np.maximum).at(table, (rows, targets), weights)
    n, trees = leaves.shape
    step = max(1, _CHUNK_ELEMENTS // max(1, n * n_targets))
    start_value = {"MIN": np.inf, "MAX": -np.inf}.get(aggregate, 0.0)
    scores = np.full((n, n_targets), start_value)
    has = np.zeros((n, n_targets), bool)
    for start in range(0, trees, step):
        reached = row_of[leaves[:, start:start + step]]
        gathered = table[reached]
        has |= hits[reached].any(axis=1)
        if aggregate in ("SUM", "AVERAGE"):
            scores += gathered.sum(axis=1)
        elif aggregate == "MIN":
            scores = np.minimum(scores, gathered.min(axis=1))
        else:
            scores = np.maximum(scores, gathered.max(axis=1))
    if aggregate not in ("SUM", "AVERAGE"):
        scores = np.where(has, scores, 0.0)
    return scores, has


# -- regression ---------------------------------------------------------------------------------

def _tree_ensemble_infer(x: TensorType, *, n_targets: int, aggregate_function: str,
                         output_dtype: DType, **a: Any) -> TensorType:
    if aggregate_function not in AGGREGATES:
        raise OpError(f"TreeEnsemble: aggregate_function must be one of "
                      f"{', '.join(AGGREGATES)}, got {aggregate_function!r}")
    if n_targets < 1:
        raise OpError(f"TreeEnsemble: n_targets must be positive, got {n_targets}")
    n = _check_trees("TreeEnsemble", x, n_targets, a)
    return TensorType((n, n_targets), output_dtype)


@register_op("TreeEnsemble", attrs={
    **_TREE_ATTRS, "n_targets": Attr.int(), "aggregate_function": Attr.str("SUM"),
    "output_dtype": Attr.dtype(DType.float32)}, infer=_tree_ensemble_infer)
def tree_ensemble(x: np.ndarray, *, n_targets: int, aggregate_function: str,
                  output_dtype: DType, **a: Any) -> np.ndarray:
    """Tree-ensemble regression [N, n_targets]: the reached leaves' weights aggregated per
    target (SUM, AVERAGE over the trees, MIN, MAX; a target no leaf reached is 0), plus
    ``base_values``, then the post-transform. As in onnxruntime, one target takes a single
    base value and only PROBIT of the post-transforms; several targets take base values only
    when there is one per target."""
    scores, _ = _aggregate(x, a, n_targets, aggregate_function)
    if aggregate_function == "AVERAGE":
        scores = scores / len(a["tree_roots"])
    base = a["base_values"] or []
    if n_targets == 1:
        scores = scores + (base[0] if len(base) == 1 else 0.0)
        out = single_score_transform(scores, a["post_transform"]) \
            if a["post_transform"] == "PROBIT" else scores
    else:
        if len(base) == n_targets:
            scores = scores + np.asarray(base, np.float64)
        out = scores if a["post_transform"] == "NONE" else \
            apply_post_transform(scores, a["post_transform"])
    return np.asarray(out).astype(output_dtype.numpy)


# -- classification -----------------------------------------------------------------------------

def _classifier_infer(x: TensorType, *, classlabels_ints: list[int],
                      **a: Any) -> tuple[TensorType, TensorType]:
    if len(classlabels_ints) < 2:
        raise OpError(f"TreeEnsembleClassifier: {len(classlabels_ints)} class label(s); two or "
                      f"more are required")
    n = _check_trees("TreeEnsembleClassifier", x, len(classlabels_ints), a)
    return TensorType((n,), DType.int64), TensorType((n, len(classlabels_ints)), DType.float32)


@register_op("TreeEnsembleClassifier", attrs={**_TREE_ATTRS, "classlabels_ints": Attr.ints()},
             infer=_classifier_infer)
def tree_ensemble_classifier(x: np.ndarray, *, classlabels_ints: list[int],
                             **a: Any) -> tuple[np.ndarray, np.ndarray]:
    """Labels [N] (int64) and class scores [N, C] (float32) of a tree-ensemble classifier:
    the reached leaves' class weights summed, then finished as :func:`_classify` says."""
    scores, has = _aggregate(x, a, len(classlabels_ints), "SUM")
    weights = np.asarray(a["leaf_weights"], np.float64)
    binary = len(set(a["leaf_targetids"])) == 1
    return _classify(scores, has, np.asarray(classlabels_ints, np.int64),
                     list(a["base_values"] or []), a["post_transform"], binary,
                     bool((weights >= 0).all()))


def _classify(s: np.ndarray, has: np.ndarray, labels: np.ndarray, base: list[float],
              transform: str, binary: bool, all_positive: bool
              ) -> tuple[np.ndarray, np.ndarray]:
    """onnxruntime's classifier finish. More than two classes: base values added, the label of
    the first largest score among the classes that have one, all scores post-transformed.
    Two classes (``binary``: every leaf weight goes to one class):

    * two base values: where class 1 has a score, it becomes ``base[1] + score0`` and class 0
      its negation, else each class adds its base value; one base value: class 0 adds it;
    * the positive score is class 1's where it has one, else class 0's; with ``binary`` the
      label is ``labels[1]`` when it exceeds 0.5 (all weights positive) or 0 (mixed), else
      ``labels[0]``; without, the label is 1 or 0 (onnxruntime's literal defaults);
    * rows that kept two scores are post-transformed; rows left with one are expanded as
      :func:`~tessera.ops.ml_transforms.two_class_scores` says.
    """
    n, classes = s.shape
    if classes > 2:
        k = min(len(base), classes)
        s[:, :k] += np.asarray(base[:k], np.float64)
        has[:, :k] = True
        pick = np.argmax(np.where(has, s, -np.inf), axis=1)
        return labels[pick], apply_post_transform(s, transform)
    s0, s1, h0, h1 = s[:, 0].copy(), s[:, 1].copy(), has[:, 0], has[:, 1]
    two = np.ones(n, bool)
    mode = np.full(n, -1, np.int64)
    if len(base) == 2:
        moved = base[1] + s0
        s0 = np.where(h1, -moved, s0 + base[0])
        s1 = np.where(h1, moved, s1 + base[1])
    elif len(base) == 1:
        s0 = s0 + base[0]
        two = h1.copy()
    elif not base:
        mode[:] = 3
        two = h1.copy()
    positive_score = np.where(two & h1, s1, np.where(h0, s0, 0.0))
    if binary:
        positive = positive_score > (0.5 if all_positive else 0.0)
        mode = np.where(positive, 0, 1) if all_positive else np.where(positive, 2, 3)
        out_labels = np.where(positive, labels[1], labels[0])
    else:
        out_labels = np.where(positive_score > 0, 1, 0).astype(np.int64)
    pair = np.stack([s0, s1], axis=1)
    both = pair if transform == "NONE" else apply_post_transform(pair, transform)
    one = two_class_scores(s0, mode, transform)
    z = np.where(two[:, None], both, one).astype(np.float32)
    return out_labels.astype(np.int64), z


__all__ = ["AGGREGATES", "LEAF", "MEMBER", "tree_ensemble", "tree_ensemble_classifier"]
