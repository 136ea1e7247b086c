"""Normalizations: batch (inference), instance, layer, group, RMS, LRN, mean-variance, Lp.

Statistics are reductions (tag ``"reduce"``, keeping the reduced axes as size 1) followed by
small elementwise stages (``"elemwise,norm_mean"``, ``"elemwise,norm_var"``); the output is one
``"broadcast"`` stage (tag ``"broadcast,norm_output"``). As in the references the variance is
the mean of squared deviations from the mean (two passes), and float16 is computed in float32
(or in ``stash_type`` where the op has one).

Batch normalization in inference mode folds its four parameters into a per-channel scale and
shift (two tiny stages over the channels), so the output is one multiply-add per element.

Layer, RMS, instance and mean-variance normalization take shapes with run-time sizes
(:func:`~tessera.topi.utils.dims_of`): a symbolic number of rows, and a normalized axis of
constant or run-time length (its element count is then computed at run time).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tessera import te, tir
from tessera.topi import tag
from tessera.topi.reduction import kept_index, reduce_compute
from tessera.topi.registry import register_compute
from tessera.topi.utils import (
    broadcast_read,
    cast,
    clamp,
    compute_dtype,
    const,
    dim_prod,
    dims_of,
    normalize_axis,
    prod,
    read,
    shape_of,
)

Expr = tir.PrimExpr
OUTPUT = "broadcast,norm_output"


def _stage(shape: Sequence[Any], fn: Any, name: str, kind: str = tag.ELEMWISE) -> te.Tensor:
    return te.compute(shape, fn, name=name, tag=kind)


def _per_element(v: Expr, count: Any) -> Expr:
    """``v / count`` for a static count (a Python number) or a run-time one (an index
    expression, converted to ``v``'s type)."""
    if isinstance(count, tir.PrimExpr):
        return v / cast(count, v.dtype)
    return v / float(count)


def moments(x: te.Tensor, axes: Sequence[int], acc: str) -> tuple[te.Tensor, te.Tensor]:
    """(mean, variance) of ``x`` over ``axes`` in ``acc``, both keeping the reduced axes."""
    n = dim_prod([dims_of(x)[a] for a in axes])
    count: Any = float(n) if isinstance(n, int) else n
    s1 = reduce_compute(x, axes, True, "sum", acc_dtype=acc, name="sum")
    mean = _stage(s1.shape, lambda *i: _per_element(s1[i], count), "mean", "elemwise,norm_mean")

    def sq(v: Expr, idx: list[Any]) -> Expr:
        d = v - mean[tuple(kept_index(idx, axes))]
        return d * d

    s2 = reduce_compute(x, axes, True, "sum", sq, acc, name="sum_sq")
    var = _stage(s2.shape, lambda *i: _per_element(s2[i], count), "var", "elemwise,norm_var")
    return mean, var


def _channel(p: te.Tensor, idx: Sequence[Any], acc: str) -> Expr:
    """A per-channel parameter (C,) read for point ``idx`` of an (N, C, ...) tensor."""
    return cast(read(p, [idx[1]]), acc)


def batch_norm(x: te.Tensor, scale: te.Tensor, bias: te.Tensor, mean: te.Tensor,
               var: te.Tensor, epsilon: float = 1e-5) -> te.Tensor:
    """Inference batch normalization ``x * a + (bias - mean * a)``, ``a = scale / sqrt(var +
    epsilon)``; parameters (C,) per channel or (C, D1, ...) per activation."""
    acc = compute_dtype(x.dtype)
    pshape = shape_of(scale)

    def param(p: te.Tensor, i: Sequence[Any]) -> Expr:
        return cast(read(p, i), acc)

    a = _stage(pshape, lambda *i: param(scale, i) / tir.sqrt(param(var, i) + epsilon),
               "bn_scale")
    shift = _stage(pshape, lambda *i: param(bias, i) - param(mean, i) * a[i], "bn_shift")

    def body(*i: Any) -> Expr:
        if len(pshape) <= 1:
            pi: list[Any] = [i[1]]
        else:
            pi = [i[1 + k] for k in range(len(pshape))]
        return cast(cast(x[i], acc) * a[tuple(pi)] + shift[tuple(pi)], x.dtype)

    return _stage(x.shape, body, "batch_norm", OUTPUT)


def instance_norm(x: te.Tensor, scale: te.Tensor, bias: te.Tensor,
                  epsilon: float = 1e-5) -> te.Tensor:
    """Normalize each (sample, channel) over its spatial axes, then scale and shift."""
    acc = compute_dtype(x.dtype)
    axes = list(range(2, x.ndim))
    mean, var = moments(x, axes, acc)

    def body(*i: Any) -> Expr:
        k = tuple(kept_index(i, axes))
        y = (cast(x[i], acc) - mean[k]) / tir.sqrt(var[k] + epsilon)
        return cast(y * _channel(scale, i, acc) + _channel(bias, i, acc), x.dtype)

    return _stage(x.shape, body, "instance_norm", OUTPUT)


def layer_norm(x: te.Tensor, scale: te.Tensor, bias: te.Tensor | None = None, axis: int = -1,
               epsilon: float = 1e-5, stash_dtype: str = "float32"
               ) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    """Normalize over axes ``[axis, rank)``; returns ``(y, mean, inv_std_dev)`` (the statistics
    in ``stash_dtype``, keeping the normalized axes as size 1)."""
    acc = compute_dtype(stash_dtype) if stash_dtype.startswith("float") else \
        compute_dtype(x.dtype)
    a = normalize_axis(axis, x.ndim)
    axes = list(range(a, x.ndim))
    mean, var = moments(x, axes, acc)
    inv = _stage(var.shape, lambda *i: 1.0 / tir.sqrt(var[i] + epsilon), "inv_std",
                 "elemwise,norm_inv_std")

    def body(*i: Any) -> Expr:
        k = tuple(kept_index(i, axes))
        y = (cast(x[i], acc) - mean[k]) * inv[k] * cast(broadcast_read(scale, i), acc)
        if bias is not None:
            y = y + cast(broadcast_read(bias, i), acc)
        return cast(y, x.dtype)

    y = _stage(x.shape, body, "layer_norm", OUTPUT)
    mean_out = _stage(mean.shape, lambda *i: cast(mean[i], stash_dtype), "mean_out")
    inv_out = _stage(inv.shape, lambda *i: cast(inv[i], stash_dtype), "inv_std_out")
    return y, mean_out, inv_out


def group_norm(x: te.Tensor, scale: te.Tensor, bias: te.Tensor, num_groups: int,
               epsilon: float = 1e-5, stash_dtype: str = "float32") -> te.Tensor:
    """Normalize each group of channels of each sample; ``scale``/``bias`` per channel (or per
    group, repeated over its channels)."""
    acc = compute_dtype(stash_dtype)
    shape = shape_of(x)
    n, c = shape[:2]
    sp = shape[2:]
    cg = c // num_groups
    count = float(cg * prod(sp))
    rc = te.reduce_axis((0, cg), name="rc")
    rs = [te.reduce_axis((0, d), name=f"rs{k}") for k, d in enumerate(sp)]

    def point(b: Any, g: Any) -> tuple:
        return (b, g * cg + rc, *rs)

    s1 = te.compute((n, num_groups), lambda b, g: te.sum(cast(x[point(b, g)], acc),
                                                         axis=[rc, *rs]),
                    name="sum", tag=tag.REDUCE)
    mean = _stage((n, num_groups), lambda b, g: s1[b, g] / count, "mean", "elemwise,norm_mean")
    rc2 = te.reduce_axis((0, cg), name="rc")
    rs2 = [te.reduce_axis((0, d), name=f"rs{k}") for k, d in enumerate(sp)]

    def dev(b: Any, g: Any) -> Expr:
        v = cast(x[(b, g * cg + rc2, *rs2)], acc) - mean[b, g]
        return te.sum(v * v, axis=[rc2, *rs2])

    s2 = te.compute((n, num_groups), dev, name="sum_sq", tag=tag.REDUCE)
    var = _stage((n, num_groups), lambda b, g: s2[b, g] / count, "var", "elemwise,norm_var")
    per_group = shape_of(scale)[0] != c

    def param(p: te.Tensor, ch: Any) -> Expr:
        return cast(read(p, [ch // cg if per_group else ch]), acc)

    def body(*i: Any) -> Expr:
        g = i[1] // cg
        y = (cast(x[i], acc) - mean[i[0], g]) / tir.sqrt(var[i[0], g] + epsilon)
        return cast(y * param(scale, i[1]) + param(bias, i[1]), x.dtype)

    return _stage(x.shape, body, "group_norm", OUTPUT)


def rms_norm(x: te.Tensor, scale: te.Tensor, axis: int = -1, epsilon: float = 1e-5,
             stash_dtype: str = "float32") -> te.Tensor:
    """``x / sqrt(mean(x^2 over [axis, rank)) + epsilon) * scale``."""
    acc = compute_dtype(stash_dtype)
    a = normalize_axis(axis, x.ndim)
    axes = list(range(a, x.ndim))
    n = dim_prod(dims_of(x)[a:])
    count: Any = float(n) if isinstance(n, int) else n
    s = reduce_compute(x, axes, True, "sum", lambda v, idx: v * v, acc, name="sum_sq")
    ms = _stage(s.shape, lambda *i: _per_element(s[i], count), "mean_sq", "elemwise,norm_mean")

    def body(*i: Any) -> Expr:
        k = tuple(kept_index(i, axes))
        y = cast(x[i], acc) / tir.sqrt(ms[k] + epsilon) * cast(broadcast_read(scale, i), acc)
        return cast(y, x.dtype)

    return _stage(x.shape, body, "rms_norm", OUTPUT)


def lrn(x: te.Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75,
        bias: float = 1.0) -> te.Tensor:
    """Local response normalization across channels:
    ``x / (bias + alpha / size * sum of x^2 over the channel window) ^ beta``."""
    acc = compute_dtype(x.dtype)
    c = shape_of(x)[1]
    lo = (size - 1) // 2
    k = te.reduce_axis((0, size), name="k")

    def window(*i: Any) -> Expr:
        ch = i[1] + k - lo
        v = cast(x[(i[0], clamp(ch, 0, c - 1), *i[2:])], acc)
        return te.sum(v * v, axis=k, where=tir.all_of(ch >= 0, ch < c))

    s = te.compute(x.shape, window, name="lrn_sum", tag=tag.REDUCE,
                   attrs={"size": size})

    def body(*i: Any) -> Expr:
        base = const(bias, acc) + const(alpha / size, acc) * s[i]
        if bias > 0 and alpha >= 0:
            # the base is positive: x * base^-beta as exp(-beta * log(base)), which vectorizes
            # (a pow call is a libm call per element)
            return cast(cast(x[i], acc) * tir.exp(tir.log(base) * const(-beta, acc)), x.dtype)
        return cast(cast(x[i], acc) / tir.call("pow", base, const(beta, acc)), x.dtype)

    return _stage(x.shape, body, "lrn", tag.ELEMWISE)


def mean_variance_norm(x: te.Tensor, axes: Sequence[int]) -> te.Tensor:
    """``(x - E[x]) / (sqrt(Var[x]) + 1e-9)`` over ``axes``: ONNX's ``E[x^2] - E[x]^2``,
    computed as ``E[(x - E[x])^2]`` (two passes, :func:`moments`), which does not cancel
    catastrophically when the values are close together."""
    acc = compute_dtype(x.dtype)
    ax = sorted({normalize_axis(a, x.ndim) for a in axes})
    mean, var = moments(x, ax, acc)

    def body(*i: Any) -> Expr:
        k = tuple(kept_index(i, ax))
        y = (cast(x[i], acc) - mean[k]) / (tir.sqrt(var[k]) + 1e-9)
        return cast(y, x.dtype)

    return _stage(x.shape, body, "mean_variance_norm", OUTPUT)


def lp_norm(x: te.Tensor, axis: int = -1, p: int = 2) -> te.Tensor:
    """``x / ||x||_p`` along ``axis`` (p 1 or 2); 0 where the norm is 0."""
    acc = compute_dtype(x.dtype)
    a = normalize_axis(axis, x.ndim)
    if p == 1:
        s = reduce_compute(x, [a], True, "sum", lambda v, idx: tir.fabs(v), acc, name="norm")
        norm = s
    else:
        s = reduce_compute(x, [a], True, "sum", lambda v, idx: v * v, acc, name="sum_sq")
        norm = _stage(s.shape, lambda *i: tir.sqrt(s[i]), "norm")

    def body(*i: Any) -> Expr:
        nv = norm[tuple(kept_index(i, [a]))]
        zero = tir.eq(nv, 0.0)
        y = tir.select(zero, const(0, acc), cast(x[i], acc) / tir.select(zero, const(1, acc), nv))
        return cast(y, x.dtype)

    return _stage(x.shape, body, "lp_norm", OUTPUT)


# -- graph ops ----------------------------------------------------------------------------------

def _bn_supports(node: Any) -> str | None:
    if node.attrs.get("training_mode", 0):
        return "training mode is not supported (inference only)"
    return None


@register_compute("BatchNormalization", supports=_bn_supports)
def _batch_norm(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [batch_norm(*inputs[:5], epsilon=attrs["epsilon"])]


@register_compute("InstanceNormalization")
def _instance_norm(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [instance_norm(*inputs[:3], epsilon=attrs["epsilon"])]


def _stash(attrs: dict, x: te.Tensor) -> str:
    st = attrs.get("stash_type")
    return st.value if st is not None else x.dtype


@register_compute("LayerNormalization")
def _layer_norm(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    x, scale = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    outs = layer_norm(x, scale, b, attrs["axis"], attrs["epsilon"], _stash(attrs, x))
    return list(outs[:len(out_types)])


@register_compute("GroupNormalization")
def _group_norm(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    x = inputs[0]
    return [group_norm(x, inputs[1], inputs[2], attrs["num_groups"], attrs["epsilon"],
                       _stash(attrs, x))]


@register_compute("RMSNormalization")
def _rms_norm(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    x = inputs[0]
    return [rms_norm(x, inputs[1], attrs["axis"], attrs["epsilon"], _stash(attrs, x))]


@register_compute("LRN")
def _lrn(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [lrn(inputs[0], attrs["size"], attrs["alpha"], attrs["beta"], attrs["bias"])]


@register_compute("MeanVarianceNormalization")
def _mvn(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [mean_variance_norm(inputs[0], attrs["axes"])]


@register_compute("LpNormalization")
def _lp_norm(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [lp_norm(inputs[0], attrs["axis"], attrs["p"])]


__all__ = ["batch_norm", "group_norm", "instance_norm", "layer_norm", "lp_norm", "lrn",
           "mean_variance_norm", "moments", "rms_norm"]
