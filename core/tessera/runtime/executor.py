"""Binds a plan to device memory and runs it: one execution state.

An :class:`Executor` owns the arenas of one run (one per device) and the kernel calls and
sequences bound to them; the compiled regions' constants are shared. It is used by one thread
at a time: ``Module`` gives each concurrent call its own (:mod:`tessera.runtime.states`). On a
device with streams (``Device.create_stream``) a state has a stream of its own, current in the
calling thread while the state binds, runs, takes inputs and gives outputs, so concurrent runs
overlap on the device too.
Kernels of regions that are not thread safe (``CompiledRegion.thread_safe``) run under their
region's lock, which every state of a module shares. Its arenas go back to their devices
(``Device.free``) and its streams are destroyed when it is closed or garbage-collected.

The executor never reads a buffer itself. A copy between devices is one call into the device
that is not the host's (``copy_from_host`` into it, or ``copy_to_host`` out of it straight into
the destination buffer), or, between two devices that both have memory of their own, a pass
through a host staging buffer allocated once with the state. Devices may queue work: the run
synchronizes them at its end, and a copy into host memory waits for its source before host
kernels read the result.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, nullcontext
from typing import Any, NamedTuple

import numpy as np

from tessera.errors import PluginRunError, RunError, TesseraError
from tessera.plugin import contract
from tessera.plugin.device import CPUDevice, Device
from tessera.runtime.memory import MemoryPlan
from tessera.runtime.plan import ExecutionPlan, Step, TensorInfo


def _copy_fn(src: Device, dst: Device, info: TensorInfo) -> Callable[[list[Any], list[Any]], None]:
    """The call of a copy step from device ``src`` to device ``dst`` (see the module doc)."""
    if src.host_memory:
        def into_device(ins: list[Any], outs: list[Any]) -> None:
            dst.copy_from_host(outs[0], ins[0])

        return into_device
    if dst.host_memory:
        def out_of_device(ins: list[Any], outs: list[Any]) -> None:
            src.copy_to_host(ins[0], outs[0])
            src.synchronize()  # host kernels read it next, outside the device's stream

        return out_of_device
    stage = np.empty(info.type.shape, dtype=info.type.dtype.numpy)

    def staged(ins: list[Any], outs: list[Any]) -> None:
        src.copy_to_host(ins[0], stage)
        src.synchronize()
        dst.copy_from_host(outs[0], stage)

    return staged


def _release(devices: dict[str, Device], arenas: dict[str, Any], streams: dict[str, Any]) -> None:
    """Wait for a state's work, free its arenas and destroy its streams."""
    for dev, arena in arenas.items():
        device = devices[dev]
        with device.use_stream(streams.get(dev)):
            device.synchronize()
        device.free(arena)
    arenas.clear()
    for dev, stream in streams.items():
        devices[dev].destroy_stream(stream)
    streams.clear()


def _nothing(ins: list[Any], outs: list[Any]) -> None:
    """The call of an elided step: the memory plan already did its work."""


def _locked_kernel(fn: Callable[[list[Any], list[Any]], None],
                   lock: threading.Lock) -> Callable[[list[Any], list[Any]], None]:
    def run(ins: list[Any], outs: list[Any]) -> None:
        with lock:
            fn(ins, outs)

    return run


def _sized_kernel(fn: Callable[..., None], sizes: np.ndarray
                 ) -> Callable[[list[Any], list[Any]], None]:
    """The call of a kernel of a region with run-time sizes: its state's sizes array too."""
    def run(ins: list[Any], outs: list[Any]) -> None:
        fn(ins, outs, sizes)

    return run


def _locked_sequence(bound: Callable[[], None], lock: threading.Lock) -> Callable[[], None]:
    def run() -> None:
        with lock:
            bound()

    return run


class BoundIO(NamedTuple):
    """Per input a call writing an array into its buffer, per output a call returning a new
    array read from its buffer (see :meth:`Executor.bound_io`)."""

    setters: list[Callable[[np.ndarray], None]]
    getters: list[Callable[[], np.ndarray]]


#: One entry of ``Executor.runs``: a step, its call and buffers, and a bound sequence (or None).
_Run = tuple[Step, Any, list[Any], list[Any], "Callable[[], None] | None"]


#: Bindings of the sizes whose tensor views an execution state keeps.
VIEW_CACHE = 16


