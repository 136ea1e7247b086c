"""Pooling: max, average and Lp windows (pads, strides, dilations, ceil_mode,
count_include_pad), global pools, in NC[D]HW and in the blocked NCHW[x]c layout.

A window pool is a pad stage (when anything is padded; the end pad grows so the last
``ceil_mode`` window fits, as in the references) and a reduction over one reduce axis per
kernel dimension (tag ``"pool_max"`` or ``"pool_sum"``; attrs ``kernel_size``, ``strides``,
``dilation``, ``pads``, ``data_pad``, ``layout``). Average and Lp pools finish with an
elementwise stage (tag ``"pool_avg"`` / ``"elemwise"``). The average's divisor is a constant
when every window lies inside the counted region, else a closed form of the output position
(no second reduction).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tessera import te, tir
from tessera.ops.pool import pool_output_shape
from tessera.topi import reduction, tag
from tessera.topi.nn.conv2d import conv_output_dims
from tessera.topi.registry import register_compute
from tessera.topi.transform import pad
from tessera.topi.utils import Dim, add, cast, compute_dtype, const, dims_of, is_static, mul

Expr = tir.PrimExpr
_NAMES = ["rz", "ry", "rx"]


def _geometry(in_sp: Sequence[Dim], kernel: Sequence[int], strides: Sequence[int],
              pads: Sequence[int], dilation: Sequence[int], ceil_mode: bool
              ) -> tuple[list[Dim], list[int]]:
    """(output size, applied pads [begins.., ends..]) as the references compute them. Over
    run-time sizes (without ``ceil_mode``, whose last window depends on the size) the
    output sizes are expressions and the pads the declared ones (every window then ends
    within them)."""
    n = len(in_sp)
    if not is_static(in_sp):
        if ceil_mode:
            raise ValueError("pooling with ceil_mode over run-time spatial sizes is not "
                             "supported")
        return conv_output_dims(in_sp, kernel, strides, pads, dilation), list(pads)
    out = pool_output_shape(in_sp, kernel, strides, pads, dilation, int(ceil_mode))
    end = []
    for i in range(n):
        need = (out[i] - 1) * strides[i] + (kernel[i] - 1) * dilation[i] + 1 - in_sp[i] - pads[i]
        end.append(max(pads[i + n], need))
    return out, list(pads[:n]) + end


def _lowest(dtype: str) -> Expr:
    return tir.min_value(dtype)


def _window_count(o: Expr, size: Dim, k: int, s: int, d: int, lo: int, hi: Dim,
                  within: bool = False) -> Expr | int:
    """How many of the ``k`` taps ``o * s + j * d`` (padded coordinates) of window ``o`` fall in
    ``[lo, hi)``, for outputs ``0 .. size - 1``: an int when it is the same for all.
    ``within``: every window is known to end before ``hi`` (the caller's proof, for run-time
    sizes)."""
    if isinstance(size, int) and isinstance(hi, int):
        if lo <= 0 and (size - 1) * s + (k - 1) * d < hi:
            return k
    elif lo <= 0 and within:
        return k
    start = mul(o, s)
    if d == 1:
        first = tir.max_(lo - start, 0)
        last = tir.min_(hi - 1 - start, k - 1)
    else:
        first = tir.max_((lo - start + (d - 1)) // d, 0)
        last = tir.min_((hi - 1 - start) // d, k - 1)
    return tir.max_(last - first + 1, 0)


def pool(data: te.Tensor, kernel: Sequence[int], strides: Sequence[int] | None = None,
         pads: Sequence[int] | None = None, dilation: Sequence[int] | None = None,
         mode: str = "max", ceil_mode: bool = False, count_include_pad: bool = False,
         p: int = 2, spatial_axes: Sequence[int] | None = None,
         layout: str = "NCHW") -> te.Tensor:
    """A window pool over ``spatial_axes`` (default: every axis from 2 on) of ``data``.

    ``mode`` is ``"max"``, ``"avg"`` or ``"lp"`` (``p``-norm). ``pads`` are begins then ends.
    float16 sums are accumulated in float32."""
    shape = dims_of(data)
    axes = list(spatial_axes) if spatial_axes is not None else list(range(2, len(shape)))
    n = len(axes)
    kernel = list(kernel)
    s = list(strides) if strides else [1] * n
    d = list(dilation) if dilation else [1] * n
    declared = list(pads) if pads else [0] * (2 * n)
    in_sp = [shape[a] for a in axes]
    out_sp, applied = _geometry(in_sp, kernel, s, declared, d, ceil_mode)
    before = [0] * len(shape)
    after = [0] * len(shape)
    for k, a in enumerate(axes):
        before[a], after[a] = applied[k], applied[k + n]
    acc = data.dtype if mode == "max" else compute_dtype(data.dtype)
    padded = data
    if any(applied):
        value = _lowest(data.dtype) if mode == "max" else const(0, data.dtype)
        padded = pad(data, before, after, value, name="data_pad")
    rk = [te.reduce_axis((0, k), name=_NAMES[3 - n + i] if n <= 3 else f"r{i}")
          for i, k in enumerate(kernel)]
    out_shape = list(shape)
    for k, a in enumerate(axes):
        out_shape[a] = out_sp[k]

    def index(oi: Sequence[Any]) -> list[Any]:
        idx = list(oi)
        for k, a in enumerate(axes):
            idx[a] = add(mul(oi[a], s[k]), mul(rk[k], d[k]))
        return idx

    attrs = {"kernel_size": tuple(kernel), "strides": tuple(s), "dilation": tuple(d),
             "pads": tuple(applied), "data": data,
             "data_pad": padded if padded is not data else None, "layout": layout,
             "spatial_axes": tuple(axes)}
    if mode == "max":
        return te.compute(out_shape, lambda *oi: te.max(padded[tuple(index(oi))], axis=rk),
                          name="pool_max", tag=tag.POOL_MAX, attrs=attrs)
    if mode == "lp":
        def term(oi: Sequence[Any]) -> Expr:
            v = cast(padded[tuple(index(oi))], acc)
            if p == 2:
                return v * v
            return tir.call("pow", tir.fabs(v), const(p, acc))

        sums = te.compute(out_shape, lambda *oi: te.sum(term(oi), axis=rk), name="pool_sum",
                          tag=tag.POOL_SUM, attrs=attrs)

        def lp_body(*oi: Any) -> Expr:
            v = sums[oi]
            root = tir.sqrt(v) if p == 2 else tir.call("pow", v, const(1.0 / p, acc))
            return cast(root, data.dtype)

        return te.compute(out_shape, lp_body, name="pool_lp", tag=tag.ELEMWISE)
    sums = te.compute(out_shape, lambda *oi: te.sum(cast(padded[tuple(index(oi))], acc), axis=rk),
                      name="pool_sum", tag=tag.POOL_SUM, attrs=attrs)

    def avg_body(*oi: Any) -> Expr:
        count: Expr | int = 1
        for k, a in enumerate(axes):
            if count_include_pad:
                lo, hi = 0, in_sp[k] + declared[k] + declared[k + n]
            else:
                lo, hi = declared[k], declared[k] + in_sp[k]
            # floor mode: the last window ends within the end pad, so within ``hi`` when
            # that pad counts (or there is none)
            within = not ceil_mode and (count_include_pad or declared[k + n] == 0)
            c = _window_count(oi[a], out_sp[k], kernel[k], s[k], d[k], lo, hi, within)
            count = c * count if isinstance(count, int) and isinstance(c, int) else count * c
        divisor = const(count, acc) if isinstance(count, int) else cast(count, acc)
        return cast(sums[oi] / divisor, data.dtype)

    return te.compute(out_shape, avg_body, name="pool_avg", tag=tag.POOL_AVG,
                      attrs={"count_include_pad": bool(count_include_pad)})


def global_pool(data: te.Tensor, mode: str = "max", p: int = 2,
                spatial_axes: Sequence[int] | None = None) -> te.Tensor:
    """Max, average or Lp over every spatial axis (kept as size 1)."""
    shape = dims_of(data)
    axes = list(spatial_axes) if spatial_axes is not None else list(range(2, len(shape)))
    if mode == "max":
        return reduction.max(data, axes, keepdims=True)
    if mode == "avg":
        return reduction.mean(data, axes, keepdims=True)
    acc = compute_dtype(data.dtype)

    def term(v: Expr, idx: list[Any]) -> Expr:
        return tir.call("pow", tir.fabs(v), const(p, acc))

    sums = reduction.reduce_compute(data, axes, True, "sum", term, acc, name="lp_sum")
    return te.compute(sums.shape,
                      lambda *i: cast(tir.call("pow", sums[i], const(1.0 / p, acc)), data.dtype),
                      name="global_lp_pool", tag=tag.ELEMWISE)


# -- graph ops ----------------------------------------------------------------------------------

def _max_pool_supports(node: Any) -> str | None:
    if len(node.outputs) > 1:
        return "the Indices output is not supported"
    if node.attrs.get("storage_order", 0):
        return "storage_order 1 is not supported"
    return None


def _window_attrs(attrs: dict) -> dict:
    return {"kernel": attrs["kernel_shape"], "strides": attrs["strides"], "pads": attrs["pads"],
            "dilation": attrs["dilations"], "ceil_mode": bool(attrs["ceil_mode"])}


@register_compute("MaxPool", supports=_max_pool_supports)
def _max_pool(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [pool(inputs[0], mode="max", **_window_attrs(attrs))]


@register_compute("AveragePool")
def _average_pool(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [pool(inputs[0], mode="avg", count_include_pad=bool(attrs["count_include_pad"]),
                 **_window_attrs(attrs))]


@register_compute("LpPool")
def _lp_pool(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [pool(inputs[0], mode="lp", p=attrs["p"], **_window_attrs(attrs))]


@register_compute("GlobalMaxPool")
def _global_max_pool(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [global_pool(inputs[0], "max")]


@register_compute("GlobalAveragePool")
def _global_average_pool(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [global_pool(inputs[0], "avg")]


@register_compute("GlobalLpPool")
def _global_lp_pool(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [global_pool(inputs[0], "lp", attrs["p"])]


def _pool_nchwc_supports(node: Any) -> str | None:
    if node.inputs[0].type.ndim != 5:
        return "input must be 5-D (N, C // c, H, W, c)"
    if node.attrs.get("mode", "max") not in ("max", "avg"):
        return f"mode {node.attrs.get('mode')!r} is not max or avg"
    return None


@register_compute("PoolNCHWc", supports=_pool_nchwc_supports)
def _pool_nchwc(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    x = inputs[0]
    mode = attrs.get("mode", "max")
    layout = f"NCHW{dims_of(x)[4]}c"
    if attrs.get("global_pool", 0):
        return [global_pool(x, mode, spatial_axes=[2, 3])]
    return [pool(x, attrs["kernel_shape"], attrs.get("strides"), attrs.get("pads"),
                 attrs.get("dilations"), mode, bool(attrs.get("ceil_mode", 0)),
                 bool(attrs.get("count_include_pad", 0)), spatial_axes=[2, 3], layout=layout)]


__all__ = ["global_pool", "pool"]
