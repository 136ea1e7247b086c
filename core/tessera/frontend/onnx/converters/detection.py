"""ONNX converters: object detection post-processing (``NonMaxSuppression``).

The number of boxes ``NonMaxSuppression`` selects depends on its input values, which the
static-shape IR cannot express: like ``NonZero``, the node imports when every operand is a
compile-time constant (it folds to the selected indices) and is refused otherwise, naming the
graph inputs to freeze.
"""

from __future__ import annotations

from typing import Any

from tessera.errors import NeedsConstantError
from tessera.frontend.onnx.context import ConvertContext, graph_inputs_feeding
from tessera.frontend.onnx.registry import converter
from tessera.ir.graph import Value
from tessera.ops.detection import check_nms_types

_OPERANDS = ("boxes", "scores", "max_output_boxes_per_class", "iou_threshold",
             "score_threshold")


@converter("NonMaxSuppression", since=10)
def convert_non_max_suppression(ctx: ConvertContext, inputs: list[Value | None],
                                attrs: dict[str, Any]) -> Value:
    """Opsets 10 and 11 (same semantics): folded on constant operands."""
    operands = (list(inputs) + [None] * 5)[:5]
    boxes, scores = operands[0], operands[1]
    if boxes is None or scores is None:
        raise ctx.error("inputs boxes and scores are required")
    center_point_box = int(attrs.get("center_point_box", 0))
    check_nms_types(boxes.type, scores.type,
                    tuple(v.type if v is not None else None for v in operands[2:]),
                    center_point_box)
    variable = [(name, v) for name, v in zip(_OPERANDS, operands)
                if v is not None and v.data is None]
    if variable:
        deps = sorted(set().union(*(graph_inputs_feeding(ctx.graph, v) for _, v in variable)))
        names = ", ".join(name for name, _ in variable)
        raise NeedsConstantError(
            f"node {ctx.node_name!r} ({ctx.op_type}): the output length (the number of selected "
            f"boxes) depends on input values, which the static-shape IR cannot express; it "
            f"imports only when {names} {'is' if len(variable) == 1 else 'are'} known at "
            f"compile time (depends on graph input(s) {', '.join(deps) or '?'}; bind them with "
            f"freeze_inputs={{name: array}})", deps)
    return ctx.node("NonMaxSuppression", operands, {"center_point_box": center_point_box},
                    num_outputs=1)[0]
