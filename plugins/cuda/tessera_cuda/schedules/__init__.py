"""Pick and apply the cuda schedule template of one fused group.

* a group anchored on a matrix product: :mod:`.dense` (shared-memory tiles), its epilogue
  computed from the register tile;
* a group anchored on a 2-D one-group float convolution: :mod:`.conv` (input patches and
  weights through shared memory, register tiles over output channels), its epilogue fused;
* any other group: each stage computed at root is spread one output element per thread
  (:func:`.common.schedule_elementwise`), injective stages inlined into their readers except
  the tables and values several reductions read (softmax's exponentials). Other
  convolutions (depthwise, grouped, 1-D and 3-D, integer) are computed one output element per
  thread with their padding inlined and their epilogue fused.
"""

from __future__ import annotations

from typing import Any

from tessera import te
from tessera.kernel.schedule import (
    KEEP_AT_ROOT,
    GroupContext,
    GroupSchedule,
    ScheduleTable,
    Template,
    pick,
)
from tessera.plugin.space import ScheduleConfig

from .common import (
    BLOCK_REDUCE_MIN,
    GPUInfo,
    block_reduce_space,
    elementwise_space,
    reduce_extent,
    same_extents,
    schedule_block_reduce,
    schedule_elementwise,
)
from .conv import conv_space, find_conv, schedule_conv
from .dense import dense_space, find_dense, schedule_dense

__all__ = ["CUDA_SCHEDULES", "KEEP_AT_ROOT", "GPUInfo", "GroupSchedule", "schedule_group"]


def _pick(space: Any, overrides: dict[str, dict[str, Any]] | None) -> ScheduleConfig:
    return pick(space, overrides)


def _same_axes(a: te.ComputeOp, b: te.ComputeOp) -> bool:
    return same_extents(a, b)


def _with_epilogue(ctx: GroupContext, main: te.ComputeOp) -> bool:
    """A matrix product or a convolution with its epilogue of the same shape, and no other
    reduction."""
    last = ctx.last
    return len(ctx.out_ops) == 1 and (last is main or _same_axes(main, last)) and \
        not any(op.reduce_axis for op in ctx.ops if op is not main)


def _anchored(space_of: Any, apply: Any) -> Any:
    """The apply step of an anchored template: the group's other stages inlined into the
    anchor's epilogue, then the template (``space_of`` its config space)."""

    def run(ctx: GroupContext, main: te.ComputeOp) -> None:
        s, last = ctx.schedule, ctx.last
        for op in ctx.ops:
            if op is not main and op is not last:
                s[op].compute_inline()
        cfg = ctx.pick(space_of(main, ctx.target))
        apply(s, main, last, cfg)
        ctx.result.configs.append(cfg)

    return run


def _first_reduction(ops: list[te.ComputeOp]) -> te.ComputeOp | None:
    return next((op for op in ops if op.reduce_axis), None)


def _reduce_epilogue_fits(ctx: GroupContext, anchor: te.ComputeOp) -> bool:
    last = ctx.last
    return len(ctx.out_ops) == 1 and last is not anchor and bool(last.axis) and \
        _same_axes(anchor, last) and sum(1 for op in ctx.ops if op.reduce_axis) == 1 and \
        not _block_reduce(anchor)


def _reduce_epilogue(ctx: GroupContext, anchor: te.ComputeOp) -> None:
    """One reduction (a convolution, a pooling window) with an elementwise epilogue: the
    reduction per thread in a register, the epilogue applied before the store."""
    s, last = ctx.schedule, ctx.last
    for op in ctx.ops:
        if op is not anchor and op is not last:
            s[op].compute_inline()
    cfg = ctx.pick(elementwise_space(last, ctx.target, "cuda_reduce_epilogue", vectors=False))
    s[anchor].set_scope("local")
    schedule_elementwise(s, last, cfg)
    stage = s[last]
    s[anchor].compute_at(stage, stage.leaf_iter_vars[-1])
    ctx.result.configs.append(cfg)


def _at_root(ctx: GroupContext) -> None:
    """Each stage computed at root one output element per thread; injective stages inlined
    into their readers except tables and values several reductions read."""
    s = ctx.schedule
    for op in ctx.ops:
        if op in ctx.out_ops:
            continue
        if op.reduce_axis or any(t in op.tag for t in KEEP_AT_ROOT):
            ctx.result.configs.append(_schedule_at_root(s, op, ctx.target, ctx.overrides))
        else:
            s[op].compute_inline()
    for op in ctx.out_ops:
        ctx.result.configs.append(_schedule_at_root(s, op, ctx.target, ctx.overrides))


#: The GPU's templates: a matrix product, else a convolution, with its epilogue of the same
#: shape; else one reduction with its elementwise epilogue; else every stage at root.
CUDA_SCHEDULES = ScheduleTable(
    (Template("dense", find_dense, _anchored(dense_space, schedule_dense), _with_epilogue),
     Template("conv", find_conv, _anchored(conv_space, schedule_conv), _with_epilogue),
     Template("reduce_epilogue", _first_reduction, _reduce_epilogue, _reduce_epilogue_fits)),
    fallback=_at_root, default_template="cuda_elementwise")


def schedule_group(outputs: list[te.Tensor], gpu: GPUInfo,
                   overrides: dict[str, dict[str, Any]] | None = None) -> GroupSchedule:
    """Create and apply the schedule of a group whose results are ``outputs``."""
    return CUDA_SCHEDULES.schedule_group(outputs, gpu, overrides)


def _block_reduce(op: te.ComputeOp) -> bool:
    """Whether reduction ``op`` gets a block of threads per output element: long reductions
    (a softmax row, a layer norm, a mean over a sequence), not the windows of convolutions
    and pooling, and only sums, maxima and minima of one value."""
    return bool(op.reduce_axis) and reduce_extent(op) >= BLOCK_REDUCE_MIN and \
        not any(t in op.tag for t in ("conv", "pool")) and \
        getattr(op.body, "combiner", None) in ("sum", "max", "min")


def _schedule_at_root(s: Any, op: te.ComputeOp, gpu: GPUInfo,
                      overrides: dict[str, dict[str, Any]] | None) -> ScheduleConfig:
    if _block_reduce(op):
        cfg = _pick(block_reduce_space(op, gpu), overrides)
        schedule_block_reduce(s, op, cfg)
        return cfg
    cfg = _pick(elementwise_space(op, gpu, "cuda_reduce" if op.reduce_axis
                                  else "cuda_injective"), overrides)
    schedule_elementwise(s, op, cfg)
    return cfg
