"""Constant matrix-product weights stored as column panels (``pack_matmul_weights``): which
MatMul and Gemm nodes are rewritten, and into what. Their numerics are the llvm op cases'
(``op_cases_nn``: ``Gemm packed`` and ``MatMulPacked``)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.ir.graph import Function
from tessera.ir.types import TensorType
from tessera.ir.verifier import verify
from tessera_llvm.lowering import pack_matmul_weights, pretranspose_weights
from tessera_llvm.schedules.common import CPUInfo

AVX2 = CPUInfo(vector_lanes=8, num_threads=2, vector_registers=16)
RNG = np.random.default_rng(7)


def gemm(attrs: dict, m: int = 3, k: int = 24, n: int = 32, c: tuple | None = (32,),
         dtype: str = "float32") -> Function:
    fn = Function("g")
    a = fn.add_input("a", TensorType.of(np.zeros((k, m) if attrs.get("transA") else (m, k),
                                                 dtype)))
    b = RNG.standard_normal((n, k) if attrs.get("transB") else (k, n)).astype(dtype)
    inputs = [a, fn.constant(b, "w")]
    if c is not None:
        inputs.append(fn.constant(RNG.standard_normal(c).astype(dtype), "c"))
    fn.outputs = [fn.op("Gemm", *inputs, **attrs)]
    return fn


def packed(fn: Function) -> Function:
    pretranspose_weights(fn)
    pack_matmul_weights(fn, AVX2)
    return fn


@pytest.mark.parametrize("attrs,c", [({"transB": 1}, (32,)), ({}, (3, 32)), ({}, (3, 1)),
                                     ({"transB": 1, "beta": 1.0}, ()), ({"alpha": 1.0}, None)])
def test_a_gemm_with_constant_weights_becomes_a_packed_product_and_an_add(attrs: dict,
                                                                          c: tuple | None) -> None:
    fn = packed(gemm(attrs, c=c))
    ops = [node.op for node in fn.nodes]
    assert ops == (["MatMulPacked"] if c is None else ["MatMulPacked", "Add"])
    product = fn.nodes[0]
    assert product.inputs[1].type.shape == (2, 24, 16)  # 32 columns as 2 panels of 16
    assert fn.nodes[-1].outputs[0] is fn.outputs[0]  # the graph's output is unchanged
    assert all(out.producer is node for node in fn.nodes for out in node.outputs)
    verify(fn)
    assert fn.outputs[0].type.shape == (3, 32)


@pytest.mark.parametrize("attrs,n,dtype", [
    ({"alpha": 0.5}, 32, "float32"),  # scaled product: stays a Gemm
    ({"beta": 2.0}, 32, "float32"),  # scaled C
    ({"transA": 1}, 32, "float32"),
    ({}, 20, "float32"),  # 20 columns: no whole vectors of 8
    ({}, 32, "float64"),
])
def test_other_gemms_stay(attrs: dict, n: int, dtype: str) -> None:
    fn = gemm(attrs, n=n, c=(n,), dtype=dtype)
    assert [node.op for node in packed(fn).nodes] == ["Gemm"]
