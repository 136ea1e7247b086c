"""group_flops: two operations per multiply-add of every product, float or integer."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tessera.frontend.onnx.importer import import_onnx
from tessera.kernel.flops import group_flops


def _imported(node, inputs, output, inits):
    graph = helper.make_graph([node], "g", inputs, [output], inits)
    return import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_integer_products_count_their_multiply_adds():
    rng = np.random.default_rng(0)
    a = helper.make_tensor_value_info("a", TensorProto.UINT8, [3, 5, 40])
    w = numpy_helper.from_array(rng.integers(-128, 128, (40, 24)).astype(np.int8), "w")
    fn = _imported(helper.make_node("MatMulInteger", ["a", "w"], ["y"]), [a],
                   helper.make_tensor_value_info("y", TensorProto.INT32, [3, 5, 24]), [w])
    assert group_flops(fn.nodes) == 2 * 3 * 5 * 24 * 40
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 6, 9, 9])
    k = numpy_helper.from_array(rng.integers(-128, 128, (8, 3, 3, 3)).astype(np.int8), "k")
    fn = _imported(helper.make_node("ConvInteger", ["x", "k"], ["y"], group=2), [x],
                   helper.make_tensor_value_info("y", TensorProto.INT32, [1, 8, 7, 7]), [k])
    assert group_flops(fn.nodes) == 2 * 8 * 7 * 7 * 3 * 3 * 3
    # an elementwise op: one per output element
    fn = _imported(helper.make_node("Relu", ["x"], ["y"]),
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7])],
                   helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 7]), [])
    assert group_flops(fn.nodes) == 14
