"""Tuning records moved to the plugin contract (:mod:`tessera.plugin.records`):
``CompileOptions.schedule_overrides`` reads them. Re-exported here so that existing imports keep
working."""

from tessera.plugin.records import (
    EXPECTED,
    REQUIRED,
    ScheduleOverrides,
    TuningHistory,
    TuningRecord,
    append_records,
    best_configs,
    cpu_name,
    load_records,
    record_for,
    skip_summary,
)

__all__ = ["EXPECTED", "REQUIRED", "ScheduleOverrides", "TuningHistory", "TuningRecord",
           "append_records", "best_configs", "cpu_name", "load_records", "record_for",
           "skip_summary"]
