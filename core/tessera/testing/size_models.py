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


#: Heads of :func:`relative_bias_model` and buckets of its table.
BIAS_HEADS, BIAS_BUCKETS = 4, 8


def _bias_table() -> np.ndarray:
    return (np.arange(BIAS_BUCKETS * BIAS_HEADS, dtype=np.float32).reshape(
        BIAS_BUCKETS, BIAS_HEADS) * np.float32(0.25) - np.float32(3.0))


def relative_bias_model() -> onnx.ModelProto:
    """A T5-style attention bias in miniature, as Hugging Face exports it with symbolic
    sizes: ``y[b, h, i, j] = x[b, h, i, j] + table[bucket(j - i), h]`` where ``mask[b, j]``
    is non-zero, else ``-1e9``, over ``x: float32[batch, 4, seq, seq]`` and ``mask:
    int64[batch, seq]``. ``bucket(d) = min(int(log(|d| + 1) * 2), 7)`` is computed from
    ``Range``s of the sizes (a transcendental per element), then gathered from an 8 x 4 table
    (a row of one value per head); the mask is read through ``Gather`` of the flattened mask
    at ``Range(seq) + Range(batch) * seq`` (a ``Range`` of its own, as exporters write it)."""
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                            ["batch", BIAS_HEADS, "seq", "seq"]),
              helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                             ["batch", BIAS_HEADS, "seq", "seq"])]
    consts = [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
              helper.make_tensor("one", TensorProto.INT64, [], [1]),
              helper.make_tensor("ax0", TensorProto.INT64, [1], [0]),
              helper.make_tensor("ax1", TensorProto.INT64, [1], [1]),
              helper.make_tensor("ax12", TensorProto.INT64, [2], [1, 2]),
              helper.make_tensor("flat", TensorProto.INT64, [1], [-1]),
              helper.make_tensor("onef", TensorProto.FLOAT, [], [1.0]),
              helper.make_tensor("twof", TensorProto.FLOAT, [], [2.0]),
              helper.make_tensor("last", TensorProto.INT64, [], [BIAS_BUCKETS - 1]),
              helper.make_tensor("neg", TensorProto.FLOAT, [], [-1e9]),
              helper.make_tensor("table", TensorProto.FLOAT, [BIAS_BUCKETS, BIAS_HEADS],
                                 _bias_table().reshape(-1).tolist())]
    nodes = [helper.make_node("Shape", ["mask"], ["bs"], start=0, end=1),
             helper.make_node("Squeeze", ["bs", "ax0"], ["nb"]),
             helper.make_node("Shape", ["mask"], ["ss"], start=1, end=2),
             helper.make_node("Squeeze", ["ss", "ax0"], ["ns"]),
             helper.make_node("Range", ["zero", "ns", "one"], ["pos"]),
             # the bucket of j - i: costly, from the sizes only
             helper.make_node("Unsqueeze", ["pos", "ax0"], ["row"]),
             helper.make_node("Unsqueeze", ["pos", "ax1"], ["col"]),
             helper.make_node("Sub", ["row", "col"], ["rel"]),
             helper.make_node("Abs", ["rel"], ["dist"]),
             helper.make_node("Cast", ["dist"], ["distf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["distf", "onef"], ["d1"]),
             helper.make_node("Log", ["d1"], ["lg"]),
             helper.make_node("Mul", ["lg", "twof"], ["scaled"]),
             helper.make_node("Cast", ["scaled"], ["bi"], to=TensorProto.INT64),
             helper.make_node("Min", ["bi", "last"], ["bucket"]),
             helper.make_node("Gather", ["table", "bucket"], ["picked"], axis=0),
             helper.make_node("Transpose", ["picked"], ["bias"], perm=[2, 0, 1]),
             # the mask through the flattened gather of HF's index functions
             helper.make_node("Range", ["zero", "nb", "one"], ["bpos"]),
             helper.make_node("Mul", ["bpos", "ns"], ["boff"]),
             helper.make_node("Unsqueeze", ["boff", "ax1"], ["bcol"]),
             helper.make_node("Range", ["zero", "ns", "one"], ["kpos"]),
             helper.make_node("Unsqueeze", ["kpos", "ax0"], ["krow"]),
             helper.make_node("Add", ["bcol", "krow"], ["idx"]),
             helper.make_node("Reshape", ["mask", "flat"], ["mflat"]),
             helper.make_node("Gather", ["mflat", "idx"], ["m"], axis=0),
             helper.make_node("Cast", ["m"], ["keep"], to=TensorProto.BOOL),
             helper.make_node("Unsqueeze", ["keep", "ax12"], ["keep4"]),
             helper.make_node("Add", ["x", "bias"], ["scores"]),
             helper.make_node("Where", ["keep4", "scores", "neg"], ["y"])]
    graph = helper.make_graph(nodes, "relative_bias", inputs, outputs, initializer=consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def relative_bias_expected(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``y`` of :func:`relative_bias_model` in numpy."""
    seq = x.shape[-1]
    pos = np.arange(seq)
    dist = np.abs(pos[None, :] - pos[:, None]).astype(np.float32)
    scaled = (np.log(dist + np.float32(1.0)) * np.float32(2.0)).astype(np.float32)
    bucket = np.minimum(scaled.astype(np.int64), BIAS_BUCKETS - 1)
    bias = _bias_table()[bucket].transpose(2, 0, 1)
    keep = (mask != 0)[:, None, None, :]
    return np.where(keep, x + bias, np.float32(-1e9)).astype(np.float32)
