"""Tensor expressions and schedules (TVM's ``te``)."""

from tessera.te.bound import infer_bound
from tessera.te.lower import lower
from tessera.te.schedule import Schedule, Stage, create_schedule, thread_axis
from tessera.te.tensor import (
    ComputeOp,
    IterVar,
    Operation,
    PlaceholderOp,
    Range,
    Tensor,
    compute,
    compute_ops,
    max,
    min,
    placeholder,
    reduce_axis,
    sum,
)

__all__ = [
    "ComputeOp", "IterVar", "Operation", "PlaceholderOp", "Range", "Tensor", "compute",
    "compute_ops", "max", "min", "placeholder", "reduce_axis", "sum",
    "Schedule", "Stage", "create_schedule", "infer_bound", "lower", "thread_axis",
]
