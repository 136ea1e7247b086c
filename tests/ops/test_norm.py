"""Normalization ops (tessera.ops.norm) and their ONNX converters, checked against onnxruntime
on one-node models over random data: shapes, axes, opsets and element types."""

from __future__ import annotations

import numpy as np
import pytest
from nn_support import F16, F32, check, rand
from onnx_node import feeds_of, one_node_model, run_tessera

# -- normalizations -----------------------------------------------------------------------------


def _bn_inputs(c: int, dtype=F32) -> list[np.ndarray]:
    return [rand(c, dtype=dtype), rand(c, dtype=dtype), rand(c, dtype=dtype),
            rand(c, lo=0.5, hi=2.0, dtype=dtype)]


@pytest.mark.parametrize("opset", [7, 9, 15])
@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (1, 4, 5, 6), (1, 2, 3, 4, 2)])
def test_batch_norm(shape: tuple, opset: int) -> None:
    check("BatchNormalization", [rand(*shape), *_bn_inputs(shape[1])], {"epsilon": 1e-3},
          opset=opset, consts=(1, 2, 3, 4))


def test_batch_norm_float16_and_runtime_stats() -> None:
    check("BatchNormalization", [rand(1, 3, 4, 4, dtype=F16), *_bn_inputs(3, F16)], opset=9)
    check("BatchNormalization", [rand(1, 3, 4, 4), *_bn_inputs(3)], opset=15)


def test_batch_norm_training_mode() -> None:
    x = rand(3, 2, 4, 5)
    scale, b, mean, var = _bn_inputs(2)
    model = one_node_model("BatchNormalization", [x, scale, b, mean, var],
                           {"training_mode": 1, "momentum": 0.8}, opset=15, outputs=3)
    y, rm, rv = run_tessera(model, feeds_of([x, scale, b, mean, var]))
    bm, bv = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    want = (x - bm[:, None, None]) / np.sqrt(bv[:, None, None] + 1e-5) * scale[:, None, None] \
        + b[:, None, None]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rm, mean * 0.8 + bm * 0.2, rtol=1e-5)
    np.testing.assert_allclose(rv, var * 0.8 + bv * 0.2, rtol=1e-5)


@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 5, 6)])
def test_instance_norm(shape: tuple) -> None:
    check("InstanceNormalization", [rand(*shape), rand(shape[1]), rand(shape[1])],
          {"epsilon": 1e-4}, opset=7)


@pytest.mark.parametrize("axis", [-1, 1, 2, 0])
def test_layer_norm(axis: int) -> None:
    x = rand(2, 3, 4, 5)
    norm = x.shape[axis:] if axis >= 0 else x.shape[axis:]
    check("LayerNormalization", [x, rand(*norm), rand(*norm)], {"axis": axis, "epsilon": 1e-3},
          opset=17, outputs=3)


def test_layer_norm_no_bias_float16() -> None:
    check("LayerNormalization", [rand(3, 8, dtype=F16), rand(8, dtype=F16)], opset=17, outputs=3)


@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_norm(opset: int, groups: int) -> None:
    x = rand(2, 4, 3, 5)
    n = groups if opset == 18 else 4
    check("GroupNormalization", [x, rand(n), rand(n)], {"num_groups": groups, "epsilon": 1e-3},
          opset=opset, consts=(1, 2), oracle="ort" if opset == 21 else "ref")


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_norm(axis: int) -> None:
    x = rand(2, 3, 6)
    check("RMSNormalization", [x, rand(*x.shape[axis:])], {"axis": axis}, opset=23,
          oracle="ref")


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn(size: int) -> None:
    check("LRN", [rand(2, 6, 4, 5)], {"size": size, "alpha": 0.01, "beta": 0.6, "bias": 1.5},
          opset=13)


@pytest.mark.parametrize("axes", [[0, 2, 3], [1], [2, 3]])
def test_mean_variance_normalization(axes: list[int]) -> None:
    check("MeanVarianceNormalization", [rand(2, 3, 4, 5)], {"axes": axes}, opset=13)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lp_normalization(p: int, axis: int) -> None:
    check("LpNormalization", [rand(3, 4, 5)], {"p": p, "axis": axis}, opset=13)


def test_batch_norm_opset7_per_activation() -> None:
    x = rand(2, 3, 4, 5)
    params = [rand(3, 4, 5), rand(3, 4, 5), rand(3, 4, 5), rand(3, 4, 5, lo=0.5, hi=2.0)]
    check("BatchNormalization", [x, *params], {"spatial": 0}, opset=7, consts=(1, 2, 3, 4))


def test_batch_norm_parameters_of_the_wrong_shape_name_the_node() -> None:
    from tessera.errors import ModelImportError
    from tessera.frontend.onnx import import_onnx

    x, c = rand(1, 3, 4, 4), np.ones(3, F32)
    model = one_node_model("BatchNormalization", [x, c, c, np.ones((3, 2), F32), c], opset=15,
                           consts={1, 2, 3, 4}, typed=False)
    with pytest.raises(ModelImportError, match=r"BatchNormalization.*mean float32\[3, 2\] "
                                               r"must have shape \[3\]"):
        import_onnx(model, check=False)
