"""Convolutions in NC[D]HW layout (and the blocked NCHW[x]c layout of ``ConvNCHWc``).

The computes are written for schedules to tile: padding is a separate stage
(:func:`tessera.topi.transform.pad`, tag ``"injective,pad"``, only when some pad is non-zero);
the convolution stage is one plain ``te.sum`` over the reduce axes ``rc`` (input channels of the
group), then the kernel axes (``ry``, ``rx``; ``rz`` for 3-D), reading the padded data at
``o * stride + r * dilation``. With ``groups == 1`` no index has a division or modulo;
depthwise convolutions (one input channel per group) drop ``rc`` and read channel ``oc`` (or
``oc // multiplier``); other group counts compute the group's first channel with a division.

Attrs of the convolution stage: ``strides``, ``dilation``, ``pads`` (begins then ends),
``kernel_size``, ``groups``, ``out_dtype``, ``data`` (the unpadded input), ``data_pad`` (the
pad stage or None), ``kernel``, ``layout``, ``reduce_roles`` (the role of each reduce axis, in
order: ``ic`` input channel, ``kd``/``kh``/``kw`` kernel; for NCHWc ``icc`` channel chunk and
``ib`` channel lane). Bias, when given, is added by a following
``"broadcast"`` stage (so the convolution stage stays a pure reduction).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tessera import te, tir
from tessera.ops.spatial import conv_output_shape
from tessera.topi import tag
from tessera.topi.registry import register_compute
from tessera.topi.transform import pad
from tessera.topi.utils import (
    Dim,
    add,
    as_dim,
    cast,
    compute_dtype,
    dims_of,
    is_static,
    mul,
    named_axes,
    read,
    shape_of,
)

Expr = tir.PrimExpr

_SPATIAL_NAMES = {1: ["x"], 2: ["y", "x"], 3: ["z", "y", "x"]}
_CONV_TAGS = {1: "conv1d_ncw", 2: tag.CONV2D_NCHW, 3: "conv3d_ncdhw"}


def expand_param(value: int | Sequence[int], n: int, what: str) -> list[int]:
    """An int or a list of ``n`` ints as a list of ``n`` ints."""
    if isinstance(value, int):
        return [value] * n
    out = [int(v) for v in value]
    if len(out) != n:
        raise ValueError(f"{what} {out} does not fit {n} spatial dims")
    return out


def expand_pads(pads: int | Sequence[int], n: int) -> list[int]:
    """Pads as ``[begin_1.., end_1..]`` from an int, ``n`` symmetric values or ``2n`` values
    (for 2-D: ``[top, left, bottom, right]``)."""
    if isinstance(pads, int):
        return [pads] * (2 * n)
    p = [int(v) for v in pads]
    if len(p) == n:
        return p + p
    if len(p) != 2 * n:
        raise ValueError(f"pads {p} do not fit {n} spatial dims")
    return p


def conv_output_dims(in_spatial: Sequence[Dim], kernel: Sequence[int], strides: Sequence[int],
                     pads: Sequence[int], dilation: Sequence[int]) -> list[Dim]:
    """:func:`~tessera.ops.spatial.conv_output_shape` over spatial sizes that may be run-time
    ones (index expressions): ``(d + pad_begin + pad_end - span + stride) // stride`` (no
    division for stride 1). A static size keeps the checked computation."""
    if is_static(in_spatial):
        return conv_output_shape(in_spatial, kernel, strides, pads, dilation)
    n = len(in_spatial)
    out: list[Dim] = []
    for i, d in enumerate(in_spatial):
        lo, hi = pads[i], pads[i + n]
        if isinstance(d, int):
            out.extend(conv_output_shape([d], [kernel[i]], [strides[i]], [lo, hi], [dilation[i]]))
            continue
        span = (kernel[i] - 1) * dilation[i] + 1
        s = strides[i]  # (size - span) // s + 1 as (size - span + s) // s: the graph's form
        size = as_dim(tir.convert(d, "int64") + (lo + hi - span + s))
        out.append(size if s == 1 else as_dim(tir.convert(size, "int64") // s))
    return out


def conv_nchw(data: te.Tensor, kernel: te.Tensor, strides: int | Sequence[int] = 1,
              pads: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
              groups: int = 1, out_dtype: str | None = None,
              data_zero: Expr | None = None,
              kernel_zero: Callable[[Expr], Expr] | None = None,
              name: str = "conv") -> te.Tensor:
    """Grouped convolution (cross-correlation) of ``data`` (N, C, *spatial) with ``kernel``
    (OC, C / groups, *kernel) for 1 to 3 spatial dims.

    ``out_dtype`` is the accumulation and output type (default: the data's). For integer
    convolutions ``data_zero`` (an expression of the data's type) is the padding value and is
    subtracted from every data element, and ``kernel_zero(oc)`` from every weight of output
    channel ``oc``; both subtractions happen in ``out_dtype``."""
    dshape, kshape = dims_of(data), shape_of(kernel)
    n = len(dshape) - 2
    if n not in _SPATIAL_NAMES or len(kshape) != n + 2:
        raise ValueError(f"conv_nchw: data {list(dshape)} and kernel {list(kshape)} must have "
                         f"1 to 3 spatial dims and the same rank")
    batch, channels = dshape[:2]
    out_channels, icg = kshape[:2]
    ksize = list(kshape[2:])
    s = expand_param(strides, n, "strides")
    d = expand_param(dilation, n, "dilation")
    p = expand_pads(pads, n)
    if channels != icg * groups or out_channels % groups:
        raise ValueError(f"conv_nchw: kernel {list(kshape)} with groups {groups} does not fit "
                         f"data {list(dshape)}")
    acc = out_dtype or data.dtype
    out_sp = conv_output_dims(dshape[2:], ksize, s, p, d)
    depthwise = groups > 1 and icg == 1 and groups == channels
    multiplier = out_channels // groups
    padded = data
    if any(p):
        pad_value: Any = data_zero if data_zero is not None else 0
        padded = pad(data, [0, 0, *p[:n]], [0, 0, *p[n:]], pad_value, name="data_pad")
    names = _SPATIAL_NAMES[n]
    rk = [te.reduce_axis((0, k), name=f"r{nm}") for k, nm in zip(ksize, names)]
    rc = te.reduce_axis((0, icg), name="rc")

    def body(nn: Any, oc: Any, *o: Any) -> Expr:
        sp = [add(mul(oi, si), mul(ri, di)) for oi, si, di, ri in zip(o, s, d, rk)]
        if groups == 1:
            ic, w_ic, axes = rc, rc, [rc, *rk]
        elif depthwise:
            ic = oc if multiplier == 1 else oc // multiplier
            w_ic, axes = 0, list(rk)
        else:
            ic = (oc // multiplier) * icg + rc
            w_ic, axes = rc, [rc, *rk]
        a = cast(padded[(nn, ic, *sp)], acc)
        b = cast(read(kernel, [oc, w_ic, *rk]), acc)
        if data_zero is not None:
            a = a - cast(data_zero, acc)
        if kernel_zero is not None:
            b = b - cast(kernel_zero(oc), acc)
        return te.sum(a * b, axis=axes)

    if groups == 1:
        kind = _CONV_TAGS[n]
    elif depthwise:
        kind = "depthwise_" + _CONV_TAGS[n]
    else:
        kind = "group_" + _CONV_TAGS[n]
    attrs = {"strides": tuple(s), "dilation": tuple(d), "pads": tuple(p),
             "kernel_size": tuple(ksize), "groups": groups, "out_dtype": acc, "data": data,
             "data_pad": padded if padded is not data else None, "kernel": kernel,
             "layout": "NC" + "DHW"[3 - n:],
             "reduce_roles": tuple(([] if depthwise else ["ic"]) + ["kd", "kh", "kw"][3 - n:])}
    axes = ["n", "oc"] + ["od", "oh", "ow"][3 - n:]
    return te.compute((batch, out_channels, *out_sp), named_axes(body, axes), name=name,
                      tag=kind, attrs=attrs)


def conv2d_nchw(data: te.Tensor, kernel: te.Tensor, strides: int | Sequence[int] = 1,
                pads: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
                groups: int = 1, out_dtype: str | None = None) -> te.Tensor:
    """2-D convolution: data (N, C, H, W), kernel (OC, C / groups, KH, KW); ``pads`` is an int,
    ``[pad_h, pad_w]`` or ``[top, left, bottom, right]``. Tag ``conv2d_nchw`` (groups 1),
    ``depthwise_conv2d_nchw`` or ``group_conv2d_nchw``."""
    if data.ndim != 4:
        raise ValueError(f"conv2d_nchw: data must be 4-D, got {list(shape_of(data))}")
    return conv_nchw(data, kernel, strides, pads, dilation, groups, out_dtype,
                     name="conv2d_nchw")


def bias_add(x: te.Tensor, bias: te.Tensor, axis: int = 1, out_dtype: str | None = None,
             name: str = "bias_add") -> te.Tensor:
    """``x + bias[c]`` with ``c`` the index along ``axis`` (bias cast to x's dtype), cast to
    ``out_dtype``; tag ``"broadcast"``."""
    out = out_dtype or x.dtype

    def body(*i: Any) -> Expr:
        return cast(x[i] + cast(read(bias, [i[axis]]), x.dtype), out)

    return te.compute(x.shape, body, name=name, tag=tag.BROADCAST)


def _cast_stage(x: te.Tensor, dtype: str, name: str) -> te.Tensor:
    return te.compute(x.shape, lambda *i: cast(x[i], dtype), name=name, tag=tag.ELEMWISE)


# -- blocked layout -----------------------------------------------------------------------------

def conv2d_NCHWc(data: te.Tensor, kernel: te.Tensor, strides: int | Sequence[int] = 1,  # noqa: N802
                 pads: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
                 groups: int = 1, out_dtype: str | None = None,
                 flat_spatial: bool = False) -> te.Tensor:
    """2-D convolution in blocked layouts.

    ``data`` (N, C // cd, H, W, cd); ``kernel`` (OC // oc_bn, ICg // ic_bn, KH, KW, ic_bn,
    oc_bn) with ICg = C / groups; output (N, OC // oc_bn, OH, OW, oc_bn). Output channel
    ``o = oc_chunk * oc_bn + ob`` is in group ``g = o // (OC / groups)``; its input channel
    ``ic = g * ICg + icc * ic_bn + ib`` is read at ``data[n, ic // cd, ih, iw, ic % cd]``.

    Reduce axes ``icc`` (ICg // ic_bn), ``ry``, ``rx``, ``ib`` (ic_bn). With ``groups == 1`` and
    ``cd == ic_bn`` the read is ``data[n, icc, ih, iw, ib]``; depthwise convolutions (ICg == 1)
    reduce over ``ry``, ``rx`` only (tag ``depthwise_conv2d_NCHWc``), reading
    ``data[n, oc_chunk, ih, iw, ob]`` when the blocks agree and the multiplier is 1. Attrs as
    :func:`conv_nchw` plus ``ic_bn``, ``oc_bn``, ``data_block`` (cd)."""
    dshape, kshape = dims_of(data), shape_of(kernel)  # batch, height, width: maybe run-time
    if len(dshape) != 5 or len(kshape) != 6:
        raise ValueError(f"conv2d_NCHWc: data {list(dshape)} must be 5-D and kernel "
                         f"{list(kshape)} 6-D")
    batch, c_chunks, _, _, cd = dshape
    oc_chunks, ic_chunks, kh, kw, ic_bn, oc_bn = kshape
    channels = c_chunks * cd
    out_channels = oc_chunks * oc_bn
    icg = ic_chunks * ic_bn
    if channels != icg * groups or out_channels % groups:
        raise ValueError(f"conv2d_NCHWc: kernel {list(kshape)} with groups {groups} does not "
                         f"fit data {list(dshape)}")
    ocg = out_channels // groups
    s = expand_param(strides, 2, "strides")
    d = expand_param(dilation, 2, "dilation")
    p = expand_pads(pads, 2)
    acc = out_dtype or data.dtype
    oh, ow = conv_output_dims(dshape[2:4], [kh, kw], s, p, d)
    padded = data
    if any(p):
        padded = pad(data, [0, 0, p[0], p[1], 0], [0, 0, p[2], p[3], 0], 0, name="data_pad")
    elif kh == kw == 1 and s != [1, 1] and groups == 1:
        # a strided 1x1 convolution reads one pixel in s[0] * s[1]: those pixels are gathered
        # once (a quarter of the input for stride 2) so the reduction streams dense rows
        s0, s1 = s

        def sub(n: Any, c: Any, y: Any, x: Any, b: Any) -> Expr:
            return data[n, c, mul(y, s0), mul(x, s1), b]

        padded = te.compute((batch, c_chunks, *conv_output_dims(dshape[2:4], [1, 1], s,
                                                                 [0, 0, 0, 0], [1, 1]), cd),
                            sub, name="data_strided", tag="injective,pad")
        s = [1, 1]
    depthwise = icg == 1 and groups > 1
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    icc = te.reduce_axis((0, ic_chunks), name="icc")
    ib = te.reduce_axis((0, ic_bn), name="ib")

    def body(n: Any, occ: Any, y: Any, x: Any, ob: Any) -> Expr:
        ih = add(mul(y, s[0]), mul(ry, d[0]))
        iw = add(mul(x, s[1]), mul(rx, d[1]))
        if depthwise:
            axes = [ry, rx]
            if ocg == 1 and cd == oc_bn:
                src = padded[n, occ, ih, iw, ob]
            else:
                ic = (occ * oc_bn + ob) // ocg
                src = padded[n, ic // cd, ih, iw, ic % cd]
            w = kernel[occ, 0, ry, rx, 0, ob]
        else:
            axes = [icc, ry, rx, ib]
            if groups == 1 and cd == ic_bn:
                src = padded[n, icc, ih, iw, ib]
            else:
                if groups > 1 and ocg % oc_bn == 0 and icg % cd == 0 and ic_bn == cd:
                    # whole output blocks per group: the group is occ // (blocks per group)
                    # and the input block index is affine (no div/mod of the vector lane)
                    g = occ // (ocg // oc_bn)
                    src = padded[n, g * (icg // cd) + icc, ih, iw, ib]
                else:
                    ic = add(mul(icc, ic_bn), ib)
                    if groups > 1:
                        ic = ((occ * oc_bn + ob) // ocg) * icg + ic
                    src = padded[n, ic // cd, ih, iw, ic % cd]
            w = kernel[occ, icc, ry, rx, ib, ob]
        return te.sum(cast(src, acc) * cast(w, acc), axis=axes)

    kind = tag.DEPTHWISE_CONV2D_NCHWC if depthwise else tag.CONV2D_NCHWC
    flat = flat_spatial and not depthwise
    attrs = {"strides": tuple(s), "dilation": tuple(d), "pads": tuple(p),
             "kernel_size": (kh, kw), "groups": groups, "out_dtype": acc, "data": data,
             "data_pad": padded if padded is not data else None, "kernel": kernel,
             "ic_bn": ic_bn, "oc_bn": oc_bn, "data_block": cd, "layout": f"NCHW{cd}c",
             "reduce_roles": ("kh", "kw") if depthwise else ("icc", "kh", "kw", "ib"),
             "out_hw": (oh, ow), "flat_spatial": flat}
    if not flat:
        return te.compute((batch, oc_chunks, oh, ow, oc_bn),
                          named_axes(body, ["n", "oc_chunk", "oh", "ow", "oc_block"]),
                          name="conv2d_NCHWc", tag=kind, attrs=attrs)

    def flat_body(n: Any, occ: Any, pix: Any, ob: Any) -> Expr:
        return body(n, occ, pix // ow, pix % ow, ob)

    flat_conv = te.compute((batch, oc_chunks, oh * ow, oc_bn),
                           named_axes(flat_body, ["n", "oc_chunk", "pixel", "oc_block"]),
                           name="conv2d_NCHWc", tag=kind, attrs=attrs)

    def view(n: Any, occ: Any, y: Any, x: Any, ob: Any) -> Expr:
        return flat_conv[n, occ, add(mul(y, ow), x), ob]

    return te.compute((batch, oc_chunks, oh, ow, oc_bn), view, name="conv2d_NCHWc_rows",
                      tag=tag.INJECTIVE)


# -- graph ops ----------------------------------------------------------------------------------

def _conv_supports(node: Any) -> str | None:
    x = node.inputs[0].type
    if not 3 <= x.ndim <= 5:
        return f"only 1-D to 3-D convolutions are supported, the input is {x}"
    return None


@register_compute("Conv", supports=_conv_supports)
def _conv(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    n = x.ndim - 2
    acc = compute_dtype(x.dtype)
    y = conv_nchw(x, w, attrs["strides"] or 1, attrs["pads"] or 0, attrs["dilations"] or 1,
                  attrs["group"], acc, name=_CONV_TAGS[n])
    out = out_types[0].dtype.value
    if b is not None:
        return [bias_add(y, b, 1, out)]
    if y.dtype != out:
        return [_cast_stage(y, out, "conv_cast")]
    return [y]


def _conv_nchwc_supports(node: Any) -> str | None:
    if node.inputs[0].type.ndim != 5 or node.inputs[1].type.ndim != 6:
        return "data must be 5-D and weight 6-D"
    return None


@register_compute("ConvNCHWc", supports=_conv_nchwc_supports)
def _conv_nchwc(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    acc = compute_dtype(x.dtype)
    y = conv2d_NCHWc(x, w, attrs.get("strides") or 1, attrs.get("pads") or 0,
                     attrs.get("dilations") or 1, attrs.get("group", 1), acc,
                     bool(attrs.get("flat_spatial", False)))
    out = out_types[0].dtype.value
    if b is not None:
        def body(n: Any, c: Any, h: Any, ww: Any, cb: Any) -> Expr:
            return cast(y[n, c, h, ww, cb] + cast(read(b, [c, cb]), acc), out)

        return [te.compute(y.shape, body, name="bias_add", tag=tag.BROADCAST)]
    if y.dtype != out:
        return [_cast_stage(y, out, "conv_cast")]
    return [y]


__all__ = ["bias_add", "conv2d_NCHWc", "conv2d_nchw", "conv_nchw", "conv_output_dims",
           "expand_pads", "expand_param"]
