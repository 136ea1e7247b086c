"""Tuning tasks: the distinct workloads of a model for a target, with their weights.

A task is one schedule template applied to one workload (its shapes and attributes) by one
backend: what a tuning record's ``key`` names. :func:`extract_tasks` compiles the model once with
the default schedules and reads what each backend reports of its kernels'
schedules (``CompiledRegion.info["schedules"]``, written with
:func:`tessera.autotune.space.schedule_info`: every config a kernel's schedule read, with its
knobs' candidates). That report is how a backend declares its tunable tasks; a backend
without one has none. A workload that several kernels share (ResNet-50's repeated blocks) is one
task whose ``weight`` counts them, so a tuner spends its trials where the model's time is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import tessera
from tessera.autotune.knobspace import Conditions, KnobSpace
from tessera.errors import TesseraError
from tessera.runtime.dynamic import DynamicModule
from tessera.runtime.staged import StagedModule

__all__ = ["Task", "extract_tasks", "tasks_of_module"]


@dataclass
class Task:
    """One workload of one template on one backend."""

    key: str
    template: str
    backend: str
    target: str
    knobs: dict[str, list[Any]]
    default: dict[str, Any]
    weight: int = 1
    #: The kernels that run it (region kernel names) and their floating-point work each.
    kernels: list[str] = field(default_factory=list)
    flops: int = 0
    #: The conditional knobs (knob -> (other knob -> values)): a knob has an effect only
    #: under those values (:mod:`tessera.autotune.knobspace`); empty in older reports.
    when: Conditions = field(default_factory=dict)

    @property
    def space(self) -> KnobSpace:
        """The knobs as tuners search them (inactive knobs at their value in ``default``)."""
        return KnobSpace(self.knobs, self.when, self.default)

    @property
    def space_size(self) -> int:
        """How many distinct (canonical) configs the task has."""
        return self.space.size()

    @property
    def tunable(self) -> bool:
        return any(len(c) > 1 for c in self.knobs.values())


def tasks_of_module(module: Any) -> list[Task]:
    """The tasks of a compiled module (its regions' schedule reports), heaviest first
    (weight times work): of the module :func:`static_module` picks (a TesseraError for a
    module with symbolic input dimensions)."""
    module = static_module(module)
    tasks: dict[tuple[str, str], Task] = {}
    model = getattr(module, "model", None)  # a Module's typed compiled model
    kinds = {r.name: str(r.kind) for r in model.regions} if model is not None else {}
    for name, cr in module.compiled.items():
        target = kinds.get(name) or cr.backend
        flops = {k.name: int(getattr(k, "flops", 0) or 0) for k in cr.kernels}
        for kernel, sched in (cr.info.get("schedules") or {}).items():
            for c in sched.get("configs") or []:
                ident = (cr.backend, c["key"])
                task = tasks.get(ident)
                if task is None:
                    task = tasks[ident] = Task(
                        key=c["key"], template=c["template"], backend=cr.backend,
                        target=target, knobs={k: list(v) for k, v in c["knobs"].items()},
                        default=dict(c["config"]), weight=0,
                        flops=flops.get(kernel, 0),
                        when={k: {o: list(v) for o, v in conds.items()}
                              for k, conds in (c.get("when") or {}).items()})
                task.weight += 1
                task.kernels.append(kernel)
    return sorted(tasks.values(), key=lambda t: -(t.weight * max(t.flops, 1)))


def extract_tasks(model: Any, target: str | None = "auto", **compile_args: Any) -> list[Task]:
    """Compile ``model`` for ``target`` with the default schedules and return its tasks
    (:func:`tasks_of_module`); ``compile_args`` go to :func:`tessera.compile`
    (``input_shapes``, ``opt_level``, ...)."""
    compile_args.pop("tuning_records", None)
    compile_args.setdefault("keep_graph_weights", True)  # tasks lower the regions again
    return tasks_of_module(static_module(tessera.compile(model, target=target, **compile_args)))


def static_module(module: Any) -> Any:
    """The module whose kernels are tuned: ``module`` if its shapes are fixed; the stage
    compiled once of a staged model (the part before its data-dependent nodes; the rest
    compiles per shape at run time, each workload taking the nearest tuned size's knobs);
    for a model whose inputs keep symbolic dimensions a
    :class:`~tessera.errors.TesseraError` asking for the sizes to tune at (kernels are tuned
    per size; a dynamic module compiled with the records applies them at every size, each
    workload taking the nearest tuned size's knobs)."""
    if isinstance(module, StagedModule):
        if module.stage1 is None:
            raise TesseraError(f"nothing of this model compiles before its data-dependent "
                               f"nodes ({module.host_text()}), and what follows them compiles "
                               f"per shape at run time: there is no fixed-shape part to tune")
        return static_module(module.stage1)
    if isinstance(module, DynamicModule) or getattr(module, "shape_vars", None) is not None:
        raise TesseraError(f"the model has symbolic input dimensions "
                           f"({module.shape_vars.describe()}); tune it at a size it runs at: "
                           f"give every dimension in input_shapes (CLI: --input-shapes), a "
                           f"representative size. Compiled without input_shapes and with the "
                           f"records, the model uses them at every size (each kernel takes "
                           f"the nearest tuned size's knobs)")
    return module
