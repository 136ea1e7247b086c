"""Auto-tuning: the config spaces schedule templates declare (:mod:`.space`), tuning records
and ``apply_history_best`` (:mod:`.records`), and the tasks of a model (:mod:`.tasks`)."""

from tessera.autotune.records import (
    TuningHistory,
    TuningRecord,
    append_records,
    best_configs,
    load_records,
    record_for,
)
from tessera.autotune.space import ConfigSpace, Knob, ScheduleConfig, divisors, largest_divisor
from tessera.autotune.tasks import Task, extract_tasks, tasks_of_module

__all__ = ["ConfigSpace", "Knob", "ScheduleConfig", "Task", "TuningHistory", "TuningRecord",
           "append_records", "best_configs", "divisors", "extract_tasks", "largest_divisor",
           "load_records", "record_for", "tasks_of_module"]
