"""Tests for tessera.passes.fold_constants."""

import numpy as np
import pytest

from tessera.backends.reference.interpreter import evaluate_function
from tessera.errors import PassError
from tessera.ir.graph import Function
from tessera.ir.types import DType, TensorType
from tessera.ir.verifier import verify
from tessera.passes import FoldConstants

F32 = DType.float32
RNG = np.random.default_rng(0)


def run_outputs(fn, feeds):
    res = evaluate_function(fn, feeds)
    return [res[v.name] for v in fn.outputs]


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def test_folds_constant_chain_and_keeps_names():
    fn = Function()
    x = fn.add_input("x", TensorType((2, 3), F32))
    a = fn.constant(rand(2, 3), "a")
    b = fn.constant(rand(3), "b")
    s = fn.op("Add", a, b, name="s")
    t = fn.op("Relu", s, name="t")
    u = fn.op("Mul", t, fn.constant(np.float32(2.0)), name="u")
    y = fn.op("Add", x, u, name="y")
    fn.outputs = [y]
    before = fn.copy()
    feeds = {"x": rand(2, 3)}

    out = FoldConstants().run(fn)
    assert out is fn
    verify(fn)
    assert [n.op for n in fn.nodes] == ["Add"]
    folded = fn.nodes[0].inputs[1]
    assert folded is u and folded.is_constant and folded.producer is None
    assert folded.name == "u"
    np.testing.assert_allclose(folded.data, np.maximum(a.data + b.data, 0) * 2, rtol=1e-6)
    np.testing.assert_array_equal(run_outputs(fn, feeds)[0], run_outputs(before, feeds)[0])


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32, np.uint8])
def test_folded_constant_keeps_inferred_dtype(dtype):
    fn = Function()
    a = fn.constant((np.arange(6) % 4).astype(dtype).reshape(2, 3), "a")
    y = fn.op("Add", a, a)
    fn.outputs = [y]
    FoldConstants().run(fn)
    verify(fn)
    assert fn.nodes == []
    assert fn.outputs[0].is_constant and fn.outputs[0].data.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(fn.outputs[0].data, a.data + a.data)


def test_multi_output_node_is_folded():
    fn = Function()
    a = fn.constant(rand(6, 2), "a")
    node = fn.add_node("Split", [a], {"axis": 0, "split": [2, 4]}, name="split")
    fn.outputs = list(node.outputs)
    FoldConstants().run(fn)
    verify(fn)
    assert fn.nodes == []
    np.testing.assert_array_equal(fn.outputs[0].data, a.data[:2])
    np.testing.assert_array_equal(fn.outputs[1].data, a.data[2:])


def test_non_constant_nodes_untouched():
    fn = Function()
    x = fn.add_input("x", TensorType((4,), F32))
    y = fn.op("Relu", fn.op("Add", x, fn.constant(rand(4))))
    fn.outputs = [y]
    text = str(fn)
    FoldConstants().run(fn)
    assert str(fn) == text


def test_shape_mismatch_is_a_pass_error():
    fn = Function()
    a = fn.constant(rand(2, 3), "a")
    y = fn.op("Relu", a, name="r")
    y.type = TensorType((3, 2), F32)  # a node whose stored type is wrong
    fn.outputs = [y]
    with pytest.raises(PassError, match=r"node r \(Relu\): folding output r gave "
                                        r"float32\[2, 3\], its type says float32\[3, 2\]"):
        FoldConstants().run(fn)


def test_reference_failure_is_a_pass_error():
    fn = Function()
    a = fn.constant(rand(2, 3), "a")
    y = fn.op("Relu", a, name="r")
    y.producer.attrs["bogus"] = 1  # the reference refuses an unknown keyword
    fn.outputs = [y]
    with pytest.raises(PassError, match=r"node r \(Relu\): constant folding failed"):
        FoldConstants().run(fn)


def test_scalar_results_stay_scalars():
    fn = Function()
    a = fn.constant(rand(2, 3), "a")
    node = fn.add_node("ReduceSum", [a], {"axes": [0, 1], "keepdims": 0}, name="sum")
    assert node.output.type.shape == ()
    fn.outputs = [node.output]
    FoldConstants().run(fn)
    verify(fn)
    assert fn.outputs[0].data.shape == ()
    np.testing.assert_allclose(fn.outputs[0].data, a.data.sum(), rtol=1e-5)


def test_node_without_inputs_is_folded():
    fn = Function()
    x = fn.add_input("x", TensorType((8,), F32))
    window = fn.add_node("HannWindow", [], {"size": 8}, name="w").output
    fn.outputs = [fn.op("Mul", x, window)]
    before = fn.copy()
    FoldConstants().run(fn)
    verify(fn)
    assert [n.op for n in fn.nodes] == ["Mul"] and window.is_constant
    feeds = {"x": rand(8)}
    np.testing.assert_array_equal(run_outputs(fn, feeds)[0], run_outputs(before, feeds)[0])
