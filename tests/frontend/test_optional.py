"""Optional values whose presence is known at import: Optional, OptionalHasElement,
OptionalGetElement become the tensor itself or a constant (checked against onnxruntime)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.errors import ModelImportError

ort = pytest.importorskip("onnxruntime")


def _model(nodes, inputs, outputs):
    graph = helper.make_graph(nodes, "opt", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("target", ["ref", "llvm"])
def test_an_optional_holding_a_tensor_is_that_tensor(target: str) -> None:
    model = _model(
        [helper.make_node("Optional", ["x"], ["o"]),
         helper.make_node("OptionalHasElement", ["o"], ["has"]),
         helper.make_node("OptionalGetElement", ["o"], ["v"]),
         helper.make_node("Relu", ["v"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("has", TensorProto.BOOL, [])])
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    got = tessera.compile(model, target=target).run(x=x)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_array_equal(got["y"], want[0])
    assert got["has"] == want[1] == np.array(True)


def test_a_missing_input_has_no_element() -> None:
    model = _model(
        [helper.make_node("OptionalHasElement", [""], ["has"]),
         helper.make_node("Not", ["has"], ["none"])], [],
        [helper.make_tensor_value_info("none", TensorProto.BOOL, [])])
    assert tessera.compile(model, target="ref").run({})["none"] == np.array(True)


def test_an_empty_optional_value_is_refused() -> None:
    model = _model(
        [helper.make_node("Optional", [], ["o"],
                          type=helper.make_tensor_type_proto(TensorProto.FLOAT, [2])),
         helper.make_node("OptionalGetElement", ["o"], ["y"])], [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    with pytest.raises(ModelImportError, match="empty optional"):
        tessera.compile(model, target="ref")
