"""Sampling ops (tessera.ops.sampling: GridSample, AffineGrid, RoiAlign) and their ONNX
converters, checked against onnxruntime (or ONNX's reference evaluator for cases onnxruntime
lacks) on one-node models over random data: modes, padding modes, align_corners and opsets."""

from __future__ import annotations

import numpy as np
import pytest
from nn_support import F32, check, rand

# -- sampling -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_2d(mode: str, padding_mode: str, align_corners: int) -> None:
    grid = rand(2, 4, 5, 2, lo=-1.3, hi=1.3)
    check("GridSample", [rand(2, 3, 5, 6), grid],
          {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners},
          opset=16)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_grid_sample_opset20_volumetric(mode: str) -> None:
    grid = rand(1, 3, 2, 4, 3, lo=-1.2, hi=1.2)
    check("GridSample", [rand(1, 2, 4, 5, 3), grid], {"mode": mode}, opset=20, oracle="ref")
    check("GridSample", [rand(1, 2, 5, 6), rand(1, 3, 4, 2)], {"mode": mode}, opset=20)


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [1, 2, 3, 4, 5]])
def test_affine_grid(size: list[int], align_corners: int) -> None:
    n = len(size) - 2
    theta = rand(size[0], n, n + 1)
    check("AffineGrid", [theta, np.array(size, np.int64)], {"align_corners": align_corners},
          opset=20, consts=(1,), oracle="ref")


ROIS = np.array([[0, 0, 4, 5], [1.5, 0.5, 6.2, 3.7], [2, 2, 2.5, 3], [-1, 3, 9, 9]], F32)


@pytest.mark.parametrize("opset", [10, 16])
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("attrs", [{"output_height": 3, "output_width": 2, "sampling_ratio": 2},
                                   {"output_height": 2, "output_width": 4,
                                    "spatial_scale": 0.5},
                                   {"coordinate_transformation_mode": "output_half_pixel"}])
def test_roi_align(opset: int, mode: str, attrs: dict) -> None:
    if opset == 10:
        attrs = {k: v for k, v in attrs.items() if k != "coordinate_transformation_mode"}
    x = rand(2, 3, 7, 8)
    check("RoiAlign", [x, ROIS, np.array([0, 1, 1, 0], np.int64)], {"mode": mode, **attrs},
          opset=opset, rtol=1e-4, atol=1e-5)
