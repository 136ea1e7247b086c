"""Tests for tessera.passes.simplify_inference: BatchNormalization folding, Dropout, Identity."""

import numpy as np
import pytest

from tessera.backends.reference.interpreter import evaluate_function
from tessera.ir.graph import Function
from tessera.ir.types import DType, TensorType
from tessera.ir.verifier import verify
from tessera.passes import SimplifyInference

F32 = DType.float32


def rng():
    return np.random.default_rng(42)


def rand(r, *shape, dtype=np.float32):
    return r.standard_normal(shape).astype(dtype)


def run_outputs(fn, feeds):
    res = evaluate_function(fn, feeds)
    return [res[v.name] for v in fn.outputs]


def bn_params(fn, r, c, dtype=np.float32, name="bn"):
    """Constants scale, B, mean, var (var > 0) for ``c`` channels."""
    return [fn.constant(rand(r, c, dtype=dtype), f"{name}_scale"),
            fn.constant(rand(r, c, dtype=dtype), f"{name}_B"),
            fn.constant(rand(r, c, dtype=dtype), f"{name}_mean"),
            fn.constant((np.abs(rand(r, c)) + 0.5).astype(dtype), f"{name}_var")]


def check_same(fn, feeds, rtol=1e-4, atol=1e-5):
    """Run SimplifyInference on ``fn``; the result verifies and computes what ``fn`` did."""
    before = fn.copy()
    want = run_outputs(before, feeds)
    out = SimplifyInference().run(fn)
    assert out is fn
    verify(fn)
    got = run_outputs(fn, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return fn


def ops(fn):
    return [n.op for n in fn.nodes]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("group", [1, 2])
def test_conv_batchnorm_folds_into_conv(bias, group):
    r = rng()
    fn = Function()
    x = fn.add_input("x", TensorType((2, 4, 7, 7), F32))
    w = fn.constant(rand(r, 6, 4 // group, 3, 3), "w")
    w_before = w.data.copy()
    inputs = [x, w] + ([fn.constant(rand(r, 6), "b")] if bias else [])
    conv = fn.op("Conv", *inputs, name="conv", pads=[1, 1, 1, 1], strides=[2, 2], group=group)
    y = fn.op("BatchNormalization", conv, *bn_params(fn, r, 6), name="bn", epsilon=1e-3)
    fn.outputs = [fn.op("Relu", y, name="relu")]
    check_same(fn, {"x": rand(r, 2, 4, 7, 7)})
    assert ops(fn) == ["Conv", "Relu"]
    conv_node = fn.nodes[0]
    assert conv_node.attrs["group"] == group and conv_node.attrs["pads"] == [1, 1, 1, 1]
    assert conv_node.inputs[1] is not w and conv_node.inputs[1].is_constant
    assert conv_node.inputs[2].type == TensorType((6,), F32)
    assert conv_node.output.name == "bn"  # the folded value keeps the BatchNorm's name
    np.testing.assert_array_equal(w.data, w_before)  # new constants; the old one is untouched


def test_shared_weights_are_not_modified():
    r = rng()
    fn = Function()
    x = fn.add_input("x", TensorType((1, 3, 5, 5), F32))
    w = fn.constant(rand(r, 3, 3, 1, 1), "w")
    w_copy = w.data.copy()
    c1 = fn.op("Conv", x, w, name="c1")
    c2 = fn.op("Conv", x, w, name="c2")
    y = fn.op("BatchNormalization", c1, *bn_params(fn, r, 3), name="bn")
    fn.outputs = [y, c2]
    check_same(fn, {"x": rand(r, 1, 3, 5, 5)})
    np.testing.assert_array_equal(w.data, w_copy)
    assert fn.node_by_name("c2").inputs[1] is w
    assert fn.node_by_name("c1").inputs[1] is not w


def test_conv_output_read_elsewhere_uses_mul_add():
    r = rng()
    fn = Function()
    x = fn.add_input("x", TensorType((1, 3, 5, 5), F32))
    conv = fn.op("Conv", x, fn.constant(rand(r, 4, 3, 3, 3)), name="conv")
    y = fn.op("BatchNormalization", conv, *bn_params(fn, r, 4), name="bn")
    fn.outputs = [y, conv]
    check_same(fn, {"x": rand(r, 1, 3, 5, 5)})
    assert ops(fn) == ["Conv", "Mul", "Add"]
    assert fn.nodes[1].inputs[1].type == TensorType((4, 1, 1), F32)
    assert fn.outputs[0].name == "bn"


def test_conv_with_runtime_weights_uses_mul_add():
    r = rng()
    fn = Function()
    x = fn.add_input("x", TensorType((1, 3, 5, 5), F32))
    w = fn.add_input("w", TensorType((4, 3, 1, 1), F32))
    conv = fn.op("Conv", x, w, name="conv")
    fn.outputs = [fn.op("BatchNormalization", conv, *bn_params(fn, r, 4), name="bn")]
    check_same(fn, {"x": rand(r, 1, 3, 5, 5), "w": rand(r, 4, 3, 1, 1)})
    assert ops(fn) == ["Conv", "Mul", "Add"]


@pytest.mark.parametrize("shape", [(4, 5), (2, 5, 3), (2, 5, 3, 4), (1, 5, 2, 2, 3)])
def test_batchnorm_on_input_becomes_mul_add(shape):
    r = rng()
    fn = Function()
    x = fn.add_input("x", TensorType(shape, F32))
    fn.outputs = [fn.op("BatchNormalization", x, *bn_params(fn, r, 5), name="bn",
                        epsilon=0.01)]
    check_same(fn, {"x": rand(r, *shape)})
    assert ops(fn) == ["Mul", "Add"]
    assert fn.nodes[0].inputs[1].type.shape == (5,) + (1,) * (len(shape) - 2)


def test_float16_batchnorm():
    r = rng()
    fn = Function()
    f16 = TensorType((2, 3, 4, 4), DType.float16)
    x = fn.add_input("x", f16)
    conv = fn.op("Conv", x, fn.constant(rand(r, 3, 3, 1, 1, dtype=np.float16)), name="conv")
    fn.outputs = [fn.op("BatchNormalization", conv, *bn_params(fn, r, 3, np.float16))]
    check_same(fn, {"x": rand(r, 2, 3, 4, 4, dtype=np.float16)}, rtol=2e-2, atol=2e-2)
    assert ops(fn) == ["Conv"]


def test_runtime_batchnorm_parameters_are_kept():
    r = rng()
    fn = Function()
    x = fn.add_input("x", TensorType((2, 3, 4), F32))
    mean = fn.add_input("mean", TensorType((3,), F32))
    params = bn_params(fn, r, 3)
    params[2] = mean
    fn.outputs = [fn.op("BatchNormalization", x, *params)]
    check_same(fn, {"x": rand(r, 2, 3, 4), "mean": rand(r, 3)})
    assert ops(fn) == ["BatchNormalization"]


def test_training_batchnorm_is_kept():
    r = rng()
    fn = Function()
    x = fn.add_input("x", TensorType((4, 3, 2), F32))
    node = fn.add_node("BatchNormalization", [x, *bn_params(fn, r, 3)], {"training_mode": 1})
    fn.outputs = list(node.outputs)
    check_same(fn, {"x": rand(r, 4, 3, 2)})
    assert ops(fn) == ["BatchNormalization"]


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, (6,), (1, 6), (3, 6), (3, 1)])
@pytest.mark.parametrize("beta", [1.0, 0.5])
def test_gemm_batchnorm(trans_b, c_shape, beta):
    r = rng()
    fn = Function()
    a = fn.add_input("a", TensorType((3, 4), F32))
    b = fn.constant(rand(r, 6, 4) if trans_b else rand(r, 4, 6), "B")
    inputs = [a, b] + ([fn.constant(rand(r, *c_shape), "C")] if c_shape else [])
    g = fn.op("Gemm", *inputs, name="gemm", transB=trans_b, alpha=0.7, beta=beta)
    fn.outputs = [fn.op("BatchNormalization", g, *bn_params(fn, r, 6), name="bn")]
    check_same(fn, {"a": rand(r, 3, 4)})
    assert ops(fn) == ["Gemm"]
    assert fn.nodes[0].attrs["beta"] == 1.0 and fn.nodes[0].attrs["alpha"] == 0.7


@pytest.mark.parametrize("bias", [None, "left", "right"])
def test_matmul_add_batchnorm(bias):
    r = rng()
    fn = Function()
    a = fn.add_input("a", TensorType((5, 4), F32))
    mm = fn.op("MatMul", a, fn.constant(rand(r, 4, 3), "W"), name="mm")
    if bias == "left":
        mm = fn.op("Add", fn.constant(rand(r, 3), "bias"), mm, name="add")
    elif bias == "right":
        mm = fn.op("Add", mm, fn.constant(rand(r, 1, 3), "bias"), name="add")
    fn.outputs = [fn.op("BatchNormalization", mm, *bn_params(fn, r, 3), name="bn")]
    check_same(fn, {"a": rand(r, 5, 4)})
    assert ops(fn) == ["MatMul", "Add"]
    assert fn.outputs[0].name == "bn"


def test_batched_matmul_batchnorm_is_not_folded_into_weights():
    r = rng()
    fn = Function()
    a = fn.add_input("a", TensorType((2, 3, 4), F32))
    mm = fn.op("MatMul", a, fn.constant(rand(r, 4, 3), "W"), name="mm")
    fn.outputs = [fn.op("BatchNormalization", mm, *bn_params(fn, r, 3), name="bn")]
    check_same(fn, {"a": rand(r, 2, 3, 4)})
    # channel axis 1 is not the weight's output axis here: scale and shift stay separate
    assert ops(fn) == ["MatMul", "Mul", "Add"]


def test_identity_removed_even_as_output():
    r = rng()
    fn = Function(attrs={"output_names": ["y", "z"]})
    x = fn.add_input("x", TensorType((3,), F32))
    i1 = fn.op("Identity", x, name="i1")
    y = fn.op("Relu", fn.op("Identity", i1, name="i2"), name="y")
    fn.outputs = [y, fn.op("Identity", y, name="z")]
    check_same(fn, {"x": rand(r, 3)})
    assert ops(fn) == ["Relu"]
    assert fn.outputs[0] is fn.outputs[1] is fn.nodes[0].output
    assert fn.nodes[0].inputs[0] is x
    assert fn.attrs["output_names"] == ["y", "z"]


def test_identity_of_constant_output():
    fn = Function()
    c = fn.constant(np.arange(3, dtype=np.int64), "c")
    fn.outputs = [fn.op("Identity", c)]
    check_same(fn, {})
    assert fn.nodes == [] and fn.outputs == [c]


def test_dropout_without_ratio_is_removed_and_mask_becomes_ones():
    r = rng()
    fn = Function()
    x = fn.add_input("x", TensorType((2, 3), F32))
    node = fn.add_node("Dropout", [x], {"ratio": 0.0}, name="drop")
    fn.outputs = [fn.op("Relu", node.outputs[0]), node.outputs[1]]
    check_same(fn, {"x": rand(r, 2, 3)})
    assert ops(fn) == ["Relu"]
    mask = fn.outputs[1]
    assert mask.is_constant and mask.data.dtype == np.bool_ and mask.data.all()


def test_training_dropout_is_kept():
    r = rng()
    fn = Function()
    x = fn.add_input("x", TensorType((4, 5), F32))
    node = fn.add_node("Dropout", [x], {"ratio": 0.3, "seed": 3}, name="drop", num_outputs=1)
    fn.outputs = [node.outputs[0]]
    check_same(fn, {"x": rand(r, 4, 5)})
    assert ops(fn) == ["Dropout"]


def test_chain_of_batchnorms():
    r = rng()
    fn = Function()
    x = fn.add_input("x", TensorType((1, 2, 3, 3), F32))
    conv = fn.op("Conv", x, fn.constant(rand(r, 2, 2, 1, 1)), name="conv")
    y = fn.op("BatchNormalization", conv, *bn_params(fn, r, 2, name="bn1"), name="bn1")
    z = fn.op("BatchNormalization", y, *bn_params(fn, r, 2, name="bn2"), name="bn2")
    fn.outputs = [z]
    check_same(fn, {"x": rand(r, 1, 2, 3, 3)})
    assert ops(fn) == ["Conv"]


# -- per-channel Mul / Add chains ------------------------------------------------------------------

def conv_graph(r, bias=True):
    fn = Function()
    x = fn.add_input("x", TensorType((2, 3, 5, 5), F32))
    inputs = [x, fn.constant(rand(r, 4, 3, 3, 3), "w")]
    if bias:
        inputs.append(fn.constant(rand(r, 4), "b"))
    return fn, fn.op("Conv", *inputs, name="conv", pads=[1, 1, 1, 1])


FEED_X = {"x": rand(np.random.default_rng(5), 2, 3, 5, 5)}


@pytest.mark.parametrize("bias", [True, False])
def test_conv_mul_add_fold_into_conv(bias):
    r = rng()
    fn, conv = conv_graph(r, bias)
    m = fn.op("Mul", fn.constant(rand(r, 4, 1, 1)), conv, name="mul")
    a = fn.op("Add", m, fn.constant(rand(r, 1, 4, 1, 1)), name="add")
    bn = fn.op("BatchNormalization", a, *bn_params(fn, r, 4), name="bn")
    fn.outputs = [fn.op("Add", bn, fn.constant(np.float32(0.5)), name="last")]
    check_same(fn, FEED_X)
    assert ops(fn) == ["Conv"]
    assert fn.outputs[0].name == "last"


def test_bias_add_after_biasless_conv():
    r = rng()
    fn, conv = conv_graph(r, bias=False)
    fn.outputs = [fn.op("Relu", fn.op("Add", conv, fn.constant(rand(r, 4, 1, 1)), name="add"))]
    check_same(fn, FEED_X)
    assert ops(fn) == ["Conv", "Relu"]
    assert len(fn.nodes[0].inputs) == 3


def test_batchnorm_then_mul_add_compose():
    r = rng()
    fn = Function()
    x = fn.add_input("x", TensorType((2, 4, 3, 3), F32))
    cat = fn.op("Relu", x, name="relu")
    bn = fn.op("BatchNormalization", cat, *bn_params(fn, r, 4), name="bn")
    m = fn.op("Mul", bn, fn.constant(rand(r, 4, 1, 1)), name="mul")
    a = fn.op("Add", m, fn.constant(rand(r, 4, 1, 1)), name="add")
    fn.outputs = [fn.op("Relu", a, name="out")]
    check_same(fn, {"x": rand(r, 2, 4, 3, 3)})
    assert ops(fn) == ["Relu", "Mul", "Add", "Relu"]


@pytest.mark.parametrize("consts", [
    [("Mul", (4, 1, 1))],
    [("Add", (4, 1, 1))],
    [("Mul", (4, 1, 1)), ("Add", (4, 1, 1))],
    [("Mul", (1, 3, 3))],  # not per channel
    [("Add", (2, 4, 3, 3))],  # not per channel
    [("Mul", (3,)), ("Mul", (3,))],  # along the last axis: not the channel axis
])
def test_minimal_or_non_channel_chains_unchanged(consts):
    r = rng()
    fn = Function()
    v = fn.add_input("x", TensorType((2, 4, 3, 3), F32))
    for op, shape in consts:
        v = fn.op(op, v, fn.constant(rand(r, *shape)))
    fn.outputs = [v]
    text = str(fn)
    check_same(fn, {"x": rand(r, 2, 4, 3, 3)})
    assert str(fn) == text


def test_spatial_mul_is_not_folded_into_conv():
    r = rng()
    fn, conv = conv_graph(r)
    fn.outputs = [fn.op("Mul", conv, fn.constant(rand(r, 4, 5, 5)))]
    check_same(fn, FEED_X)
    assert ops(fn) == ["Conv", "Mul"]


def test_scalar_chain_composes_to_scalars():
    r = rng()
    fn = Function()
    x = fn.add_input("x", TensorType((2, 6, 4), F32))
    v = fn.op("Mul", x, fn.constant(np.float32(3.0)))
    v = fn.op("Add", v, fn.constant(np.float32(1.0)))
    v = fn.op("Mul", fn.constant(np.float32(0.5)), v)
    fn.outputs = [v]
    check_same(fn, {"x": rand(r, 2, 6, 4)})
    assert ops(fn) == ["Mul", "Add"]
    assert [n.inputs[1].data.reshape(-1).tolist() for n in fn.nodes] == [[1.5], [0.5]]


def test_chain_that_cancels_disappears():
    r = rng()
    fn = Function()
    x = fn.add_input("x", TensorType((2, 3), F32))
    v = fn.op("Add", fn.op("Mul", x, fn.constant(np.float32(2.0))), fn.constant(np.float32(0)))
    fn.outputs = [fn.op("Mul", v, fn.constant(np.float32(0.5)))]
    check_same(fn, {"x": rand(r, 2, 3)})
    assert fn.nodes == [] and fn.outputs == [x]


def test_integer_mul_untouched():
    fn = Function()
    x = fn.add_input("x", TensorType((2, 3), DType.int32))
    v = fn.op("Mul", fn.op("Mul", x, fn.constant(np.int32(2))), fn.constant(np.int32(3)))
    fn.outputs = [v]
    text = str(fn)
    check_same(fn, {"x": np.arange(6, dtype=np.int32).reshape(2, 3)})
    assert str(fn) == text


def test_shared_intermediate_blocks_composition():
    r = rng()
    fn = Function()
    x = fn.add_input("x", TensorType((2, 4, 3), F32))
    m = fn.op("Mul", x, fn.constant(rand(r, 4, 1)), name="m")
    a = fn.op("Add", m, fn.constant(rand(r, 4, 1)), name="a")
    b = fn.op("Mul", a, fn.constant(rand(r, 4, 1)), name="b")
    fn.outputs = [b, m]  # m is read twice
    check_same(fn, {"x": rand(r, 2, 4, 3)})
    assert ops(fn) == ["Mul", "Mul", "Add"]  # a and b compose; m stays
