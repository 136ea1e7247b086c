"""The compiled model users hold: run, benchmark, profile, reports, export."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from tessera.errors import RunError
from tessera.ir.graph import Function
from tessera.ir.types import TensorType
from tessera.partition.report import PartitionReport
from tessera.plugin.backend import Backend, CompiledRegion
from tessera.plugin.device import CPU
from tessera.runtime.executor import Executor
from tessera.runtime.memory import MemoryPlan, MemoryReport, plan_memory
from tessera.runtime.plan import ExecutionPlan, build_plan
from tessera.runtime.profiler import BenchmarkResult, KernelProfile, Profile


class Module:
    """A compiled model: one execution plan, one memory plan per device.

    ``run(**inputs) -> dict`` checks input names, shapes and dtypes; ``set_input`` / ``run()`` /
    ``get_output`` is the step-by-step form.
    """

    def __init__(self, graph: Function, compiled: dict[str, CompiledRegion],
                 backends: dict[str, Backend], target: str, report: PartitionReport,
                 pass_timings: list[tuple[str, float]] | None = None,
                 compile_options: Any = None):
        self.graph = graph
        self.compiled = compiled
        self.backends = backends
        self.target = target
        self.report = report
        self.pass_timings = list(pass_timings or [])
        self.compile_options = compile_options
        self.output_names: list[str] = list(graph.attrs.get("output_names") or
                                            [v.name for v in graph.outputs])
        self.input_types: dict[str, TensorType] = {v.name: v.type for v in graph.inputs}
        self.plan: ExecutionPlan = build_plan(graph, compiled)
        self.memory: MemoryPlan = plan_memory(self.plan)
        devices = {b.device: b.device_api() for b in backends.values()}
        devices.setdefault("cpu", CPU)
        self.executor = Executor(self.plan, self.memory, devices)
        self._inputs_set: set[str] = set()

    # -- inputs and outputs ---------------------------------------------------------------------
    def _check_input(self, name: str, value: Any) -> np.ndarray:
        if name not in self.input_types:
            raise RunError(f"unknown input {name!r}; the model's inputs are "
                           f"{', '.join(self.input_types) or 'none'}")
        t = self.input_types[name]
        array = np.asarray(value)
        if array.dtype != t.dtype.numpy:
            raise RunError(f"input {name!r}: expected dtype {t.dtype}, got {array.dtype}")
        if tuple(array.shape) != t.shape:
            raise RunError(f"input {name!r}: expected shape {list(t.shape)}, got "
                           f"{list(array.shape)}")
        return array

    def set_input(self, name: str, value: Any) -> None:
        """Copy one input into the module's input buffer."""
        array = self._check_input(name, value)
        self.executor.set_input(name, array)
        self._inputs_set.add(name)

    def get_output(self, index: int | str) -> np.ndarray:
        """An output by position or name (a copy: later runs reuse the buffers)."""
        if isinstance(index, str):
            if index not in self.output_names:
                raise RunError(f"unknown output {index!r}; outputs: {', '.join(self.output_names)}")
            index = self.output_names.index(index)
        if not 0 <= index < len(self.plan.outputs):
            raise RunError(f"output index {index} out of range ({len(self.plan.outputs)} outputs)")
        return self.executor.get(self.plan.outputs[index])

    def run(self, **inputs: Any) -> dict[str, np.ndarray] | None:
        """With keyword inputs: set them, run, and return every output by name. Without: run
        on the inputs given by ``set_input`` and return None (read with ``get_output``)."""
        if inputs:
            missing = [n for n in self.input_types if n not in inputs]
            if missing:
                raise RunError(f"missing input(s) {', '.join(missing)}; the model needs "
                               f"{', '.join(f'{n}: {t}' for n, t in self.input_types.items())}")
            for name, value in inputs.items():
                self.set_input(name, value)
        else:
            missing = [n for n in self.input_types if n not in self._inputs_set]
            if missing:
                raise RunError(f"input(s) {', '.join(missing)} not set; call set_input first")
        self.executor.run()
        if inputs:
            return {name: self.get_output(i) for i, name in enumerate(self.output_names)}
        return None

    # -- measuring ------------------------------------------------------------------------------
    def _fill_missing_inputs(self) -> None:
        rng = np.random.default_rng(0)
        for name, t in self.input_types.items():
            if name not in self._inputs_set:
                if t.dtype.is_float:
                    data = rng.standard_normal(t.shape).astype(t.dtype.numpy)
                elif t.dtype.value == "bool":
                    data = rng.integers(0, 2, t.shape).astype(bool)
                else:
                    data = rng.integers(0, 2, t.shape).astype(t.dtype.numpy)
                self.set_input(name, data)

    def benchmark(self, repeat: int = 10, number: int = 10, warmup: int = 1,
                  **inputs: Any) -> BenchmarkResult:
        """Median/mean/std of ``repeat`` measurements, each the mean of ``number`` runs (ms).

        Uses the inputs given (or set earlier); inputs never set are filled with random data.
        """
        for name, value in inputs.items():
            self.set_input(name, value)
        self._fill_missing_inputs()
        for _ in range(max(warmup, 0)):
            self.executor.run()
        results = []
        for _ in range(max(repeat, 1)):
            start = time.perf_counter()
            for _ in range(max(number, 1)):
                self.executor.run()
            results.append((time.perf_counter() - start) * 1000.0 / max(number, 1))
        return BenchmarkResult(results)

    def profile(self, runs: int = 1, **inputs: Any) -> Profile:
        """Time every kernel and copy (devices synchronized after each) over ``runs`` runs."""
        for name, value in inputs.items():
            self.set_input(name, value)
        self._fill_missing_inputs()
        self.executor.run()  # warm up
        totals = [0.0] * len(self.plan.steps)
        start = time.perf_counter()
        for _ in range(max(runs, 1)):
            for i, t in enumerate(self.executor.run_timed()):
                totals[i] += t
        total_ms = (time.perf_counter() - start) * 1000.0 / max(runs, 1)
        kernels = [KernelProfile(s.name, s.backend, s.op, 1000.0 * t / max(runs, 1), s.flops)
                   for s, t in zip(self.plan.steps, totals)]
        counters: dict[str, dict[str, float]] = {}
        for cr in self.compiled.values():
            c = cr.info.get("counters")
            if c:
                agg = counters.setdefault(cr.backend, {})
                for k, v in c.items():
                    agg[k] = agg.get(k, 0) + v
        return Profile(kernels, total_ms, counters)

    # -- reports --------------------------------------------------------------------------------
    def memory_report(self) -> MemoryReport:
        rows = []
        for dev, dp in self.memory.devices.items():
            rows.append((dev, len(dp.offsets), dp.total_bytes, dp.no_reuse_bytes))
        return MemoryReport(rows)

    def partition_report(self) -> PartitionReport:
        return self.report

    # -- artifacts ------------------------------------------------------------------------------
    def export(self, path: str | Path) -> Path:
        """Write a deployable ``.tar`` (see :mod:`tessera.runtime.artifact`)."""
        from tessera.runtime.artifact import export_module

        return export_module(self, Path(path))

    def __repr__(self) -> str:
        return (f"<Module target={self.target!r} inputs={list(self.input_types)} "
                f"outputs={self.output_names} steps={len(self.plan.steps)}>")
