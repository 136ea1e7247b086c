"""Tensor expressions and schedules (TVM's ``te``)."""

from tessera.te.tensor import (
    ComputeOp,
    IterVar,
    Operation,
    PlaceholderOp,
    Range,
    Tensor,
    compute,
    max,
    min,
    placeholder,
    reduce_axis,
    sum,
)

__all__ = [
    "ComputeOp", "IterVar", "Operation", "PlaceholderOp", "Range", "Tensor", "compute", "max",
    "min", "placeholder", "reduce_axis", "sum",
]
