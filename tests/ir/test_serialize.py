"""Tests for tessera.ir.serialize: the JSON round trip of functions."""

import json
import math

import numpy as np
import pytest

from tessera.backends.reference.interpreter import evaluate_function
from tessera.errors import IRError
from tessera.ir.graph import Function, Node, Value
from tessera.ir.serialize import from_json, function_to_dict, to_json
from tessera.ir.types import DType, TensorType
from tessera.ir.verifier import verify

F32 = DType.float32


def build() -> Function:
    rng = np.random.default_rng(0)
    fn = Function("main", {"output_names": ["y", "z"], "eps": float("inf")})
    x = fn.add_input("x", TensorType((2, 3), F32))
    w = fn.constant(rng.standard_normal((2, 3)).astype(np.float32), "w")
    flags = fn.constant(np.array([True, False, True]), "flags")
    scalar = fn.constant(np.float32(1.5), "scalar")
    a = fn.op("Add", x, w, name="a")
    b = fn.op("Add", a, scalar, name="b")
    y = fn.op("LeakyRelu", b, name="y", alpha=0.3)
    fn.outputs = [y, flags]
    return fn


def strict_loads(text: str):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("indent", [None, 2])
def test_round_trip_text_and_numerics(indent):
    fn = build()
    text = to_json(fn, indent=indent)
    strict_loads(text)
    back = from_json(text)
    verify(back)
    assert str(back) == str(fn)
    assert back.attrs["output_names"] == ["y", "z"]
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    want = evaluate_function(fn, {"x": x})
    got = evaluate_function(back, {"x": x})
    assert want.keys() == got.keys()
    for k in want:
        assert got[k].dtype == want[k].dtype
        np.testing.assert_array_equal(got[k], want[k])
    # a second round trip is byte-identical
    assert to_json(back, indent=indent) == text


def test_constants_keep_dtype_shape_and_bytes():
    fn = build()
    back = from_json(to_json(fn))
    for a, b in zip(fn.constants(), back.constants()):
        assert (a.name, a.type) == (b.name, b.type)
        np.testing.assert_array_equal(a.data, b.data)
        assert b.data.flags.writeable  # a copy, not a view of the base64 buffer


ATTRS = {
    "ints": [1, -2, 3],
    "floats": [0.5, float("inf"), float("-inf")],
    "nan": float("nan"),
    "inf": float("inf"),
    "dtype": DType.int8,
    "dtypes": [DType.float16, DType.bool],
    "tensor": np.arange(6, dtype=np.int64).reshape(2, 3),
    "bool_tensor": np.array([True, False]),
    "scalar_tensor": np.array(2.5, np.float32),
    "empty": np.zeros((0, 4), np.float32),
    "text": "SAME_UPPER",
    "none": None,
    "nested": [[1, 2], [3]],
}


def same_attr(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and np.array_equal(a, b))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, DType):
        return isinstance(b, DType) and a is b
    if isinstance(a, (list, tuple)):
        return isinstance(b, list) and len(a) == len(b) and all(map(same_attr, a, b))
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("key", sorted(ATTRS))
def test_attribute_round_trip(key):
    fn = Function("f", {key: ATTRS[key]})
    x = fn.add_input("x", TensorType((1,), F32))
    out = Value("o", TensorType((1,), F32))
    fn.append(Node("Custom", "n", [x], [out], {key: ATTRS[key]}))
    fn.outputs = [out]
    text = to_json(fn)
    strict_loads(text)
    back = from_json(text)
    assert same_attr(ATTRS[key], back.nodes[0].attrs[key])
    assert same_attr(ATTRS[key], back.attrs[key])


@pytest.mark.parametrize("value", [np.float32("inf"), np.float64("-inf"), np.float32("nan")])
def test_numpy_non_finite_floats_are_strict_json(value):
    fn = Function("f", {"v": value})
    text = to_json(fn)
    strict_loads(text)
    back = from_json(text).attrs["v"]
    assert isinstance(back, float)
    assert (math.isnan(back) and math.isnan(value)) or back == value


def test_scalar_constant_round_trip():
    fn = Function()
    x = fn.add_input("x", TensorType((2,), F32))
    s = Value("s", TensorType((), F32), data=np.array(0.5, np.float32))  # a 0-d parameter
    fn.reserve_name("s")
    fn.outputs = [fn.op("Add", x, s, name="y")]
    back = from_json(to_json(fn))
    assert back.constants()[0].type == TensorType((), F32)
    assert back.constants()[0].data.shape == ()
    assert str(back) == str(fn)


