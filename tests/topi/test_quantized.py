"""Quantized computes (tessera.topi.nn.quantized) against the ops' numpy references (exact)."""

from __future__ import annotations

import numpy as np
import pytest
from topi.support import check_op, find_op, has_div_or_mod, ops_of, rand

from tessera.errors import OpError
from tessera.ops.quant import pack_integer_matmul_weight, unpack_integer_matmul_weight
from tessera.topi import tag

F32 = np.float32


@pytest.mark.parametrize("out", ["int8", "uint8", "int16", "int32"])
@pytest.mark.parametrize("consts", [(), (1, 2)])
def test_quantize_linear(out: str, consts: tuple) -> None:
    x = rand(2, 3, 4, lo=-60, hi=60)
    x[0, 0, :3] = [0.5, 1.5, -2.5]  # ties round to even
    zp = np.array(3 if out != "uint8" else 128, out)
    check_op("QuantizeLinear", [x, np.array(0.25, F32), zp], consts=consts)
    check_op("QuantizeLinear", [x, np.array([0.05], F32)], {"output_dtype": out},
             consts=consts[:1])
    # per axis and blocked
    check_op("QuantizeLinear", [x, rand(3, lo=0.1, hi=1), rand(3, dtype=out, lo=0, hi=9)],
             {"axis": 1}, consts=consts)
    check_op("QuantizeLinear", [x, rand(2, 3, 2, lo=0.1, hi=1), rand(2, 3, 2, dtype=out, lo=0,
                                                                         hi=9)],
             {"axis": -1, "block_size": 2}, consts=consts)


def test_quantize_saturates_and_precision() -> None:
    x = np.array([-1e6, -300.0, 300.0, 1e6, 0.0, 127.5], F32)
    check_op("QuantizeLinear", [x, np.array(1.0, F32), np.array(0, np.int8)])
    x = np.array([-6e4, -300.0, 300.0, 6e4, 0.0, 127.5], F32)
    check_op("QuantizeLinear", [x.astype(np.float16), np.array(2.0, np.float16),
                                np.array(10, np.uint8)])
    check_op("QuantizeLinear", [x.astype(np.float16), np.array(2.0, np.float16),
                                np.array(10, np.uint8)], {"precision": "float32"})


@pytest.mark.parametrize("src", ["int8", "uint8", "int32"])
def test_dequantize_linear(src: str) -> None:
    x = rand(2, 3, 4, dtype=src, lo=-128, hi=255)
    check_op("DequantizeLinear", [x, np.array(0.1, F32), np.array(5, src)], consts=(1, 2))
    check_op("DequantizeLinear", [x, np.array(0.1, F32)])
    check_op("DequantizeLinear", [x, rand(4, lo=0.1, hi=1), rand(4, dtype=src, lo=0, hi=9)],
             {"axis": -1})
    check_op("DequantizeLinear", [x, rand(2, 2, 4, lo=0.1, hi=1), rand(2, 2, 4, dtype=src,
                                                                        lo=0, hi=9)],
             {"axis": 1, "block_size": 2})
    check_op("DequantizeLinear", [x, np.array(0.5, np.float16)])


def test_dynamic_quantize_linear() -> None:
    check_op("DynamicQuantizeLinear", [rand(3, 7, lo=-2, hi=5)], num_outputs=3)
    check_op("DynamicQuantizeLinear", [rand(10, lo=0.5, hi=3)], num_outputs=3)
    check_op("DynamicQuantizeLinear", [rand(2, 2, lo=-4, hi=-1)], num_outputs=3)
    check_op("DynamicQuantizeLinear", [np.zeros(4, F32)], num_outputs=3)
    # reduced by rows first, then over the rows (the extremes in different rows)
    x = rand(2, 5, 33, lo=-1, hi=1)
    x[0, 3, 7], x[1, 4, 32] = -6.5, 9.25
    check_op("DynamicQuantizeLinear", [x], num_outputs=3)


@pytest.mark.parametrize("shape", [(3, 48), (64,), (2, 5, 32), (1, 4, 160)])
def test_dynamic_quantize_by_lanes(shape: tuple[int, ...]) -> None:
    # a last axis of whole 16-lane groups: reduced by rows and lanes first (the extremes in
    # different lanes and rows, one of them in the last element)
    x = rand(*shape, lo=-1, hi=1)
    flat = x.reshape(-1)
    flat[5], flat[-1] = -7.25, 3.5
    group = check_op("DynamicQuantizeLinear", [x], num_outputs=3)
    lanes = [op for op in ops_of(group) if "_lane_" in op.name]
    assert len(lanes) == 2 and all(op.output(0).shape[-1].value == 16 for op in lanes)
    check_op("DynamicQuantizeLinear", [-x], num_outputs=3)


