"""Quantization ops (tessera.ops.quant) and their ONNX converters, checked against
onnxruntime (or ONNX's reference evaluator where onnxruntime lacks a kernel) on one-node models,
and the integer products against exact int64 arithmetic (tests/exact.py) as well:
per-tensor, per-axis and blocked scales, 8/16-bit types, rounding ties and saturation, and the
integer convolutions and matrix products."""

from __future__ import annotations

from functools import partial

import exact
import numpy as np
import onnx_node
import pytest
from onnx import TensorProto
from onnx_node import one_node_model, run_tessera

from tessera.errors import ModelImportError
from tessera.frontend.onnx import import_onnx
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import OpPattern, get_schema

RNG = np.random.default_rng(7)
F32 = np.float32
U8, I8, U16, I16, I32 = np.uint8, np.int8, np.uint16, np.int16, np.int32


def q(shape: tuple, dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, int(info.max) + 1, shape).astype(dtype)


# Integer outputs compare exactly, float outputs to float32 rounding.
check = partial(onnx_node.check, rtol=1e-6, atol=1e-7)


# -- QuantizeLinear / DequantizeLinear ----------------------------------------------------------

def test_patterns() -> None:
    assert get_schema("QLinearConv").pattern == OpPattern.OUT_ELEMWISE_FUSABLE
    assert get_schema("QLinearMatMul").pattern == OpPattern.OUT_ELEMWISE_FUSABLE
    assert get_schema("QuantizeLinear").pattern == OpPattern.BROADCAST


@pytest.mark.parametrize("opset", [10, 13, 19, 21])
@pytest.mark.parametrize("dtype", [U8, I8])
def test_quantize_per_tensor(opset: int, dtype) -> None:
    x = RNG.uniform(-40, 40, (3, 4, 5)).astype(F32)
    x.reshape(-1)[:6] = [0.5, 1.5, 2.5, -0.5, -1.5, 1000.0]  # ties to even, saturation
    zp = np.array(3 if dtype == U8 else -2, dtype)
    check("QuantizeLinear", [x, np.array(0.25, F32), zp], opset=opset)


def test_quantize_without_zero_point_is_uint8() -> None:
    (y,) = check("QuantizeLinear", [RNG.uniform(-5, 70, (4, 6)).astype(F32), np.array(0.3, F32)],
                 opset=13)
    assert y.dtype == U8


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [U8, I8])
def test_quantize_per_axis(axis: int, dtype) -> None:
    x = RNG.uniform(-10, 10, (3, 4, 5)).astype(F32)
    n = x.shape[axis]
    scale = RNG.uniform(0.02, 0.2, n).astype(F32)
    zp = RNG.integers(0, 10, n).astype(dtype)
    check("QuantizeLinear", [x, scale, zp], {"axis": axis}, opset=13, consts=(1, 2))
    check("DequantizeLinear", [q(x.shape, dtype), scale, zp], {"axis": axis}, opset=13,
          consts=(1, 2))


@pytest.mark.parametrize("dtype", [U16, I16])
def test_quantize_16bit(dtype) -> None:
    x = RNG.uniform(-900, 900, (4, 5)).astype(F32)
    zp = np.array(100, dtype)
    check("QuantizeLinear", [x, np.array(0.02, F32), zp], opset=21)
    check("DequantizeLinear", [q((4, 5), dtype), np.array(0.02, F32), zp], opset=21)


def test_quantize_output_dtype_attribute() -> None:
    x = RNG.uniform(-3, 3, (2, 7)).astype(F32)
    (y,) = check("QuantizeLinear", [x, np.array(0.05, F32)],
                 {"output_dtype": TensorProto.INT8}, opset=21, oracle="ref")
    assert y.dtype == I8


