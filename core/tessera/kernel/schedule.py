"""The schedule of one fused group, picked from a backend's table of templates.

A code-generating backend schedules each fused group's tensor expression with one of its
templates: a group anchored on a matrix product gets the backend's dense template, one
anchored on a convolution its convolution template, any other group the backend's fallback
(reductions at root, injective stages inlined into their readers, ...). What is common to
every backend is the walk: create the schedule, find the group's stages, try the templates of
the backend's :class:`ScheduleTable` in order, and collect the configs the templates read
(:class:`GroupSchedule`, for reports and tuning). The templates themselves, and what they know
about the device, stay in the backend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from tessera import te
from tessera.plugin.space import ScheduleConfig

__all__ = ["KEEP_AT_ROOT", "GroupContext", "GroupSchedule", "ScheduleTable", "Template",
           "pick", "single_output"]

#: Tags of injective stages kept at root instead of inlined: softmax's exponentials (read by
#: the sum and by the division), resize's weight/index tables and the int16 pairs of an
#: integer matrix product's left operand (read once per column tile).
KEEP_AT_ROOT = ("softmax_exp", "resize_weight", "resize_index", "a_pairs")

Overrides = dict[str, dict[str, Any]] | None


def pick(space: Any, overrides: Overrides) -> ScheduleConfig:
    """The config of ``space`` with the knob values ``overrides`` (workload key -> knob
    values, from tuning records) gives its workload; every other knob at its default."""
    return space.pick(overrides)


@dataclass
class GroupSchedule:
    """The schedule of one group and the configs its templates used (for reports/tuning)."""

    schedule: Any
    configs: list[ScheduleConfig] = field(default_factory=list)
    #: weight prefetching to add after lowering (the llvm backend's), or None
    prefetch: tuple[str, int, int, int] | None = None
    #: the template reported when no config was read (a group of injective stages)
    default_template: str = "injective"

    @property
    def template(self) -> str:
        return self.configs[0].template if self.configs else self.default_template


@dataclass
class GroupContext:
    """One group being scheduled: its schedule, compute stages (producers first), output
    stages, the device facts the backend's templates read (``target``: a CPU's or GPU's),
    the tuning overrides and the result under construction."""

    schedule: Any
    ops: list[te.ComputeOp]
    out_ops: list[te.ComputeOp]
    target: Any
    overrides: Overrides
    result: GroupSchedule

    @property
    def last(self) -> te.ComputeOp:
        """The group's last output stage (where an epilogue ends)."""
        return self.out_ops[-1]

    def pick(self, space: Any) -> ScheduleConfig:
        return pick(space, self.overrides)


def single_output(ctx: GroupContext, anchor: te.ComputeOp) -> bool:
    """A template's default condition: the group has one output."""
    return len(ctx.out_ops) == 1


@dataclass(frozen=True)
class Template:
    """One entry of a schedule table: ``find`` the template's anchor stage among the group's
    stages (None: not this template's group); ``accepts`` the group around it; ``apply``
    schedules the whole group (picking its configs with ``ctx.pick`` and recording them in
    ``ctx.result``). When the anchor is found but the group refused, ``refused`` says whether
    the next template is tried (``"next"``) or the table's fallback (``"fallback"``)."""

    name: str
    find: Callable[[list[te.ComputeOp]], Any]
    apply: Callable[[GroupContext, Any], None]
    accepts: Callable[[GroupContext, Any], bool] = single_output
    refused: Literal["next", "fallback"] = "next"


@dataclass(frozen=True)
class ScheduleTable:
    """A backend's templates, tried in order, and the ``fallback`` that schedules a group no
    template takes; ``default_template`` names a group scheduled without configs."""

    templates: tuple[Template, ...]
    fallback: Callable[[GroupContext], None]
    default_template: str = "injective"

    def schedule_group(self, outputs: list[te.Tensor], target: Any,
                       overrides: Overrides = None) -> GroupSchedule:
        """Create and apply the schedule of a group whose results are ``outputs``."""
        s = te.create_schedule([t.op for t in outputs])
        ctx = GroupContext(s, te.compute_ops(outputs), [t.op for t in outputs], target,
                           overrides, GroupSchedule(s, default_template=self.default_template))
        for template in self.templates:
            anchor = template.find(ctx.ops)
            if anchor is None:
                continue
            if template.accepts(ctx, anchor):
                template.apply(ctx, anchor)
                return ctx.result
            if template.refused == "fallback":
                break
        self.fallback(ctx)
        return ctx.result
