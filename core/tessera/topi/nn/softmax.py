"""Softmax, log-softmax and hardmax along one axis.

Numerically stable, in four stages like the reference: the maximum along the axis (tag
``"reduce,softmax_max"``), ``exp(x - max)`` (``"elemwise,softmax_exp"``), the sum of those
(``"reduce,softmax_sum"``), and the normalization (``"softmax_output"``; log-softmax:
``x - max - log(sum)``, ``"log_softmax_output"``). The statistics keep the reduced axis as size
1. Attrs: ``axis``. Computed in the input's type, float16 included, as the references do.

Shapes may hold run-time sizes (:func:`~tessera.topi.utils.dims_of`): a symbolic number of
rows, and a softmax axis of constant or run-time length. In the row form a run-time length
``n`` gives ``n // lanes`` whole chunks and a tail of ``n % lanes`` (both run-time).
"""

from __future__ import annotations

from typing import Any

from tessera import te, tir
from tessera.topi import reduction
from tessera.topi.registry import register_compute
from tessera.topi.utils import const, dims_of, normalize_axis

Expr = tir.PrimExpr


def _stats(x: te.Tensor, a: int, lanes: int = 0) -> tuple[te.Tensor, te.Tensor, Any]:
    shape = dims_of(x)
    if lanes and a == len(shape) - 1:
        return _row_stats(x, a, lanes)
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


def _row_stats(x: te.Tensor, a: int, lanes: int) -> tuple[te.Tensor, te.Tensor, Any]:
    """The statistics along the last (contiguous) axis, each reduced in two steps so that a
    schedule can run the long one as vectors: ``lanes`` partial results per row, lane ``j``
    over the elements ``j, j + lanes, ...`` of the row's whole chunks of ``lanes``
    (``"reduce,softmax_max_lanes"``, ``"reduce,softmax_sum_lanes"``: contiguous loads, no
    condition), then the lanes and the row's last ``length % lanes`` elements combined
    (``"reduce,softmax_max"``, ``"reduce,softmax_sum"``). The sum adds in another order than
    :func:`_stats`'s (float rounding only)."""
    shape = dims_of(x)
    rows, length = tuple(shape[:-1]), shape[-1]
    if isinstance(length, int):
        full: Any = length // lanes
        tail: Any = length - full * lanes
    else:  # run-time: whole chunks and a tail both known at run time only
        full = length // lanes
        tail = length % lanes

    def at(idx: Any, value: Any) -> tuple:
        return (*idx[:-1], value)

    def combined(part: te.Tensor, t: te.Tensor, row: tuple, r: Any) -> Expr:
        """Reduction index ``r`` of a combine: lane ``r``, then the tail's elements."""
        if isinstance(tail, int) and not tail:
            return part[(*row, r)]
        pos = full * lanes + tir.max_(r - lanes, 0)
        if not isinstance(tail, int):  # the tail may be empty: the branch not taken stays in
            pos = tir.min_(pos, length - 1)  # the row (the loop partition drops the min)
        return tir.select(r < lanes, part[(*row, tir.min_(r, lanes - 1))], t[(*row, pos)])

    k1 = te.reduce_axis((0, full), name="ko")
    mxl = te.compute((*rows, lanes), lambda *i: te.max(x[(*i[:-1], k1 * lanes + i[-1])], axis=k1),
                     name="softmax_max_lanes", tag="reduce,softmax_max_lanes", attrs={"axis": a})
    j1 = te.reduce_axis((0, tail + lanes), name="j")
    mx = te.compute((*rows, 1), lambda *i: te.max(combined(mxl, x, i[:-1], j1), axis=j1),
                    name="softmax_max", tag="reduce,softmax_max", attrs={"axis": a})
    e = te.compute(shape, lambda *i: tir.exp(x[i] - mx[at(i, 0)]), name="softmax_exp",
                   tag="elemwise,softmax_exp", attrs={"axis": a})
    k2 = te.reduce_axis((0, full), name="ko")
    sl = te.compute((*rows, lanes), lambda *i: te.sum(e[(*i[:-1], k2 * lanes + i[-1])], axis=k2),
                    name="softmax_sum_lanes", tag="reduce,softmax_sum_lanes", attrs={"axis": a})
    j2 = te.reduce_axis((0, tail + lanes), name="j")
    s = te.compute((*rows, 1), lambda *i: te.sum(combined(sl, e, i[:-1], j2), axis=j2),
                   name="softmax_sum", tag="reduce,softmax_sum", attrs={"axis": a})
    return mx, e, (s, at)


def softmax(x: te.Tensor, axis: int = -1, lanes: int = 0) -> te.Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``; ``lanes`` (along the last axis
    only): its statistics in two steps, ``lanes`` partial results per row first
    (:func:`_row_stats`)."""
    a = normalize_axis(axis, x.ndim)
    _, e, (s, at) = _stats(x, a, lanes)
    if lanes and a == x.ndim - 1:
        # one division per row, then a product per element (a vector division costs several
        # products); within an ulp or so of dividing each element
        r = te.compute(s.shape, lambda *i: const(1, x.dtype) / s[i], name="softmax_rsum",
                       tag="elemwise,softmax_rsum", attrs={"axis": a})
        return te.compute(x.shape, lambda *i: e[i] * r[at(i, 0)], name="softmax",
                          tag="softmax_output", attrs={"axis": a})
    return te.compute(x.shape, lambda *i: e[i] / s[at(i, 0)], name="softmax",
                      tag="softmax_output", attrs={"axis": a})


def log_softmax(x: te.Tensor, axis: int = -1, lanes: int = 0) -> te.Tensor:
    """``(x - max) - log(sum(exp(x - max)))`` along ``axis`` (``lanes`` as for
    :func:`softmax`)."""
    a = normalize_axis(axis, x.ndim)
    mx, _, (s, at) = _stats(x, a, lanes)
    return te.compute(x.shape, lambda *i: (x[i] - mx[at(i, 0)]) - tir.log(s[at(i, 0)]),
                      name="log_softmax", tag="log_softmax_output", attrs={"axis": a})


def row_softmax_computes(lanes: int, shortest: int) -> dict[str, Any]:
    """A backend's computes (``build_te(computes=...)``) of ``Softmax`` and ``LogSoftmax``
    along a last axis of at least ``shortest`` float elements (or of run-time length) in the
    two-step row form with ``lanes`` partial results (vectorisable reductions); None, the
    registry's form, for the others."""

    def make(fn: Any) -> Any:
        def compute(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor] | None:
            x = inputs[0]
            a = normalize_axis(attrs["axis"], x.ndim)
            length = dims_of(x)[a]
            if a != x.ndim - 1 or (isinstance(length, int) and length < shortest) or \
                    not str(x.dtype).startswith("float"):
                return None
            return [fn(x, a, lanes)]
        return compute

    return {"Softmax": make(softmax), "LogSoftmax": make(log_softmax)}


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


__all__ = ["hardmax", "log_softmax", "row_softmax_computes", "softmax"]
