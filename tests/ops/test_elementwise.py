"""Elementwise ops (tessera.ops.elementwise) and their ONNX converters, checked against
onnxruntime on one-node models over random data, several shapes and element types."""

from __future__ import annotations

from functools import partial

import exact
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_node import (
    assert_same,
    check,
    evaluate_checked,
    feeds_of,
    one_node_model,
    run_oracle,
    run_tessera,
)

from tessera.errors import ModelImportError
from tessera.frontend.onnx import import_onnx
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import OpPattern, get_schema

# -- helpers ------------------------------------------------------------------------------------

TOLERANCE = {np.float16: (2e-3, 2e-3), np.float32: (2e-5, 2e-6), np.float64: (1e-12, 1e-12)}
compare = partial(check, opset=21, tolerances=TOLERANCE)


def sample(rng: np.random.Generator, shape: tuple, dtype: str, low: float = -4.0,
           high: float = 4.0) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = max(int(low), info.min), min(int(high), info.max)
        return rng.integers(lo, hi + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


SHAPES = [(), (7,), (2, 3, 5)]

# -- float math and activations -----------------------------------------------------------------

# (op, attrs, opset, input range)
FLOAT_UNARY = [
    ("Identity", {}, 21, (-4, 4)),
    ("Relu", {}, 14, (-4, 4)),
    ("Sigmoid", {}, 13, (-12, 12)),
    ("Tanh", {}, 13, (-4, 4)),
    ("Exp", {}, 13, (-6, 6)),
    ("Log", {}, 13, (0.01, 50)),
    ("Sqrt", {}, 13, (0.01, 50)),
    ("Erf", {}, 13, (-3, 3)),
    ("Abs", {}, 13, (-4, 4)),
    ("Neg", {}, 13, (-4, 4)),
    ("Ceil", {}, 13, (-4, 4)),
    ("Floor", {}, 13, (-4, 4)),
    ("Round", {}, 22, (-4, 4)),
    ("Sign", {}, 13, (-4, 4)),
    ("Reciprocal", {}, 13, (0.25, 4)),
    ("Sin", {}, 22, (-4, 4)),
    ("Cos", {}, 22, (-4, 4)),
    ("Tan", {}, 7, (-1.3, 1.3)),
    ("Asin", {}, 7, (-0.99, 0.99)),
    ("Acos", {}, 9, (-0.99, 0.99)),
    ("Atan", {}, 22, (-4, 4)),
    ("Sinh", {}, 9, (-4, 4)),
    ("Cosh", {}, 22, (-4, 4)),
    ("Asinh", {}, 9, (-4, 4)),
    ("Acosh", {}, 22, (1.01, 6)),
    ("Atanh", {}, 9, (-0.99, 0.99)),
    ("Elu", {}, 7, (-4, 4)),
    ("Elu", {"alpha": 0.7}, 22, (-4, 4)),
    ("Selu", {}, 7, (-4, 4)),
    ("Selu", {"alpha": 1.5, "gamma": 2.0}, 22, (-4, 4)),
    ("LeakyRelu", {}, 7, (-4, 4)),
    ("LeakyRelu", {"alpha": 0.3}, 16, (-4, 4)),
    ("HardSigmoid", {}, 7, (-6, 6)),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, 22, (-6, 6)),
    ("HardSwish", {}, 14, (-6, 6)),
    ("Softplus", {}, 7, (-30, 30)),
    ("Softsign", {}, 22, (-4, 4)),
    ("Gelu", {}, 20, (-4, 4)),
    ("Gelu", {"approximate": "tanh"}, 20, (-4, 4)),
    ("Mish", {}, 18, (-6, 6)),
    ("ThresholdedRelu", {}, 10, (-4, 4)),
    ("ThresholdedRelu", {"alpha": 0.5}, 22, (-4, 4)),
    ("Shrink", {}, 9, (-4, 4)),
    ("Shrink", {"lambd": 1.5, "bias": 0.25}, 9, (-4, 4)),
    ("Swish", {"alpha": 1.5}, 24, (-6, 6)),
    ("Swish", {}, 24, (-6, 6)),
]


