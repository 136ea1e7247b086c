"""Tests for tessera.ir.verifier: each kind of malformed graph is caught and named."""

import numpy as np
import pytest

from tessera.errors import IRError
from tessera.ir.graph import Function, Node, Value
from tessera.ir.types import DType, TensorType
from tessera.ir.verifier import verify

F32 = DType.float32
T = TensorType((2, 3), F32)


def build():
    fn = Function("main")
    x = fn.add_input("x", T)
    w = fn.constant(np.ones((2, 3), np.float32), "w")
    a = fn.op("Add", x, w, name="a")
    r = fn.op("Relu", a, name="r")
    y = fn.op("LeakyRelu", r, name="y", alpha=0.1)
    fn.outputs = [y]
    return fn


def test_well_formed_graphs_pass():
    verify(build())
    verify(Function("empty"))
    fn = build()
    fn.outputs = [fn.inputs[0], fn.constants()[0], fn.outputs[0], fn.outputs[0]]
    verify(fn)


def check(fn, pattern):
    with pytest.raises(IRError, match=pattern):
        verify(fn)


def test_use_before_definition():
    fn = build()
    fn.nodes[1], fn.nodes[2] = fn.nodes[2], fn.nodes[1]
    check(fn, r"node y \(LeakyRelu\): input 0 %r is used before node r \(Relu\) defines it")


def test_undefined_value():
    fn = build()
    fn.nodes[1].inputs[0] = Value("ghost", T)
    check(fn, r"node r \(Relu\): input 0 %ghost is not defined")


def test_value_of_removed_node():
    fn = build()
    fn.nodes.pop(0)
    check(fn, r"node r \(Relu\): input 0 %a is not defined")


def test_cycle():
    fn = build()
    fn.nodes[0].inputs[0] = fn.outputs[0]  # a reads y
    check(fn, r"cycle through node")


def test_self_loop():
    fn = build()
    node = fn.nodes[1]
    node.inputs[0] = node.outputs[0]
    check(fn, r"cycle through node r \(Relu\)")


def test_duplicate_node_names():
    fn = build()
    fn.nodes[2].name = "r"
    check(fn, r"node name r is used twice \(Relu and LeakyRelu\)")


def test_node_listed_twice():
    fn = build()
    fn.nodes.append(fn.nodes[0])
    check(fn, r"node a \(Add\) appears twice")


def test_duplicate_value_names():
    fn = build()
    fn.nodes[1].outputs[0].name = "a"
    check(fn, r"value name %a is used twice \(output of node r \(Relu\)\)")


def test_constant_named_like_an_input():
    fn = build()
    fn.constants()[0].name = "x"
    check(fn, r"value name %x is used twice \(constant read by node a \(Add\)\)")


def test_duplicate_graph_input_names():
    fn = build()
    fn.inputs.append(Value("x", T))
    check(fn, r"graph input name %x is used twice")


def test_wrong_output_type():
    fn = build()
    fn.nodes[1].outputs[0].type = TensorType((3, 2), F32)
    check(fn, r"node r \(Relu\): output %r is typed float32\[3, 2\], the registry infers "
              r"float32\[2, 3\]")


def test_wrong_output_dtype():
    fn = build()
    fn.nodes[0].outputs[0].type = TensorType((2, 3), DType.float64)
    check(fn, r"node a \(Add\): output %a is typed float64\[2, 3\]")


def test_types_inconsistent_with_inputs():
    fn = build()
    fn.inputs[0].type = TensorType((4, 3), F32)  # no longer broadcasts with w
    check(fn, r"node a \(Add\): .*do not broadcast")


def test_unknown_op():
    fn = build()
    fn.nodes[1].op = "Frobnicate"
    check(fn, r"node r \(Frobnicate\): unknown op 'Frobnicate'")


def test_unknown_attribute():
    fn = build()
    fn.nodes[2].attrs["beta"] = 2.0
    check(fn, r"node y \(LeakyRelu\): unknown attribute 'beta'")


