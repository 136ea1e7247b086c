"""The direct numpy forms of ONNX ops (split plans' dynamic segments) against onnx's reference
implementation on random data, and the calls they hand back to it."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from tessera.runtime.onnx_fast_ops import (
    EXPAND_COPY_LIMIT,
    INLINE_SCOPE,
    Unwritten,
    fast_op,
    inline_op,
    list_operands,
)

RNG = np.random.default_rng(3)


def _f(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _i(*shape: int) -> np.ndarray:
    return RNG.integers(-4, 5, shape).astype(np.int64)


CASES: list[tuple[str, dict[str, object], list[np.ndarray]]] = [
    ("Add", {}, [_f(2, 3, 4), _f(3, 1)]),
    ("Sub", {}, [_i(2, 3), _i(3)]),
    ("Mul", {}, [_f(1, 8, 4, 5), np.array(0.125, np.float32)]),
    ("Div", {}, [_f(2, 3), _f(2, 3) + 3]),
    ("MatMul", {}, [_f(1, 4, 1, 16), _f(1, 4, 16, 7)]),
    ("MatMul", {}, [_f(3, 5), _f(2, 5, 4)]),
    ("Equal", {}, [_i(2, 5), _i(1, 5)]),
    ("Less", {}, [_f(4), _f(4)]),
    ("LessOrEqual", {}, [_i(1, 1, 1, 6), _i(1, 1, 3, 1)]),
    ("Greater", {}, [_i(3), _i(3)]),
    ("GreaterOrEqual", {}, [_f(2, 2), _f(2, 1)]),
    ("And", {}, [_i(2, 3) > 0, _i(3) > 0]),
    ("Or", {}, [_i(2, 3) > 0, _i(2, 3) > 0]),
    ("Not", {}, [_i(5) > 0]),
    ("IsNaN", {}, [np.array([1.0, np.nan, -np.inf, 0.0], np.float32)]),
    ("Neg", {}, [_f(3, 2)]),
    ("Sqrt", {}, [np.abs(_f(6))]),
    ("Exp", {}, [_f(6)]),
    ("Identity", {}, [_i(2, 2)]),
    ("Where", {}, [_i(1, 1, 1, 6) > 0, _f(1, 4, 1, 6), np.array([-1e9], np.float32)]),
    ("Cast", {"to": TensorProto.FLOAT}, [_i(2, 3)]),
    ("Cast", {"to": TensorProto.INT64}, [_i(2, 3) > 0]),
    ("Cast", {"to": TensorProto.BOOL}, [_i(7)]),
    ("Reshape", {}, [_f(1, 4, 2, 7, 16), np.array([1, 8, -1, 16], np.int64)]),
    ("Reshape", {}, [_f(2, 3, 4), np.array([0, 12], np.int64)]),
    ("Unsqueeze", {}, [_f(1, 4, 7, 16), np.array([2], np.int64)]),
    ("Unsqueeze", {}, [_f(3), np.array([0, -1], np.int64)]),
    ("Squeeze", {}, [_f(1, 3, 1, 2), np.array([0, 2], np.int64)]),
    ("Expand", {}, [_f(1, 4, 1, 7, 16), np.array([1, 4, 2, 7, 16], np.int64)]),
    ("Expand", {}, [_f(3, 1), np.array([2, 1, 6], np.int64)]),
    ("Concat", {"axis": 2}, [_f(1, 4, 6, 16), _f(1, 4, 1, 16)]),
    ("Concat", {"axis": -1}, [_i(2, 0), _i(2, 3)]),
    ("Transpose", {"perm": [0, 1, 3, 2]}, [_f(1, 8, 7, 16)]),
    ("Transpose", {}, [_f(2, 3, 4)]),
    ("Softmax", {"axis": -1}, [_f(1, 8, 1, 9) * 10]),
    ("Softmax", {"axis": 1}, [_f(2, 5, 3)]),
    ("Flatten", {"axis": 2}, [_f(2, 3, 4, 5)]),
    ("Flatten", {}, [_f(1, 9)]),
    ("Gather", {"axis": 0}, [_f(16, 4), np.array([[3, -1]], np.int64)]),
    ("Gather", {"axis": 1}, [_f(2, 5, 3), np.array(2, np.int64)]),
    ("Range", {}, [np.array(2, np.int64), np.array(9, np.int64), np.array(3, np.int64)]),
    ("Max", {}, [_i(3, 1), _i(3, 4), _i(4)]),
    ("Min", {}, [_f(2, 3), _f(3)]),
    ("Reshape", {"allowzero": 0}, [_f(2, 6), np.array([3, -1], np.int64)]),
    ("Reshape", {"allowzero": 1}, [_f(2, 6), np.array([4, -1], np.int64)]),
    ("Reshape", {"allowzero": 1}, [_f(2, 0, 3), np.array([0, 6], np.int64)]),
    ("Range", {}, [np.array(0.5, np.float32), np.array(3, np.float32),
                   np.array(0.7, np.float32)]),
    ("Range", {}, [np.array(9, np.int32), np.array(-2, np.int32), np.array(-4, np.int32)]),
    ("GatherND", {}, [_f(3, 4, 5), np.array([[0, -1], [2, 3]], np.int64)]),
    ("GatherND", {}, [_i(2, 3), np.array([[[1], [0]]], np.int64)]),
    ("GatherND", {"batch_dims": 0}, [_f(2, 3), np.array([[1, 2]], np.int64)]),
    ("Expand", {}, [_f(1, 300), np.array([300, 1], np.int64)]),  # stays a broadcast view
    ("Expand", {}, [_f(2, 3), np.array([2, 3], np.int64)]),  # already that shape
    ("Expand", {}, [_f(1, 1, 3), np.array([3], np.int64)]),  # the input is the longer
    ("Expand", {}, [_f(2, 1), np.array([1, 3], np.int64)]),  # each side broadcasts the other
    ("Expand", {}, [_f(2, 1), np.array([2, 0], np.int64)]),  # a size of 0
    ("Expand", {}, [_f(0, 1), np.array([1, 4], np.int64)]),
    ("Unsqueeze", {}, [_f(2, 3), np.array([1], np.int64)]),
    ("Unsqueeze", {}, [np.array(2.5, np.float32), np.array([0, 1], np.int64)]),
]


def _reference(op: str, attrs: dict[str, object], args: list[np.ndarray]) -> list[np.ndarray]:
    names = [f"i{k}" for k in range(len(args))]
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in zip(names, args)],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, args)))


@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[f"{op}-{i}" for i, (op, _, _) in enumerate(CASES)])
def test_fast_form_matches_the_reference(case: int) -> None:
    op, attrs, args = CASES[case]
    node = helper.make_node(op, [f"i{k}" for k in range(len(args))], ["y"], **attrs)
    form = fast_op(node, 17)
    assert form is not None, f"{op} has no fast form"
    (got,) = form(args)
    (want,) = _reference(op, attrs, args)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[f"{op}-{i}" for i, (op, _, _) in enumerate(CASES)])
def test_inline_form_matches_the_reference(case: int) -> None:
    """The expression generated code writes for a node, evaluated as generated code does."""
    op, attrs, args = CASES[case]
    names = [f"i{k}" for k in range(len(args))]
    form = inline_op(helper.make_node(op, names, ["y"], **attrs), 17)
    if form is None:
        assert op in ("Div", "Cast", "Max", "Min", "Squeeze"), f"{op} has no inline form"
        return
    got = eval(form(names), dict(INLINE_SCOPE), dict(zip(names, args)))  # noqa: S307
    (want,) = _reference(op, attrs, args)
    assert np.asarray(got).dtype == want.dtype and np.shape(got) == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[f"{op}-{i}" for i, (op, _, _) in enumerate(CASES)])
def test_inline_form_with_lists_constants_and_ranks(case: int) -> None:
    """The expression as a split plan writes it: the second operand a constant of the model
    (Unsqueeze's axes then in the text), the inputs' ranks given, and the shape operands of
    :func:`list_operands` read as Python lists or ints, not arrays."""
    op, attrs, args = CASES[case]
    names = [f"i{k}" for k in range(len(args))]
    node = helper.make_node(op, names, ["y"], **attrs)
    constants = {names[1]: args[1]} if len(args) > 1 else {}
    form = inline_op(node, 17, constants, {n: a.ndim for n, a in zip(names, args)})
    if form is None:
        return
    given = {n: (a.tolist() if k in list_operands(node) and a.dtype.kind == "i" else a)
             for k, (n, a) in enumerate(zip(names, args))}
    got = eval(form(names), dict(INLINE_SCOPE), given)  # noqa: S307
    (want,) = _reference(op, attrs, args)
    assert np.asarray(got).dtype == want.dtype and np.shape(got) == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_unsqueeze_indexes_only_at_the_rank_it_was_written_for() -> None:
    node = helper.make_node("Unsqueeze", ["x", "a"], ["y"])
    axes = np.array([0, -1], np.int64)
    form = inline_op(node, 17, {"a": axes}, {"x": 2})  # written for rank 2
    assert form is not None and "None" in form(["x", "a"])
    for x in (_f(3, 4), _f(2, 3, 4), _f(5)):  # another rank: the general form
        got = eval(form(["x", "a"]), dict(INLINE_SCOPE), {"x": x})  # noqa: S307
        (want,) = _reference("Unsqueeze", {}, [x, axes])
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        assert np.shares_memory(got, x)  # a view, as reshape's
    bad = inline_op(node, 17, {"a": np.array([0, 0], np.int64)}, {"x": 2})
    assert bad is not None
    with pytest.raises(ValueError, match="Unsqueeze: axes"):  # repeated axes
        eval(bad(["x", "a"]), dict(INLINE_SCOPE), {"x": _f(3, 4)})  # noqa: S307


def test_expand_that_does_not_broadcast_raises() -> None:
    expand = inline_op(helper.make_node("Expand", ["x", "s"], ["y"]), 17)
    assert expand is not None
    for x, shape in ((_f(3, 2), [3, 4]), (_f(2), [-1]), (_f(3, 2), [3])):
        for operand in (np.array(shape, np.int64), shape):
            with pytest.raises(ValueError):
                eval(expand(["x", "s"]), dict(INLINE_SCOPE), {"x": x, "s": operand})  # noqa: S307


def test_inline_forms_raise_for_bad_input() -> None:
    unsqueeze = inline_op(helper.make_node("Unsqueeze", ["x", "a"], ["y"]), 17,
                          {"a": np.array([4], np.int64)})
    assert unsqueeze is not None
    with pytest.raises(ValueError, match="Unsqueeze: axes"):
        eval(unsqueeze(["x", "a"]), dict(INLINE_SCOPE), {"x": _f(2, 3)})  # noqa: S307
    gather = inline_op(helper.make_node("GatherND", ["d", "i"], ["y"]), 17)
    assert gather is not None
    with pytest.raises(ValueError, match="GatherND"):
        eval(gather(["d", "i"]), dict(INLINE_SCOPE),  # noqa: S307
             {"d": _f(2, 3), "i": np.zeros((2, 3), np.int64)})
    # several outputs, or another domain: no inline form
    assert inline_op(helper.make_node("Split", ["x"], ["a", "b"]), 17) is None
    assert inline_op(helper.make_node("Add", ["a", "b"], ["y"], domain="com.example"), 17) is None


def test_calls_that_need_the_reference_are_handed_back() -> None:
    div = fast_op(helper.make_node("Div", ["a", "b"], ["y"]), 17)
    with pytest.raises(Unwritten):  # integer division truncates in ONNX, floors in numpy
        div([np.array([-7], np.int64), np.array([2], np.int64)])
    cast = fast_op(helper.make_node("Cast", ["a"], ["y"], to=TensorProto.INT32), 17)
    with pytest.raises(Unwritten):
        cast([np.array([np.nan], np.float32)])
    # forms that are not written: another domain, old opsets, attributes not read
    assert fast_op(helper.make_node("Softmax", ["a"], ["y"]), 11) is None
    assert fast_op(helper.make_node("Unsqueeze", ["a"], ["y"], axes=[0]), 11) is None
    assert fast_op(helper.make_node("GatherND", ["a", "i"], ["y"], batch_dims=1), 17) is None
    assert fast_op(helper.make_node("Add", ["a", "b"], ["y"], domain="com.example"), 17) is None
    assert fast_op(helper.make_node("Cast", ["a"], ["y"], to=TensorProto.BFLOAT16), 17) is None


def test_unsqueeze_with_constant_axes() -> None:
    node = helper.make_node("Unsqueeze", ["x", "axes"], ["y"])
    axes = np.array([0, -1], np.int64)
    form = fast_op(node, 17, {"axes": axes})
    x = _f(3, 4)
    (got,) = form([x, axes])
    (want,) = _reference("Unsqueeze", {}, [x, axes])
    assert got.shape == want.shape == (1, 3, 4, 1)
    with pytest.raises(Unwritten):  # an axis beyond the rank: the reference's error
        fast_op(node, 17, {"axes": np.array([5], np.int64)})([x, np.array([5], np.int64)])


def test_expand_copies_small_results_and_views_large_ones() -> None:
    # a small Expand is written out (cheaper than a broadcast view, and the Reshape that
    # follows is then a view); a large one stays a read-only view of its input
    expand = fast_op(helper.make_node("Expand", ["x", "s"], ["y"]), 17)
    x = _f(1, 2, 1, 3)
    (y,) = expand([x, np.array([1, 2, 4, 3], np.int64)])
    assert y.flags.writeable and not np.shares_memory(x, y)
    np.testing.assert_array_equal(y, np.broadcast_to(x, (1, 2, 4, 3)))
    big = _f(1, 64)
    (z,) = expand([big, np.array([EXPAND_COPY_LIMIT // 32, 64], np.int64)])
    assert not z.flags.writeable and np.shares_memory(big, z)
