"""A model with symbolic input dimensions, run at any size by specialising on first use.

``tessera.compile`` returns a :class:`DynamicModule` for a model whose inputs keep symbolic
dimensions (``input_ids: int64[batch, seq]``) after ``input_shapes``. Each call binds the
variables from its arrays (:class:`~tessera.ir.symbolic.ShapeVars`: one check of every
relation, such as two inputs sharing ``seq``, and of the bounds), then runs the
:class:`~tessera.runtime.module.Module` compiled for those sizes: the first call at new sizes
compiles it, later calls at the same sizes reuse it. At most ``max_specializations`` modules
are kept, least recently used dropped first; :meth:`DynamicModule.cache_info` counts hits,
compiles and evictions.

Every backend runs at every size this way, whether or not it can generate code for symbolic
extents: the graph below this module is static, one graph per size.

Variables named in ``symbolic`` (a decoder's cache length: ``past``, ``total``) are not
specialised on: for each size of the others, the model is split once
(:mod:`tessera.runtime.split`) into parts compiled once and parts evaluated at each call's
sizes, and a call whose sizes break the split plan's checks runs specialised instead.

Thread safety: the cache is guarded by a lock; two threads that meet the same new sizes at
once compile them once (the second waits for the first), threads at different sizes compile
in parallel, and each specialised module is itself safe from many threads.

At exit, background compiles stop safely (:func:`_stop_background_compiles`, run by
``atexit``): the queued ones are abandoned, the one under way finishes (or stops at its
backend's next native call, :class:`~tessera.plugin.native_lock.NativeLock`), and calls made
meanwhile are evaluated; a process never dies because it exited while compiling.
"""

from __future__ import annotations

import atexit
import queue
import threading
import time
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tessera.errors import RunError, TesseraError
from tessera.ir.symbolic import InputSpec, ShapeVars
from tessera.partition.report import PartitionReport
from tessera.runtime.memory import MemoryReport
from tessera.runtime.module import Module
from tessera.runtime.profiler import BenchmarkResult, Profile
from tessera.runtime.split import SplitMismatch, SplitModule
from tessera.runtime.step_form import StepForm

__all__ = ["DEFAULT_MAX_SPECIALIZATIONS", "DynamicModule", "SpecializationStats"]

#: Modules whose background compiler thread has started (stopped at exit).
_WITH_WORKERS: weakref.WeakSet[DynamicModule] = weakref.WeakSet()


def _stop_background_compiles() -> None:
    """At exit: stop every module's background compiles (:meth:`DynamicModule._stop_background`)
    before the interpreter and the C runtime tear down what a compile is using."""
    for module in list(_WITH_WORKERS):
        module._stop_background()


atexit.register(_stop_background_compiles)

#: Specialised modules a :class:`DynamicModule` keeps by default (each holds its own code and
#: its backends' packed weights: a bigger cache costs memory).
DEFAULT_MAX_SPECIALIZATIONS = 8

#: What compiles the model for concrete input shapes (input name -> shape).
Specializer = Callable[[dict[str, list[int]]], Module]
#: What splits the model for a call's arrays with some variables left open
#: (:func:`tessera.runtime.split.plan_split`).
Splitter = Callable[[dict[str, np.ndarray], tuple[str, ...]], SplitModule]

#: With ``symbolic_dims="auto"``: a variable seen at this many sizes stops being specialised on.
AUTO_SYMBOLIC_AFTER = 3
#: What a cache entry runs: a module specialised for every size, or a split plan.
Runner = Module | SplitModule
#: The whole model evaluated at any size (numpy): inputs -> outputs by name.
Evaluate = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]