@pytest.mark.parametrize("block_size,axis", [(2, 1), (3, 0), (4, 1)])
def test_blocked_quantization(block_size: int, axis: int) -> None:
    x = RNG.uniform(-5, 5, (6, 8)).astype(F32)
    shape = list(x.shape)
    shape[axis] = -(-shape[axis] // block_size)
    scale = RNG.uniform(0.05, 0.5, shape).astype(F32)
    zp = RNG.integers(-3, 3, shape).astype(I8)
    attrs = {"axis": axis, "block_size": block_size}
    check("QuantizeLinear", [x, scale, zp], attrs, opset=21, consts=(1, 2), oracle="ref")
    check("DequantizeLinear", [q(x.shape, I8), scale, zp], attrs, opset=21, consts=(1, 2),
          oracle="ref")


@pytest.mark.parametrize("opset", [10, 13, 21])
@pytest.mark.parametrize("dtype", [U8, I8, I32])
def test_dequantize(opset: int, dtype) -> None:
    x = q((3, 5), dtype)
    zp = None if dtype == I32 else np.array(7, dtype)
    check("DequantizeLinear", [x, np.array(0.125, F32), zp], opset=opset)


def test_float16_scale() -> None:
    x = RNG.uniform(-3, 3, (2, 6)).astype(np.float16)
    scale = np.array(0.03, np.float16)
    check("QuantizeLinear", [x, scale, np.array(0, I8)], opset=21, oracle="ref")
    (y,) = check("DequantizeLinear", [q((2, 6), U8), scale, np.array(128, U8)], opset=21)
    assert y.dtype == np.float16


def test_unsupported_quantized_types_are_import_errors() -> None:
    x = RNG.uniform(-1, 1, (4,)).astype(F32)
    model = one_node_model("QuantizeLinear", [x, np.array(0.1, F32)],
                           {"output_dtype": TensorProto.FLOAT6E2M3}, opset=25)
    with pytest.raises(ModelImportError, match="output_dtype: element type .* not supported"):
        import_onnx(model, check=False)


def test_bad_scale_shape() -> None:
    x = RNG.uniform(-1, 1, (3, 4)).astype(F32)
    model = one_node_model("QuantizeLinear", [x, np.ones(3, F32), np.zeros(3, U8)], {"axis": 1},
                           opset=13, consts=(1, 2))
    with pytest.raises(ModelImportError, match="1-D tensor of length 4"):
        import_onnx(model)


def test_dynamic_quantize_linear() -> None:
    for x in (RNG.uniform(-2, 5, (3, 7)).astype(F32), RNG.uniform(1, 5, (8,)).astype(F32),
              RNG.uniform(-5, -1, (2, 2)).astype(F32)):
        check("DynamicQuantizeLinear", [x], opset=11, outputs=3)


# -- integer and QLinear products ---------------------------------------------------------------

def ort_is_exact(adt, bdt) -> bool:
    """Whether onnxruntime's CPU kernels compute the exact int32 accumulator for these operand
    types. Not for uint8 x int8: on x86 CPUs without VNNI (AVX2) its kernels add pairs of
    uint8*int8 products with int16 saturation (VPMADDUBSW), off by thousands on random data
    (MatMulInteger: 10 of 20 random 3x4 @ 4x5 products wrong; QLinearConv with int8 weights
    and QLinearMatMul too); seen in every release tried, 1.20.1 to 1.32.0. Those cases are
    checked against the exact oracle only."""
    return not (np.dtype(adt) == U8 and np.dtype(bdt) == I8)


def tessera_only(op: str, inputs: list, attrs: dict | None = None, *, opset: int,
                 consts: tuple = ()) -> np.ndarray:
    """Tessera's single output for a one-node model (no onnxruntime)."""
    model = one_node_model(op, inputs, attrs, opset=opset, consts=consts)
    (y,) = run_tessera(model, onnx_node.feeds_of(inputs, consts))
    return y


@pytest.mark.parametrize("adt,bdt", [(U8, U8), (U8, I8), (I8, I8), (I8, U8)])
@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((2, 3, 4), (4, 6)), ((2, 3, 4), (2, 4, 2))])
def test_matmul_integer(adt, bdt, sa: tuple, sb: tuple) -> None:
    a, b = q(sa, adt), q(sb, bdt)
    inputs = [a, b, np.array(5, adt), np.array(-3 if bdt == I8 else 9, bdt)]
    if ort_is_exact(adt, bdt):
        (y,) = check("MatMulInteger", inputs, opset=10)
    else:  # onnxruntime saturates (see ort_is_exact): the exact oracle only
        y = tessera_only("MatMulInteger", inputs, opset=10)
    assert y.dtype == I32
    np.testing.assert_array_equal(y, exact.matmul_integer(*inputs))