def test_numpy_scalars_become_python_numbers():
    fn = Function("f", {"i": np.int64(3), "f": np.float32(0.25), "l": [np.int32(1)],
                        "b": np.bool_(True)})
    back = from_json(to_json(fn))
    assert back.attrs == {"i": 3, "f": 0.25, "l": [1], "b": True}
    assert type(back.attrs["i"]) is int and type(back.attrs["f"]) is float


def test_parameters_kept_apart():
    fn = build()
    text = to_json(fn, with_data=False)
    assert "data" not in json.dumps(json.loads(text)["function"]["constants"])
    params = {v.name: v.data for v in fn.constants()}
    back = from_json(text, params=params)
    assert str(back) == str(fn)
    with pytest.raises(IRError, match="constant 'w' has no data"):
        from_json(text, params={k: v for k, v in params.items() if k != "w"})
    bad = dict(params, w=params["w"].astype(np.float64))
    with pytest.raises(IRError, match=r"constant 'w': data is float64\[2, 3\], expected "
                                      r"float32\[2, 3\]"):
        from_json(text, params=bad)


def test_held_constants_round_trip_without_data():
    """A constant a backend holds in its compiled form (a region loaded from an artifact) is a
    constant without data: it verifies, prints, copies and round-trips, and reading its data
    is an IRError naming it and the backend."""
    fn = build()
    doc = json.loads(to_json(fn, with_data=False))
    doc["function"]["constants"]["w"]["held_by"] = "npu"
    params = {v.name: v.data for v in fn.constants() if v.name != "w"}
    back = from_json(json.dumps(doc), params=params)
    (w,) = [v for v in back.constants() if v.name == "w"]
    assert w.is_constant and w.is_held and w.held_by == "npu"
    with pytest.raises(IRError, match="constant %w has no data here: backend 'npu' holds it"):
        _ = w.data
    verify(back)
    assert "%w: const float32[2, 3] (held by npu)" in str(back)
    assert [v.is_held for v in back.copy().constants()] == [v.is_held for v in back.constants()]
    again = json.loads(to_json(back, with_data=False))["function"]["constants"]["w"]
    assert again == {"type": {"shape": [2, 3], "dtype": "float32"}, "held_by": "npu"}
    with pytest.raises(IRError, match="constant 'w' has no data to write"):
        to_json(back)
    assert not fn.constants()[0].is_held  # constants with data are not held


def test_region_body_round_trip():
    inner = build()
    outer = Function("model")
    x = outer.add_input("x", TensorType((2, 3), F32))
    y = Value("y", TensorType((2, 3), F32))
    z = Value("z", TensorType((3,), DType.bool))
    outer.append(Node("Region", "r0", [x], [y, z], {"backend": "ref"}, body=inner))
    outer.outputs = [y, z]
    back = from_json(to_json(outer))
    assert back.nodes[0].body is not None
    assert str(back) == str(outer)
    verify(back)


def test_dict_form_is_plain_json():
    d = function_to_dict(build())
    assert json.loads(json.dumps(d)) == d
    assert [n["op"] for n in d["nodes"]] == ["Add", "Add", "LeakyRelu"]
    assert d["outputs"] == ["y", "flags"]


@pytest.mark.parametrize("text, message", [
    ("not json", "not JSON"),
    ('{"format": 99, "function": {}}', "unknown graph format 99"),
    ("[1, 2]", "unknown graph format"),
    ('{"format": 1, "function": {"name": "f"}}', "malformed function JSON"),
])
def test_malformed_documents(text, message):
    with pytest.raises(IRError, match=message):
        from_json(text)


def test_undefined_references():
    d = json.loads(to_json(build()))
    d["function"]["nodes"][1]["inputs"][0] = "ghost"
    with pytest.raises(IRError, match="node b reads undefined value 'ghost'"):
        from_json(json.dumps(d))
    d = json.loads(to_json(build()))
    d["function"]["outputs"] = ["ghost"]
    with pytest.raises(IRError, match="function output 'ghost' is not defined"):
        from_json(json.dumps(d))
    d = json.loads(to_json(build()))
    d["function"]["attrs"]["bad"] = {"__what__": 1}
    with pytest.raises(IRError, match="unknown attribute encoding"):
        from_json(json.dumps(d))
