"""Device APIs: how the runtime allocates, fills, copies, times and frees a device's memory.

The runtime plans one arena per device and execution state, asks the device for views of it at
planned offsets, and hands those views to kernels; it never reads a buffer itself. A device
whose memory the host cannot address (a GPU) has buffers numpy cannot read, and the runtime
only ever moves them through the methods below.

**Streams.** A device may queue work (copies, kernels) and return before it is done, as long
as it runs it in the order it was queued, as a CUDA stream does. A device with streams gives
each execution state one of its own (:meth:`Device.create_stream`), so that concurrent runs of
a module overlap on the device as they do on the host's cores; the runtime makes a state's
stream current in the calling thread while it uses the state (:meth:`Device.use_stream`), and
every queued call (copies, kernels a backend launches, events, :meth:`Device.synchronize`)
goes to the calling thread's current stream, or to the device's default stream when none is
current. The runtime calls :meth:`Device.synchronize` at the edges of a run (before outputs
are read), not after every kernel; the memory plan reuses a buffer only after the last step
that reads it was queued, so one in-order stream per state keeps every plan correct.
Constants (:meth:`Device.from_host`) are shared by every state: their upload is complete when
``from_host`` returns, so any stream may read them.

**Sharing.** Backends that run on one device (``cuda`` and ``cudnn``) return the same
:class:`Device` object from ``Backend.device_api()``, and a compiled module then has one arena
on it. The instance (``cuda:0``, ``cuda:1``) is the device's :attr:`Device.index`; the host is
``cpu``.

:class:`CPUDevice` is the host: arenas are aligned byte arrays, buffers are numpy views of them,
and everything is synchronous.
"""

from __future__ import annotations

import mmap
import time
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

from tessera.errors import TargetError
from tessera.ir.types import TensorType

#: The host's arena alignment (a cache line; AVX-512 loads of a whole line).
ALIGNMENT = 64


