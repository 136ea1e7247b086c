"""NonMaxSuppression (tessera.ops.detection) and its ONNX converter, checked against onnxruntime
and onnx's reference evaluator on random boxes, and on hand-made edge cases.

The op's output length depends on input values, so the importer folds it only on constant (or
frozen) operands; ``tessera.compile`` runs it on run-time values in stages (NMS on the host:
tests/runtime/test_staged.py). A small conv detection head ending in NonMaxSuppression, with
its input frozen, is checked end to end.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from optional import require

import tessera
from tessera.errors import ModelImportError, NeedsConstantError, OpError
from tessera.frontend.onnx.importer import import_onnx
from tessera.ir.types import DType, TensorType
from tessera.ops.detection import non_max_suppression
from tessera.ops.registry import get_schema
from tessera.testing.conformance import compile_and_run

ort = require("onnxruntime")

TARGETS = ["ref", "llvm"]
OPERANDS = ("boxes", "scores", "max_output", "iou_threshold", "score_threshold")


def nms_model(operands: list[np.ndarray | None], center_point_box: int | None = 0,
              opset: int = 11, consts: tuple[int, ...] = ()) -> onnx.ModelProto:
    """One NonMaxSuppression node; operand i is an initializer when i is in ``consts``, else a
    graph input (None: omitted)."""
    names = ["" if a is None else OPERANDS[i] for i, a in enumerate(operands)]
    while names and not names[-1]:
        names.pop()
    inputs, inits = [], []
    for i, a in enumerate(operands):
        if a is None:
            continue
        if i in consts:
            inits.append(numpy_helper.from_array(a, OPERANDS[i]))
        else:
            inputs.append(helper.make_tensor_value_info(
                OPERANDS[i], helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)))
    attrs = {} if center_point_box is None else {"center_point_box": center_point_box}
    node = helper.make_node("NonMaxSuppression", names, ["selected"], **attrs)
    out = helper.make_tensor_value_info("selected", TensorProto.INT64, [None, 3])
    graph = helper.make_graph([node], "nms", inputs, [out], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    onnx.checker.check_model(model)
    return model


def feeds_of(model: onnx.ModelProto, operands: list[np.ndarray | None]) -> dict[str, np.ndarray]:
    names = {vi.name for vi in model.graph.input}
    return {OPERANDS[i]: a for i, a in enumerate(operands)
            if a is not None and OPERANDS[i] in names}


def run_tessera(model: onnx.ModelProto, feeds: dict[str, np.ndarray], target: str) -> np.ndarray:
    """Compile with every graph input frozen (the output length depends on them) and run."""
    (out,) = compile_and_run(model, feeds, target, dict(feeds))
    return out


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def run_onnx_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    return ReferenceEvaluator(model).run(None, feeds)[0]


def check_all(operands: list[np.ndarray | None], center_point_box: int | None = 0,
              target: str = "ref", reference: bool = True, opset: int = 11) -> np.ndarray:
    """Tessera against onnxruntime (and onnx's reference evaluator): the same int64 rows."""
    model = nms_model(operands, center_point_box, opset)
    feeds = feeds_of(model, operands)
    got = run_tessera(model, feeds, target)
    want = run_ort(model, feeds)
    assert got.dtype == np.int64 and got.ndim == 2 and got.shape[1] == 3
    np.testing.assert_array_equal(got, want.reshape(-1, 3))
    if reference:
        np.testing.assert_array_equal(got, run_onnx_reference(model, feeds).reshape(-1, 3))
    return got


def scalar(value: float | int, dtype: type = np.float32) -> np.ndarray:
    return np.array([value], dtype=dtype)


def random_boxes(rng: np.random.Generator, batches: int, n: int, center: bool) -> np.ndarray:
    """Boxes that overlap often; corner boxes have their corners flipped at random."""
    if center:
        xy = rng.uniform(0, 4, (batches, n, 2))
        wh = rng.uniform(0.5, 3, (batches, n, 2))
        return np.concatenate([xy, wh], axis=2).astype(np.float32)
    a = rng.uniform(0, 4, (batches, n, 2))
    b = a + rng.uniform(0.5, 3, (batches, n, 2))
    flip = rng.random((batches, n, 1)) < 0.3
    first, second = np.where(flip, b, a), np.where(flip, a, b)
    return np.concatenate([first, second], axis=2).astype(np.float32)


def random_scores(rng: np.random.Generator, batches: int, classes: int, n: int,
                  ties: bool) -> np.ndarray:
    s = rng.uniform(0.01, 1, (batches, classes, n))
    return (np.round(s, 1) if ties else s).astype(np.float32)


# -- random data against onnxruntime and onnx's reference ---------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("center_point_box", [0, 1])
@pytest.mark.parametrize("batches,classes,n", [(1, 1, 6), (2, 3, 25), (3, 2, 40)])
@pytest.mark.parametrize("ties", [False, True])
def test_random(target, center_point_box, batches, classes, n, ties):
    rng = np.random.default_rng(batches * 100 + n + 7 * ties + center_point_box)
    boxes = random_boxes(rng, batches, n, bool(center_point_box))
    scores = random_scores(rng, batches, classes, n, ties)
    for max_out, iou, score in [(5, 0.5, 0.3), (100, 0.2, 0.0), (3, 0.0, 0.6), (n, 0.8, 0.05)]:
        got = check_all([boxes, scores, scalar(max_out, np.int64), scalar(iou), scalar(score)],
                        center_point_box, target)
        assert len(got) <= batches * classes * min(max_out, n)


@pytest.mark.parametrize("opset", [10, 11])
def test_without_score_threshold_and_opset_10(opset):
    rng = np.random.default_rng(3)
    boxes, scores = random_boxes(rng, 2, 20, False), random_scores(rng, 2, 2, 20, True)
    got = check_all([boxes, scores, scalar(4, np.int64), scalar(0.4)], None, opset=opset)
    assert len(got) == 2 * 2 * 4  # no score threshold: every class fills its four places


# -- edge cases ---------------------------------------------------------------------------------

def test_equal_scores_overlapping_boxes():
    """Identical boxes with equal scores: the lowest index is kept, the rest suppressed."""
    boxes = np.tile(np.array([[0, 0, 1, 1]], np.float32), (1, 6, 1))
    scores = np.full((1, 1, 6), 0.9, np.float32)
    got = check_all([boxes, scores, scalar(6, np.int64), scalar(0.5), scalar(0.0)])
    np.testing.assert_array_equal(got, [[0, 0, 0]])


def test_flipped_corners_equal_unflipped():
    rng = np.random.default_rng(11)
    boxes = random_boxes(rng, 1, 30, False)
    scores = random_scores(rng, 1, 2, 30, False)
    unflipped = np.concatenate([np.minimum(boxes[..., :2], boxes[..., 2:]),
                                np.maximum(boxes[..., :2], boxes[..., 2:])], axis=2)
    rest = [scalar(10, np.int64), scalar(0.3), scalar(0.1)]
    np.testing.assert_array_equal(check_all([boxes, scores, *rest]),
                                  check_all([unflipped, scores, *rest]))


def test_center_point_box_matches_corners():
    """A center box ``[xc, yc, w, h]`` selects as its corners ``[yc-h/2, xc-w/2, ...]``."""
    rng = np.random.default_rng(5)
    center = random_boxes(rng, 2, 30, True)
    xc, yc, w, h = (center[..., i] for i in range(4))
    corners = np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=2)
    scores = random_scores(rng, 2, 2, 30, False)
    rest = [scalar(30, np.int64), scalar(0.45), scalar(0.0)]
    np.testing.assert_array_equal(check_all([center, scores, *rest], 1),
                                  check_all([corners, scores, *rest], 0))


