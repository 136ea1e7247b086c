"""A partitioned model before code generation: its report, graph and a memory estimate.

:func:`tessera.api.partition_model` returns one; ``tessera inspect`` shows it without compiling.
The memory estimate plans the partitioned graph as if each node were one kernel (the
reference backend's plan: one buffer per node output, reused by liveness, concatenations
elided where their layout allows). Backends that fuse nodes keep fewer intermediates, and
layout changes (blocked convolutions) add some, so the compiled plan differs; compiling gives
the exact plan.
"""

from __future__ import annotations

from typing import Any

from tessera.errors import CompileError
from tessera.ir.graph import Function, Node
from tessera.ir.types import TensorType
from tessera.partition.partitioner import REGION_OP
from tessera.partition.report import PartitionReport
from tessera.plugin.backend import Backend, CompiledRegion, Kernel
from tessera.runtime.memory import MemoryPlan, MemoryReport, contiguous_concat_offsets, plan_memory
from tessera.runtime.module import module_devices
from tessera.runtime.plan import ExecutionPlan, build_plan

ESTIMATE_NOTE = ("an estimate before code generation: one buffer per node output, so "
                 "backends that fuse nodes need less; --compile gives the compiled plan")


def _not_compiled(ins: list[Any], outs: list[Any]) -> None:
    raise CompileError("a memory estimate's kernel cannot run: the model is not compiled")


def _node_kernel(node: Node) -> Kernel:
    """The kernel a node would be if it ran alone (a concatenation's inputs may be placed
    inside its output, as the reference backend allows)."""
    ins = [v for v in node.inputs if v is not None]
    offsets = None
    if node.op == "Concat" and len(node.outputs) == 1 and len(ins) == len(node.inputs):
        offsets = contiguous_concat_offsets([v.type for v in ins], node.outputs[0].type)
    return Kernel(node.name, _not_compiled, [v.name for v in ins],
                  [v.name for v in node.outputs], node.op, concat_offsets=offsets)


def unfused_region(body: Function, backend: str) -> CompiledRegion:
    """A stand-in for a compiled region: one kernel per node, no code."""
    tensors: dict[str, TensorType] = {v.name: v.type for v in body.inputs}
    for node in body.nodes:
        tensors.update((v.name, v.type) for v in node.outputs)
    return CompiledRegion(backend, body, [_node_kernel(n) for n in body.nodes], tensors,
                          {v.name: v.data for v in body.constants()})


def estimate_plan(graph: Function) -> ExecutionPlan:
    """The execution plan of a partitioned graph with every node one kernel (no code: the
    steps cannot run), for memory estimates."""
    stand_ins = {n.body.name: unfused_region(n.body, n.body.attrs["backend"])
                 for n in graph.nodes if n.op == REGION_OP and n.body is not None}
    return build_plan(graph, stand_ins)


class PartitionedModel:
    """What compiling would start from: the partitioned graph, the partition report, the
    pass timings and a memory estimate (:data:`ESTIMATE_NOTE`). It has the report methods of
    a :class:`~tessera.runtime.module.Module` but no code, so it cannot run."""

    def __init__(self, graph: Function, backends: dict[str, Backend], target: str,
                 report: PartitionReport, pass_timings: list[tuple[str, float]] | None = None,
                 devices: dict[str, int] | None = None) -> None:
        self.graph = graph
        self.backends = backends
        self.target = target
        self.report = report
        self.pass_timings = list(pass_timings or [])
        self.output_names: list[str] = list(graph.attrs.get("output_names") or
                                            [v.name for v in graph.outputs])
        self.input_types: dict[str, TensorType] = {v.name: v.type for v in graph.inputs}
        self.plan = estimate_plan(graph)
        aligned = module_devices(backends, devices)
        self.memory: MemoryPlan = plan_memory(
            self.plan, {name: d.alignment for name, d in aligned.items()})

    def partition_report(self) -> PartitionReport:
        return self.report

    def memory_report(self) -> MemoryReport:
        """The estimate per device, with a note saying it is one."""
        rows = [(dev, len(dp.offsets), dp.total_bytes, dp.no_reuse_bytes)
                for dev, dp in self.memory.devices.items()]
        return MemoryReport(rows, note=ESTIMATE_NOTE)

    def tuning_summary(self) -> tuple[int, int] | None:
        """None: which schedules tuning records give is known once code is generated."""
        return None

    def __repr__(self) -> str:
        return (f"<PartitionedModel target={self.target!r} regions="
                f"{len(self.report.regions)} steps={len(self.plan.steps)}>")
