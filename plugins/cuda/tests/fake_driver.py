"""A fake CUDA driver for CI: the calls of ``cuda.bindings.driver`` that tessera-cuda makes,
with the semantics the plugin must respect, run on the host.

Installed with ``tessera_cuda.driver.use_driver(FakeDriver())``. What it models:

- **Memory.** ``cuMemAlloc`` returns the address of a host array filled with quiet NaNs
  (``0x7fc00000``), so a kernel that reads memory nobody wrote shows NaN; freed or unknown
  addresses passed to a copy or kernel are an error (``CUDA_ERROR_ILLEGAL_ADDRESS``).
- **Streams, deferred.** Work queued on a stream runs only when something waits for it
  (``cuStreamSynchronize``, ``cuEventSynchronize``, ``cuCtxSynchronize``), in queue order.
  A synchronous ``cuMemcpyHtoD`` stages the host data and queues the copy on the legacy stream,
  which non-blocking streams never wait for: exactly the race of a constant uploaded that way
  and read by a kernel on another stream (the kernel reads NaN). An async copy from pageable
  memory stages the data when it is called; from pinned memory (``cuMemAllocHost``) it reads
  the host memory when it runs, as DMA does.
- **Kernels.** ``cuModuleLoadData`` looks the image up in :attr:`FakeDriver.programs` (cubin
  bytes -> the ``CudaSource`` it was compiled from) and compiles that CUDA C for the host
  (:class:`tessera_cuda.host_exec.HostModule`), so launches compute real results; an image it
  does not know loads with opaque functions whose launches compute nothing. A launch whose grid
  or block is not the one the kernel was generated for (for a kernel with run-time extents, the
  one its sizes, read from its ``long long`` parameters, give) fails with
  ``CUDA_ERROR_INVALID_VALUE``; :attr:`FakeDriver.launch_shapes` records each launch's shape.
- **Capture and graphs.** A stream in capture records launches instead of queuing them; while
  a thread captures in THREAD_LOCAL mode, its allocations and synchronizations fail with
  ``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED``, as the real driver's do. Graphs and executables are
  handles of their own.
- **Handles.** :meth:`FakeDriver.live` counts what is alive per kind (device memory, pinned
  memory, streams, events, modules, graphs, graph executables), for tests that check every
  handle has an owner that frees it.
- **Failures.** :meth:`FakeDriver.fail_next` makes the next call(s) of a function return an
  error status.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections import Counter
from collections.abc import Callable
from enum import Enum
from typing import Any

import numpy as np

SUCCESS = 0
ERRORS = {
    1: "CUDA_ERROR_INVALID_VALUE",
    2: "CUDA_ERROR_OUT_OF_MEMORY",
    400: "CUDA_ERROR_INVALID_HANDLE",
    500: "CUDA_ERROR_NOT_FOUND",
    600: "CUDA_ERROR_NOT_READY",
    700: "CUDA_ERROR_ILLEGAL_ADDRESS",
    719: "CUDA_ERROR_LAUNCH_FAILED",
    900: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
    901: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
}
NAN_WORD = 0x7FC00000


class CUstream_flags(Enum):  # noqa: N801 - the driver's name
    CU_STREAM_DEFAULT = 0
    CU_STREAM_NON_BLOCKING = 1


class CUstreamCaptureMode(Enum):  # noqa: N801
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
    CU_STREAM_CAPTURE_MODE_RELAXED = 2


ATTRIBUTES = {"COMPUTE_CAPABILITY_MAJOR": 9, "COMPUTE_CAPABILITY_MINOR": 0,
              "MULTIPROCESSOR_COUNT": 132, "MAX_THREADS_PER_BLOCK": 1024,
              "MAX_SHARED_MEMORY_PER_BLOCK": 49152, "WARP_SIZE": 32}


class _Attributes:
    def __getattr__(self, name: str) -> str:
        return name.removeprefix("CU_DEVICE_ATTRIBUTE_")


class Stream:
    def __init__(self, ident: int, legacy: bool = False) -> None:
        self.ident, self.legacy = ident, legacy
        self.pending: list[Callable[[], None]] = []
        self.capture: list[Callable[[], None]] | None = None
        self.capture_thread: int | None = None

    def __int__(self) -> int:
        return 0x5000 + self.ident

    def __repr__(self) -> str:
        return f"<fake stream {self.ident}>"


class Event:
    def __init__(self) -> None:
        self.time: float | None = None
        self.stream: Stream | None = None


class Module:
    def __init__(self, program: Any) -> None:
        self.program = program  # a HostModule, or None for an opaque image


class Function:
    def __init__(self, module: Module, name: str, kernel: Any) -> None:
        self.module, self.name, self.kernel = module, name, kernel


class Graph:
    def __init__(self, nodes: list[Callable[[], None]]) -> None:
        self.nodes = nodes


class CallFailed(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(ERRORS.get(status, str(status)))
        self.status = status


class FakeDriver:
    """The driver API on the host: see the module doc."""

    CUstream_flags = CUstream_flags
    CUstreamCaptureMode = CUstreamCaptureMode
    CUdevice_attribute = _Attributes()

    def __init__(self, devices: int = 1) -> None:
        self.devices = devices
        #: cubin bytes -> the CudaSource compiled to it (kernels of other images compute
        #: nothing).
        self.programs: dict[bytes, Any] = {}
        self.lock = threading.RLock()
        self.memory: dict[int, np.ndarray] = {}
        self.pinned: dict[int, np.ndarray] = {}
        self.handles: dict[int, tuple[str, Any]] = {}  # id -> (kind, object)
        self.legacy = Stream(0, legacy=True)
        self._next = 1
        self._fail: dict[str, list[int]] = {}
        #: every call made: (function name, thread id)
        self.calls: list[tuple[str, int]] = []
        self.launched: list[str] = []
        #: every kernel launch queued or captured: (name, grid, block, sizes)
        self.launch_shapes: list[tuple[str, tuple[int, ...], tuple[int, ...],
                                       tuple[int, ...]]] = []
        #: the stream of every cuGraphLaunch
        self.graph_launches: list[Stream] = []
        self.initialized = False

    # -- bookkeeping ---------------------------------------------------------------------------
    def live(self) -> Counter[str]:
        """How many handles of each kind are alive."""
        with self.lock:
            out = Counter(kind for kind, _ in self.handles.values())
            out["device memory"] = len(self.memory)
            out["pinned memory"] = len(self.pinned)
            return +out

    def fail_next(self, function: str, status: int = 719, times: int = 1) -> None:
        """The next ``times`` calls of ``function`` return ``status``."""
        self._fail.setdefault(function, []).extend([status] * times)

    def _add(self, kind: str, obj: Any) -> Any:
        self.handles[id(obj)] = (kind, obj)
        return obj

    def _drop(self, kind: str, obj: Any) -> None:
        if self.handles.get(id(obj), (None,))[0] != kind:
            raise CallFailed(400)
        del self.handles[id(obj)]

    def _capturing_here(self) -> bool:
        me = threading.get_ident()
        return any(kind == "stream" and s.capture is not None and s.capture_thread == me
                   for kind, s in self.handles.values())

    def _guard_capture(self) -> None:
        if self._capturing_here():
            raise CallFailed(900)

    def _region(self, address: int, nbytes: int) -> np.ndarray:
        """The host bytes behind a device (or pinned) address range."""
        for table in (self.memory, self.pinned):
            for base, arr in table.items():
                if base <= address and address + nbytes <= base + arr.nbytes:
                    return arr[address - base:address - base + nbytes]
        raise CallFailed(700)

    def _stream(self, stream: Any) -> Stream:
        if stream is None or stream == 0 or stream is self.legacy:
            return self.legacy
        if not isinstance(stream, Stream) or id(stream) not in self.handles:
            raise CallFailed(400)
        return stream

    def _queue(self, stream: Any, op: Callable[[], None]) -> None:
        s = self._stream(stream)
        if s.capture is not None:
            s.capture.append(op)
        else:
            s.pending.append(op)

    def _drain(self, s: Stream) -> None:
        while s.pending:
            s.pending.pop(0)()

    def _call(self, name: str, fn: Callable[[], Any]) -> tuple[Any, ...]:
        with self.lock:
            self.calls.append((name, threading.get_ident()))
            queued = self._fail.get(name)
            if queued:
                return (queued.pop(0), None)
            try:
                value = fn()
            except CallFailed as err:
                return (err.status, None)
            if isinstance(value, tuple):
                return (SUCCESS, *value)
            return (SUCCESS,) if value is None else (SUCCESS, value)

    def __getattr__(self, name: str) -> Any:
        impl = getattr(type(self), f"_{name}", None)
        if impl is None or not name.startswith("cu"):
            raise AttributeError(f"the fake driver has no {name}")
        return lambda *args: self._call(name, lambda: impl(self, *args))

    # -- driver, devices, contexts --------------------------------------------------------------
    def _cuGetErrorName(self, status: Any) -> bytes:
        return ERRORS.get(int(status), f"CUDA_ERROR_{int(status)}").encode()

    def _cuInit(self, flags: int) -> None:
        self.initialized = True

    def _cuDriverGetVersion(self) -> int:
        return 13000

    def _cuDeviceGetCount(self) -> int:
        return self.devices

    def _cuDeviceGet(self, index: int) -> int:
        if not 0 <= index < self.devices:
            raise CallFailed(1)
        return index

    def _cuDeviceGetName(self, length: int, dev: int) -> bytes:
        return b"Fake GPU (host emulation)"

    def _cuDevicePrimaryCtxRetain(self, dev: int) -> str:
        return f"ctx{dev}"

    def _cuCtxSetCurrent(self, ctx: Any) -> None:
        pass

    def _cuCtxSynchronize(self) -> None:
        self._guard_capture()
        for kind, s in list(self.handles.values()):
            if kind == "stream":
                self._drain(s)
        self._drain(self.legacy)

    def _cuDeviceGetAttribute(self, attr: str, dev: int) -> int:
        return ATTRIBUTES.get(attr, 0)

    # -- memory ---------------------------------------------------------------------------------
    def _cuMemAlloc(self, nbytes: int) -> int:
        self._guard_capture()
        words = np.full((int(nbytes) + 255) // 4 + 64, NAN_WORD, dtype=np.uint32)
        arr = words.view(np.uint8)
        start = (-arr.ctypes.data) % 256
        arr = arr[start:start + int(nbytes)]
        self.memory[arr.ctypes.data] = arr
        return arr.ctypes.data

    def _cuMemFree(self, ptr: int) -> None:
        self._guard_capture()
        if int(ptr) not in self.memory:
            raise CallFailed(1)
        del self.memory[int(ptr)]

    def _cuMemAllocHost(self, nbytes: int) -> int:
        arr = np.zeros(int(nbytes), dtype=np.uint8)
        self.pinned[arr.ctypes.data] = arr
        return arr.ctypes.data

    def _cuMemFreeHost(self, ptr: int) -> None:
        if int(ptr) not in self.pinned:
            raise CallFailed(1)
        del self.pinned[int(ptr)]

    def _host_source(self, src: int, nbytes: int) -> Callable[[], bytes]:
        """The bytes an upload from host address ``src`` copies: pinned memory is read when
        the copy runs, pageable memory is staged now."""
        try:
            region = self._region(int(src), nbytes)
        except CallFailed:
            staged = ctypes.string_at(int(src), nbytes)
            return lambda: staged
        if any(base <= int(src) < base + a.nbytes for base, a in self.pinned.items()):
            return lambda: region.tobytes()
        raise CallFailed(1)  # a device address is not a host source

    def _cuMemcpyHtoD(self, dst: int, src: int, nbytes: int) -> None:
        self._guard_capture()
        target = self._region(int(dst), nbytes)
        data = self._host_source(src, nbytes)()  # staged; the DMA is queued on the legacy stream
        self.legacy.pending.append(lambda: target.__setitem__(slice(None),
                                                              np.frombuffer(data, np.uint8)))

    def _cuMemcpyHtoDAsync(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        target = self._region(int(dst), nbytes)
        read = self._host_source(src, nbytes)
        self._queue(stream, lambda: target.__setitem__(slice(None),
                                                       np.frombuffer(read(), np.uint8)))

    def _cuMemcpyDtoHAsync(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        source = self._region(int(src), nbytes)
        self._queue(stream, lambda: ctypes.memmove(int(dst), source.ctypes.data, nbytes))

    def _cuMemcpyDtoDAsync(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        source, target = self._region(int(src), nbytes), self._region(int(dst), nbytes)
        self._queue(stream, lambda: target.__setitem__(slice(None), source))

    def _cuMemsetD32Async(self, dst: Any, value: int, count: int, stream: Any) -> None:
        target = self._region(int(dst), 4 * count).view(np.uint32)
        self._queue(stream, lambda: target.fill(value))

    def _cuMemsetD32(self, dst: Any, value: int, count: int) -> None:
        self._guard_capture()
        self._region(int(dst), 4 * count).view(np.uint32).fill(value)

    # -- streams and events ---------------------------------------------------------------------
    def _cuStreamCreate(self, flags: int) -> Stream:
        self._next += 1
        return self._add("stream", Stream(self._next))

    def _cuStreamDestroy(self, stream: Any) -> None:
        s = self._stream(stream)
        if s.capture is not None:
            raise CallFailed(901)
        self._drain(s)  # queued work still completes
        self._drop("stream", s)

    def _cuStreamSynchronize(self, stream: Any) -> None:
        self._guard_capture()
        self._drain(self._stream(stream))

    def _cuEventCreate(self, flags: int) -> Event:
        return self._add("event", Event())

    def _cuEventRecord(self, event: Event, stream: Any) -> None:
        event.time, event.stream = None, self._stream(stream)

        def mark() -> None:
            event.time = time.perf_counter()

        self._queue(stream, mark)

    def _cuEventSynchronize(self, event: Event) -> None:
        if event.stream is not None:
            while event.time is None and event.stream.pending:
                event.stream.pending.pop(0)()

    def _cuEventElapsedTime(self, start: Event, end: Event) -> float:
        if start.time is None or end.time is None:
            raise CallFailed(600)
        return (end.time - start.time) * 1000.0

    def _cuEventDestroy(self, event: Event) -> None:
        self._drop("event", event)

    # -- modules and launches -------------------------------------------------------------------
    def _cuModuleLoadData(self, image: bytes) -> Module:
        source = self.programs.get(bytes(image))
        program = None
        if source is not None:
            from tessera_cuda.host_exec import HostModule

            program = HostModule(source)
        return self._add("module", Module(program))

    def _cuModuleGetFunction(self, module: Module, name: bytes) -> Function:
        text = name.decode()
        kernel = None
        if module.program is not None:
            kernel = next((k for k in module.program.source.kernels if k.name == text), None)
            if kernel is None:
                raise CallFailed(500)
        return Function(module, text, kernel)

    def _cuModuleUnload(self, module: Module) -> None:
        self._drop("module", module)

    def _cuLaunchKernel(self, f: Function, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                        shared: int, stream: Any, params: int, extra: Any) -> None:
        if id(f.module) not in self.handles:
            raise CallFailed(400)  # its module was unloaded
        op = self._kernel_op(f, (gx, gy, gz), (bx, by, bz), int(params))
        self._queue(stream, op)

    def _kernel_op(self, f: Function, grid: tuple[int, ...], block: tuple[int, ...],
                   params: int) -> Callable[[], None]:
        if f.kernel is None:
            return lambda: self.launched.append(f.name)
        k = f.kernel
        n = len(k.params)
        m = len(k.size_vars)  # a symbolic kernel's long long sizes follow its buffers
        slots = (ctypes.c_void_p * (n + m)).from_address(params) if n + m else []
        addresses = [ctypes.c_uint64.from_address(slots[i]).value for i in range(n)]
        sizes = [ctypes.c_int64.from_address(slots[n + i]).value for i in range(m)]
        # the launch shape the kernel was generated for (for its sizes, when symbolic)
        want_grid, want_block = k.launch_dims(sizes) if m else (k.launch.grid, k.launch.block)
        if tuple(want_grid) != grid or tuple(want_block) != block:
            raise CallFailed(1)
        self.launch_shapes.append((f.name, grid, block, tuple(sizes)))

        def run() -> None:
            for address in addresses:
                self._region(address, 1)  # a live allocation, or CUDA_ERROR_ILLEGAL_ADDRESS
            args = (ctypes.c_void_p * max(1, n))(*addresses)
            host = getattr(f.module.program.lib, f"tessera_host_{k.name}")
            if m:
                host(args, (ctypes.c_longlong * (6 + m))(*grid, *block, *sizes))
            else:
                host(args)
            self.launched.append(f.name)

        return run

    # -- capture and graphs ---------------------------------------------------------------------
    def _cuStreamBeginCapture(self, stream: Any, mode: Any) -> None:
        s = self._stream(stream)
        if s.legacy or s.capture is not None:
            raise CallFailed(900)
        s.capture, s.capture_thread = [], threading.get_ident()

    def _cuStreamEndCapture(self, stream: Any) -> Graph:
        s = self._stream(stream)
        if s.capture is None:
            raise CallFailed(901)
        nodes, s.capture, s.capture_thread = s.capture, None, None
        return self._add("graph", Graph(nodes))

    def _cuGraphInstantiate(self, graph: Graph, flags: int) -> Graph:
        if self.handles.get(id(graph), (None,))[0] != "graph":
            raise CallFailed(400)
        return self._add("graph exec", Graph(list(graph.nodes)))

    def _cuGraphLaunch(self, executable: Graph, stream: Any) -> None:
        if self.handles.get(id(executable), (None,))[0] != "graph exec":
            raise CallFailed(400)
        self.graph_launches.append(self._stream(stream))
        for node in executable.nodes:
            self._queue(stream, node)

    def _cuGraphDestroy(self, graph: Graph) -> None:
        self._drop("graph", graph)

    def _cuGraphExecDestroy(self, executable: Graph) -> None:
        self._drop("graph exec", executable)