@pytest.mark.parametrize("max_out", [0, -3])
def test_zero_or_negative_max_output_selects_nothing(max_out):
    rng = np.random.default_rng(2)
    boxes, scores = random_boxes(rng, 2, 10, False), random_scores(rng, 2, 3, 10, False)
    got = check_all([boxes, scores, scalar(max_out, np.int64), scalar(0.5), scalar(0.0)],
                    reference=max_out == 0)  # onnx's reference evaluator fails on -3
    assert got.shape == (0, 3)


def test_absent_max_output_selects_nothing():
    """ONNX: max_output_boxes_per_class defaults to 0, no output (onnx's reference evaluator
    cannot run the model without it; onnxruntime can)."""
    rng = np.random.default_rng(4)
    boxes, scores = random_boxes(rng, 1, 8, False), random_scores(rng, 1, 1, 8, False)
    got = check_all([boxes, scores], reference=False)
    assert got.shape == (0, 3)


def test_scalar_operands_of_rank_zero():
    rng = np.random.default_rng(8)
    boxes, scores = random_boxes(rng, 1, 12, False), random_scores(rng, 1, 2, 12, False)
    operands = [boxes, scores, np.array(3, np.int64), np.array(0.3, np.float32),
                np.array(0.2, np.float32)]
    check_all(operands, reference=False)  # onnx's reference evaluator indexes them [0]