def test_wrong_input_count():
    fn = build()
    fn.nodes[0].inputs.pop()
    check(fn, r"node a \(Add\): expected 2 inputs, got 1")


def test_too_many_outputs():
    fn = build()
    node = fn.nodes[1]
    extra = Value("extra", T, producer=node)
    node.outputs.append(extra)
    check(fn, r"node r \(Relu\) has 2 outputs, the op has 1")


def test_output_with_wrong_producer():
    fn = build()
    fn.nodes[1].outputs[0].producer = fn.nodes[0]
    check(fn, r"node r \(Relu\): output %r names node a \(Add\) as its producer")


@pytest.mark.parametrize("data, pattern", [
    (np.ones((2, 3), np.float64), r"constant %w read by node a \(Add\): data is "
                                  r"float64\[2, 3\], its type says float32\[2, 3\]"),
    (np.ones((3, 2), np.float32), r"data is float32\[3, 2\], its type says float32\[2, 3\]"),
    (np.ones((2, 3), np.complex64), r"constant %w .*unsupported element type 'complex64'"),
    ([[1.0] * 3] * 2, r"constant %w .*data is a list, not a numpy array"),
])
def test_constant_data_disagrees_with_type(data, pattern):
    fn = build()
    fn.constants()[0].data = data
    check(fn, pattern)


def test_constant_output_checked_too():
    fn = build()
    c = Value("c", T, data=np.ones((2, 2), np.float32))
    fn.outputs.append(c)
    check(fn, r"constant %c read by the function outputs: data is float32\[2, 2\]")


def test_undefined_function_output():
    fn = build()
    fn.outputs.append(Value("ghost", T))
    check(fn, r"function output 1 %ghost is not defined")


def test_graph_input_with_data_or_producer():
    fn = build()
    fn.inputs[0].data = np.ones((2, 3), np.float32)
    check(fn, r"graph input %x carries constant data")
    fn = build()
    fn.inputs.append(fn.nodes[0].outputs[0])
    check(fn, r"graph input %a is also an output of node a \(Add\)")


def region_graph(body):
    outer = Function("model")
    x = outer.add_input("x", T)
    y = Value("y", T)
    outer.append(Node("Region", "region0", [x], [y], {"backend": "ref"}, body=body))
    copy_out = Value("z", T)
    outer.append(Node("DeviceCopy", "copy0", [y], [copy_out], {"to": "cpu"}))
    outer.outputs = [copy_out]
    return outer


def test_regions_are_verified_recursively():
    verify(region_graph(build()))
    body = build()
    body.nodes[1].outputs[0].type = TensorType((6,), F32)
    check(region_graph(body), r"node region0 \(Region\): in its body: function main: "
                              r"node r \(Relu\): output %r is typed float32\[6\]")


def test_region_signature_must_match_body():
    outer = region_graph(build())
    outer.inputs[0].type = TensorType((2, 3), DType.float64)
    check(outer, r"node region0 \(Region\): input 0 is float64\[2, 3\], its body's is "
                 r"float32\[2, 3\]")
    outer = region_graph(build())
    outer.nodes[0].outputs.append(Value("extra", T, producer=outer.nodes[0]))
    check(outer, r"node region0 \(Region\) has 2 outputs, its body 1")
    outer = region_graph(build())
    outer.nodes[0].body = None
    check(outer, r"node region0 \(Region\) has no body")


def test_device_copy_keeps_type():
    outer = region_graph(build())
    outer.nodes[1].outputs[0].type = TensorType((2, 3), DType.float16)
    check(outer, r"node copy0 \(DeviceCopy\): output is typed float16\[2, 3\]")


def test_message_names_function():
    fn = build()
    fn.name = "encoder"
    fn.nodes[1].op = "Nope"
    check(fn, r"^function encoder: node r \(Nope\)")
