"""Matrix products (tessera.topi.nn.dense) against numpy and the ops' references."""

from __future__ import annotations

import numpy as np
import pytest
from topi.support import assert_close, check_op, find_op, rand
from topi.te_eval import evaluate

from tessera import te, tir
from tessera.topi import nn, tag

MATMUL_SHAPES = [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
                 ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
                 ((1, 3, 4), (2, 4, 5)), ((6,), (2, 6, 3))]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
def test_matmul(sa: tuple, sb: tuple) -> None:
    check_op("MatMul", [rand(*sa), rand(*sb)], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "float64", "int32", "int64"])
def test_matmul_dtypes(dtype: str) -> None:
    check_op("MatMul", [rand(2, 3, 5, dtype=dtype, lo=-9, hi=9),
                        rand(5, 4, dtype=dtype, lo=-9, hi=9)])


def test_matmul_tags() -> None:
    g2 = check_op("MatMul", [rand(3, 4), rand(4, 5)], consts=(1,), rtol=1e-4, atol=1e-5)
    mm = find_op(g2, tag.MATMUL)
    assert [a.name for a in mm.axis] == ["i", "j"] and [a.name for a in mm.reduce_axis] == ["k"]
    g3 = check_op("MatMul", [rand(2, 3, 4), rand(2, 4, 5)], rtol=1e-4, atol=1e-5)
    find_op(g3, tag.BATCH_MATMUL)
    for sa, sb in [((4,), (2, 4, 5)), ((3, 4), (4,))]:
        gv = check_op("MatMul", [rand(*sa), rand(*sb)], rtol=1e-4, atol=1e-5)
        find_op(gv, tag.MATVEC)


GEMM_CASES = [
    ({}, (3, 4), (4, 5), None),
    ({"transA": 1}, (4, 3), (4, 5), (5,)),
    ({"transB": 1}, (3, 4), (5, 4), (3, 5)),
    ({"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}, (4, 3), (5, 4), (1, 5)),
    ({"alpha": 1.5, "beta": 0.0}, (3, 4), (4, 5), (3, 5)),
    ({"beta": -1.0}, (3, 4), (4, 5), (3, 1)),
    ({"transB": 1}, (2, 7), (3, 7), ()),
]


@pytest.mark.parametrize("attrs,sa,sb,sc", GEMM_CASES)
def test_gemm(attrs: dict, sa: tuple, sb: tuple, sc: tuple | None) -> None:
    inputs = [rand(*sa), rand(*sb)] + ([rand(*sc)] if sc is not None else [])
    check_op("Gemm", inputs, attrs, consts=(1, 2), rtol=1e-4, atol=1e-5)
    check_op("Gemm", [a.astype(np.float16) for a in inputs], attrs)


def test_gemm_with_trans_b_is_dense() -> None:
    group = check_op("Gemm", [rand(2, 7), rand(3, 7), rand(3)], {"transB": 1}, consts=(1, 2),
                     rtol=1e-4, atol=1e-5)
    dense = find_op(group, tag.DENSE)
    assert dense.attrs["transpose_b"] is True
    assert group.outputs[0].op.tag == tag.BROADCAST


def test_integer_gemm() -> None:
    a, b = rand(3, 4, dtype="int32", lo=-5, hi=5), rand(4, 2, dtype="int32", lo=-5, hi=5)
    check_op("Gemm", [a, b, rand(2, dtype="int32", lo=-5, hi=5)])


def test_public_dense_matmul_batch_matmul() -> None:
    x = te.placeholder((3, 6), "float32", "x")
    w = te.placeholder((4, 6), "float32", "w")
    b = te.placeholder((4,), "float32", "b")
    y = nn.dense(x, w, b)
    xd, wd, bd = rand(3, 6), rand(4, 6), rand(4)
    assert_close(evaluate(y, {x: xd, w: wd, b: bd}), xd @ wd.T + bd, rtol=1e-5)
    a = te.placeholder((2, 5, 3), "float32", "a")
    c = te.placeholder((1, 4, 5), "float32", "c")
    z = nn.batch_matmul(a, c, transpose_a=True, transpose_b=True)
    ad, cd = rand(2, 5, 3), rand(1, 4, 5)
    assert z.op.tag == tag.BATCH_MATMUL
    assert_close(evaluate(z, {a: ad, c: cd}),
                 np.matmul(ad.transpose(0, 2, 1), cd.transpose(0, 2, 1)), rtol=1e-5)
    m = nn.matmul(te.placeholder((3, 5), "int8", "p"), te.placeholder((5, 2), "int8", "q"),
                  out_dtype="int32")
    assert m.dtype == "int32" and isinstance(m.op.body, tir.Reduce)


EINSUMS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]), ("ij->ji", [(3, 4)]), ("ij->", [(3, 4)]), ("i,j->ij", [(3,), (4,)]),
    ("...ij,...jk", [(2, 3, 4), (1, 4, 2)]), ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("ij,ij,ij->i", [(2, 3), (2, 3), (1, 3)]),
]


@pytest.mark.parametrize("equation,shapes", EINSUMS)
def test_einsum(equation: str, shapes: list) -> None:
    check_op("Einsum", [rand(*s) for s in shapes], {"equation": equation}, rtol=1e-5)
    check_op("Einsum", [rand(*s, dtype="float16") for s in shapes], {"equation": equation})


@pytest.mark.parametrize("sa, n, nb", [((4, 6), 32, 16), ((2, 3, 5, 6), 64, 32), ((1, 9), 8, 8)])
def test_matmul_packed(sa: tuple, n: int, nb: int) -> None:
    from tessera.ops.layout import pack_matmul_weight

    b = rand(sa[-1], n)
    g = check_op("MatMulPacked", [rand(*sa), pack_matmul_weight(b, nb)], consts=(1,), rtol=1e-4,
                 atol=1e-5)
    assert find_op(g, tag.DENSE if len(sa) == 2 else tag.BATCH_MATMUL).attrs["panel"] == nb
