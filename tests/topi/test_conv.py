"""Convolutions (tessera.topi.nn.conv2d, conv_transpose) and the blocked layout computes
(tessera.topi.layout, ConvNCHWc) against numpy references."""

from __future__ import annotations

import pytest
from topi.support import assert_close, check_op, find_op, has_div_or_mod, rand
from topi.te_eval import evaluate

from tessera import te
from tessera.ops.layout import pack_conv_weight, pack_nchwc
from tessera.ops.registry import get_schema
from tessera.topi import nn, tag
from tessera.topi.layout import layout_transform

CONV_CASES = {
    "3x3_pad1": ((2, 3, 7, 6), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    "stride_asym_pads": ((1, 4, 9, 8), (5, 4, 3, 2), {"strides": [2, 3], "pads": [0, 1, 2, 1]}),
    "dilation": ((1, 2, 9, 9), (3, 2, 3, 3), {"dilations": [2, 1], "pads": [2, 1, 2, 1]}),
    "groups2": ((1, 4, 6, 6), (6, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    "depthwise": ((2, 4, 5, 5), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    "depthwise_mult2": ((1, 3, 5, 6), (6, 1, 3, 3), {"group": 3, "strides": [2, 2]}),
    "pointwise": ((1, 8, 4, 4), (6, 8, 1, 1), {}),
    "one_channel": ((1, 1, 5, 5), (2, 1, 2, 2), {"strides": [2, 1]}),
    "conv1d": ((2, 3, 10), (4, 3, 3), {"pads": [1, 2], "strides": [2]}),
    "conv3d": ((1, 2, 4, 5, 4), (3, 2, 2, 3, 2), {"pads": [1, 0, 1, 0, 1, 1]}),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
@pytest.mark.parametrize("bias", [False, True])
def test_conv(case: str, bias: bool) -> None:
    xs, ws, attrs = CONV_CASES[case]
    inputs = [rand(*xs), rand(*ws)] + ([rand(ws[0])] if bias else [])
    check_op("Conv", inputs, attrs, consts=(1, 2), rtol=1e-4, atol=1e-5)


def test_conv_float16_and_weights_as_inputs() -> None:
    xs, ws, attrs = CONV_CASES["3x3_pad1"]
    check_op("Conv", [rand(*xs, dtype="float16"), rand(*ws, dtype="float16"),
                      rand(ws[0], dtype="float16")], attrs)
    check_op("Conv", [rand(*xs), rand(*ws)], attrs, rtol=1e-4, atol=1e-5)


def test_conv_structure_for_schedules() -> None:
    xs, ws, attrs = CONV_CASES["stride_asym_pads"]
    group = check_op("Conv", [rand(*xs), rand(*ws)], attrs, consts=(1,), rtol=1e-4, atol=1e-5)
    conv = find_op(group, tag.CONV2D_NCHW)
    assert conv is group.outputs[0].op
    assert [a.name for a in conv.reduce_axis] == ["rc", "ry", "rx"]
    assert conv.attrs["reduce_roles"] == ("ic", "kh", "kw")
    assert [a.name for a in conv.axis] == ["n", "oc", "oh", "ow"]
    assert not has_div_or_mod(conv)
    assert conv.attrs["strides"] == (2, 3) and conv.attrs["kernel_size"] == (3, 2)
    assert conv.attrs["pads"] == (0, 1, 2, 1)
    padded = conv.attrs["data_pad"]
    assert padded is not None and padded.op.tag == tag.PAD
    assert padded.const_shape() == (1, 4, 11, 10)
    assert conv.input_tensors()[0] is padded
    # no pad stage when nothing is padded
    group = check_op("Conv", [rand(1, 8, 4, 4), rand(6, 8, 1, 1)], {}, consts=(1,))
    conv = find_op(group, tag.CONV2D_NCHW)
    assert conv.attrs["data_pad"] is None and not has_div_or_mod(conv)


def test_depthwise_and_group_tags() -> None:
    xs, ws, attrs = CONV_CASES["depthwise"]
    group = check_op("Conv", [rand(*xs), rand(*ws)], attrs, consts=(1,))
    dw = find_op(group, tag.DEPTHWISE_CONV2D_NCHW)
    assert [a.name for a in dw.reduce_axis] == ["ry", "rx"] and not has_div_or_mod(dw)
    xs, ws, attrs = CONV_CASES["groups2"]
    group = check_op("Conv", [rand(*xs), rand(*ws)], attrs, consts=(1,), rtol=1e-4, atol=1e-5)
    find_op(group, tag.GROUP_CONV2D_NCHW)


def test_conv_bias_is_a_separate_broadcast_stage() -> None:
    xs, ws, attrs = CONV_CASES["3x3_pad1"]
    group = check_op("Conv", [rand(*xs), rand(*ws), rand(ws[0])], attrs, consts=(1, 2),
                     rtol=1e-4, atol=1e-5)
    out = group.outputs[0].op
    assert out.tag == tag.BROADCAST
    assert out.input_tensors()[0].op.tag == tag.CONV2D_NCHW


CONVT_CASES = {
    "basic": ((1, 3, 4, 5), (3, 2, 3, 3), {}),
    "stride2_pads": ((2, 2, 3, 4), (2, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "output_padding": ((1, 2, 3, 3), (2, 2, 3, 2), {"strides": [2, 3],
                                                     "output_padding": [1, 2]}),
    "dilation_groups": ((1, 4, 4, 4), (4, 3, 2, 2), {"dilations": [2, 1], "group": 2,
                                                     "pads": [0, 1, 1, 0]}),
    "conv1d": ((1, 3, 6), (3, 2, 4), {"strides": [3], "pads": [1, 2]}),
    "conv3d": ((1, 2, 3, 2, 3), (2, 2, 2, 2, 3), {"strides": [1, 2, 1]}),
}


@pytest.mark.parametrize("case", sorted(CONVT_CASES))
def test_conv_transpose(case: str) -> None:
    xs, ws, attrs = CONVT_CASES[case]
    m = ws[1] * attrs.get("group", 1)
    check_op("ConvTranspose", [rand(*xs), rand(*ws)], attrs, consts=(1,), rtol=1e-4, atol=1e-5)
    check_op("ConvTranspose", [rand(*xs), rand(*ws), rand(m)], attrs, rtol=1e-4, atol=1e-5)


# -- blocked layouts ------------------------------------------------------------------------------

@pytest.mark.parametrize("src,dst", [("NCHW", "NCHW4c"), ("NCHW8c", "NCHW"),
                                     ("NCHW4c", "NCHW2c"), ("NCHW2c", "NCHW8c"),
                                     ("NCHW4c", "NCHW4c")])
def test_layout_transform(src: str, dst: str) -> None:
    x = rand(2, 8, 3, 5)
    s = None if src == "NCHW" else int(src[4:-1])
    d = None if dst == "NCHW" else int(dst[4:-1])
    xin = x if s is None else pack_nchwc(x, s)
    want = x if d is None else pack_nchwc(x, d)
    t = te.placeholder(xin.shape, "float32", "x")
    y = layout_transform(t, src, dst)
    assert_close(evaluate(y, {t: xin}), want)
    check_op("LayoutTransform", [xin], {"src_layout": src, "dst_layout": dst})


@pytest.mark.parametrize("block, channels", [(8, 5), (16, 9), (4, 8)])
def test_layout_transform_keeps_the_first_channels(block: int, channels: int) -> None:
    x = rand(2, 8 if block <= 8 else 16, 3, 5)
    xin = pack_nchwc(x, block)
    t = te.placeholder(xin.shape, "float32", "x")
    y = layout_transform(t, f"NCHW{block}c", "NCHW", channels)
    assert_close(evaluate(y, {t: xin}), x[:, :channels])
    check_op("LayoutTransform", [xin], {"src_layout": f"NCHW{block}c", "dst_layout": "NCHW",
                                        "channels": channels})


NCHWC_CASES = {
    # (x shape, w shape, group, cd, ic_bn, oc_bn, attrs)
    "plain": ((2, 8, 6, 5), (8, 8, 3, 3), 1, 4, 4, 4, {"pads": [1, 1, 1, 1]}),
    "blocks_differ": ((1, 8, 5, 5), (6, 8, 3, 3), 1, 4, 2, 3,
                      {"strides": [2, 1], "pads": [1, 0, 0, 1]}),
    "grouped": ((1, 8, 5, 6), (8, 4, 3, 3), 2, 4, 2, 4, {"pads": [1, 1, 1, 1],
                                                         "dilations": [1, 2]}),
    "depthwise": ((2, 8, 6, 6), (8, 1, 3, 3), 8, 4, 1, 4, {"pads": [1, 1, 1, 1]}),
    "depthwise_blocks_differ": ((1, 8, 5, 5), (8, 1, 3, 3), 8, 2, 1, 4,
                                {"strides": [2, 2]}),
    "depthwise_mult2": ((1, 4, 5, 5), (8, 1, 3, 3), 4, 2, 1, 4, {"pads": [0, 1, 2, 1]}),
}


@pytest.mark.parametrize("case", sorted(NCHWC_CASES))
@pytest.mark.parametrize("bias", [False, True])
def test_conv_nchwc(case: str, bias: bool) -> None:
    xs, ws, group, cd, ic_bn, oc_bn, attrs = NCHWC_CASES[case]
    inputs = [pack_nchwc(rand(*xs), cd), pack_conv_weight(rand(*ws), ic_bn, oc_bn)]
    if bias:
        inputs.append(rand(ws[0] // oc_bn, oc_bn))
    g = check_op("ConvNCHWc", inputs, {**attrs, "group": group}, consts=(1, 2), rtol=1e-4,
                 atol=1e-5)
    conv = next(op for op in _ops(g) if op.tag in (tag.CONV2D_NCHWC, tag.DEPTHWISE_CONV2D_NCHWC))
    depthwise = ws[1] == 1 and group > 1
    assert conv.tag == (tag.DEPTHWISE_CONV2D_NCHWC if depthwise else tag.CONV2D_NCHWC)
    if depthwise:
        assert [a.name for a in conv.reduce_axis] == ["ry", "rx"]
        assert conv.attrs["reduce_roles"] == ("kh", "kw")
    else:
        assert [a.name for a in conv.reduce_axis] == ["icc", "ry", "rx", "ib"]
        assert conv.attrs["reduce_roles"] == ("icc", "kh", "kw", "ib")
    assert [a.name for a in conv.axis] == ["n", "oc_chunk", "oh", "ow", "oc_block"]
    simple = (group == 1 and cd == ic_bn) or (depthwise and cd == oc_bn and ws[0] == xs[1])
    assert has_div_or_mod(conv) == (not simple)


def test_conv_nchwc_float16_and_defaults() -> None:
    x = pack_nchwc(rand(1, 4, 5, 5, dtype="float16"), 4)
    w = pack_conv_weight(rand(4, 4, 3, 3, dtype="float16"), 2, 2)
    check_op("ConvNCHWc", [x, w], {})


def _ops(g) -> list:
    from topi.te_eval import all_ops

    return [op for op in all_ops(g.outputs) if isinstance(op, te.ComputeOp)]


def test_conv2d_nchw_public_api() -> None:
    x = te.placeholder((1, 4, 8, 8), "float32", "x")
    k = te.placeholder((8, 4, 3, 3), "float32", "k")
    y = nn.conv2d_nchw(x, k, strides=2, pads=[1, 1], dilation=1)
    assert y.const_shape() == (1, 8, 4, 4) and y.op.tag == tag.CONV2D_NCHW
    xd, kd = rand(1, 4, 8, 8), rand(8, 4, 3, 3)
    want = get_schema("Conv").evaluate([xd, kd], {"kernel_shape": None, "strides": [2, 2],
                                                  "pads": [1, 1, 1, 1], "dilations": None,
                                                  "group": 1})[0]
    assert_close(evaluate(y, {x: xd, k: kd}), want, rtol=1e-4, atol=1e-5)
    x5 = te.placeholder((1, 1, 8, 8, 4), "float32", "x5")
    k6 = te.placeholder((2, 1, 3, 3, 4, 4), "float32", "k6")
    y5 = nn.conv2d_NCHWc(x5, k6, 1, 1)
    assert y5.const_shape() == (1, 2, 8, 8, 4) and y5.op.attrs["oc_bn"] == 4
