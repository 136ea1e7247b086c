"""Device APIs: how the runtime allocates, fills and reads a device's memory.

The runtime plans one arena per device and asks the device for views of it at planned offsets;
kernels receive those views. :class:`CPUDevice` is the host: buffers are numpy arrays.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from tessera.ir.types import TensorType

#: Offsets into an arena are multiples of this many bytes.
ALIGNMENT = 64


class Device(ABC):
    """One kind of memory. Backends that share a device (``cpu``) share one instance."""

    name: str = ""

    @abstractmethod
    def allocate(self, nbytes: int) -> Any:
        """A new arena of at least ``nbytes`` bytes."""

    @abstractmethod
    def view(self, arena: Any, offset: int, type: TensorType) -> Any:
        """A buffer of ``type`` at byte ``offset`` of ``arena``."""

    @abstractmethod
    def from_host(self, array: np.ndarray) -> Any:
        """A new buffer holding a copy of ``array`` (constants)."""

    @abstractmethod
    def copy_from_host(self, buffer: Any, array: np.ndarray) -> None:
        """Copy a host array into a buffer of the same type."""

    @abstractmethod
    def copy_to_host(self, buffer: Any) -> np.ndarray:
        """A host copy of a buffer."""

    def synchronize(self) -> None:  # noqa: B027 - optional hook, synchronous devices keep it
        """Wait for queued work (no-op where work is synchronous)."""


class CPUDevice(Device):
    """Host memory: arenas are aligned byte arrays, buffers are numpy views of them."""

    name = "cpu"

    def allocate(self, nbytes: int) -> np.ndarray:
        raw = np.empty(max(nbytes, 1) + ALIGNMENT, dtype=np.uint8)
        start = (-raw.ctypes.data) % ALIGNMENT
        return raw[start:start + max(nbytes, 1)]

    def view(self, arena: np.ndarray, offset: int, type: TensorType) -> np.ndarray:
        chunk = arena[offset:offset + type.nbytes]
        return chunk.view(type.dtype.numpy).reshape(type.shape)

    def from_host(self, array: np.ndarray) -> np.ndarray:
        return np.array(array, order="C", copy=True)

    def copy_from_host(self, buffer: np.ndarray, array: np.ndarray) -> None:
        np.copyto(buffer, array, casting="no")

    def copy_to_host(self, buffer: np.ndarray) -> np.ndarray:
        return np.array(buffer, copy=True)


#: The one host device instance every CPU backend returns.
CPU = CPUDevice()
