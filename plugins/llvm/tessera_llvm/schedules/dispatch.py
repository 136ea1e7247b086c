"""Pick and apply the schedule template of one fused group."""

from __future__ import annotations

from collections.abc import Mapping
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
from tessera.tir.expr import Var

from .common import (
    CPUInfo,
    injective_space,
    reduce_space,
    representative_bounds,
    schedule_injective_stage,
    schedule_reduce_stage,
    unblocking_block,
)
from .config import ScheduleConfig
from .conv2d import conv_space, find_conv, prefetch_plan, schedule_conv
from .dense import dense_space, find_dense, schedule_dense
from .softmax import find_softmax, schedule_softmax
from .winograd import find_winograd, schedule_winograd

__all__ = ["KEEP_AT_ROOT", "LLVM_SCHEDULES", "GroupSchedule", "schedule_group"]


def _pick(space: Any, overrides: dict[str, dict[str, Any]] | None) -> ScheduleConfig:
    return pick(space, overrides)


def _winograd(ctx: GroupContext, wino: te.ComputeOp) -> None:
    cfg = ctx.pick(conv_space(wino, ctx.target))
    schedule_winograd(ctx.schedule, wino, ctx.ops, ctx.last, cfg)
    ctx.result.configs.append(cfg)


def _conv(ctx: GroupContext, conv: te.ComputeOp) -> None:
    _anchored(ctx, conv, conv)


def _dense(ctx: GroupContext, mm: te.ComputeOp) -> None:
    _anchored(ctx, mm, None)


def _anchored(ctx: GroupContext, anchor: te.ComputeOp, conv: te.ComputeOp | None) -> None:
    """A convolution (``conv``) or matrix product with its epilogue: the anchor's template
    (a convolution's padding kept as a stage of its own), the other injective stages inlined
    (but those :data:`KEEP_AT_ROOT` names: at root), reductions feeding the epilogue (rare) at
    root."""
    s, cpu, last = ctx.schedule, ctx.target, ctx.last
    pad = None
    if conv is not None:
        data = conv.input_tensors()[0].op
        if isinstance(data, te.ComputeOp) and "pad" in data.tag:
            pad = data
    keep = {id(anchor)} | ({id(pad)} if pad is not None else set())
    for op in ctx.ops:
        if id(op) in keep or op is last or op.reduce_axis:
            continue
        if any(t in op.tag for t in KEEP_AT_ROOT):
            cfg = ctx.pick(injective_space(op, cpu))
            schedule_injective_stage(s, op, cfg)
            ctx.result.configs.append(cfg)
        else:
            s[op].compute_inline()
    others = [op for op in ctx.ops if op.reduce_axis and op is not anchor]
    for op in others:  # reductions feeding the anchor's epilogue (rare): at root
        cfg = ctx.pick(reduce_space(op, cpu))
        schedule_reduce_stage(s, op, cfg)
        ctx.result.configs.append(cfg)
    if conv is not None:
        cfg = ctx.pick(conv_space(conv, cpu))
        schedule_conv(s, conv, last, cfg, pad)
        ctx.result.prefetch = prefetch_plan(conv, cfg)
    else:
        cfg = ctx.pick(dense_space(anchor, cpu))
        schedule_dense(s, anchor, last, cfg)
    ctx.result.configs.insert(0, cfg)


def _at_root(ctx: GroupContext) -> None:
    """No tensor-core anchor: reductions at root, injective stages inlined into their readers
    (except tables and values read by several reductions, which are worth computing once)."""
    s, cpu, out_ops = ctx.schedule, ctx.target, ctx.out_ops
    for op in ctx.ops:
        if op in out_ops:
            continue
        if not op.reduce_axis and any(t in op.tag for t in KEEP_AT_ROOT):
            cfg = ctx.pick(injective_space(op, cpu))
            schedule_injective_stage(s, op, cfg)
            ctx.result.configs.append(cfg)
            continue
        if op.reduce_axis:
            cfg = ctx.pick(reduce_space(op, cpu))
            schedule_reduce_stage(s, op, cfg)
            ctx.result.configs.append(cfg)
        else:
            s[op].compute_inline()
    unblock = unblocking_block(ctx.ops) if len(out_ops) == 1 else 0
    for op in out_ops:
        if op.reduce_axis:
            cfg = ctx.pick(reduce_space(op, cpu))
            schedule_reduce_stage(s, op, cfg)
        else:
            cfg = ctx.pick(injective_space(op, cpu, unblock=unblock))
            schedule_injective_stage(s, op, cfg)
        ctx.result.configs.append(cfg)


#: The CPU's templates: a Winograd convolution; a direct convolution, else a matrix product,
#: with its epilogue (a group with several outputs around either is scheduled at root); a
#: softmax along the last axis, row by row.
LLVM_SCHEDULES = ScheduleTable(
    (Template("winograd", find_winograd, _winograd),
     Template("conv", find_conv, _conv, refused="fallback"),
     Template("dense", find_dense, _dense, refused="fallback"),
     Template("softmax", find_softmax, schedule_softmax, refused="fallback")),
    fallback=_at_root)


def schedule_group(outputs: list[te.Tensor], cpu: CPUInfo,
                   overrides: dict[str, dict[str, Any]] | None = None,
                   size_bounds: Mapping[Var, tuple[int | None, int | None]] | None = None
                   ) -> GroupSchedule:
    """Create and apply the schedule of a group whose results are ``outputs``.

    ``overrides`` maps a workload key (:meth:`ScheduleConfig.key`) to knob values (from tuning
    records); every other knob keeps its default. ``size_bounds`` (size variable -> (low,
    high), as ``PrimFunc.size_bounds``) gives the run-time sizes of a symbolic group the
    values its schedule decisions take them at (their upper bounds; see
    :mod:`.common`): pass the bounds the function is lowered with."""
    with representative_bounds(size_bounds):
        return LLVM_SCHEDULES.schedule_group(outputs, cpu, overrides)
