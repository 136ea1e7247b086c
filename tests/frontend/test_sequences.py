"""ONNX sequence values known at import (lists of IR tensors) against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.errors import ModelImportError, NeedsConstantError

TARGETS = ["ref", "llvm"]
F = TensorProto.FLOAT


def _model(nodes: list, inputs: list, outputs: list, opset: int = 18) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _seq_info(name: str, elem: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_sequence_value_info(name, elem, None)


def _ort(model: onnx.ModelProto, feeds: dict) -> list:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _close(got: object, want: object) -> None:
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            _close(g, w)
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape,axis,split", [((6, 4), 0, [1, 2, 3]), ((3, 5, 2), 1, None),
                                              ((4, 7), 1, 3)])
def test_split_map_concat(target: str, shape: tuple, axis: int, split: object) -> None:
    body = helper.make_graph([helper.make_node("Relu", ["e"], ["r"])], "body",
                             [helper.make_tensor_value_info("e", F, None)],
                             [helper.make_tensor_value_info("r", F, None)])
    inits = []
    split_inputs = ["x"]
    if split is not None:
        inits.append(helper.make_tensor("split", TensorProto.INT64,
                                        [len(split)] if isinstance(split, list) else [],
                                        split if isinstance(split, list) else [split]))
        split_inputs.append("split")
    nodes = [helper.make_node("SplitToSequence", split_inputs, ["s"], axis=axis),
             helper.make_node("SequenceMap", ["s"], ["m"], body=body),
             helper.make_node("ConcatFromSequence", ["m"], ["y"], axis=axis)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, list(shape))],
                              [helper.make_tensor_value_info("y", F, [None] * len(shape))],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    got = tessera.compile(model, target=target).run({"x": x})["y"]
    _close(got, _ort(model, {"x": x})[0])


@pytest.mark.parametrize("target", TARGETS)
def test_construct_insert_erase_at_length(target: str) -> None:
    pos = [helper.make_tensor(n, TensorProto.INT64, [], [v])
           for n, v in (("p0", 0), ("pm1", -1), ("p1", 1))]
    nodes = [helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
             helper.make_node("SequenceInsert", ["s", "c", "p0"], ["s1"]),  # c a b
             helper.make_node("SequenceInsert", ["s1", "a"], ["s2"]),  # c a b a
             helper.make_node("SequenceErase", ["s2", "p1"], ["s3"]),  # c b a
             helper.make_node("SequenceErase", ["s3"], ["s4"]),  # c b
             helper.make_node("SequenceAt", ["s4", "pm1"], ["last"]),
             helper.make_node("SequenceAt", ["s3", "p1"], ["mid"]),
             helper.make_node("SequenceLength", ["s2"], ["n"]),
             helper.make_node("ConcatFromSequence", ["s3"], ["stack"], axis=-1, new_axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, [2, 3])
                                           for n in "abc"],
                              [helper.make_tensor_value_info(n, F, [None] * r)
                               for n, r in (("last", 2), ("mid", 2), ("stack", 3))] +
                              [helper.make_tensor_value_info("n", TensorProto.INT64, [])], pos)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    rng = np.random.default_rng(2)
    feeds = {n: rng.standard_normal((2, 3)).astype(np.float32) for n in "abc"}
    got = tessera.compile(model, target=target).run(feeds)
    want = _ort(model, feeds)
    for name, w in zip(("last", "mid", "stack", "n"), want):
        _close(got[name], w)


@pytest.mark.parametrize("target", TARGETS)
def test_sequence_input_and_output(target: str) -> None:
    nodes = [helper.make_node("SequenceInsert", ["seq", "t"], ["grown"]),
             helper.make_node("SequenceMap", ["grown", "t"], ["out"], body=helper.make_graph(
                 [helper.make_node("Mul", ["e", "k"], ["p"])], "body",
                 [helper.make_tensor_value_info("e", F, None),
                  helper.make_tensor_value_info("k", F, None)],
                 [helper.make_tensor_value_info("p", F, None)])),
             helper.make_node("SequenceLength", ["grown"], ["n"])]
    model = _model(nodes, [_seq_info("seq"), helper.make_tensor_value_info("t", F, [3])],
                   [_seq_info("out"), helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    rng = np.random.default_rng(3)
    seq = [rng.standard_normal(s).astype(np.float32) for s in ((3,), (2, 3), (4, 1))]
    t = rng.standard_normal(3).astype(np.float32)
    mod = tessera.compile(model, target=target, input_shapes={"seq": [[3], [2, 3], [4, 1]]})
    assert mod.output_names == ["out", "n"]
    got = mod.run({"seq": seq, "t": t})
    want = _ort(model, {"seq": seq, "t": t})
    _close(got["out"], want[0])
    _close(got["n"], want[1])
    mod.set_input("seq", seq)  # the step-by-step form
    mod.set_input("t", t)
    mod.run()
    _close(mod.get_output("out"), want[0])
    with pytest.raises(tessera.errors.RunError, match="sequence of 3"):
        mod.run({"seq": seq[:2], "t": t})


@pytest.mark.parametrize("target", TARGETS)
def test_if_with_sequence_outputs(target: str) -> None:
    def branch(op: str) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node(op, ["x"], ["u"]),
             helper.make_node("SequenceConstruct", ["u", "x"], ["s"])], op,
            [], [_seq_info("s")])

    nodes = [helper.make_node("If", ["c"], ["res"], then_branch=branch("Exp"),
                              else_branch=branch("Neg")),
             helper.make_node("ConcatFromSequence", ["res"], ["y"], axis=0)]
    model = _model(nodes, [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                           helper.make_tensor_value_info("x", F, [2, 2])],
                   [_seq_info("res"), helper.make_tensor_value_info("y", F, [None, None])])
    x = np.random.default_rng(4).standard_normal((2, 2)).astype(np.float32)
    mod = tessera.compile(model, target=target)
    for c in (True, False):
        feeds = {"c": np.array(c), "x": x}
        got, want = mod.run(feeds), _ort(model, feeds)
        _close(got["res"], want[0])
        _close(got["y"], want[1])


@pytest.mark.parametrize("target", TARGETS)
def test_sequence_at_run_time_index(target: str) -> None:
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=1, keepdims=0),
             helper.make_node("SequenceAt", ["s", "i"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [3, 4]),
                           helper.make_tensor_value_info("i", TensorProto.INT64, [])],
                   [helper.make_tensor_value_info("y", F, [None])])
    x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    mod = tessera.compile(model, target=target)
    for i in (0, 2, -1):
        feeds = {"x": x, "i": np.array(i, np.int64)}
        _close(mod.run(feeds)["y"], _ort(model, feeds)[0])


def test_a_growing_sequence_in_a_loop_needs_a_constant_trip_count() -> None:
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("SequenceInsert", ["s_in", "x"], ["s_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []), _seq_info("s_in")],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), _seq_info("s_out")])
    nodes = [helper.make_node("SequenceConstruct", ["x"], ["s0"]),
             helper.make_node("Loop", ["m", "", "s0"], ["s"], body=body),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)]
    model = _model(nodes, [helper.make_tensor_value_info("m", TensorProto.INT64, []),
                           helper.make_tensor_value_info("x", F, [2])],
                   [helper.make_tensor_value_info("y", F, [None])])
    with pytest.raises(NeedsConstantError, match="cannot be static") as info:
        tessera.compile(model, target="ref")
    assert info.value.inputs == ["m"]
    # with the trip count known, the loop unrolls
    x = np.random.default_rng(6).standard_normal(2).astype(np.float32)
    m = np.array(3, np.int64)
    mod = tessera.compile(model, target="ref", freeze_inputs={"m": m})
    _close(mod.run({"x": x})["y"], _ort(model, {"m": m, "x": x})[0])


def test_a_sequence_where_a_tensor_is_expected_is_refused() -> None:
    nodes = [helper.make_node("SequenceConstruct", ["x", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [2])],
                   [helper.make_tensor_value_info("y", F, [None])])
    with pytest.raises(ModelImportError, match="Relu.*expects a tensor, got a sequence of 2"):
        tessera.compile(model, target="ref")


def test_a_sequence_input_needs_its_element_shapes() -> None:
    model = _model([helper.make_node("SequenceLength", ["s"], ["n"])], [_seq_info("s")],
                   [helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    with pytest.raises(ModelImportError, match="list of shapes"):
        tessera.compile(model, target="ref")