@pytest.mark.parametrize("op, attrs, opset, bounds", FLOAT_UNARY,
                         ids=[f"{o}-{i}" for i, (o, *_) in enumerate(FLOAT_UNARY)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_float_unary_matches_onnxruntime(op, attrs, opset, bounds, dtype):
    rng = np.random.default_rng(len(op) * 7 + opset)
    for shape in SHAPES:
        compare(op, [sample(rng, shape, dtype, *bounds)], attrs, opset=opset)


@pytest.mark.parametrize("op", ["Sigmoid", "Tanh", "Exp", "Sqrt", "Abs", "Neg", "Sin", "Cos",
                                "Ceil", "Floor", "Round", "Reciprocal", "Sign", "Relu"])
def test_float64_unary_matches_onnxruntime(op):
    rng = np.random.default_rng(3)
    compare(op, [sample(rng, (4, 6), "float64", 0.3, 3) * rng.choice([-1, 1], (4, 6))],
            opset=13 if op != "Round" else 11)


def test_celu_matches_onnxruntime():
    rng = np.random.default_rng(5)
    for alpha in (1.0, 0.5, 2.0):
        compare("Celu", [sample(rng, (3, 4), "float32")], {"alpha": alpha}, opset=12)


def test_round_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, 2.6, -2.6, 0.0], np.float32)
    (got,) = compare("Round", [x], opset=11)
    np.testing.assert_array_equal(got, [0, 2, 2, -0, -2, -2, 2, 3, -3, 0])


def test_erf_without_scipy_matches_onnxruntime(monkeypatch):
    from tessera.ops import elementwise

    monkeypatch.setattr(elementwise, "_vectorized_erf", lambda: None)
    x = np.linspace(-4, 4, 33, dtype=np.float32)
    compare("Erf", [x], opset=13)
    compare("Gelu", [x.reshape(3, 11)], opset=20)
    compare("Erf", [np.array(0.3, np.float16)], opset=13)


def test_float16_thresholds_compare_in_float32():
    # float16(0.3) is 0.30005, above the float attribute 0.3: it passes the threshold
    x = np.array([0.3, 0.2998, -0.3, -0.2998, 0.5], np.float16)
    (got,) = compare("ThresholdedRelu", [x], {"alpha": 0.3}, opset=10)
    assert got[0] == x[0]
    compare("Shrink", [x], {"lambd": 0.3, "bias": 0.1}, opset=9)


def test_special_values_propagate():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0], np.float32)
    for op in ("Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Neg", "Ceil", "Floor", "Softsign",
               "Sign", "Erf"):
        compare(op, [x], opset=13)


@pytest.mark.parametrize("op, dtypes, opset", [
    ("Abs", ["int8", "int32", "int64", "uint8"], 13),
    ("Neg", ["int8", "int32", "int64"], 13),
    ("Sign", ["int8", "int32", "int64", "uint8"], 13),
    ("Relu", ["int8", "int32"], 14),
    ("Identity", ["int8", "int64", "uint8", "bool"], 21),
    ("BitwiseNot", ["int8", "int32", "int64", "uint8"], 18),
])
def test_integer_unary_matches_onnxruntime(op, dtypes, opset):
    rng = np.random.default_rng(11)
    for dtype in dtypes:
        for shape in SHAPES:
            compare(op, [sample(rng, shape, dtype, -128, 127)], opset=opset)


def test_abs_and_neg_wrap_at_the_most_negative_integer():
    x = np.array([-128, -127, 0, 127], np.int8)
    compare("Abs", [x], opset=13)
    compare("Neg", [x], opset=13)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "float32", "float16"])
def test_shrink_types(dtype):
    rng = np.random.default_rng(2)
    x = sample(rng, (3, 8), dtype, -20 if dtype[0] != "u" else 0, 20)
    compare("Shrink", [x], {"lambd": 3.5, "bias": 1.5}, opset=9)


