"""Small float models to quantize in tests (``tessera.quantize``, both schemes)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def float_cnn(rng: np.random.Generator) -> onnx.ModelProto:
    """Conv -> Relu -> Conv -> Relu -> MaxPool -> Flatten -> Gemm -> Relu -> MatMul + Add."""
    inits = {
        "w1": rng.standard_normal((8, 3, 3, 3)) * 0.3, "b1": rng.standard_normal(8) * 0.1,
        "w2": rng.standard_normal((16, 8, 3, 3)) * 0.2, "b2": rng.standard_normal(16) * 0.1,
        "w3": rng.standard_normal((24, 16 * 4 * 4)) * 0.1, "b3": rng.standard_normal(24) * 0.1,
        "w4": rng.standard_normal((24, 5)) * 0.3, "b4": rng.standard_normal(5) * 0.1,
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p"], name="pool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["g"], name="fc1", transB=1),
        helper.make_node("Relu", ["g"], ["r3"], name="relu3"),
        helper.make_node("MatMul", ["r3", "w4"], ["m"], name="fc2"),
        helper.make_node("Add", ["m", "b4"], ["y"], name="fc2_bias"),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])],
        [numpy_helper.from_array(a.astype(np.float32), n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # onnxruntime reads IR versions up to 13
    onnx.checker.check_model(model)
    return model