class _Evaluated:
    """A call run by the evaluator (a background compile of its size is under way)."""

    def __init__(self, evaluate: Evaluate) -> None:
        self._evaluate = evaluate

    def run(self, arrays: Mapping[str, np.ndarray],
            output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        outputs = self._evaluate(arrays)
        if output_names is None:
            return outputs
        unknown = [n for n in output_names if n not in outputs]
        if unknown:
            raise RunError(f"unknown output(s) {', '.join(map(repr, unknown))}; the model's "
                           f"outputs are {', '.join(outputs)}")
        return {n: outputs[n] for n in output_names}


@dataclass(frozen=True)
class SpecializationStats:
    """The specialisation cache: calls that found their module (``hits``), modules compiled
    (``compiles``, in ``compile_seconds`` in all), modules dropped to stay within
    ``max_size`` (``evictions``), and the variables' sizes of each cached module, least
    recently used first."""

    hits: int
    compiles: int
    evictions: int
    compile_seconds: float
    max_size: int
    cached: list[dict[str, int]] = field(default_factory=list)
    #: split plans among the cached (their sizes leave the symbolic variables out)
    split: int = 0
    #: calls a split plan could not run (their sizes broke its checks), run specialised
    split_fallbacks: int = 0
    #: calls run by the evaluator while their size compiled in the background, and the
    #: compiles under way
    evaluated: int = 0
    pending: int = 0

    def __str__(self) -> str:
        sizes = "; ".join(ShapeVars.text(s) or "any size" for s in self.cached) or "none"
        split = (f"; {self.split} split plan(s), {self.split_fallbacks} call(s) run "
                 f"specialised instead" if self.split or self.split_fallbacks else "")
        if self.evaluated or self.pending:
            split += (f"; {self.evaluated} call(s) evaluated while compiling in the background, "
                      f"{self.pending} compile(s) under way")
        return (f"specialisations: {self.compiles} compiled ({self.compile_seconds:.2f} s), "
                f"{self.hits} hits, {self.evictions} evicted; cached ({len(self.cached)}/"
                f"{self.max_size}): {sizes}{split}")


class DynamicModule(StepForm):
    """A compiled model whose inputs have symbolic dimensions; runs at any size (within the
    variables' bounds) by compiling a :class:`Module` per distinct size on first use.

    The calling forms are :class:`Module`'s: ``run(feeds)`` / ``run(**inputs)`` (with
    ``output_names=``), and ``set_input`` / ``run()`` / ``get_output`` per thread.
    :meth:`specialize` returns (compiling if needed) the module for given shapes or sizes,
    e.g. to ``benchmark`` or ``profile`` it; :meth:`export` writes an artifact that keeps the
    symbolic model and every specialisation cached.
    """

    def __init__(self, shape_vars: ShapeVars, output_names: Sequence[str],
                 specializer: Specializer, target: str, *,
                 max_specializations: int = DEFAULT_MAX_SPECIALIZATIONS,
                 exporter: Callable[[DynamicModule, Path], Path] | None = None,
                 symbolic: Sequence[str] = (), splitter: Splitter | None = None,
                 relations: Callable[[Mapping[str, int]], str | None] | None = None,
                 output_shapes: Mapping[str, tuple[int | str, ...] | None] | None = None,
                 relation_texts: Sequence[str] = (),
                 evaluator: Callable[[], Evaluate] | None = None,
                 background_compile: bool = False, auto_symbolic: bool = False) -> None:
        if max_specializations < 1:
            raise TesseraError(f"max_specializations must be at least 1, got "
                               f"{max_specializations}")
        unknown = sorted(set(symbolic) - set(shape_vars.variables))
        if unknown:
            raise TesseraError(f"symbolic_dims: {', '.join(map(repr, unknown))} not among "
                               f"the model's variables ({', '.join(shape_vars.variables)})")
        if (symbolic or auto_symbolic) and splitter is None:
            raise TesseraError("symbolic_dims needs a splitter")
        #: ``symbolic_dims="auto"``: a variable seen at :data:`AUTO_SYMBOLIC_AFTER` sizes
        #: joins ``symbolic`` (one that does not split the model is never tried again)
        self.auto_symbolic = bool(auto_symbolic)
        self._sizes_seen: dict[str, set[int]] = {}
        self._auto_added: set[str] = set()
        self._auto_refused: set[str] = set()
        #: variables not specialised on (the split plans leave them open)
        self.symbolic = tuple(v for v in shape_vars.variables if v in set(symbolic))
        self._splitter = splitter
        #: the relations between sizes the model's nodes need (a message when one breaks)
        self._relations = relations
        #: those relations for people: ``"node 'Add' (Add): n and m must be equal ..."``
        self.relations = list(relation_texts)
        #: each output's shape as symbolic shape inference found it (sizes, and expressions
        #: such as ``"past + seq"``), None where it could not say
        self.output_shapes: dict[str, tuple[int | str, ...] | None] = {
            n: (output_shapes or {}).get(n) for n in output_names}
        self._unsplit: dict[tuple[int, ...], str] = {}  # split keys that did not split: why
        #: whether a call at a size not compiled yet runs on the evaluator while its module
        #: compiles in a background thread (True), or waits for the compile (False)
        self.background_compile = bool(background_compile)
        self._evaluator = evaluator
        self._evaluated_runner: _Evaluated | None = None
        self._queue: queue.Queue[Any] | None = None
        self._worker: threading.Thread | None = None
        self._closing = False  # the process is exiting: no new background compile starts
        self._failed: dict[tuple[int, ...], Exception] = {}  # background compiles that failed
        self._evaluated = 0
        if self.background_compile and evaluator is not None:
            self._evaluated_runner = _Evaluated(evaluator())  # ready for the first call
        self._split_fallbacks = 0
        self.shape_vars = shape_vars
        self._names = tuple(s.name for s in shape_vars.inputs)
        self._variables = tuple(shape_vars.variables)
        self.output_names = list(output_names)
        self.target = target
        self.max_specializations = int(max_specializations)
        self._specializer = specializer
        self._exporter = exporter
        self._cache: OrderedDict[tuple[int, ...], tuple[dict[str, int], Runner]] = \
            OrderedDict()
        self._pending: dict[tuple[int, ...], Future[Runner]] = {}
        #: the input arrays' shapes (in input order) of calls seen -> their cache key
        self._by_shapes: dict[tuple[tuple[int, ...], ...], tuple[int, ...]] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        self._hits = self._compiles = self._evictions = 0
        self._compile_seconds = 0.0
        self._last: Runner | None = None

    # -- what the model takes ------------------------------------------------------------------
    @property
    def input_specs(self) -> dict[str, InputSpec]:
        """Input name -> its symbolic shape and dtype."""
        return {s.name: s for s in self.shape_vars.inputs}

    @property
    def input_names(self) -> list[str]:
        """The inputs' names, in order."""
        return list(self._names)

    @property
    def variables(self) -> list[str]:
        return self.shape_vars.variables

    def describe_outputs(self) -> str:
        """``logits[batch, seq, 1000], present_0[1, 2, past + seq, 16]`` (``?`` where the shape
        is not known before a run)."""
        return ", ".join(f"{n}[{', '.join(str(d) for d in shape)}]" if shape is not None
                         else f"{n}[?]" for n, shape in self.output_shapes.items())

    # -- the specialisations -------------------------------------------------------------------
    def specialize(self, shapes: Mapping[str, Sequence[int]] | None = None,
                   **sizes: int) -> Module:
        """The module for concrete input ``shapes`` (input name -> shape, every input) or for
        the variables' ``sizes`` (``specialize(batch=2, seq=16)``), compiled now unless
        cached."""
        if (shapes is None) == (not sizes):
            raise TesseraError(f"specialize() takes the inputs' shapes or the variables' "
                               f"sizes ({', '.join(self.variables)}), one of them")
        if shapes is not None:
            bound = self.shape_vars.sizes_of_shapes(shapes)
        else:
            unknown = sorted(set(sizes) - set(self.variables))
            missing = [v for v in self.variables if v not in sizes]
            if unknown or missing:
                raise TesseraError(f"specialize(): the variables are "
                                   f"{', '.join(self.variables)}"
                                   f"{'; unknown ' + ', '.join(unknown) if unknown else ''}"
                                   f"{'; missing ' + ', '.join(missing) if missing else ''}")
            bound = self.shape_vars.sizes_of_shapes(self.shape_vars.shapes(sizes))
        module = self._module(bound)
        assert isinstance(module, Module)
        return module

    def cache_info(self) -> SpecializationStats:
        with self._lock:
            return SpecializationStats(
                self._hits, self._compiles, self._evictions, self._compile_seconds,
                self.max_specializations, [dict(s) for s, _ in self._cache.values()],
                sum(isinstance(m, SplitModule) for _, m in self._cache.values()),
                self._split_fallbacks, self._evaluated, len(self._pending))

    def specializations(self) -> list[tuple[dict[str, int], Module]]:
        """The cached modules with their variables' sizes, least recently used first (split
        plans left out: see :meth:`split_plans`)."""
        with self._lock:
            return [(dict(s), m) for s, m in self._cache.values() if isinstance(m, Module)]

    def split_plans(self) -> list[tuple[dict[str, int], SplitModule]]:
        """The cached split plans with the sizes they fix (the variables not in
        ``symbolic``), least recently used first."""
        with self._lock:
            return [(dict(s), m) for s, m in self._cache.values()
                    if isinstance(m, SplitModule)]

    def preload(self, sizes: Mapping[str, int], module: Module) -> None:
        """Put a module compiled (or loaded) for the variables' ``sizes`` into the cache, as
        if it had been specialised here (loading an artifact does)."""
        checked = self.shape_vars.sizes_of_shapes(self.shape_vars.shapes(sizes))
        with self._lock:
            self._cache[self.shape_vars.key(checked)] = (checked, module)
            self._evict()

    def _evict(self) -> None:
        """Drop the least recently used modules beyond the cache's size (lock held)."""
        while len(self._cache) > self.max_specializations:
            self._cache.popitem(last=False)
            self._evictions += 1

    def _module(self, sizes: dict[str, int], split: Mapping[str, np.ndarray] | None = None,
                wait: bool = True, symbolic: tuple[str, ...] = ()) -> Runner | _Evaluated:
        """The cached runner for ``sizes`` (compiled now if missing): the module specialised
        for them, or, given the call's arrays as ``split``, the split plan for the sizes of
        the variables not in ``symbolic`` (its key has -1 for the others). With ``wait``
        false and background compiles on, a missing runner is compiled in the background and
        this call gets the evaluator instead. ``symbolic``: the variables a split plan leaves
        open."""
        if split is not None:
            key = tuple(-1 if v in symbolic else sizes[v] for v in self._variables)
            sizes = {v: n for v, n in sizes.items() if v not in symbolic}
        else:
            key = self.shape_vars.key(sizes)
        background = not wait and self.background_compile and self._evaluator is not None
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self._hits += 1
                self._last = hit[1]
                return hit[1]
            failed = self._failed.get(key)
            if failed is not None:
                raise failed
            pending = self._pending.get(key)
            closing = pending is None and background and self._closing
            if closing:
                self._evaluated += 1
            elif pending is None:
                future: Future[Runner] = Future()
                self._pending[key] = future
            elif background:
                self._evaluated += 1
            else:
                self._hits += 1
        if closing:  # the process is exiting: evaluate, compile nothing more
            return self._evaluator_runner()
        if pending is not None:
            if background:  # being compiled in the background: evaluate meanwhile
                return self._evaluator_runner()
            return pending.result()  # another thread compiles these sizes; its error is ours
        job = (key, dict(sizes), None if split is None else dict(split), future, symbolic)
        if background:
            with self._lock:
                self._evaluated += 1
            self._background_queue().put(job)
            return self._evaluator_runner()
        return self._build(*job, background=False)  # type: ignore[arg-type]

    def _build(self, key: tuple[int, ...], sizes: dict[str, int],
               split: dict[str, np.ndarray] | None, future: Future[Runner],
               symbolic: tuple[str, ...], background: bool) -> Runner:
        """Compile (or split) for ``sizes`` and cache the result; a failure is the future's
        error (raised here unless in the background, where it is kept for the next call)."""
        start = time.perf_counter()
        try:
            module: Runner
            if split is not None:
                assert self._splitter is not None
                module = self._splitter(split, symbolic)
            else:
                module = self._specializer(self.shape_vars.shapes(sizes))
        except BaseException as e:
            with self._lock:
                del self._pending[key]
                if background and split is None and isinstance(e, Exception):
                    self._failed[key] = e if isinstance(e, TesseraError) else RunError(
                        f"compiling the model for {ShapeVars.text(sizes)} failed: "
                        f"{type(e).__name__}: {e}")
            if background and split is not None and isinstance(e, Exception):
                self._not_split(key, sizes, e if isinstance(e, TesseraError) else TesseraError(
                    f"{type(e).__name__}: {e}"), symbolic)
            future.set_exception(e)
            if background:
                return None  # type: ignore[return-value]
            raise
        with self._lock:
            del self._pending[key]
            self._compiles += 1
            self._compile_seconds += time.perf_counter() - start
            self._cache[key] = (dict(sizes), module)
            self._evict()
            self._last = module
        future.set_result(module)
        return module

    def _background_queue(self) -> queue.Queue[Any]:
        """The queue of the background compiler thread (started on first use)."""
        with self._lock:
            if self._queue is None:
                self._queue = queue.Queue()
                self._worker = threading.Thread(target=self._background_worker,
                                                args=(self._queue,), name="tessera-compile",
                                                daemon=True)
                _WITH_WORKERS.add(self)
                self._worker.start()
            return self._queue

    def _background_worker(self, jobs: queue.Queue[Any]) -> None:
        while True:
            job = jobs.get()
            try:
                if job is None:  # _stop_background: the process is exiting
                    return
                self._build(*job, background=True)
            finally:
                jobs.task_done()

    def _stop_background(self) -> None:
        """Abandon the queued background compiles (their futures fail with a RunError), let
        the one under way end and stop the worker; later calls at new sizes are evaluated."""
        with self._lock:
            self._closing = True
            jobs, worker = self._queue, self._worker
            abandoned = []
            while jobs is not None:
                try:
                    job = jobs.get_nowait()
                except queue.Empty:
                    break
                jobs.task_done()
                if job is not None:
                    del self._pending[job[0]]
                    abandoned.append(job)
        for _key, sizes, _split, future, _symbolic in abandoned:
            future.set_exception(RunError(f"the background compile for "
                                          f"{ShapeVars.text(sizes)} was abandoned: the "
                                          f"process is exiting"))
        if jobs is not None and worker is not None:
            jobs.put(None)
            worker.join()

    def wait_compiles(self, timeout: float | None = None) -> bool:
        """Wait until the background compiles started so far are done (True), or ``timeout``
        seconds have passed (False)."""
        with self._lock:
            pending = list(self._pending.values())
        return not wait_futures(pending, timeout=timeout).not_done

    def _evaluator_runner(self) -> _Evaluated:
        with self._lock:
            if self._evaluated_runner is None:
                assert self._evaluator is not None
                self._evaluated_runner = _Evaluated(self._evaluator())
            return self._evaluated_runner

    def _bind(self, arrays: Mapping[str, np.ndarray]) -> dict[str, int]:
        """The variables' sizes in a call's arrays, every relation between them checked: the
        inputs' own (a variable shared by two inputs, the bounds) and those the model's nodes
        need (symbolic shape inference: :mod:`tessera.frontend.onnx.symbolic_shapes`)."""
        sizes = self.shape_vars.bind(arrays)
        if self._relations is not None:
            broken = self._relations(sizes)
            if broken is not None:
                raise RunError(f"the inputs' sizes ({ShapeVars.text(sizes)}) do not fit the "
                               f"model: {broken}")
        return sizes

    def _run(self, arrays: Mapping[str, np.ndarray],
             output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """One call on checked arrays: its split plan's run, or its specialisation's."""
        runner = self._module_for(arrays)
        if isinstance(runner, SplitModule):
            try:
                return runner.run(arrays, output_names)
            except SplitMismatch:
                with self._lock:
                    self._split_fallbacks += 1
                runner = self._module_for(arrays, split=False)
        if type(runner) is Module:  # the specialisation's generated call, by position
            fast = runner.cached_caller(self._names, None if output_names is None
                                        else tuple(output_names))
            if fast is not None:
                return dict(zip(fast[1], fast[0](*arrays.values())))
        outputs = runner.run(arrays, output_names=output_names)
        assert outputs is not None
        return outputs

    def _split_runner(self, arrays: Mapping[str, np.ndarray], sizes: dict[str, int],
                      symbolic: tuple[str, ...]) -> Runner | _Evaluated | None:
        """The split plan for these sizes with ``symbolic`` open, or None where the model
        does not split at them (said once per plan key, with the reason)."""
        key = tuple(-1 if v in symbolic else sizes[v] for v in self._variables)
        if key in self._unsplit:
            return None
        try:
            return self._module(sizes, split=arrays, wait=False, symbolic=symbolic)
        except RunError:
            raise
        except TesseraError as e:
            self._not_split(key, {v: n for v, n in sizes.items() if v not in symbolic}, e,
                            symbolic)
            return None

    def _not_split(self, key: tuple[int, ...], sizes: dict[str, int],
                   error: TesseraError, symbolic: tuple[str, ...]) -> None:
        """Remember that the model does not split at these sizes: said once, unless the
        open variables were chosen automatically, which are then specialised on again."""
        with self._lock:
            if key in self._unsplit:
                return
            self._unsplit[key] = str(error)
            automatic = set(symbolic) & self._auto_added
            if automatic:
                self._auto_refused |= automatic
                self._auto_added -= automatic
                self.symbolic = tuple(v for v in self.symbolic if v not in automatic)
                return
        warnings.warn(f"symbolic_dims {', '.join(symbolic)}: the model does not split at "
                      f"{ShapeVars.text(sizes) or 'these sizes'} ({error}); each size is "
                      f"compiled instead", RuntimeWarning, stacklevel=5)

    def _observe(self, sizes: dict[str, int]) -> None:
        """``symbolic_dims="auto"``: count each variable's sizes; one seen at
        :data:`AUTO_SYMBOLIC_AFTER` sizes stops being specialised on."""
        with self._lock:
            added = []
            for v, n in sizes.items():
                if v in self.symbolic or v in self._auto_refused:
                    continue
                seen = self._sizes_seen.setdefault(v, set())
                seen.add(n)
                if len(seen) >= AUTO_SYMBOLIC_AFTER:
                    added.append(v)
            if added:
                self._auto_added.update(added)
                open_vars = set(self.symbolic) | set(added)
                self.symbolic = tuple(v for v in self._variables if v in open_vars)

    def _module_for(self, arrays: Mapping[str, np.ndarray],
                    split: bool = True) -> Runner | _Evaluated:
        """The runner for a call's (checked) arrays (the evaluator while its size compiles in
        the background); a failed compile is a :class:`RunError` naming the sizes."""
        sizes: dict[str, int] | None = None
        if split and (self.symbolic or self.auto_symbolic):
            sizes = self._bind(arrays)
            if self.auto_symbolic:
                self._observe(sizes)
            symbolic = self.symbolic  # this call's snapshot (auto mode may add to it)
            if symbolic:
                runner = self._split_runner(arrays, sizes, symbolic)
                if runner is not None:
                    return runner
        shapes = tuple([a.shape for a in arrays.values()])
        with self._lock:  # the fast path: these very shapes were bound before
            seen = self._by_shapes.get(shapes)
            entry = self._cache.get(seen) if seen is not None else None
            if entry is not None:
                self._hits += 1
                if next(reversed(self._cache)) != seen:  # not the most recent already
                    self._cache.move_to_end(seen)
                self._last = entry[1]
                return entry[1]
        if sizes is None:
            sizes = self._bind(arrays)
        try:
            module = self._module(sizes, wait=False)
            with self._lock:
                if len(self._by_shapes) >= 4 * self.max_specializations:
                    self._by_shapes.clear()  # stale entries of evicted sizes
                self._by_shapes[shapes] = self.shape_vars.key(sizes)
            return module
        except RunError:
            raise
        except TesseraError as e:
            raise RunError(f"compiling the model for {ShapeVars.text(sizes) or 'its shapes'} "
                           f"failed: {e}") from e

    def _arrays(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        names = self._names
        if len(inputs) == len(names):
            try:
                return {n: a if type(a := inputs[n]) is np.ndarray else np.asarray(a)
                        for n in names}
            except KeyError:
                pass  # the error below names what is wrong
        missing = [n for n in names if n not in inputs]
        unknown = [n for n in inputs if n not in names]
        if missing or unknown:
            parts = ([f"unknown input(s) {', '.join(map(repr, unknown))}"] if unknown else []) \
                + ([f"missing input(s) {', '.join(missing)}"] if missing else [])
            raise RunError(f"{'; '.join(parts)}; the model needs {self.shape_vars.describe()}")
        return {n: np.asarray(inputs[n]) for n in names}

    # -- running --------------------------------------------------------------------------------
    def run(self, feeds: Mapping[str, Any] | None = None, /, *,
            output_names: Sequence[str] | None = None,
            **inputs: Any) -> dict[str, np.ndarray] | None:
        """As :meth:`Module.run`: the outputs by name for ``feeds`` or keyword inputs, or, with
        neither, a run on the inputs this thread gave :meth:`set_input` (read the outputs
        with :meth:`get_output`)."""
        if feeds is not None and not inputs and (type(feeds) is dict or
                                                 isinstance(feeds, Mapping)):
            return self._run(self._arrays(feeds), output_names)  # read, not copied first
        inputs = self._feeds(feeds, inputs)
        if inputs or feeds is not None:
            return self._run(self._arrays(inputs), output_names)
        if output_names is not None:
            raise RunError("run(output_names=...) needs the inputs (run(feeds, output_names="
                           "...)); the step-by-step run() returns nothing: read outputs with "
                           "get_output")
        state = self._step()
        missing = [s.name for s in self.shape_vars.inputs if s.name not in state.inputs]
        if missing:
            raise RunError(f"input(s) {', '.join(missing)} not set in this thread; call "
                           "set_input first (the step-by-step form is per thread), or pass "
                           "the inputs to run(feeds) or run(**inputs)")
        state.outputs = self._run(self._arrays(state.inputs))
        return None

    def _knows_input(self, name: str) -> bool:
        return name in self.input_specs

    def _inputs_text(self) -> str:
        return self.shape_vars.describe()

    # -- measuring and reports ------------------------------------------------------------------
    def _given(self, inputs: Mapping[str, Any], what: str) -> Runner:
        runner = self._given_now(inputs, what)
        if isinstance(runner, _Evaluated):  # measure the compiled module, not the evaluator
            self.wait_compiles()
            runner = self._given_now(inputs, what)
        return runner  # type: ignore[return-value]

    def _given_now(self, inputs: Mapping[str, Any], what: str) -> Runner | _Evaluated:
        if set(inputs) != set(self.input_specs):
            raise RunError(f"{what}() of a module with symbolic shapes needs every input (their "
                           f"shapes pick the specialisation: {self.shape_vars.describe()}), or "
                           f"call specialize(...).{what}()")
        return self._module_for(self._arrays(inputs))

    def benchmark(self, repeat: int = 10, number: int = 10, warmup: int = 1,
                  **inputs: Any) -> BenchmarkResult:
        """:meth:`Module.benchmark` of the specialisation for ``inputs`` (every input)."""
        return self._given(inputs, "benchmark").benchmark(repeat, number, warmup, **inputs)

    def profile(self, runs: int = 1, **inputs: Any) -> Profile:
        """:meth:`Module.profile` of the specialisation for ``inputs`` (every input); under a
        split plan, of the module specialised for these sizes."""
        if set(inputs) != set(self.input_specs):
            self._given(inputs, "profile")  # its error names what is missing
        arrays = self._arrays(inputs)
        runner = self._module_for(arrays, split=False)
        if isinstance(runner, _Evaluated):  # profile the compiled module
            self.wait_compiles()
            runner = self._module_for(arrays, split=False)
        assert isinstance(runner, Module)
        return runner.profile(runs, **inputs)

    @property
    def last_specialization(self) -> Module | None:
        """The module specialised for the sizes used last (None before any, or when a split
        plan ran last)."""
        return self._last if isinstance(self._last, Module) else None

    def _latest(self, what: str) -> Module:
        if self.last_specialization is None:
            split = "; split plans have no single plan" if self.symbolic else ""
            raise RunError(f"{what}: nothing has been specialised yet (the module compiles per "
                           f"input size on first use{split}); run it once, or call "
                           f"specialize(...)")
        return self.last_specialization

    def partition_report(self) -> PartitionReport:
        """The partition of the specialisation used last."""
        return self._latest("partition_report()").partition_report()

    def memory_report(self) -> MemoryReport:
        """The memory plan of the specialisation used last."""
        return self._latest("memory_report()").memory_report()

    # -- artifacts ------------------------------------------------------------------------------
    def export(self, path: str | Path) -> Path:
        """Write a ``.tar`` that keeps the symbolic model and every cached specialisation
        (:mod:`tessera.runtime.dynamic_artifact`); ``tessera.load`` runs it at any size."""
        if self._exporter is None:
            raise TesseraError("this module keeps no source model to export (it was built "
                               "without one)")
        return self._exporter(self, Path(path))

    def __repr__(self) -> str:
        return (f"<DynamicModule target={self.target!r} inputs=[{self.shape_vars.describe()}] "
                f"outputs={self.output_names} cached={len(self._cache)}>")
