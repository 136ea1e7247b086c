"""A partitioned model before code generation: its report, graph and a memory estimate.

:func:`tessera.api.partition_model` returns one; ``tessera inspect`` shows it without compiling.
The memory estimate plans the partitioned graph as if each node were one kernel (the
reference backend's plan: one buffer per node output, reused by liveness, concatenations
elided where their layout allows; :func:`tessera.runtime.planner.estimate_memory`). Backends
that fuse nodes keep fewer intermediates, and layout changes (blocked convolutions) add some,
so the compiled plan differs; compiling gives the exact plan.
"""

from __future__ import annotations

from tessera.ir.graph import Function
from tessera.ir.types import TensorType
from tessera.partition.regions import PartitionedGraph
from tessera.partition.report import PartitionReport
from tessera.plugin.backend import Backend
from tessera.runtime.memory import MemoryReport
from tessera.runtime.planner import estimate_memory, estimate_plan, unfused_region

__all__ = ["ESTIMATE_NOTE", "PartitionedModel", "estimate_plan", "unfused_region"]

ESTIMATE_NOTE = ("an estimate before code generation: one buffer per node output, so "
                 "backends that fuse nodes need less; --compile gives the compiled plan")


class PartitionedModel:
    """What compiling would start from: the partitioned model (graph, typed regions, report),
    the pass timings and a memory estimate (:data:`ESTIMATE_NOTE`). It has the report methods
    of a :class:`~tessera.runtime.module.Module` but no code, so it cannot run."""

    def __init__(self, partitioned: PartitionedGraph, backends: dict[str, Backend], target: str,
                 pass_timings: list[tuple[str, float]] | None = None,
                 devices: dict[str, int] | None = None) -> None:
        self.partitioned = partitioned
        self.graph: Function = partitioned.graph
        self.backends = backends
        self.target = target
        self.report: PartitionReport = partitioned.report
        self.pass_timings = list(pass_timings or [])
        self.output_names: list[str] = partitioned.output_names
        self.input_types: dict[str, TensorType] = partitioned.input_types
        self.plan, self.memory = estimate_memory(partitioned, backends, devices)
        #: what the partition covers when it is not the whole model (a staged model's
        #: stage 1), else ""
        self.note = ""

    def partition_report(self) -> PartitionReport:
        return self.report

    def memory_report(self) -> MemoryReport:
        """The estimate per device, with a note saying it is one."""
        return self.memory.report(note=ESTIMATE_NOTE)

    def tuning_summary(self) -> tuple[int, int] | None:
        """None: which schedules tuning records give is known once code is generated."""
        return None

    def __repr__(self) -> str:
        return (f"<PartitionedModel target={self.target!r} regions="
                f"{len(self.report.regions)} steps={len(self.plan.steps)}>")
