"""Tests for tessera.passes.canonicalize."""

import numpy as np
import pytest

from tessera.backends.reference.interpreter import evaluate_function
from tessera.ir.graph import Function
from tessera.ir.symbolic import dim_var
from tessera.ir.types import DType, TensorType
from tessera.ir.verifier import verify
from tessera.passes import Canonicalize

F32 = DType.float32


def rand(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def run_outputs(fn, feeds):
    res = evaluate_function(fn, feeds)
    return [res[v.name] for v in fn.outputs]


def check_same(fn, feeds):
    before = fn.copy()
    want = run_outputs(before, feeds)
    assert Canonicalize().run(fn) is fn
    verify(fn)
    got = run_outputs(fn, feeds)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    return fn


def ops(fn):
    return [n.op for n in fn.nodes]


def one_input(shape, dtype=F32):
    fn = Function()
    return fn, fn.add_input("x", TensorType(shape, dtype))


@pytest.mark.parametrize("op, attrs, shape", [
    ("Flatten", {"axis": 1}, (2, 3, 4)),
    ("Flatten", {"axis": 0}, (2, 3, 4)),
    ("Flatten", {"axis": -1}, (2, 3, 4)),
    ("Flatten", {"axis": 3}, (2, 3, 4)),
    ("Squeeze", {"axes": [1, 3]}, (2, 1, 4, 1)),
    ("Squeeze", {}, (1, 3, 1)),
    ("Squeeze", {"axes": [-1]}, (3, 1)),
    ("Unsqueeze", {"axes": [0, 3]}, (2, 3)),
    ("Unsqueeze", {"axes": [-1]}, (2, 3)),
    ("Unsqueeze", {"axes": [0]}, ()),
])
def test_shape_ops_become_reshape(op, attrs, shape):
    fn, x = one_input(shape)
    y = fn.op(op, x, name="shape_op", **attrs)
    fn.outputs = [fn.op("Relu", y, name="relu")]
    check_same(fn, {"x": rand(shape)})
    assert ops(fn) == ["Reshape", "Relu"]
    reshape = fn.nodes[0]
    assert reshape.attrs["shape"] == list(reshape.output.type.shape)
    assert reshape.output.name == "shape_op"  # the rewritten value keeps its name


def test_reshape_of_empty_tensor_keeps_zero_dimension():
    fn, x = one_input((2, 0, 3))
    fn.outputs = [fn.op("Flatten", x, axis=2)]
    check_same(fn, {"x": np.zeros((2, 0, 3), np.float32)})
    assert fn.outputs[0].type.shape == (0, 3)
    assert fn.nodes[0].attrs["allowzero"] == 1


def test_reshape_chain_merges():
    fn, x = one_input((2, 3, 4))
    a = fn.op("Reshape", x, shape=[6, 4], name="a")
    b = fn.op("Unsqueeze", a, axes=[0], name="b")
    c = fn.op("Reshape", b, shape=[2, 0, 2], name="c")  # 0 copies dim 1 of b (6)
    fn.outputs = [fn.op("Relu", c, name="relu")]
    check_same(fn, {"x": rand((2, 3, 4))})
    assert ops(fn) == ["Reshape", "Relu"]
    assert fn.nodes[0].inputs[0] is x
    assert fn.nodes[0].attrs["shape"] == [2, 6, 2]


def test_reshape_chain_with_other_reader_keeps_inner():
    fn, x = one_input((2, 6))
    a = fn.op("Reshape", x, shape=[3, 4], name="a")
    b = fn.op("Reshape", a, shape=[12], name="b")
    fn.outputs = [b, fn.op("Relu", a, name="relu")]
    check_same(fn, {"x": rand((2, 6))})
    assert sorted(ops(fn)) == ["Relu", "Reshape", "Reshape"]
    assert fn.node_by_name("b").inputs[0] is x


def test_reshape_back_to_input_shape_disappears():
    fn, x = one_input((2, 3))
    a = fn.op("Reshape", x, shape=[3, 2])
    b = fn.op("Reshape", a, shape=[2, 3])
    fn.outputs = [fn.op("Relu", b)]
    check_same(fn, {"x": rand((2, 3))})
    assert ops(fn) == ["Relu"] and fn.nodes[0].inputs[0] is x


def test_noop_reshape_as_output_becomes_input():
    fn, x = one_input((2, 3))
    fn.outputs = [fn.op("Reshape", x, shape=[2, 3])]
    check_same(fn, {"x": rand((2, 3))})
    assert fn.nodes == [] and fn.outputs == [x]


@pytest.mark.parametrize("p1, p2", [
    ([1, 0, 2], [1, 0, 2]),  # identity overall
    ([2, 0, 1], [1, 2, 0]),  # inverse permutations
    ([0, 2, 1], [2, 0, 1]),
    (None, [0, 2, 1]),  # default perm reverses the axes
    ([1, 2, 0], None),
])
def test_transpose_chain(p1, p2):
    fn, x = one_input((2, 3, 4))
    a = fn.op("Transpose", x, perm=p1, name="t1")
    b = fn.op("Transpose", a, perm=p2, name="t2")
    fn.outputs = [fn.op("Relu", b)]
    check_same(fn, {"x": rand((2, 3, 4))})
    if fn.nodes[0].op == "Transpose":
        assert ops(fn) == ["Transpose", "Relu"]
        assert fn.nodes[0].inputs[0] is x
    else:
        assert ops(fn) == ["Relu"]
        assert fn.nodes[0].inputs[0] is x


def test_transpose_chain_of_three():
    fn, x = one_input((2, 3, 4, 5))
    a = fn.op("Transpose", x, perm=[0, 2, 3, 1])
    b = fn.op("Transpose", a, perm=[3, 1, 0, 2])
    c = fn.op("Transpose", b, perm=[1, 0, 3, 2])
    fn.outputs = [c]
    check_same(fn, {"x": rand((2, 3, 4, 5))})
    assert ops(fn) == ["Transpose"]


def test_identity_transpose_removed():
    fn, x = one_input((2, 3))
    fn.outputs = [fn.op("Relu", fn.op("Transpose", x, perm=[0, 1]))]
    check_same(fn, {"x": rand((2, 3))})
    assert ops(fn) == ["Relu"]


@pytest.mark.parametrize("src, dst, removed", [
    (DType.float32, DType.float32, True),
    (DType.int64, DType.int64, True),
    (DType.float32, DType.float16, False),
    (DType.float32, DType.int32, False),
])
def test_cast(src, dst, removed):
    fn, x = one_input((3, 2), src)
    fn.outputs = [fn.op("Cast", x, to=dst)]
    check_same(fn, {"x": (rand((3, 2)) * 10).astype(src.numpy)})
    assert (fn.nodes == []) is removed


def test_identity_removed_and_constants_can_be_outputs():
    fn = Function()
    c = fn.constant(np.arange(4, dtype=np.int32), "c")
    fn.outputs = [fn.op("Identity", fn.op("Identity", c))]
    check_same(fn, {})
    assert fn.nodes == [] and fn.outputs == [c]


def test_mixed_chain():
    fn, x = one_input((1, 3, 1, 4))
    a = fn.op("Squeeze", x, axes=[0, 2])
    b = fn.op("Identity", a)
    c = fn.op("Transpose", b, perm=[1, 0])
    d = fn.op("Transpose", c, perm=[1, 0])
    e = fn.op("Unsqueeze", d, axes=[0])
    f = fn.op("Cast", e, to=DType.float32)
    g = fn.op("Flatten", f, axis=0)
    fn.outputs = [g]
    check_same(fn, {"x": rand((1, 3, 1, 4))})
    assert ops(fn) == ["Reshape"] and fn.nodes[0].inputs[0] is x
    assert fn.outputs[0].type.shape == (1, 12)


@pytest.mark.parametrize("op, attrs, shape", [
    ("AveragePool", {"count_include_pad": 1, "ceil_mode": 1}, (1, 3, 7, 5)),  # EfficientNet's
    ("AveragePool", {"count_include_pad": 0, "ceil_mode": 1}, (2, 4, 3, 3)),
    ("MaxPool", {"ceil_mode": 1}, (1, 3, 6, 2)),
    ("AveragePool", {"ceil_mode": 0, "kernel": [6, 2]}, (1, 3, 6, 2)),  # exactly the input
    ("MaxPool", {"ceil_mode": 1, "kernel": [9]}, (2, 3, 4)),            # 1-D
])
def test_one_window_over_the_input_is_a_global_pool(op, attrs, shape):
    attrs = dict(attrs)
    kernel = attrs.pop("kernel", [32] * (len(shape) - 2))
    fn, x = one_input(shape)
    fn.outputs = [fn.op(op, x, kernel_shape=kernel, strides=kernel, **attrs, name="pool")]
    feeds = {"x": rand(shape, seed=4)}
    want = run_outputs(fn.copy(), feeds)
    Canonicalize().run(fn)
    verify(fn)
    assert ops(fn) == ["Global" + op]
    assert fn.outputs[0].name == "pool" or fn.outputs[0].producer.name == "pool"
    np.testing.assert_allclose(run_outputs(fn, feeds)[0], want[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [3, 3], "ceil_mode": 1},      # several windows
    {"kernel_shape": [8, 8], "strides": [8, 8], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [8, 8], "dilations": [2, 2], "ceil_mode": 1},
])
def test_other_pools_stay(attrs):
    fn, x = one_input((1, 2, 6, 6))
    fn.outputs = [fn.op("MaxPool", x, **attrs, name="pool")]
    check_same(fn, {"x": rand((1, 2, 6, 6), seed=5)})
    assert ops(fn) == ["MaxPool"]


