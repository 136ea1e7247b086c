"""Auto-tuning: the config spaces schedule templates declare (:mod:`.space`), tuning records
and ``apply_history_best`` (:mod:`.records`), the tasks of a model (:mod:`.tasks`), search
strategies (:mod:`.tuners`), measurement in worker processes (:mod:`.measure`) and the tuning
loop (:mod:`.tune`, ``tessera tune``)."""

from tessera.autotune.config import MeasureConfig, TuneConfig
from tessera.autotune.knobspace import KnobSpace
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
from tessera.autotune.tune import TuneSummary, tune

__all__ = ["ConfigSpace", "Knob", "KnobSpace", "MeasureConfig", "ScheduleConfig", "Task",
           "TuneConfig", "TuningHistory",
           "TuningRecord", "append_records", "best_configs", "divisors", "extract_tasks",
           "largest_divisor", "load_records", "record_for", "tasks_of_module", "TuneSummary",
           "tune"]
