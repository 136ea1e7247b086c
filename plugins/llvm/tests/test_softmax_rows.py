"""Softmax and log-softmax along the last axis on llvm, in the row form (statistics reduced
as vectors of lanes, then the lanes and the row's tail combined; every stage computed within
its row): against numpy in float64 over row lengths with and without a tail, several leading
shapes, a scale and mask fused before it, and other axes (the registry's form)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera

RNG = np.random.default_rng(41)


def reference(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    x64 = x.astype(np.float64)
    z = x64 - x64.max(axis=axis, keepdims=True)
    if log:
        return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def model(shape: list[int], axis: int, log: bool, masked: bool) -> onnx.ModelProto:
    nodes, inits, src = [], [], "x"
    if masked:  # attention's scale and additive mask, fused before the softmax
        inits = [numpy_helper.from_array(np.array(0.125, np.float32), "scale"),
                 numpy_helper.from_array(np.where(RNG.random(shape[-1]) < 0.2, -1e4, 0.0)
                                         .astype(np.float32), "mask")]
        nodes += [helper.make_node("Mul", ["x", "scale"], ["scaled"]),
                  helper.make_node("Add", ["scaled", "mask"], ["masked"])]
        src = "masked"
    nodes.append(helper.make_node("LogSoftmax" if log else "Softmax", [src], ["y"], axis=axis))
    graph = helper.make_graph(
        nodes, "softmax", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("shape, axis", [
    ([3, 197], -1),          # a tail of 5 after 12 chunks of 16 (or 24 of 8)
    ([2, 4, 64, 64], -1),    # whole chunks
    ([1, 6, 50, 500], 3),    # Whisper's rows, a tail of 4
    ([5, 33], -1),           # one chunk and a tail of 1 (8 lanes: 4 chunks, 1)
    ([4, 40, 7], 1),         # not the last axis: the registry's form
    ([2, 31], -1),           # shorter than two vectors: the registry's form
])
@pytest.mark.parametrize("log", [False, True])
def test_rows_match_numpy(shape: list[int], axis: int, log: bool) -> None:
    x = (RNG.standard_normal(shape) * 4).astype(np.float32)
    module = tessera.compile(model(shape, axis, log, masked=False), "llvm")
    np.testing.assert_allclose(module.run(x=x)["y"], reference(x, axis, log), rtol=2e-5,
                               atol=2e-6)


@pytest.mark.parametrize("shape", [[2, 3, 77, 77], [1, 12, 128, 128]])
def test_scaled_and_masked_scores(shape: list[int]) -> None:
    m = model(shape, -1, False, masked=True)
    x = (RNG.standard_normal(shape) * 8).astype(np.float32)
    scale = 0.125
    mask = numpy_helper.to_array(m.graph.initializer[1])
    module = tessera.compile(m, "llvm")
    got = module.run(x=x)["y"]
    np.testing.assert_allclose(got, reference(x * scale + mask, -1, False), rtol=2e-5,
                               atol=2e-6)
    (cr,) = module.compiled.values()
    templates = {c["template"] for s in cr.info["schedules"].values() for c in s["configs"]}
    assert "softmax_rows" in templates, templates


def test_avx2_lanes() -> None:
    """Code for an AVX2 CPU (8 lanes) runs here too: the partial results are 8 wide."""
    x = (RNG.standard_normal([3, 197]) * 4).astype(np.float32)
    module = tessera.compile(model([3, 197], -1, False, masked=False), "llvm -mcpu=znver3")
    np.testing.assert_allclose(module.run(x=x)["y"], reference(x, -1, False), rtol=2e-5,
                               atol=2e-6)
