"""Moved to :mod:`tessera.kernel.conv_match`: a graph pass only the code-generating backends
use. This module re-exports it, so the old import path keeps working."""

from tessera.kernel.conv_match import (
    ConvOperands,
    constant_weight_conv,
)

__all__ = [
    "ConvOperands", "constant_weight_conv",
]
