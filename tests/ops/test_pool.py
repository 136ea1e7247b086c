"""Pooling ops (tessera.ops.pool) and their ONNX converters, checked against onnxruntime
on one-node models over random data: kernels, pads, strides, dilations, ceil_mode, opsets
and element types."""

from __future__ import annotations

import numpy as np
import pytest
from nn_support import F16, RNG, check, rand
from onnx_node import one_node_model, run_oracle

from tessera.ops.pool import pool_output_shape


def test_pool_output_shape_ceil_drops_window_starting_in_pad() -> None:
    assert pool_output_shape([5], [2], [2], [0, 1], [1], 0) == [3]
    assert pool_output_shape([5], [2], [2], [0, 0], [1], 1) == [3]
    assert pool_output_shape([4], [3], [2], [1, 1], [1], 1) == [3]
    assert pool_output_shape([4], [2], [2], [0, 1], [1], 1) == [2]  # 3rd would start in pad


# -- pools --------------------------------------------------------------------------------------

POOL_CASES = [
    ((2, 3, 9, 8), {"kernel_shape": [3, 3]}),
    ((1, 3, 9, 8), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]}),
    ((1, 2, 9, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 10, 7), {"kernel_shape": [2, 3], "strides": [3, 2], "pads": [1, 1, 0, 1],
                     "ceil_mode": 1}),
    ((1, 2, 9, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 9, 8), {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 9, 8), {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "VALID"}),
    ((1, 2, 11), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ((1, 2, 5, 6, 7), {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2],
                       "pads": [0, 1, 1, 1, 1, 0]}),
]
DILATED = [
    ((1, 2, 10, 9), {"kernel_shape": [2, 2], "dilations": [2, 3], "strides": [1, 2]}),
    ((1, 2, 10, 9), {"kernel_shape": [3, 2], "dilations": [2, 2], "pads": [1, 1, 1, 1],
                     "ceil_mode": 1, "strides": [2, 2]}),
]


@pytest.mark.parametrize("xs,attrs", POOL_CASES + DILATED)
def test_max_pool_with_indices(xs: tuple, attrs: dict) -> None:
    check("MaxPool", [rand(*xs)], attrs, opset=12, outputs=2)


@pytest.mark.parametrize("xs,attrs", POOL_CASES[:3])
def test_max_pool_storage_order_and_opset8(xs: tuple, attrs: dict) -> None:
    opset = 11 if "ceil_mode" in attrs else 8  # ceil_mode arrived in opset 10
    check("MaxPool", [rand(*xs)], {**attrs, "storage_order": 1}, opset=opset, outputs=2)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, F16])
def test_max_pool_dtypes(dtype) -> None:
    x = RNG.integers(-100 if dtype == np.int8 else 0, 100, (1, 3, 7, 6)).astype(dtype)
    check("MaxPool", [x], {"kernel_shape": [2, 2], "pads": [1, 1, 0, 0]}, opset=12)


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("xs,attrs", POOL_CASES)
def test_average_pool(xs: tuple, attrs: dict, count_include_pad: int) -> None:
    check("AveragePool", [rand(*xs)], {**attrs, "count_include_pad": count_include_pad},
          opset=11)


@pytest.mark.parametrize("xs,attrs", DILATED)
def test_average_pool_dilations(xs: tuple, attrs: dict) -> None:
    check("AveragePool", [rand(*xs)], attrs, opset=19)


def test_average_pool_float16_opset7() -> None:
    check("AveragePool", [rand(1, 2, 6, 6, dtype=F16)], {"kernel_shape": [3, 3]}, opset=7)


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("xs,attrs", [POOL_CASES[0], POOL_CASES[1], POOL_CASES[4]])
def test_lp_pool(xs: tuple, attrs: dict, p: int) -> None:
    check("LpPool", [rand(*xs)], {**attrs, "p": p}, opset=11)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 5, 6), (1, 2, 3, 4, 5)])
def test_global_pools(op: str, shape: tuple) -> None:
    check(op, [rand(*shape)], opset=13)


@pytest.mark.parametrize("xs,attrs", [((1, 2, 6, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
                                      ((2, 3, 5, 7), {"kernel_shape": [3, 3], "strides": [2, 2],
                                                      "pads": [1, 1, 1, 1]})])
def test_max_unpool(xs: tuple, attrs: dict) -> None:
    x = rand(*xs)
    y, idx = run_oracle(one_node_model("MaxPool", [x], attrs, opset=12, outputs=2), {"x0": x})
    check("MaxUnpool", [y, idx], attrs, opset=11)
    check("MaxUnpool", [y, idx, np.array(xs, np.int64)], attrs, opset=11, consts=(2,))
