"""Tests for tessera.passes.dce."""

import numpy as np

from tessera.backends.reference.interpreter import evaluate_function
from tessera.ir.graph import Function
from tessera.ir.types import DType, TensorType
from tessera.ir.verifier import verify
from tessera.passes import DeadCodeElimination

F32 = DType.float32


def build():
    fn = Function()
    x = fn.add_input("x", TensorType((3, 4), F32))
    c = fn.constant(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32), "c")
    live = fn.op("Add", x, c, name="live")
    dead1 = fn.op("Relu", x, name="dead1")
    fn.op("Add", dead1, c, name="dead2")  # a dead chain
    y = fn.op("Relu", live, name="y")
    split = fn.add_node("Split", [y], {"axis": 1, "split": [1, 3]}, name="split")
    fn.outputs = [split.outputs[1], x]
    return fn


def test_removes_dead_chains_and_keeps_partly_used_nodes():
    fn = build()
    before = fn.copy()
    out = DeadCodeElimination().run(fn)
    assert out is fn
    verify(fn)
    assert [n.name for n in fn.nodes] == ["live", "y", "split"]
    assert len(fn.node_by_name("split").outputs) == 2  # one output used: node stays whole
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    want = evaluate_function(before, {"x": x})
    got = evaluate_function(fn, {"x": x})
    for v in fn.outputs:
        np.testing.assert_array_equal(got[v.name], want[v.name])


def test_everything_dead_when_outputs_are_inputs():
    fn = build()
    fn.outputs = [fn.inputs[0]]
    DeadCodeElimination().run(fn)
    assert fn.nodes == []
    verify(fn)


def test_no_change_on_live_graph():
    fn = build()
    DeadCodeElimination().run(fn)
    text = str(fn)
    DeadCodeElimination().run(fn)
    assert str(fn) == text