def test_is_nan_and_is_inf():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -1.5, 3e38], np.float32)
    for dtype in ("float32", "float16", "float64"):
        with np.errstate(over="ignore"):  # 3e38 overflows float16 to inf, on purpose
            xs = x.astype(dtype)
        compare("IsNaN", [xs], opset=13)
        for neg in (0, 1):
            for pos in (0, 1):
                compare("IsInf", [xs], {"detect_negative": neg, "detect_positive": pos},
                        opset=20)


def test_not():
    rng = np.random.default_rng(4)
    for shape in SHAPES:
        compare("Not", [sample(rng, shape, "bool")], opset=7)


# -- PRelu --------------------------------------------------------------------------------------

@pytest.mark.parametrize("x_shape, slope_shape", [
    ((2, 3, 4, 5), (3, 1, 1)), ((2, 3, 4, 5), (1,)), ((2, 3, 4, 5), (5,)),
    ((2, 3, 4, 5), (2, 3, 4, 5)), ((3, 4), ()), ((3, 4), (1, 4)),
])
@pytest.mark.parametrize("dtype, opset", [("float32", 9), ("float16", 16), ("int32", 16)])
def test_prelu_broadcasts_slope(x_shape, slope_shape, dtype, opset):
    rng = np.random.default_rng(8)
    x = sample(rng, x_shape, dtype, -50, 50)
    slope = sample(rng, slope_shape, dtype, -3, 3)
    compare("PRelu", [x, slope], opset=opset)


def test_prelu_rejects_a_slope_that_does_not_broadcast_to_x():
    model = one_node_model("PRelu", [np.ones((3, 4), np.float32),
                                     np.ones((2, 3, 4), np.float32)], opset=16)
    with pytest.raises(ModelImportError, match="slope shape"):
        import_onnx(model)


# -- Clip ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("attrs", [{}, {"min": -1.0}, {"max": 0.5}, {"min": -1.0, "max": 0.5}])
def test_clip_attributes_before_opset_11(attrs):
    rng = np.random.default_rng(6)
    for dtype in ("float32", "float16"):
        x = sample(rng, (3, 5), dtype)
        model = one_node_model("Clip", [x], attrs, opset=10)
        fn = import_onnx(model)
        assert [n.op for n in fn.nodes] == ["Clip"]
        assert_same(evaluate_checked(fn, {"x0": x})[0], run_oracle(model, {"x0": x})[0])


def test_clip_with_min_above_max_gives_max():
    x = np.linspace(-3, 3, 10, dtype=np.float32)
    fn = import_onnx(one_node_model("Clip", [x], {"min": 1.0, "max": -1.0}, opset=10))
    assert_same(evaluate_checked(fn, {"x0": x})[0], np.full_like(x, -1.0))


@pytest.mark.parametrize("bounds", [(None, None), (-1.0, None), (None, 0.5), (-1.0, 0.5),
                                    (2.0, -2.0)])
@pytest.mark.parametrize("dtype, opset", [("float32", 11), ("float16", 12), ("int32", 12),
                                          ("int64", 13), ("uint8", 13), ("int8", 13)])
def test_clip_inputs(bounds, dtype, opset):
    rng = np.random.default_rng(9)
    offset = 8 if dtype == "uint8" else 0
    x = sample(rng, (4, 5), dtype, -10 + offset, 10 + offset)
    scale = 1 if np.dtype(dtype).kind == "f" else 4
    lo, hi = (None if b is None else np.array(b * scale + offset, dtype)
              for b in bounds)
    inputs = [x, lo, hi]
    while inputs[-1] is None:
        inputs.pop()
    compare("Clip", inputs, opset=opset)


def test_clip_bounds_may_be_initializers_or_runtime_inputs():
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    lo, hi = np.array(-1.0, np.float32), np.array(2.0, np.float32)
    model = one_node_model("Clip", [x, lo, hi], opset=13, consts={1})
    fn = import_onnx(model)
    clip = fn.nodes[0]
    assert clip.op == "Clip" and clip.inputs[1].is_constant and not clip.inputs[2].is_constant
    (got,) = evaluate_checked(fn, {"x0": x, "x2": hi})
    assert_same(got, run_oracle(model, {"x0": x, "x2": hi})[0])


