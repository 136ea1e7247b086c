"""Ops: linear algebra: ``MatMul``, ``Gemm``, ``Einsum`` and ``Det``.

float16 inputs are computed in float32 and cast back (Det: in float32 or float64); integer
matrix products stay integers.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import TensorType
from tessera.ops.dtypes import compute_dtype, float_compute_dtype
from tessera.ops.registry import Attr, OpPattern, register_op

FUSABLE = OpPattern.OUT_ELEMWISE_FUSABLE
OPAQUE = OpPattern.OPAQUE


# -- matrix products -----------------------------------------------------------------------------

def matmul_shape(a: Sequence[int], b: Sequence[int], op: str = "MatMul") -> tuple[int, ...]:
    """numpy.matmul's output shape, with an error naming both shapes."""
    if not a or not b:
        raise OpError(f"{op}: operands must have rank >= 1, got {list(a)} and {list(b)}")
    a2 = (1, a[0]) if len(a) == 1 else tuple(a)
    b2 = (b[0], 1) if len(b) == 1 else tuple(b)
    if a2[-1] != b2[-2]:
        raise OpError(f"{op}: inner dimensions differ: {list(a)} @ {list(b)}")
    try:
        batch = np.broadcast_shapes(a2[:-2], b2[:-2])
    except ValueError:
        raise OpError(f"{op}: batch dimensions of {list(a)} and {list(b)} do not "
                      f"broadcast") from None
    out = (*batch, a2[-2], b2[-1])
    if len(b) == 1:
        out = out[:-1]
    if len(a) == 1:
        out = out[:-2] + out[-1:] if len(b) != 1 else out[:-1]
    return tuple(out)


def _matmul_infer(a: TensorType, b: TensorType) -> TensorType:
    if a.dtype != b.dtype:
        raise OpError(f"MatMul: operand dtypes differ: {a} and {b}")
    return TensorType(matmul_shape(a.shape, b.shape), a.dtype)