class Executor:
    """Holds one arena per device and the bound calls: ``run()`` is a loop over them.

    ``calls`` has one entry per plan step (profiles use them); ``run()`` goes through
    ``runs``, where the steps of a region whose backend binds whole sequences
    (``CompiledRegion.bind_sequence``) are one call."""

    def __init__(self, plan: ExecutionPlan, memory: MemoryPlan, devices: dict[str, Device]):
        self.plan = plan
        self.devices = devices
        self.arenas: dict[str, Any] = {}
        #: The state's own stream per device that has streams (``Device.create_stream``).
        self.streams: dict[str, Any] = {}
        self._finalizer = weakref.finalize(self, _release, devices, self.arenas, self.streams)
        for dev, dp in memory.devices.items():
            # a symbolic module's arena is planned at the bounds; each call uses a part
            allocate = (devices[dev].allocate_sparse if plan.region_sizes
                        else devices[dev].allocate)
            self.arenas[dev] = allocate(dp.total_bytes)
        for dev, device in devices.items():
            stream = device.create_stream()
            if stream is not None:
                self.streams[dev] = stream
        self.buffers: dict[str, Any] = {}
        for name, info in plan.tensors.items():
            dev, offset = memory.offset(name)
            self.buffers[name] = devices[dev].view(self.arenas[dev], offset, info.type)
        for name, (_dev, buf) in plan.constants.items():
            self.buffers[name] = buf
        #: Per region with run-time sizes, the array its kernels read them from (written by
        #: :meth:`set_sizes` before each run), and where each entry comes from.
        self.sizes: dict[str, np.ndarray] = {
            region: np.zeros(len(names), dtype=np.int64)
            for region, names in plan.region_sizes.items()}
        self.size_names = plan.size_names
        #: The sizes of the current call (:meth:`set_sizes`).
        self.current_sizes: dict[str, int] = {}
        #: Views of symbolic tensors (:meth:`sized_view`) per binding of the sizes, the
        #: current binding's in ``_views``.
        self._views_by_sizes: dict[tuple[tuple[str, int], ...], dict[str, np.ndarray]] = {}
        self._views: dict[str, np.ndarray] = {}
        self._size_slots = [(self.sizes[region], [self.size_names.index(n) for n in names])
                            for region, names in plan.region_sizes.items()]
        self.calls: list[tuple[Step, Callable[[list[Any], list[Any]], None], list[Any],
                               list[Any]]] = []
        self.elided = set(memory.elided)
        for i, step in enumerate(plan.steps):
            fn = step.fn if step.fn is not None else _copy_fn(
                devices[step.src], devices[step.dst], plan.tensors[step.outputs[0]])
            if i in self.elided:  # its inputs already sit inside its output
                fn = _nothing
            elif step.region in self.sizes:
                fn = _sized_kernel(fn, self.sizes[step.region])
            if i not in self.elided and step.region in plan.locks:
                fn = _locked_kernel(fn, plan.locks[step.region])
            self.calls.append((step, fn, [self.buffers[n] for n in step.inputs],
                               [self.buffers[n] for n in step.outputs]))
        once = plan.once_per_sizes.steps
        with self.on_streams():
            self.runs = self._bind_runs()
            #: ``runs`` without the steps run once per binding of the sizes
            #: (``ExecutionPlan.once_per_sizes``)
            self.repeat_runs = self._bind_runs(once) if once else self.runs
        #: the binding of the sizes whose results those steps hold (None: none yet, or a run
        #: stopped part-way)
        self._once_done_for: tuple[tuple[str, int], ...] | None = None
        self.sizes_key: tuple[tuple[str, int], ...] = ()
        #: :meth:`bound_io` per list of input and output names
        self._io: dict[tuple[tuple[str, ...], tuple[str, ...]], BoundIO] = {}

    def on_streams(self) -> AbstractContextManager[Any]:
        """A context manager making this state's streams current in the calling thread."""
        if not self.streams:
            return nullcontext()
        if len(self.streams) == 1:
            (dev, stream), = self.streams.items()
            return self.devices[dev].use_stream(stream)
        stack = ExitStack()
        for dev, stream in self.streams.items():
            stack.enter_context(self.devices[dev].use_stream(stream))
        return stack

    def _bind_runs(self, skip: frozenset[int] = frozenset()) -> list[_Run]:
        """Per step, or per run of consecutive steps of one sequence-bound region: the step
        (naming it in errors), its call and buffers, and the bound sequence (None for a single
        step); without the steps of ``skip`` (indices)."""
        runs: list[_Run] = []
        elided = {id(self.calls[i][0]) for i in self.elided | skip}
        i = 0
        while i < len(self.calls):
            step = self.calls[i][0]
            binder = self.plan.sequences.get(step.region) if step.region else None
            j = i + 1
            if binder is not None:
                while j < len(self.calls) and self.calls[j][0].region == step.region:
                    j += 1
            if binder is None:
                if i not in skip:
                    runs.append((*self.calls[i], None))
                i += 1
                continue
            group = self.calls[i:j]
            lists = [None if id(s) in elided else (ins, outs) for s, _fn, ins, outs in group]
            if all(entry is None for entry in lists) and skip:
                i = j
                continue
            extra = (self.sizes[step.region],) if step.region in self.sizes else ()
            bound = contract.call(
                step.backend, f"bind_sequence() of its {j - i} kernels", binder, lists, *extra,
                region=step.region, cls=PluginRunError)
            if not callable(bound):
                raise contract.violation(step.backend, "bind_sequence() returns a call",
                                         f"bind_sequence() returned {bound!r}", step.region,
                                         PluginRunError)
            if step.region in self.plan.locks:
                bound = _locked_sequence(bound, self.plan.locks[step.region])
            runs.append((step, None, [], [], bound))
            i = j
        return runs

    def set_sizes(self, sizes: Any) -> None:
        """Set a call's sizes (variable name -> int, for every name of :attr:`size_names` and
        of the symbolic tensors' types): the arrays the kernels of regions with run-time sizes
        read, and the shapes of symbolic inputs and outputs."""
        values = [sizes[n] for n in self.size_names]
        for array, slots in self._size_slots:
            for k, slot in enumerate(slots):
                array[k] = values[slot]
        self.current_sizes = dict(sizes)
        key = self.sizes_key = tuple(sorted(self.current_sizes.items()))
        views = self._views_by_sizes.get(key)
        if views is None:
            if len(self._views_by_sizes) >= VIEW_CACHE:
                self._views_by_sizes.pop(next(iter(self._views_by_sizes)))
            views = self._views_by_sizes[key] = {}
        self._views = views

    def sized_view(self, name: str) -> np.ndarray:
        """The part of a symbolic tensor's planned buffer the current sizes use, shaped (kept
        per binding: a service calls at few sizes)."""
        view = self._views.get(name)
        if view is not None:
            return view
        view = self._views[name] = self._make_sized_view(name)
        return view

    def _make_sized_view(self, name: str) -> np.ndarray:
        info = self.plan.tensors[name]
        if not self.devices[info.device].host_memory:
            raise RunError(f"tensor {name!r} of symbolic type {info.symbolic} lives on "
                           f"{info.device}: run-time sizes are supported in host memory only")
        shape = info.shape_at(self.current_sizes)
        count = 1
        for d in shape:
            count *= d
        return self.buffers[name].reshape(-1)[:count].reshape(shape)  # type: ignore[no-any-return]

    def set_input(self, name: str, array: np.ndarray) -> None:
        info = self.plan.tensors[name]
        if info.symbolic is not None:
            np.copyto(self.sized_view(name), array, casting="no")
            return
        device = self.devices[info.device]
        if device.host_memory:
            device.copy_from_host(self.buffers[name], array)
            return
        with self.on_streams():
            device.copy_from_host(self.buffers[name], array)

    @staticmethod
    def _call(step: Step, fn: Callable[[list[Any], list[Any]], None], ins: list[Any],
              outs: list[Any]) -> None:
        try:
            result = fn(ins, outs)
        except TesseraError:
            raise
        except Exception as e:  # noqa: BLE001 - name the failing kernel
            if step.is_copy:
                raise RunError(f"copy {step.name} from {step.src} to {step.dst} failed: "
                               f"{type(e).__name__}: {e}") from e
            raise contract.violation(
                step.backend, "kernels raise only TesseraErrors",
                f"kernel {step.name} ({step.op}) failed: {type(e).__name__}: {e}",
                step.region, PluginRunError) from e
        if result is not None:
            raise contract.violation(
                step.backend, "a kernel writes its outputs into the output buffers it is given "
                "and returns None", f"kernel {step.name} ({step.op}) returned "
                f"{type(result).__name__} instead of None: its result would be lost",
                step.region, PluginRunError)

    def run(self) -> None:
        if self.streams:
            with self.on_streams():
                self._run()
        else:
            self._run()

    def _run(self) -> None:
        key = self.sizes_key
        if self._once_done_for == key:
            runs = self.repeat_runs
        else:
            runs = self.runs
            self._once_done_for = None
        for step, fn, ins, outs, bound in runs:
            if bound is None:
                self._call(step, fn, ins, outs)
                continue
            try:
                result = bound()
            except TesseraError:
                raise
            except Exception as e:  # noqa: BLE001 - name the region
                raise contract.violation(
                    step.backend, "kernels raise only TesseraErrors",
                    f"its bound kernel sequence failed: {type(e).__name__}: {e}", step.region,
                    PluginRunError) from e
            if result is not None:
                raise contract.violation(
                    step.backend, "the call bind_sequence() returns gives None",
                    f"its bound kernel sequence returned {type(result).__name__}", step.region,
                    PluginRunError)
        self.synchronize()
        self._once_done_for = key

    def synchronize(self) -> None:
        """Wait for this state's work on every device (its streams are current in the
        calling thread)."""
        for dev in self.devices.values():
            dev.synchronize()

    def close(self) -> None:
        """Wait for the devices and give the arenas back (the state cannot run again)."""
        self._finalizer()

    def _device_of(self, step: Step) -> Device:
        """The device whose clock times ``step``: a kernel's own device; for a copy, the one
        of its two devices that is not host memory (its stream runs the copy)."""
        if step.is_copy:
            src = self.devices[step.src]
            return self.devices[step.dst] if src.host_memory else src
        names = step.outputs or step.inputs
        info = self.plan.tensors.get(names[0]) if names else None
        return self.devices[info.device] if info is not None else self.devices["cpu"]

    def run_timed(self) -> list[float]:
        """Run once, step by step, timing each step (milliseconds) with its device's own
        markers (``Device.record_event``: events on a device with a stream, the host clock
        on a synchronous one); the devices are synchronized once, at the end."""
        with self.on_streams():
            return self._run_timed()

    def _run_timed(self) -> list[float]:
        self._once_done_for = None
        marks: list[tuple[Device, Any, Any]] = []
        for step, fn, ins, outs in self.calls:
            device = self._device_of(step)
            start = device.record_event()
            self._call(step, fn, ins, outs)
            marks.append((device, start, device.record_event()))
        self.synchronize()
        self._once_done_for = self.sizes_key
        return [device.elapsed_ms(a, b) for device, a, b in marks]

    def bound_io(self, inputs: tuple[str, ...], outputs: tuple[str, ...]) -> BoundIO:
        """Setters of ``inputs`` and getters of ``outputs`` bound to this state's buffers
        (made once per pair of name lists): :meth:`set_input` and :meth:`get` without their
        lookups or checks, for a caller that runs the state many times (``Module.caller``),
        which checks each array's dtype and shape first (a setter may cast or broadcast what
        does not fit). A getter reads after :meth:`run`, which has synchronized every
        device."""
        key = (inputs, outputs)
        io = self._io.get(key)
        if io is None:
            io = self._io[key] = BoundIO([self._setter(n) for n in inputs],
                                         [self._getter(n) for n in outputs])
        return io

    def _setter(self, name: str) -> Callable[[np.ndarray], None]:
        if self.plan.tensors[name].symbolic is not None:
            return functools.partial(self.set_input, name)
        device = self.devices[self.plan.tensors[name].device]
        if type(device).copy_from_host is CPUDevice.copy_from_host:  # numpy's copy, no frame
            return functools.partial(self.buffers[name].__setitem__, Ellipsis)
        if device.host_memory:
            return functools.partial(device.copy_from_host, self.buffers[name])
        return functools.partial(self.set_input, name)

    def _getter(self, name: str) -> Callable[[], np.ndarray]:
        if name in self.plan.output_constants:
            return functools.partial(np.array, np.asarray(self.plan.output_constants[name]),
                                     copy=True)
        info = self.plan.tensors[name]
        device = self.devices[info.device]
        if not device.host_memory or info.symbolic is not None:
            return functools.partial(self.get, name)
        if type(device).copy_to_host is CPUDevice.copy_to_host:  # numpy's copy, no frame
            return self.buffers[name].copy  # type: ignore[no-any-return]
        buffer, copy = self.buffers[name], device.copy_to_host
        shape, dtype = info.type.shape, np.dtype(info.type.dtype.numpy)

        def get() -> np.ndarray:
            out = np.empty(shape, dtype)
            copy(buffer, out)
            return out
        return get

    def get(self, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """Tensor ``name`` copied into ``out`` (a new host array when None)."""
        if name in self.plan.output_constants:
            value = np.asarray(self.plan.output_constants[name])
            if out is None:
                return np.array(value, copy=True)
            np.copyto(out, value, casting="no")
            return out
        info = self.plan.tensors[name]
        if info.symbolic is not None:
            view = self.sized_view(name)
            if out is None:
                return view.copy()
            np.copyto(out, view, casting="no")
            return out
        if out is None:
            out = np.empty(info.type.shape, dtype=info.type.dtype.numpy)
        device = self.devices[info.device]
        if device.host_memory:
            device.copy_to_host(self.buffers[name], out)
            device.synchronize()
            return out
        with self.on_streams():
            device.copy_to_host(self.buffers[name], out)
            device.synchronize()
        return out
