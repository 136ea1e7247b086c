"""Ops: object detection post-processing (``NonMaxSuppression``).

The number of boxes ``NonMaxSuppression`` selects depends on the input *values*, so the op is
registered for constant folding only (as ``NonZero`` and ``Unique`` are): its ``infer`` checks
the operands and then refuses non-constant use. :func:`non_max_suppression` is the standalone
numpy implementation a run-time evaluator of data-dependent shapes can call directly.
"""

from __future__ import annotations

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import Attr, OpPattern, register_op

_SCALAR_OPERANDS = ("max_output_boxes_per_class", "iou_threshold", "score_threshold")


def check_nms_types(boxes: TensorType, scores: TensorType,
                    scalars: tuple[TensorType | None, ...] = (),
                    center_point_box: int = 0) -> None:
    """Raise :class:`OpError` unless the operand types fit ONNX ``NonMaxSuppression``:
    ``boxes`` float ``[batches, boxes, 4]``, ``scores`` float ``[batches, classes, boxes]``,
    the optional scalars (max_output_boxes_per_class int64, iou_threshold, score_threshold
    float) with at most one element, ``center_point_box`` 0 or 1."""
    if center_point_box not in (0, 1):
        raise OpError(f"center_point_box must be 0 or 1, got {center_point_box}")
    if not boxes.dtype.is_float or not scores.dtype.is_float:
        raise OpError(f"boxes and scores must be float tensors, got {boxes} and {scores}")
    if boxes.ndim != 3 or boxes.shape[2] != 4:
        raise OpError(f"boxes must have shape [num_batches, num_boxes, 4], got {boxes}")
    if scores.ndim != 3 or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise OpError(f"scores must have shape [num_batches, num_classes, num_boxes] = "
                      f"[{boxes.shape[0]}, C, {boxes.shape[1]}] for boxes {boxes}, got {scores}")
    for name, t in zip(_SCALAR_OPERANDS, scalars):
        if t is None:
            continue
        if t.size > 1:
            raise OpError(f"{name} must be a scalar (or a one-element tensor), got {t}")
        want_int = name == "max_output_boxes_per_class"
        if (t.dtype.is_int and t.dtype != DType.bool) != want_int or (
                not want_int and not t.dtype.is_float):
            raise OpError(f"{name} must be {'an int64' if want_int else 'a float'} tensor, "
                          f"got {t}")


def _extent(boxes: np.ndarray, center_point_box: int) -> tuple[np.ndarray, ...]:
    """``(y_min, x_min, y_max, x_max)`` of each box of ``boxes`` ``[n, 4]``.

    Corner boxes ``[y1, x1, y2, x2]`` may give either corner pair first (flipped corners);
    center boxes are ``[x_center, y_center, width, height]``."""
    if center_point_box == 0:
        return (np.minimum(boxes[:, 0], boxes[:, 2]), np.minimum(boxes[:, 1], boxes[:, 3]),
                np.maximum(boxes[:, 0], boxes[:, 2]), np.maximum(boxes[:, 1], boxes[:, 3]))
    half_w, half_h = boxes[:, 2] / 2, boxes[:, 3] / 2
    return (boxes[:, 1] - half_h, boxes[:, 0] - half_w,
            boxes[:, 1] + half_h, boxes[:, 0] + half_w)


