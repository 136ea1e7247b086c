"""The blocked-layout pass (tessera.passes.alter_layout): which nodes become ConvNCHWc/PoolNCHWc
or stay blocked, where LayoutTransforms go, and that the result is a valid function computing
the original's outputs (reference interpreter, random inputs), on small graphs and on the light
model-zoo graphs."""

from __future__ import annotations

from collections import Counter
from functools import cache

import numpy as np
import pytest

from tessera.backends.reference.interpreter import evaluate_function
from tessera.errors import PassError
from tessera.frontend.onnx import import_onnx
from tessera.ir.graph import Function, Node, Value
from tessera.ir.types import DType, TensorType
from tessera.ir.verifier import verify
from tessera.ops.layout import unpack_conv_weight
from tessera.passes import PassManager
from tessera.passes.alter_layout import alter_conv_layout, count_layout_transforms
from tessera.passes.fuse_ops import fuse_ops

RNG = np.random.default_rng(5)
F32 = DType.float32


def rand(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def block(n: int) -> int | None:
    return 16 if n % 16 == 0 else 8 if n % 8 == 0 else None


def choose(node: Node) -> tuple[int, int] | None:
    """16 if the channels divide by 16, else 8, else keep NCHW; up to 4 input channels per
    group (the RGB input, depthwise convs) are one block."""
    oc, icg = node.inputs[1].type.shape[:2]
    ic_bn = block(icg) or (icg if icg <= 4 else None)
    oc_bn = block(oc)
    return None if ic_bn is None or oc_bn is None else (ic_bn, oc_bn)


def choose_pow2(node: Node) -> tuple[int, int] | None:
    """The largest power-of-two input block up to 16 (3 for an RGB input), outputs 16 or 8."""
    oc, icg = node.inputs[1].type.shape[:2]
    ic_bn = 3 if icg == 3 else next(b for b in (16, 8, 4, 2, 1) if icg % b == 0)
    oc_bn = block(oc)
    return None if oc_bn is None else (ic_bn, oc_bn)


def conv(fn: Function, x: Value, oc: int, k: int = 3, group: int = 1, bias: bool = True,
         stride: int = 1, name: str | None = None) -> Value:
    c = x.type.shape[1]
    w = fn.constant(rand(oc, c // group, k, k, scale=(2 / (c // group * k * k)) ** 0.5), "w")
    b = fn.constant(rand(oc, scale=0.1), "b") if bias else None
    p = k // 2
    return fn.op("Conv", x, w, b, pads=[p, p, p, p], strides=[stride, stride], group=group,
                 name=name)


def new_graph(c: int = 16, hw: int = 8, n: int = 1) -> tuple[Function, Value]:
    fn = Function("g")
    return fn, fn.add_input("x", TensorType((n, c, hw, hw), F32))


def ops(fn: Function) -> Counter:
    return Counter(n.op for n in fn.nodes)


def transforms(fn: Function) -> list[tuple[str, str]]:
    return [(n.attrs["src_layout"], n.attrs["dst_layout"]) for n in fn.nodes
            if n.op == "LayoutTransform"]


def converted(fn: Function, pick=choose, inputs: dict[str, np.ndarray] | None = None,
              rtol: float = 1e-5) -> Function:
    """Run the pass, verify the result, and compare outputs with the original on random data."""
    before = str(fn)
    new = alter_conv_layout(fn, pick)
    assert str(fn) == before, "the pass changed its input"
    verify(new)
    assert [(v.name, v.type) for v in new.inputs] == [(v.name, v.type) for v in fn.inputs]
    assert [(v.name, v.type) for v in new.outputs] == [(v.name, v.type) for v in fn.outputs]
    # at most one transform per (value, layout)
    seen = [(id(n.inputs[0]), n.attrs["dst_layout"]) for n in new.nodes
            if n.op == "LayoutTransform"]
    assert len(seen) == len(set(seen))
    if inputs is None:
        inputs = {v.name: rand(*v.type.shape) for v in fn.inputs}
    want = evaluate_function(fn, inputs)
    got = evaluate_function(new, inputs)
    for k, w in want.items():
        assert got[k].shape == w.shape and got[k].dtype == w.dtype
        np.testing.assert_allclose(got[k], w, rtol=rtol, atol=rtol * np.abs(w).max())
    return new


# -- small graphs ---------------------------------------------------------------------------------

def test_conv_bn_relu_pool_chain() -> None:
    fn, x = new_graph(c=3, hw=12)
    y = conv(fn, x, 32, name="conv1")
    y = fn.op("Mul", y, fn.constant(rand(32, 1, 1), "scale"))
    y = fn.op("Add", y, fn.constant(rand(1, 32, 1, 1), "shift"))
    y = fn.op("Relu", y)
    y = fn.op("MaxPool", y, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    y = conv(fn, y, 16, k=1, bias=False, name="conv2")
    y = fn.op("AveragePool", y, kernel_shape=[2, 2], strides=[2, 2], count_include_pad=1)
    fn.outputs = [fn.op("Clip", y, fn.constant(np.float32(0)), fn.constant(np.float32(0.5)))]
    new = converted(fn)
    assert ops(new) == {"ConvNCHWc": 2, "PoolNCHWc": 2, "Mul": 1, "Add": 1, "Relu": 1,
                        "Clip": 1, "LayoutTransform": 2}
    assert transforms(new) == [("NCHW", "NCHW3c"), ("NCHW16c", "NCHW")]
    conv1 = new.node_by_name("conv1")
    assert conv1.op == "ConvNCHWc" and conv1.inputs[1].type.shape == (2, 1, 3, 3, 3, 16)
    assert conv1.inputs[2].type.shape == (2, 16)
    assert conv1.attrs == {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1],
                           "group": 1, "flat_spatial": 0}
    mul = next(n for n in new.nodes if n.op == "Mul")
    assert mul.inputs[1].type.shape == (1, 2, 1, 1, 16) and mul.inputs[1].is_constant


def test_residual_block_and_classifier() -> None:
    fn, x = new_graph(c=16, hw=8, n=2)
    r1 = fn.op("Relu", conv(fn, x, 32))
    y = conv(fn, r1, 32)
    y = fn.op("Relu", fn.op("Sum", y, r1, conv(fn, r1, 32, k=1)))
    y = fn.op("GlobalAveragePool", y)
    y = fn.op("Flatten", y, axis=1)
    fn.outputs = [fn.op("Gemm", y, fn.constant(rand(10, 32)), transB=1)]
    new = converted(fn)
    assert ops(new)["ConvNCHWc"] == 3 and ops(new)["PoolNCHWc"] == 1
    assert transforms(new) == [("NCHW", "NCHW16c"), ("NCHW16c", "NCHW")]
    assert next(n for n in new.nodes if n.op == "LayoutTransform" and
                n.attrs["dst_layout"] == "NCHW").outputs[0].type.shape == (2, 32, 1, 1)


def test_concat_of_branches_with_different_blocks() -> None:
    fn, x = new_graph(c=16)
    a = conv(fn, x, 32, name="a")   # blocked by 16
    b = conv(fn, x, 24, name="b")   # blocked by 8
    c = conv(fn, x, 8, name="c")    # blocked by 8
    y = fn.op("Concat", a, b, c, axis=-3)
    fn.outputs = [conv(fn, fn.op("Relu", y), 16, name="d")]
    new = converted(fn)
    assert ops(new)["ConvNCHWc"] == 4 and ops(new)["Concat"] == 1
    cat = next(n for n in new.nodes if n.op == "Concat")
    assert cat.attrs["axis"] == 1 and cat.outputs[0].type.shape == (1, 8, 8, 8, 8)
    # the most common block that divides every input: 8; the 16-blocked branch is re-blocked,
    # and the last conv (ic_bn 16) reads the concat re-blocked to 16
    assert sorted(transforms(new)) == [("NCHW", "NCHW16c"), ("NCHW16c", "NCHW"),
                                       ("NCHW16c", "NCHW8c"), ("NCHW8c", "NCHW16c")]


def test_concat_with_an_nchw_input() -> None:
    fn, x = new_graph(c=16)
    a = conv(fn, x, 16)
    y = fn.op("Concat", a, fn.op("Transpose", x, perm=[0, 1, 3, 2]), axis=1)
    fn.outputs = [conv(fn, y, 16)]
    new = converted(fn)
    assert ops(new)["Concat"] == 1 and ops(new)["Transpose"] == 1
    assert sorted(transforms(new)) == [("NCHW", "NCHW16c"), ("NCHW", "NCHW16c"),
                                       ("NCHW16c", "NCHW")]


def test_concat_of_nchw_inputs_for_a_conv_is_blocked_in_its_block() -> None:
    # SegFormer's head: resized maps concatenated for a 1x1 convolution; each input is
    # transformed on its own and the concat joins whole blocks (the conv reads it directly)
    fn, x = new_graph(c=16)
    parts = [fn.op("Resize", fn.op("Transpose", x, perm=[0, 1, 3, 2]), sizes=[1, 16, 8, 8],
                   scales=[1.0, 1.0, 1.0, 1.0], mode="linear") for _ in range(3)]
    y = fn.op("Concat", *parts, axis=1)
    fn.outputs = [conv(fn, y, 16, k=1)]
    new = converted(fn)
    cat = next(n for n in new.nodes if n.op == "Concat")
    assert cat.outputs[0].type.shape == (1, 3, 8, 8, 16)
    assert sorted(transforms(new)) == [("NCHW", "NCHW16c")] * 3 + [("NCHW16c", "NCHW")]
    # read by anything but one ungrouped conv (here, also returned): the concat stays NCHW
    fn2, x2 = new_graph(c=16)
    y2 = fn2.op("Concat", fn2.op("Relu", x2), fn2.op("Neg", x2), axis=1)
    fn2.outputs = [conv(fn2, y2, 16, k=1), y2]
    new2 = converted(fn2)
    assert next(n for n in new2.nodes if n.op == "Concat").outputs[0].type.ndim == 4


def test_depthwise_and_grouped_convs() -> None:
    fn, x = new_graph(c=32, hw=9)
    y = fn.op("Relu", conv(fn, x, 32, group=32, stride=2, name="dw"))  # ICg 1
    y = conv(fn, y, 64, k=1, group=2, name="g2")                       # ICg 16
    y = conv(fn, y, 64, group=4, name="g4")                            # ICg 16
    y = conv(fn, y, 48, k=1, group=8, name="g8")                       # ICg 8, OC/group 6 < oc_bn
    fn.outputs = [conv(fn, y, 48, group=48, bias=False, name="dw2")]
    new = converted(fn)
    assert ops(new)["ConvNCHWc"] == 5 and ops(new)["Conv"] == 0
    dw = new.node_by_name("dw")
    assert dw.attrs["group"] == 32 and dw.inputs[1].type.shape == (2, 1, 3, 3, 1, 16)
    # a depthwise conv reading NCHW data gets it blocked like its output
    assert dw.inputs[0].type.shape == (1, 2, 9, 9, 16)
    assert new.node_by_name("g8").inputs[1].type.shape == (3, 1, 1, 1, 8, 16)
    # every conv reads its data in exactly its ic_bn: g8 (ic_bn 8) gets a re-blocked copy
    assert transforms(new) == [("NCHW", "NCHW16c"), ("NCHW16c", "NCHW8c"),
                               ("NCHW16c", "NCHW")]


def test_channels_not_divisible_keep_nchw() -> None:
    fn, x = new_graph(c=6, hw=6)
    y = fn.op("Relu", conv(fn, x, 12))
    fn.outputs = [fn.op("MaxPool", conv(fn, y, 10), kernel_shape=[2, 2])]
    new = converted(fn)
    assert ops(new) == ops(fn) and count_layout_transforms(new) == 0


def test_mixed_blocked_and_nchw_convs() -> None:
    fn, x = new_graph(c=16, hw=6)
    a = fn.op("Relu", conv(fn, x, 16, name="a"))
    b = fn.op("Relu", conv(fn, a, 12, name="b"))     # 12 output channels: stays NCHW
    c = conv(fn, b, 16, name="c")                    # 12 input channels: stays NCHW
    fn.outputs = [fn.op("Add", c, a)]
    new = converted(fn)
    assert new.node_by_name("b").op == "Conv" and new.node_by_name("c").op == "Conv"
    assert sorted(transforms(new)) == [("NCHW", "NCHW16c"), ("NCHW", "NCHW16c"),
                                       ("NCHW16c", "NCHW"), ("NCHW16c", "NCHW")]


def test_per_channel_operands_computed_and_constant() -> None:
    # squeeze-and-excitation: the scale is computed, (1, C, 1, 1), blocked by its own convs
    fn, x = new_graph(c=16, hw=6)
    gate = fn.add_input("gate", TensorType((32, 1, 1), F32))
    y = conv(fn, x, 32)
    s = fn.op("GlobalAveragePool", y)
    s = fn.op("Sigmoid", conv(fn, fn.op("Relu", conv(fn, s, 16, k=1)), 32, k=1))
    y = fn.op("Mul", y, s)
    y = fn.op("PRelu", y, fn.constant(rand(32, 1, 1, scale=0.1)))
    y = fn.op("Mul", y, gate)                       # a computed (C, 1, 1) operand
    y = fn.op("Div", y, fn.constant(np.full((1, 1, 1, 1), 2.0, np.float32)))  # a scalar
    fn.outputs = [y]
    new = converted(fn)
    assert ops(new)["ConvNCHWc"] == 3 and ops(new)["PoolNCHWc"] == 1
    assert ops(new)["Reshape"] == 1   # gate (32, 1, 1) -> (1, 32, 1, 1) -> NCHW16c
    assert sorted(transforms(new)) == [("NCHW", "NCHW16c"), ("NCHW", "NCHW16c"),
                                       ("NCHW16c", "NCHW")]


def test_layout_dependent_operands_keep_nchw() -> None:
    fn, x = new_graph(c=16, hw=6)
    y = conv(fn, x, 16)
    y = fn.op("Add", y, fn.constant(rand(1, 1, 6, 6)))   # spatial broadcast: not per-channel
    fn.outputs = [fn.op("Relu", y)]
    new = converted(fn)
    assert ops(new)["Add"] == 1 and ops(new)["Relu"] == 1
    assert transforms(new) == [("NCHW", "NCHW16c"), ("NCHW16c", "NCHW")]
    assert next(n for n in new.nodes if n.op == "Add").outputs[0].type.ndim == 4


def _qdq(fn: Function, y: Value, scale: np.ndarray, zero: np.ndarray, axis: int = 1) -> Value:
    q = fn.op("QuantizeLinear", y, fn.constant(scale), fn.constant(zero), axis=axis)
    return fn.op("DequantizeLinear", q, fn.constant(scale), fn.constant(zero), axis=axis)


def test_per_tensor_quantizers_stay_blocked_per_channel_ones_do_not() -> None:
    """A QDQ network's activations (per-tensor scale and zero point) are elementwise: the
    convolutions and the Q/DQ between them stay blocked, with no transform in between; a
    per-channel Q/DQ (a 1-D scale on axis 1) reads NCHW."""
    fn, x = new_graph(c=16, hw=6)
    y = _qdq(fn, conv(fn, x, 16), np.array(0.05, np.float32), np.array(3, np.uint8))
    y = _qdq(fn, fn.op("Relu", conv(fn, y, 16)), np.array(0.04, np.float32),
             np.array(-2, np.int8))
    fn.outputs = [conv(fn, y, 16)]
    new = converted(fn)
    assert transforms(new) == [("NCHW", "NCHW16c"), ("NCHW16c", "NCHW")]
    assert all(n.outputs[0].type.ndim == 5 for n in new.nodes
               if n.op in ("QuantizeLinear", "DequantizeLinear"))

    fn, x = new_graph(c=16, hw=6)
    scales = (RNG.uniform(0.01, 0.1, 16)).astype(np.float32)
    y = _qdq(fn, conv(fn, x, 16), scales, np.zeros(16, np.int8))
    fn.outputs = [conv(fn, y, 16)]
    new = converted(fn)
    assert transforms(new) == [("NCHW", "NCHW16c"), ("NCHW16c", "NCHW"), ("NCHW", "NCHW16c"),
                               ("NCHW16c", "NCHW")]
    assert all(n.outputs[0].type.ndim == 4 for n in new.nodes
               if n.op in ("QuantizeLinear", "DequantizeLinear"))


def test_one_transform_shared_by_nchw_readers_and_outputs() -> None:
    fn, x = new_graph(c=16, hw=4)
    y = conv(fn, x, 16, name="c")
    r = fn.op("Reshape", y, shape=[1, -1])
    s = fn.op("Softmax", y, axis=1)
    fn.outputs = [y, r, s, fn.op("Relu", y)]
    new = converted(fn)
    assert transforms(new) == [("NCHW", "NCHW16c"), ("NCHW16c", "NCHW"), ("NCHW16c", "NCHW")]
    back = [n for n in new.nodes if n.op == "LayoutTransform"][1]
    assert back.outputs[0].name == y.name  # the conv's NCHW value keeps its name


def test_maxpool_with_indices_and_non_constant_weight_stay() -> None:
    fn, x = new_graph(c=16, hw=6)
    w = fn.add_input("w", TensorType((16, 16, 1, 1), F32))
    y = conv(fn, x, 16)
    pool = fn.add_node("MaxPool", [y], {"kernel_shape": [2, 2], "strides": [2, 2]})
    z = fn.op("Conv", pool.outputs[0], w)
    fn.outputs = [z, pool.outputs[1]]
    new = converted(fn)
    assert ops(new)["MaxPool"] == 1 and ops(new)["Conv"] == 1 and ops(new)["ConvNCHWc"] == 1


def test_shared_weight_packed_once_and_input_transform_reused() -> None:
    fn, x = new_graph(c=16, hw=5)
    w = fn.constant(rand(16, 16, 3, 3, scale=0.1))
    a = fn.op("Conv", x, w, pads=[1, 1, 1, 1])
    b = fn.op("Conv", x, w, strides=[2, 2])
    fn.outputs = [fn.op("Relu", a), fn.op("Relu", b)]
    new = converted(fn)
    packed = {id(n.inputs[1]) for n in new.nodes if n.op == "ConvNCHWc"}
    assert len(packed) == 1
    assert transforms(new) == [("NCHW", "NCHW16c"), ("NCHW16c", "NCHW"), ("NCHW16c", "NCHW")]


def test_bad_choice_is_an_error() -> None:
    fn, x = new_graph(c=16, hw=4)
    fn.outputs = [conv(fn, x, 16, name="c")]
    with pytest.raises(PassError, match="node c"):
        alter_conv_layout(fn, lambda node: (5, 16))


def choose_padded(node: Node) -> tuple[int, ...] | None:
    """Like ``choose``, but output channels that 16 does not divide are padded to 16 (to 32 for
    an 8-channel conv, to exercise an explicit padded total)."""
    oc, icg = node.inputs[1].type.shape[:2]
    ic_bn = block(icg) or (icg if icg <= 4 else None)
    if ic_bn is None or int(node.attrs.get("group", 1) or 1) != 1:
        return choose(node)
    if oc == 8:
        return ic_bn, 16, 32
    return ic_bn, 16


def test_padded_output_channels_flow_through_unary_ops_and_pools() -> None:
    fn, x = new_graph(c=16, hw=9)
    y = fn.op("Relu", conv(fn, x, 40, name="head"))  # 40 -> 48 channels, 8 of them zero
    y = fn.op("Clip", y, fn.constant(np.float32(-1)), fn.constant(np.float32(0.7)))
    y = fn.op("MaxPool", y, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    fn.outputs = [fn.op("GlobalAveragePool", y)]
    new = converted(fn, choose_padded)
    head = new.node_by_name("head")
    assert head.inputs[1].type.shape == (3, 1, 3, 3, 16, 16)
    w = unpack_conv_weight(head.inputs[1].data)
    original = fn.node_by_name("head")
    np.testing.assert_array_equal(w[:40], original.inputs[1].data)
    np.testing.assert_array_equal(w[40:], 0)  # the padding channels' weights and bias
    np.testing.assert_array_equal(head.inputs[2].data.ravel()[:40], original.inputs[2].data)
    np.testing.assert_array_equal(head.inputs[2].data.ravel()[40:], 0)
    assert ops(new) == {"ConvNCHWc": 1, "Relu": 1, "Clip": 1, "PoolNCHWc": 2,
                        "LayoutTransform": 2}
    back = [n for n in new.nodes if n.op == "LayoutTransform"][-1]
    assert back.attrs["channels"] == 40 and back.outputs[0].type.shape == (1, 40, 1, 1)


def test_padded_values_reach_other_ops_through_nchw() -> None:
    fn, x = new_graph(c=16, hw=6)
    a = conv(fn, x, 8, name="narrow")  # padded to 32 channels
    b = conv(fn, x, 8, k=1, name="plain")  # no padding: 8 divides 8
    s = fn.op("Add", a, b)  # two inputs: the padded one is sliced back to NCHW first
    c = conv(fn, a, 16, name="next")  # a conv reading the padded value
    fn.outputs = [s, fn.op("Concat", a, c, axis=1), a]
    new = converted(fn, lambda n: choose_padded(n) if n.name != "plain" else (16, 8))
    narrow = new.node_by_name("narrow")
    assert narrow.outputs[0].type.shape == (1, 2, 6, 6, 16)
    # one NCHW copy of the padded value (channels 8) serves the Add, the next conv's input,
    # the concat and the function output
    sliced = [n for n in new.nodes if n.op == "LayoutTransform" and n.attrs.get("channels")]
    assert len(sliced) == 1 and sliced[0].attrs["channels"] == 8
    assert sliced[0].outputs[0].type.shape == (1, 8, 6, 6)


def test_bad_padding_choices_are_errors() -> None:
    fn, x = new_graph(c=16, hw=4)
    fn.outputs = [conv(fn, x, 16, name="c")]
    with pytest.raises(PassError, match="node c.*must be its 16 output channels"):
        alter_conv_layout(fn, lambda node: (16, 16, 8))  # fewer than the conv has
    with pytest.raises(PassError, match="node c"):
        alter_conv_layout(fn, lambda node: (16, 16, 40))  # not whole blocks
    fn, x = new_graph(c=16, hw=4)
    fn.outputs = [conv(fn, x, 24, group=2, name="g")]
    with pytest.raises(PassError, match="node g.*when group is 1, more"):
        alter_conv_layout(fn, lambda node: (8, 16))


def test_fusion_of_the_blocked_graph() -> None:
    fn, x = new_graph(c=3, hw=8)
    y = fn.op("Relu", conv(fn, x, 16))
    y = fn.op("Relu", fn.op("Add", conv(fn, y, 16), y))
    y = fn.op("MaxPool", y, kernel_shape=[2, 2], strides=[2, 2])
    fn.outputs = [fn.op("Flatten", y)]
    new = converted(fn)
    groups = fuse_ops(new)
    assert [g.ops for g in groups] == [
        ["LayoutTransform"], ["ConvNCHWc", "Relu"], ["ConvNCHWc", "Add", "Relu"],
        ["PoolNCHWc"], ["LayoutTransform", "Flatten"]]


# -- light models ---------------------------------------------------------------------------------

@cache
def light(name: str) -> tuple[Function, dict[str, np.ndarray]]:
    from tessera.testing.light_models import load_light_model

    model = load_light_model(name)
    fn = import_onnx(model.model, input_shapes=model.input_shapes)
    return PassManager(opt_level=3).run(fn), model.inputs


#: (model, choose, most LayoutTransforms): the input, LRN/Reshape/Softmax boundaries, the
#: channel shuffles of ShuffleNet (Reshape -> Transpose -> Reshape in NCHW), its group convs of
#: 28 and 34 channels per group (NCHW with the plain 16/8 choice), and in ShuffleNet re-blocking
#: where a conv's ic_bn differs from the block its data arrives in
LIGHT_CASES = [
    ("light_resnet50", choose, 2),
    ("light_squeezenet", choose, 2),
    ("light_inception_v1", choose, 6),
    ("light_densenet121", choose, 2),
    ("light_shufflenet", choose, 66),
    ("light_shufflenet", choose_pow2, 68),
]


@pytest.mark.parametrize("name, pick, most", [
    pytest.param(*c, id=f"{c[0]}-{c[1].__name__}",
                 marks=pytest.mark.slow if c[0] in ("light_resnet50", "light_densenet121") else ())
    for c in LIGHT_CASES])
def test_light_models(name: str, pick, most: int) -> None:
    fn, inputs = light(name)
    new = converted(fn, pick, inputs)
    assert count_layout_transforms(new) <= most
    convs = [n for n in fn.nodes if n.op == "Conv"]
    chosen = sum(1 for n in convs if pick(n) is not None)
    assert ops(new)["ConvNCHWc"] == chosen and ops(new)["Conv"] == len(convs) - chosen
    if name != "light_shufflenet":
        assert ops(new)["Conv"] == 0
    pools = sum(ops(fn)[p] for p in ("MaxPool", "AveragePool", "GlobalAveragePool"))
    assert ops(new)["PoolNCHWc"] >= pools - 1  # Inception's pool after an LRN stays NCHW
    # fusion still puts every blocked conv at the head of its own group
    groups = fuse_ops(new)
    assert sum(1 for g in groups if g.anchor is not None and g.anchor.op == "ConvNCHWc") == chosen
