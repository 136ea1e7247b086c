"""The ``cuda`` device and kernel launches, through NVIDIA's ``cuda-bindings`` driver API.

:class:`CUDADevice` is what the runtime sees (:class:`tessera.plugin.device.Device`): arenas
from ``cuMemAlloc`` (256-byte aligned), buffers that are device addresses numpy cannot read,
and streams: each execution state gets a non-blocking stream of its own
(``create_stream``), current in the thread that runs the state (``use_stream``); copies
(``cuMemcpy*Async``), kernels, events and ``synchronize`` go to the calling thread's current
stream, else to the device's default stream. Constants (``from_host``) are uploaded on the
current stream, large ones through pinned staging memory, and the stream is synchronized before
``from_host`` returns, so every stream may read them (never a synchronous copy on the legacy
stream, which non-blocking streams do not wait for). One object per device index
(``instance``), shared by every backend on the device. The driver is touched on first use,
never at import or registration, so a machine without a GPU can still list, compile for and
test the backend.

:class:`LoadedModule` is a cubin loaded into a device's context (``cuModuleLoadData``) with its
functions, unloaded when the last owner drops it; :func:`launch` starts one kernel on the
current stream.

Every driver call goes through :func:`driver_api`: the ``cuda.bindings.driver`` module, or
a stand-in installed with :func:`use_driver` (tests run the plugin on a fake driver that
counts live handles and executes kernels on the host).
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from tessera.errors import RunError, TargetError
from tessera.ir.types import TensorType
from tessera.plugin.device import Device

__all__ = ["CUDADevice", "CudaArena", "CudaBuffer", "LoadedModule", "driver_api",
           "driver_missing", "launch", "use_driver"]

#: A driver stand-in installed by :func:`use_driver` (None: NVIDIA's bindings).
_OVERRIDE: Any = None


@lru_cache(maxsize=1)
def _bindings():  # noqa: ANN202 - the cuda.bindings.driver module
    from cuda.bindings import driver

    return driver


def driver_api() -> Any:
    """The driver API module every call goes through: ``cuda.bindings.driver``, or the
    stand-in :func:`use_driver` installed."""
    return _OVERRIDE if _OVERRIDE is not None else _bindings()


_cu = driver_api


@contextmanager
def use_driver(driver: Any) -> Iterator[Any]:
    """Run the block on ``driver``, an object with the functions and enums of
    ``cuda.bindings.driver`` that this plugin calls (tests: a fake driver). Device objects
    and the driver's state are made afresh on entry and dropped on exit."""
    global _OVERRIDE, _INITIALIZED
    saved = _OVERRIDE, _INITIALIZED, dict(CUDADevice._instances)
    _OVERRIDE, _INITIALIZED = driver, False
    CUDADevice._instances.clear()
    driver_missing.cache_clear()
    try:
        yield driver
    finally:
        _OVERRIDE, _INITIALIZED = saved[0], saved[1]
        CUDADevice._instances.clear()
        CUDADevice._instances.update(saved[2])
        driver_missing.cache_clear()


def _check(result: Any, what: str) -> Any:
    """The values of a driver call's result tuple; RunError naming the call on failure."""
    if not isinstance(result, tuple):
        result = (result,)
    status = result[0]
    if int(status) != 0:
        cu = _cu()
        try:
            _, name = cu.cuGetErrorName(status)
            name = name.decode() if isinstance(name, bytes) else str(name)
        except Exception:  # noqa: BLE001 - the error's name is a courtesy
            name = str(status)
        raise RunError(f"cuda: {what} failed: {name}")
    rest = result[1:]
    return rest[0] if len(rest) == 1 else rest


_INIT_LOCK = threading.Lock()
_INITIALIZED = False


def _init() -> None:
    global _INITIALIZED
    with _INIT_LOCK:
        if not _INITIALIZED:
            _check(_cu().cuInit(0), "cuInit")
            _INITIALIZED = True


@lru_cache(maxsize=1)
def driver_missing() -> str | None:
    """None when a CUDA driver and at least one GPU can be used, else what is missing."""
    try:
        cu = _cu()
    except ImportError as err:
        return f"the cuda-bindings package is not installed ({err}); pip install cuda-bindings"
    try:
        _init()
    except RunError as err:
        return f"the CUDA driver cannot be initialised ({err})"
    except Exception as err:  # noqa: BLE001 - no libcuda.so: cuda-bindings raises here
        return f"no CUDA driver on this machine ({type(err).__name__}: {err})"
    try:
        count = _check(cu.cuDeviceGetCount(), "cuDeviceGetCount")
    except RunError as err:
        return str(err)
    if int(count) == 0:
        return "the CUDA driver reports no GPU"
    return None


