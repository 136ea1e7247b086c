"""build_te (tessera.topi.from_graph) and the compute registry (tessera.topi.registry)."""

from __future__ import annotations

import numpy as np
import pytest
from topi.support import assert_close, rand, run_group
from topi.te_eval import all_ops

from tessera import te
from tessera.backends.reference.interpreter import evaluate_function
from tessera.errors import CompileError
from tessera.ir.graph import Function
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import all_ops as all_graph_ops
from tessera.topi import build_te, compute_for, has_compute, registered_ops, tag
from tessera.topi.registry import register_compute, unsupported_reason


def _conv_block() -> tuple[Function, dict[str, np.ndarray]]:
    """x -> Conv(+bias) -> Relu -> Add(y) -> Mul(scalar const); two outputs."""
    g = Function("block")
    x = g.add_input("data:0", TensorType((1, 3, 6, 6), DType.float32))
    y = g.add_input("skip", TensorType((1, 4, 6, 6), DType.float32))
    w = g.constant(rand(4, 3, 3, 3), "weight")
    b = g.constant(rand(4), "bias")
    conv = g.op("Conv", x, w, b, pads=[1, 1, 1, 1])
    relu = g.op("Relu", conv)
    added = g.op("Add", relu, y)
    scaled = g.op("Mul", added, g.constant(np.array(0.5, np.float32), "half"))
    g.outputs = [scaled, relu]
    return g, {"data:0": rand(1, 3, 6, 6), "skip": rand(1, 4, 6, 6)}


def test_group_of_nodes_matches_the_reference_interpreter() -> None:
    g, feed = _conv_block()
    group = build_te(g.nodes, g.inputs, g.outputs)
    got = run_group(group, feed)
    want = evaluate_function(g, feed)
    assert len(got) == 2
    for value, a in zip(g.outputs, got):
        assert_close(a, want[value.name], rtol=1e-4, atol=1e-5)


def test_placeholders_constants_and_inlined_scalars() -> None:
    g, _ = _conv_block()
    group = build_te(g.nodes, g.inputs, g.outputs)
    assert [v.name for v in group.inputs] == ["data:0", "skip", "weight", "bias"]
    assert [v.name for v in group.constants] == ["weight", "bias"]
    assert [v.name for v in group.inlined] == ["half"]
    assert [p.name for p in group.placeholders] == ["data_0", "skip", "weight", "bias"]
    assert all(isinstance(p.op, te.PlaceholderOp) for p in group.placeholders)
    assert group.tensor_of["data:0"] is group.placeholders[0]
    assert group.outputs[1] is group.tensor_of[g.outputs[1].name]
    # the inlined constant is never read: it is nobody's input
    ops = all_ops(group.outputs)
    assert not any(op.tag == tag.CONSTANT for op in ops)
    # without inlining the scalar is one more placeholder
    plain = build_te(g.nodes, g.inputs, g.outputs, inline_scalars=False)
    assert [v.name for v in plain.constants] == ["weight", "bias", "half"]


def test_names_are_unique_identifiers() -> None:
    g, _ = _conv_block()
    group = build_te(g.nodes, g.inputs, g.outputs)
    names = [op.name for op in all_ops(group.outputs)]
    assert len(names) == len(set(names))
    assert all(n.isidentifier() for n in names)
    relu_node = g.nodes[1]
    assert group.outputs[1].op.name == relu_node.outputs[0].name


def test_missing_inputs_and_unsupported_nodes_are_errors() -> None:
    g, _ = _conv_block()
    with pytest.raises(CompileError, match="neither a group input"):
        build_te(g.nodes[1:], [g.inputs[1]], g.outputs)
    h = Function("h")
    x = h.add_input("x", TensorType((2, 3), DType.int32))
    h.outputs = [h.op("BitwiseNot", x)]
    with pytest.raises(CompileError, match="BitwiseNot has no topi compute"):
        build_te(h.nodes, h.inputs, h.outputs)
    assert "no topi compute" in unsupported_reason(h.nodes[0])


def test_a_compute_with_the_wrong_type_is_caught() -> None:
    @register_compute("TestOnlyWrongType")
    def wrong(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
        return [te.compute((3,), lambda i: inputs[0][i], name="wrong")]

    from tessera.ir.graph import Node, Value

    src = Value("x", TensorType((2,), DType.float32))
    out = Value("y", TensorType((2,), DType.float32))
    with pytest.raises(CompileError, match="compute gives float32\\[3\\]"):
        build_te([Node("TestOnlyWrongType", "n", [src], [out])], [src], [out])


def test_registry_api() -> None:
    assert has_compute("Conv") and has_compute("Relu") and not has_compute("LSTM")
    assert callable(compute_for("MatMul"))
    with pytest.raises(KeyError, match="LSTM"):
        compute_for("LSTM")
    graph_ops = set(all_graph_ops())
    layout_ops = {"LayoutTransform", "ConvNCHWc", "PoolNCHWc"}
    unknown = set(registered_ops()) - graph_ops - layout_ops - {"TestOnlyWrongType"}
    assert not unknown, unknown


def test_graph_output_that_is_an_input() -> None:
    g = Function("f")
    x = g.add_input("x", TensorType((3,), DType.float32))
    group = build_te([], [x], [x])
    assert group.outputs[0] is group.placeholders[0]


def test_every_registered_compute_is_checked_by_a_test() -> None:
    from pathlib import Path

    text = "".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    untested = [op for op in registered_ops() if f'"{op}"' not in text
                and op != "TestOnlyWrongType"]
    assert not untested, untested