CONV_CASES = [
    ((1, 4, 6, 6), (5, 4, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 3, 7, 5), (4, 3, 3, 2), {"strides": [2, 1], "pads": [0, 1, 2, 0],
                                  "dilations": [1, 2]}),
    ((1, 4, 5, 5), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    ((1, 4, 5, 5), (6, 2, 3, 3), {"group": 2}),
    ((1, 3, 9), (2, 3, 3), {"pads": [2, 1]}),
]


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
@pytest.mark.parametrize("xt", ["uint8", "int8"])
def test_conv_integer(case: int, xt: str) -> None:
    xs, ws, attrs = CONV_CASES[case]
    x = rand(*xs, dtype=xt, lo=-128, hi=255)
    w = rand(*ws, dtype="int8", lo=-128, hi=127)
    check_op("ConvInteger", [x, w], attrs, consts=(1,))
    check_op("ConvInteger", [x, w, np.array(7, xt), np.array(-3, np.int8)], attrs,
             consts=(1, 2, 3))
    check_op("ConvInteger", [x, w, np.array([7], xt), rand(ws[0], dtype="int8", lo=-5, hi=5)],
             attrs)


def test_conv_integer_shape_for_schedules() -> None:
    xs, ws, attrs = CONV_CASES[0]
    group = check_op("ConvInteger", [rand(*xs, dtype="uint8", lo=0, hi=255),
                                     rand(*ws, dtype="int8", lo=-128, hi=127),
                                     np.array(128, np.uint8)], attrs, consts=(1, 2))
    conv = find_op(group, tag.CONV2D_NCHW)
    assert conv.output(0).dtype == "int32" and not has_div_or_mod(conv)
    assert "128" in repr(conv.attrs["data_pad"].op.body)  # padded with the zero point


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("consts", [(1, 2, 3, 4, 5, 6, 7, 8), (3,)])
def test_qlinear_conv(case: int, per_channel: bool, consts: tuple) -> None:
    xs, ws, attrs = CONV_CASES[case]
    m = ws[0]
    for xt in ("uint8", "int8"):
        x = rand(*xs, dtype=xt, lo=-128, hi=255)
        w = rand(*ws, dtype="int8", lo=-128, hi=127)
        w_scale = rand(m, lo=0.001, hi=0.01) if per_channel else np.array(0.004, F32)
        w_zp = np.zeros(m, np.int8) if per_channel else np.array(0, np.int8)
        inputs = [x, np.array(0.02, F32), np.array(9, xt), w, w_scale, w_zp,
                  np.array(0.05, F32), np.array(-5 if xt == "int8" else 120, xt),
                  rand(m, dtype="int32", lo=-500, hi=500)]
        check_op("QLinearConv", inputs, attrs, consts=consts)
        check_op("QLinearConv", inputs[:8], attrs, consts=consts)


@pytest.mark.parametrize("sa,sb", [((3, 5), (5, 4)), ((2, 3, 5), (5, 4)), ((5,), (5, 4)),
                                   ((3, 5), (2, 5, 4))])
def test_matmul_integer(sa: tuple, sb: tuple) -> None:
    a = rand(*sa, dtype="uint8", lo=0, hi=255)
    b = rand(*sb, dtype="int8", lo=-128, hi=127)
    check_op("MatMulInteger", [a, b])
    check_op("MatMulInteger", [a, b, np.array(12, np.uint8), np.array(-3, np.int8)],
             consts=(2, 3))
    check_op("MatMulInteger", [a, b, np.array(12, np.uint8), rand(sb[-1], dtype="int8",
                                                                  lo=-4, hi=4)])
    if len(sa) == 2:
        check_op("MatMulInteger", [a, b, rand(sa[0], dtype="uint8", lo=0, hi=9)])


@pytest.mark.parametrize("sa,n,nb", [((3, 6), 32, 16), ((2, 3, 20), 64, 32), ((1, 2), 16, 16),
                                     ((4, 34), 16, 8)])
def test_matmul_integer_packed(sa: tuple, n: int, nb: int) -> None:
    b = rand(sa[-1], n, dtype="int8", lo=-128, hi=127)
    b.flat[:2] = -128  # the extremes of int8 in one pair
    bp = pack_integer_matmul_weight(b, nb)
    assert bp.dtype == np.int32 and bp.shape == (n // nb, sa[-1] // 2, nb)
    assert np.array_equal(unpack_integer_matmul_weight(bp), b)
    for a in (rand(*sa, dtype="uint8", lo=0, hi=255), rand(*sa, dtype="int8", lo=-128, hi=127)):
        check_op("MatMulIntegerPacked", [a, bp], consts=(1,))
        colsum = b.astype(np.int64).sum(axis=0).astype(np.int32)
        zero = np.array(12, a.dtype)
        check_op("MatMulIntegerPacked", [a, bp, zero, colsum], consts=(1, 3))
        check_op("MatMulIntegerPacked", [a, bp, zero, colsum], consts=(1, 2, 3))


@pytest.mark.parametrize("sa,n,nb", [((3, 8), 32, 16), ((2, 3, 20), 64, 32), ((1, 4), 16, 16),
                                     ((5, 36), 16, 8)])
def test_matmul_integer_packed_in_words_of_four_bytes(sa: tuple, n: int, nb: int) -> None:
    # vpdpbusd's form: A as unsigned bytes (int8 A offset by 128, B's column sums correcting
    # it), B as signed bytes four to a word
    b = rand(sa[-1], n, dtype="int8", lo=-128, hi=127)
    b.flat[:4] = -128  # the extremes in one word
    b.flat[n:n + 4] = 127
    bp = pack_integer_matmul_weight(b, nb, word=4)
    assert bp.dtype == np.int32 and bp.shape == (n // nb, sa[-1] // 4, nb)
    assert np.array_equal(unpack_integer_matmul_weight(bp, word=4), b)
    colsum = b.astype(np.int64).sum(axis=0).astype(np.int32)
    attrs = {"word": 4}
    for a in (rand(*sa, dtype="uint8", lo=0, hi=255), rand(*sa, dtype="int8", lo=-128, hi=127)):
        a.flat[:4] = 255 if a.dtype == np.uint8 else -128
        zero = np.array(12, a.dtype)
        check_op("MatMulIntegerPacked", [a, bp, zero, colsum], attrs, consts=(1, 3))
        check_op("MatMulIntegerPacked", [a, bp, zero, colsum], attrs, consts=(1, 2, 3))
        if a.dtype == np.uint8:
            check_op("MatMulIntegerPacked", [a, bp], attrs, consts=(1,))
    with pytest.raises(OpError, match="needs B's column sums"):
        check_op("MatMulIntegerPacked", [rand(*sa, dtype="int8", lo=-9, hi=9), bp], attrs,
                 consts=(1,))


def test_integer_matmul_packing_pads_k_and_refuses_what_does_not_fit() -> None:
    b = rand(5, 16, dtype="int8", lo=-128, hi=127)
    for word in (2, 4):  # the last word padded with zeros
        bp = pack_integer_matmul_weight(b, 16, word)
        assert bp.shape == (1, -(-5 // word), 16)
        unpacked = unpack_integer_matmul_weight(bp, word)
        assert np.array_equal(unpacked[:5], b) and not unpacked[5:].any()
        a = rand(3, 5, dtype="uint8", lo=0, hi=255)
        check_op("MatMulIntegerPacked", [a, bp], {"word": word}, consts=(1,))
    with pytest.raises(OpError, match="dividing N"):
        pack_integer_matmul_weight(np.ones((6, 20), np.int8), 16)
    with pytest.raises(OpError, match="int8 values"):  # vpdpbusd's signed operand
        pack_integer_matmul_weight(np.ones((8, 16), np.uint8), 16, word=4)


@pytest.mark.parametrize("consts", [(1, 2, 4, 5, 6, 7), (4,)])
def test_qlinear_matmul(consts: tuple) -> None:
    for at, yt in (("uint8", "uint8"), ("int8", "int8"), ("uint8", "int8")):
        a = rand(2, 3, 6, dtype=at, lo=-128, hi=255)
        b = rand(6, 4, dtype="int8", lo=-128, hi=127)
        inputs = [a, np.array(0.03, F32), np.array(4, at), b, np.array(0.01, F32),
                  np.array(-2, np.int8), np.array(0.07, F32), np.array(3, yt)]
        check_op("QLinearMatMul", inputs, consts=consts)
        per_col = [a, np.array(0.03, F32), np.array(4, at), b, rand(4, lo=0.005, hi=0.02),
                   rand(4, dtype="int8", lo=-3, hi=3), np.array(0.07, F32), np.array(3, yt)]
        check_op("QLinearMatMul", per_col, consts=consts)
    a2 = rand(3, 6, dtype="uint8", lo=0, hi=255)
    per_row = [a2, rand(3, lo=0.01, hi=0.05), rand(3, dtype="uint8", lo=0, hi=9),
               rand(6, 4, dtype="uint8", lo=0, hi=255), np.array(0.01, F32),
               np.array(128, np.uint8), np.array(0.2, F32), np.array(100, np.uint8)]
    check_op("QLinearMatMul", per_row, consts=consts)


def test_requantize_helper() -> None:
    from topi.te_eval import evaluate

    from tessera import te
    from tessera.topi import nn

    acc = rand(2, 3, 4, dtype="int32", lo=-5000, hi=5000)
    t = te.placeholder(acc.shape, "int32", "acc")
    y = nn.requantize(t, 0.013, 7, "int8")
    want = np.clip(np.rint(acc.astype(F32) * F32(0.013)) + 7, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(evaluate(y, {t: acc}), want)
    s = te.placeholder((3,), "float32", "s")
    z = te.placeholder((), "uint8", "z")
    sv, zv = rand(3, lo=0.01, hi=0.05), np.array(128, np.uint8)
    y = nn.requantize(t, s, z, "uint8", axis=1)
    want = np.clip(np.rint(acc.astype(F32) * sv.reshape(3, 1)) + 128, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(evaluate(y, {t: acc, s: sv, z: zv}), want)
