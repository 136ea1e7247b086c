"""Blocked-layout ops (tessera.ops.layout): LayoutTransform, ConvNCHWc and PoolNCHWc, checked
against the NCHW references and against a direct loop over the documented index formula."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tessera.errors import OpError
from tessera.ir.graph import Function
from tessera.ir.types import DType, TensorType
from tessera.ops.layout import (
    layout_name,
    pack_conv_weight,
    pack_nchwc,
    parse_layout,
    unpack_conv_weight,
    unpack_nchwc,
)
from tessera.ops.registry import OpPattern, get_schema

RNG = np.random.default_rng(7)


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(dtype)


def run(op: str, *inputs: np.ndarray | None, **attrs) -> np.ndarray:
    """Build a one-node function (type inference included) and run the reference."""
    fn = Function("t")
    values = [fn.constant(a) if a is not None else None for a in inputs]
    node = fn.add_node(op, values, attrs)
    out = get_schema(op).evaluate(list(inputs), node.attrs)[0]
    assert out.shape == node.outputs[0].type.shape
    assert out.dtype == node.outputs[0].type.dtype.numpy
    return out


def test_patterns() -> None:
    assert get_schema("LayoutTransform").pattern == OpPattern.INJECTIVE
    assert get_schema("ConvNCHWc").pattern == OpPattern.OUT_ELEMWISE_FUSABLE
    assert get_schema("PoolNCHWc").pattern == OpPattern.OUT_ELEMWISE_FUSABLE
    for op in ("LayoutTransform", "ConvNCHWc", "PoolNCHWc"):
        assert get_schema(op).infer is not None


def test_layout_names() -> None:
    assert parse_layout("NCHW") is None
    assert parse_layout("NCHW16c") == 16
    assert parse_layout("NCHW3c") == 3
    assert layout_name(None) == "NCHW" and layout_name(8) == "NCHW8c"
    for bad in ("NHWC", "NCHW0c", "NCHWc", "nchw8c", "NCHW8C"):
        with pytest.raises(OpError, match="unknown layout"):
            parse_layout(bad)


# -- LayoutTransform -----------------------------------------------------------------------------

@pytest.mark.parametrize("shape, c", [((1, 16, 5, 7), 16), ((2, 24, 3, 3), 8), ((1, 3, 4, 4), 3),
                                      ((1, 6, 1, 1), 1), ((3, 12, 2, 5), 4)])
def test_layout_transform_to_blocked_and_back(shape: tuple[int, ...], c: int) -> None:
    x = rand(*shape)
    y = run("LayoutTransform", x, src_layout="NCHW", dst_layout=f"NCHW{c}c")
    n, ch, h, w = shape
    assert y.shape == (n, ch // c, h, w, c)
    for idx in itertools.product(*(range(d) for d in shape)):
        ni, ci, hi, wi = idx
        assert y[ni, ci // c, hi, wi, ci % c] == x[idx]
    back = run("LayoutTransform", y, src_layout=f"NCHW{c}c", dst_layout="NCHW")
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("a, b", [(16, 8), (8, 16), (4, 12), (12, 4), (8, 8)])
def test_layout_transform_between_blocks(a: int, b: int) -> None:
    x = rand(2, 48, 3, 5)
    xa = pack_nchwc(x, a)
    y = run("LayoutTransform", xa, src_layout=f"NCHW{a}c", dst_layout=f"NCHW{b}c")
    np.testing.assert_array_equal(y, pack_nchwc(x, b))


@pytest.mark.parametrize("shape, c, channels", [((1, 48, 3, 5), 16, 40), ((2, 32, 2, 2), 16, 1),
                                               ((1, 24, 4, 3), 8, 24), ((1, 64, 1, 1), 16, 33)])
def test_layout_transform_keeps_the_first_channels(shape, c: int, channels: int) -> None:
    x = rand(*shape)
    y = run("LayoutTransform", pack_nchwc(x, c), src_layout=f"NCHW{c}c", dst_layout="NCHW",
            channels=channels)
    np.testing.assert_array_equal(y, x[:, :channels])


def test_layout_transform_keeps_dtype() -> None:
    x = RNG.integers(-5, 5, (1, 8, 2, 2)).astype(np.int64)
    y = run("LayoutTransform", x, src_layout="NCHW", dst_layout="NCHW4c")
    assert y.dtype == np.int64
    np.testing.assert_array_equal(unpack_nchwc(y), x)


@pytest.mark.parametrize("shape, src, dst, message", [
    ((1, 10, 4, 4), "NCHW", "NCHW16c", "not divisible"),
    ((1, 2, 4, 4, 8), "NCHW8c", "NCHW3c", "not divisible"),
    ((1, 16, 4), "NCHW", "NCHW8c", "4-D"),
    ((1, 2, 4, 4, 8), "NCHW", "NCHW8c", "4-D"),
    ((1, 2, 4, 4, 8), "NCHW4c", "NCHW", "not in layout"),
    ((1, 16, 4, 4), "NCHW8c", "NCHW", "5-D"),
    ((1, 16, 4, 4), "NCHW", "NHWC", "unknown layout"),
])
def test_layout_transform_errors(shape, src, dst, message) -> None:
    fn = Function("t")
    x = fn.add_input("x", TensorType(shape, DType.float32))
    with pytest.raises(OpError, match=message):
        fn.add_node("LayoutTransform", [x], {"src_layout": src, "dst_layout": dst})


@pytest.mark.parametrize("shape, src, dst, channels, message", [
    ((1, 2, 4, 4, 8), "NCHW8c", "NCHW", 17, "between 1 and the input's 16"),
    ((1, 2, 4, 4, 8), "NCHW8c", "NCHW", -3, "between 1 and the input's 16"),
    ((1, 16, 4, 4), "NCHW", "NCHW8c", 8, "only from a blocked layout to NCHW"),
    ((1, 2, 4, 4, 8), "NCHW8c", "NCHW4c", 8, "only from a blocked layout to NCHW"),
])
def test_layout_transform_channels_errors(shape, src, dst, channels, message) -> None:
    fn = Function("t")
    x = fn.add_input("x", TensorType(shape, DType.float32))
    with pytest.raises(OpError, match=message):
        fn.add_node("LayoutTransform", [x], {"src_layout": src, "dst_layout": dst,
                                             "channels": channels})


# -- ConvNCHWc -----------------------------------------------------------------------------------

def conv_nchwc_by_formula(x: np.ndarray, w: np.ndarray, b: np.ndarray | None,
                          strides: list[int], pads: list[int], dilations: list[int],
                          group: int) -> np.ndarray:
    """The module doc's index formula, one output element at a time (small shapes only)."""
    n_, c1, h, wd, cd = x.shape
    ocb, icb, kh, kw, ic_bn, oc_bn = w.shape
    oc, icg = ocb * oc_bn, icb * ic_bn
    oh = (h + pads[0] + pads[2] - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    y = np.zeros((n_, ocb, oh, ow, oc_bn), np.float64)
    for n, occ, oy, ox, ob in itertools.product(range(n_), range(ocb), range(oh), range(ow),
                                                range(oc_bn)):
        o = occ * oc_bn + ob
        g = o // (oc // group)
        acc = 0.0 if b is None else float(b[occ, ob])
        for icc, ry, rx, ib in itertools.product(range(icb), range(kh), range(kw), range(ic_bn)):
            iy = oy * strides[0] - pads[0] + ry * dilations[0]
            ix = ox * strides[1] - pads[1] + rx * dilations[1]
            if 0 <= iy < h and 0 <= ix < wd:
                ic = g * icg + icc * ic_bn + ib
                acc += float(x[n, ic // cd, iy, ix, ic % cd]) * float(w[occ, icc, ry, rx, ib, ob])
        y[n, occ, oy, ox, ob] = acc
    return y


CONV_CASES = [
    # (N, C, H, W), OC, group, kernel, cd, ic_bn, oc_bn, strides, pads, dilations, bias
    ((1, 8, 6, 5), 16, 1, (3, 3), 8, 8, 16, [1, 1], [1, 1, 1, 1], [1, 1], True),
    ((2, 16, 7, 7), 8, 1, (1, 1), 16, 8, 8, [2, 2], [0, 0, 0, 0], [1, 1], False),
    ((1, 3, 9, 8), 8, 1, (3, 2), 3, 3, 8, [2, 1], [1, 0, 2, 1], [1, 1], True),
    ((1, 8, 9, 9), 8, 8, (3, 3), 4, 1, 4, [1, 2], [1, 1, 1, 1], [2, 1], True),  # depthwise
    ((1, 8, 6, 6), 8, 8, (3, 3), 8, 1, 8, [1, 1], [1, 1, 1, 1], [1, 1], False),  # depthwise
    ((1, 24, 5, 6), 12, 4, (3, 3), 8, 2, 4, [1, 1], [0, 1, 1, 0], [1, 1], True),  # grouped
    ((1, 12, 5, 5), 16, 2, (2, 2), 4, 6, 8, [1, 1], [1, 1, 0, 0], [1, 2], True),  # oc_bn spans
    ((1, 16, 4, 4), 32, 1, (3, 3), 4, 16, 16, [1, 1], [1, 1, 1, 1], [1, 1], True),  # cd < ic_bn
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_nchwc_matches_formula_and_conv(case) -> None:
    (n, c, h, wd), oc, group, (kh, kw), cd, ic_bn, oc_bn, s, p, d, has_bias = case
    x = rand(n, c, h, wd)
    w = rand(oc, c // group, kh, kw)
    b = rand(oc) if has_bias else None
    want = get_schema("Conv").reference(x, w, b, kernel_shape=None, strides=s, pads=p,
                                        dilations=d, group=group)
    xb = pack_nchwc(x, cd)
    wb = pack_conv_weight(w, ic_bn, oc_bn)
    bb = None if b is None else b.reshape(oc // oc_bn, oc_bn)
    got = run("ConvNCHWc", xb, wb, bb, strides=s, pads=p, dilations=d, group=group)
    np.testing.assert_allclose(unpack_nchwc(got), want, rtol=1e-5, atol=1e-6)
    formula = conv_nchwc_by_formula(xb, wb, bb, s, p, d, group)
    np.testing.assert_allclose(got, formula, rtol=1e-4, atol=1e-5)


def test_conv_nchwc_defaults_and_float16() -> None:
    x = rand(1, 8, 5, 5, dtype=np.float16)
    w = rand(8, 8, 3, 3, dtype=np.float16)
    got = run("ConvNCHWc", pack_nchwc(x, 4), pack_conv_weight(w, 4, 8))
    want = get_schema("Conv").reference(x, w, None, kernel_shape=None, strides=None, pads=None,
                                        dilations=None, group=1)
    assert got.dtype == np.float16 and got.shape == (1, 1, 3, 3, 8)
    np.testing.assert_allclose(unpack_nchwc(got).astype(np.float32), want.astype(np.float32),
                               rtol=1e-2, atol=1e-2)


def test_weight_packing_round_trip_and_index() -> None:
    w = rand(32, 6, 3, 2)
    p = pack_conv_weight(w, 3, 8)
    assert p.shape == (4, 2, 3, 2, 3, 8)
    assert p[2, 1, 2, 1, 0, 5] == w[2 * 8 + 5, 1 * 3 + 0, 2, 1]
    np.testing.assert_array_equal(unpack_conv_weight(p), w)
    with pytest.raises(OpError):
        pack_conv_weight(w, 4, 8)


@pytest.mark.parametrize("x_shape, w_shape, b_shape, attrs, message", [
    ((1, 2, 5, 5, 8), (2, 1, 3, 3, 8, 8), None, {"group": 1}, "expects 8 input channels"),
    ((1, 2, 5, 5, 8), (2, 2, 3, 3, 8, 8), (16,), {}, "bias"),
    ((1, 16, 5, 5), (2, 2, 3, 3, 8, 8), None, {}, "5-D"),
    ((1, 2, 5, 5, 8), (16, 16, 3, 3), None, {}, "6-D"),
    ((1, 2, 5, 5, 8), (2, 1, 3, 3, 8, 8), None, {"group": 3}, "group"),
    ((1, 2, 2, 2, 8), (2, 2, 3, 3, 8, 8), None, {}, "empty output"),
])
def test_conv_nchwc_errors(x_shape, w_shape, b_shape, attrs, message) -> None:
    fn = Function("t")
    x = fn.add_input("x", TensorType(x_shape, DType.float32))
    w = fn.add_input("w", TensorType(w_shape, DType.float32))
    b = fn.add_input("b", TensorType(b_shape, DType.float32)) if b_shape else None
    with pytest.raises(OpError, match=message):
        fn.add_node("ConvNCHWc", [x, w, b], attrs)


def test_conv_nchwc_needs_float() -> None:
    fn = Function("t")
    x = fn.add_input("x", TensorType((1, 1, 4, 4, 8), DType.int32))
    w = fn.add_input("w", TensorType((1, 1, 1, 1, 8, 8), DType.int32))
    with pytest.raises(OpError, match="float"):
        fn.add_node("ConvNCHWc", [x, w], {})


# -- PoolNCHWc -----------------------------------------------------------------------------------

POOL_CASES = [
    ("max", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("max", {"kernel_shape": [2, 3], "strides": [2, 1], "ceil_mode": 1}),
    ("max", {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [0, 1, 1, 0]}),
    ("avg", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("avg", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
             "count_include_pad": 1}),
    ("avg", {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}),
    ("avg", {"kernel_shape": [7, 7]}),
]


@pytest.mark.parametrize("mode, attrs", POOL_CASES)
@pytest.mark.parametrize("c", [4, 16])
def test_pool_nchwc_matches_nchw_pools(mode: str, attrs: dict, c: int) -> None:
    x = rand(2, 16, 9, 7) if attrs["kernel_shape"] != [7, 7] else rand(1, 16, 7, 7)
    op = "MaxPool" if mode == "max" else "AveragePool"
    want = get_schema(op).evaluate([x], {**_defaults(op), **attrs})[0]
    got = run("PoolNCHWc", pack_nchwc(x, c), mode=mode, **attrs)
    np.testing.assert_allclose(unpack_nchwc(got), want, rtol=1e-6, atol=1e-7)


def _defaults(op: str) -> dict:
    return {k: a.default for k, a in get_schema(op).attrs.items() if k != "kernel_shape"}


@pytest.mark.parametrize("mode, op", [("avg", "GlobalAveragePool"), ("max", "GlobalMaxPool")])
def test_pool_nchwc_global(mode: str, op: str) -> None:
    x = rand(2, 24, 5, 6)
    got = run("PoolNCHWc", pack_nchwc(x, 8), mode=mode, global_pool=1)
    assert got.shape == (2, 3, 1, 1, 8)
    np.testing.assert_allclose(unpack_nchwc(got), get_schema(op).reference(x), rtol=1e-6)


@pytest.mark.parametrize("shape, attrs, message", [
    ((1, 2, 5, 5, 8), {"mode": "min", "kernel_shape": [2, 2]}, "mode"),
    ((1, 2, 5, 5, 8), {"mode": "max"}, "kernel_shape is required"),
    ((1, 16, 5, 5), {"mode": "max", "kernel_shape": [2, 2]}, "5-D"),
    ((1, 2, 5, 5, 8), {"mode": "avg", "kernel_shape": [2]}, "2-D"),
])
def test_pool_nchwc_errors(shape, attrs, message) -> None:
    fn = Function("t")
    x = fn.add_input("x", TensorType(shape, DType.float32))
    with pytest.raises(OpError, match=message):
        fn.add_node("PoolNCHWc", [x], attrs)
