"""Convolution ops (tessera.ops.conv) and their ONNX converters, checked against onnxruntime
(or ONNX's reference evaluator for ops onnxruntime lacks) on one-node models over random data:
shapes, pads, strides, dilations, groups, auto_pad, opsets and element types."""

from __future__ import annotations

import numpy as np
import pytest
from nn_support import F16, check, rand
from onnx_node import one_node_model

from tessera.errors import ModelImportError, OpError
from tessera.frontend.onnx import import_onnx
from tessera.ir.graph import Function
from tessera.ir.types import DType, TensorType

# -- Conv ---------------------------------------------------------------------------------------

CONV_CASES = [
    # x shape, w shape, attrs
    ((2, 3, 9, 8), (4, 3, 3, 3), {}),
    ((1, 3, 9, 8), (4, 3, 3, 3), {"pads": [1, 2, 0, 1], "strides": [2, 1]}),
    ((1, 4, 10, 9), (6, 2, 3, 2), {"group": 2, "dilations": [2, 1], "pads": [1, 1, 1, 1]}),
    ((1, 6, 7, 7), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),  # depthwise
    ((1, 4, 7, 7), (8, 1, 3, 3), {"group": 4, "strides": [2, 2]}),  # channel multiplier 2
    ((2, 8, 5, 6), (5, 8, 1, 1), {}),  # pointwise
    ((1, 8, 9, 9), (5, 8, 1, 1), {"strides": [2, 2]}),
    ((1, 3, 11), (2, 3, 4), {"strides": [3], "pads": [2, 1], "dilations": [2]}),  # 1-D
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), {"pads": [1, 0, 1, 0, 1, 1], "strides": [1, 2, 2]}),
    ((1, 3, 10, 9), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 3, 10, 9), (4, 3, 4, 4), {"auto_pad": "SAME_LOWER", "strides": [3, 2]}),
    ((1, 3, 10, 9), (4, 3, 3, 2), {"auto_pad": "VALID", "strides": [2, 3]}),
]


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
def test_conv_same_with_dilations(mode: str) -> None:
    # onnxruntime rejects auto_pad SAME with dilations; the padding uses the dilated kernel.
    x, w = rand(1, 2, 9, 8), rand(3, 2, 3, 3)
    fn = import_onnx(one_node_model("Conv", [x, w], {"auto_pad": mode, "dilations": [2, 3],
                                                     "strides": [2, 1]}, opset=11, consts=(1,)))
    (node,) = fn.nodes
    assert node.attrs["pads"] == ([2, 3, 2, 3] if mode == "SAME_UPPER" else [2, 3, 2, 3])
    assert fn.outputs[0].type.shape == (1, 3, 5, 8)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
def test_conv(xs: tuple, ws: tuple, attrs: dict, bias: bool) -> None:
    b = rand(ws[0]) if bias else None
    check("Conv", [rand(*xs), rand(*ws), b], attrs, opset=11, consts=(1, 2))


@pytest.mark.parametrize("opset", [7, 11, 22])
def test_conv_opsets_and_runtime_weights(opset: int) -> None:
    check("Conv", [rand(1, 2, 6, 6), rand(3, 2, 3, 3), rand(3)], {"pads": [1, 1, 1, 1]},
          opset=opset)


def test_conv_float16() -> None:
    check("Conv", [rand(1, 4, 8, 8, dtype=F16), rand(6, 2, 3, 3, dtype=F16)],
          {"group": 2, "pads": [1, 1, 1, 1]}, opset=13)


def test_conv_errors() -> None:
    with pytest.raises(ModelImportError, match="group"):
        import_onnx(one_node_model("Conv", [rand(1, 3, 5, 5), rand(4, 3, 3, 3)], {"group": 2},
                                   opset=13, consts=(1,)))
    g = Function()
    x = g.add_input("x", TensorType((1, 3, 4, 4), DType.float32))
    w = g.constant(rand(2, 3, 5, 5))
    with pytest.raises(OpError, match="empty output"):
        g.op("Conv", x, w)
    # negative pads (found by the fuzzer: ref's numpy pad failed at run time)
    with pytest.raises(ModelImportError, match=r"node 'Conv_y0'.*pads \[-1, 1, 1, 1\] must not be"):
        import_onnx(one_node_model("Conv", [rand(1, 3, 5, 5), rand(4, 3, 3, 3)],
                                   {"pads": [-1, 1, 1, 1]}, opset=13, consts=(1,)))


