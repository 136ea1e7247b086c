"""Moved to :mod:`tessera.kernel.fuse_ops`: a graph pass only the code-generating backends
use. This module re-exports it, so the old import path keeps working."""

from tessera.kernel.fuse_ops import (
    BROADCAST,
    COMM_REDUCE,
    ELEMWISE,
    INJECTIVE,
    MAX_FUSE_DEPTH,
    OPAQUE,
    OUT_ELEMWISE_FUSABLE,
    FusedGroup,
    PatternFn,
    format_groups,
    fuse_ops,
    op_pattern,
)

__all__ = [
    "BROADCAST", "COMM_REDUCE", "ELEMWISE", "FusedGroup", "INJECTIVE", "MAX_FUSE_DEPTH",
    "OPAQUE", "OUT_ELEMWISE_FUSABLE", "PatternFn", "format_groups", "fuse_ops", "op_pattern",
]
