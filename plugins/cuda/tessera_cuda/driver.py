"""The ``cuda`` device and kernel launches, through NVIDIA's ``cuda-bindings`` driver API.

:class:`CUDADevice` is what the runtime sees (:class:`tessera.plugin.device.Device`): arenas
from ``cuMemAlloc`` (256-byte aligned), buffers that are device addresses numpy cannot read,
copies queued on the device's one stream (``cuMemcpy*Async``), ``synchronize`` a stream
synchronization, events for the profile. One object per device index (``instance``), shared by
every backend on the device. The driver is touched on first use, never at import or
registration, so a machine without a GPU can still list, compile for and test the backend.

:class:`LoadedModule` is a cubin loaded into a device's context (``cuModuleLoadData``) with its
functions; :func:`launch` starts one kernel on the device's stream.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from tessera.errors import RunError, TargetError
from tessera.ir.types import TensorType
from tessera.plugin.device import Device

__all__ = ["CUDADevice", "CudaArena", "CudaBuffer", "LoadedModule", "driver_missing", "launch"]


@lru_cache(maxsize=1)
def _cu():  # noqa: ANN202 - the cuda.bindings.driver module
    from cuda.bindings import driver

    return driver


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
    """One GPU (``cuda:<index>``): its primary context, one stream, memory and events."""

    name = "cuda"
    alignment = 256
    host_memory = False

    _instances: dict[int, CUDADevice] = {}
    _lock = threading.Lock()

    def __init__(self, index: int = 0) -> None:
        self.index = index
        self._ctx: Any = None
        self._stream: Any = None
        self._device: Any = None
        self._setup = threading.Lock()

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
            count = int(_check(_cu().cuDeviceGetCount(), "cuDeviceGetCount"))
        except RunError as err:
            return str(err)
        if self.index >= count:
            return f"this machine has {count} GPU(s), no cuda:{self.index}"
        return None

    # -- context and stream -----------------------------------------------------------------
    def context(self) -> Any:
        """Make this device's primary context current in the calling thread (every driver
        call needs it; the runtime calls from many threads) and return it."""
        cu = _cu()
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
        self.context()
        return self._stream

    def attribute(self, name: str) -> int:
        """A device attribute by its driver name without prefix (``MULTIPROCESSOR_COUNT``)."""
        cu = _cu()
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
        ptr = _check(_cu().cuMemAlloc(max(1, int(nbytes))), f"cuMemAlloc of {nbytes} bytes")
        return CudaArena(int(ptr), int(nbytes), self)

    def free(self, arena: Any) -> None:
        if isinstance(arena, CudaArena) and arena.ptr:
            self.context()
            _check(_cu().cuMemFree(arena.ptr), "cuMemFree")
            arena.ptr = 0

    def view(self, arena: Any, offset: int, type: TensorType) -> CudaBuffer:
        return CudaBuffer(arena.ptr + offset, type, arena)

    def from_host(self, array: np.ndarray) -> CudaBuffer:
        array = np.ascontiguousarray(array)
        arena = self.allocate(array.nbytes)
        buf = CudaBuffer(arena.ptr, TensorType.of(array), arena)
        if array.nbytes:
            _check(_cu().cuMemcpyHtoD(buf.ptr, array.ctypes.data, array.nbytes), "cuMemcpyHtoD")
        weakref.finalize(buf, _free_ptr, self, arena)  # a constant's memory goes with it
        return buf

    def copy_from_host(self, buffer: CudaBuffer, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array)
        if array.nbytes:
            # from pageable memory the driver has staged the data when the call returns
            _check(_cu().cuMemcpyHtoDAsync(buffer.ptr, array.ctypes.data, array.nbytes,
                                           self.stream), "cuMemcpyHtoDAsync")

    def copy_to_host(self, buffer: CudaBuffer, out: np.ndarray) -> None:
        if out.nbytes:
            _check(_cu().cuMemcpyDtoHAsync(out.ctypes.data, buffer.ptr, out.nbytes,
                                           self.stream), "cuMemcpyDtoHAsync")

    def copy(self, dst: CudaBuffer, src: CudaBuffer, type: TensorType) -> None:
        if type.nbytes:
            _check(_cu().cuMemcpyDtoDAsync(dst.ptr, src.ptr, type.nbytes, self.stream),
                   "cuMemcpyDtoDAsync")

    def synchronize(self) -> None:
        if self._ctx is not None:
            self.context()
            _check(_cu().cuStreamSynchronize(self._stream), "cuStreamSynchronize")

    # -- timing -----------------------------------------------------------------------------
    def record_event(self) -> Any:
        cu = _cu()
        self.context()
        ev = _check(cu.cuEventCreate(0), "cuEventCreate")
        _check(cu.cuEventRecord(ev, self._stream), "cuEventRecord")
        return ev

    def elapsed_ms(self, start: Any, end: Any) -> float:
        cu = _cu()
        self.context()
        _check(cu.cuEventSynchronize(end), "cuEventSynchronize")
        ms = _check(cu.cuEventElapsedTime(start, end), "cuEventElapsedTime")
        for ev in (start, end):
            cu.cuEventDestroy(ev)
        return float(ms)


def _free_ptr(device: CUDADevice, arena: CudaArena) -> None:
    try:
        device.free(arena)
    except Exception:  # noqa: BLE001 - at exit the context may be gone
        pass


@dataclass
class LoadedModule:
    """A cubin loaded into a device's context, and its kernel functions by name."""

    device: CUDADevice
    module: Any
    functions: dict[str, Any]

    @classmethod
    def load(cls, device: CUDADevice, cubin: bytes, names: list[str]) -> LoadedModule:
        cu = _cu()
        device.context()
        module = _check(cu.cuModuleLoadData(cubin), "cuModuleLoadData (is the cubin built for "
                                                    "this GPU's architecture?)")
        functions = {n: _check(cu.cuModuleGetFunction(module, n.encode()),
                               f"cuModuleGetFunction({n})") for n in names}
        return cls(device, module, functions)


class LaunchArgs:
    """The ``void *kernelParams[]`` of one launch: one device pointer per parameter, built once
    for a list of buffers and reused while the buffers are the same."""

    def __init__(self, pointers: list[int]) -> None:
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
    """Queue kernel ``function`` on the device's stream."""
    if 0 in grid or 0 in block:
        return  # an empty tensor: nothing to compute (a zero grid is an invalid launch)
    _check(_cu().cuLaunchKernel(function, *grid, *block, 0, device.stream, args.address, 0),
           f"launch of kernel {name} (grid {grid}, block {block})")
