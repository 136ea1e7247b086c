"""Sub-graphs in the IR: graph attributes of If/Loop/Scan through the importer (outer-scope reads
become captured inputs), the printer, the verifier, JSON and copies; DCE inside bodies."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tessera.errors import IRError, NeedsConstantError
from tessera.frontend.onnx import import_onnx
from tessera.ir.graph import Function
from tessera.ir.serialize import from_json, to_json
from tessera.ir.types import TensorType
from tessera.ir.verifier import verify
from tessera.passes.dce import DeadCodeElimination
from tessera.testing import control_flow_models as cfm


def _loop_node(fn: Function):
    return next(n for n in fn.nodes if n.op == "Loop")


def test_nested_outer_reads_become_inputs_at_every_level() -> None:
    fn = import_onnx(cfm.nested_model())
    verify(fn)
    loop = _loop_node(fn)
    body: Function = loop.attrs["body"]
    # the Loop takes n, no condition, acc0 and then what its body reads from outside: bias
    assert [v.name if v is not None else None for v in loop.inputs] == ["n", None, "acc0",
                                                                        "bias"]
    assert loop.attrs["captures"] == 1
    if_node = next(n for n in body.nodes if n.op == "If")
    # the If inside reads acc (the body's) and bias (two scopes out, through the body's input)
    assert if_node.inputs[1:] == [body.inputs[2], body.inputs[3]]
    then_b, else_b = if_node.attrs["then_branch"], if_node.attrs["else_branch"]
    assert len(then_b.inputs) == len(else_b.inputs) == 2
    # the constant W is shared, not captured
    assert any(v.is_constant and v.type.shape == (4, 4) for n in else_b.nodes for v in n.inputs)


def test_printer_shows_sub_graphs_nested() -> None:
    text = str(import_onnx(cfm.nested_model()))
    assert "Loop(%n, _, %acc0, %bias)" in text
    assert "body=@" in text and "then_branch=@" in text
    assert "\n    body:\n" in text and "      then_branch:\n" in text


def test_json_and_copy_keep_sub_graphs() -> None:
    fn = import_onnx(cfm.nested_model())
    again = from_json(to_json(fn))
    verify(again)
    assert str(again) == str(fn)
    copy = fn.copy()
    assert _loop_node(copy).attrs["body"] is not _loop_node(fn).attrs["body"]
    assert str(copy) == str(fn)


def test_verifier_checks_bodies() -> None:
    fn = import_onnx(cfm.scan_rnn())
    scan = next(n for n in fn.nodes if n.op == "Scan")
    body: Function = scan.attrs["body"]
    body.outputs = body.outputs[::-1] + [body.outputs[0]]  # one output too many
    with pytest.raises(IRError):
        verify(fn)
    fn = import_onnx(cfm.scan_rnn())
    body = next(n for n in fn.nodes if n.op == "Scan").attrs["body"]
    body.nodes = body.nodes[1:]  # a value used before it is defined, inside the body
    with pytest.raises(IRError, match="in its body"):
        verify(fn)


def test_body_types_come_from_the_node() -> None:
    """Loop bodies declare partial types; the importer types them from the node's values."""
    fn = import_onnx(cfm.greedy_decoder())
    body = _loop_node(fn).attrs["body"]
    assert [v.type for v in body.inputs[:5]] == [
        TensorType((), "int64"), TensorType((), "bool"), TensorType((1, 32), "float32"),
        TensorType((1,), "int64"), TensorType((), "int64")]


def test_a_constant_needed_inside_a_body_names_the_outer_input() -> None:
    """A Reshape inside a body whose shape is an outer graph input: the error names that
    input (what freeze_inputs binds), not the body's own input."""
    then_g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["a"])], "t", [],
                               [helper.make_tensor_value_info("a", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["b"])], "e", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(NeedsConstantError) as info:
        import_onnx(model)
    assert info.value.inputs == ["shape"]
    fn = import_onnx(model, freeze_inputs={"shape": np.array([3, 2])})
    assert fn.outputs[0].type == TensorType((3, 2), "float32")


def test_dce_removes_dead_nodes_inside_bodies() -> None:
    fn = import_onnx(cfm.scan_rnn())
    body = next(n for n in fn.nodes if n.op == "Scan").attrs["body"]
    x = body.inputs[0]
    body.op("Exp", x)  # dead
    before = len(body.nodes)
    DeadCodeElimination().run(fn)
    assert len(body.nodes) == before - 1
    verify(fn)
