"""Staged execution: a model whose output shapes depend on input values.

``NonZero``, ``Unique``, ``NonMaxSuppression`` and ``Compress`` by a computed condition have
outputs whose length only a run knows; Tessera's IR has static shapes. ``tessera.compile``
of a model that applies them to run-time values returns a :class:`StagedModule`: the model
is cut at those nodes (:mod:`tessera.runtime.staging`) into

1. stage 1, everything that does not depend on them, compiled once like any model;
2. the data-dependent nodes, run on the host at each call by Tessera's own converters and
   numpy implementations (every operand known, each node folds to its outputs);
3. the rest, whose inputs include those outputs: compiled per distinct set of input shapes
   on first use and cached (a :class:`~tessera.runtime.dynamic.DynamicModule`, least
   recently used dropped beyond ``max_specializations``), and staged again when it holds
   further data-dependent nodes.

What it costs: one host hop per data-dependent node and call (the arrays they read come
back from the compiled stage and go into the next), and one compile the first time the rest
meets a new set of shapes (a detection head selecting 3 boxes, then 5: two compiles).

Thread safety: the stages are modules safe from many threads, the host nodes keep no state,
and the call counters are guarded by a lock.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from tessera.config import CompileConfig
from tessera.errors import CompileError, RunError, TesseraError
from tessera.frontend.onnx.importer import check_onnx_model
from tessera.frontend.onnx.input_specs import model_input_specs
from tessera.ir.symbolic import InputSpec, ShapeVars
from tessera.ir.types import TensorType
from tessera.partition.report import PartitionReport
from tessera.runtime.dynamic import DynamicModule
from tessera.runtime.memory import MemoryReport
from tessera.runtime.module import Module
from tessera.runtime.profiler import BenchmarkResult, KernelProfile, Profile
from tessera.runtime.signature import random_tensor
from tessera.runtime.split import owned
from tessera.runtime.staging import (
    DATA_DEPENDENT_OPS,
    StagePlan,
    data_dependent_nodes,
    fold_node,
    freeze_model,
    node_text,
    plan_stages,
)
from tessera.runtime.step_form import StepForm

__all__ = ["StagedModule", "StagedStats", "compile_staged"]

#: ``tessera.compile(model, target, config)``: how the stages are compiled.
CompileFn = Callable[[onnx.ModelProto, Any, CompileConfig], Any]


@dataclass(frozen=True)
class StagedStats:
    """A staged module's counters: ``calls`` run, ``host_seconds`` spent in host nodes in
    all, and the cache statistics of stage 1 and of the rest (a dynamic module's
    :class:`~tessera.runtime.dynamic.SpecializationStats`, or a nested
    :class:`StagedStats`; None for a stage that is absent or compiled once)."""

    calls: int
    host_nodes: int
    host_seconds: float
    stage1: Any = None
    rest: Any = None

    @property
    def specializations(self) -> int:
        """Specialisations of the rest cached now (nested stages included)."""
        if isinstance(self.rest, StagedStats):
            return self.rest.specializations + _cached(self.rest.stage1)
        return _cached(self.rest)

    def __str__(self) -> str:
        parts = [f"{self.calls} call(s), {self.host_nodes} host node(s) "
                 f"({self.host_seconds * 1000:.2f} ms on the host in all)"]
        if self.stage1 is not None:
            parts.append(f"stage 1: {self.stage1}")
        if self.rest is not None:
            parts.append(f"rest: {self.rest}")
        return "; ".join(parts)


def _cached(stats: Any) -> int:
    return len(getattr(stats, "cached", []) or [])


def compile_staged(proto: onnx.ModelProto, target: Any, cfg: CompileConfig,
                   compile_fn: CompileFn) -> StagedModule | None:
    """A :class:`StagedModule` for ``proto`` when it applies a data-dependent op to run-time
    values (after ``cfg.freeze_inputs``), else None (compile it as usual). ``compile_fn``
    compiles each stage (``tessera.compile``)."""
    if not any(n.op_type in DATA_DEPENDENT_OPS for n in proto.graph.node):
        return None
    model = freeze_model(proto, cfg.input_shapes, cfg.freeze_inputs)
    found = data_dependent_nodes(model)
    if not found:
        return None
    if cfg.specialize or cfg.dim_bounds or cfg.symbolic_dims:
        raise CompileError("specialize, dim_bounds and symbolic_dims are not supported yet for "
                           "a model with data-dependent output shapes (nodes "
                           f"{', '.join(node_text(n) for n in found)}), which compiles in "
                           "stages")
    check_onnx_model(model)  # every op supported, before any stage compiles
    specs = model_input_specs(model)
    plan = plan_stages(model)
    settings = dataclasses.replace(cfg, input_shapes=None, freeze_inputs=None)
    stage1 = compile_fn(plan.stage1, target, settings) if plan.stage1 is not None else None
    rest = compile_fn(plan.rest, target, settings) if plan.rest is not None else None
    text = getattr(stage1, "target", None) or getattr(rest, "target", None) or str(target)
    return StagedModule(plan, specs, stage1, rest, str(text))


class StagedModule(StepForm):
    """A compiled model with data-dependent output shapes, run in stages: stage 1 compiled
    once, the data-dependent nodes on the host, the rest compiled per set of shapes it meets
    (see the module doc).

    ``run(feeds)`` / ``run(**inputs)`` (with ``output_names=``) return the outputs by name,
    as :class:`~tessera.runtime.module.Module.run` does, from any number of threads at once.
    :meth:`describe` says which nodes run on the host and how many specialisations of the
    rest exist; :meth:`cache_info` counts calls, host time and the stages' caches.
    """

    def __init__(self, plan: StagePlan, specs: Sequence[InputSpec], stage1: Any, rest: Any,
                 target: str) -> None:
        self._plan = plan
        self.shape_vars = ShapeVars(tuple(specs), {})
        self._names = tuple(s.name for s in specs)
        self.output_names = list(plan.output_names)
        self.target = target
        #: the compiled stage before the host nodes (None: they read the inputs only)
        self.stage1 = stage1
        #: the compiled rest (a dynamic module, or a staged one), None when the host nodes
        #: make every remaining output
        self.rest = rest
        #: the nodes run on the host, in order
        self.host_nodes = list(plan.host)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._calls = 0
        self._host_seconds = 0.0

    # -- what the model takes ------------------------------------------------------------------
    @property
    def input_specs(self) -> dict[str, InputSpec]:
        """Input name -> its shape and dtype."""
        return {s.name: s for s in self.shape_vars.inputs}

    @property
    def input_names(self) -> list[str]:
        return list(self._names)

    # -- running --------------------------------------------------------------------------------
    def _arrays(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        missing = [n for n in self._names if n not in inputs]
        unknown = [n for n in inputs if n not in self._names]
        if missing or unknown:
            parts = ([f"unknown input(s) {', '.join(map(repr, unknown))}"] if unknown else []) \
                + ([f"missing input(s) {', '.join(missing)}"] if missing else [])
            raise RunError(f"{'; '.join(parts)}; the model needs {self.shape_vars.describe()}")
        arrays = {n: np.asarray(inputs[n]) for n in self._names}
        self.shape_vars.bind(arrays)  # names the input whose dtype, rank or size is wrong
        return arrays

    def run(self, feeds: Mapping[str, Any] | None = None, /, *,
            output_names: Sequence[str] | None = None,
            **inputs: Any) -> dict[str, np.ndarray] | None:
        """The outputs by name for ``feeds`` (a dict) or keyword inputs (every input), all
        of them or only ``output_names`` in that order. With neither: a run on the inputs
        this thread gave :meth:`set_input`, returning None (read them with
        :meth:`get_output`)."""
        inputs = self._feeds(feeds, inputs)
        if feeds is None and not inputs and (self._names or output_names is None):
            if output_names is not None:
                raise RunError("run(output_names=...) needs the inputs (run(feeds, "
                               "output_names=...)); the step-by-step run() returns nothing")
            step = self._step()
            step.outputs = self._outputs(dict(step.inputs), self.output_names)
            return None
        return self._outputs(inputs, output_names)

    def _outputs(self, inputs: Mapping[str, Any],
                 output_names: Sequence[str] | None) -> dict[str, np.ndarray]:
        names = self.output_names if output_names is None else list(output_names)
        unknown = [n for n in names if n not in self.output_names]
        if unknown:
            raise RunError(f"unknown output(s) {', '.join(map(repr, unknown))}; the model's "
                           f"outputs are {', '.join(self.output_names)}")
        arrays = self._arrays(inputs)
        env = self._evaluate(arrays)
        return {n: owned(env[n], arrays) for n in names}

    def _evaluate(self, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
        plan = self._plan
        env: dict[str, Any] = {**plan.constants, **arrays}
        if self.stage1 is not None:
            env.update(self.stage1.run({x: env[x] for x in plan.stage1_inputs}))
        start = time.perf_counter()
        for node in plan.host:
            env.update(self._host_node(node, env))
        host = time.perf_counter() - start
        if self.rest is not None:
            env.update(self.rest.run({x: env[x] for x in plan.rest_inputs}))
        with self._lock:
            self._calls += 1
            self._host_seconds += host
        return env

    def _host_node(self, node: onnx.NodeProto, env: Mapping[str, Any]) -> dict[str, Any]:
        """The outputs of a data-dependent node, evaluated on the host (a RunError naming it
        when that fails)."""
        try:
            return fold_node(node, env, self._plan.opsets)
        except TesseraError as e:
            raise RunError(f"evaluating data-dependent node {node_text(node)} on the host "
                           f"failed: {e}") from e

    # -- the step-by-step form (per thread) ------------------------------------------------------
    def _knows_input(self, name: str) -> bool:
        return name in self._names

    def _inputs_text(self) -> str:
        return self.shape_vars.describe()

    def _measured(self, inputs: Mapping[str, Any], what: str) -> dict[str, np.ndarray]:
        """The arrays to measure on: ``inputs``, else this thread's :meth:`set_input` values,
        else random data for an input of fixed shape (as :meth:`Module.benchmark` fills
        them; the values decide the data-dependent shapes, so give real inputs for real
        figures)."""
        given = {**self._step().inputs, **inputs}
        rng = np.random.default_rng(0)
        for spec in self.shape_vars.inputs:
            if spec.name in given:
                continue
            if not all(isinstance(d, int) for d in spec.dims):
                raise RunError(f"{what}(): input {spec} has symbolic dimensions; give it "
                               f"({what}(**inputs) or set_input)")
            given[spec.name] = random_tensor(TensorType(tuple(spec.dims), spec.dtype), rng)
        return self._arrays(given)

    def benchmark(self, repeat: int = 10, number: int = 10, warmup: int = 1,
                  **inputs: Any) -> BenchmarkResult:
        """Median/mean/std of ``repeat`` measurements, each the mean of ``number`` calls (ms),
        on ``inputs`` (or those set earlier; random data for the others: their values decide
        the shapes)."""
        arrays = self._measured(inputs, "benchmark")
        return BenchmarkResult.measure(lambda: self._evaluate(arrays), repeat, number, warmup)

    def profile(self, runs: int = 1, **inputs: Any) -> Profile:
        """Per kernel and per backend, over ``runs`` calls: stage 1's profile, the host nodes
        (backend ``host``) and the rest's (its specialisation for the shapes these inputs
        give); inputs as :meth:`benchmark` takes them."""
        plan = self._plan
        arrays = self._measured(inputs, "profile")
        runs = max(runs, 1)
        env: dict[str, Any] = {**plan.constants, **arrays}
        start = time.perf_counter()
        parts: list[Profile] = []
        if self.stage1 is not None:
            feeds = {x: env[x] for x in plan.stage1_inputs}
            parts.append(self.stage1.profile(runs, **feeds))
            env.update(self.stage1.run(feeds))
        host: list[KernelProfile] = []
        for node in plan.host:
            began = time.perf_counter()
            for _ in range(runs):
                out = self._host_node(node, env)
            host.append(KernelProfile(node.name or node.output[0], "host", node.op_type,
                                      (time.perf_counter() - began) * 1000.0 / runs))
            env.update(out)
        parts.append(Profile(host, sum(k.ms for k in host)))
        if self.rest is not None:
            parts.append(self.rest.profile(runs, **{x: env[x] for x in plan.rest_inputs}))
        wall = (time.perf_counter() - start) * 1000.0 / runs
        return Profile([k for p in parts for k in p.kernels],
                       min(wall, sum(p.total_ms for p in parts)),
                       {b: c for p in parts for b, c in p.counters.items()},
                       {r: e for p in parts for r, e in p.execution.items()})

    def compiled_stages(self, prefix: str = "") -> list[tuple[str, Module]]:
        """The compiled modules with their name prefix: stage 1 (``stage1/``) and the rest's
        specialisation used last (``rest/``; a staged rest's own stages below it), those that
        exist so far."""
        stages: list[tuple[str, Module]] = []
        for name, stage in ((f"{prefix}stage1/", self.stage1), (f"{prefix}rest/", self.rest)):
            if isinstance(stage, StagedModule):
                stages += stage.compiled_stages(name)
            elif isinstance(stage, DynamicModule):
                if stage.last_specialization is not None:
                    stages.append((name, stage.last_specialization))
            elif stage is not None:
                stages.append((name, stage))
        return stages

    def partition_report(self) -> PartitionReport:
        """The partitions of :meth:`compiled_stages` (regions named ``stage1/...`` and
        ``rest/...``); the host nodes are in :meth:`describe`."""
        report = PartitionReport(self.target)
        for prefix, stage in self.compiled_stages():
            part = stage.partition_report()
            report.regions += [dataclasses.replace(r, name=f"{prefix}{r.name}")
                               for r in part.regions]
            report.copies += part.copies
            report.fallback += part.fallback
            report.declined += part.declined
        return report

    def memory_report(self) -> MemoryReport:
        """The arenas of :meth:`compiled_stages`, per device."""
        rows: dict[str, list[int]] = {}
        for _, stage in self.compiled_stages():
            for device, count, planned, total in stage.memory_report().rows:
                row = rows.setdefault(device, [0, 0, 0])
                row[0] += count
                row[1] += planned
                row[2] += total
        rest = "" if self.rest is None else " and the rest's specialisation used last"
        return MemoryReport([(d, *r) for d, r in rows.items()],  # type: ignore[misc]
                            note=f"stage 1{rest}; the host nodes' arrays are numpy's")

    def host_text(self) -> str:
        """The data-dependent nodes run on the host, for messages."""
        return ", ".join(node_text(n) for n in self._plan.host)

    # -- reports --------------------------------------------------------------------------------
    def cache_info(self) -> StagedStats:
        """Calls, host time, and the stages' caches (specialisations of the rest)."""
        with self._lock:
            calls, seconds = self._calls, self._host_seconds
        return StagedStats(calls, len(self._plan.host), seconds,
                           _stats(self.stage1), _stats(self.rest))

    def describe(self) -> str:
        """Which nodes run where, and how many specialisations of the rest exist."""
        plan = self._plan
        lines = [f"staged module for {self.target!r} (data-dependent output shapes)"]
        if plan.stage1 is not None:
            lines.append(f"  stage 1 ({len(plan.stage1.graph.node)} ONNX nodes): "
                         f"{type(self.stage1).__name__} -> {', '.join(plan.stage1_outputs)}")
        else:
            lines.append("  stage 1: none (the host nodes read the inputs)")
        lines.append(f"  on the host, per call: {', '.join(node_text(n) for n in plan.host)}")
        if self.rest is None:
            lines.append("  rest: none (the host nodes make the remaining outputs)")
        elif isinstance(self.rest, Module):
            sizes = self.rest.shape_vars
            lines.append(f"  rest ({len(plan.rest.graph.node) if plan.rest else 0} ONNX nodes): "
                         f"Module, compiled once for every size"
                         f"{'' if sizes is None else f' ({sizes.describe()})'}")
        else:
            stats = _stats(self.rest)
            count = stats.specializations if isinstance(stats, StagedStats) else _cached(stats)
            lines.append(f"  rest ({len(plan.rest.graph.node) if plan.rest else 0} ONNX nodes, "
                         f"compiled per set of input shapes): {type(self.rest).__name__}, "
                         f"{count} specialisation(s) cached")
            if isinstance(self.rest, StagedModule):
                lines += ["  " + line for line in self.rest.describe().splitlines()]
        return "\n".join(lines)

    # -- artifacts ------------------------------------------------------------------------------
    def export(self, path: str | Path) -> Path:
        """Not supported yet: raises :class:`TesseraError`."""
        raise TesseraError(f"a staged module (a model with data-dependent output shapes: "
                           f"{', '.join(node_text(n) for n in self._plan.host)}) cannot be "
                           f"exported yet; compile the model where it runs")

    def __repr__(self) -> str:
        host = ", ".join(node_text(n) for n in self._plan.host)
        return (f"<StagedModule target={self.target!r} inputs=[{self.shape_vars.describe()}] "
                f"outputs={self.output_names} host=[{host}]>")


def _stats(stage: Any) -> Any:
    info = getattr(stage, "cache_info", None)
    return info() if info is not None else None