def test_clip_rejects_a_non_scalar_bound():
    model = one_node_model("Clip", [np.ones((3, 4), np.float32), np.ones((4,), np.float32)],
                           opset=13)
    with pytest.raises(ModelImportError, match="scalar"):
        import_onnx(model)


# -- Cast ---------------------------------------------------------------------------------------

CAST_TYPES = ["float32", "float16", "float64", "int8", "int16", "int32", "int64", "uint8",
              "uint16", "uint32", "uint64", "bool"]


def cast_source(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(12)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        special = [np.nan, np.inf, -np.inf, 300.7, -300.7, 1e10, -1e10, 2.5, -2.5, -0.0, 0.0,
                   65504.0, 70000.0, 255.9, -1.5]
        body = rng.uniform(-400, 400, 40)
        with np.errstate(over="ignore"):  # 70000 overflows float16 to inf, on purpose
            return np.concatenate([special, body]).astype(dt)
    if dt == np.bool_:
        return rng.random(30) < 0.5
    info = np.iinfo(dt)
    edges = np.array([info.min, info.max, 0, 1], dt)
    body = rng.integers(max(info.min, -(2 ** 40)), min(info.max, 2 ** 40), 40).astype(dt)
    return np.concatenate([edges, body])


def in_range(x: np.ndarray, dst: str | np.dtype) -> np.ndarray:
    """Where a float -> integer cast of ``x`` is defined by ONNX (finite, and in range once
    truncated)."""
    info = np.iinfo(dst)
    with np.errstate(invalid="ignore"):
        t = np.trunc(x.astype(np.float64))
        return (t >= info.min) & (t <= info.max)


@pytest.mark.parametrize("src", CAST_TYPES)
def test_cast_matches_onnxruntime_bit_for_bit(src):
    """Bit for bit with onnxruntime wherever ONNX defines the result. Floats beyond an integer
    type's range and NaN are undefined in ONNX (onnxruntime gives what the CPU's conversion
    gives); Tessera saturates them, checked against the exact oracle."""
    x = cast_source(src)
    for dst in CAST_TYPES:
        for opset in (9, 19, 21):
            model = one_node_model("Cast", [x], {"to": helper.np_dtype_to_tensor_dtype(
                np.dtype(dst))}, opset=opset)
            assert_cast(x, run_tessera(model, {"x0": x})[0], run_oracle(model, {"x0": x})[0])


def assert_cast(x: np.ndarray, got: np.ndarray, ort_result: np.ndarray) -> None:
    """``got`` (a cast of ``x``) equals onnxruntime's result where ONNX defines it; float ->
    integer equals the exact saturating oracle everywhere."""
    if x.dtype.kind == "f" and ort_result.dtype.kind in "iu":
        assert_same(got, exact.saturating_cast(x, ort_result.dtype))
        defined = in_range(x, ort_result.dtype)
        assert_same(got[defined], ort_result[defined])
    else:
        assert_same(got, ort_result)


@pytest.mark.parametrize("src", ["float32", "float64"])
@pytest.mark.parametrize("dst", [*exact.INT_TYPES, "uint64"])
def test_float_to_integer_cast_saturates(src, dst):
    """Out-of-range floats clamp to the integer type's limits (±inf too), NaN gives 0, in-range
    values truncate toward zero; as a graph input and as a folded constant."""
    x = exact.cast_values(src, dst, np.random.default_rng(3))
    want = exact.saturating_cast(x, dst)
    to = {"to": helper.np_dtype_to_tensor_dtype(np.dtype(dst))}
    assert_same(run_tessera(one_node_model("Cast", [x], to, opset=13), {"x0": x})[0], want)
    fn = import_onnx(one_node_model("Cast", [x], to, opset=13, consts={0}))
    assert fn.nodes == [] or all(n.op == "Identity" for n in fn.nodes)
    assert_same(evaluate_checked(fn, {})[0], want)
    assert_same(get_schema("Cast").reference(x, to=DType.from_numpy(np.dtype(dst))), want)


def test_float_to_bool_cast_is_nonzero():
    x = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-30, -3.0, 1e30], np.float32)
    model = one_node_model("Cast", [x], {"to": TensorProto.BOOL}, opset=13)
    assert_same(run_tessera(model, {"x0": x})[0], x != 0)


