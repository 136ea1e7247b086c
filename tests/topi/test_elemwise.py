"""Elementwise computes (tessera.topi.elemwise) against the ops' numpy references."""

from __future__ import annotations

import numpy as np
import pytest
from topi.support import check_op, rand

from tessera import te
from tessera.topi import elemwise, tag
from tessera.topi.registry import has_compute

SHAPES = [(7,), (2, 3, 5), (1, 4, 1, 3), ()]

# op -> (attrs, low, high)
FLOAT_OPS = {
    "Relu": ({}, -3, 3), "Sigmoid": ({}, -8, 8), "Tanh": ({}, -4, 4), "Exp": ({}, -5, 5),
    "Log": ({}, 0.01, 10), "Sqrt": ({}, 0, 10), "Erf": ({}, -3, 3), "Ceil": ({}, -5, 5),
    "Floor": ({}, -5, 5), "Round": ({}, -5, 5), "Reciprocal": ({}, 0.5, 4),
    "Sin": ({}, -4, 4), "Cos": ({}, -4, 4), "Tan": ({}, -1.2, 1.2), "Asin": ({}, -0.99, 0.99),
    "Acos": ({}, -0.99, 0.99), "Atan": ({}, -5, 5), "Sinh": ({}, -3, 3), "Cosh": ({}, -3, 3),
    "Asinh": ({}, -5, 5), "Acosh": ({}, 1.01, 6), "Atanh": ({}, -0.95, 0.95),
    "Abs": ({}, -3, 3), "Neg": ({}, -3, 3), "Sign": ({}, -3, 3), "Identity": ({}, -3, 3),
    "Elu": ({"alpha": 0.7}, -3, 3), "Selu": ({}, -3, 3), "LeakyRelu": ({"alpha": 0.1}, -3, 3),
    "HardSigmoid": ({"alpha": 0.3, "beta": 0.4}, -5, 5), "HardSwish": ({}, -5, 5),
    "Softplus": ({}, -30, 30), "Softsign": ({}, -5, 5), "Gelu": ({}, -4, 4),
    "Mish": ({}, -20, 10), "Celu": ({"alpha": 1.5}, -3, 3),
    "ThresholdedRelu": ({"alpha": 0.5}, -2, 2), "Shrink": ({"lambd": 0.6, "bias": 0.2}, -2, 2),
    "Swish": ({"alpha": 1.3}, -6, 6),
}


@pytest.mark.parametrize("op", sorted(FLOAT_OPS))
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_float_unary_ops(op: str, dtype: str) -> None:
    attrs, lo, hi = FLOAT_OPS[op]
    for shape in SHAPES:
        group = check_op(op, [rand(*shape, dtype=dtype, lo=lo, hi=hi)], attrs)
        out = group.outputs[0]
        assert out.op.tag == tag.ELEMWISE


def test_round_is_half_to_even() -> None:
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.49], np.float32)
    check_op("Round", [x])


