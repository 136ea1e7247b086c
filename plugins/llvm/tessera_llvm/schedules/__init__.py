"""Default CPU schedules for fused groups, each a template with tunable knobs
(:mod:`.config`): blocked convolution, matrix products, pooling, reductions and injective
chains. :func:`schedule_group` picks the template for a group by its anchor compute."""

from .dispatch import GroupSchedule, schedule_group

__all__ = ["GroupSchedule", "schedule_group"]
