"""Moved to :mod:`tessera.kernel.grouped_pointwise`: a graph pass only the code-generating backends
use. This module re-exports it, so the old import path keeps working."""

from tessera.kernel.grouped_pointwise import (
    SelectFn,
    grouped_pointwise_to_matmul,
    is_grouped_pointwise,
)

__all__ = [
    "SelectFn", "grouped_pointwise_to_matmul", "is_grouped_pointwise",
]
