"""Matrix products whose sizes the register tile does not divide (a ViT's 197 tokens) are
padded on llvm (tessera.kernel.pad_matmul, selected by lowering.matmul_padding): they match
onnxruntime, get whole-vector tiles of several rows, and batch-1 layers are left alone."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from optional import require

import tessera
from tessera.ir.graph import Function
from tessera.ir.types import DType, TensorType
from tessera_llvm.lowering import matmul_padding
from tessera_llvm.schedules.common import CPUInfo

ort = require("onnxruntime")
RNG = np.random.default_rng(29)


def model(a_shape: list[int], b_shape: list[int], const_b: bool) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, a_shape)]
    inits = []
    if const_b:
        inits.append(numpy_helper.from_array(
            (RNG.standard_normal(b_shape) / np.sqrt(b_shape[-2])).astype(np.float32), "b"))
    else:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, b_shape))
    out = a_shape[:-1] + b_shape[-1:]
    nodes = [helper.make_node("MatMul", ["a", "b"], ["p"]),
             helper.make_node("Softmax", ["p"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "mm", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("a_shape, b_shape, const_b", [
    ([1, 3, 197, 32], [1, 3, 32, 197], False),  # attention scores over 197 tokens
    ([1, 197, 48], [48, 96], True),             # a dense layer over 197 tokens
    ([2, 61, 40], [40, 53], True),              # primes both ways
])
def test_padded_products_match_onnxruntime(a_shape: list[int], b_shape: list[int],
                                           const_b: bool) -> None:
    m = model(a_shape, b_shape, const_b)
    feeds = {"a": RNG.standard_normal(a_shape).astype(np.float32)}
    if not const_b:
        feeds["b"] = RNG.standard_normal(b_shape).astype(np.float32)
    module = tessera.compile(m, "llvm")
    got = module.run(feeds)["y"]
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    (cr,) = module.compiled.values()
    dense = [c["config"] for s in cr.info["schedules"].values() for c in s["configs"]
             if c["template"] == "dense"]
    assert dense and all(c["mr"] > 1 and c["vector_width"] > 1 for c in dense), dense


def _matmul(m: int, n: int, k: int = 64) -> Function:
    fn = Function("g")
    a = fn.add_input("a", TensorType((1, m, k), DType.float32))
    b = fn.add_input("b", TensorType((1, k, n), DType.float32))
    fn.outputs = [fn.op("MatMul", a, b, name="mm")]
    return fn


@pytest.mark.parametrize("lanes, registers, m, n, want", [
    (16, 32, 197, 197, (198, 208)),  # tiles of 12 rows: 198 = 11 x 18; columns: whole vectors
    (16, 32, 196, 197, (196, 208)),  # 196 = 7 x 28: rows fit a tile of 7
    (16, 32, 17, 64, (18, 64)),      # a small model's 17 tokens: 2 tiles of 9 rows
    (16, 32, 1, 197, None),          # one row (decoding): a computed b is not copied
    (16, 32, 128, 768, None),
    (16, 32, 197, 9, (198, 9)),      # 9 columns: fewer than two vectors, left as they are
    (16, 32, 61, 53, (63, 64)),      # 24.7% more work: still padded
    (16, 32, 50, 33, None),          # 50 = 10 x 5 fits; 33 -> 48 columns: 45% more
    (8, 16, 197, 197, (198, 200)),   # AVX2: tiles of 6 rows (198 = 6 x 33), 8 lanes
])
def test_which_products_are_padded(lanes: int, registers: int, m: int, n: int,
                                   want: tuple | None) -> None:
    cpu = CPUInfo(vector_lanes=lanes, vector_registers=registers)
    assert matmul_padding(cpu)(_matmul(m, n).node_by_name("mm")) == want
