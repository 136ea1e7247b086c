"""The llvm templates' knobs: the core's config spaces (:mod:`tessera.autotune.space`)."""

from tessera.plugin.space import ConfigSpace, Knob, ScheduleConfig, divisors, largest_divisor

__all__ = ["ConfigSpace", "Knob", "ScheduleConfig", "divisors", "largest_divisor"]
