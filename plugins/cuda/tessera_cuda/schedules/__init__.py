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

from dataclasses import dataclass, field
from typing import Any

from tessera import te
from tessera.plugin.space import ScheduleConfig

from .common import (
    BLOCK_REDUCE_MIN,
    GPUInfo,
    block_reduce_space,
    compute_ops,
    elementwise_space,
    reduce_extent,
    schedule_block_reduce,
    schedule_elementwise,
)
from .conv import conv_space, find_conv, schedule_conv
from .dense import dense_space, find_dense, schedule_dense

__all__ = ["GPUInfo", "GroupSchedule", "schedule_group"]

#: Injective stages kept at root: read by several reductions or tables.
KEEP_AT_ROOT = ("softmax_exp", "resize_weight", "resize_index")


@dataclass
class GroupSchedule:
    schedule: Any
    configs: list[ScheduleConfig] = field(default_factory=list)

    @property
    def template(self) -> str:
        return self.configs[0].template if self.configs else "cuda_elementwise"


def _pick(space: Any, overrides: dict[str, dict[str, Any]] | None) -> ScheduleConfig:
    return space.pick(overrides)


def _same_axes(a: te.ComputeOp, b: te.ComputeOp) -> bool:
    return [int(x.dom.extent.value) for x in a.axis] == [int(x.dom.extent.value) for x in b.axis]


def schedule_group(outputs: list[te.Tensor], gpu: GPUInfo,
                   overrides: dict[str, dict[str, Any]] | None = None) -> GroupSchedule:
    """Create and apply the schedule of a group whose results are ``outputs``."""
    s = te.create_schedule([t.op for t in outputs])
    ops = compute_ops(outputs)
    out_ops = [t.op for t in outputs]
    result = GroupSchedule(s)
    last = out_ops[-1]
    # a matrix product or a convolution with its epilogue of the same shape: its template
    for find, space_of, apply in ((find_dense, dense_space, schedule_dense),
                                  (find_conv, conv_space, schedule_conv)):
        main = find(ops)
        if main is None or len(out_ops) != 1 or not (last is main or _same_axes(main, last)) \
                or any(op.reduce_axis for op in ops if op is not main):
            continue
        for op in ops:
            if op is not main and op is not last:
                s[op].compute_inline()
        cfg = _pick(space_of(main, gpu), overrides)
        apply(s, main, last, cfg)
        result.configs.append(cfg)
        return result

    anchor = next((op for op in ops if op.reduce_axis), None)
    if anchor is not None and len(out_ops) == 1 and last is not anchor and last.axis and \
            _same_axes(anchor, last) and sum(1 for op in ops if op.reduce_axis) == 1 and \
            not _block_reduce(anchor):
        # one reduction (a convolution, a pooling window) with an elementwise epilogue: the
        # reduction per thread in a register, the epilogue applied before the store
        for op in ops:
            if op is not anchor and op is not last:
                s[op].compute_inline()
        cfg = _pick(elementwise_space(last, gpu, "cuda_reduce_epilogue", vectors=False),
                    overrides)
        s[anchor].set_scope("local")
        schedule_elementwise(s, last, cfg)
        stage = s[last]
        s[anchor].compute_at(stage, stage.leaf_iter_vars[-1])
        result.configs.append(cfg)
        return result

    for op in ops:
        if op in out_ops:
            continue
        if op.reduce_axis or any(t in op.tag for t in KEEP_AT_ROOT):
            result.configs.append(_schedule_at_root(s, op, gpu, overrides))
        else:
            s[op].compute_inline()
    for op in out_ops:
        result.configs.append(_schedule_at_root(s, op, gpu, overrides))
    return result


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
