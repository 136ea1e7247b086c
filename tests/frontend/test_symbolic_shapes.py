"""Symbolic shape inference over ONNX graphs: every rule checked against onnx's reference
evaluator at several concrete sizes (shapes, and the contents of small integer tensors), the
exporters' shape arithmetic folded to expressions, unknowns left unknown."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tessera.frontend.onnx.symbolic_eval import to_python, uses_any_var
from tessera.frontend.onnx.symbolic_shapes import infer_symbolic


def _i64(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _node(op: str, ins: list[str], out: str, **attrs: object) -> onnx.NodeProto:
    return helper.make_node(op, ins, [out], **attrs)


# x: float32[a, b, 4], m: int64[1, c]; each case: nodes, extra initializers, outputs to check
CASES: dict[str, tuple[list[onnx.NodeProto], list[onnx.TensorProto], list[str]]] = {
    "shape_gather_concat_reshape": (
        [_node("Shape", ["x"], "s"), _node("Gather", ["s", "zero_s"], "a"),
         _node("Gather", ["s", "one_s"], "b"), _node("Mul", ["b", "four"], "b4"),
         _node("Unsqueeze", ["a", "zero"], "a1"), _node("Unsqueeze", ["b4", "zero"], "b1"),
         _node("Concat", ["a1", "b1"], "t", axis=0), _node("Reshape", ["x", "t"], "y")],
        [_i64("zero", [0]), numpy_helper.from_array(np.array(1, np.int64), "one_s"),
         numpy_helper.from_array(np.array(0, np.int64), "zero_s"),
         numpy_helper.from_array(np.array(4, np.int64), "four")],
        ["s", "a", "b4", "t", "y"]),
    "reshape_minus_one_and_zero": (
        [_node("Reshape", ["x", "t"], "y"), _node("Shape", ["y"], "s")],
        [_i64("t", [0, -1])], ["y", "s"]),
    "concat_along_symbolic_axis": (
        [_node("Concat", ["x", "x"], "y", axis=1), _node("Shape", ["y"], "s"),
         _node("Size", ["y"], "n")],
        [], ["y", "s", "n"]),
    "broadcast_add_where_equal": (
        [_node("Shape", ["x"], "s"), _node("Equal", ["s", "minus1"], "e"),
         _node("Where", ["e", "ones", "s"], "w"), _node("Add", ["x", "col"], "y"),
         _node("Shape", ["y"], "ys")],
        [_i64("minus1", [-1]), _i64("ones", [1, 1, 1]),
         numpy_helper.from_array(np.ones((1, 1, 4), np.float32), "col")],
        ["e", "w", "y", "ys"]),
    "range_and_constant_of_shape": (
        [_node("Shape", ["m"], "s"), _node("Gather", ["s", "one_s"], "c"),
         _node("Range", ["zero_s", "c", "one_s"], "r"),
         _node("Unsqueeze", ["c", "zero"], "c1"),
         _node("ConstantOfShape", ["c1"], "z",
               value=numpy_helper.from_array(np.array([3], np.int64))),
         _node("Sub", ["c", "one_s"], "cm1")],
        [_i64("zero", [0]), numpy_helper.from_array(np.array(1, np.int64), "one_s"),
         numpy_helper.from_array(np.array(0, np.int64), "zero_s")],
        ["r", "z", "cm1"]),
    "slice_and_min": (
        [_node("Shape", ["x"], "s"), _node("Slice", ["s", "one", "big"], "tail"),
         _node("Slice", ["x", "zero", "minus2", "one"], "xs"), _node("Shape", ["xs"], "xss"),
         _node("Min", ["tail", "three"], "mn"), _node("Max", ["tail", "three"], "mx"),
         _node("Sub", ["three", "tail"], "neg"), _node("Mod", ["neg", "three"], "md")],
        [_i64("zero", [0]), _i64("one", [1]), _i64("big", [100]), _i64("minus2", [-2]),
         _i64("three", [3])],
        ["tail", "xs", "xss", "mn", "mx", "md"]),
    "slice_with_steps": (
        [_node("Shape", ["x"], "s"), _node("Slice", ["x", "zero", "big", "one", "two"], "even"),
         _node("Slice", ["x", "minus1", "lowest", "one", "minus1"], "rev"),
         _node("Slice", ["s", "minus1", "lowest", "zero", "minus2"], "srev"),
         _node("Slice", ["x", "one", "big", "zero", "three"], "third")],
        [_i64("zero", [0]), _i64("one", [1]), _i64("two", [2]), _i64("three", [3]),
         _i64("big", [100]), _i64("minus1", [-1]), _i64("minus2", [-2]),
         _i64("lowest", [-(2**62)])],
        ["even", "rev", "srev", "third"]),
    "conv_pool_gemm_pad_split": (
        [_node("Unsqueeze", ["x", "one"], "img"),
         _node("Conv", ["img", "w"], "c", pads=[1, 0, 0, 1], strides=[2, 1]),
         _node("MaxPool", ["c"], "p", kernel_shape=[1, 2], strides=[1, 2], ceil_mode=1),
         _node("AveragePool", ["img"], "ap", kernel_shape=[1, 3], auto_pad="SAME_UPPER",
               strides=[1, 2]),
         _node("GlobalAveragePool", ["c"], "g"),
         _node("Flatten", ["g"], "gf"), _node("Gemm", ["gf", "wg"], "y", transB=1),
         _node("Pad", ["x", "pads"], "xp"),
         helper.make_node("Split", ["x", "parts"], ["s0", "s1"], axis=2),
         _node("LayerNormalization", ["x", "gamma"], "ln", axis=-1)],
        [_i64("one", [1]), _i64("parts", [1, 3]),
         numpy_helper.from_array(np.ones((3, 1, 2, 2), np.float32), "w"),
         numpy_helper.from_array(np.ones((5, 3), np.float32), "wg"),
         _i64("pads", [0, 1, 0, 2, 0, 1]),
         numpy_helper.from_array(np.ones(4, np.float32), "gamma")],
        ["c", "p", "ap", "g", "y", "xp", "s0", "s1", "ln"]),
    "exported_pad_arithmetic": (  # F.pad as TorchScript writes it: pads reversed in pairs
        [_node("Shape", ["x"], "s"), _node("Gather", ["s", "one_s"], "b"),
         _node("Unsqueeze", ["b", "zero"], "b1"), _node("Sub", ["b1", "one"], "bm1"),
         _node("Concat", ["zero", "bm1"], "pair", axis=0),
         _node("ConstantOfShape", ["four_len"], "zeros",
               value=numpy_helper.from_array(np.array([0], np.int64))),
         _node("Concat", ["pair", "zeros"], "flat", axis=0),
         _node("Reshape", ["flat", "minus1_2"], "pairs"),
         _node("Slice", ["pairs", "minus1", "lowest", "zero", "minus1"], "rev"),
         _node("Transpose", ["rev"], "cols", perm=[1, 0]),
         _node("Reshape", ["cols", "minus1"], "pads"),
         _node("Pad", ["x", "pads"], "y")],
        [_i64("zero", [0]), _i64("one", [1]), _i64("minus1", [-1]), _i64("four_len", [4]),
         _i64("minus1_2", [-1, 2]), _i64("lowest", [-(2**62)]),
         numpy_helper.from_array(np.array(1, np.int64), "one_s")],
        ["pairs", "rev", "cols", "pads", "y"]),
    "resize_and_gather_nd": (
        [_node("Resize", ["x", "", "scales"], "up", mode="nearest"),
         _node("Resize", ["x", "", "", "sizes"], "fixed"),
         _node("GatherND", ["x", "idx"], "gn")],
        [numpy_helper.from_array(np.array([1.0, 2.0, 0.5], np.float32), "scales"),
         _i64("sizes", [2, 3, 5]), numpy_helper.from_array(np.zeros((2, 1), np.int64), "idx")],
        ["up", "fixed", "gn"]),
    "transpose_matmul_flatten_expand": (
        [_node("Transpose", ["x"], "xt", perm=[0, 2, 1]), _node("MatMul", ["x", "xt"], "g"),
         _node("Flatten", ["g"], "f", axis=1), _node("Shape", ["f"], "fs"),
         _node("Shape", ["x"], "xs3"), _node("Expand", ["col", "xs3"], "ex")],
        [numpy_helper.from_array(np.ones((1, 1, 4), np.float32), "col")],
        ["g", "f", "fs", "ex"]),
    "squeeze_unsqueeze_reduce": (
        [_node("Unsqueeze", ["x", "axes"], "u"), _node("Squeeze", ["u", "axes"], "q"),
         _node("ReduceSum", ["x", "red"], "r", keepdims=0), _node("Shape", ["r"], "rs"),
         _node("Cast", ["m"], "mf", to=TensorProto.FLOAT), _node("Softmax", ["mf"], "sm")],
        [_i64("axes", [0, 3]), _i64("red", [1])],
        ["u", "q", "r", "rs", "sm"]),
}


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto],
           outputs: list[str]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a", "b", 4]),
         helper.make_tensor_value_info("m", TensorProto.INT64, [1, "c"])],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("case", sorted(CASES))
def test_rules_agree_with_the_reference_at_every_size(case: str) -> None:
    nodes, inits, outputs = CASES[case]
    model = _model(nodes, inits, outputs)
    values, variables = infer_symbolic(list(model.graph.node),
                                       {"x": ["a", "b", 4], "m": [1, "c"]},
                                       {t.name: t for t in inits}, 17)
    evaluator = ReferenceEvaluator(model)
    rng = np.random.default_rng(0)
    for a, b, c in ((2, 3, 1), (1, 5, 4), (3, 1, 7), (2, 2, 2)):
        feeds = {"x": rng.standard_normal((a, b, 4)).astype(np.float32),
                 "m": rng.integers(1, 9, (1, c))}
        sizes = {"a": a, "b": b, "c": c}
        for name, got in zip(outputs, evaluator.run(None, feeds)):
            v = values[name]
            assert v.shape is not None, f"{case}: {name} has no shape"
            shape = tuple(eval(to_python(d), {"s": sizes}) for d in v.shape)  # noqa: S307
            assert shape == np.shape(got), f"{case}: {name} at {sizes}"
            fixed_size = all(not uses_any_var(d) for d in v.shape)
            if np.asarray(got).dtype.kind in "iub" and np.size(got) <= 64 and fixed_size:
                assert v.contents is not None, f"{case}: {name}'s contents unknown"
                contents = [eval(to_python(x), {"s": sizes}) for x in v.contents]  # noqa: S307
                assert contents == [int(x) for x in np.asarray(got).reshape(-1)], \
                    f"{case}: {name} at {sizes}"
    assert set(variables) == {"a", "b", "c"}


def test_exporter_shape_arithmetic_becomes_expressions() -> None:
    nodes, inits, _ = CASES["shape_gather_concat_reshape"]
    values, _ = infer_symbolic(nodes, {"x": ["a", "b", 4], "m": [1, "c"]},
                               {t.name: t for t in inits}, 17)
    assert [str(d) for d in values["t"].contents] == ["a", "(b * 4)"]
    assert [str(d) for d in values["y"].shape] == ["a", "(b * 4)"]
    # Equal(dim, -1) is provably false for a size: the Where keeps the shape
    nodes, inits, _ = CASES["broadcast_add_where_equal"]
    values, _ = infer_symbolic(nodes, {"x": ["a", "b", 4], "m": [1, "c"]},
                               {t.name: t for t in inits}, 17)
    assert [str(d) for d in values["e"].contents] == ["0", "0", "0"]
    assert [str(d) for d in values["w"].contents] == ["a", "b", "4"]


def test_unknown_ops_and_data_dependent_values_stay_unknown() -> None:
    nodes = [_node("NonZero", ["m"], "nz"), _node("Shape", ["nz"], "s"),
             _node("Reshape", ["x", "m1"], "y"), _node("Unique", ["m"], "am")]
    values, _ = infer_symbolic(nodes, {"x": ["a", "b", 4], "m": [1, "c"], "m1": [2]}, {}, 17)
    assert values["nz"].shape is None and values["s"].contents is None
    assert values["y"].shape is None  # the target is a run-time tensor
    assert values["am"].shape is None


def test_contents_function_and_variables() -> None:
    nodes, inits, _ = CASES["range_and_constant_of_shape"]
    values, _ = infer_symbolic(nodes, {"x": ["a", "b", 4], "m": [1, "c"]},
                               {t.name: t for t in inits}, 17)
    assert uses_any_var(values["cm1"].contents[0])
    assert values["r"].contents is None  # a length of c: contents only at a fixed length
    assert [str(d) for d in values["r"].shape] == ["c"]
    sizes = {"s": {"c": 6}}
    assert [eval(to_python(e), sizes) for e in values["cm1"].contents] == [5]  # noqa: S307
    assert [eval(to_python(e), sizes) for e in values["c1"].contents] == [6]  # noqa: S307
