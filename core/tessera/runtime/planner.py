"""The planner: from a compiled (or only partitioned) model to what the runtime runs.

:func:`plan_module` turns a :class:`~tessera.runtime.compiled.CompiledModel` into a
:class:`ModulePlan`: the device objects its backends share, the execution plan (one ordered
list of kernel calls and copies), the static memory plan per device (checked to fit this
machine) and the signature callers are checked against. A
:class:`~tessera.runtime.module.Module` holds the result and runs it.

:func:`estimate_memory` plans a partitioned model that has no code yet, as if each node were
one kernel (the reference backend's plan), for ``tessera inspect`` without ``--compile``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tessera.errors import CompileError
from tessera.ir.graph import Function, Node
from tessera.ir.types import TensorType, human_bytes, max_tensor_bytes
from tessera.partition.regions import PartitionedGraph
from tessera.plugin.backend import Backend, CompiledRegion, Kernel, contiguous_concat_offsets
from tessera.plugin.device import CPU, Device
from tessera.runtime.compiled import CompiledModel
from tessera.runtime.memory import MemoryPlan, plan_memory
from tessera.runtime.plan import ExecutionPlan, build_plan
from tessera.runtime.signature import Signature


@dataclass
class ModulePlan:
    """What a module runs: its devices by name, the execution plan, the memory plan per
    device and the signature."""

    devices: dict[str, Device]
    plan: ExecutionPlan
    memory: MemoryPlan
    signature: Signature


def plan_module(model: CompiledModel, devices: Mapping[str, int] | None = None) -> ModulePlan:
    """Plan ``model`` for the devices its backends run on (``devices`` picks the instance of
    a kind, ``{"cuda": 1}``; default: the model's compile options). Raises
    :class:`~tessera.errors.CompileError` when the memory plan cannot fit this machine."""
    if devices is None:
        devices = getattr(model.options, "devices", None)
    devs = module_devices(model.backends, dict(devices or {}))
    plan = build_plan(model.partitioned, model.compiled)
    memory = plan_memory(plan, {name: d.alignment for name, d in devs.items()})
    check_memory_fits(plan, memory)
    return ModulePlan(devs, plan, memory,
                      Signature.of(model.input_types, model.output_names, plan))


def check_memory_fits(plan: ExecutionPlan, memory: MemoryPlan) -> None:
    """Refuse a memory plan that cannot fit before allocating it (a lazily committed arena
    larger than the machine would kill the process on its first run)."""
    limit = max_tensor_bytes()
    for dev, dp in memory.devices.items():
        if dp.total_bytes <= limit:
            continue
        largest = sorted((t for t in plan.tensors.values() if t.device == dev),
                         key=lambda t: -t.type.nbytes)[:3]
        raise CompileError(
            f"the memory plan of device {dev} needs {human_bytes(dp.total_bytes)}, more "
            f"than the {human_bytes(limit)} this machine allows (TESSERA_MAX_TENSOR_BYTES "
            f"sets it); its largest tensors: "
            + "; ".join(f"{t.name!r} {t.type} ({human_bytes(t.type.nbytes)})"
                        for t in largest))


def module_devices(backends: dict[str, Backend],
                   indices: dict[str, int] | None = None) -> dict[str, Device]:
    """Device name -> the one device object the module's backends on it share (the host's
    always included). Backends on one device must return the same object from
    ``device_api()``, so that they share one arena and one stream per execution state.
    ``indices`` picks the instance of a device kind (``{"cuda": 1}`` runs the cuda regions
    on ``cuda:1``)."""
    devices: dict[str, Device] = {"cpu": CPU}
    owner: dict[str, str] = {}
    for b in backends.values():
        device = b.device_api()
        known = devices.get(b.device)
        if known is not None and known is not device and (b.device != "cpu" or
                                                          not device.host_memory):
            first = owner.get(b.device, "the host")
            raise CompileError(f"backends {first!r} and {b.name!r} both run on device "
                               f"{b.device!r} but return different device objects ({known!r} "
                               f"and {device!r}); backends on one device must share its "
                               f"Device instance")
        if known is None:
            devices[b.device] = device
            owner[b.device] = b.name
    for name, index in (indices or {}).items():
        if name not in devices:
            raise CompileError(f"devices={{{name!r}: {index}}}: no backend of this module runs "
                               f"on a {name!r} device (it uses {', '.join(devices)})")
        if name == "cpu" and index != 0:
            raise CompileError("the host is device 'cpu'; it has no other instance")
        devices[name] = devices[name].instance(index)
    return devices


# -- estimates before code generation -------------------------------------------------------------

def estimate_memory(partitioned: PartitionedGraph, backends: dict[str, Backend],
                    devices: Mapping[str, int] | None = None
                    ) -> tuple[ExecutionPlan, MemoryPlan]:
    """The execution plan of a partitioned model with every node one kernel (no code: the
    steps cannot run) and its memory plan, for estimates."""
    plan = estimate_plan(partitioned)
    aligned = module_devices(backends, dict(devices or {}))
    return plan, plan_memory(plan, {name: d.alignment for name, d in aligned.items()})


def estimate_plan(partitioned: PartitionedGraph) -> ExecutionPlan:
    """The execution plan of a partitioned model with every node one kernel."""
    stand_ins = {r.name: unfused_region(r.body, r.backend) for r in partitioned.regions}
    return build_plan(partitioned, stand_ins)


def unfused_region(body: Function, backend: str) -> CompiledRegion:
    """A stand-in for a compiled region: one kernel per node, no code."""
    tensors: dict[str, TensorType] = {v.name: v.type for v in body.inputs}
    for node in body.nodes:
        tensors.update((v.name, v.type) for v in node.outputs)
    return CompiledRegion(backend, body, [_node_kernel(n) for n in body.nodes], tensors,
                          {v.name: v.data for v in body.constants()})


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
