"""Transposed convolution (``ConvTranspose``) in NC[D]HW, 1 to 3 spatial dims.

Written as a gather: output position ``o`` takes input position ``i = (o + pad_begin - k *
dilation) / stride`` for every kernel tap ``k`` where that division is exact and ``i`` is in
range (a ``where`` condition on the reduction; the read index is clamped so it is in bounds).
With stride 1 there is no division or modulo. Reduce axes: ``rc`` (input channels of the
group), then one per kernel dimension. Tag ``conv2d_transpose_nchw`` (``conv1d_transpose_ncw``,
``conv3d_transpose_ncdhw``); attrs ``strides``, ``dilation``, ``pads``, ``output_padding``,
``kernel_size``, ``groups``. Bias is a following ``"broadcast"`` stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tessera import te, tir
from tessera.ops.conv import conv_transpose_output_shape
from tessera.topi import tag
from tessera.topi.nn.conv2d import bias_add, expand_pads, expand_param
from tessera.topi.registry import register_compute
from tessera.topi.utils import add, cast, clamp, compute_dtype, mul, named_axes, read, shape_of

Expr = tir.PrimExpr
_TAGS = {1: "conv1d_transpose_ncw", 2: "conv2d_transpose_nchw", 3: "conv3d_transpose_ncdhw"}
_NAMES = {1: ["x"], 2: ["y", "x"], 3: ["z", "y", "x"]}


def conv_transpose_nchw(data: te.Tensor, kernel: te.Tensor, strides: int | Sequence[int] = 1,
                        pads: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
                        groups: int = 1, output_padding: Sequence[int] | None = None,
                        out_dtype: str | None = None) -> te.Tensor:
    """Grouped transposed convolution: data (N, C, *in), kernel (C, M / groups, *k); output
    (N, M, *out) with ``out = stride * (in - 1) + output_padding + (k - 1) * dilation + 1 -
    pad_begin - pad_end``."""
    dshape, kshape = shape_of(data), shape_of(kernel)
    n = len(dshape) - 2
    batch, channels = dshape[:2]
    mg = kshape[1]
    ksize = list(kshape[2:])
    s = expand_param(strides, n, "strides")
    d = expand_param(dilation, n, "dilation")
    p = expand_pads(pads, n)
    opad = list(output_padding) if output_padding else [0] * n
    out_sp = conv_transpose_output_shape(dshape[2:], ksize, s, p, d, opad)
    cg = channels // groups
    acc = out_dtype or data.dtype
    rc = te.reduce_axis((0, cg), name="rc")
    rk = [te.reduce_axis((0, k), name=f"r{nm}") for k, nm in zip(ksize, _NAMES[n])]

    def body(nn: Any, m: Any, *o: Any) -> Expr:
        conds: list[Expr] = []
        src: list[Expr] = []
        for oi, si, di, pi, ri, size in zip(o, s, d, p, rk, dshape[2:]):
            t = add(oi, pi) - mul(ri, di)
            if si == 1:
                conds += [t >= 0, t < size]
                src.append(clamp(t, 0, size - 1))
            else:
                conds += [t >= 0, tir.eq(t % si, 0), t < size * si]
                src.append(clamp(t // si, 0, size - 1))
        if groups == 1:
            ic, wm = rc, m
        else:
            ic = (m // mg) * cg + rc
            wm = m % mg
        v = cast(data[(nn, ic, *src)], acc) * cast(read(kernel, [ic, wm, *rk]), acc)
        return te.sum(v, axis=[rc, *rk], where=tir.all_of(*conds))

    attrs = {"strides": tuple(s), "dilation": tuple(d), "pads": tuple(p),
             "output_padding": tuple(opad), "kernel_size": tuple(ksize), "groups": groups,
             "out_dtype": acc, "data": data, "kernel": kernel}
    axes = ["n", "oc"] + ["od", "oh", "ow"][3 - n:]
    return te.compute((batch, mg * groups, *out_sp), named_axes(body, axes), name=_TAGS[n],
                      tag=_TAGS[n], attrs=attrs)


def _supports(node: Any) -> str | None:
    if not 3 <= node.inputs[0].type.ndim <= 5:
        return "only 1-D to 3-D transposed convolutions are supported"
    return None


@register_compute("ConvTranspose", supports=_supports)
def _conv_transpose(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    acc = compute_dtype(x.dtype)
    y = conv_transpose_nchw(x, w, attrs["strides"] or 1, attrs["pads"] or 0,
                            attrs["dilations"] or 1, attrs["group"], attrs["output_padding"],
                            acc)
    out = out_types[0].dtype.value
    if b is not None:
        return [bias_add(y, b, 1, out)]
    if y.dtype != out:
        return [te.compute(y.shape, lambda *i: cast(y[i], out), name="conv_cast",
                           tag=tag.ELEMWISE)]
    return [y]


__all__ = ["conv_transpose_nchw"]