def test_matmul_integer_per_row_and_column_zero_points() -> None:
    a, b = q((3, 4), U8), q((4, 5), U8)
    check("MatMulInteger", [a, b, np.array(3, U8), q((5,), U8)], opset=10, consts=(2, 3))
    # Neither onnxruntime nor ONNX's reference handle a per-row zero point for A: use numpy.
    za, zb = q((3,), U8), q((5,), U8)
    (y,) = run_tessera(one_node_model("MatMulInteger", [a, b, za, zb], opset=10, consts=(2, 3)),
                       {"x0": a, "x1": b})
    want = (a.astype(np.int64) - za[:, None]) @ (b.astype(np.int64) - zb)
    assert y.dtype == I32
    np.testing.assert_array_equal(y, want)
    check("MatMulInteger", [a, b], opset=10)


@pytest.mark.parametrize("opset", [10, 21])
@pytest.mark.parametrize("dtype", [U8, I8])
@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((2, 3, 8), (8, 6))])
def test_qlinear_matmul(opset: int, dtype, sa: tuple, sb: tuple) -> None:
    a, b = q(sa, dtype), q(sb, dtype)
    b_zp = np.array(-1 if dtype == I8 else 1, dtype)
    inputs = [a, np.array(0.05, F32), np.array(3, dtype), b, np.array(0.02, F32), b_zp,
              np.array(0.4, F32), np.array(5, dtype)]
    (y,) = check("QLinearMatMul", inputs, opset=opset, consts=(1, 2, 4, 5, 6, 7))
    # Against exact int64 products requantized in float64: Tessera (and onnxruntime)
    # requantize in float32, so a result may round one step away, never more.
    acc = exact.matmul_integer(a, b, inputs[2], b_zp)
    scale = np.float64(inputs[1]) * np.float64(inputs[4]) / np.float64(inputs[6])
    exact.assert_within_one_step(y, exact.requantize(acc, scale, inputs[7], dtype))


def test_qlinear_matmul_uint8_by_int8() -> None:
    a, b = q((3, 8), U8), q((8, 6), I8)
    a_zp, b_zp = np.array(3, U8), np.array(-2, I8)
    inputs = [a, np.array(0.05, F32), a_zp, b, np.array(0.02, F32), b_zp, np.array(0.4, F32),
              np.array(5, U8)]
    # onnxruntime saturates for uint8 x int8 (see ort_is_exact): the exact oracle only.
    y = tessera_only("QLinearMatMul", inputs, opset=10, consts=(1, 2, 4, 5, 6, 7))
    scale = np.float64(F32(0.05)) * np.float64(F32(0.02)) / np.float64(F32(0.4))
    exact.assert_within_one_step(
        y, exact.requantize(exact.matmul_integer(a, b, a_zp, b_zp), scale, 5, U8))


def test_qlinear_matmul_per_column_b() -> None:
    a, b = q((3, 4), U8), q((4, 5), U8)
    inputs = [a, np.array(0.05, F32), np.array(3, U8), b, RNG.uniform(0.01, 0.05, 5).astype(F32),
              q((5,), U8), np.array(0.4, F32), np.array(5, U8)]
    check("QLinearMatMul", inputs, opset=10, consts=(1, 2, 4, 5, 6, 7))


