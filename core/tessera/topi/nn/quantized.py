"""Quantized computes: QuantizeLinear/DequantizeLinear/DynamicQuantizeLinear, and the integer
convolution and matrix products (ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul).

Integer products accumulate in int32 (``(x - x_zero_point) * (w - w_zero_point)``, the
subtraction done in int32 and left out for an inlined zero point of 0); padding uses the data's
zero point, which is 0 after the shift. The convolution and product stages are the same
computes (and tags) as their float versions, so the same schedules apply.

Requantization is ``saturate(round_half_even(float32(acc) * scale) + zero_point)`` in float32,
with ``scale = (x_scale * w_scale) / y_scale`` in float32 as the references compute it: folded
to an immediate when the scales are inlined constants, a per-channel stage when ``w_scale`` is a
vector. Adding the zero point in float32 is exact for 8- and 16-bit outputs (any value it could
round saturates); QuantizeLinear to int32 adds it in float64. NaN inputs are not mapped to 0 as
the references do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tessera import te, tir
from tessera.tir.dot_product import DOT2_S16, DP4A_US, pack_bytes, pack_pair
from tessera.topi import tag
from tessera.topi.nn.conv2d import _CONV_TAGS, conv_nchw
from tessera.topi.nn.dense import matmul_general
from tessera.topi.reduction import reduce_compute
from tessera.topi.registry import register_compute
from tessera.topi.utils import (
    cast,
    const,
    constant_value,
    dims_of,
    named_axes,
    normalize_axis,
    read,
    scalar,
    shape_of,
)

Expr = tir.PrimExpr


def saturate(v: Expr, dtype: str) -> Expr:
    """A float ``v`` clamped to the range of integer ``dtype`` and converted."""
    info = np.iinfo(dtype)
    return cast(tir.min_(tir.max_(v, float(info.min)), float(info.max)), dtype)


def param_reader(p: te.Tensor | None, ndim: int, axis: int, block_size: int = 0
                 ) -> Callable[[Any], Expr] | None:
    """How to read a quantization parameter (scale or zero point) for a point of an
    ``ndim``-dimensional tensor: per tensor (one element), per ``axis`` (1-D) or blocked
    (``block_size`` elements per entry along ``axis``). None when ``p`` is None."""
    if p is None:
        return None
    if shape_of(p) == () or (p.ndim == 1 and shape_of(p)[0] == 1 and not block_size):
        v = scalar(p)
        return lambda idx: v
    a = normalize_axis(axis, ndim)
    if block_size:
        def blocked(idx: Any) -> Expr:
            pi = list(idx)
            pi[a] = pi[a] // block_size
            return read(p, pi)

        return blocked
    return lambda idx: read(p, [idx[a]])


def quantize(x: te.Tensor, scale: te.Tensor, zero_point: te.Tensor | None, out_dtype: str,
             axis: int = 1, block_size: int = 0, precision: str | None = None) -> te.Tensor:
    """``saturate(round_half_even(x / scale) + zero_point)`` to ``out_dtype``; the division in
    ``precision`` (default the scale's type)."""
    cdt = precision or scale.dtype
    get_s = param_reader(scale, x.ndim, axis, block_size)
    get_z = param_reader(zero_point, x.ndim, axis, block_size)
    wide = np.iinfo(out_dtype).bits > 16
    add_dt = "float64" if wide else cdt
    assert get_s is not None

    def body(*i: Any) -> Expr:
        q = tir.round_even(cast(x[i], cdt) / cast(get_s(i), cdt))
        q = cast(q, add_dt)
        if get_z is not None:
            q = q + cast(get_z(i), add_dt)
        return saturate(q, out_dtype)

    return te.compute(x.shape, body, name="quantize", tag=tag.BROADCAST)


def dequantize(x: te.Tensor, scale: te.Tensor, zero_point: te.Tensor | None, out_dtype: str,
               axis: int = 1, block_size: int = 0) -> te.Tensor:
    """``(x - zero_point) * scale`` in ``out_dtype`` (the difference exact in int32/int64)."""
    get_s = param_reader(scale, x.ndim, axis, block_size)
    get_z = param_reader(zero_point, x.ndim, axis, block_size)
    it = "int64" if x.dtype in ("int32", "uint32") else "int32"
    assert get_s is not None

    def body(*i: Any) -> Expr:
        v = cast(x[i], it)
        if get_z is not None:
            v = v - cast(get_z(i), it)
        return cast(v, out_dtype) * cast(get_s(i), out_dtype)

    return te.compute(x.shape, body, name="dequantize", tag=tag.BROADCAST)


#: Partial minima and maxima a dynamic quantization keeps per row of its input (whose last
#: axis is a multiple of it): lane ``l`` of row ``r`` over ``x[r, l::RANGE_LANES]``, a whole
#: number of float vectors on every CPU, so that the rows are reduced with vector min/max.
RANGE_LANES = 16


def _lane_extremes(x: te.Tensor, combiner: str) -> te.Tensor:
    """``(..., RANGE_LANES)``: the ``combiner`` (``"max"``/``"min"``) of ``x[..., l::16]`` for
    each lane ``l`` (exact in any order: no rounding)."""
    shape = dims_of(x)
    j = te.reduce_axis((0, shape[-1] // RANGE_LANES), name="j")
    reducer = te.max if combiner == "max" else te.min

    def body(*oi: Any) -> Expr:
        *lead, lane = oi
        return reducer(x[(*lead, j * RANGE_LANES + lane)], axis=j)

    return te.compute((*shape[:-1], RANGE_LANES), body, name=f"lane_{combiner}",
                      tag=tag.REDUCE)


def dynamic_quantize(x: te.Tensor) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    """uint8 quantization with the scale and zero point of the data's range (including 0):
    returns ``(y, y_scale, y_zero_point)``."""
    last = dims_of(x)[-1] if x.shape else 1
    if isinstance(last, int) and last % RANGE_LANES == 0 and last > RANGE_LANES:
        # by rows and lanes first (rows in parallel, each row's lanes as vectors), then over
        # those: a reduction along a row runs as one serial chain of scalar min/max
        hi = reduce_compute(_lane_extremes(x, "max"), None, False, "max", name="max")
        lo = reduce_compute(_lane_extremes(x, "min"), None, False, "min", name="min")
    elif len(x.shape) > 1:
        # by rows first (rows in parallel, each a loop over the last axis), then over the
        # rows' results: one reduction of every element would run in one serial loop
        hi = reduce_compute(reduce_compute(x, [-1], False, "max", name="row_max"), None, False,
                            "max", name="max")
        lo = reduce_compute(reduce_compute(x, [-1], False, "min", name="row_min"), None, False,
                            "min", name="min")
    else:
        hi = reduce_compute(x, None, False, "max", name="max")
        lo = reduce_compute(x, None, False, "min", name="min")
    f32 = "float32"

    def scale_body() -> Expr:
        xmax = tir.max_(cast(hi[()], f32), 0.0)
        xmin = tir.min_(cast(lo[()], f32), 0.0)
        return tir.select(tir.eq(xmax, xmin), const(1.0, f32), (xmax - xmin) / 255.0)

    scale = te.compute((), scale_body, name="y_scale", tag=tag.ELEMWISE)

    def zp_body() -> Expr:
        xmin = tir.min_(cast(lo[()], f32), 0.0)
        v = 0.0 - xmin / scale[()]
        return tir.round_even(tir.min_(tir.max_(v, 0.0), 255.0))

    zpf = te.compute((), zp_body, name="zero_point_f", tag=tag.ELEMWISE)
    y = te.compute(x.shape, lambda *i: cast(tir.min_(tir.max_(
        tir.round_even(cast(x[i], f32) / scale[()]) + zpf[()], 0.0), 255.0), "uint8"),
        name="quantize", tag=tag.BROADCAST)
    zp = te.compute((), lambda: cast(zpf[()], "uint8"), name="y_zero_point", tag=tag.ELEMWISE)
    return y, scale, zp


def requantize(acc: te.Tensor, scale: float | te.Tensor, zero_point: int | te.Tensor | None,
               out_dtype: str, axis: int = 1) -> te.Tensor:
    """``saturate(round_half_even(float32(acc) * scale) + zero_point)`` to ``out_dtype``:
    ``scale`` a number or a float tensor (one element, or 1-D along ``axis`` of ``acc``),
    ``zero_point`` a number, a one-element tensor or None. Tag ``"broadcast"``."""
    f32 = "float32"
    if isinstance(scale, te.Tensor):
        get_scale = param_reader(scale, acc.ndim, axis)
        assert get_scale is not None
    else:
        s_imm = const(float(np.float32(scale)), f32)

        def get_scale(idx: Any) -> Expr:
            return s_imm

    zp = scalar(zero_point) if isinstance(zero_point, te.Tensor) else zero_point

    def body(*i: Any) -> Expr:
        f = tir.round_even(cast(acc[i], f32) * cast(get_scale(i), f32))
        if zp is not None:
            f = f + cast(zp if isinstance(zp, tir.PrimExpr) else const(zp, f32), f32)
        return saturate(f, out_dtype)

    return te.compute(acc.shape, body, name="requantize", tag=tag.BROADCAST)


# -- integer convolution ------------------------------------------------------------------------

def _zero(p: te.Tensor | None) -> Expr | None:
    """A per-tensor zero point as an expression (None when absent or an inlined 0)."""
    if p is None:
        return None
    v = constant_value(p)
    if v is not None and v.size == 1 and v.reshape(-1)[0] == 0:
        return None
    return scalar(p)


def _is_zero(p: te.Tensor | None) -> bool:
    """Whether ``p`` is absent or an inlined constant 0."""
    if p is None:
        return True
    v = constant_value(p)
    return v is not None and v.size == 1 and v.reshape(-1)[0] == 0


def _channel_zero(p: te.Tensor | None) -> Callable[[Expr], Expr] | None:
    """A weight zero point, per tensor or per output channel, as ``fn(oc)``."""
    if p is None:
        return None
    if p.ndim == 0 or shape_of(p) == (1,):
        z = _zero(p)
        return None if z is None else (lambda oc: z)
    return lambda oc: read(p, [oc])


def conv_integer(x: te.Tensor, w: te.Tensor, x_zp: te.Tensor | None, w_zp: te.Tensor | None,
                 strides: Any = 1, pads: Any = 0, dilation: Any = 1, groups: int = 1
                 ) -> te.Tensor:
    """int32 convolution of ``x - x_zp`` and ``w - w_zp`` (NC[D]HW)."""
    n = x.ndim - 2
    return conv_nchw(x, w, strides, pads, dilation, groups, "int32", data_zero=_zero(x_zp),
                     kernel_zero=_channel_zero(w_zp), name=_CONV_TAGS[n])


def _scalar_f32(p: te.Tensor) -> Expr:
    return cast(scalar(p), "float32")


def _folded_scale(x_scale: te.Tensor, w_scale: te.Tensor, y_scale: te.Tensor
                  ) -> np.ndarray | None:
    """``x_scale * w_scale / y_scale`` in float32 (a 1-element array) when all three are
    inlined (one-element) constants."""
    vals = [constant_value(t) for t in (x_scale, w_scale, y_scale)]
    if any(v is None for v in vals):
        return None
    xs, ws, ys = (np.asarray(v, np.float32).reshape(-1) for v in vals)  # type: ignore[arg-type]
    return np.float32(xs[0]) * ws / np.float32(ys[0])


def qlinear_conv(x: te.Tensor, x_scale: te.Tensor, x_zp: te.Tensor, w: te.Tensor,
                 w_scale: te.Tensor, w_zp: te.Tensor, y_scale: te.Tensor,
                 y_zp: te.Tensor | None, bias: te.Tensor | None, out_dtype: str,
                 strides: Any = 1, pads: Any = 0, dilation: Any = 1, groups: int = 1
                 ) -> te.Tensor:
    """Quantized convolution: int32 accumulation (+ int32 bias) requantized to ``out_dtype``
    with ``x_scale * w_scale / y_scale`` (per output channel when ``w_scale`` is a vector)."""
    acc = conv_integer(x, w, x_zp, w_zp, strides, pads, dilation, groups)
    folded = _folded_scale(x_scale, w_scale, y_scale)
    per_channel = shape_of(w_scale) not in ((), (1,))
    scale_of: Callable[[Any], Expr]
    if folded is not None and folded.size == 1:
        s_imm = const(float(folded[0]), "float32")
        scale_of = lambda oc: s_imm  # noqa: E731
    elif per_channel:
        scale = te.compute(shape_of(w_scale), lambda c: (_scalar_f32(x_scale) * cast(
            w_scale[c], "float32")) / _scalar_f32(y_scale), name="requant_scale",
            tag=tag.ELEMWISE)
        scale_of = lambda oc: scale[oc]  # noqa: E731
    else:
        s_expr = (_scalar_f32(x_scale) * _scalar_f32(w_scale)) / _scalar_f32(y_scale)
        scale_of = lambda oc: s_expr  # noqa: E731
    zp = None if y_zp is None else scalar(y_zp)

    def body(*i: Any) -> Expr:
        v = acc[i]
        if bias is not None:
            v = v + cast(read(bias, [i[1]]), "int32")
        f = tir.round_even(cast(v, "float32") * scale_of(i[1]))
        if zp is not None:
            f = f + cast(zp, "float32")
        return saturate(f, out_dtype)

    return te.compute(acc.shape, body, name="requantize", tag=tag.BROADCAST)


# -- integer matrix products --------------------------------------------------------------------

def _row_reader(p: te.Tensor | None) -> Callable[[Any], Expr] | None:
    """An A-side parameter: per tensor or per row of A."""
    if p is None:
        return None
    if shape_of(p) in ((), (1,)):
        v = scalar(p)
        return lambda i: v
    return lambda i: read(p, [i])


def _col_reader(p: te.Tensor | None) -> Callable[[Any], Expr] | None:
    """A B-side parameter: per tensor or per column of B."""
    if p is None:
        return None
    if shape_of(p) in ((), (1,)):
        v = scalar(p)
        return lambda j: v
    return lambda j: read(p, [j])


def matmul_integer(a: te.Tensor, b: te.Tensor, a_zp: te.Tensor | None = None,
                   b_zp: te.Tensor | None = None) -> te.Tensor:
    """int32 ``(a - a_zp) @ (b - b_zp)`` (numpy matmul semantics; zero points per tensor, per
    row of ``a`` or per column of ``b``)."""
    za = _row_reader(a_zp) if not _is_zero(a_zp) else None
    zb = _col_reader(b_zp) if not _is_zero(b_zp) else None
    a_term = (lambda v, i: v - cast(za(i), "int32")) if za is not None else None
    b_term = (lambda v, j: v - cast(zb(j), "int32")) if zb is not None else None
    return matmul_general(a, b, out_dtype="int32", a_term=a_term, b_term=b_term)


def qlinear_matmul(a: te.Tensor, a_scale: te.Tensor, a_zp: te.Tensor, b: te.Tensor,
                   b_scale: te.Tensor, b_zp: te.Tensor, y_scale: te.Tensor, y_zp: te.Tensor,
                   product: Callable[..., te.Tensor] | None = None) -> te.Tensor:
    """Quantized matmul: int32 accumulation requantized with ``a_scale * b_scale / y_scale``
    (per row of a / per column of b where the scales are vectors). ``product(a, b, a_zp,
    b_zp)`` computes the int32 accumulation (default :func:`matmul_integer`; a backend passes
    its own, such as packed dot products)."""
    acc = (product or matmul_integer)(a, b, a_zp, b_zp)
    out_dtype = y_zp.dtype
    b_vec = b.ndim == 1
    a_vec = a.ndim == 1
    scale = _folded_scale(a_scale, b_scale, y_scale)
    folded = const(float(scale[0]), "float32") if scale is not None else None
    ga, gb, gy = _row_reader(a_scale), _col_reader(b_scale), _col_reader(y_scale)
    gz = _col_reader(y_zp)
    assert ga is not None and gb is not None and gy is not None and gz is not None

    def body(*o: Any) -> Expr:
        i = 0 if a_vec else o[-1 if b_vec else -2]
        j = 0 if b_vec else o[-1]
        if folded is not None:
            s = folded
        else:
            s = (cast(ga(i), "float32") * cast(gb(j), "float32")) / cast(gy(j), "float32")
        f = tir.round_even(cast(acc[o], "float32") * s) + cast(gz(j), "float32")
        return saturate(f, out_dtype)

    return te.compute(acc.shape, body, name="requantize", tag=tag.BROADCAST)


# -- graph ops ----------------------------------------------------------------------------------

def _opt(inputs: list, k: int) -> te.Tensor | None:
    return inputs[k] if len(inputs) > k else None


@register_compute("QuantizeLinear")
def _quantize(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    prec = attrs.get("precision")
    return [quantize(inputs[0], inputs[1], _opt(inputs, 2), out_types[0].dtype.value,
                     attrs["axis"], attrs["block_size"], prec.value if prec else None)]


@register_compute("DequantizeLinear")
def _dequantize(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [dequantize(inputs[0], inputs[1], _opt(inputs, 2), out_types[0].dtype.value,
                       attrs["axis"], attrs["block_size"])]


@register_compute("DynamicQuantizeLinear")
def _dynamic_quantize(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return list(dynamic_quantize(inputs[0]))[:len(out_types)]


def _conv_rank(node: Any) -> str | None:
    if not 3 <= node.inputs[0].type.ndim <= 5:
        return "only 1-D to 3-D convolutions are supported"
    return None


def _conv_args(attrs: dict) -> dict:
    return {"strides": attrs["strides"] or 1, "pads": attrs["pads"] or 0,
            "dilation": attrs["dilations"] or 1, "groups": attrs["group"]}


@register_compute("ConvInteger", supports=_conv_rank)
def _conv_integer(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [conv_integer(inputs[0], inputs[1], _opt(inputs, 2), _opt(inputs, 3),
                         **_conv_args(attrs))]


@register_compute("QLinearConv", supports=_conv_rank)
def _qlinear_conv(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    x, xs, xz, w, ws, wz, ys = inputs[:7]
    return [qlinear_conv(x, xs, xz, w, ws, wz, ys, _opt(inputs, 7), _opt(inputs, 8),
                         out_types[0].dtype.value, **_conv_args(attrs))]


@register_compute("MatMulInteger")
def _matmul_integer(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [matmul_integer(inputs[0], inputs[1], _opt(inputs, 2), _opt(inputs, 3))]


def a_pairs(a: te.Tensor) -> te.Tensor:
    """8-bit ``a (..., K)`` as int32 words of its int16 pairs along the last axis: ``(...,
    ceil(K / 2))``, word ``k`` holding ``a[..., 2k]`` (low half) and ``a[..., 2k + 1]`` (0
    past the end), each sign- or zero-extended as its dtype says
    (:func:`~tessera.tir.dot_product.pack_pair`). Tagged :data:`~tessera.topi.tag.A_PAIRS`:
    schedules compute it once, at root, rather than inline (every column tile of a product
    reads each pair again)."""
    shape, kdim = dims_of(a), _columns(a)

    def body(*i: Any) -> Expr:
        *lead, k = i
        return pack_pair(_read(a, lead, 2 * k, kdim, 2), _read(a, lead, 2 * k + 1, kdim, 2))

    return te.compute((*shape[:-1], -(-kdim // 2)), body, name="a_pairs", tag=tag.A_PAIRS)


def a_quads(a: te.Tensor) -> te.Tensor:
    """8-bit ``a (..., K)`` as int32 words of four unsigned bytes along the last axis:
    ``(..., ceil(K / 4))``, word ``k`` holding ``a[..., 4k .. 4k + 3]`` (low byte first; 0
    past the end, whose weights are zeros) as they are for uint8, plus 128 for int8
    (``vpdpbusd`` multiplies unsigned by signed bytes; the caller of
    :func:`matmul_integer_quads` subtracts ``128 * colsum(B)``). Tagged
    :data:`~tessera.topi.tag.A_PAIRS` (computed once, at root)."""
    shape, kdim = dims_of(a), _columns(a)
    signed = a.dtype == "int8"

    def byte(v: Expr) -> Expr:
        return cast(cast(v, "int32") + 128, "uint8") if signed else v

    def body(*i: Any) -> Expr:
        *lead, k = i
        return pack_bytes(lambda j: byte(_read(a, lead, 4 * k + j, kdim, 4)))

    return te.compute((*shape[:-1], -(-kdim // 4)), body, name="a_quads", tag=tag.A_PAIRS)


def _columns(a: te.Tensor) -> int:
    k = dims_of(a)[-1]
    if not isinstance(k, int):
        raise ValueError(f"integer products: A's columns (K) must be a static size, got {k}")
    return k


def _read(a: te.Tensor, lead: list, j: Expr, kdim: int, word: int) -> Expr:
    """``a[..., j]``, or 0 where the last word of ``word`` values reaches past ``a``'s
    ``kdim`` columns (the packed weight's padding rows, zeros, multiply those); the read
    itself stays in bounds."""
    if kdim % word == 0:
        return a[(*lead, j)]
    inside = tir.LT(j, tir.convert(kdim, j.dtype))
    return tir.select(inside, a[(*lead, tir.min_(j, tir.convert(kdim - 1, j.dtype)))],
                      tir.convert(0, a.dtype))


def _word_product(a: te.Tensor, bp: te.Tensor, word: int) -> te.Tensor:
    """``A x B`` over the words of ``word`` values (module functions below)."""
    ashape, (panels, count, nb) = dims_of(a), shape_of(bp)
    if -(-_columns(a) // word) != count:
        raise ValueError(f"integer product: A {list(ashape)} does not have ceil(K / {word}) "
                         f"= {count}")
    words, intrinsic = (a_pairs(a), DOT2_S16) if word == 2 else (a_quads(a), DP4A_US)
    nbatch = len(ashape) - 2
    k = te.reduce_axis((0, count), name="k")
    zero = tir.convert(0, "int32")

    def body(*oi: Any) -> Expr:
        *bidx, i, j = oi
        return te.sum(tir.Call(intrinsic, [words[(*bidx, i, k)], bp[j // nb, k, j % nb],
                                           zero], "int32"), axis=k)

    names = [f"b{d}" for d in range(nbatch)] + ["i", "j"]
    return te.compute((*ashape[:-1], panels * nb), named_axes(body, names),
                      name="dense_packed", tag=tag.BATCH_MATMUL if nbatch else tag.DENSE,
                      attrs={"out_dtype": "int32", "a": a, "b": bp, "panel": nb})


def matmul_integer_pairs(a: te.Tensor, bp: te.Tensor) -> te.Tensor:
    """int32 ``A (..., M, K) x B`` for 8-bit ``A`` and ``B`` as
    :func:`~tessera.ops.quant.pack_integer_matmul_weight` stores it (column panels ``(N // nb,
    ceil(K / 2), nb)`` of int16 pairs along K): over the pairs, ``dot2_s16`` of A's pair
    (:func:`a_pairs`, computed once) and B's word (two products per int32 lane, exactly). Tag
    and attributes as :func:`~tessera.topi.nn.dense.matmul_packed` (the same schedules
    apply); the rows and batch axes of ``a`` may be run-time sizes."""
    return _word_product(a, bp, 2)


def matmul_integer_quads(a: te.Tensor, bp: te.Tensor) -> te.Tensor:
    """int32 ``A' (..., M, K) x B`` for 8-bit ``A`` read as unsigned bytes ``A'``
    (:func:`a_quads`: ``A`` itself for uint8, ``A + 128`` for int8) and an int8 ``B`` as
    :func:`~tessera.ops.quant.pack_integer_matmul_weight` stores it in words of 4 (column
    panels ``(N // nb, ceil(K / 4), nb)``): over the words, ``dp4a_us`` of A's and B's (four
    products per int32 lane: AVX-512 VNNI's and AVX-VNNI's ``vpdpbusd``). Tag and attributes
    as :func:`matmul_integer_pairs`."""
    return _word_product(a, bp, 4)


@register_compute("MatMulIntegerPacked")
def _matmul_integer_packed(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    a, bp, a_zp, colsum = inputs[0], inputs[1], _opt(inputs, 2), _opt(inputs, 3)
    quads = int(attrs.get("word", 2)) == 4
    product = matmul_integer_quads(a, bp) if quads else matmul_integer_pairs(a, bp)
    # the A zero point (and, for int8 A read as unsigned bytes, its offset of 128) times
    # B's column sums
    offset = 128 if quads and a.dtype == "int8" else 0
    if colsum is None:
        return [product]
    za = cast(scalar(a_zp), "int32") + offset if a_zp is not None else \
        tir.convert(offset, "int32")
    return [te.compute(product.shape,
                       lambda *i: product[i] - za * read(colsum, [i[-1]]),
                       name="zero_point_term", tag=tag.BROADCAST)]


def _qlinear_matmul_supports(node: Any) -> str | None:
    for k in (1, 2):
        t = node.inputs[k].type
        if t.ndim > 1 and t.size > 1:
            return "a_scale/a_zero_point must be scalars or 1-D per row"
    for k in (4, 5, 6, 7):
        t = node.inputs[k].type
        if t.ndim > 1 and t.size > 1:
            return "b/y scales and zero points must be scalars or 1-D per column"
    return None


@register_compute("QLinearMatMul", supports=_qlinear_matmul_supports)
def _qlinear_matmul(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [qlinear_matmul(*inputs[:8])]


__all__ = ["a_pairs", "a_quads", "conv_integer", "dequantize", "dynamic_quantize", "matmul_integer",
           "matmul_integer_pairs", "matmul_integer_quads", "param_reader",
           "qlinear_conv", "qlinear_matmul", "quantize", "requantize", "saturate"]