def test_score_threshold_is_strict():
    boxes = np.array([[[0, 0, 1, 1], [2, 2, 3, 3], [4, 4, 5, 5]]], np.float32)
    scores = np.array([[[0.5, 0.7, 0.4]]], np.float32)
    got = check_all([boxes, scores, scalar(3, np.int64), scalar(0.5), scalar(0.5)])
    np.testing.assert_array_equal(got, [[0, 0, 1]])  # 0.5 is not above 0.5


def test_iou_threshold_is_strict_and_degenerate_boxes_never_suppress():
    # box 1 overlaps box 0 with IoU exactly 1/3 (intersection 1, union 3); box 3 has zero area
    boxes = np.array([[[0, 0, 1, 2], [0, 1, 1, 3], [5, 5, 6, 6], [5, 5, 5, 6]]], np.float32)
    scores = np.array([[[0.9, 0.8, 0.7, 0.6]]], np.float32)
    got = non_max_suppression(boxes, scores, 10, np.float32(1 / 3), None)
    np.testing.assert_array_equal(got, [[0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 0, 3]])
    got = non_max_suppression(boxes, scores, 10, 0.3, None)
    np.testing.assert_array_equal(got, [[0, 0, 0], [0, 0, 2], [0, 0, 3]])
    check_all([boxes, scores, scalar(10, np.int64), scalar(0.3)], None)


def test_standalone_function_rows_and_order():
    """Exact expectations: rows by batch, then class, then descending score."""
    boxes = np.array([[[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]],
                      [[0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 1, 1]]], np.float32)
    scores = np.array([[[0.1, 0.9, 0.5], [0.8, 0.2, 0.3]],
                       [[0.3, 0.3, 0.3], [0.1, 0.2, 0.05]]], np.float32)
    got = non_max_suppression(boxes, scores, 2, 0.5, 0.15, 0)
    np.testing.assert_array_equal(got, [[0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 2],
                                        [1, 0, 0], [1, 1, 1]])
    assert got.dtype == np.int64


# -- refusals -----------------------------------------------------------------------------------

def test_non_constant_use_is_refused_naming_the_inputs():
    rng = np.random.default_rng(1)
    operands = [random_boxes(rng, 1, 5, False), random_scores(rng, 1, 1, 5, False),
                scalar(2, np.int64), scalar(0.5), scalar(0.0)]
    model = nms_model(operands, consts=(2, 3, 4))
    with pytest.raises(NeedsConstantError, match="depends on input values") as e:
        import_onnx(model)  # the importer alone; compile() stages it (test_staged.py)
    assert sorted(e.value.inputs) == ["boxes", "scores"]
    assert "boxes, scores" in str(e.value)


def test_the_op_refuses_type_inference():
    schema = get_schema("NonMaxSuppression")
    types = [TensorType((1, 5, 4), DType.float32), TensorType((1, 2, 5), DType.float32)]
    with pytest.raises(OpError, match="depends on input values"):
        schema.infer_types("nms", types, {"center_point_box": 0})