def test_gelu_tanh_and_softplus_tails() -> None:
    check_op("Gelu", [rand(3, 9, lo=-5, hi=5)], {"approximate": "tanh"})
    x = np.array([-90.0, -40.0, -16.0, -10.0, -1e-3, 0.0, 1e-6, 15.0, 60.0], np.float32)
    check_op("Softplus", [x], rtol=1e-6, atol=0)
    check_op("Celu", [np.array([-1e-6, -1e-3, 1e-7, 0.0, -5.0], np.float32)], {"alpha": 2.0},
             rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32", "uint8"])
def test_binarizer(dtype: str) -> None:
    """ai.onnx.ml Binarizer: 1 above the threshold (ties and NaN are 0), integers compared
    with a fractional threshold."""
    if dtype.startswith(("int", "uint")):
        x = np.arange(0 if dtype == "uint8" else -6, 12, dtype=dtype)
        check_op("Binarizer", [x], {"threshold": 2.5})
        return
    x = rand(3, 7, dtype=dtype, lo=-2, hi=2)
    x[0, :3] = [np.nan, 0.5, np.inf]
    check_op("Binarizer", [x], {"threshold": 0.5})


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8"])
def test_integer_ops(dtype: str) -> None:
    signed = dtype.startswith("int")
    x = rand(4, 6, dtype=dtype, lo=-9 if signed else 0, hi=9)
    for op in ["Abs", "Sign", "Relu", "Identity", "Erf"]:
        check_op(op, [x])
    check_op("Shrink", [x], {"lambd": 1.5, "bias": 2.0})
    if signed:
        check_op("Neg", [x])
        info = np.iinfo(dtype)
        check_op("Abs", [np.array([info.min, -1, 0, info.max], dtype)])


def test_bool_ops() -> None:
    x = rand(3, 4, dtype=bool)
    check_op("Not", [x])
    check_op("Identity", [x])
    check_op("Relu", [x])


def test_predicates() -> None:
    x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -3.0], np.float32)
    check_op("IsNaN", [x])
    for neg in (0, 1):
        for pos in (0, 1):
            check_op("IsInf", [x], {"detect_negative": neg, "detect_positive": pos})


@pytest.mark.parametrize("consts", [(), (1, 2)])
def test_clip_bounds(consts: tuple) -> None:
    x = rand(3, 7, lo=-3, hi=3)
    lo, hi = np.array(-1.0, np.float32), np.array([0.5], np.float32)
    check_op("Clip", [x, lo, hi], consts=consts)
    check_op("Clip", [x, lo], consts=consts[:1])
    check_op("Clip", [x, None, hi], consts=consts[1:])
    check_op("Clip", [x])
    check_op("Clip", [x, np.array(1.0, np.float32), np.array(-1.0, np.float32)], consts=consts)
    xi = rand(5, dtype="int32", lo=-10, hi=10)
    check_op("Clip", [xi, np.array(-3, np.int32), np.array(4, np.int32)], consts=consts)


def test_clip_with_inlined_bounds_reads_no_constant() -> None:
    group = check_op("Clip", [rand(4), np.array(-0.5, np.float32), np.array(0.5, np.float32)],
                     consts=(1, 2))
    assert [op.name for op in group.outputs[0].op.input_tensors()] == ["x0"]
    assert len(group.inlined) == 2 and len(group.placeholders) == 1


CAST_TYPES = ["float32", "float16", "float64", "int8", "int32", "int64", "uint8", "bool"]


@pytest.mark.parametrize("src", CAST_TYPES)
def test_cast_matrix(src: str) -> None:
    if src == "bool":
        x = rand(3, 5, dtype=bool)
    elif src.startswith(("int", "uint")):
        x = rand(3, 5, dtype=src, lo=-100, hi=100)
    else:
        x = (rand(3, 5, lo=-100, hi=100) * np.array([[1], [0], [1]])).astype(src)
    for dst in CAST_TYPES:
        if src.startswith("float") and dst.startswith("uint"):
            x_ = np.abs(x)
        else:
            x_ = x
        check_op("Cast", [x_], {"to": dst})


def test_public_functions_build_tagged_computes() -> None:
    x = te.placeholder((2, 3), "float32", "x")
    for fn in [elemwise.relu, elemwise.sigmoid, elemwise.exp, elemwise.softplus,
               elemwise.hard_swish, elemwise.identity]:
        y = fn(x)
        assert y.op.tag == tag.ELEMWISE and y.const_shape() == (2, 3)
    assert elemwise.leaky_relu(x, 0.2).dtype == "float32"
    assert elemwise.cast_to(x, "int8").dtype == "int8"


def test_every_elementwise_op_with_a_closed_form_has_a_compute() -> None:
    from tessera.ops.registry import OpPattern, all_ops

    missing = [name for name, s in all_ops().items()
               if s.pattern == OpPattern.ELEMWISE and not has_compute(name)]
    assert sorted(missing) == ["BitwiseNot"]  # TIR has no bitwise operators
