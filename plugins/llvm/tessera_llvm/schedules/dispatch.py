"""Pick and apply the schedule template of one fused group."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tessera import te

from .common import (
    CPUInfo,
    compute_ops,
    injective_space,
    reduce_space,
    schedule_injective_stage,
    schedule_reduce_stage,
)
from .config import ScheduleConfig
from .conv2d import conv_space, find_conv, prefetch_plan, schedule_conv
from .dense import dense_space, find_dense, schedule_dense
from .winograd import find_winograd, schedule_winograd

#: Tags of injective stages kept at root instead of inlined: softmax's exponentials (read by the
#: sum and by the division) and resize's weight/index tables.
KEEP_AT_ROOT = ("softmax_exp", "resize_weight", "resize_index")


@dataclass
class GroupSchedule:
    """The schedule of one group and the configs its templates used (for reports/tuning)."""

    schedule: Any
    configs: list[ScheduleConfig] = field(default_factory=list)
    #: weight prefetching to add after lowering (see tessera_llvm.prefetch), or None
    prefetch: tuple[str, int, int, int] | None = None

    @property
    def template(self) -> str:
        return self.configs[0].template if self.configs else "injective"


def _pick(space: Any, overrides: dict[str, dict[str, Any]] | None) -> ScheduleConfig:
    return space.pick(overrides)


def schedule_group(outputs: list[te.Tensor], cpu: CPUInfo,
                   overrides: dict[str, dict[str, Any]] | None = None) -> GroupSchedule:
    """Create and apply the schedule of a group whose results are ``outputs``.

    ``overrides`` maps a workload key (:meth:`ScheduleConfig.key`) to knob values (from tuning
    records); every other knob keeps its default."""
    s = te.create_schedule([t.op for t in outputs])
    ops = compute_ops(outputs)
    out_ops = [t.op for t in outputs]
    result = GroupSchedule(s)
    last = out_ops[-1]

    wino = find_winograd(ops)
    if wino is not None and len(out_ops) == 1:
        cfg = _pick(conv_space(wino, cpu), overrides)
        schedule_winograd(s, wino, ops, last, cfg)
        result.configs.append(cfg)
        return result
    conv = find_conv(ops)
    mm = find_dense(ops) if conv is None else None
    anchor = conv or mm
    if anchor is not None and len(out_ops) == 1:
        pad = None
        if conv is not None:
            data = conv.input_tensors()[0].op
            if isinstance(data, te.ComputeOp) and "pad" in data.tag:
                pad = data
        keep = {id(anchor)} | ({id(pad)} if pad is not None else set())
        for op in ops:
            if id(op) not in keep and op is not last and not op.reduce_axis:
                s[op].compute_inline()
        others = [op for op in ops if op.reduce_axis and op is not anchor]
        for op in others:  # reductions feeding the anchor's epilogue (rare): at root
            cfg = _pick(reduce_space(op, cpu), overrides)
            schedule_reduce_stage(s, op, cfg)
            result.configs.append(cfg)
        if conv is not None:
            cfg = _pick(conv_space(conv, cpu), overrides)
            schedule_conv(s, conv, last, cfg, pad)
            result.prefetch = prefetch_plan(conv, cfg)
        else:
            cfg = _pick(dense_space(mm, cpu), overrides)
            schedule_dense(s, mm, last, cfg)
        result.configs.insert(0, cfg)
        return result

    # no tensor-core anchor: reductions at root, injective stages inlined into their readers
    # (except tables and values read by several reductions, which are worth computing once)
    for op in ops:
        if op in out_ops:
            continue
        if not op.reduce_axis and any(t in op.tag for t in KEEP_AT_ROOT):
            cfg = _pick(injective_space(op, cpu), overrides)
            schedule_injective_stage(s, op, cfg)
            result.configs.append(cfg)
            continue
        if op.reduce_axis:
            cfg = _pick(reduce_space(op, cpu), overrides)
            schedule_reduce_stage(s, op, cfg)
            result.configs.append(cfg)
        else:
            s[op].compute_inline()
    for op in out_ops:
        if op.reduce_axis:
            cfg = _pick(reduce_space(op, cpu), overrides)
            schedule_reduce_stage(s, op, cfg)
        else:
            cfg = _pick(injective_space(op, cpu), overrides)
            schedule_injective_stage(s, op, cfg)
        result.configs.append(cfg)
    return result
