"""Matrix products: ``dense``, ``matmul``, ``batch_matmul`` and numpy-style ``MatMul``/``Gemm``.

Each product is one compute with a single reduce axis ``k`` over the inner dimension; the body
is ``cast(a) * cast(b)`` summed in ``out_dtype`` (float32 for float16 inputs in the graph
bindings; integers accumulate in their own type). Tags: ``"dense"`` (data (M, K), weight
(N, K)), ``"matmul"`` (2-D, transpose flags in attrs), ``"batch_matmul"`` (leading batch
dimensions broadcast like numpy) and ``"matvec"`` (numpy ``matmul`` with a 1-D operand, whose
output lacks a row or a column axis). Attrs: ``transpose_a``, ``transpose_b``, ``out_dtype``,
``a``/``b`` (the operand tensors). Bias and ``Gemm``'s ``alpha``/``beta``/``C`` epilogue are a
following ``"broadcast"`` stage.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tessera import te, tir
from tessera.ops.linalg import _einsum_parse
from tessera.topi import tag
from tessera.topi.registry import register_compute
from tessera.topi.utils import (
    Dim,
    broadcast_index,
    broadcast_read,
    broadcast_shape,
    cast,
    compute_dtype,
    dim_equal,
    dims_of,
    is_float,
    named_axes,
    read,
    shape_of,
)

Expr = tir.PrimExpr
Term = Callable[[Expr, Any], Expr]


def matmul_general(a: te.Tensor, b: te.Tensor, transpose_a: bool = False,
                   transpose_b: bool = False, out_dtype: str | None = None,
                   a_term: Term | None = None, b_term: Term | None = None,
                   name: str = "matmul", kind: str | None = None) -> te.Tensor:
    """numpy ``matmul`` of ``op(a)`` and ``op(b)`` (``op`` transposes the last two axes when
    its flag is set): 1-D operands are promoted and their axis dropped from the result, batch
    axes broadcast. ``a_term(value, row)`` / ``b_term(value, col)`` rewrite each operand
    element after its cast (zero-point subtraction). Any dimension may be a run-time size
    (an index expression, :func:`dims_of`): the rows, the columns, the inner dimension (a
    reduction of run-time length) and the batch axes; the inner dimensions must then be the
    same expression."""
    ashape, bshape = dims_of(a), dims_of(b)
    a_vec, b_vec = len(ashape) == 1, len(bshape) == 1
    am = (1, ashape[0]) if a_vec else ashape
    bm = (bshape[0], 1) if b_vec else bshape
    ta, tb = transpose_a and not a_vec, transpose_b and not b_vec
    m, ka = (am[-1], am[-2]) if ta else (am[-2], am[-1])
    kb, n = (bm[-1], bm[-2]) if tb else (bm[-2], bm[-1])
    if not dim_equal(ka, kb):
        raise ValueError(f"matmul: inner dimensions differ: {list(ashape)} and {list(bshape)}")
    batch = broadcast_shape(am[:-2], bm[:-2])
    nb = len(batch)
    out_shape: list[Dim] = [*batch] + ([] if a_vec else [m]) + ([] if b_vec else [n])
    acc = out_dtype or a.dtype
    k = te.reduce_axis((0, ka), name="k")

    def body(*oi: Any) -> Expr:
        bidx = list(oi[:nb])
        rest = list(oi[nb:])
        i = 0 if a_vec else rest[0]
        j = 0 if b_vec else rest[-1]
        if a_vec:
            a_idx: list[Any] = [k]
        else:
            a_idx = broadcast_index(am[:-2], bidx) + ([k, i] if ta else [i, k])
        if b_vec:
            b_idx: list[Any] = [k]
        else:
            b_idx = broadcast_index(bm[:-2], bidx) + ([j, k] if tb else [k, j])
        av = cast(read(a, a_idx), acc)
        bv = cast(read(b, b_idx), acc)
        if a_term is not None:
            av = a_term(av, i)
        if b_term is not None:
            bv = b_term(bv, j)
        return te.sum(av * bv, axis=k)

    if kind is None:
        if a_vec or b_vec:
            kind = tag.MATVEC
        else:
            kind = tag.BATCH_MATMUL if nb else tag.MATMUL
    attrs = {"transpose_a": ta, "transpose_b": tb, "out_dtype": acc, "a": a, "b": b}
    axis_names = [f"b{k}" for k in range(nb)] + ([] if a_vec else ["i"]) + \
        ([] if b_vec else ["j"])
    return te.compute(out_shape, named_axes(body, axis_names), name=name, tag=kind, attrs=attrs)


def dense(data: te.Tensor, weight: te.Tensor, bias: te.Tensor | None = None,
          out_dtype: str | None = None) -> te.Tensor:
    """``data (M, K) x weight (N, K)^T`` (+ ``bias (N,)`` in a following stage)."""
    y = matmul_general(data, weight, False, True, out_dtype, name="dense", kind=tag.DENSE)
    if bias is None:
        return y
    return te.compute(y.shape, lambda i, j: y[i, j] + cast(read(bias, [j]), y.dtype),
                      name="dense_bias", tag=tag.BROADCAST)


def matmul(a: te.Tensor, b: te.Tensor, transpose_a: bool = False, transpose_b: bool = False,
           out_dtype: str | None = None) -> te.Tensor:
    """2-D ``op(a) x op(b)``; tag ``"matmul"``."""
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("matmul takes 2-D operands; use batch_matmul")
    return matmul_general(a, b, transpose_a, transpose_b, out_dtype)


def batch_matmul(a: te.Tensor, b: te.Tensor, transpose_a: bool = False,
                 transpose_b: bool = False, out_dtype: str | None = None) -> te.Tensor:
    """``op(a) x op(b)`` over broadcast batch dimensions; tag ``"batch_matmul"``."""
    return matmul_general(a, b, transpose_a, transpose_b, out_dtype, name="batch_matmul",
                          kind=tag.BATCH_MATMUL)


def _cast_stage(x: te.Tensor, dtype: str) -> te.Tensor:
    if x.dtype == dtype:
        return x
    return te.compute(x.shape, lambda *i: cast(x[i], dtype), name="matmul_cast",
                      tag=tag.ELEMWISE)


def einsum(equation: str, *operands: te.Tensor, out_dtype: str | None = None) -> te.Tensor:
    """Einstein summation: one compute whose data axes are the output letters and whose reduce
    axes are the summed letters (tag ``"reduce,einsum"``, or ``"injective,einsum"`` when
    nothing is summed). Size-1 operand dimensions broadcast. Accumulates in ``out_dtype``
    (default: the first operand's compute dtype) and returns that dtype."""
    shapes = [shape_of(t) for t in operands]
    _, terms, out = _einsum_parse(equation, shapes)
    sizes: dict[str, int] = {}
    for term, shape in zip(terms, shapes):
        for ch, dim in zip(term, shape):
            if ch not in sizes or sizes[ch] == 1:
                sizes[ch] = dim
    acc = out_dtype or compute_dtype(operands[0].dtype)
    summed = sorted({ch for term in terms for ch in term} - set(out))
    raxes = {ch: te.reduce_axis((0, sizes[ch]), name=f"r{ch}") for ch in summed}

    def body(*oi: Any) -> Expr:
        var: dict[str, Any] = dict(zip(out, oi))
        var.update(raxes)
        value: Expr | None = None
        for t, term, shape in zip(operands, terms, shapes):
            idx = [0 if dim == 1 and sizes[ch] != 1 else var[ch] for ch, dim in zip(term, shape)]
            v = cast(read(t, idx), acc)
            value = v if value is None else value * v
        assert value is not None
        if not summed:
            return value
        return te.sum(value, axis=[raxes[ch] for ch in summed])

    kind = "reduce,einsum" if summed else "injective,einsum"
    return te.compute([sizes[ch] for ch in out], named_axes(body, list(out)), name="einsum",
                      tag=kind, attrs={"equation": equation})


# -- graph ops ----------------------------------------------------------------------------------

@register_compute("MatMul")
def _matmul(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    a, b = inputs
    y = matmul_general(a, b, out_dtype=compute_dtype(a.dtype))
    return [_cast_stage(y, out_types[0].dtype.value)]


def _gemm_supports(node: Any) -> str | None:
    a = node.inputs[0].type
    if not a.dtype.is_float and (node.attrs.get("alpha", 1.0) != 1.0
                                 or node.attrs.get("beta", 1.0) not in (0.0, 1.0)):
        return "integer Gemm with alpha or beta other than 1 is not supported"
    return None


@register_compute("Gemm", supports=_gemm_supports)
def _gemm(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    alpha, beta = attrs["alpha"], attrs["beta"]
    ta, tb = bool(attrs["transA"]), bool(attrs["transB"])
    acc = compute_dtype(a.dtype)
    out = out_types[0].dtype.value
    if not ta and tb:
        y = matmul_general(a, b, False, True, acc, name="dense", kind=tag.DENSE)
    else:
        y = matmul_general(a, b, ta, tb, acc)
    use_c = c is not None and beta != 0.0
    if alpha == 1.0 and not use_c:
        return [_cast_stage(y, out)]

    def body(i: Any, j: Any) -> Expr:
        v = y[i, j]
        if alpha != 1.0 and is_float(acc):
            v = v * alpha
        if use_c:
            assert c is not None
            cv = cast(broadcast_read(c, [i, j]), acc)
            if beta != 1.0:
                cv = cv * beta
            v = v + cv
        return cast(v, out)

    return [te.compute(y.shape, body, name="gemm_epilogue", tag=tag.BROADCAST)]


@register_compute("Einsum")
def _einsum(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    y = einsum(attrs["equation"], *inputs)
    return [_cast_stage(y, out_types[0].dtype.value)]


__all__ = ["batch_matmul", "dense", "einsum", "matmul", "matmul_general", "matmul_packed"]


def matmul_packed(a: te.Tensor, bp: te.Tensor, out_dtype: str | None = None) -> te.Tensor:
    """``A (..., M, K) x B`` with ``B`` as column panels ``bp (N // nb, K, nb)``: the column
    ``j`` of B is ``bp[j // nb, :, j % nb]``; tag ``"dense"`` (``"batch_matmul"`` with batch
    axes). The rows and batch axes of ``a`` may be run-time sizes (:func:`dims_of`); the
    panels are a constant, so ``K`` and ``N`` are static."""
    ashape, (panels, kdim, nb) = dims_of(a), shape_of(bp)
    if not dim_equal(ashape[-1], kdim):
        raise ValueError(f"matmul_packed: inner dimensions differ: {list(ashape)} and "
                         f"{[panels, kdim, nb]}")
    acc = out_dtype or compute_dtype(a.dtype)
    nbatch = len(ashape) - 2
    k = te.reduce_axis((0, kdim), name="k")

    def body(*oi: Any) -> Expr:
        *bidx, i, j = oi
        av = cast(a[(*bidx, i, k)], acc)
        bv = cast(bp[j // nb, k, j % nb], acc)
        return te.sum(av * bv, axis=k)

    names = [f"b{d}" for d in range(nbatch)] + ["i", "j"]
    return te.compute((*ashape[:-1], panels * nb), named_axes(body, names), name="dense_packed",
                      tag=tag.BATCH_MATMUL if nbatch else tag.DENSE,
                      attrs={"out_dtype": acc, "a": a, "b": bp, "panel": nb})


@register_compute("MatMulPacked")
def _matmul_packed(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    a, bp = inputs
    y = matmul_packed(a, bp, compute_dtype(a.dtype))
    return [_cast_stage(y, out_types[0].dtype.value)]
