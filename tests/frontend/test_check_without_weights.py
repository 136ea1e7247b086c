"""A model with large weights is checked by onnx's checker without their bytes
(tessera.frontend.onnx.lenient.without_weights): its graph errors are still found, an
initializer of the wrong size is still refused (by the importer), and nothing of the model
changes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.errors import ModelImportError
from tessera.frontend.onnx import lenient
from tessera.frontend.onnx.importer import import_onnx

RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def every_model_is_large(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lenient, "CHECK_WEIGHTS_MAX_BYTES", 0)


def _model(extra: list[onnx.NodeProto] | None = None) -> onnx.ModelProto:
    w = RNG.standard_normal((6, 4)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "B"], ["y"], name="add"), *(extra or [])]
    graph = helper.make_graph(nodes, "g", [x], [y], [numpy_helper.from_array(w, "W"),
                                                     numpy_helper.from_array(b, "B")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=9)


def test_a_valid_model_passes_and_runs() -> None:
    model = _model()
    before = model.SerializeToString()
    x = RNG.standard_normal((2, 6)).astype(np.float32)
    got = tessera.compile(model, "ref").run(x=x)["y"]
    w, b = (numpy_helper.to_array(t) for t in model.graph.initializer)
    np.testing.assert_allclose(got, x @ w + b, rtol=1e-5, atol=1e-6)
    assert model.SerializeToString() == before


def test_the_copy_checked_has_the_graph_without_the_bytes() -> None:
    model = _model()
    light = lenient.without_weights(model)
    assert not light.graph.initializer
    assert [n.name for n in light.graph.node] == ["mm", "add"]
    assert (light.ir_version, list(light.opset_import)) == (model.ir_version,
                                                           list(model.opset_import))
    types = {i.name: (i.type.tensor_type.elem_type,
                      [d.dim_value for d in i.type.tensor_type.shape.dim])
             for i in light.graph.input}
    assert types == {"x": (TensorProto.FLOAT, [2, 6]), "W": (TensorProto.FLOAT, [6, 4]),
                     "B": (TensorProto.FLOAT, [4])}
    assert light.ByteSize() < model.ByteSize() - 96  # the 24 + 4 floats


def test_graph_errors_are_still_found() -> None:
    bad = _model([helper.make_node("Neg", ["y", "y"], ["z"], name="neg")])
    bad.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4]))
    with pytest.raises(ModelImportError, match=r"malformed ONNX model: node 'neg' \(Neg\): .*"
                                               r"input size 2 not in range"):
        import_onnx(bad)
    dangling = _model()
    dangling.graph.node[1].input[1] = "nowhere"
    with pytest.raises(ModelImportError, match="malformed ONNX model.*nowhere"):
        import_onnx(dangling)


def test_an_initializer_of_the_wrong_size_is_refused() -> None:
    model = _model()
    model.graph.initializer[0].raw_data = model.graph.initializer[0].raw_data[:-4]
    with pytest.raises(ModelImportError, match="initializer 'W' cannot be read"):
        import_onnx(model)
