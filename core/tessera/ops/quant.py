"""Ops: quantization family: QuantizeLinear/DequantizeLinear and the integer and QLinear
convolutions and matrix products.

Scales and zero points are per tensor (a scalar or one element), per axis (a 1-D tensor along
``axis``) or blocked (same rank as the input, ``block_size`` elements per scale along ``axis``).
Rounding is to nearest even and results saturate to the output type's range.

The low-precision types (:mod:`tessera.ir.types`) quantize and dequantize as onnx's reference
does: to int4/uint4/int2/uint2 like the wider integers (rounded, zero point added, clamped to
the 4- or 2-bit range); to float8 ``x / scale`` converted by :func:`tessera.ir.cast.convert`
(``saturate`` applies; the zero point, which ONNX requires to be zero, is not added); to float4
e2m1 ``x / scale + zero_point`` converted (float4 clamps to ±6 by itself). Dequantizing a float8
or float4 input ignores its zero point. Arithmetic on low-precision scales is done in float32;
a low-precision ``precision`` rounds the division's operands and result to it.

Integer products are computed exactly: the operands (zero points subtracted) are small integers,
so a float64 BLAS product gives the exact int32 accumulator (|sum| < 2**53), which is then
requantized in float32 like onnxruntime does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import OpError
from tessera.ir.cast import FLOAT8, SUB_BYTE_INTS, convert, is_low_precision, widen
from tessera.ir.types import DType, TensorType
from tessera.ops.conv import CONV_ATTRS, conv_infer, conv_nd
from tessera.ops.layout import (
    pack_matmul_weight,
    pair_words,
    quad_words,
    unpack_matmul_weight,
    unpair_words,
    unquad_words,
)
from tessera.ops.linalg import matmul_shape
from tessera.ops.registry import Attr, OpPattern, normalize_axis, register_op
from tessera.ops.spatial import spatial_params

QUANT_DTYPES = (DType.int8, DType.uint8, DType.int16, DType.uint16, DType.int32, DType.int4,
                DType.uint4, DType.int2, DType.uint2, *sorted(FLOAT8), DType.float4_e2m1fn)


def _is_scalar(shape: tuple[int, ...]) -> bool:
    return len(shape) == 0 or (len(shape) == 1 and shape[0] == 1)


def check_quant_param(p: TensorType, x: TensorType, axis: int, block_size: int, op: str,
                      what: str) -> None:
    """Raise unless ``p`` is a valid per-tensor, per-axis or blocked parameter for ``x``."""
    if _is_scalar(p.shape) and not block_size:
        return
    a = normalize_axis(axis, x.ndim, op)
    if block_size:
        want = list(x.shape)
        want[a] = -(-x.shape[a] // block_size)
        if list(p.shape) != want:
            raise OpError(f"{op}: blocked {what} {p} must have shape {want} (block_size "
                          f"{block_size} along axis {axis} of {x})")
        return
    if p.shape != (x.shape[a],):
        raise OpError(f"{op}: {what} {p} must be a scalar or a 1-D tensor of length "
                      f"{x.shape[a]} (axis {axis} of {x})")


def _check_scale_and_zero_point(scale: TensorType, zp: TensorType | None, x: TensorType,
                                axis: int, block_size: int, op: str, prefix: str) -> None:
    """Raise unless ``{prefix}_scale`` is a valid parameter for ``x`` (see
    :func:`check_quant_param`) and ``{prefix}_zero_point``, when given, has its shape."""
    check_quant_param(scale, x, axis, block_size, op, f"{prefix}_scale")
    per_tensor = _is_scalar(scale.shape) and not block_size
    if zp is not None and zp.shape != scale.shape and not (per_tensor and _is_scalar(zp.shape)):
        raise OpError(f"{op}: {prefix}_zero_point {zp} must have {prefix}_scale's shape {scale}")


def expand_quant_param(p: np.ndarray, shape: tuple[int, ...], axis: int,
                       block_size: int) -> np.ndarray:
    """A scale or zero point reshaped (or repeated, when blocked) to broadcast over ``shape``."""
    if p.size == 1 and not block_size:
        return p.reshape(())
    a = normalize_axis(axis, len(shape))
    if block_size:
        rep = np.repeat(p, block_size, axis=a)
        return np.take(rep, np.arange(shape[a]), axis=a)
    return p.reshape([-1] + [1] * (len(shape) - a - 1))


def _saturate(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(v, info.min, info.max).astype(dtype)


def _int_range(dtype: DType) -> tuple[int, int]:
    if dtype in SUB_BYTE_INTS:
        width, signed = SUB_BYTE_INTS[dtype]
        return (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
    info = np.iinfo(dtype.numpy)
    return int(info.min), int(info.max)


def _divide(x: np.ndarray, s: np.ndarray, precision: DType | None) -> np.ndarray:
    """``x / s`` in ``precision`` (default: the scale's dtype); low-precision ones in float32,
    operands and result rounded to ``precision`` when it is one."""
    cdt = precision.numpy if precision is not None else s.dtype
    if not (is_low_precision(np.dtype(cdt)) or is_low_precision(x.dtype)):
        return x.astype(cdt) / s.astype(cdt)
    if precision is not None and precision.is_low_precision:
        x, s = convert(x, precision), convert(s, precision)
    y = widen(x).astype(np.float32) / widen(s).astype(np.float32)
    if precision is not None and precision.is_low_precision:
        y = widen(convert(y, precision))
    return y


def _quant_out_dtype(zp: Any, output_dtype: DType | None) -> DType:
    if zp is not None:
        return zp if isinstance(zp, DType) else DType.from_numpy(zp)
    return output_dtype or DType.uint8


# -- QuantizeLinear / DequantizeLinear -----------------------------------------------------------

def _quantize_infer(x: TensorType, scale: TensorType, zp: TensorType | None = None, *,
                    axis: int, block_size: int, output_dtype: DType | None, saturate: int,
                    precision: DType | None) -> TensorType:
    op = "QuantizeLinear"
    if not scale.dtype.is_float:
        raise OpError(f"{op}: y_scale must be a float tensor, got {scale}")
    out = _quant_out_dtype(zp.dtype if zp is not None else None, output_dtype)
    if zp is not None and output_dtype is not None and output_dtype != zp.dtype:
        raise OpError(f"{op}: output_dtype {output_dtype} differs from the zero point's dtype "
                      f"{zp.dtype}")
    if out not in QUANT_DTYPES:
        raise OpError(f"{op}: output type {out} is not one of "
                      f"{', '.join(d.value for d in QUANT_DTYPES)}")
    _check_scale_and_zero_point(scale, zp, x, axis, block_size, op, "y")
    return TensorType(x.shape, out)


@register_op("QuantizeLinear",
             attrs={"axis": Attr.int(1), "block_size": Attr.int(0),
                    "output_dtype": Attr.dtype(None), "saturate": Attr.int(1),
                    "precision": Attr.dtype(None)},
             inputs=(2, 3), infer=_quantize_infer, pattern=OpPattern.BROADCAST)
def quantize_linear(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None = None, *,
                    axis: int, block_size: int, output_dtype: DType | None, saturate: int,
                    precision: DType | None) -> np.ndarray:
    """``saturate(round_half_even(x / scale) + zero_point)``; the division is done in
    ``precision`` (default: the scale's dtype)."""
    out = _quant_out_dtype(zp.dtype if zp is not None else None, output_dtype)
    y = _divide(x, expand_quant_param(scale, x.shape, axis, block_size), precision)
    if out.is_float:  # float8 / float4
        if zp is not None and out not in FLOAT8:
            y = y + widen(expand_quant_param(zp, x.shape, axis, block_size)).astype(y.dtype)
        return convert(y, out, bool(saturate))
    q = np.rint(y).astype(np.float64)
    if zp is not None:
        q = q + widen(expand_quant_param(zp, x.shape, axis, block_size)).astype(np.float64)
    lo, hi = _int_range(out)
    q = np.clip(np.nan_to_num(q), lo, hi).astype(np.int64)
    return q.astype(out.numpy) if not out.is_low_precision else convert(q, out)


def _dequantize_infer(x: TensorType, scale: TensorType, zp: TensorType | None = None, *,
                      axis: int, block_size: int, output_dtype: DType | None) -> TensorType:
    op = "DequantizeLinear"
    if not scale.dtype.is_float:
        raise OpError(f"{op}: x_scale must be a float tensor, got {scale}")
    if x.dtype not in QUANT_DTYPES:
        raise OpError(f"{op}: input {x} must be one of "
                      f"{', '.join(d.value for d in QUANT_DTYPES)}")
    if zp is not None and zp.dtype != x.dtype:
        raise OpError(f"{op}: x_zero_point {zp} must have the input's dtype {x.dtype}")
    _check_scale_and_zero_point(scale, zp, x, axis, block_size, op, "x")
    return TensorType(x.shape, output_dtype or scale.dtype)


@register_op("DequantizeLinear",
             attrs={"axis": Attr.int(1), "block_size": Attr.int(0),
                    "output_dtype": Attr.dtype(None)},
             inputs=(2, 3), infer=_dequantize_infer, pattern=OpPattern.BROADCAST)
def dequantize_linear(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None = None, *,
                      axis: int, block_size: int, output_dtype: DType | None) -> np.ndarray:
    """``(x - zero_point) * scale``, computed in the output dtype (default: the scale's)."""
    out = output_dtype.numpy if output_dtype is not None else scale.dtype
    s = expand_quant_param(scale, x.shape, axis, block_size)
    if is_low_precision(x.dtype) or is_low_precision(scale.dtype) or \
            is_low_precision(np.dtype(out)):
        # low-precision input, scale or output: in float32; float inputs have no zero point
        v = widen(x).astype(np.float32)
        if zp is not None and not DType.from_numpy(x.dtype).is_float:
            v = v - widen(expand_quant_param(zp, x.shape, axis, block_size)).astype(np.float32)
        return convert(v * widen(s).astype(np.float32), DType.from_numpy(out))
    v = x.astype(np.int64)
    if zp is not None:
        v = v - expand_quant_param(zp, x.shape, axis, block_size).astype(np.int64)
    return (v.astype(out) * s.astype(out)).astype(out, copy=False)


def _dynamic_quantize_infer(x: TensorType) -> tuple[TensorType, TensorType, TensorType]:
    if x.dtype != DType.float32:
        raise OpError(f"DynamicQuantizeLinear: input must be float32, got {x}")
    return (TensorType(x.shape, DType.uint8), TensorType((), DType.float32),
            TensorType((), DType.uint8))


@register_op("DynamicQuantizeLinear", infer=_dynamic_quantize_infer, pattern=OpPattern.OPAQUE)
def dynamic_quantize_linear(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """uint8 quantization with a scale and zero point from the data's range (including 0);
    returns ``(y, y_scale, y_zero_point)``."""
    xmax = np.float32(max(0.0, float(np.max(x)))) if x.size else np.float32(0)
    xmin = np.float32(min(0.0, float(np.min(x)))) if x.size else np.float32(0)
    scale = np.float32(1.0) if xmax == xmin else np.float32((xmax - xmin) / np.float32(255))
    zp = np.float32(np.rint(np.clip(np.float32(0) - xmin / scale, 0, 255)))
    y = np.clip(np.rint(x.astype(np.float32) / scale) + zp, 0, 255).astype(np.uint8)
    return y, np.array(scale, np.float32), np.array(zp, np.uint8)


# -- integer convolution and matmul --------------------------------------------------------------

def _check_int8(t: TensorType | None, op: str, what: str) -> None:
    if t is not None and t.dtype not in (DType.int8, DType.uint8):
        raise OpError(f"{op}: {what} must be int8 or uint8, got {t}")


def _weight_param(p: np.ndarray | None, w_ndim: int) -> Any:
    """A weight zero point/scale: scalar, or per output channel (M,) -> (M, 1, ...)."""
    if p is None:
        return 0
    if p.size == 1:
        return p.reshape(())
    return p.reshape(-1, *([1] * (w_ndim - 1)))


def _int_conv(x: np.ndarray, x_zp: np.ndarray | None, w: np.ndarray, w_zp: np.ndarray | None,
              strides: list[int] | None, pads: list[int] | None, dilations: list[int] | None,
              group: int) -> np.ndarray:
    """The exact int32 accumulator of a convolution of zero-point-shifted integers."""
    _, s, p, d = spatial_params(x.ndim - 2, None, strides, pads, dilations, "ConvInteger")
    xi = x.astype(np.float64)
    if x_zp is not None:
        xi -= np.float64(x_zp.reshape(-1)[0])
    wi = w.astype(np.float64) - np.asarray(_weight_param(w_zp, w.ndim), np.float64)
    acc = conv_nd(xi, wi, group, s, p, d)
    return np.rint(acc).astype(np.int64).astype(np.int32)


def _conv_integer_infer(x: TensorType, w: TensorType, x_zp: TensorType | None = None,
                        w_zp: TensorType | None = None, **attrs: Any) -> TensorType:
    op = "ConvInteger"
    _check_int8(x, op, "x")
    _check_int8(w, op, "w")
    y = conv_infer(x, w, None, op=op, **attrs)
    if x_zp is not None and not _is_scalar(x_zp.shape):
        raise OpError(f"{op}: x_zero_point {x_zp} must be a scalar")
    if w_zp is not None and not _is_scalar(w_zp.shape) and w_zp.shape != (w.shape[0],):
        raise OpError(f"{op}: w_zero_point {w_zp} must be a scalar or have shape [{w.shape[0]}]")
    return y.with_dtype(DType.int32)


@register_op("ConvInteger", attrs=CONV_ATTRS, inputs=(2, 4), infer=_conv_integer_infer,
             pattern=OpPattern.OUT_ELEMWISE_FUSABLE)
def conv_integer(x: np.ndarray, w: np.ndarray, x_zp: np.ndarray | None = None,
                 w_zp: np.ndarray | None = None, *, kernel_shape: list[int] | None,
                 strides: list[int] | None, pads: list[int] | None,
                 dilations: list[int] | None, group: int) -> np.ndarray:
    """int32 convolution of ``x - x_zero_point`` and ``w - w_zero_point`` (padding is the zero
    point, i.e. 0 after shifting)."""
    return _int_conv(x, x_zp, w, w_zp, strides, pads, dilations, group)


def _requantize(acc: np.ndarray, scale: np.ndarray, zp: np.ndarray | None,
                dtype: np.dtype) -> np.ndarray:
    """``saturate(round_half_even(acc * scale) + zp)`` in float32, like onnxruntime."""
    v = np.rint(acc.astype(np.float32) * scale.astype(np.float32)).astype(np.float64)
    if zp is not None:
        v += zp.astype(np.float64)
    return _saturate(v, dtype)


def _qlinear_conv_infer(x: TensorType, x_scale: TensorType, x_zp: TensorType, w: TensorType,
                        w_scale: TensorType, w_zp: TensorType, y_scale: TensorType,
                        y_zp: TensorType | None = None, b: TensorType | None = None,
                        **attrs: Any) -> TensorType:
    op = "QLinearConv"
    _check_int8(x, op, "x")
    _check_int8(w, op, "w")
    y = conv_infer(x, w, None, op=op, **attrs)
    m = w.shape[0]
    for name, t in (("x_scale", x_scale), ("x_zero_point", x_zp), ("y_scale", y_scale),
                    ("y_zero_point", y_zp)):
        if t is not None and not _is_scalar(t.shape):
            raise OpError(f"{op}: {name} {t} must be a scalar")
    for name, t in (("w_scale", w_scale), ("w_zero_point", w_zp)):
        if not _is_scalar(t.shape) and t.shape != (m,):
            raise OpError(f"{op}: {name} {t} must be a scalar or have shape [{m}]")
    if b is not None and (b.shape != (m,) or b.dtype != DType.int32):
        raise OpError(f"{op}: bias {b} must be int32 with shape [{m}]")
    out = y_zp.dtype if y_zp is not None else x.dtype
    _check_int8(TensorType((), out), op, "y_zero_point")
    return y.with_dtype(out)


@register_op("QLinearConv", attrs=CONV_ATTRS, inputs=(8, 9), infer=_qlinear_conv_infer,
             pattern=OpPattern.OUT_ELEMWISE_FUSABLE)
def qlinear_conv(x: np.ndarray, x_scale: np.ndarray, x_zp: np.ndarray, w: np.ndarray,
                 w_scale: np.ndarray, w_zp: np.ndarray, y_scale: np.ndarray,
                 y_zp: np.ndarray | None = None, b: np.ndarray | None = None, *,
                 kernel_shape: list[int] | None, strides: list[int] | None,
                 pads: list[int] | None, dilations: list[int] | None,
                 group: int) -> np.ndarray:
    """Quantized convolution: exact int32 accumulation (+ int32 bias), requantized with
    ``x_scale * w_scale / y_scale`` (per output channel when w_scale is a vector)."""
    acc = _int_conv(x, x_zp, w, w_zp, strides, pads, dilations, group).astype(np.int64)
    if b is not None:
        acc += b.astype(np.int64).reshape(-1, *([1] * (x.ndim - 2)))
    ws = w_scale.astype(np.float32).reshape(-1)
    scale = (np.float32(x_scale.reshape(-1)[0]) * ws / np.float32(y_scale.reshape(-1)[0]))
    scale = scale.reshape(()) if scale.size == 1 else scale.reshape(-1, *([1] * (x.ndim - 2)))
    out = y_zp.dtype if y_zp is not None else x.dtype
    zp = y_zp.reshape(()) if y_zp is not None else None
    return _requantize(acc.astype(np.int32), scale, zp, out)


def _row_param(p: np.ndarray | None) -> Any:
    """An ``a``-side parameter: scalar, or per row (M,) -> (M, 1)."""
    if p is None:
        return 0
    if p.size == 1:
        return p.reshape(())
    return p.reshape(-1, 1) if p.ndim == 1 else p


def _col_param(p: np.ndarray | None) -> Any:
    """A ``b``-side parameter: scalar, or per column (N,) (broadcasts on the last axis)."""
    if p is None:
        return 0
    if p.size == 1:
        return p.reshape(())
    return p


def _int_matmul(a: np.ndarray, a_zp: np.ndarray | None, b: np.ndarray,
                b_zp: np.ndarray | None) -> np.ndarray:
    av = a.astype(np.float64) - np.asarray(_row_param(a_zp), np.float64)
    bv = b.astype(np.float64) - np.asarray(_col_param(b_zp), np.float64)
    return np.rint(np.matmul(av, bv)).astype(np.int64).astype(np.int32)


def _matmul_integer_infer(a: TensorType, b: TensorType, a_zp: TensorType | None = None,
                          b_zp: TensorType | None = None) -> TensorType:
    op = "MatMulInteger"
    _check_int8(a, op, "A")
    _check_int8(b, op, "B")
    for name, t, ref in (("a_zero_point", a_zp, a), ("b_zero_point", b_zp, b)):
        if t is not None and t.dtype != ref.dtype:
            raise OpError(f"{op}: {name} {t} must have dtype {ref.dtype}")
    return TensorType(matmul_shape(a.shape, b.shape, op), DType.int32)


@register_op("MatMulInteger", inputs=(2, 4), infer=_matmul_integer_infer,
             pattern=OpPattern.OUT_ELEMWISE_FUSABLE)
def matmul_integer(a: np.ndarray, b: np.ndarray, a_zp: np.ndarray | None = None,
                   b_zp: np.ndarray | None = None) -> np.ndarray:
    """int32 ``(A - a_zero_point) @ (B - b_zero_point)`` (zero points per tensor, per row of A,
    per column of B)."""
    return _int_matmul(a, a_zp, b, b_zp)


#: Values per int32 word of ``MatMulIntegerPacked``'s B: int16 pairs (2), or signed bytes (4).
INTEGER_WORDS = (2, 4)


def _matmul_integer_packed_infer(a: TensorType, bp: TensorType, a_zp: TensorType | None = None,
                                 colsum: TensorType | None = None, *, word: int) -> TensorType:
    op = "MatMulIntegerPacked"
    _check_int8(a, op, "A")
    if word not in INTEGER_WORDS:
        raise OpError(f"{op}: word must be one of {INTEGER_WORDS} values per int32, got {word}")
    if bp.dtype != DType.int32 or bp.ndim != 3:
        raise OpError(f"{op}: the packed B must be int32 words (N//nb, K//{word}, nb), got {bp}")
    if a.ndim < 2 or not word * (bp.shape[1] - 1) < a.shape[-1] <= word * bp.shape[1]:
        raise OpError(f"{op}: A {a} must be at least 2-D with K columns, ceil(K / {word}) = "
                      f"{bp.shape[1]} (the packed B {bp} holds K/{word} words, the last one "
                      "padded with zeros)")
    n = int(bp.shape[0] * bp.shape[2])
    if (a_zp is None) != (colsum is None):
        raise OpError(f"{op}: a_zero_point and the column sums of B come together")
    if word == 4 and a.dtype == DType.int8 and colsum is None:
        raise OpError(f"{op}: int8 A with B in words of 4 bytes needs B's column sums (the "
                      "kernel reads A as unsigned bytes, A + 128)")
    if a_zp is not None and (a_zp.dtype != a.dtype or a_zp.size != 1):
        raise OpError(f"{op}: a_zero_point {a_zp} must be one value of A's dtype {a.dtype}")
    if colsum is not None and (colsum.dtype != DType.int32 or colsum.shape != (n,)):
        raise OpError(f"{op}: the column sums of B must be int32 ({n},), got {colsum}")
    return TensorType((*a.shape[:-1], n), DType.int32)


def pack_integer_matmul_weight(b: np.ndarray, nb: int, word: int = 2) -> np.ndarray:
    """An 8-bit ``B (K, N)`` (for pairs, any values that fit int16: an 8-bit ``B`` less its
    zero point) as ``MatMulIntegerPacked``'s int32 words ``(N // nb, K // word, nb)``: column
    panels of ``nb`` columns, each word along K either the int16 pair ``(b[2k, j], b[2k + 1,
    j])`` (``word`` 2, low half first: one ``pmaddwd`` lane,
    :data:`tessera.tir.dot_product.DOT2_S16`) or, for an int8 ``B``, the four bytes ``b[4k ..
    4k + 3, j]`` (``word`` 4, low byte first: one ``vpdpbusd`` lane, ``dp4a_us``). A K that is
    not a whole number of words is padded with rows of zeros."""
    k, n = b.shape
    if word not in INTEGER_WORDS or nb <= 0 or n % nb or (word == 4 and b.dtype != np.int8):
        raise OpError(f"MatMulIntegerPacked: B {list(b.shape)} {b.dtype} in words of {word} "
                      f"needs a panel width ({nb}) dividing N (and int8 values for words of "
                      "4)")
    if k % word:
        b = np.concatenate([b, np.zeros((word - k % word, n), b.dtype)])
    words = pair_words(b, axis=0) if word == 2 else quad_words(b, axis=0)
    return pack_matmul_weight(words, nb)


def unpack_integer_matmul_weight(bp: np.ndarray, word: int = 2) -> np.ndarray:
    """The inverse of :func:`pack_integer_matmul_weight`: int16 (``word`` 2) or int8
    (``word`` 4) ``(K, N)``, K rounded up to a whole word (the padding rows are zeros)."""
    words = unpack_matmul_weight(bp)
    return unpair_words(words, axis=0) if word == 2 else unquad_words(words, np.int8, axis=0)


@register_op("MatMulIntegerPacked", attrs={"word": Attr.int(2)}, inputs=(2, 4),
             infer=_matmul_integer_packed_infer, pattern=OpPattern.OUT_ELEMWISE_FUSABLE)
def matmul_integer_packed(a: np.ndarray, bp: np.ndarray, a_zp: np.ndarray | None = None,
                          colsum: np.ndarray | None = None, *, word: int = 2) -> np.ndarray:
    """``MatMulInteger`` with a constant 8-bit ``B (K, N)``, packed at compile time
    (:func:`pack_integer_matmul_weight`: column panels of words of ``word`` values along K,
    int16 pairs or int8 quads, the last word padded with zeros; a B zero point is subtracted
    before packing, into int16 pairs): int32 ``A @ B - a_zero_point * colsum``, ``colsum``
    B's column sums (so the zero point costs one multiply-add per output, not one subtraction
    per product): ``(A - a_zero_point) @ B``."""
    b = unpack_integer_matmul_weight(bp, word)[:a.shape[-1]]  # less B's padding rows
    out = _int_matmul(a, None, b, None).astype(np.int64)
    if a_zp is not None and colsum is not None:
        out -= int(np.asarray(a_zp).reshape(())) * colsum.astype(np.int64)
    return out.astype(np.int32)


def _qlinear_matmul_infer(a: TensorType, a_scale: TensorType, a_zp: TensorType, b: TensorType,
                          b_scale: TensorType, b_zp: TensorType, y_scale: TensorType,
                          y_zp: TensorType) -> TensorType:
    op = "QLinearMatMul"
    _check_int8(a, op, "a")
    _check_int8(b, op, "b")
    _check_int8(y_zp, op, "y_zero_point")
    for name, t in (("a_scale", a_scale), ("b_scale", b_scale), ("y_scale", y_scale)):
        if not t.dtype.is_float:
            raise OpError(f"{op}: {name} must be a float tensor, got {t}")
    rows, cols = a.shape[-2] if a.ndim > 1 else 1, b.shape[-1] if b.ndim > 1 else 1
    for name, t, n, what in (("a_scale", a_scale, rows, "row of a"),
                             ("a_zero_point", a_zp, rows, "row of a"),
                             ("b_scale", b_scale, cols, "column of b"),
                             ("b_zero_point", b_zp, cols, "column of b"),
                             ("y_scale", y_scale, 1, ""), ("y_zero_point", y_zp, 1, "")):
        if t.size != 1 and (t.ndim != 1 or t.size != n):
            raise OpError(f"{op}: {name} {t} must be a scalar"
                          + (f" or hold one value per {what} ({n})" if what else ""))
    return TensorType(matmul_shape(a.shape, b.shape, op), y_zp.dtype)


@register_op("QLinearMatMul", inputs=8, infer=_qlinear_matmul_infer,
             pattern=OpPattern.OUT_ELEMWISE_FUSABLE)
def qlinear_matmul(a: np.ndarray, a_scale: np.ndarray, a_zp: np.ndarray, b: np.ndarray,
                   b_scale: np.ndarray, b_zp: np.ndarray, y_scale: np.ndarray,
                   y_zp: np.ndarray) -> np.ndarray:
    """Quantized matmul: exact int32 accumulation requantized with ``a_scale * b_scale /
    y_scale`` (float32)."""
    acc = _int_matmul(a, a_zp, b, b_zp)
    sa = np.asarray(_row_param(a_scale), np.float32)
    sb = np.asarray(_col_param(b_scale), np.float32)
    scale = sa * sb / np.asarray(_col_param(y_scale), np.float32)
    zp = np.asarray(_col_param(y_zp))
    return _requantize(acc, scale, zp, y_zp.dtype)


__all__ = ["QUANT_DTYPES", "check_quant_param", "expand_quant_param"]
