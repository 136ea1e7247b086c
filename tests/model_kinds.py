"""One model of each kind ``tessera.compile`` returns, for the tests that check an entry point
with all three: static (Module), symbolic input dimensions (DynamicModule), data-dependent
output shapes (StagedModule)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tessera.plugin.manager import get_backends

TARGET = "llvm" if "llvm" in get_backends() else "ref"
KINDS = ("static", "symbolic", "staged")


def kind_model(kind: str) -> onnx.ModelProto:
    """y = relu(x @ W + B) over x [2, 5, 8] (symbolic: [batch, seq, 8]); the staged one then
    sums the positive entries of y, selected with NonZero (a run-time count)."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "B")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]),
             helper.make_node("Add", ["h", "B"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    dims: list[int | str] = ["batch", "seq", 8] if kind == "symbolic" else [2, 5, 8]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims[:2] + [16])]
    if kind == "staged":
        nodes += [helper.make_node("NonZero", ["y"], ["nz"]),
                  helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
                  helper.make_node("GatherND", ["y", "idx"], ["vals"]),
                  helper.make_node("ReduceSum", ["vals"], ["total"], keepdims=0)]
        outputs = [helper.make_tensor_value_info("total", TensorProto.FLOAT, [])]
    graph = helper.make_graph(nodes, kind, [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, dims)], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
