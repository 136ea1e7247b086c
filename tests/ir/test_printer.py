"""Tests for tessera.ir.printer: the text form of functions."""

import numpy as np

from tessera.ir.graph import Function, Node, Value
from tessera.ir.printer import format_function, format_node
from tessera.ir.types import DType, TensorType

F32 = DType.float32


def build():
    fn = Function("main", {"output_names": ["y"], "source": "test"})
    x = fn.add_input("x", TensorType((2, 3), F32))
    w = fn.constant(np.ones((2, 3), np.float32), "w")
    s = fn.constant(np.array([0.5, -1.0], np.float32).reshape(2, 1), "s")
    a = fn.op("Add", x, w, name="a")
    b = fn.op("Add", a, w, name="b")
    c = fn.op("Add", b, s, name="c")
    y = fn.op("LeakyRelu", c, name="y", alpha=0.2)
    fn.outputs = [y]
    return fn


def test_function_text():
    text = format_function(build())
    lines = text.splitlines()
    assert lines[0] == "fn main(%x: float32[2, 3]) -> (%y) [source='test'] {"
    assert lines[1] == "  %a = Add(%x, %w: const float32[2, 3])  # float32[2, 3]"
    # a constant's type is shown at its first use only
    assert lines[2] == "  %b = Add(%a, %w)  # float32[2, 3]"
    # small constants show their data
    assert lines[3] == "  %c = Add(%b, %s: const float32[2, 1] = [0.5, -1.0])  # float32[2, 3]"
    assert lines[4] == "  %y = LeakyRelu(%c) {alpha=0.2}  # float32[2, 3]"
    assert lines[5] == "}"
    assert str(build()) == text


def test_attribute_formats():
    x = Value("x", TensorType((1,), F32))
    out = Value("o", TensorType((1,), F32))
    node = Node("Op", "n", [x, None], [out], {
        "b": [1, 2], "a": "same", "f": float("inf"), "t": np.arange(3, dtype=np.int64),
        "big": np.zeros((3, 4), np.float32), "d": DType.int8, "none": None, "i": 3,
        "ds": [DType.float16, DType.bool]})
    line = format_node(node, indent="")
    assert line == ("%o = Op(%x, _) {a='same', b=[1, 2], big=tensor<float32[3, 4]>, d=int8, "
                    "ds=[float16, bool], f=inf, i=3, t=tensor<int64>[0, 1, 2]}  # float32[1]")


def test_multiple_outputs_and_nested_body():
    inner = build()
    outer = Function("model")
    x = outer.add_input("x", TensorType((2, 3), F32))
    y = Value("y", TensorType((2, 3), F32))
    z = Value("z", TensorType((2, 3), F32))
    outer.append(Node("Region", "r0", [x], [y, z], {"backend": "ref"}, body=inner))
    outer.outputs = [y, z]
    lines = format_function(outer).splitlines()
    assert lines[0] == "fn model(%x: float32[2, 3]) -> (%y, %z) {"
    assert lines[1] == "  %y, %z = Region(%x) {backend='ref'}  # float32[2, 3], float32[2, 3]"
    assert lines[2] == "    fn main(%x: float32[2, 3]) -> (%y) [source='test'] {"
    assert lines[3].startswith("      %a = Add(")
    assert lines[-2] == "    }"
    assert lines[-1] == "}"


def test_empty_function():
    assert format_function(Function("e")) == "fn e() -> () {\n}"
