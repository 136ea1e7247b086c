"""A device whose memory the host cannot read, and a backend on it, for testing the runtime.

:class:`OpaqueDevice` behaves as a GPU does, as far as the runtime can tell: its buffers are
handles numpy refuses to read (``np.asarray(buffer)`` raises), work is queued on one in-order
stream and runs only when the device is synchronized (so a copy read before
``synchronize()`` has not happened yet), buffers are 256-byte aligned, arenas must be freed, and
timing goes through events. It counts what the runtime asks of it (:class:`DeviceStats`).

:class:`OpaqueBackend` runs a few ops (elementwise, broadcasting binary ops, MatMul and a fused
MatMul + Add) on such a device. Tessera's own tests use both to keep the core from assuming
host memory; a vendor can use them to see how a device of their own will be driven.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.errors import RunError
from tessera.ir.graph import Function, Node
from tessera.ir.types import TensorType
from tessera.plugin.backend import Backend, CompiledRegion, CompileOptions, Kernel
from tessera.plugin.device import Device
from tessera.plugin.patterns import Pattern, region_matches
from tessera.plugin.target import TargetKind


class OpaqueBuffer:
    """A tensor in an :class:`OpaqueDevice`'s memory: a block, a byte offset and a type."""

    __slots__ = ("block", "offset", "type")

    def __init__(self, block: int, offset: int, type: TensorType):
        self.block = block
        self.offset = offset
        self.type = type

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError(f"a buffer of {self.type} in opaque device memory: numpy cannot read "
                        f"it; copy it to the host through its Device")

    def __repr__(self) -> str:
        return f"<OpaqueBuffer block {self.block} +{self.offset} {self.type}>"


@dataclass
class DeviceStats:
    """What the runtime asked of the device."""

    allocations: int = 0
    frees: int = 0
    live_bytes: int = 0
    peak_bytes: int = 0
    host_to_device: int = 0
    device_to_host: int = 0
    device_to_device: int = 0
    kernels: int = 0
    events: int = 0
    synchronizes: int = 0


class _Event:
    __slots__ = ("time",)

    def __init__(self) -> None:
        self.time: float | None = None


class OpaqueDevice(Device):
    """Memory of its own, one in-order stream that runs at :meth:`synchronize`."""

    host_memory = False
    alignment = 256

    def __init__(self, name: str = "opaque", index: int = 0):
        self.name = name
        self.index = index
        self._blocks: dict[int, bytearray] = {}
        self._arenas: set[int] = set()
        self._next = 0
        self._queue: list[Callable[[], None]] = []
        self._lock = threading.RLock()
        self.stats = DeviceStats()
        self._siblings: dict[int, OpaqueDevice] = {index: self}
        #: Set to a reason to play a device this machine lacks (``Device.missing``): modules
        #: compiled for it refuse to run and allocate nothing.
        self.absent: str | None = None

    def missing(self) -> str | None:
        return self.absent

    def instance(self, index: int) -> OpaqueDevice:
        """Device ``index`` of this kind: one object per index, made on first use."""
        with self._lock:
            if index == self.index:
                return self
            found = self._siblings.get(index)
            if found is None:
                found = self._siblings[index] = OpaqueDevice(self.name, index)
                found._siblings = self._siblings
            return found

    # -- memory -----------------------------------------------------------------------------
    def _new_block(self, nbytes: int) -> int:
        with self._lock:
            self._next += 1
            self._blocks[self._next] = bytearray(max(nbytes, 1))
            return self._next

    def allocate(self, nbytes: int) -> int:
        block = self._new_block(nbytes)
        with self._lock:
            self._arenas.add(block)
            self.stats.allocations += 1
            self.stats.live_bytes += max(nbytes, 1)
            self.stats.peak_bytes = max(self.stats.peak_bytes, self.stats.live_bytes)
        return block

    def free(self, arena: int) -> None:
        with self._lock:
            if arena not in self._arenas:
                raise RunError(f"{self!r}: arena {arena} freed twice or never allocated")
            if self._queue:
                raise RunError(f"{self!r}: arena {arena} freed with work still queued")
            self._arenas.discard(arena)
            self.stats.frees += 1
            self.stats.live_bytes -= len(self._blocks.pop(arena))

    def view(self, arena: int, offset: int, type: TensorType) -> OpaqueBuffer:
        if offset % self.alignment:
            raise RunError(f"{self!r}: offset {offset} is not {self.alignment}-byte aligned")
        if offset + type.nbytes > len(self._blocks[arena]):
            raise RunError(f"{self!r}: {type} at {offset} overruns arena {arena}")
        return OpaqueBuffer(arena, offset, type)

    def from_host(self, array: np.ndarray) -> OpaqueBuffer:
        data = np.ascontiguousarray(array)
        block = self._new_block(data.nbytes)
        self._blocks[block][:data.nbytes] = data.tobytes()
        return OpaqueBuffer(block, 0, TensorType(data.shape, str(data.dtype)))

    def array(self, buffer: OpaqueBuffer) -> np.ndarray:
        """The device's own view of a buffer, for its kernels (runs inside the stream)."""
        if not isinstance(buffer, OpaqueBuffer):
            raise RunError(f"{self!r}: {type(buffer).__name__} is not a buffer of this device")
        t = buffer.type
        return np.frombuffer(self._blocks[buffer.block], dtype=t.dtype.numpy,
                             count=t.size, offset=buffer.offset).reshape(t.shape)

    # -- the stream -------------------------------------------------------------------------
    def enqueue(self, work: Callable[[], None]) -> None:
        """Queue ``work`` on the stream; it runs at the next :meth:`synchronize`."""
        with self._lock:
            self._queue.append(work)

    def synchronize(self) -> None:
        with self._lock:
            self.stats.synchronizes += 1
            while self._queue:
                self._queue.pop(0)()

    def copy_from_host(self, buffer: OpaqueBuffer, array: np.ndarray) -> None:
        staged = np.array(array, dtype=buffer.type.dtype.numpy, order="C", copy=True)
        if staged.shape != buffer.type.shape:
            raise RunError(f"{self!r}: copying {staged.shape} into {buffer.type}")
        self.stats.host_to_device += 1
        self.enqueue(lambda: np.copyto(self.array(buffer), staged))

    def copy_to_host(self, buffer: OpaqueBuffer, out: np.ndarray) -> None:
        if not isinstance(out, np.ndarray) or out.shape != buffer.type.shape:
            raise RunError(f"{self!r}: copying {buffer.type} into {out!r}")
        self.stats.device_to_host += 1
        self.enqueue(lambda: np.copyto(out, self.array(buffer), casting="no"))

    def copy(self, dst: OpaqueBuffer, src: OpaqueBuffer, type: TensorType) -> None:
        self.stats.device_to_device += 1
        self.enqueue(lambda: np.copyto(self.array(dst), self.array(src)))

    def launch(self, fn: Callable[..., None], ins: list[OpaqueBuffer],
               outs: list[OpaqueBuffer]) -> None:
        """Queue a kernel: ``fn(*inputs, *outputs)`` on the device's arrays."""
        self.stats.kernels += 1
        self.enqueue(lambda: fn(*[self.array(b) for b in ins], *[self.array(b) for b in outs]))

    def record_event(self) -> _Event:
        event = _Event()
        self.stats.events += 1

        def reach() -> None:
            event.time = time.perf_counter()

        self.enqueue(reach)
        return event

    def elapsed_ms(self, start: _Event, end: _Event) -> float:
        if start.time is None or end.time is None:
            raise RunError(f"{self!r}: elapsed_ms() on an event the stream has not reached; "
                           f"synchronize first")
        return (end.time - start.time) * 1000.0

    @property
    def live_arenas(self) -> int:
        with self._lock:
            return len(self._arenas)