class Device(ABC):
    """One memory: its arenas, buffers, copies, stream and timer.

    Subclasses implement the abstract methods; the others have defaults that are right for
    synchronous devices. Every method may be called from many threads at once (each execution
    state of a module has arenas of its own); a device with one stream serialises its queue.
    """

    #: The device kind: what ``Backend.device`` names (``"cpu"``, ``"cuda"``, ``"vta"``).
    name: str = ""
    #: Which device of its kind (``cuda:1`` has index 1).
    index: int = 0
    #: Byte alignment of buffers in an arena; the memory planner places every tensor at a
    #: multiple of it (the CPU: a cache line; a GPU: 256 bytes for coalesced vector access).
    alignment: int = ALIGNMENT
    #: Whether buffers are host numpy arrays (the CPU, simulated devices). Copies to and from
    #: such a device need no staging, and its buffers may be handed to numpy.
    host_memory: bool = False

    @property
    def key(self) -> str:
        """``cpu`` for the host, ``<name>:<index>`` for other devices (``cuda:0``)."""
        return self.name if self.host_memory and self.index == 0 else f"{self.name}:{self.index}"

    def instance(self, index: int) -> Device:
        """The device of this kind with ``index`` (``cuda:1``), one shared object per index,
        for ``tessera.compile(..., devices={"cuda": 1})``. By default a kind has one device:
        this one."""
        if index != self.index:
            raise TargetError(f"device {self.name!r} has no instance {index}: this Tessera "
                              f"build of it drives only {self.key}")
        return self

    def missing(self) -> str | None:
        """Why this machine cannot run code on this device (no driver, no such GPU), or None
        when it can. A backend may still compile for an absent device (cross-compilation, as
        ``cuda -arch=sm_90`` on a machine without a GPU); the module can then be inspected and
        exported but not run, and the artifact runs where the device is. Must not raise."""
        return None

    # -- memory -----------------------------------------------------------------------------
    @abstractmethod
    def allocate(self, nbytes: int) -> Any:
        """A new arena of at least ``nbytes`` bytes, aligned to :attr:`alignment`."""

    def allocate_sparse(self, nbytes: int) -> Any:
        """An arena as :meth:`allocate` gives, of which each run uses only a part: a symbolic
        module's, planned at its size bounds, each call touching what its sizes need. A device
        whose memory is committed lazily commits it in small pages here (so a short request
        neither faults in nor keeps resident a huge page per tensor); by default
        :meth:`allocate`."""
        return self.allocate(nbytes)

    def free(self, arena: Any) -> None:  # noqa: B027 - garbage-collected memory needs nothing
        """Release an arena from :meth:`allocate` (called once, when the execution state that
        owns it is dropped; work using it has been synchronized)."""

    @abstractmethod
    def view(self, arena: Any, offset: int, type: TensorType) -> Any:
        """A buffer of ``type`` at byte ``offset`` (a multiple of :attr:`alignment`) of
        ``arena``."""

    @abstractmethod
    def from_host(self, array: np.ndarray) -> Any:
        """A new buffer holding a copy of ``array`` (a compiled region's constants; it lives
        as long as the compiled region holds it)."""

    # -- copies -----------------------------------------------------------------------------
    @abstractmethod
    def copy_from_host(self, buffer: Any, array: np.ndarray) -> None:
        """Copy a host array of the buffer's type into the buffer. The caller may change
        ``array`` as soon as this returns (stage it if the copy is queued)."""

    @abstractmethod
    def copy_to_host(self, buffer: Any, out: np.ndarray) -> None:
        """Copy a buffer into ``out``, a C-contiguous host array of its type, with no host
        allocation of its own. The copy may be queued: ``out`` holds the data after
        :meth:`synchronize`."""

    def copy(self, dst: Any, src: Any, type: TensorType) -> None:
        """Copy buffer ``src`` into buffer ``dst`` (both of ``type``, on this device), in
        stream order. By default through a host array; devices override it."""
        stage = np.empty(type.shape, dtype=type.dtype.numpy)
        self.copy_to_host(src, stage)
        self.synchronize()
        self.copy_from_host(dst, stage)

    # -- streams and timing -----------------------------------------------------------------
    def create_stream(self) -> Any:
        """A new in-order stream for one execution state's work, or None for a device that
        has one queue (the default: synchronous devices, simulators). The runtime destroys it
        with :meth:`destroy_stream` when the state is dropped."""
        return None

    def destroy_stream(self, stream: Any) -> None:  # noqa: B027 - nothing to release
        """Wait for ``stream``'s work and release it (a stream from :meth:`create_stream`;
        may be called from any thread, e.g. by the garbage collector)."""

    def use_stream(self, stream: Any) -> AbstractContextManager[Any]:
        """A context manager making ``stream`` the calling thread's current stream on this
        device for its block (None: the default stream); blocks nest."""
        return nullcontext()

    def synchronize(self) -> None:  # noqa: B027 - synchronous devices have nothing to wait for
        """Wait until the work queued on the calling thread's current stream is done."""

    def record_event(self) -> Any:
        """A marker of this point in the stream, for :meth:`elapsed_ms`. Synchronous devices
        take the host clock (the default); devices with a stream record an event."""
        return time.perf_counter()

    def elapsed_ms(self, start: Any, end: Any) -> float:
        """Milliseconds between two :meth:`record_event` markers, once both are reached
        (the runtime synchronizes first)."""
        return (end - start) * 1000.0

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key}>"


class CPUDevice(Device):
    """Host memory: arenas are aligned byte arrays, buffers are numpy views of them."""

    name = "cpu"
    host_memory = True

    def allocate(self, nbytes: int) -> np.ndarray:
        raw = np.empty(max(nbytes, 1) + self.alignment, dtype=np.uint8)
        start = (-raw.ctypes.data) % self.alignment
        return raw[start:start + max(nbytes, 1)]

    def allocate_sparse(self, nbytes: int) -> np.ndarray:
        # anonymous memory, page-aligned and zero-filled on first touch, in 4 KiB pages:
        # numpy asks for transparent huge pages on large arrays, and a huge-page fault (with
        # compaction) cost about 3 ms each in a symbolic encoder's first call, one per tensor
        size = max(nbytes, 1)
        region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if hasattr(mmap, "MADV_NOHUGEPAGE"):
            region.madvise(mmap.MADV_NOHUGEPAGE)
        return np.frombuffer(region, dtype=np.uint8, count=size)

    def view(self, arena: np.ndarray, offset: int, type: TensorType) -> np.ndarray:
        chunk = arena[offset:offset + type.nbytes]
        return chunk.view(type.dtype.numpy).reshape(type.shape)

    def from_host(self, array: np.ndarray) -> np.ndarray:
        return np.array(array, order="C", copy=True)

    def copy_from_host(self, buffer: np.ndarray, array: np.ndarray) -> None:
        np.copyto(buffer, array, casting="no")

    def copy_to_host(self, buffer: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, buffer, casting="no")

    def copy(self, dst: np.ndarray, src: np.ndarray, type: TensorType) -> None:
        np.copyto(dst, src, casting="no")


#: The one host device instance every CPU backend returns.
CPU = CPUDevice()