class CudaArena:
    """Device memory from ``cuMemAlloc``: its address and size."""

    __slots__ = ("ptr", "nbytes", "device")

    def __init__(self, ptr: int, nbytes: int, device: CUDADevice) -> None:
        self.ptr, self.nbytes, self.device = ptr, nbytes, device


class CudaBuffer:
    """A tensor in device memory: its address and type (and the arena it keeps alive)."""

    __slots__ = ("ptr", "type", "arena", "__weakref__")

    def __init__(self, ptr: int, type: TensorType, arena: CudaArena | None = None) -> None:
        self.ptr, self.type, self.arena = ptr, type, arena

    @property
    def nbytes(self) -> int:
        return self.type.nbytes

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError(f"a buffer of {self.type} in GPU memory: numpy cannot read it; copy "
                        f"it to the host through its Device")

    def __repr__(self) -> str:
        return f"<CudaBuffer 0x{self.ptr:x} {self.type}>"


class CUDADevice(Device):
    """One GPU (``cuda:<index>``): its primary context, streams, memory and events."""

    name = "cuda"
    alignment = 256
    host_memory = False

    _instances: dict[int, CUDADevice] = {}
    _lock = threading.Lock()

    #: Constants of at least this many bytes go through pinned staging buffers.
    PINNED_MIN_BYTES = 1 << 20
    #: The size of each of the two pinned staging buffers (filled and copied in turn).
    PINNED_CHUNK_BYTES = 8 << 20

    def __init__(self, index: int = 0) -> None:
        self.index = index
        #: The driver API this device was made with (:func:`driver_api`).
        self.cu = driver_api()
        self._ctx: Any = None
        self._stream: Any = None
        self._device: Any = None
        self._setup = threading.Lock()
        self._local = threading.local()
        self._staging: list[tuple[int, Any]] = []  # (pinned host address, event)
        self._staging_lock = threading.Lock()

    @classmethod
    def get(cls, index: int = 0) -> CUDADevice:
        """The one device object of ``cuda:<index>`` in this process."""
        if index < 0:
            raise TargetError(f"cuda device index must be 0 or more, got {index}")
        with cls._lock:
            dev = cls._instances.get(index)
            if dev is None:
                dev = cls._instances[index] = cls(index)
            return dev

    def instance(self, index: int) -> CUDADevice:
        return CUDADevice.get(index)

    def missing(self) -> str | None:
        why = driver_missing()
        if why is not None:
            return why
        try:
            count = int(_check(self.cu.cuDeviceGetCount(), "cuDeviceGetCount"))
        except RunError as err:
            return str(err)
        if self.index >= count:
            return f"this machine has {count} GPU(s), no cuda:{self.index}"
        return None

    # -- context and streams ----------------------------------------------------------------
    def context(self) -> Any:
        """Make this device's primary context current in the calling thread (every driver
        call needs it; the runtime calls from many threads) and return it."""
        cu = self.cu
        if self._ctx is None:
            with self._setup:
                if self._ctx is None:
                    missing = driver_missing()
                    if missing:
                        raise RunError(f"cuda:{self.index}: {missing}")
                    count = int(_check(cu.cuDeviceGetCount(), "cuDeviceGetCount"))
                    if self.index >= count:
                        raise RunError(f"cuda:{self.index}: this machine has {count} GPU(s)")
                    dev = _check(cu.cuDeviceGet(self.index), "cuDeviceGet")
                    ctx = _check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
                    _check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
                    self._stream = _check(
                        cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value),
                        "cuStreamCreate")
                    self._device = dev
                    self._ctx = ctx
        _check(cu.cuCtxSetCurrent(self._ctx), "cuCtxSetCurrent")
        return self._ctx

    @property
    def stream(self) -> Any:
        """The calling thread's current stream (``use_stream``), else the default stream."""
        self.context()
        current = getattr(self._local, "stream", None)
        return current if current is not None else self._stream

    def create_stream(self) -> Any:
        """A new non-blocking stream for one execution state."""
        cu = self.cu
        self.context()
        return _check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value),
                      "cuStreamCreate")

    def destroy_stream(self, stream: Any) -> None:
        if stream is None or self._ctx is None:
            return
        cu = self.cu
        self.context()
        _check(cu.cuStreamSynchronize(stream), "cuStreamSynchronize")
        _check(cu.cuStreamDestroy(stream), "cuStreamDestroy")

    @contextmanager
    def use_stream(self, stream: Any) -> Iterator[Any]:
        previous = getattr(self._local, "stream", None)
        self._local.stream = stream
        try:
            yield stream
        finally:
            self._local.stream = previous

    def attribute(self, name: str) -> int:
        """A device attribute by its driver name without prefix (``MULTIPROCESSOR_COUNT``)."""
        cu = self.cu
        self.context()
        attr = getattr(cu.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        return int(_check(cu.cuDeviceGetAttribute(attr, self._device), f"attribute {name}"))

    def arch(self) -> str:
        """``sm_<major><minor>`` of this GPU."""
        major = self.attribute("COMPUTE_CAPABILITY_MAJOR")
        minor = self.attribute("COMPUTE_CAPABILITY_MINOR")
        return f"sm_{major}{minor}"

    # -- memory -----------------------------------------------------------------------------
    def allocate(self, nbytes: int) -> CudaArena:
        self.context()
        ptr = _check(self.cu.cuMemAlloc(max(1, int(nbytes))), f"cuMemAlloc of {nbytes} bytes")
        return CudaArena(int(ptr), int(nbytes), self)

    def free(self, arena: Any) -> None:
        if isinstance(arena, CudaArena) and arena.ptr:
            self.context()
            _check(self.cu.cuMemFree(arena.ptr), "cuMemFree")
            arena.ptr = 0

    def view(self, arena: Any, offset: int, type: TensorType) -> CudaBuffer:
        return CudaBuffer(arena.ptr + offset, type, arena)

    def from_host(self, array: np.ndarray) -> CudaBuffer:
        """A device copy of ``array``, complete when this returns: uploaded on the current
        stream (through pinned staging memory from :attr:`PINNED_MIN_BYTES` on), which is
        then synchronized, so kernels on any stream read the data."""
        array = np.ascontiguousarray(array)
        arena = self.allocate(array.nbytes)
        buf = CudaBuffer(arena.ptr, TensorType.of(array), arena)
        weakref.finalize(buf, _free_ptr, self, arena)  # a constant's memory goes with it
        if array.nbytes:
            stream = self.stream
            if array.nbytes >= self.PINNED_MIN_BYTES:
                self._upload_staged(buf.ptr, array, stream)
            else:
                _check(self.cu.cuMemcpyHtoDAsync(buf.ptr, array.ctypes.data, array.nbytes,
                                               stream), "cuMemcpyHtoDAsync")
            _check(self.cu.cuStreamSynchronize(stream), "cuStreamSynchronize (upload)")
        return buf

    def _upload_staged(self, dst: int, array: np.ndarray, stream: Any) -> None:
        """Copy ``array`` to ``dst`` through the two pinned staging buffers in turn: the host
        fills one while the GPU copies from the other (an event says when a buffer is free)."""
        cu = self.cu
        chunk = self.PINNED_CHUNK_BYTES
        with self._staging_lock:
            if not self._staging:
                for _ in range(2):
                    host = int(_check(cu.cuMemAllocHost(chunk), "cuMemAllocHost (staging)"))
                    event = _check(cu.cuEventCreate(0), "cuEventCreate")
                    self._staging.append((host, event))
                    weakref.finalize(self, _free_staging, cu, host, event)
            src = array.ctypes.data
            for i, offset in enumerate(range(0, array.nbytes, chunk)):
                host, event = self._staging[i % 2]
                n = min(chunk, array.nbytes - offset)
                if i >= 2:  # wait until the GPU has copied this buffer's previous chunk
                    _check(cu.cuEventSynchronize(event), "cuEventSynchronize (staging)")
                ctypes.memmove(host, src + offset, n)
                _check(cu.cuMemcpyHtoDAsync(dst + offset, host, n, stream),
                       "cuMemcpyHtoDAsync (staged)")
                _check(cu.cuEventRecord(event, stream), "cuEventRecord (staging)")
            for _, event in self._staging:  # the buffers are reused after this returns
                _check(cu.cuEventSynchronize(event), "cuEventSynchronize (staging)")

    def copy_from_host(self, buffer: CudaBuffer, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array)
        if array.nbytes:
            # from pageable memory the driver has staged the data when the call returns
            _check(self.cu.cuMemcpyHtoDAsync(buffer.ptr, array.ctypes.data, array.nbytes,
                                           self.stream), "cuMemcpyHtoDAsync")

    def copy_to_host(self, buffer: CudaBuffer, out: np.ndarray) -> None:
        if out.nbytes:
            _check(self.cu.cuMemcpyDtoHAsync(out.ctypes.data, buffer.ptr, out.nbytes,
                                           self.stream), "cuMemcpyDtoHAsync")

    def copy(self, dst: CudaBuffer, src: CudaBuffer, type: TensorType) -> None:
        if type.nbytes:
            _check(self.cu.cuMemcpyDtoDAsync(dst.ptr, src.ptr, type.nbytes, self.stream),
                   "cuMemcpyDtoDAsync")

    def synchronize(self) -> None:
        """Wait for the work queued on the calling thread's current stream."""
        if self._ctx is not None:
            _check(self.cu.cuStreamSynchronize(self.stream), "cuStreamSynchronize")

    # -- timing -----------------------------------------------------------------------------
    def record_event(self) -> Any:
        cu = self.cu
        stream = self.stream
        ev = _check(cu.cuEventCreate(0), "cuEventCreate")
        _check(cu.cuEventRecord(ev, stream), "cuEventRecord")
        return ev

    def elapsed_ms(self, start: Any, end: Any) -> float:
        cu = self.cu
        self.context()
        try:
            _check(cu.cuEventSynchronize(end), "cuEventSynchronize")
            ms = _check(cu.cuEventElapsedTime(start, end), "cuEventElapsedTime")
        finally:
            for ev in (start, end):
                cu.cuEventDestroy(ev)
        return float(ms)


def _free_staging(cu: Any, host: int, event: Any) -> None:
    try:
        cu.cuMemFreeHost(host)
        cu.cuEventDestroy(event)
    except Exception:  # noqa: BLE001 - at exit the context may be gone
        pass


def _free_ptr(device: CUDADevice, arena: CudaArena) -> None:
    try:
        device.free(arena)
    except Exception:  # noqa: BLE001 - at exit the context may be gone
        pass


@dataclass
class LoadedModule:
    """A cubin loaded into a device's context, and its kernel functions by name. The module is
    unloaded (``cuModuleUnload``) when this object is dropped: whatever launches its functions
    (a compiled region's kernels, a tuning candidate) keeps it."""

    device: CUDADevice
    module: Any
    functions: dict[str, Any]
    _finalizer: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._finalizer = weakref.finalize(self, _unload, self.device, self.module)

    @classmethod
    def load(cls, device: CUDADevice, cubin: bytes, names: list[str]) -> LoadedModule:
        cu = device.cu
        device.context()
        module = _check(cu.cuModuleLoadData(cubin), "cuModuleLoadData (is the cubin built for "
                                                    "this GPU's architecture?)")
        try:
            functions = {n: _check(cu.cuModuleGetFunction(module, n.encode()),
                                   f"cuModuleGetFunction({n})") for n in names}
        except BaseException:
            cu.cuModuleUnload(module)
            raise
        return cls(device, module, functions)

    def unload(self) -> None:
        """Unload the module now (its functions must not be launched again)."""
        self._finalizer()


def _unload(device: CUDADevice, module: Any) -> None:
    try:
        device.context()
        device.cu.cuModuleUnload(module)
    except Exception:  # noqa: BLE001 - at exit the context may be gone
        pass


class LaunchArgs:
    """The ``void *kernelParams[]`` of one launch: one device pointer per parameter, then, for
    a kernel with run-time extents, one ``long long`` per size (``sizes``, in ``size_vars``
    order), built once for a list of buffers (and sizes) and reused while they are the same."""

    def __init__(self, pointers: list[int], sizes: Sequence[int] = ()) -> None:
        pointers = [*pointers, *(int(v) & 0xFFFF_FFFF_FFFF_FFFF for v in sizes)]
        self.values = (ctypes.c_uint64 * max(1, len(pointers)))(*pointers)
        size = ctypes.sizeof(ctypes.c_uint64)
        base = ctypes.addressof(self.values)
        self.params = (ctypes.c_void_p * max(1, len(pointers)))(
            *[base + i * size for i in range(len(pointers))])

    @property
    def address(self) -> int:
        return ctypes.addressof(self.params)


def launch(device: CUDADevice, function: Any, grid: tuple[int, int, int],
           block: tuple[int, int, int], args: LaunchArgs, name: str) -> None:
    """Queue kernel ``function`` on the calling thread's current stream of ``device``."""
    if 0 in grid or 0 in block:
        return  # an empty tensor: nothing to compute (a zero grid is an invalid launch)
    _check(device.cu.cuLaunchKernel(function, *grid, *block, 0, device.stream, args.address, 0),
           f"launch of kernel {name} (grid {grid}, block {block})")