def _suppressed(extent: tuple[np.ndarray, ...], area: np.ndarray, top: int, rest: np.ndarray,
                iou_threshold: np.ndarray) -> np.ndarray:
    """Which boxes of ``rest`` (indices) overlap box ``top`` with IoU above the threshold.

    Boxes that do not intersect, and degenerate boxes (area <= 0), never suppress."""
    y0, x0, y1, x1 = extent
    ix = np.minimum(x1[top], x1[rest]) - np.maximum(x0[top], x0[rest])
    iy = np.minimum(y1[top], y1[rest]) - np.maximum(y0[top], y0[rest])
    inter = ix * iy
    union = area[rest] + area[top] - inter
    ok = (ix > 0) & (iy > 0) & (inter > 0) & (area[rest] > 0) & (area[top] > 0) & (union > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = inter / np.where(ok, union, 1)
    return ok & (iou > iou_threshold)


def _select_class(extent: tuple[np.ndarray, ...], area: np.ndarray, scores: np.ndarray,
                  max_output: int, iou_threshold: np.ndarray,
                  score_threshold: np.ndarray | None) -> list[int]:
    """Greedy NMS of one (batch, class): the kept box indices, best score first."""
    candidates = np.arange(scores.shape[0])
    if score_threshold is not None:
        candidates = candidates[scores > score_threshold]
    # best score first; equal scores keep the lower box index first
    remaining = candidates[np.argsort(-scores[candidates], kind="stable")]
    kept: list[int] = []
    while remaining.size and len(kept) < max_output:
        top, rest = int(remaining[0]), remaining[1:]
        kept.append(top)
        remaining = rest[~_suppressed(extent, area, top, rest, iou_threshold)]
    return kept


def non_max_suppression(boxes: np.ndarray, scores: np.ndarray, max_output: int,
                        iou_threshold: float, score_threshold: float | None,
                        center_point_box: int = 0) -> np.ndarray:
    """ONNX ``NonMaxSuppression``: the boxes greedy non-maximum suppression keeps.

    ``boxes`` is ``[num_batches, num_boxes, 4]`` (corners ``[y1, x1, y2, x2]`` in either order
    when ``center_point_box`` is 0, ``[x_center, y_center, width, height]`` when 1), ``scores``
    is ``[num_batches, num_classes, num_boxes]``. Per batch and class, boxes whose score is
    strictly greater than ``score_threshold`` (all boxes when it is None) are visited best score
    first (equal scores: lower index first); a box is kept unless a kept box overlaps it with
    IoU strictly greater than ``iou_threshold``, until ``max_output`` boxes are kept (0 or less:
    none). Returns int64 ``[num_selected, 3]`` rows ``(batch, class, box)``, by batch, then
    class, then selection order. IoU is computed in the boxes' element type.
    """
    boxes, scores = np.asarray(boxes), np.asarray(scores)
    check_nms_types(TensorType.of(boxes), TensorType.of(scores), (), int(center_point_box))
    dtype = np.result_type(boxes.dtype, np.float32)
    iou = np.asarray(iou_threshold, dtype=dtype)
    score = None if score_threshold is None else np.asarray(score_threshold, dtype=scores.dtype)
    rows: list[tuple[int, int, int]] = []
    if max_output > 0:
        for b in range(boxes.shape[0]):
            extent = _extent(boxes[b].astype(dtype, copy=False), int(center_point_box))
            area = (extent[2] - extent[0]) * (extent[3] - extent[1])
            for c in range(scores.shape[1]):
                kept = _select_class(extent, area, scores[b, c], int(max_output), iou, score)
                rows.extend((b, c, k) for k in kept)
    return np.array(rows, dtype=np.int64).reshape(len(rows), 3)


def _scalar(x: np.ndarray | None) -> np.ndarray | None:
    """The one element of an optional scalar operand (None when omitted or empty)."""
    if x is None or np.asarray(x).size == 0:
        return None
    return np.asarray(x).reshape(-1)[0]


def _nms_infer(boxes: TensorType, scores: TensorType, *scalars: TensorType | None,
               center_point_box: int) -> TensorType:
    check_nms_types(boxes, scores, scalars, center_point_box)
    raise OpError("the output length (the number of selected boxes) depends on input values; "
                  "the op can only be folded on constants with static shapes")


@register_op("NonMaxSuppression", attrs={"center_point_box": Attr.int(0)}, inputs=(2, 5),
             infer=_nms_infer, pattern=OpPattern.OPAQUE)
def non_max_suppression_op(boxes: np.ndarray, scores: np.ndarray,
                           max_output_boxes_per_class: np.ndarray | None = None,
                           iou_threshold: np.ndarray | None = None,
                           score_threshold: np.ndarray | None = None, *,
                           center_point_box: int) -> np.ndarray:
    """Greedy non-maximum suppression per batch and class (see :func:`non_max_suppression`);
    an omitted max_output_boxes_per_class is 0 (no output), an omitted iou_threshold is 0, an
    omitted score_threshold keeps every box."""
    max_output = _scalar(max_output_boxes_per_class)
    iou = _scalar(iou_threshold)
    return non_max_suppression(boxes, scores, 0 if max_output is None else int(max_output),
                               0.0 if iou is None else iou, _scalar(score_threshold),
                               center_point_box)


__all__ = ["check_nms_types", "non_max_suppression", "non_max_suppression_op"]