@pytest.mark.parametrize("op, axes, shape", [
    ("ReduceMean", [2, 3], (2, 8, 5, 7)),
    ("ReduceMean", [-1, -2], (1, 4, 3, 3)),
    ("ReduceMax", [2, 3], (1, 3, 6, 2)),
    ("ReduceMean", [2], (2, 3, 9)),
])
def test_spatial_reduction_is_a_global_pool(op, axes, shape):
    fn, x = one_input(shape)
    fn.outputs = [fn.op(op, x, axes=axes, keepdims=1, name="r")]
    feeds = {"x": rand(shape, seed=6)}
    want = run_outputs(fn.copy(), feeds)
    Canonicalize().run(fn)
    verify(fn)
    assert ops(fn) == [{"ReduceMean": "GlobalAveragePool", "ReduceMax": "GlobalMaxPool"}[op]]
    np.testing.assert_allclose(run_outputs(fn, feeds)[0], want[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("axes, keepdims, shape", [
    ([1, 2, 3], 1, (1, 4, 3, 3)),   # channels too
    ([2, 3], 0, (1, 4, 3, 3)),      # dims dropped
    ([3], 1, (1, 4, 3, 3)),         # one spatial axis of two
    ([1], 1, (2, 5)),               # 2-D: no spatial axes
])
def test_other_reductions_stay(axes, keepdims, shape):
    fn, x = one_input(shape)
    fn.outputs = [fn.op("ReduceMean", x, axes=axes, keepdims=keepdims, name="r")]
    check_same(fn, {"x": rand(shape, seed=7)})
    assert ops(fn) == ["ReduceMean"]


@pytest.mark.parametrize("pads, conv_pads, value", [
    ([0, 0, 0, 0, 0, 0, 1, 1], [0, 0, 0, 0], None),        # TF-style "same" before a stride 2
    ([0, 0, 1, 2, 0, 0, 3, 0], [1, 1, 1, 1], 0.0),         # both, and an explicit zero value
])
def test_zero_pad_folds_into_the_conv(pads, conv_pads, value):
    fn, x = one_input((1, 4, 7, 6))
    extra = [fn.constant(np.array(value, np.float32), "v")] if value is not None else []
    p = fn.op("Pad", x, *extra, pads=pads, name="pad")
    w = fn.constant(rand((5, 4, 3, 3), seed=8), "w")
    fn.outputs = [fn.op("Conv", p, w, strides=[2, 2], pads=conv_pads, name="conv")]
    feeds = {"x": rand((1, 4, 7, 6), seed=9)}
    want = run_outputs(fn.copy(), feeds)
    Canonicalize().run(fn)
    verify(fn)
    assert ops(fn) == ["Conv"] and fn.nodes[0].inputs[0] is fn.inputs[0]
    np.testing.assert_allclose(run_outputs(fn, feeds)[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pads, mode, value", [
    ([0, 1, 0, 0, 0, 1, 0, 0], "constant", None),    # channels padded
    ([0, 0, 1, 1, 0, 0, 1, 1], "reflect", None),     # not zeros
    ([0, 0, 1, 1, 0, 0, 1, 1], "constant", 1.0),     # a non-zero value
    ([0, 0, -1, 0, 0, 0, 0, 0], "constant", None),   # a crop
])
def test_other_pads_stay(pads, mode, value):
    fn, x = one_input((1, 4, 7, 6))
    extra = [fn.constant(np.array(value, np.float32), "v")] if value is not None else []
    p = fn.op("Pad", x, *extra, pads=pads, mode=mode, name="pad")
    c = p.type.shape[1]
    fn.outputs = [fn.op("Conv", p, fn.constant(rand((2, c, 3, 3), seed=10), "w"), name="conv")]
    check_same(fn, {"x": rand((1, 4, 7, 6), seed=11)})
    assert ops(fn) == ["Pad", "Conv"]


def test_a_symbolic_batch_keeps_the_global_pool_of_a_static_image():
    """EfficientNet exported with a symbolic batch: its last pool's window (320 x 320, over a
    2 x 2 map) is still the whole map (it ran the whole window per output before: 8x slower
    than the static compile)."""
    fn, x = one_input((dim_var("batch"), 3, 2, 2))
    fn.outputs = [fn.op("AveragePool", x, kernel_shape=[320, 320], strides=[320, 320],
                        ceil_mode=1, count_include_pad=1, name="pool")]
    Canonicalize().run(fn)
    verify(fn)
    assert ops(fn) == ["GlobalAveragePool"]


def test_a_symbolic_image_keeps_its_windowed_pool():
    fn, x = one_input((1, 3, dim_var("h"), 40))
    fn.outputs = [fn.op("MaxPool", x, kernel_shape=[32, 32], strides=[32, 32], name="pool")]
    Canonicalize().run(fn)
    assert ops(fn) == ["MaxPool"]
