"""Schedule config spaces moved to the plugin contract (:mod:`tessera.plugin.space`): backends
declare their knobs with them. Re-exported here so that existing imports keep working."""

from tessera.plugin.space import (
    ConfigSpace,
    Knob,
    ScheduleConfig,
    divisors,
    largest_divisor,
    schedule_info,
    tuning_info,
)

__all__ = ["ConfigSpace", "Knob", "ScheduleConfig", "divisors", "largest_divisor", "schedule_info",
           "tuning_info"]
