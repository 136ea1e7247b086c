"""Grouped 1x1 convolutions as batched matrix products (tessera.passes.grouped_pointwise):
which convolutions qualify, and that the rewrite computes the original's outputs (reference
interpreter, random data), with and without bias and pixel padding."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tessera.backends.reference.interpreter import evaluate_function
from tessera.ir.graph import Function, Node, Value
from tessera.ir.types import DType, TensorType
from tessera.ir.verifier import verify
from tessera.passes.grouped_pointwise import grouped_pointwise_to_matmul, is_grouped_pointwise

RNG = np.random.default_rng(11)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def graph(c: int = 12, oc: int = 18, group: int = 3, k: int = 1, bias: bool = True,
          n: int = 2, hw: tuple[int, int] = (5, 7), **attrs) -> tuple[Function, Node]:
    fn = Function("g")
    x = fn.add_input("x", TensorType((n, c, *hw), DType.float32))
    w = fn.constant(rand(oc, c // group, k, k), "w")
    b = fn.constant(rand(oc), "b") if bias else None
    y = fn.op("Conv", x, w, b, group=group, name="conv", **attrs)
    fn.outputs = [fn.op("Relu", y), y]
    return fn, fn.node_by_name("conv")


def check_same(fn: Function, new: Function) -> None:
    verify(new)
    x = {v.name: rand(*v.type.shape) for v in fn.inputs}
    want, got = evaluate_function(fn, x), evaluate_function(new, x)
    assert [(v.name, v.type) for v in new.outputs] == [(v.name, v.type) for v in fn.outputs]
    for k, w in want.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("extra", [0, 5])
def test_rewrite_computes_the_convolution(bias: bool, extra: int) -> None:
    fn, conv = graph(bias=bias)
    assert is_grouped_pointwise(conv)
    before = str(fn)
    new = grouped_pointwise_to_matmul(fn, lambda node: 35 + extra)
    assert str(fn) == before, "the pass changed its input"
    ops = Counter(n.op for n in new.nodes)
    assert ops["Conv"] == 0 and ops["MatMul"] == 1 and ops["Reshape"] == 2
    assert ops["Add"] == int(bias) and ops["Pad"] == ops["Slice"] == int(extra > 0)
    mm = next(n for n in new.nodes if n.op == "MatMul")
    assert mm.inputs[0].type.shape == (3, 6, 4) and mm.inputs[0].is_constant
    assert mm.inputs[1].type.shape == (2, 3, 4, 35 + extra)
    check_same(fn, new)


@pytest.mark.parametrize("label, kwargs", [
    ("ungrouped", {"group": 1}),
    ("depthwise", {"c": 6, "oc": 6, "group": 6}),
    ("3x3 kernel", {"k": 3, "pads": [1, 1, 1, 1]}),
    ("strided", {"strides": [2, 2]}),
    ("padded", {"pads": [1, 0, 1, 0]}),
])
def test_other_convolutions_are_not_eligible(label: str, kwargs: dict) -> None:
    fn, conv = graph(**kwargs)
    assert not is_grouped_pointwise(conv)
    new = grouped_pointwise_to_matmul(fn, lambda node: 1 << 20)
    assert Counter(n.op for n in new.nodes)["Conv"] == 1


def test_select_decides_and_too_few_columns_keep_the_conv() -> None:
    fn, _ = graph()
    for answer in (None, 34):  # declined, and fewer columns than the 35 pixels
        new = grouped_pointwise_to_matmul(fn, lambda node, a=answer: a)
        assert Counter(n.op for n in new.nodes)["Conv"] == 1
        check_same(fn, new)


def test_computed_weights_are_not_eligible() -> None:
    fn = Function("g")
    x = fn.add_input("x", TensorType((1, 8, 4, 4), DType.float32))
    w: Value = fn.add_input("w", TensorType((8, 4, 1, 1), DType.float32))
    fn.outputs = [fn.op("Conv", x, w, group=2, name="conv")]
    assert not is_grouped_pointwise(fn.node_by_name("conv"))
