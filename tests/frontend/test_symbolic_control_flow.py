"""Control flow in a model with symbolic sizes: an If whose branches read an outer value of
symbolic shape, and a Loop carrying one, import with symbolic output types (the op's type
inference probes its sub-graphs at sizes) and compile to the right values at every size."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.frontend.onnx.importer import import_onnx

RNG = np.random.default_rng(37)
W = RNG.standard_normal((24, 40)).astype(np.float32) / 4
BW = RNG.standard_normal((40, 40)).astype(np.float32) / 4


def _if_model() -> onnx.ModelProto:
    then = helper.make_graph([helper.make_node("MatMul", ["h", "BW"], ["o1"])], "then", [],
                             [helper.make_tensor_value_info("o1", TensorProto.FLOAT, None)],
                             [numpy_helper.from_array(BW, "BW")])
    other = helper.make_graph([helper.make_node("Relu", ["h"], ["o2"])], "else", [],
                              [helper.make_tensor_value_info("o2", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]),
             helper.make_node("If", ["flag"], ["y"], then_branch=then, else_branch=other)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 24]),
                     helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 40])],
        [numpy_helper.from_array(W, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _loop_model() -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Mul", ["h_in", "two"], ["h_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", TensorProto.FLOAT, ["n", 40])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, ["n", 40])],
        [numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]),
             helper.make_node("Loop", ["trips", "go", "h"], ["y"], body=body)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 24]),
                     helper.make_tensor_value_info("trips", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 40])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(np.array(True), "go")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("model", [_if_model, _loop_model], ids=["If", "Loop"])
def test_the_output_type_keeps_the_symbolic_size(model):
    fn = import_onnx(model(), symbolic=True)
    (out,) = fn.outputs
    assert str(out.type) == "float32[n, 40]"


def _compile(model: onnx.ModelProto) -> tessera.Module:
    """The model compiled with the defaults, without a failed attempt on the way (a
    symbolic compile that breaks warns before compiling per size)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        return tessera.compile(model, "llvm")


def test_an_if_reading_a_symbolic_outer_value_runs_at_every_size():
    mod = _compile(_if_model())
    for n in (1, 5, 33):
        x = RNG.standard_normal((n, 24)).astype(np.float32)
        h = x @ W
        np.testing.assert_allclose(mod.run(x=x, flag=np.array(True))["y"], h @ BW,
                                   rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(mod.run(x=x, flag=np.array(False))["y"],
                                   np.maximum(h, 0), rtol=1e-4, atol=1e-4)


def test_a_loop_carrying_a_symbolic_value_runs_at_every_size():
    mod = _compile(_loop_model())
    for n, trips in ((1, 3), (7, 0), (20, 2)):
        x = RNG.standard_normal((n, 24)).astype(np.float32)
        np.testing.assert_allclose(mod.run(x=x, trips=np.array(trips))["y"],
                                   x @ W * 2.0 ** trips, rtol=1e-4, atol=1e-4)
