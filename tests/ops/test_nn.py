"""Neural-network ops (tessera.ops.nn: softmax family, losses, Dropout, DepthToSpace,
SpaceToDepth) and their ONNX converters, checked against onnxruntime on one-node models over
random data: axes, opsets, reductions and element types; and the fusion patterns of the common
CNN ops."""

from __future__ import annotations

import numpy as np
import pytest
from nn_support import F16, F32, RNG, check, rand
from onnx_node import one_node_model, run_tessera

from tessera.frontend.onnx import import_onnx
from tessera.ops.registry import OpPattern, get_schema


def test_patterns() -> None:
    fusable = OpPattern.OUT_ELEMWISE_FUSABLE
    for op in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
        assert get_schema(op).pattern == fusable
    for op in ("MaxPool", "AveragePool", "Softmax", "BatchNormalization", "LayerNormalization"):
        assert get_schema(op).pattern == OpPattern.OPAQUE
    assert get_schema("GlobalAveragePool").pattern == OpPattern.COMM_REDUCE


# -- softmax family -----------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, 2])
def test_softmax_family(op: str, opset: int, axis: int | None) -> None:
    attrs = {} if axis is None else {"axis": axis}
    x = rand(2, 3, 4) * 5
    if op == "Hardmax":
        x[0, 1, :2] = 7.0  # ties resolve to the first maximum
    got = check(op, [x], attrs, opset=opset)
    model = one_node_model(op, [x], attrs, opset=opset)
    ops = [n.op for n in import_onnx(model).nodes]
    if opset == 11 and axis in (None, 0, 1):
        assert ops == ["Reshape", op, "Reshape"]  # coerced to 2-D at axis
        assert import_onnx(model).outputs[0].name == "y0"
    else:
        assert ops == [op]
    assert got[0].shape == x.shape


def test_softmax_float16_large_values() -> None:
    check("Softmax", [np.array([[1000, 1001, 1002], [-1000, 0, 1000]], F16)], opset=13)


# -- Dropout ------------------------------------------------------------------------------------

@pytest.mark.parametrize("opset,n_out", [(7, 1), (12, 2), (13, 1), (22, 2)])
def test_dropout_inference(opset: int, n_out: int) -> None:
    check("Dropout", [rand(3, 4)], {"ratio": 0.3} if opset < 12 else {}, opset=opset,
          outputs=n_out)
    fn = import_onnx(one_node_model("Dropout", [rand(3, 4)], opset=opset, outputs=n_out))
    assert all(n.op == "Identity" for n in fn.nodes)  # no Dropout left


@pytest.mark.parametrize("opset,mask_dtype", [(7, F32), (10, np.bool_)])
def test_dropout_legacy_mask_all_kept(opset: int, mask_dtype) -> None:
    # onnxruntime's pre-12 kernels return an all-zero mask in inference; every element is kept.
    x = rand(3, 4)
    y, mask = run_tessera(one_node_model("Dropout", [x], {"ratio": 0.3}, opset=opset, outputs=2),
                          {"x0": x})
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == mask_dtype and mask.all()


def test_dropout_ratio_and_training_inputs() -> None:
    x = rand(4, 5)
    inputs = [x, np.array(0.4, F32), np.array(False)]
    check("Dropout", inputs, opset=13, outputs=2, consts=(1, 2))
    check("Dropout", inputs, opset=13, outputs=2, consts=(2,))  # runtime ratio, not training
    inputs = [x, np.array(0.0, F32), np.array(True)]
    check("Dropout", inputs, opset=13, outputs=2, consts=(1, 2))
    model = one_node_model("Dropout", [x, np.array(0.5, F32), np.array(True)], {"seed": 3},
                           opset=13, outputs=2, consts=(1, 2))
    y, mask = run_tessera(model, {"x0": x})
    assert mask.dtype == np.bool_ and 0 < mask.sum() < mask.size
    np.testing.assert_allclose(y, np.where(mask, x * 2, 0), rtol=1e-6)
    y2, _ = run_tessera(model, {"x0": x})
    np.testing.assert_array_equal(y, y2)  # deterministic per seed


# -- data movement ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(mode: str) -> None:
    check("DepthToSpace", [rand(2, 8, 3, 4)], {"blocksize": 2, "mode": mode}, opset=13)


def test_space_to_depth() -> None:
    check("SpaceToDepth", [rand(2, 3, 6, 4)], {"blocksize": 2}, opset=13)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth_inverts_depth_to_space(mode: str) -> None:
    x = rand(1, 8, 3, 5)
    d2s = get_schema("DepthToSpace").reference(x, blocksize=2, mode=mode)
    back = get_schema("SpaceToDepth").reference(d2s, blocksize=2, mode=mode)
    np.testing.assert_array_equal(back, x)


# -- losses -------------------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", [None, 1, -1])
def test_nll_loss(reduction: str, weighted: bool, ignore_index: int | None) -> None:
    x = rand(3, 4, 5)
    target = RNG.integers(0, 4, (3, 5)).astype(np.int64)
    if ignore_index is not None:
        target[0, :2] = ignore_index
    attrs = {"reduction": reduction}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    check("NegativeLogLikelihoodLoss", [x, target, rand(4, lo=0.1) if weighted else None],
          attrs, opset=13)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4, 2)])
def test_softmax_cross_entropy_loss(reduction: str, weighted: bool, shape: tuple) -> None:
    x = rand(*shape) * 3
    labels = RNG.integers(0, 3, (shape[0], *shape[2:])).astype(np.int64)
    labels.reshape(-1)[0] = 2
    check("SoftmaxCrossEntropyLoss", [x, labels, rand(3, lo=0.1) if weighted else None],
          {"reduction": reduction, "ignore_index": 2}, opset=13, outputs=2)
