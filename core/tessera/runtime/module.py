"""The compiled model users hold: run, benchmark, profile, reports, export.

A :class:`Module` is built from a :class:`~tessera.runtime.compiled.CompiledModel` and the
planner's :class:`~tessera.runtime.planner.ModulePlan` (devices, execution plan, memory plan,
signature); it holds them and runs them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tessera.errors import CompileError, RunError
from tessera.frontend.onnx.symbolic_eval import source_check
from tessera.ir.graph import Function
from tessera.ir.symbolic import InputSpec, ShapeVars, check_bounds, dim_str, dim_vars
from tessera.ir.types import TensorType
from tessera.partition.report import PartitionReport
from tessera.plugin.backend import Backend, CompiledRegion, CompileOptions
from tessera.runtime.artifact import export_model
from tessera.runtime.callers import sized_caller, static_caller
from tessera.runtime.compiled import CompiledModel
from tessera.runtime.executor import Executor
from tessera.runtime.memory import MemoryReport, weight_rows
from tessera.runtime.planner import ModulePlan, module_devices, plan_module
from tessera.runtime.profiler import BenchmarkResult, Profile
from tessera.runtime.sequences import SequenceLayout
from tessera.runtime.states import StatePool

__all__ = ["Module", "module_devices"]


#: ``Module.run`` keeps a generated call per order of input names (and output names) it
#: meets, at most this many.
_MAX_CALLERS = 32


def _shape_vars(types: Mapping[str, TensorType], bounds: Any,
                notes: Mapping[str, str] | None = None) -> ShapeVars | None:
    """The specs of a module's symbolic inputs (None when every input is static): each input
    dimension an int or one size variable."""
    if all(t.is_static for t in types.values()):
        return None
    specs = []
    for name, t in types.items():
        dims: list[int | str] = []
        for d in t.shape:
            if isinstance(d, int):
                dims.append(d)
                continue
            (var,) = dim_vars(d) or ("",)
            if dim_str(d) != var:
                raise CompileError(f"input {name!r} has dimension {dim_str(d)}: an input's "
                                   f"dimensions are sizes or single size variables")
            dims.append(var)
        specs.append(InputSpec(name, tuple(dims), t.dtype))
    return ShapeVars(tuple(specs), check_bounds(dict(bounds or {})), dict(notes or {}))


@dataclass
class _StepState:
    """A thread's step-by-step form: its execution state and the inputs it has set."""

    executor: Executor
    inputs_set: set[str] = field(default_factory=set)
    #: a module with symbolic inputs: the arrays given, copied in when ``run()`` binds sizes
    pending: dict[str, np.ndarray] = field(default_factory=dict)


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

    ``Module(model, planned)`` takes a compiled model and its plan (planned here when not
    given). The older form, ``Module(graph, compiled, backends, target, report, pass_timings,
    compile_options)``, still builds one from a partitioned graph whose regions are read back
    from its attributes.
    """

    def __init__(self, model: CompiledModel | Function,
                 compiled: dict[str, CompiledRegion] | None = None,
                 backends: dict[str, Backend] | None = None, target: str = "",
                 report: PartitionReport | None = None,
                 pass_timings: list[tuple[str, float]] | None = None,
                 compile_options: CompileOptions | None = None, *,
                 planned: ModulePlan | None = None):
        if not isinstance(model, CompiledModel):
            model = CompiledModel.from_graph(model, dict(compiled or {}), dict(backends or {}),
                                             target, report, pass_timings, compile_options)
        elif compiled is not None or backends is not None:
            raise TypeError("Module(model): a CompiledModel already holds the compiled "
                            "regions and backends")
        if planned is None:
            planned = plan_module(model)
        #: the compiled model (partitioned graph with typed regions, compiled regions, backends)
        self.model = model
        self.graph: Function = model.graph
        self.compiled: dict[str, CompiledRegion] = model.compiled
        self.backends: dict[str, Backend] = model.backends
        self.target: str = model.target
        self.report: PartitionReport = model.report
        self.pass_timings: list[tuple[str, float]] = model.pass_timings
        self.compile_options: CompileOptions | None = model.options
        self.signature = planned.signature
        self.input_types = planned.signature.inputs
        self.output_names = planned.signature.output_names
        #: sequence inputs and outputs (lists of arrays), None without
        self.sequences = SequenceLayout.of(self.graph)
        if self.sequences is not None:
            self.output_names = self.sequences.output_names
        #: For a module with symbolic inputs (``float32[batch, seq]``): the input specs and
        #: the variables' bounds (the graph's ``dim_bounds``, which memory is planned at); each
        #: call binds the variables from its arrays. None for a static module.
        self.shape_vars: ShapeVars | None = _shape_vars(
            self.input_types, self.graph.attrs.get("dim_bounds"),
            self.graph.attrs.get("dim_bound_notes"))
        #: the relations between sizes the model needs, checked per call (symbolic modules)
        self._size_check = source_check(self.graph.attrs.get("size_relations") or [])
        self.plan = planned.plan
        self.memory = planned.memory
        self._devices = planned.devices
        #: Idle execution states for ``run(**inputs)`` (see :mod:`tessera.runtime.states`).
        self.states: StatePool[Executor] = StatePool(self._new_state)
        #: ``run``'s calls per (input names in the order given, output names): ``caller``s
        self._callers: dict[tuple[tuple[str, ...], tuple[str, ...] | None],
                            tuple[Callable[..., tuple[Any, ...]], list[str]]] = {}
        self._local = threading.local()
        # one state now, so that binding errors surface at compile (or load) time; a module
        # cross-compiled for a device this machine lacks has none (it can be exported)
        if self.missing_devices is None:
            self.states.release(self.states.acquire())

    def tuning_summary(self) -> tuple[int, int] | None:
        """With tuning records: how many schedules came from them and how many kept their
        template's defaults (over the regions whose backends report it); None without."""
        return self.model.tuning_summary()

    @property
    def input_names(self) -> list[str]:
        """The inputs' names, in order."""
        return list(self.input_types)

    @property
    def input_specs(self) -> dict[str, InputSpec]:
        """Input name -> its shape and dtype, as :class:`~tessera.runtime.dynamic.DynamicModule`
        and :class:`~tessera.runtime.staged.StagedModule` say theirs (variable names for the
        symbolic dimensions of a module with symbolic inputs)."""
        if self.shape_vars is not None:
            return {s.name: s for s in self.shape_vars.inputs}
        return {n: InputSpec(n, tuple(t.shape), t.dtype) for n, t in self.input_types.items()}

    @property
    def variables(self) -> list[str]:
        """The size variables of the inputs' symbolic dimensions, in order (empty for a
        static module)."""
        return self.shape_vars.variables if self.shape_vars is not None else []

    def describe_outputs(self) -> str:
        """``y[batch, seq, 3]``: the outputs' shapes over the size variables (as a
        :class:`~tessera.runtime.dynamic.DynamicModule` describes its own)."""
        outs = {v.name: v.type for v in self.graph.outputs}
        return ", ".join(f"{n}[{', '.join(dim_str(d) for d in outs[t].shape)}]"
                         if t in outs else f"{n}[?]"
                         for n, t in zip(self.output_names, self.signature.output_tensors))

    @property
    def dim_bound_notes(self) -> dict[str, str]:
        """For a module with symbolic inputs compiled from ONNX: where each size variable's
        bounds come from (given, implied by the model, or the default); else empty."""
        return dict(self.graph.attrs.get("dim_bound_notes") or {})

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
    def set_input(self, name: str, value: Any) -> None:
        """Copy one input into the calling thread's input buffer (step-by-step form); a
        sequence input takes a list of arrays."""
        if self.sequences is not None:
            parts = self.sequences.expand(name, value)
            arrays = [(k, self.signature.check_input(k, v)) for k, v in parts]
        else:
            arrays = [(name, self.signature.check_input(name, value))]
        state = self._thread_state()
        if self.shape_vars is not None:  # sizes are bound when run() has every input
            for key, array in arrays:
                state.pending[key] = np.array(array, copy=True)
                state.inputs_set.add(key)
            return
        for key, array in arrays:
            state.executor.set_input(key, array)
            state.inputs_set.add(key)

    def get_output(self, index: int | str, out: np.ndarray | None = None) -> np.ndarray:
        """An output, by position or name, of the calling thread's last step-by-step ``run()``
        (a copy: later runs reuse the buffers), written into ``out`` when given (a C-contiguous
        array of the output's shape and dtype, so a service's loop allocates nothing). A
        sequence output is a list of arrays (an empty optional None)."""
        if self.sequences is not None and out is None:
            name = index if isinstance(index, str) else self._output_name(index)
            if self.sequences.parts(name) is not None:
                executor = self._thread_state().executor
                return self.sequences.gather(
                    name, lambda k: executor.get(self.signature.output_tensor(k)))
            index = name
        tensor = self.signature.output_tensor(index)
        executor = self._thread_state().executor
        if out is not None and self.shape_vars is not None:  # this call's shape
            value = executor.get(tensor)
            self.signature.check_out(index, out, tuple(value.shape))
            np.copyto(out, value)
            return out
        if out is not None:
            self.signature.check_out(index, out)
        return executor.get(tensor, out)

    def _output_name(self, index: int) -> str:
        if not 0 <= index < len(self.output_names):
            raise RunError(f"output index {index} out of range ({len(self.output_names)} "
                           f"outputs)")
        return self.output_names[index]

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
            if type(feeds) is not dict and not isinstance(feeds, Mapping):
                raise RunError(f"run(feeds): feeds must be a dict of input name -> array, not "
                               f"{type(feeds).__name__} (onnxruntime's sess.run(output_names, "
                               f"feeds) is mod.run(feeds, output_names=...))")
            if inputs:
                raise RunError(f"run(): give the inputs either as a dict or as keywords, not "
                               f"both (got the dict's {', '.join(map(repr, feeds))} and the "
                               f"keywords {', '.join(map(repr, inputs))})")
            inputs = dict(feeds)
        if self.sequences is not None:
            return self._run_sequences(inputs, feeds is not None, output_names)
        wanted = self.signature.wanted(output_names)
        if inputs or feeds is not None:
            fast = self.cached_caller(tuple(inputs), None if output_names is None
                                      else tuple(output_names))
            if fast is not None:  # every input once: the generated call
                return dict(zip(fast[1], fast[0](*inputs.values())))
            if self.shape_vars is not None:  # checks the inputs, binds the sizes
                return dict(zip([n for n, _ in wanted], self._run_sized(inputs, wanted)))
            arrays = self.signature.check_inputs(inputs)  # raises: names missing or unknown
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
        if self.shape_vars is not None:
            self._set_sized_inputs(state.executor, state.pending)
        state.executor.run()
        return None

    def _run_sized(self, arrays: Mapping[str, np.ndarray], wanted: list[tuple[str, str]]
                   ) -> tuple[np.ndarray, ...]:
        """The general path of a call of a module with symbolic inputs: checks every input
        (a ``RunError`` names what is wrong), binds the sizes, runs; the ``wanted`` outputs
        (name, tensor) in order."""
        arrays = self.signature.check_inputs(arrays)
        with self.states.state() as executor:
            self._set_sized_inputs(executor, arrays)
            executor.run()
            return tuple(executor.get(tensor) for _, tensor in wanted)

    def _set_sized_inputs(self, executor: Executor, arrays: Mapping[str, np.ndarray]) -> None:
        """Bind a call's sizes from its arrays (every relation and bound checked: a
        ``RunError`` names the input) and copy the arrays into the state."""
        assert self.shape_vars is not None
        sizes = self.shape_vars.bind(arrays)
        if self._size_check is not None:
            broken = self._size_check(sizes)
            if broken is not None:
                raise RunError(f"sizes {ShapeVars.text(sizes)}: the model cannot take them "
                               f"({broken})")
        executor.set_sizes(sizes)
        for name, array in arrays.items():
            executor.set_input(name, array)

    def caller(self, input_names: Sequence[str] | None = None,
               output_names: Sequence[str] | None = None) -> Callable[..., tuple[Any, ...]]:
        """A positional form of :meth:`run` for a caller that runs this module many times:
        ``call(*arrays)`` takes the inputs in ``input_names`` order (every input, the
        module's order by default) and returns the outputs in ``output_names`` order (every
        output by default) as new arrays. Inputs are checked as ``run`` checks them (a
        ``RunError`` naming the input); names are resolved once, not per call. Safe from many
        threads, as ``run`` is. Split plans call their compiled parts this way."""
        if self.sequences is not None:
            raise RunError("caller() takes and returns tensors only; this module has sequence "
                           "inputs or outputs (lists of arrays): use run()")
        names = list(self.input_types) if input_names is None else list(input_names)
        if sorted(names) != sorted(self.input_types):
            raise RunError(f"caller(input_names=...): expected every input once "
                           f"({', '.join(self.input_types)}), got {', '.join(names) or 'none'}")
        wanted = self.signature.wanted(output_names)
        if self.shape_vars is not None:
            specs = {s.name: s for s in self.shape_vars.inputs}

            def fallback(arrays: tuple[Any, ...]) -> tuple[Any, ...]:
                return self._run_sized(dict(zip(names, arrays)), wanted)
            return sized_caller([specs[n] for n in names], self.shape_vars.bounds,
                                [t for _, t in wanted], self.states, self._size_check,
                                fallback)
        check = self.signature.check_input
        expected = [(n, np.dtype(self.input_types[n].dtype.numpy),
                     tuple(self.input_types[n].shape)) for n in names]
        key = (tuple(names), tuple(t for _, t in wanted))
        return static_caller(expected, key, check, self.states)

    def cached_caller(self, input_names: tuple[str, ...],
                      output_names: tuple[str, ...] | None = None
                      ) -> tuple[Callable[..., tuple[Any, ...]], list[str]] | None:
        """:meth:`caller` for these names (every output when ``output_names`` is None), made
        once and kept, with the output names in the order it returns them: what ``run`` calls,
        and a dynamic module for its specialisations. None when ``input_names`` are not every
        input once, or the module has sequences (``run`` then checks and says what is
        wrong); unknown output names raise, as in ``run``."""
        key = (input_names, output_names)
        fast = self._callers.get(key)
        if fast is not None:
            return fast
        if self.sequences is not None or len(input_names) != len(self.input_types) or \
                any(n not in self.input_types for n in input_names):
            return None
        names = [n for n, _ in self.signature.wanted(output_names)]
        if len(self._callers) >= _MAX_CALLERS:
            self._callers.clear()
        fast = self._callers[key] = (self.caller(input_names, output_names), names)
        return fast

    def _run_sequences(self, inputs: dict[str, Any], given: bool,
                       output_names: Sequence[str] | None) -> dict[str, Any] | None:
        """``run`` of a module with sequence inputs or outputs (lists of arrays)."""
        layout = self.sequences
        assert layout is not None
        if not inputs and not given:
            if output_names is not None:
                raise RunError("run(output_names=...) needs the inputs")
            state = self._thread_state()
            missing = [n for n in self.input_types if n not in state.inputs_set]
            if missing:
                raise RunError(f"input(s) {', '.join(missing)} not set in this thread; call "
                               "set_input first")
            state.executor.run()
            return None
        names = list(output_names) if output_names is not None else self.output_names
        unknown = [n for n in names if n not in self.output_names]
        if unknown:
            raise RunError(f"run(output_names=...): unknown output(s) "
                           f"{', '.join(map(repr, unknown))}; the model's outputs are "
                           f"{', '.join(self.output_names)}")
        arrays = self.signature.check_inputs(layout.expand_all(inputs))
        with self.states.state() as executor:
            for name, array in arrays.items():
                executor.set_input(name, array)
            executor.run()
            return {n: layout.gather(n, lambda k: executor.get(self.signature.output_tensor(k)))
                    for n in names}

    # -- measuring ------------------------------------------------------------------------------
    def _measuring_state(self, inputs: Mapping[str, Any]) -> Executor:
        """The calling thread's state with ``inputs`` set, and random data in the inputs it
        never set."""
        for name, value in inputs.items():
            self.set_input(name, value)
        rng = np.random.default_rng(0)
        state = self._thread_state()
        for name in self.input_types:
            if name not in state.inputs_set:
                self.set_input(name, self.signature.random_input(name, rng))
        if self.shape_vars is not None:  # the sizes these inputs give, as run() binds them
            self._set_sized_inputs(state.executor, state.pending)
        return state.executor

    def benchmark(self, repeat: int = 10, number: int = 10, warmup: int = 1,
                  **inputs: Any) -> BenchmarkResult:
        """Median/mean/std of ``repeat`` measurements, each the mean of ``number`` runs (ms).

        Uses the inputs given (or set earlier); inputs never set are filled with random data.
        """
        executor = self._measuring_state(inputs)
        return BenchmarkResult.measure(executor.run, repeat, number, warmup)

    def profile(self, runs: int = 1, **inputs: Any) -> Profile:
        """Time every kernel and copy over ``runs`` runs, each with its device's own clock
        (events on a device with a stream; see ``Executor.run_timed``)."""
        executor = self._measuring_state(inputs)
        executor.run()  # warm up
        runs = max(runs, 1)
        totals = [0.0] * len(self.plan.steps)
        start = time.perf_counter()
        for _ in range(runs):
            for i, t in enumerate(executor.run_timed()):
                totals[i] += t
        total_ms = (time.perf_counter() - start) * 1000.0 / runs
        return Profile.of(self.plan.steps, [t / runs for t in totals], total_ms, self.compiled)

    # -- reports --------------------------------------------------------------------------------
    def memory_report(self) -> MemoryReport:
        """The arenas planned per device (against one buffer per tensor) and the weights:
        the bytes its kernels read (packed, transformed or as imported) and the bytes of
        constant data the graph still holds besides (none where every backend keeps its
        region's constants)."""
        report = self.memory.report()
        graph = self.model.graph
        arrays = [v.data for fn in [graph, *(r.body for r in self.model.regions)]
                  for v in fn.constants() if not v.is_held and v.data is not None]
        report.weights = weight_rows(self.plan.constants, arrays)
        return report

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
        return export_model(self.model, Path(path))

    def __repr__(self) -> str:
        return (f"<Module target={self.target!r} inputs={list(self.input_types)} "
                f"outputs={self.output_names} steps={len(self.plan.steps)}>")