def _matmul_compute(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ct = compute_dtype(a.dtype)
    return np.matmul(a.astype(ct, copy=False), b.astype(ct, copy=False))


@register_op("MatMul", inputs=2, infer=_matmul_infer, pattern=FUSABLE)
def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy.matmul semantics (batch broadcasting, 1-D operands promoted and squeezed)."""
    return np.asarray(_matmul_compute(a, b)).astype(a.dtype, copy=False)


def _gemm_infer(a: TensorType, b: TensorType, c: TensorType | None = None, *, alpha: float,
                beta: float, transA: int, transB: int) -> TensorType:
    op = "Gemm"
    if a.ndim != 2 or b.ndim != 2:
        raise OpError(f"{op}: A and B must be matrices, got {a} and {b}")
    m, k = a.shape[::-1] if transA else a.shape
    k2, n = b.shape[::-1] if transB else b.shape
    if k != k2:
        raise OpError(f"{op}: inner dimensions differ: A {a} (transA={transA}), B {b} "
                      f"(transB={transB})")
    if c is not None:
        try:
            if np.broadcast_shapes(c.shape, (m, n)) != (m, n):
                raise ValueError
        except ValueError:
            raise OpError(f"{op}: C {c} does not broadcast to [{m}, {n}]") from None
    return TensorType((m, n), a.dtype)


@register_op("Gemm", attrs={"alpha": Attr.float(1.0), "beta": Attr.float(1.0),
                            "transA": Attr.int(0), "transB": Attr.int(0)},
             inputs=(2, 3), infer=_gemm_infer, pattern=FUSABLE)
def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None, *, alpha: float,
         beta: float, transA: int, transB: int) -> np.ndarray:
    """``alpha * op(A) @ op(B) + beta * C`` (C broadcast; optional)."""
    ct = compute_dtype(a.dtype)
    am = a.astype(ct, copy=False)
    bm = b.astype(ct, copy=False)
    y = np.matmul(am.T if transA else am, bm.T if transB else bm)
    if alpha != 1.0:
        y = y * ct.type(alpha) if ct.kind == "f" else (y * alpha).astype(ct)
    if c is not None and beta != 0.0:
        cc = c.astype(ct, copy=False)
        if beta != 1.0:
            cc = cc * ct.type(beta) if ct.kind == "f" else (cc * beta).astype(ct)
        y = y + cc
    return np.asarray(y).astype(a.dtype, copy=False)


# -- Einsum --------------------------------------------------------------------------------------

def _einsum_parse(equation: str, shapes: Sequence[Sequence[int]]) -> tuple[str, list[str], str]:
    """Normalize an einsum equation: ellipses replaced by unused letters, the implicit output
    made explicit. Returns (equation, input terms, output term)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise OpError(f"Einsum: equation {equation!r} has {len(terms)} operands, got "
                      f"{len(shapes)} inputs")
    used = set(eq) - set(".,->")
    spare = [ch for ch in string.ascii_letters if ch not in used]
    ell_rank = 0
    for term, shape in zip(terms, shapes):
        if "..." in term:
            ell_rank = max(ell_rank, len(shape) - (len(term) - 3))
    ell = "".join(spare[:ell_rank])
    new_terms = []
    for term, shape in zip(terms, shapes):
        if "..." in term:
            k = len(shape) - (len(term) - 3)
            term = term.replace("...", ell[ell_rank - k:] if k else "")
        if len(term) != len(shape):
            raise OpError(f"Einsum: term {term!r} does not fit operand shape {list(shape)}")
        new_terms.append(term)
    if arrow:
        out = rhs.replace("...", ell)
    else:
        counts: dict[str, int] = {}
        for term in new_terms:
            for ch in term:
                counts[ch] = counts.get(ch, 0) + 1
        out = ell + "".join(sorted(ch for ch, k in counts.items() if k == 1 and ch not in ell))
    return ",".join(new_terms) + "->" + out, new_terms, out


def _einsum_infer(*types: TensorType, equation: str) -> TensorType:
    _, terms, out = _einsum_parse(equation, [t.shape for t in types])
    sizes: dict[str, int] = {}
    for term, t in zip(terms, types):
        for ch, dim in zip(term, t.shape):
            if ch not in sizes or sizes[ch] == 1:
                sizes[ch] = dim
            elif dim not in (1, sizes[ch]):
                raise OpError(f"Einsum: index {ch!r} has sizes {sizes[ch]} and {dim}")
    for ch in out:
        if ch not in sizes:
            raise OpError(f"Einsum: output index {ch!r} is not in any input of {equation!r}")
    return TensorType(tuple(sizes[ch] for ch in out), types[0].dtype)


@register_op("Einsum", attrs={"equation": Attr.str()}, inputs=(1, None), infer=_einsum_infer,
             pattern=OPAQUE)
def einsum(*xs: np.ndarray, equation: str) -> np.ndarray:
    """Einstein summation (numpy.einsum with the ONNX equation)."""
    eq, _, _ = _einsum_parse(equation, [x.shape for x in xs])
    ct = compute_dtype(xs[0].dtype)
    y = np.einsum(eq, *(x.astype(ct, copy=False) for x in xs), optimize=len(xs) > 2)
    return np.asarray(y).astype(xs[0].dtype, copy=False)


# -- Det ----------------------------------------------------------------------------------------

def _det_infer(x: TensorType) -> TensorType:
    if x.ndim < 2 or x.shape[-1] != x.shape[-2] or not x.dtype.is_float:
        raise OpError(f"Det: input must be float square matrices (..., M, M), got {x}")
    return TensorType(x.shape[:-2], x.dtype)


@register_op("Det", infer=_det_infer)
def det(x: np.ndarray) -> np.ndarray:
    """Determinant of each trailing square matrix."""
    return np.asarray(np.linalg.det(x.astype(float_compute_dtype(x.dtype)))).astype(x.dtype)


__all__ = ["matmul_shape"]
