"""The VTA compiler: int8 conv2d and dense layers -> instruction streams + DRAM images."""

from __future__ import annotations

from .layers import Conv2dParams
from .program import Program, compile_conv2d, compile_dense, lower_conv2d
from .reference import conv2d_reference, dense_reference
from .tiling import Tiling, choose_tiling

__all__ = [
    "Conv2dParams",
    "Program",
    "Tiling",
    "choose_tiling",
    "compile_conv2d",
    "compile_dense",
    "conv2d_reference",
    "dense_reference",
    "lower_conv2d",
]
