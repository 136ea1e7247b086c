"""Reductions (tessera.topi.reduction) against the ops' numpy references."""

from __future__ import annotations

import numpy as np
import pytest
from topi.support import check_op, find_op, rand

from tessera import te, tir
from tessera.topi import reduction, tag

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]
AXES = [None, [0], [-1], [0, 2], [1, -1], []]


def _data(op: str, dtype: str, shape: tuple) -> np.ndarray:
    if op == "ReduceLogSum":
        return rand(*shape, dtype=dtype, lo=0.1 if dtype.startswith("float") else 1, hi=3)
    if op == "ReduceProd":
        return rand(*shape, dtype=dtype, lo=0.5 if dtype.startswith("float") else -2, hi=1.5
                    if dtype.startswith("float") else 2)
    return rand(*shape, dtype=dtype, lo=-5, hi=5)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_reduce_ops(op: str, dtype: str) -> None:
    x = _data(op, dtype, (3, 4, 5))
    for axes in AXES:
        for keepdims in (0, 1):
            check_op(op, [x], {"axes": axes, "keepdims": keepdims})


def test_reduce_stage_is_a_plain_reduction() -> None:
    group = check_op("ReduceSum", [rand(2, 3, 4)], {"axes": [1], "keepdims": 0})
    op = find_op(group, tag.REDUCE)
    assert isinstance(op.body, tir.Reduce) and op.body.combiner == "sum"
    assert op.attrs["axes"] == (1,) and [a.dom.extent.value for a in op.reduce_axis] == [3]


def test_reduce_of_rank0_and_size1_axes() -> None:
    check_op("ReduceMax", [np.array(2.5, np.float32)], {"axes": None, "keepdims": 1})
    check_op("ReduceMean", [rand(1, 6, 1)], {"axes": [0, 2], "keepdims": 0})
    check_op("ReduceLogSumExp", [np.array([[-np.inf, -np.inf], [1.0, 2.0]], np.float32)],
             {"axes": [1], "keepdims": 1})


def test_bool_max_and_min() -> None:
    x = rand(3, 4, 5, dtype=bool)
    x[0] = True
    for op in ("ReduceMax", "ReduceMin"):
        for axes in AXES:
            check_op(op, [x], {"axes": axes, "keepdims": 1})


def test_integer_mean_floors() -> None:
    check_op("ReduceMean", [np.array([[-3, -4, 0], [5, 1, 2]], np.int32)],
             {"axes": [1], "keepdims": 0})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", ["float32", "int8", "uint8"])
def test_arg_reductions_with_ties(op: str, dtype: str) -> None:
    x = rand(3, 5, 4, dtype=dtype, lo=0, hi=3) if dtype != "float32" else \
        np.round(rand(3, 5, 4, lo=0, hi=3))
    for axis in (0, 1, -1):
        for keepdims in (0, 1):
            for last in (0, 1):
                check_op(op, [x], {"axis": axis, "keepdims": keepdims,
                                   "select_last_index": last})


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_cumsum(dtype: str) -> None:
    x = rand(3, 6, dtype=dtype, lo=-5, hi=5)
    for axis in (0, 1, -1):
        for exclusive in (0, 1):
            for reverse in (0, 1):
                check_op("CumSum", [x], {"axis": axis, "exclusive": exclusive,
                                         "reverse": reverse})


def test_reduce_prod_beyond_the_unroll_limit_is_unsupported() -> None:
    from topi.support import one_node

    from tessera.topi.registry import unsupported_reason

    _, node = one_node("ReduceProd", [rand(4, 100)], {"axes": [1], "keepdims": 0})
    assert "unrolled" in unsupported_reason(node)
    _, node = one_node("ReduceProd", [rand(100, 4)], {"axes": [1], "keepdims": 0})
    assert unsupported_reason(node) is None


def test_public_api() -> None:
    x = te.placeholder((4, 5, 6), "float32", "x")
    assert reduction.sum(x, (1,)).const_shape() == (4, 6)
    assert reduction.max(x, (0, 2), keepdims=True).const_shape() == (1, 5, 1)
    assert reduction.argmax(x, 1, keepdims=False).dtype == "int64"
    assert reduction.mean(x).const_shape() == ()
