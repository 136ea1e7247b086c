"""Helpers every schedule template uses: walking a group's compute stages, the default
injective schedule, and the CPU facts schedules read."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tessera import te
from tessera.tir.expr import IntImm

from .config import ConfigSpace, ScheduleConfig, largest_divisor


@dataclass(frozen=True)
class CPUInfo:
    """What schedules need to know about the CPU: vector width in float32 lanes and threads."""

    vector_lanes: int = 16
    num_threads: int = 2

    def lanes_for(self, dtype: str) -> int:
        bits = {"float64": 64, "int64": 64, "uint64": 64, "float16": 16, "int16": 16,
                "uint16": 16, "int8": 8, "uint8": 8, "bool": 8}.get(dtype, 32)
        return max(1, self.vector_lanes * 32 // bits)


def compute_ops(outputs: list[te.Tensor]) -> list[te.ComputeOp]:
    """Every compute op the outputs depend on, producers first."""
    order: list[te.ComputeOp] = []
    seen: set[int] = set()

    def visit(op: te.Operation) -> None:
        if id(op) in seen or not isinstance(op, te.ComputeOp):
            return
        seen.add(id(op))
        for t in op.input_tensors():
            visit(t.op)
        order.append(op)

    for t in outputs:
        visit(t.op)
    return order


def extents(op: te.ComputeOp) -> list[int]:
    return [a.dom.extent.value if isinstance(a.dom.extent, IntImm) else 0 for a in op.axis]


def inline_injective(s: Any, outputs: list[te.Tensor], keep: set[int]) -> None:
    """Inline every compute without a reduction that is not an output or in ``keep``."""
    out_ops = {id(t.op) for t in outputs}
    for op in compute_ops(outputs):
        if id(op) in out_ops or id(op) in keep or op.reduce_axis:
            continue
        s[op].compute_inline()


def injective_space(op: te.ComputeOp, cpu: CPUInfo, template: str = "injective") -> ConfigSpace:
    shape = extents(op)
    space = ConfigSpace(template, (tuple(shape), op.output(0).dtype))
    last = shape[-1] if shape else 1
    lanes = cpu.lanes_for(op.output(0).dtype)
    vec = largest_divisor(last, lanes) if last >= 4 else 1
    space.define("vector_width", sorted({1, 4, 8, 16, vec} & set(range(1, last + 1))), vec,
                 "innermost split vectorized (divides the last dimension)")
    space.define("parallel_min_elems", [4096, 16384, 65536], 16384,
                 "smallest output that is worth a parallel launch")
    return space


def schedule_injective_stage(s: Any, op: te.ComputeOp, cfg: ScheduleConfig) -> None:
    """Outer axes fused and parallel (when big enough), the last axis vectorized."""
    stage = s[op]
    axes = list(op.axis)
    total = math.prod(extents(op)) if axes else 1
    if not axes:
        return
    vec = int(cfg.get("vector_width", 1))
    last = axes[-1]
    if vec > 1 and extents(op)[-1] % vec == 0:
        outer_last, inner = stage.split(last, factor=vec)
        stage.vectorize(inner)
        outer_axes = axes[:-1] + [outer_last]
    else:
        outer_axes = axes[:-1] if len(axes) > 1 else axes
    if total >= int(cfg.get("parallel_min_elems", 16384)) and outer_axes:
        fused = stage.fuse(*outer_axes) if len(outer_axes) > 1 else outer_axes[0]
        stage.parallel(fused)


def reduce_space(op: te.ComputeOp, cpu: CPUInfo) -> ConfigSpace:
    space = ConfigSpace("reduce", (tuple(extents(op)),
                                   tuple(a.dom.extent.value for a in op.reduce_axis)))
    space.define("parallel_min_elems", [4096, 16384, 65536], 16384,
                 "smallest reduction (output x reduced elements) worth a parallel launch")
    return space


def schedule_reduce_stage(s: Any, op: te.ComputeOp, cfg: ScheduleConfig) -> None:
    """Data-parallel axes fused and parallel when the work is big enough; reduction serial."""
    stage = s[op]
    axes = list(op.axis)
    work = math.prod(extents(op)) * math.prod(a.dom.extent.value for a in op.reduce_axis)
    shape = extents(op)
    if shape and shape[-1] in (8, 16, 32) and len(axes) > 1:
        # a channel block (NCHWc pooling): reduce outside it, the block as one vector
        stage.reorder(*axes[:-1], *op.reduce_axis, axes[-1])
        stage.vectorize(axes[-1])
        axes = axes[:-1]
    if axes and work >= int(cfg.get("parallel_min_elems", 16384)) and math.prod(
            extents(op)) > 1:
        fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
        stage.parallel(fused)