@pytest.mark.parametrize("boxes_shape,scores_shape,cpb,match", [
    ((1, 5, 3), (1, 1, 5), 0, "num_boxes, 4"),
    ((1, 5, 4), (1, 1, 6), 0, "num_classes, num_boxes"),
    ((2, 5, 4), (1, 1, 5), 0, "num_classes, num_boxes"),
    ((1, 5, 4), (1, 1, 5), 2, "center_point_box must be 0 or 1"),
])
def test_bad_operands(boxes_shape, scores_shape, cpb, match):
    rng = np.random.default_rng(0)
    operands = [rng.random(boxes_shape).astype(np.float32),
                rng.random(scores_shape).astype(np.float32), scalar(2, np.int64)]
    names = ["boxes", "scores", "max_output"]
    node = helper.make_node("NonMaxSuppression", names, ["selected"], center_point_box=cpb)
    graph = helper.make_graph([node], "nms", [], [helper.make_tensor_value_info(
        "selected", TensorProto.INT64, [None, 3])], initializer=[
        numpy_helper.from_array(a, n) for a, n in zip(operands, names)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    with pytest.raises(ModelImportError, match=match) as e:
        tessera.compile(model, target="ref")
    assert "NonMaxSuppression" in str(e.value)


def test_bad_scalar_type():
    rng = np.random.default_rng(0)
    with pytest.raises(ModelImportError, match="max_output_boxes_per_class must be an int64"):
        tessera.compile(nms_model([random_boxes(rng, 1, 4, False),
                                   random_scores(rng, 1, 1, 4, False), scalar(2.0)],
                                  consts=(0, 1, 2)), target="ref")


# -- a detection head ending in NonMaxSuppression ------------------------------------------------

def detection_head(rng: np.random.Generator, classes: int = 3) -> onnx.ModelProto:
    """image [1, 8, 6, 6] -> Conv(3x3) -> Relu -> two 1x1 Conv branches: 4 box offsets and
    ``classes`` logits per cell; boxes = anchors + offsets (Reshape, Transpose), scores =
    Sigmoid(logits) reshaped to [1, classes, 36]; then NonMaxSuppression."""
    cells = 36
    ys, xs = np.meshgrid(np.arange(6, dtype=np.float32), np.arange(6, dtype=np.float32),
                         indexing="ij")
    anchors = np.stack([ys, xs, ys + 2, xs + 2], axis=-1).reshape(1, cells, 4)
    inits = [
        numpy_helper.from_array((rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32),
                                "w_trunk"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32) * 0.1, "b_trunk"),
        numpy_helper.from_array((rng.standard_normal((4, 16, 1, 1)) * 0.2).astype(np.float32),
                                "w_box"),
        numpy_helper.from_array((rng.standard_normal((classes, 16, 1, 1)) * 0.5
                                 ).astype(np.float32), "w_cls"),
        numpy_helper.from_array(anchors.astype(np.float32), "anchors"),
        numpy_helper.from_array(np.array([1, 4, cells], np.int64), "box_shape"),
        numpy_helper.from_array(np.array([1, classes, cells], np.int64), "cls_shape"),
        numpy_helper.from_array(np.array([5], np.int64), "max_out"),
        numpy_helper.from_array(np.array([0.4], np.float32), "iou"),
        numpy_helper.from_array(np.array([0.3], np.float32), "score_thr"),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "w_trunk", "b_trunk"], ["trunk"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["trunk"], ["feat"]),
        helper.make_node("Conv", ["feat", "w_box"], ["box_map"]),
        helper.make_node("Reshape", ["box_map", "box_shape"], ["box_flat"]),
        helper.make_node("Transpose", ["box_flat"], ["offsets"], perm=[0, 2, 1]),
        helper.make_node("Add", ["anchors", "offsets"], ["boxes"]),
        helper.make_node("Conv", ["feat", "w_cls"], ["cls_map"]),
        helper.make_node("Reshape", ["cls_map", "cls_shape"], ["logits"]),
        helper.make_node("Sigmoid", ["logits"], ["scores"]),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_thr"],
                         ["selected"]),
    ]
    graph = helper.make_graph(
        nodes, "head",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 8, 6, 6])],
        [helper.make_tensor_value_info("selected", TensorProto.INT64, [None, 3])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("target", TARGETS)
def test_detection_head_with_frozen_image(target):
    rng = np.random.default_rng(21)
    model = detection_head(rng)
    image = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    got = run_tessera(model, {"image": image}, target)
    want = run_ort(model, {"image": image})
    assert len(want) > 3  # several boxes kept, several classes
    np.testing.assert_array_equal(got, want)


def test_detection_head_with_a_run_time_image_is_refused_by_the_importer():
    """The importer alone refuses run-time NMS; compile() stages it (test_staged.py)."""
    model = detection_head(np.random.default_rng(21))
    with pytest.raises(NeedsConstantError, match="depends on input values") as e:
        import_onnx(model)
    assert e.value.inputs == ["image"]
