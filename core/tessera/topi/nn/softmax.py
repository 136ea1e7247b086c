"""Softmax, log-softmax and hardmax along one axis.

Numerically stable, in four stages like the reference: the maximum along the axis (tag
``"reduce,softmax_max"``), ``exp(x - max)`` (``"elemwise,softmax_exp"``), the sum of those
(``"reduce,softmax_sum"``), and the normalization (``"softmax_output"``; log-softmax:
``x - max - log(sum)``, ``"log_softmax_output"``). The statistics keep the reduced axis as size
1. Attrs: ``axis``. Computed in the input's type, float16 included, as the references do.
"""

from __future__ import annotations

from typing import Any

from tessera import te, tir
from tessera.topi import reduction
from tessera.topi.registry import register_compute
from tessera.topi.utils import const, normalize_axis, shape_of

Expr = tir.PrimExpr


def _stats(x: te.Tensor, a: int) -> tuple[te.Tensor, te.Tensor, Any]:
    shape = shape_of(x)
    k1 = te.reduce_axis((0, shape[a]), name="k")

    def at(idx: Any, value: Any) -> tuple:
        full = list(idx)
        full[a] = value
        return tuple(full)

    mx = te.compute([1 if d == a else n for d, n in enumerate(shape)],
                    lambda *i: te.max(x[at(i, k1)], axis=k1), name="softmax_max",
                    tag="reduce,softmax_max", attrs={"axis": a})
    e = te.compute(shape, lambda *i: tir.exp(x[i] - mx[at(i, 0)]), name="softmax_exp",
                   tag="elemwise,softmax_exp", attrs={"axis": a})
    k2 = te.reduce_axis((0, shape[a]), name="k")
    s = te.compute(mx.shape, lambda *i: te.sum(e[at(i, k2)], axis=k2), name="softmax_sum",
                   tag="reduce,softmax_sum", attrs={"axis": a})
    return mx, e, (s, at)


def softmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``."""
    a = normalize_axis(axis, x.ndim)
    _, e, (s, at) = _stats(x, a)
    return te.compute(x.shape, lambda *i: e[i] / s[at(i, 0)], name="softmax",
                      tag="softmax_output", attrs={"axis": a})


def log_softmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    """``(x - max) - log(sum(exp(x - max)))`` along ``axis``."""
    a = normalize_axis(axis, x.ndim)
    mx, _, (s, at) = _stats(x, a)
    return te.compute(x.shape, lambda *i: (x[i] - mx[at(i, 0)]) - tir.log(s[at(i, 0)]),
                      name="log_softmax", tag="log_softmax_output", attrs={"axis": a})


def hardmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    """1 at the first maximum along ``axis``, 0 elsewhere."""
    a = normalize_axis(axis, x.ndim)
    idx = reduction.argmax(x, a, keepdims=True)
    return te.compute(x.shape, lambda *i: tir.select(
        tir.eq(idx[tuple(0 if d == a else v for d, v in enumerate(i))], i[a]),
        const(1, x.dtype), const(0, x.dtype)), name="hardmax", tag="injective")


@register_compute("Softmax")
def _softmax(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [softmax(inputs[0], attrs["axis"])]


@register_compute("LogSoftmax")
def _log_softmax(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [log_softmax(inputs[0], attrs["axis"])]


@register_compute("Hardmax")
def _hardmax(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [hardmax(inputs[0], attrs["axis"])]


__all__ = ["hardmax", "log_softmax", "softmax"]
