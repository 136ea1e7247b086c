"""Binary and variadic broadcasting ops (tessera.ops.binary) and their ONNX converters, checked
against onnxruntime on one-node models over random data, broadcast shapes and element types."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from onnx_node import assert_same, check, evaluate_checked, one_node_model, run_tessera

from tessera.errors import ModelImportError
from tessera.frontend.onnx import import_onnx
from tessera.ops.registry import OpPattern, get_schema

# -- helpers ------------------------------------------------------------------------------------

TOLERANCE = {np.float16: (2e-3, 2e-3), np.float32: (2e-6, 1e-6), np.float64: (1e-12, 1e-12)}
compare = partial(check, opset=21, tolerances=TOLERANCE)


def sample(rng: np.random.Generator, shape: tuple, dtype: str, low: float = -50,
           high: float = 50, nonzero: bool = False) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        a = rng.integers(max(int(low), info.min), min(int(high), info.max) + 1, size=shape)
        if nonzero:
            a = np.where(a == 0, 1, a)
        return np.asarray(a).astype(dtype)
    a = rng.uniform(low, high, size=shape)
    if nonzero:
        a = np.where(np.abs(a) < 0.1, 0.5, a)
    return np.asarray(a).astype(dtype)


SHAPE_PAIRS = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3)),
               ((5,), ()), ((1, 3, 1, 2), (4, 1, 5, 1))]
INT_TYPES = ["int8", "int32", "int64", "uint8"]

# -- arithmetic ---------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"] + INT_TYPES)
def test_arithmetic_matches_onnxruntime(op, dtype):
    rng = np.random.default_rng(len(op) + len(dtype))
    low = 0 if dtype == "uint8" else -100
    for opset in (7, 14):
        if opset == 7 and dtype in ("int8", "uint8"):
            continue  # integer types below 32 bits came with opset 14
        for a_shape, b_shape in SHAPE_PAIRS:
            a = sample(rng, a_shape, dtype, low, 100)
            b = sample(rng, b_shape, dtype, low, 100, nonzero=op == "Div")
            compare(op, [a, b], opset=opset)


def test_integer_division_truncates_toward_zero():
    a = np.array([7, -7, 7, -7, 6, -6, 1, -1, 0], np.int32)
    b = np.array([2, 2, -2, -2, 3, 3, -5, 5, -3], np.int32)
    (got,) = compare("Div", [a, b], opset=14)
    np.testing.assert_array_equal(got, [3, -3, -3, 3, 2, -2, 0, 0, 0])


def test_integer_arithmetic_wraps_in_the_input_type():
    for dtype in ("int8", "uint8", "int32"):
        info = np.iinfo(dtype)
        a = np.array([info.max, info.min, info.max, 3], dtype)
        b = np.array([1, -1 if info.min else 1, info.max, info.max], dtype)
        for op in ("Add", "Sub", "Mul"):
            compare(op, [a, b], opset=14)


def test_scalar_operands_keep_their_type():
    for dtype in ("int8", "uint8", "float16"):
        a, b = np.array(100, dtype), np.array(100, dtype)
        for op in ("Add", "Mul", "Sub"):
            (got,) = compare(op, [a, b], opset=14)
            assert got.dtype == np.dtype(dtype) and got.shape == ()


@pytest.mark.parametrize("base, exp, opset", [
    ("float32", "float32", 7), ("float16", "float16", 7), ("float64", "float64", 13),
    ("float32", "int64", 12), ("float32", "int32", 15), ("float16", "float32", 15),
    ("int32", "int32", 12), ("int64", "int64", 15), ("int32", "int64", 15),
    ("int64", "float32", 15),
])
def test_pow_matches_onnxruntime(base, exp, opset):
    rng = np.random.default_rng(17)
    for a_shape, b_shape in SHAPE_PAIRS[:4]:
        x = sample(rng, a_shape, base, -6, 6, nonzero=True)
        if np.dtype(base).kind == "f":
            x = np.asarray(np.abs(x))  # negative bases with fractional exponents: see below
        y = sample(rng, b_shape, exp, 0 if np.dtype(base).kind in "iu" else -3, 5)
        compare("Pow", [x, y], opset=opset)


def test_pow_edge_cases_follow_c_pow():
    x = np.array([2, -2, 3, 1, -1, 0, -8], np.int32)
    y = np.array([-1, -1, -2, -3, -3, 2, 3], np.int64)
    compare("Pow", [x, y], opset=15)
    xf = np.array([-2.0, -8.0, 0.0, 0.0, np.inf], np.float32)
    yf = np.array([0.5, 1.0 / 3, -1.0, 0.0, -1.0], np.float32)
    compare("Pow", [xf, yf], opset=15)
    compare("Pow", [np.array([2, -2, 3], np.int64), np.array([0.5, 1.5, -2], np.float32)],
            opset=15)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", INT_TYPES + ["int16"])
def test_integer_mod_matches_onnxruntime(fmod, dtype):
    rng = np.random.default_rng(23)
    low = 0 if dtype == "uint8" else -60
    for a_shape, b_shape in SHAPE_PAIRS:
        a = sample(rng, a_shape, dtype, low, 60)
        b = sample(rng, b_shape, dtype, low, 60, nonzero=True)
        compare("Mod", [a, b], {"fmod": fmod}, opset=13)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_float_fmod_matches_onnxruntime(dtype):
    rng = np.random.default_rng(29)
    for a_shape, b_shape in SHAPE_PAIRS:
        a = sample(rng, a_shape, dtype)
        b = sample(rng, b_shape, dtype, -7, 7, nonzero=True)
        compare("Mod", [a, b], {"fmod": 1}, opset=13)


def test_float_floor_mod_follows_opset_28():
    # onnxruntime rejects fmod=0 on floats; opset 28 defines it (the sign of the divisor)
    a = np.array([5.0, -5.0, 5.0, -5.0, 0.0, -0.0, np.inf, 3.0, -1.0, 1.0, np.nan], np.float32)
    b = np.array([3.0, 3.0, -3.0, -3.0, -2.0, 2.0, 2.0, 0.0, np.inf, -np.inf, 1.0], np.float32)
    for opset in (13, 28):
        (got,) = run_tessera(one_node_model("Mod", [a, b], {"fmod": 0}, opset=opset),
                             {"x0": a, "x1": b})
        want = np.array([2, 1, -1, -2, -0.0, 0.0, np.nan, np.nan, np.inf, -np.inf, np.nan],
                        np.float32)
        assert_same(got, want)
        np.testing.assert_array_equal(np.signbit(got[4:6]), [True, False])


# -- comparisons, logic and bitwise -------------------------------------------------------------

COMPARISONS = [(op, opset, dtype)
               for op, opset in [("Equal", 19), ("Less", 13), ("LessOrEqual", 16),
                                 ("Greater", 13), ("GreaterOrEqual", 16), ("Equal", 7),
                                 ("Less", 9), ("Greater", 9), ("LessOrEqual", 12)]
               for dtype in ["float32", "float16", "int32", "int64", "int8", "uint8"]
               if opset > 7 or dtype in ("int32", "int64")]  # Equal-7: bool, int32, int64


@pytest.mark.parametrize("op, opset, dtype", COMPARISONS)
def test_comparisons_match_onnxruntime(op, opset, dtype):
    rng = np.random.default_rng(31)
    for a_shape, b_shape in SHAPE_PAIRS:
        # few distinct values, so that ties occur
        a = sample(rng, a_shape, dtype, 0, 4)
        b = sample(rng, b_shape, dtype, 0, 4)
        (got,) = compare(op, [a, b], opset=opset)
        assert got.dtype == np.bool_


def test_comparisons_with_nan():
    a = np.array([np.nan, 1.0, np.nan, -np.inf], np.float32)
    b = np.array([np.nan, np.nan, 1.0, -np.inf], np.float32)
    for op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"):
        compare(op, [a, b], opset=16)


@pytest.mark.parametrize("op", ["And", "Or", "Xor", "Equal"])
def test_logic_matches_onnxruntime(op):
    rng = np.random.default_rng(37)
    for a_shape, b_shape in SHAPE_PAIRS:
        compare(op, [sample(rng, a_shape, "bool"), sample(rng, b_shape, "bool")], opset=13)


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint32"])
def test_bitwise_matches_onnxruntime(op, dtype):
    rng = np.random.default_rng(41)
    info = np.iinfo(dtype)
    for a_shape, b_shape in SHAPE_PAIRS:
        a = sample(rng, a_shape, dtype, max(info.min, -(2 ** 20)), min(info.max, 2 ** 20))
        b = sample(rng, b_shape, dtype, max(info.min, -(2 ** 20)), min(info.max, 2 ** 20))
        compare(op, [a, b], opset=18)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", ["uint8", "uint32", "uint64"])
def test_bitshift_matches_onnxruntime(direction, dtype):
    rng = np.random.default_rng(43)
    bits = np.dtype(dtype).itemsize * 8
    for a_shape, b_shape in SHAPE_PAIRS:
        x = sample(rng, a_shape, dtype, 0, 255)
        y = sample(rng, b_shape, dtype, 0, bits - 1)
        compare("BitShift", [x, y], {"direction": direction}, opset=11)


def test_bitshift_of_signed_types_and_out_of_range_amounts_follow_opset_28():
    x = np.array([-8, -8, 5, -1, 64, -128, 3, -3], np.int8)
    y = np.array([1, 9, 8, 3, 1, -1, 7, 100], np.int8)
    (right,) = run_tessera(one_node_model("BitShift", [x, y], {"direction": "RIGHT"}, opset=28),
                           {"x0": x, "x1": y})
    assert_same(right, np.array([-4, -1, 0, -1, 32, -1, 0, -1], np.int8))
    (left,) = run_tessera(one_node_model("BitShift", [x, y], {"direction": "LEFT"}, opset=28),
                          {"x0": x, "x1": y})
    assert_same(left, np.array([-16, 0, 0, -8, -128, 0, -128, 0], np.int8))
    u = np.array([1, 255, 7], np.uint32)
    s = np.array([31, 32, 40], np.uint32)
    (got,) = run_tessera(one_node_model("BitShift", [u, s], {"direction": "LEFT"}, opset=11),
                         {"x0": u, "x1": s})
    assert_same(got, np.array([2 ** 31, 0, 0], np.uint32))


# -- variadic and Where -------------------------------------------------------------------------

VARIADIC_SHAPES = [[(3, 4)], [(3, 4), (3, 4)], [(2, 3, 4), (4,), (3, 1)], [(), (2, 2), (1, 2)]]


@pytest.mark.parametrize("op, dtypes", [
    ("Max", ["float32", "float16", "float64", "int32", "int64", "int8", "uint8"]),
    ("Min", ["float32", "float16", "float64", "int32", "int64", "int8", "uint8"]),
    ("Sum", ["float32", "float16", "float64"]),
    ("Mean", ["float32", "float16"]),
])
def test_variadic_matches_onnxruntime(op, dtypes):
    rng = np.random.default_rng(47)
    for dtype in dtypes:
        for shapes in VARIADIC_SHAPES:
            low = 0 if dtype == "uint8" else -100
            compare(op, [sample(rng, s, dtype, low, 100) for s in shapes], opset=13)


def test_variadic_equal_shapes_at_opset_7():
    rng = np.random.default_rng(53)
    arrays = [sample(rng, (2, 5), "float32") for _ in range(4)]
    for op in ("Max", "Min", "Sum", "Mean"):
        compare(op, arrays, opset=7)


def test_max_and_min_propagate_nan():
    a = np.array([np.nan, 1.0, 2.0], np.float32)
    b = np.array([1.0, np.nan, 1.0], np.float32)
    compare("Max", [a, b], opset=13)
    compare("Min", [a, b], opset=13)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "int8", "uint8"])
def test_where_matches_onnxruntime(dtype):
    rng = np.random.default_rng(59)
    for shapes in [((3, 4), (3, 4), (3, 4)), ((3, 1), (4,), ()), ((2, 1, 4), (3, 1), (1, 4))]:
        cond = sample(rng, shapes[0], "bool")
        x = sample(rng, shapes[1], dtype, 0, 100)
        y = sample(rng, shapes[2], dtype, 0, 100)
        compare("Where", [cond, x, y], opset=16)
    compare("Where", [cond, x, y], opset=9)


def test_where_of_bools():
    cond = np.array([[True], [False]])
    x = np.array([True, False, True])
    y = np.array(False)
    (got,) = run_tessera(one_node_model("Where", [cond, x, y], opset=16),
                         {"x0": cond, "x1": x, "x2": y})
    assert_same(got, np.array([[True, False, True], [False, False, False]]))


# -- schema, folding and errors -----------------------------------------------------------------

def test_constant_operands_fold():
    a = np.array([[1, 2], [3, 4]], np.int8)
    b = np.array([10, -20], np.int8)
    fn = import_onnx(one_node_model("Mul", [a, b], opset=14, consts={0, 1}))
    assert fn.nodes == [] or all(n.op == "Identity" for n in fn.nodes)
    (got,) = evaluate_checked(fn, {})
    assert_same(got, (a * b).astype(np.int8))


def test_every_op_has_an_explicit_infer_and_broadcasts():
    for op in ("Add", "Sub", "Mul", "Div", "Pow", "Mod", "Equal", "Less", "LessOrEqual",
               "Greater", "GreaterOrEqual", "And", "Or", "Xor", "BitShift", "BitwiseAnd",
               "BitwiseOr", "BitwiseXor", "Max", "Min", "Sum", "Mean", "Where"):
        schema = get_schema(op)
        assert schema.infer is not None, op
        assert schema.pattern == OpPattern.BROADCAST, op


@pytest.mark.parametrize("op, inputs, message", [
    ("Add", [np.ones(3, np.float32), np.ones(3, np.int32)], "element type int32"),
    ("Mul", [np.ones((2, 3), np.float32), np.ones((4,), np.float32)], "do not broadcast"),
    ("And", [np.ones(3, np.int32), np.ones(3, np.int32)], "expected bool"),
    ("BitwiseAnd", [np.ones(3, np.float32), np.ones(3, np.float32)], "integer type"),
    ("Mean", [np.ones(3, np.int32), np.ones(3, np.int32)], "float type"),
    ("Sum", [np.ones(3, np.float32), np.ones(3, np.float32), np.ones(3, np.float16)],
     "input 2 has element type float16"),
    ("Where", [np.ones(3, np.int32), np.ones(3, np.float32), np.ones(3, np.float32)],
     "condition"),
    ("Where", [np.ones(3, bool), np.ones(3, np.float32), np.ones(3, np.int64)],
     "input 2 has element type int64"),
])
def test_malformed_nodes_are_import_errors(op, inputs, message):
    with pytest.raises(ModelImportError, match=message):
        import_onnx(one_node_model(op, inputs, opset=18))


def test_bitshift_requires_a_valid_direction():
    x = np.ones(3, np.uint8)
    with pytest.raises(ModelImportError, match="direction"):
        import_onnx(one_node_model("BitShift", [x, x], {"direction": "UP"}, opset=11))
