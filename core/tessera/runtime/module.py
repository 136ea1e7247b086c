"""The compiled model users hold: run, benchmark, profile, reports, export."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tessera.errors import CompileError, RunError
from tessera.ir.graph import Function
from tessera.ir.types import TensorType, human_bytes, max_tensor_bytes
from tessera.partition.report import PartitionReport
from tessera.plugin.backend import Backend, CompiledRegion
from tessera.plugin.device import CPU, Device
from tessera.runtime.executor import Executor
from tessera.runtime.memory import MemoryPlan, MemoryReport, plan_memory
from tessera.runtime.plan import ExecutionPlan, build_plan
from tessera.runtime.profiler import BenchmarkResult, KernelProfile, Profile
from tessera.runtime.states import StatePool


@dataclass
class _StepState:
    """A thread's step-by-step form: its execution state and the inputs it has set."""

    executor: Executor
    inputs_set: set[str] = field(default_factory=set)


class Module:
    """A compiled model: one execution plan, one memory plan per device.

    ``run(feeds) -> dict`` (or ``run(**inputs)``; ``output_names=`` returns only those)
    checks input names, shapes and dtypes, and is safe to call from any number of threads at
    once: each call takes an execution state (arenas and bound
    kernels) from a pool that grows on demand, so concurrent calls run in parallel, each in
    memory of its own; constants are shared.

    ``set_input`` / ``run()`` / ``get_output`` is the step-by-step form. Its state is per
    thread: inputs set in one thread are run and read in that thread only, and threads using
    the step form at once do not disturb each other (each thread that uses it holds one
    execution state while it lives). ``benchmark`` and ``profile`` use the calling thread's
    step-by-step state.
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
        self._devices = module_devices(
            backends, getattr(compile_options, "devices", None))
        self.memory: MemoryPlan = plan_memory(
            self.plan, {name: d.alignment for name, d in self._devices.items()})
        self._check_memory()
        #: Idle execution states for ``run(**inputs)`` (see :mod:`tessera.runtime.states`).
        self.states: StatePool[Executor] = StatePool(self._new_state)
        self._local = threading.local()
        # one state now, so that binding errors surface at compile (or load) time; a module
        # cross-compiled for a device this machine lacks has none (it can be exported)
        if self.missing_devices is None:
            self.states.release(self.states.acquire())

    def _check_memory(self) -> None:
        """Refuse a memory plan that cannot fit before allocating it (a lazily committed
        arena larger than the machine would kill the process on its first run)."""
        limit = max_tensor_bytes()
        for dev, dp in self.memory.devices.items():
            if dp.total_bytes <= limit:
                continue
            largest = sorted((t for t in self.plan.tensors.values() if t.device == dev),
                             key=lambda t: -t.type.nbytes)[:3]
            raise CompileError(
                f"the memory plan of device {dev} needs {human_bytes(dp.total_bytes)}, more "
                f"than the {human_bytes(limit)} this machine allows (TESSERA_MAX_TENSOR_BYTES "
                f"sets it); its largest tensors: "
                + "; ".join(f"{t.name!r} {t.type} ({human_bytes(t.type.nbytes)})"
                            for t in largest))

    def tuning_summary(self) -> tuple[int, int] | None:
        """With tuning records: how many schedules came from them and how many kept their
        template's defaults (over the regions whose backends report it); None without."""
        if getattr(self.compile_options, "tuning_records", None) is None:
            return None
        tuned = default = 0
        for cr in self.compiled.values():
            t = cr.info.get("tuning") or {}
            tuned += int(t.get("tuned", 0))
            default += int(t.get("default", 0))
        return tuned, default

    @property
    def missing_devices(self) -> str | None:
        """Why this machine cannot run the module (the devices it was compiled for that are
        absent here, and what is missing), or None when it can."""
        reasons = [f"{d.key}: {why}" for d in self._devices.values()
                   if (why := d.missing()) is not None]
        return "; ".join(reasons) if reasons else None

    def _new_state(self) -> Executor:
        missing = self.missing_devices
        if missing is not None:
            raise RunError(f"this module was compiled for a device this machine cannot run "
                           f"({missing}); export it (Module.export, tessera compile -o) and "
                           f"run the artifact where the device is")
        return Executor(self.plan, self.memory, self._devices)

    def _thread_state(self) -> _StepState:
        state = getattr(self._local, "state", None)
        if state is None:
            state = self._local.state = _StepState(self.states.acquire())
        return state

    @property
    def executor(self) -> Executor:
        """The calling thread's step-by-step execution state."""
        return self._thread_state().executor

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

    def _check_inputs(self, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
        """Every input checked (names, dtypes, shapes) before any is copied anywhere."""
        missing = [n for n in self.input_types if n not in inputs]
        unknown = [n for n in inputs if n not in self.input_types]
        if missing or unknown:
            given = f"unknown input{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))}" \
                if unknown else ""
            lacking = f"missing input(s) {', '.join(missing)}" if missing else ""
            raise RunError(f"{'; '.join(x for x in (given, lacking) if x)}; the model needs "
                           f"{', '.join(f'{n}: {t}' for n, t in self.input_types.items())}")
        return {name: self._check_input(name, value) for name, value in inputs.items()}

    def _output_tensor(self, index: int | str) -> str:
        if isinstance(index, str):
            if index not in self.output_names:
                raise RunError(f"unknown output {index!r}; outputs: {', '.join(self.output_names)}")
            index = self.output_names.index(index)
        if not 0 <= index < len(self.plan.outputs):
            raise RunError(f"output index {index} out of range ({len(self.plan.outputs)} outputs)")
        return self.plan.outputs[index]

    def set_input(self, name: str, value: Any) -> None:
        """Copy one input into the calling thread's input buffer (step-by-step form)."""
        array = self._check_input(name, value)
        state = self._thread_state()
        state.executor.set_input(name, array)
        state.inputs_set.add(name)

    def get_output(self, index: int | str, out: np.ndarray | None = None) -> np.ndarray:
        """An output, by position or name, of the calling thread's last step-by-step ``run()``
        (a copy: later runs reuse the buffers), written into ``out`` when given (a C-contiguous
        array of the output's shape and dtype, so a service's loop allocates nothing)."""
        tensor = self._output_tensor(index)
        if out is not None:
            self._check_out(index, tensor, out)
        return self._thread_state().executor.get(tensor, out)

    def _check_out(self, index: int | str, tensor: str, out: np.ndarray) -> None:
        if tensor in self.plan.output_constants:
            value = np.asarray(self.plan.output_constants[tensor])
            shape, dtype = value.shape, value.dtype
        else:
            t = self.plan.tensors[tensor].type
            shape, dtype = t.shape, t.dtype.numpy
        if not isinstance(out, np.ndarray) or out.dtype != dtype or \
                tuple(out.shape) != tuple(shape) or not out.flags.c_contiguous or \
                not out.flags.writeable:
            got = (f"{out.dtype} {list(out.shape)}" if isinstance(out, np.ndarray)
                   else type(out).__name__)
            raise RunError(f"output {index!r}: out must be a writable C-contiguous "
                           f"{np.dtype(dtype)} array of shape {list(shape)}, got {got}")

    def run(self, feeds: Mapping[str, Any] | None = None, /, *,
            output_names: Sequence[str] | None = None,
            **inputs: Any) -> dict[str, np.ndarray] | None:
        """Run on ``feeds`` (a dict of input name -> array, for names that are not Python
        identifiers such as ``gpu_0/data_0``) or on keyword inputs, not both, and return the
        outputs by name: every output, or only ``output_names`` in that order (onnxruntime's
        ``sess.run(output_names, feeds)`` is ``mod.run(feeds, output_names=...)``). Safe from
        many threads at once. With neither: run on the inputs this thread gave ``set_input``
        and return None (read the outputs with ``get_output``)."""
        if feeds is not None:
            if not isinstance(feeds, Mapping):
                raise RunError(f"run(feeds): feeds must be a dict of input name -> array, not "
                               f"{type(feeds).__name__} (onnxruntime's sess.run(output_names, "
                               f"feeds) is mod.run(feeds, output_names=...))")
            if inputs:
                raise RunError(f"run(): give the inputs either as a dict or as keywords, not "
                               f"both (got the dict's {', '.join(map(repr, feeds))} and the "
                               f"keywords {', '.join(map(repr, inputs))})")
            inputs = dict(feeds)
        wanted = self._wanted_outputs(output_names)
        if inputs or feeds is not None:
            arrays = self._check_inputs(inputs)
            with self.states.state() as executor:
                for name, array in arrays.items():
                    executor.set_input(name, array)
                executor.run()
                return {name: executor.get(tensor) for name, tensor in wanted}
        if output_names is not None:
            raise RunError("run(output_names=...) needs the inputs (run(feeds, output_names="
                           "...)); the step-by-step run() returns nothing: read outputs with "
                           "get_output")
        state = self._thread_state()
        missing = [n for n in self.input_types if n not in state.inputs_set]
        if missing:
            raise RunError(f"input(s) {', '.join(missing)} not set in this thread; call "
                           "set_input first (the step-by-step form is per thread), or pass "
                           "the inputs to run(feeds) or run(**inputs)")
        state.executor.run()
        return None

    def _wanted_outputs(self, output_names: Sequence[str] | None) -> list[tuple[str, str]]:
        """(output name, plan tensor) of every output, or of ``output_names`` in order."""
        if output_names is None:
            return list(zip(self.output_names, self.plan.outputs))
        if isinstance(output_names, str) or not all(isinstance(n, str) for n in output_names):
            hint = (" (an input named 'output_names' goes in the feeds dict)"
                    if "output_names" in self.input_types else "")
            raise RunError(f"run(output_names=...): expected a list of output names, got "
                           f"{type(output_names).__name__}{hint}; the outputs are "
                           f"{', '.join(self.output_names)}")
        unknown = [n for n in output_names if n not in self.output_names]
        if unknown:
            raise RunError(f"run(output_names=...): unknown output(s) "
                           f"{', '.join(map(repr, unknown))}; the model's outputs are "
                           f"{', '.join(self.output_names)}")
        return [(n, self.plan.outputs[self.output_names.index(n)]) for n in output_names]

    # -- measuring ------------------------------------------------------------------------------
    def _fill_missing_inputs(self) -> Executor:
        """The calling thread's state, with random data in the inputs it never set."""
        rng = np.random.default_rng(0)
        state = self._thread_state()
        for name, t in self.input_types.items():
            if name not in state.inputs_set:
                if t.dtype.is_float:
                    data = rng.standard_normal(t.shape).astype(t.dtype.numpy)
                elif t.dtype.value == "bool":
                    data = rng.integers(0, 2, t.shape).astype(bool)
                else:
                    data = rng.integers(0, 2, t.shape).astype(t.dtype.numpy)
                self.set_input(name, data)
        return state.executor

    def benchmark(self, repeat: int = 10, number: int = 10, warmup: int = 1,
                  **inputs: Any) -> BenchmarkResult:
        """Median/mean/std of ``repeat`` measurements, each the mean of ``number`` runs (ms).

        Uses the inputs given (or set earlier); inputs never set are filled with random data.
        """
        for name, value in inputs.items():
            self.set_input(name, value)
        executor = self._fill_missing_inputs()
        for _ in range(max(warmup, 0)):
            executor.run()
        results = []
        for _ in range(max(repeat, 1)):
            start = time.perf_counter()
            for _ in range(max(number, 1)):
                executor.run()
            results.append((time.perf_counter() - start) * 1000.0 / max(number, 1))
        return BenchmarkResult(results)

    def profile(self, runs: int = 1, **inputs: Any) -> Profile:
        """Time every kernel and copy over ``runs`` runs, each with its device's own clock
        (events on a device with a stream; see ``Executor.run_timed``)."""
        for name, value in inputs.items():
            self.set_input(name, value)
        executor = self._fill_missing_inputs()
        executor.run()  # warm up
        totals = [0.0] * len(self.plan.steps)
        start = time.perf_counter()
        for _ in range(max(runs, 1)):
            for i, t in enumerate(executor.run_timed()):
                totals[i] += t
        total_ms = (time.perf_counter() - start) * 1000.0 / max(runs, 1)
        kernels = [KernelProfile(s.name, s.backend, s.op, t / max(runs, 1), s.flops)
                   for s, t in zip(self.plan.steps, totals)]
        counters: dict[str, dict[str, float]] = {}
        for cr in self.compiled.values():
            c = cr.info.get("counters")
            if c:
                agg = counters.setdefault(cr.backend, {})
                for k, v in c.items():
                    agg[k] = agg.get(k, 0) + v
        execution = {name: str(cr.info["execution"]) for name, cr in self.compiled.items()
                     if cr.info.get("execution")}
        return Profile(kernels, total_ms, counters, execution)

    # -- reports --------------------------------------------------------------------------------
    def memory_report(self) -> MemoryReport:
        rows = []
        for dev, dp in self.memory.devices.items():
            rows.append((dev, len(dp.offsets), dp.total_bytes, dp.no_reuse_bytes))
        return MemoryReport(rows)

    def partition_report(self) -> PartitionReport:
        """The partition, with how each compiled region's kernels run where its backend says
        (``info["execution"]``: filled in when the first execution state is bound)."""
        for r in self.report.regions:
            cr = self.compiled.get(r.name)
            if cr is not None and cr.info.get("execution"):
                r.execution = str(cr.info["execution"])
        return self.report

    # -- artifacts ------------------------------------------------------------------------------
    def export(self, path: str | Path) -> Path:
        """Write a deployable ``.tar`` (see :mod:`tessera.runtime.artifact`)."""
        from tessera.runtime.artifact import export_module

        return export_module(self, Path(path))

    def __repr__(self) -> str:
        return (f"<Module target={self.target!r} inputs={list(self.input_types)} "
                f"outputs={self.output_names} steps={len(self.plan.steps)}>")


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
