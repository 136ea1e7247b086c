"""Reduction ops (tessera.ops.reduce) and their ONNX converters, checked against onnxruntime on
one-node models over random data: axes as attributes and as inputs, keepdims, empty axes,
empty reductions, ties in ArgMax/ArgMin/TopK, cumulative sums and products."""

from __future__ import annotations

from functools import partial

import numpy as np
import onnx_node
import pytest
from onnx_node import one_node_model

from tessera.errors import NeedsConstantError, OpError
from tessera.frontend.onnx import import_onnx
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import OpPattern, get_schema

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]

# -- harness ------------------------------------------------------------------------------------

check = partial(onnx_node.check, opset=18, rtol=1e-5, atol=1e-6)


@pytest.fixture
def r() -> np.random.Generator:
    return np.random.default_rng(11)


def data(r: np.random.Generator, shape: tuple[int, ...], op: str = "",
         dtype=np.float32) -> np.ndarray:
    if np.dtype(dtype).kind in "iu":
        return r.integers(1, 5, shape).astype(dtype)
    if op == "ReduceLogSum":  # a positive sum
        return r.uniform(0.1, 2.0, shape).astype(dtype)
    if op == "ReduceProd":
        return r.uniform(0.5, 1.5, shape).astype(dtype)
    return r.standard_normal(shape).astype(dtype)


def axes_since(op: str) -> int:
    return 13 if op == "ReduceSum" else 18


# -- Reduce* ------------------------------------------------------------------------------------

AXES = [None, [0], [-1], [1, 2], [2, 0], [0, 1, 2]]


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_axes_attribute(r, op, axes, keepdims):
    attrs = {"keepdims": keepdims}
    if axes is not None:
        attrs["axes"] = axes
    check(op, [data(r, (3, 4, 5), op)], attrs, opset=11, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_axes_input(r, op, axes, keepdims):
    x = data(r, (3, 4, 5), op)
    inputs = [x] if axes is None else [x, np.array(axes, np.int64)]
    check(op, inputs, {"keepdims": keepdims}, opset=axes_since(op), consts={1},
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("noop", [0, 1])
def test_reduce_empty_axes(r, op, noop):
    inputs, attrs = [data(r, (2, 3), op), np.zeros(0, np.int64)], {"noop_with_empty_axes": noop}
    check(op, inputs, attrs, opset=axes_since(op), consts={1}, rtol=1e-4, atol=1e-5)
    fn = import_onnx(one_node_model(op, inputs, attrs, opset=axes_since(op), consts={1}))
    identity = op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd")
    assert [n.op for n in fn.nodes] == (["Identity"] if noop and identity else [op])


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                                "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                                "ReduceLogSumExp"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_empty_set_gives_identity(r, op, keepdims):
    x = np.zeros((2, 0, 4), np.float32)
    check(op, [x, np.array([1], np.int64)], {"keepdims": keepdims}, opset=axes_since(op),
          consts={1})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                                "ReduceMean", "ReduceSumSquare", "ReduceL1"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_reduce_dtypes(r, op, dtype):
    check(op, [data(r, (3, 4), op, dtype)], {"axes": [1]}, opset=13 if op != "ReduceSum" else 11)


def test_reduce_float16(r):
    x = r.standard_normal((4, 64)).astype(np.float16)
    check("ReduceSum", [x, np.array([1], np.int64)], opset=13, consts={1}, rtol=1e-2, atol=1e-2)
    check("ReduceMean", [x], {"axes": [1]}, opset=13, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_reduce_bool(r, op):
    check(op, [r.random((3, 4)) > 0.5, np.array([1], np.int64)], opset=20, consts={1})


def test_reduce_scalar_keeps_type(r):
    x = np.array([[2.0]], np.float32)
    check("ReduceMean", [x], {"keepdims": 0}, opset=13)
    fn = import_onnx(one_node_model("ReduceMean", [x], {"keepdims": 0}, opset=13))
    assert fn.outputs[0].type == TensorType((), DType.float32)


def test_reduce_runtime_axes_need_a_constant(r):
    model = one_node_model("ReduceSum", [data(r, (2, 3)), np.array([1], np.int64)], opset=13)
    with pytest.raises(NeedsConstantError) as e:
        import_onnx(model, check=False)
    assert e.value.inputs == ["x1"]


def test_reduce_schema():
    for op in REDUCE_OPS:
        schema = get_schema(op)
        assert schema.pattern == OpPattern.COMM_REDUCE and schema.infer is not None
        attrs = schema.check("n", [TensorType((2, 3, 4), DType.float32)],
                             {"axes": [-1, 0], "keepdims": 0})
        assert schema.infer_types("n", [TensorType((2, 3, 4), DType.float32)], attrs) == \
            [TensorType((3,), DType.float32)]
    with pytest.raises(OpError, match="out of range"):
        get_schema("ReduceSum").infer_types("n", [TensorType((2,), DType.float32)],
                                            {"axes": [3], "keepdims": 1})


# -- ArgMax / ArgMin ----------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reduce(r, op, axis, keepdims, last):
    x = r.integers(0, 3, (3, 4, 5)).astype(np.float32)  # many ties
    check(op, [x], {"axis": axis, "keepdims": keepdims, "select_last_index": last}, opset=13)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", [np.int32, np.float64, np.uint8])
def test_arg_reduce_dtypes_and_opset11(r, op, dtype):
    x = r.integers(0, 100, (4, 6)).astype(dtype)
    check(op, [x], {"axis": 1}, opset=11)


# -- TopK ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("k", [0, 1, 3])
def test_topk(r, largest, axis, k):
    x = r.integers(-3, 3, (4, 5, 3)).astype(np.float32)  # ties resolved by lower index first
    check("TopK", [x, np.array([k], np.int64)], {"axis": axis, "largest": largest},
          opset=11, consts={1}, outputs=2)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_topk_dtypes(r, dtype):
    x = r.integers(-100, 100, (3, 8)).astype(dtype)
    x[0, :4] = np.iinfo(np.int32).min if dtype != np.float64 else -np.inf
    check("TopK", [x, np.array([5], np.int64)], {"largest": 1}, opset=11, consts={1},
          outputs=2)
    check("TopK", [x, np.array([5], np.int64)], {"largest": 0}, opset=11, consts={1},
          outputs=2)


def test_topk_old_opsets(r):
    x = r.standard_normal((3, 6)).astype(np.float32)
    check("TopK", [x], {"k": 2, "axis": 0}, opset=9, outputs=2)
    check("TopK", [x, np.array([4], np.int64)], opset=10, consts={1}, outputs=2)


# -- CumSum / CumProd ---------------------------------------------------------------------------

@pytest.mark.parametrize("op,opset", [("CumSum", 14), ("CumSum", 11), ("CumProd", 26)])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumulative(r, op, opset, axis, exclusive, reverse):
    x = data(r, (3, 4, 2), "ReduceProd")
    check(op, [x, np.array(axis, np.int64)], {"exclusive": exclusive, "reverse": reverse},
          opset=opset, consts={1}, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_cumsum_dtypes(r, dtype):
    x = data(r, (5, 3), dtype=dtype)
    check("CumSum", [x, np.array([0], np.int32)], {"exclusive": 1}, opset=14, consts={1})
