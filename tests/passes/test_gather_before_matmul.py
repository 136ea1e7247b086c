"""GatherBeforeMatMul: rows picked from a product are picked before it (a decoder's last-
position logits), with the same values, and only where that is the same computation."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.backends.reference.interpreter import evaluate_function
from tessera.frontend.onnx.importer import import_onnx
from tessera.ir.verifier import verify
from tessera.passes import GatherBeforeMatMul

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(31)


def _model(a_shape: list, index: np.ndarray, axis: int, w_shape: tuple[int, ...] = (24, 40),
           also_read: bool = False, dynamic_index: bool = False) -> onnx.ModelProto:
    w = RNG.standard_normal(w_shape).astype(np.float32)
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, a_shape)]
    inits = [numpy_helper.from_array(w, "W")]
    if dynamic_index:
        inputs.append(helper.make_tensor_value_info("i", TensorProto.INT64, list(index.shape)))
    else:
        inits.append(numpy_helper.from_array(index, "i"))
    nodes = [helper.make_node("MatMul", ["a", "W"], ["y"], name="head"),
             helper.make_node("Gather", ["y", "i"], ["out"], axis=axis, name="last")]
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)]
    if also_read:
        nodes.append(helper.make_node("Relu", ["y"], ["r"]))
        outputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    return onnx.shape_inference.infer_shapes(model)  # the outputs' shapes


CASES = [  # (A's shape, index, axis)
    ([1, 7, 24], np.array(-1), 1),  # a decoder's logits[:, -1, :]
    ([2, 7, 24], np.array([0, 6, 3]), 1),  # several rows
    ([2, 7, 24], np.array([1]), 0),  # a batch
    ([7, 24], np.array(2), 0),  # 2-D A, one row: a vector
    ([3, 2, 7, 24], np.array([[1, 0], [6, 5]]), -2),  # 2-D indices, negative axis
]


@pytest.mark.parametrize("a_shape,index,axis", CASES)
def test_the_gather_moves_before_the_product_with_the_same_values(a_shape, index, axis):
    model = _model(a_shape, index, axis)
    fn = import_onnx(model)
    a = RNG.standard_normal(a_shape).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    out = GatherBeforeMatMul().run(fn)
    verify(out)
    assert [n.op for n in out.nodes] == ["Gather", "MatMul"]
    assert out.nodes[0].inputs[0] is out.inputs[0]
    (got,) = evaluate_function(out, {"a": a}).values()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for target in ("ref", "llvm"):
        mod = tessera.compile(model, target)
        np.testing.assert_allclose(mod.run(a=a)["out"], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", ["product read twice", "gathered columns", "3-D weight",
                                  "run-time indices"])
def test_the_rewrite_applies_only_where_it_is_the_same_computation(case):
    model = {"product read twice": lambda: _model([1, 7, 24], np.array(-1), 1, also_read=True),
             "gathered columns": lambda: _model([1, 7, 24], np.array([3]), 2),
             "3-D weight": lambda: _model([2, 7, 24], np.array(-1), 1, w_shape=(2, 24, 40)),
             "run-time indices": lambda: _model([1, 7, 24], np.array([2]), 1,
                                                dynamic_index=True)}[case]()
    fn = import_onnx(model)
    before = [n.op for n in fn.nodes]
    assert [n.op for n in GatherBeforeMatMul().run(fn).nodes] == before


def test_a_symbolic_sequence_keeps_its_last_row():
    model = _model([1, "seq", 24], np.array(-1), 1)
    mod = tessera.compile(model, "llvm")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for seq in (1, 5, 33):
        a = RNG.standard_normal((1, seq, 24)).astype(np.float32)
        np.testing.assert_allclose(mod.run(a=a)["out"], sess.run(None, {"a": a})[0],
                                   rtol=1e-4, atol=1e-4)
