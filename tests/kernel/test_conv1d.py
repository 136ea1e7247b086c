"""1-D convolutions as 2-D ones of height 1 (tessera.kernel.conv1d): which convolutions
qualify, and that the rewrite computes the original's outputs (reference interpreter, random
data) over kernels, strides, dilations, pads, groups and bias (ONNX's auto_pad is resolved
into pads on import)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tessera.backends.reference.interpreter import evaluate_function
from tessera.ir.graph import Function, Node
from tessera.ir.types import DType, TensorType
from tessera.ir.verifier import verify
from tessera.kernel.conv1d import conv1d_as_conv2d, is_conv1d

RNG = np.random.default_rng(5)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def graph(c: int = 6, oc: int = 8, k: int = 3, width: int = 29, group: int = 1,
          bias: bool = True, n: int = 2, dtype: DType = DType.float32,
          **attrs) -> tuple[Function, Node]:
    fn = Function("g")
    x = fn.add_input("x", TensorType((n, c, width), dtype))
    w = fn.constant(rand(oc, c // group, k).astype(dtype.value), "w")
    b = fn.constant(rand(oc).astype(dtype.value), "b") if bias else None
    y = fn.op("Conv", x, w, b, group=group, kernel_shape=[k], name="conv", **attrs)
    fn.outputs = [fn.op("Relu", y), y]
    return fn, fn.node_by_name("conv")


def check_same(fn: Function, new: Function) -> None:
    verify(new)
    x = {v.name: rand(*v.type.shape).astype(v.type.dtype.value) for v in fn.inputs}
    want, got = evaluate_function(fn, x), evaluate_function(new, x)
    assert [(v.name, v.type) for v in new.outputs] == [(v.name, v.type) for v in fn.outputs]
    for k, w in want.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("label, kwargs", [
    ("plain", {}),
    ("no bias", {"bias": False}),
    ("long strided kernel", {"k": 10, "strides": [5], "width": 83, "c": 1}),
    ("stride 2, k 2", {"k": 2, "strides": [2]}),
    ("dilated, padded", {"dilations": [2], "pads": [2, 1]}),
    ("asymmetric pads, stride 3", {"pads": [0, 2], "strides": [3], "k": 4}),
    ("grouped", {"c": 8, "oc": 12, "group": 4, "k": 5, "pads": [2, 2]}),
    ("depthwise", {"c": 6, "oc": 6, "group": 6, "k": 7, "pads": [3, 3]}),
    ("pointwise", {"k": 1}),
    ("float64", {"dtype": DType.float64}),
])
def test_rewrite_computes_the_convolution(label: str, kwargs: dict) -> None:
    fn, conv = graph(**kwargs)
    assert is_conv1d(conv)
    before = str(fn)
    new = conv1d_as_conv2d(fn)
    assert str(fn) == before, "the pass changed its input"
    ops = Counter(n.op for n in new.nodes)
    assert ops["Conv"] == 1 and ops["Reshape"] == 2
    conv2d = next(n for n in new.nodes if n.op == "Conv")
    assert conv2d.inputs[0].type.ndim == 4 and conv2d.inputs[1].type.shape[2] == 1
    assert conv2d.inputs[1].is_constant
    check_same(fn, new)


def test_other_convolutions_are_kept() -> None:
    fn = Function("g")
    x = fn.add_input("x", TensorType((1, 4, 9), DType.float32))
    w = fn.add_input("w", TensorType((4, 4, 3), DType.float32))  # weight not a constant
    fn.outputs = [fn.op("Conv", x, w, kernel_shape=[3])]
    x2 = fn.add_input("x2", TensorType((1, 4, 9, 9), DType.float32))  # 2-D
    fn.outputs.append(fn.op("Conv", x2, fn.constant(rand(4, 4, 3, 3), "w2")))
    assert not any(is_conv1d(n) for n in fn.nodes)
    new = conv1d_as_conv2d(fn)
    assert [n.op for n in new.nodes] == ["Conv", "Conv"]
