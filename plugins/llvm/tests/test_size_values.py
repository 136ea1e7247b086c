"""Values computed from the sizes alone (``Range``, ``ShapeValues``, ``ConstantOfShape`` in a
graph with symbolic shapes) run in llvm kernels, inside the regions around them: a symbolic
model's call then has no reference region (a Python call each) and fewer region boundaries.
Checked against onnxruntime at several sizes and through the computes directly."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.ir.graph import Function
from tessera.ir.symbolic import dim_var
from tessera.ir.types import DType, TensorType
from tessera.runtime.module import Module


def _model() -> onnx.ModelProto:
    """x [batch, seq] -> (x + arange(seq)) * ConstantOfShape(shape(x), 2) reshaped by
    [batch * seq] (a Concat of shape pieces), plus arange(batch) * 3 broadcast per row."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Range", ["zero", "seq", "one"], ["pos"]),
        helper.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "posf"], ["a"]),
        helper.make_node("ConstantOfShape", ["shape"], ["twos"],
                         value=numpy_helper.from_array(np.array([2.0], np.float32))),
        helper.make_node("Mul", ["a", "twos"], ["m"]),
        helper.make_node("Mul", ["batch", "seq"], ["count"]),
        helper.make_node("Unsqueeze", ["count", "axes0"], ["count1"]),
        helper.make_node("Reshape", ["m", "count1"], ["y"]),
        helper.make_node("Range", ["zero", "batch", "one"], ["rows"]),
        helper.make_node("Mul", ["rows", "three"], ["rows3"]),
        helper.make_node("Cast", ["rows3"], ["z"], to=TensorProto.FLOAT),
    ]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n)
             for n, v in (("zero", 0), ("one", 1), ("three", 3))]
    inits.append(numpy_helper.from_array(np.array([0], np.int64), "axes0"))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch"])
    graph = helper.make_graph(nodes, "size_values", [x], [y, z], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.fixture(scope="module")
def module() -> Module:
    mod = tessera.compile(_model(), "llvm", dim_bounds={"batch": (0, 16), "seq": (0, 300)})
    assert isinstance(mod, Module)
    return mod


def test_no_reference_region_and_matches_onnxruntime(module: Module) -> None:
    report = module.partition_report()
    assert not report.fallback and {r.backend for r in report.regions} == {"llvm"}
    sess = ort.InferenceSession(_model().SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    for batch, seq in [(1, 1), (2, 7), (3, 16), (1, 17), (16, 300), (5, 2)]:
        x = rng.standard_normal((batch, seq)).astype(np.float32)
        got = module.run(x=x)
        want = sess.run(None, {"x": x})
        np.testing.assert_allclose(got["y"], want[0], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(got["z"], want[1])


def test_shape_values_and_range_computes_at_run_time() -> None:
    """The computes alone, on a graph built by hand: values ``[seq * 2, batch, 7]`` and a
    descending range ``seq + 3 .. 3`` with step -2."""
    batch, seq = dim_var("batch"), dim_var("seq")
    fn = Function("sv", attrs={"dim_bounds": {"batch": (0, 8), "seq": (0, 64)}})
    fn.add_input("x", TensorType((batch, seq), DType.float32))
    sv = fn.add_node("ShapeValues", [], {"values": [seq * 2, batch, 7], "shape": [3],
                                         "dtype": DType.int64}, name="sv")
    rg = fn.add_node("Range", [], {"start": seq + 3, "limit": 3, "delta": -2,
                                   "dtype": DType.int32}, name="rg")
    fn.outputs.extend([sv.outputs[0], rg.outputs[0]])
    mod = tessera.compile(fn, "llvm")
    assert not mod.partition_report().fallback
    for b, s in [(1, 0), (2, 1), (8, 64), (3, 10)]:
        got = mod.run(x=np.zeros((b, s), np.float32))
        outs = list(got.values())
        np.testing.assert_array_equal(outs[0], [s * 2, b, 7])
        np.testing.assert_array_equal(outs[1], np.arange(s + 3, 3, -2, dtype=np.int32))
