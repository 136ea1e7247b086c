"""Small ONNX models whose values depend on the sizes of their inputs, for tests of symbolic
modules: what a static compile folds into constants and a symbolic one computes from the
sizes at run time."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper


def positions_model(reshape: bool = False) -> onnx.ModelProto:
    """``y = x + sin(log(1 + arange(seq)) / seq)`` over ``x: float32[batch, seq]``,
    broadcast over the batch: the table depends on ``seq`` only (T5's relative-position
    buckets and rotary tables are built this way), each element on its value too. With
    ``reshape``, a second input ``z: float32[rows, 3]`` reshaped to ``[2, -1]`` as output
    ``r``: a relation between sizes (``rows * 3`` even) the model needs."""
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"])]
    consts = [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
              helper.make_tensor("one", TensorProto.INT64, [], [1]),
              helper.make_tensor("axes", TensorProto.INT64, [1], [0]),
              helper.make_tensor("onef", TensorProto.FLOAT, [], [1.0])]
    nodes = [helper.make_node("Shape", ["x"], ["shape"], start=1, end=2),
             helper.make_node("Squeeze", ["shape", "axes"], ["n"]),
             helper.make_node("Range", ["zero", "n", "one"], ["pos"]),
             helper.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["posf", "onef"], ["p1"]),
             helper.make_node("Log", ["p1"], ["lg"]),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["lg", "nf"], ["m"]),
             helper.make_node("Sin", ["m"], ["table"]),
             helper.make_node("Add", ["x", "table"], ["y"])]
    if reshape:
        inputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["rows", 3]))
        outputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, None]))
        consts.append(helper.make_tensor("two_rows", TensorProto.INT64, [2], [2, -1]))
        nodes.append(helper.make_node("Reshape", ["z", "two_rows"], ["r"]))
    graph = helper.make_graph(nodes, "positions", inputs, outputs, initializer=consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def positions_expected(x: np.ndarray) -> np.ndarray:
    """``y`` of :func:`positions_model` in numpy."""
    seq = x.shape[1]
    table = np.sin(np.log1p(np.arange(seq, dtype=np.float32)) / np.float32(seq))
    return (x + table).astype(np.float32)