CONV_CASES = [
    ((1, 3, 7, 6), (4, 3, 3, 3), {}),
    ((2, 4, 7, 7), (6, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((1, 4, 6, 6), (4, 1, 3, 3), {"group": 4, "auto_pad": "SAME_UPPER"}),
    ((1, 3, 8, 7), (2, 3, 2, 2), {"dilations": [2, 1], "pads": [1, 0, 0, 1]}),
    ((1, 5, 4, 4), (3, 5, 1, 1), {}),
]


@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
def test_conv_integer(xs: tuple, ws: tuple, attrs: dict) -> None:
    for inputs in ([q(xs, U8), q(ws, U8), np.array(17, U8), np.array(100, U8)],
                   [q(xs, U8), q(ws, U8)]):
        (y,) = check("ConvInteger", inputs, attrs, opset=10, consts=(1, 2, 3)[:len(inputs) - 1])
        np.testing.assert_array_equal(y, exact.conv_integer(*inputs, **conv_params(xs, ws,
                                                                                   attrs)))


def conv_params(xs: tuple, ws: tuple, attrs: dict) -> dict:
    """Explicit strides, pads, dilations and group of a CONV_CASES entry (auto_pad resolved)
    for :func:`exact.conv_integer`."""
    nd = len(xs) - 2
    strides = attrs.get("strides", [1] * nd)
    dilations = attrs.get("dilations", [1] * nd)
    pads = attrs.get("pads", [0] * (2 * nd))
    if attrs.get("auto_pad") == "SAME_UPPER":
        pads = [0] * (2 * nd)
        for i in range(nd):
            out = -(-xs[2 + i] // strides[i])
            total = max(0, (out - 1) * strides[i] + dilations[i] * (ws[2 + i] - 1) + 1 - xs[2 + i])
            pads[i], pads[i + nd] = total // 2, total - total // 2
    return {"strides": strides, "pads": pads, "dilations": dilations,
            "group": attrs.get("group", 1)}


@pytest.mark.parametrize("wdt", [U8, I8])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
def test_qlinear_conv(xs: tuple, ws: tuple, attrs: dict, wdt, per_channel: bool,
                      bias: bool) -> None:
    m = ws[0]
    if per_channel:
        w_scale = RNG.uniform(0.005, 0.02, m).astype(F32)
        w_zp = np.zeros(m, wdt) if wdt == I8 else q((m,), wdt)
    else:
        w_scale, w_zp = np.array(0.01, F32), np.array(0 if wdt == I8 else 120, wdt)
    b = RNG.integers(-2000, 2000, m).astype(I32) if bias else None
    inputs = [q(xs, U8), np.array(0.02, F32), np.array(128, U8), q(ws, wdt), w_scale, w_zp,
              np.array(0.15, F32), np.array(10, U8), b]
    consts = (1, 2, 3, 4, 5, 6, 7, 8)
    if ort_is_exact(U8, wdt):
        (y,) = check("QLinearConv", inputs, attrs, opset=10, consts=consts)
    else:  # onnxruntime saturates for int8 weights (see ort_is_exact): the exact oracle only
        y = tessera_only("QLinearConv", inputs, attrs, opset=10, consts=consts)
    acc = exact.conv_integer(inputs[0], inputs[3], inputs[2], w_zp,
                             **conv_params(xs, ws, attrs))
    if b is not None:
        acc = acc + b.astype(np.int64).reshape(-1, 1, 1)
    scale = np.float64(F32(0.02)) * w_scale.astype(np.float64) / np.float64(F32(0.15))
    scale = scale.reshape(-1, 1, 1) if scale.size > 1 else scale
    # Requantized in float32 by Tessera: at most one step from the float64 rounding.
    exact.assert_within_one_step(y, exact.requantize(acc, scale, 10, U8))


def test_qlinear_conv_int8_activations() -> None:
    inputs = [q((1, 3, 6, 6), I8), np.array(0.02, F32), np.array(-5, I8), q((4, 3, 3, 3), I8),
              np.array(0.01, F32), np.array(0, I8), np.array(0.1, F32), np.array(2, I8)]
    (y,) = check("QLinearConv", inputs, {"pads": [1, 1, 1, 1]}, opset=10,
                 consts=(1, 2, 3, 4, 5, 6, 7))
    assert y.dtype == I8


def test_qlinear_conv_matches_float_conv_of_dequantized() -> None:
    """QLinearConv == quantize(Conv(dequantize(x), dequantize(w))) up to one step."""
    x, w = q((1, 2, 5, 5), U8), q((3, 2, 3, 3), I8)
    sx, zx, sw, sy, zy = F32(0.03), U8(120), F32(0.01), F32(0.05), U8(128)
    qconv = get_schema("QLinearConv").reference
    y = qconv(x, np.array(sx), np.array(zx), w, np.array(sw), np.array(0, I8), np.array(sy),
              np.array(zy), kernel_shape=None, strides=None, pads=[1, 1, 1, 1], dilations=None,
              group=1)
    xf = (x.astype(F32) - zx) * sx
    wf = w.astype(F32) * sw
    yf = get_schema("Conv").reference(xf, wf, kernel_shape=None, strides=None,
                                      pads=[1, 1, 1, 1], dilations=None, group=1)
    want = np.clip(np.rint(yf / sy) + zy, 0, 255)
    assert y.dtype == U8 and np.abs(y.astype(int) - want).max() <= 1


def test_quant_infer_errors() -> None:
    schema = get_schema("QLinearMatMul")
    t = TensorType((2, 3), DType.uint8)
    s = TensorType((), DType.float32)
    with pytest.raises(Exception, match="inner dimensions"):
        schema.infer_types("n", [t, s, TensorType((), DType.uint8), t, s,
                                 TensorType((), DType.uint8), s, TensorType((), DType.uint8)],
                           {})
