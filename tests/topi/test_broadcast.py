"""Broadcasting computes (tessera.topi.broadcast) against the ops' numpy references."""

from __future__ import annotations

import numpy as np
import pytest
from topi.support import check_op, rand

from tessera import te
from tessera.topi import broadcast, tag

SHAPE_PAIRS = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((1,), (2, 3)),
               ((), (2, 3)), ((5, 1), ())]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int8"])
def test_arithmetic(op: str, dtype: str) -> None:
    for sa, sb in SHAPE_PAIRS:
        a = rand(*sa, dtype=dtype, lo=-20, hi=20)
        b = rand(*sb, dtype=dtype, lo=-20, hi=20)
        if op == "Div" and dtype.startswith("float"):
            b = np.where(np.abs(b) < 0.1, 0.5, b).astype(dtype)
        check_op(op, [a, b])


def test_elemwise_and_broadcast_tags() -> None:
    same = check_op("Add", [rand(2, 3), rand(2, 3)])
    assert same.outputs[0].op.tag == tag.ELEMWISE
    bcast = check_op("Add", [rand(2, 3), rand(3)])
    assert bcast.outputs[0].op.tag == tag.BROADCAST


INT_DIV_TYPES = ("int32", "int8", "uint8", "int64")


def integer_division_operands(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """A dividend and a broadcast divisor with a zero (division by zero gives 0) and, when
    signed, a -1 and negative values (Python's floor semantics)."""
    signed = dtype.startswith("int")
    a = rand(6, 7, dtype=dtype, lo=-50 if signed else 0, hi=50)
    b = rand(7, dtype=dtype, lo=-6 if signed else 0, hi=6)
    b[0] = 0
    if dtype.startswith("int"):
        b[1] = -1
    return a, b


@pytest.mark.parametrize("dtype", INT_DIV_TYPES)
def test_integer_division_and_modulo_semantics(dtype: str) -> None:
    a, b = integer_division_operands(dtype)
    check_op("Div", [a, b])
    check_op("Mod", [a, b], {"fmod": 0})
    check_op("Mod", [a, b], {"fmod": 1})
    if dtype.startswith("int"):
        info = np.iinfo(dtype)
        x = np.array([info.min, info.min, 7, -7], dtype)
        y = np.array([-1, 1, -2, 2], dtype)
        check_op("Div", [x, y])
        check_op("Mod", [x, y], {"fmod": 1})


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_float_modulo(dtype: str) -> None:
    a = rand(4, 5, dtype=dtype, lo=-10, hi=10)
    b = rand(5, dtype=dtype, lo=-3, hi=3)
    b = np.where(np.abs(b) < 0.2, 1.5, b).astype(dtype)
    check_op("Mod", [a, b], {"fmod": 0})
    check_op("Mod", [a, b], {"fmod": 1})


@pytest.mark.parametrize("consts", [(), (1,)])
def test_pow(consts: tuple) -> None:
    x = rand(3, 4, lo=0.1, hi=3)
    for e in (2.0, 1.0, 0.5, -1.3, 3.0):
        check_op("Pow", [x, np.array(e, np.float32)], consts=consts)
    check_op("Pow", [x, rand(4, lo=-2, hi=2)])
    check_op("Pow", [x.astype(np.float16), np.array(2.0, np.float16)], consts=consts)
    check_op("Pow", [x, np.array(2, np.int64)], consts=consts)
    xi = rand(3, 4, dtype="int32", lo=-4, hi=4)
    check_op("Pow", [xi, np.array(3, np.int32)], consts=consts)
    check_op("Pow", [xi, np.array(2.0, np.float32)], consts=consts)


def test_pow_by_inlined_two_is_a_product() -> None:
    group = check_op("Pow", [rand(3, 4), np.array(2.0, np.float32)], consts=(1,))
    assert "pow" not in repr(group.outputs[0].op.body)


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8"])
def test_comparisons(op: str, dtype: str) -> None:
    for sa, sb in SHAPE_PAIRS:
        check_op(op, [rand(*sa, dtype=dtype, lo=0, hi=3), rand(*sb, dtype=dtype, lo=0, hi=3)])


@pytest.mark.parametrize("op", ["And", "Or", "Xor", "Equal"])
def test_logic(op: str) -> None:
    for sa, sb in SHAPE_PAIRS:
        check_op(op, [rand(*sa, dtype=bool), rand(*sb, dtype=bool)])


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_variadic(op: str) -> None:
    check_op(op, [rand(2, 3, 4), rand(3, 1), rand(4)])
    check_op(op, [rand(5)])
    check_op(op, [rand(2, 3, dtype="float16"), rand(2, 3, dtype="float16")])
    if op != "Mean":
        check_op(op, [rand(2, 3, dtype="int32", lo=-9, hi=9), rand(3, dtype="int32", lo=-9, hi=9)])


def test_where() -> None:
    check_op("Where", [rand(2, 1, 4, dtype=bool), rand(3, 1), rand(2, 3, 4)])
    check_op("Where", [rand(5, dtype=bool), rand(5, dtype="int64"), rand(1, dtype="int64")])
    check_op("Where", [np.array(True), rand(3), np.array(7.0, np.float32)], consts=(0, 2))


def test_prelu_and_swiglu() -> None:
    x = rand(2, 3, 4, 5, lo=-2, hi=2)
    check_op("PRelu", [x, rand(3, 1, 1)])
    check_op("PRelu", [x, rand(5)])
    check_op("PRelu", [x, np.array([0.25], np.float32)], consts=(1,))
    check_op("PRelu", [rand(3, 4, dtype="int32", lo=-9, hi=9), rand(4, dtype="int32", lo=1, hi=3)])
    check_op("SwiGLU", [rand(3, 8, lo=-4, hi=4), rand(3, 8)], {"alpha": 1.7})


def test_public_binary_functions() -> None:
    a = te.placeholder((4, 1), "float32", "a")
    b = te.placeholder((3,), "float32", "b")
    for fn in (broadcast.add, broadcast.subtract, broadcast.multiply, broadcast.divide,
               broadcast.maximum, broadcast.minimum):
        y = fn(a, b)
        assert y.const_shape() == (4, 3) and y.op.tag == tag.BROADCAST
    assert broadcast.less(a, b).dtype == "bool"