def test_cast_ignores_saturate_and_elides_a_cast_to_the_same_type():
    x = np.array([1.5, -2.5, np.nan], np.float32)
    model = one_node_model("Cast", [x], {"to": TensorProto.INT32, "saturate": 0}, opset=19)
    assert_same(run_tessera(model, {"x0": x})[0], np.array([1, -2, 0], np.int32))
    fn = import_onnx(one_node_model("Cast", [x], {"to": TensorProto.FLOAT}, opset=13))
    assert fn.nodes == [] or [n.op for n in fn.nodes] == ["Identity"]
    assert_same(evaluate_checked(fn, {"x0": x})[0], x)


@pytest.mark.parametrize("to", [TensorProto.STRING, TensorProto.COMPLEX64])
def test_cast_to_an_unsupported_type_is_an_import_error(to):
    model = one_node_model("Cast", [np.ones(3, np.float32)], {"to": to}, opset=21)
    with pytest.raises(ModelImportError, match="not supported"):
        import_onnx(model)


def test_cast_folds_constants():
    x = np.array([1.7, -2.2, 300.0], np.float32)
    model = one_node_model("Cast", [x], {"to": TensorProto.UINT8}, opset=13, consts={0})
    fn = import_onnx(model)
    assert fn.nodes == [] or all(n.op == "Identity" for n in fn.nodes)
    assert_same(evaluate_checked(fn, {})[0], np.array([1, 0, 255], np.uint8))  # saturates


@pytest.mark.parametrize("src, dst", [("float32", "int32"), ("float16", "float32"),
                                      ("int64", "float16"), ("bool", "float32"),
                                      ("float64", "uint8")])
def test_cast_like(src, dst):
    x = cast_source(src)
    like = np.ones((2,), dst)
    model = one_node_model("CastLike", [x, like], opset=19)
    fn = import_onnx(model)
    assert [n.op for n in fn.nodes] == ["Cast"]
    feeds = feeds_of([x, like])
    assert_cast(x, evaluate_checked(fn, feeds)[0], run_oracle(model, feeds)[0])


# -- schema and errors --------------------------------------------------------------------------

def test_every_op_has_an_explicit_infer_and_the_right_pattern():
    unary = ["Identity", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Erf", "Abs", "Neg",
             "Ceil", "Floor", "Round", "Sign", "Reciprocal", "Sin", "Cos", "Tan", "Asin",
             "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Elu", "Selu",
             "LeakyRelu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Gelu", "Mish",
             "Celu", "ThresholdedRelu", "Shrink", "Swish", "Clip", "Cast", "IsNaN", "IsInf",
             "Not", "BitwiseNot"]
    for op in unary:
        schema = get_schema(op)
        assert schema.infer is not None, op
        assert schema.pattern == OpPattern.ELEMWISE, op
    assert get_schema("PRelu").pattern == OpPattern.BROADCAST


@pytest.mark.parametrize("op, dtype", [("Sigmoid", "int32"), ("Exp", "int64"), ("Not", "float32"),
                                       ("IsNaN", "int32"), ("BitwiseNot", "float32"),
                                       ("Neg", "uint8")])
def test_wrong_element_type_is_an_import_error(op, dtype):
    model = one_node_model(op, [np.ones(3, dtype)], opset=18)
    with pytest.raises(ModelImportError, match=f"{op}.*element type {dtype}"):
        import_onnx(model)


def test_gelu_rejects_an_unknown_approximation():
    model = one_node_model("Gelu", [np.ones(3, np.float32)], {"approximate": "fast"}, opset=20)
    with pytest.raises(ModelImportError, match="approximate"):
        import_onnx(model)


def test_infer_gives_the_input_type():
    t = TensorType((2, 3), DType.float16)
    assert get_schema("Gelu").infer(t, approximate="tanh") == t
    assert get_schema("IsInf").infer(t, detect_negative=1, detect_positive=1) == \
        t.with_dtype(DType.bool)
    assert get_schema("Cast").infer(t, to=DType.int8) == t.with_dtype(DType.int8)
