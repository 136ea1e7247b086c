"""A symbolic model compiled once by the llvm backend: every kernel of a region takes the
region's size variables from one sizes array, and the module runs at any size within the
bounds, from several threads at once, against onnx's reference evaluator."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import tessera
from tessera.errors import RunError
from tessera.frontend.onnx.importer import import_onnx

H = 48  # not a multiple of the vector width: the column tails run too
RNG = np.random.default_rng(0)


def _model():  # noqa: ANN202 - an onnx ModelProto
    w = (RNG.standard_normal((H, H)) * 0.2).astype(np.float32)
    b = RNG.standard_normal(H).astype(np.float32)
    g = RNG.standard_normal(H).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", H])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", H])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]),
             helper.make_node("Add", ["m", "B"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("LayerNormalization", ["r", "g", "B"], ["ln"], axis=-1),
             helper.make_node("Softmax", ["ln"], ["y"], axis=-1)]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B"),
             numpy_helper.from_array(g, "g")]
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.fixture(scope="module")
def compiled():  # noqa: ANN201 - (module, reference evaluator)
    model = _model()
    fn = import_onnx(model, symbolic=True, dim_bounds={"batch": (1, 4), "seq": (1, 40)})
    return tessera.compile(fn, "llvm"), ReferenceEvaluator(model)


def test_one_region_takes_the_sizes(compiled) -> None:  # noqa: ANN001
    mod, _ = compiled
    (region,) = mod.compiled.values()
    assert region.backend == "llvm" and region.size_names == ["batch", "seq"]
    assert len(region.kernels) >= 2
    assert str(mod.input_types["x"]).count("seq") == 1


@pytest.mark.parametrize("batch,seq", [(1, 1), (1, 7), (2, 16), (3, 17), (4, 40), (1, 33)])
def test_every_size_matches_the_reference(compiled, batch: int, seq: int) -> None:  # noqa: ANN001
    mod, ref = compiled
    x = RNG.standard_normal((batch, seq, H)).astype(np.float32)
    got = mod.run({"x": x})["y"]
    assert got.shape == (batch, seq, H)
    np.testing.assert_allclose(got, ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-6)


def test_threads_at_different_sizes(compiled) -> None:  # noqa: ANN001
    mod, ref = compiled
    inputs = [RNG.standard_normal((1 + i % 4, 1 + (7 * i) % 40, H)).astype(np.float32)
              for i in range(24)]
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda x: mod.run({"x": x})["y"], inputs))
    for x, got in zip(inputs, outs):
        np.testing.assert_allclose(got, ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-6)


def test_a_size_past_its_bound_is_refused(compiled) -> None:  # noqa: ANN001
    mod, _ = compiled
    with pytest.raises(RunError, match="seq"):
        mod.run({"x": np.zeros((1, 41, H), np.float32) + 1})
