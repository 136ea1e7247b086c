"""The cuda backend's own computes (``tessera.topi.from_graph.build_te(computes=...)``).

**int8 products as dp4a dot products.** ``MatMulInteger`` (and the product inside
``QLinearMatMul``) of int8/uint8 operands with zero points that are absent or constant 0 is
computed from packed words: ``a_pack[..., m, k4]`` holds ``a[..., m, 4*k4 : 4*k4 + 4]`` as the
four bytes of an int32, ``b_pack[k4, n]`` holds ``b[4*k4 : 4*k4 + 4, n]``, and the product is
``sum over k4 of dp4a(a_pack, b_pack, 0)``: one instruction for four multiply-adds on the GPU
(the ``ts_dp4a_*`` helpers of the code generator's prelude, signed or unsigned per operand).
The product keeps the ``matmul`` tag, so the shared-memory template tiles it, and its shared
fetches compute the packing. The result is exact int32 arithmetic (wrapping as the reference's
int32 accumulation does).

Products that do not qualify (a reduction length that is not a multiple of 4, non-zero zero
points, a 1-D or batched ``b``) return None and use the registry's compute: int32
multiply-adds of the widened operands. A zero point would need correction terms (``zb *
rowsum(a)``, ``za * colsum(b)``) whose reductions the matrix-product template does not fuse.
"""

from __future__ import annotations

from typing import Any

from tessera import te, tir
from tessera.tir.dot_product import pack_bytes
from tessera.topi.nn.quantized import _is_zero, qlinear_matmul
from tessera.topi.utils import shape_of

__all__ = ["CUDA_COMPUTES", "dp4a_matmul"]

_SIGN = {"int8": "s", "uint8": "u"}


def dp4a_matmul(a: te.Tensor, b: te.Tensor) -> te.Tensor:
    """int32 ``a @ b`` for int8/uint8 ``a`` (``[..., m, k]``) and ``b`` (``[k, n]``), ``k`` a
    multiple of 4, through packed words and dp4a (module doc)."""
    ashape, n = shape_of(a), shape_of(b)[1]
    lead, k4 = ashape[:-1], ashape[-1] // 4
    a_pack = te.compute((*lead, k4), lambda *i: pack_bytes(lambda j: a[(*i[:-1], i[-1] * 4 + j)]),
                        name="a_pack", tag="injective")
    b_pack = te.compute((k4, n), lambda q, c: pack_bytes(lambda j: b[q * 4 + j, c]),
                        name="b_pack", tag="injective")
    r = te.reduce_axis((0, k4), name="k4")
    fn = f"dp4a_{_SIGN[a.dtype]}{_SIGN[b.dtype]}"
    zero = tir.convert(0, "int32")
    return te.compute(
        (*lead, n),
        lambda *i: te.sum(tir.Call(fn, [a_pack[(*i[:-1], r)], b_pack[r, i[-1]], zero], "int32"),
                          axis=r),
        name="matmul", tag="matmul")


def _qualifies(a: te.Tensor, b: te.Tensor, zps: list[Any]) -> bool:
    return (a.dtype in _SIGN and b.dtype in _SIGN and len(shape_of(a)) >= 2
            and len(shape_of(b)) == 2 and shape_of(a)[-1] % 4 == 0
            and all(_is_zero(z) for z in zps))


def _matmul_integer(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor] | None:
    a, b = inputs[0], inputs[1]
    zps = [inputs[k] if len(inputs) > k else None for k in (2, 3)]
    if not _qualifies(a, b, zps):
        return None
    return [dp4a_matmul(a, b)]


def _qlinear_matmul(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor] | None:
    a, b = inputs[0], inputs[3]
    if not _qualifies(a, b, [inputs[2], inputs[5]]):
        return None
    # the registry's requantization around the packed product
    return [qlinear_matmul(*inputs[:8], product=lambda a_, b_, _za, _zb: dp4a_matmul(a_, b_))]


#: What ``lower_region`` passes to ``build_te``.
CUDA_COMPUTES = {"MatMulInteger": _matmul_integer, "QLinearMatMul": _qlinear_matmul}