_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Relu": lambda x: np.maximum(x, 0), "Neg": np.negative, "Tanh": np.tanh, "Exp": np.exp,
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
}
_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
}


def _float32(node: Node) -> bool:
    return all(v.type.dtype.value == "float32" for v in list(node.inputs) + list(node.outputs)
               if v is not None)


class OpaqueBackend(Backend):
    """Float32 elementwise ops, MatMul and MatMul + Add on an :class:`OpaqueDevice`."""

    default_rank = -1  # never the fallback

    def __init__(self, name: str = "opaque", device: OpaqueDevice | None = None):
        self.name = name
        self.memory = device or OpaqueDevice()
        self.device = self.memory.name

    def device_api(self) -> OpaqueDevice:
        return self.memory

    def claims(self, target: TargetKind) -> list[Pattern]:
        return ([Pattern("Add", inputs=[Pattern("MatMul", check=_float32), None],
                         name="MatMulAdd", check=_float32),
                 Pattern("MatMul", check=_float32)]
                + [Pattern(op, check=_float32) for op in (*_UNARY, *_BINARY)])

    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        tensors = {v.name: v.type for v in region.inputs}
        for node in region.nodes:
            tensors.update({o.name: o.type for o in node.outputs})
        device = self.device_instance(options)
        constants = {v.name: device.from_host(np.asarray(v.data)) for v in region.constants()}
        kernels = []
        for m in region_matches(region):
            root = m.root
            if m.pattern == "MatMulAdd":
                matmul = m.nodes[1]
                names = [v.name for v in matmul.inputs] + [root.inputs[1].name]
                fn: Callable[..., None] = _matmul_add
            elif root.op == "MatMul":
                names = [v.name for v in root.inputs]
                fn = _matmul
            elif root.op in _UNARY:
                names = [root.inputs[0].name]
                fn = _elementwise(_UNARY[root.op])
            else:
                names = [v.name for v in root.inputs]
                fn = _elementwise(_BINARY[root.op])
            kernels.append(Kernel(root.name, _launcher(device, fn), names,
                                  [root.outputs[0].name], m.pattern))
        return CompiledRegion(self.name, region, kernels, tensors, constants, handle=device)


def _launcher(device: Device, fn: Callable[..., None]) -> Callable[[list[Any], list[Any]], None]:
    assert isinstance(device, OpaqueDevice)

    def kernel(ins: list[Any], outs: list[Any]) -> None:
        device.launch(fn, ins, outs)

    return kernel


def _elementwise(op: Callable[..., np.ndarray]) -> Callable[..., None]:
    def run(*arrays: np.ndarray) -> None:
        *ins, out = arrays
        out[...] = op(*ins)

    return run


def _matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    out[...] = np.matmul(a, b)


def _matmul_add(a: np.ndarray, b: np.ndarray, bias: np.ndarray, out: np.ndarray) -> None:
    out[...] = np.matmul(a, b) + bias
