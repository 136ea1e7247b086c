"""Auto-tuning: the config spaces schedule templates declare (:mod:`.space`)."""

from tessera.autotune.space import ConfigSpace, Knob, ScheduleConfig, divisors, largest_divisor

__all__ = ["ConfigSpace", "Knob", "ScheduleConfig", "divisors", "largest_divisor"]