# -- ConvTranspose ------------------------------------------------------------------------------

CONVT_CASES = [
    ((1, 3, 4, 5), (3, 2, 3, 3), {}),
    ((2, 3, 4, 5), (3, 2, 3, 3), {"strides": [2, 3], "pads": [1, 0, 1, 2]}),
    ((1, 3, 4, 5), (3, 2, 3, 3), {"strides": [2, 2], "output_padding": [1, 1]}),
    ((1, 4, 3, 4), (4, 3, 2, 3), {"group": 2, "strides": [2, 1], "dilations": [2, 2]}),
    ((1, 3, 4, 4), (3, 2, 3, 3), {"strides": [2, 2], "output_shape": [9, 10]}),
    ((1, 3, 4, 4), (3, 2, 3, 3), {"strides": [2, 2], "output_shape": [8, 7]}),
    ((1, 3, 4, 4), (3, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 3, 4, 4), (3, 2, 4, 3), {"strides": [3, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 3, 4, 4), (3, 2, 3, 3), {"strides": [2, 2], "auto_pad": "VALID"}),
    ((1, 2, 7), (2, 3, 3), {"strides": [2], "pads": [1, 2]}),
    ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), {"strides": [2, 1, 2], "pads": [0, 1, 0, 1, 0, 0]}),
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", CONVT_CASES)
def test_conv_transpose(xs: tuple, ws: tuple, attrs: dict, bias: bool) -> None:
    b = rand(ws[1] * attrs.get("group", 1)) if bias else None
    check("ConvTranspose", [rand(*xs), rand(*ws), b], attrs, opset=11, consts=(1, 2))


def test_conv_transpose_float16_opset7() -> None:
    check("ConvTranspose", [rand(1, 2, 3, 3, dtype=F16), rand(2, 2, 3, 3, dtype=F16)],
          {"strides": [2, 2]}, opset=7)


# -- Col2Im -------------------------------------------------------------------------------------

@pytest.mark.parametrize("attrs", [{}, {"strides": [2, 1], "pads": [1, 0, 1, 1]},
                                   {"dilations": [2, 1]}])
def test_col2im(attrs: dict) -> None:
    image, block = np.array([6, 5], np.int64), np.array([3, 2], np.int64)
    s, p, d = attrs.get("strides", [1, 1]), attrs.get("pads", [0] * 4), attrs.get("dilations",
                                                                                    [1, 1])
    blocks = [(image[i] + p[i] + p[i + 2] - (block[i] - 1) * d[i] - 1) // s[i] + 1
              for i in range(2)]
    x = rand(2, 3 * 6, int(np.prod(blocks)))
    check("Col2Im", [x, image, block], attrs, opset=18, consts=(1, 2), oracle="ref")


# -- DeformConv ---------------------------------------------------------------------------------

@pytest.mark.parametrize("attrs,mask,bias", [
    ({"pads": [1, 1, 1, 1]}, False, False),
    ({"strides": [2, 1], "dilations": [1, 2]}, True, True),
    ({"group": 2, "offset_group": 2, "pads": [0, 1, 1, 0]}, True, False),
])
def test_deform_conv(attrs: dict, mask: bool, bias: bool) -> None:
    x = rand(2, 4, 6, 7)
    w = rand(6, 4 // attrs.get("group", 1), 3, 2)
    og = attrs.get("offset_group", 1)
    s, d, p = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1]), attrs.get(
        "pads", [0] * 4)
    out = [(x.shape[2 + i] + p[i] + p[i + 2] - (w.shape[2 + i] - 1) * d[i] - 1) // s[i] + 1
           for i in range(2)]
    offset = rand(2, og * 6 * 2, *out, lo=-2, hi=2)
    m = rand(2, og * 6, *out, lo=0, hi=1) if mask else None
    b = rand(6) if bias else None
    check("DeformConv", [x, w, offset, b, m], attrs, opset=19, oracle="ref")
