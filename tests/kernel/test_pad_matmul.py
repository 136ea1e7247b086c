"""Matrix products padded to the register tile (tessera.kernel.pad_matmul): the rewrite computes
the original's outputs (reference interpreter, random data) for constant and computed operands,
batched and broadcast shapes, rows or columns or both padded; products not selected or of
other ops stay as they are."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tessera.backends.reference.interpreter import evaluate_function
from tessera.ir.graph import Function
from tessera.ir.types import DType, TensorType
from tessera.ir.verifier import verify
from tessera.kernel.pad_matmul import matmul_sizes, pad_matmul

RNG = np.random.default_rng(23)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def graph(a_shape: tuple[int, ...], b_shape: tuple[int, ...], const_b: bool) -> Function:
    fn = Function("g")
    a = fn.add_input("a", TensorType(a_shape, DType.float32))
    b = fn.constant(rand(*b_shape), "b") if const_b else \
        fn.add_input("b", TensorType(b_shape, DType.float32))
    y = fn.op("MatMul", a, b, name="mm")
    fn.outputs = [fn.op("Relu", y), y]
    return fn


def check_same(fn: Function, new: Function) -> None:
    verify(new)
    feeds = {v.name: rand(*v.type.shape) for v in fn.inputs}
    want, got = evaluate_function(fn, feeds), evaluate_function(new, feeds)
    assert [(v.name, v.type) for v in new.outputs] == [(v.name, v.type) for v in fn.outputs]
    for k, w in want.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a_shape, b_shape, const_b, pad", [
    ((1, 197, 24), (24, 40), True, (198, 48)),        # a dense layer, constant weight
    ((2, 3, 13, 8), (2, 3, 8, 13), False, (16, 16)),  # attention scores, both computed
    ((3, 13, 8), (8, 5), False, (13, 8)),             # columns only, broadcast weight
    ((13, 8), (8, 5), True, (14, 5)),                 # rows only, 2-D
    ((4, 1, 11, 6), (3, 6, 7), False, (12, 8)),       # broadcast batch dimensions
])
def test_padded_product_computes_the_same(a_shape: tuple, b_shape: tuple, const_b: bool,
                                          pad: tuple[int, int]) -> None:
    fn = graph(a_shape, b_shape, const_b)
    before = str(fn)
    new = pad_matmul(fn, lambda node: pad)
    assert str(fn) == before, "the pass changed its input"
    ops = Counter(n.op for n in new.nodes)
    m, n = a_shape[-2], b_shape[-1]
    assert ops["MatMul"] == 1 and ops["Slice"] == 1
    assert ops["Pad"] == int(pad[0] > m) + int(pad[1] > n and not const_b)
    mm = next(node for node in new.nodes if node.op == "MatMul")
    assert mm.outputs[0].type.shape[-2:] == pad
    if const_b:
        assert mm.inputs[1].is_constant
    check_same(fn, new)


def test_products_of_one_value_share_its_pad() -> None:
    fn = Function("g")
    x = fn.add_input("x", TensorType((1, 17, 8), DType.float32))
    q = fn.op("MatMul", x, fn.constant(rand(8, 8), "wq"), name="q")
    k = fn.op("MatMul", x, fn.constant(rand(8, 8), "wk"), name="k")
    fn.outputs = [q, k]
    new = pad_matmul(fn, lambda node: (18, 8))
    assert Counter(n.op for n in new.nodes) == {"Pad": 1, "MatMul": 2, "Slice": 2}
    check_same(fn, new)


def test_unselected_and_unpadded_products_are_kept() -> None:
    fn = graph((1, 16, 8), (8, 16), True)
    assert matmul_sizes(fn.node_by_name("mm")) == (16, 16, 8)
    for answer in (None, (16, 16), (4, 4)):  # declined; already the size; smaller is no pad
        new = pad_matmul(fn, lambda node, a=answer: a)
        assert [n.op for n in new.nodes] == ["MatMul", "Relu"]


def test_integer_products_are_not_candidates() -> None:
    fn = Function("g")
    a = fn.add_input("a", TensorType((5, 3), DType.int32))
    b = fn.add_input("b", TensorType((3, 5), DType.int32))
    fn.outputs = [fn.op("MatMul", a, b, name="mm")]
    assert matmul_sizes(fn.node_by_name("mm")) is None
