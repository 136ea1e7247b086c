"""Constants kept once per process: identical arrays of different modules share memory.

A model with symbolic shapes is compiled once per size (:mod:`tessera.runtime.dynamic`) and
once per split plan (:mod:`tessera.runtime.split`); every such module's backends transform the
same weights the same way (a BERT-base specialisation holds 207 MB of packed weights, the same
bytes at every size). Before a module's execution plan binds a region's host constants, each
is looked up here by dtype, shape and a fingerprint of sampled bytes, and compared byte for
byte with the candidates; an identical array already held by a live module is used instead,
and the module's own copy is dropped. Entries are weak: the memory goes with the last module
that uses it.

A shared array is made read-only (kernels read constants, never write them), and an array is
only replaced by one at least as aligned (code generated for 64-byte aligned weights keeps
them so). Arrays under :data:`MIN_BYTES` are not worth the lookup; arrays mapped from a file
(:mod:`tessera.ir.mapped`) are shared through the page cache already.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from typing import Any

import numpy as np

from tessera.ir.mapped import mapped_region

__all__ = ["MIN_BYTES", "ConstantPool", "shared_constants"]

#: Constants smaller than this are left alone.
MIN_BYTES = 16 * 1024

#: Bytes sampled for an array's fingerprint.
_SAMPLE = 4096


def _alignment(a: np.ndarray) -> int:
    """The largest power of two up to 64 that divides the array's address."""
    address = a.ctypes.data
    align = 1
    while align < 64 and address % (align * 2) == 0:
        align *= 2
    return align


def _fingerprint(a: np.ndarray) -> bytes:
    flat = a.reshape(-1).view(np.uint8)
    step = max(1, flat.size // _SAMPLE)
    return hashlib.blake2b(np.ascontiguousarray(flat[::step]).tobytes(), digest_size=16).digest()


class ConstantPool:
    """Host constants by content; see the module's doc."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arrays: dict[tuple[str, tuple[int, ...], bytes], list[weakref.ref[Any]]] = {}
        #: bytes not allocated again because an identical array was already held
        self.saved_bytes = 0

    def share(self, array: Any) -> Any:
        """``array``, or an identical array already held (then ``array`` can be dropped)."""
        if not isinstance(array, np.ndarray) or array.nbytes < MIN_BYTES or \
                not array.flags.c_contiguous or array.dtype.hasobject or \
                mapped_region(array) is not None:
            # a weight mapped from its file is shared through the page cache already (and
            # sampling it for a fingerprint would fault in most of its pages)
            return array
        key = (array.dtype.str, array.shape, _fingerprint(array))
        mine = array.reshape(-1).view(np.uint8)
        with self._lock:
            alive = [r for r in self._arrays.get(key, ()) if r() is not None]
            for ref in alive:
                held = ref()
                if held is array:
                    return array
                if held is not None and _alignment(held) >= _alignment(array) and \
                        np.array_equal(held.reshape(-1).view(np.uint8), mine):
                    self._arrays[key] = alive
                    self.saved_bytes += array.nbytes
                    return held
            array.flags.writeable = False
            alive.append(weakref.ref(array))
            self._arrays[key] = alive
            return array


_POOL = ConstantPool()


def shared_constants(constants: dict[str, Any]) -> None:
    """Replace, in place, each of a compiled region's host constants by the pool's identical
    array where there is one."""
    for name, value in list(constants.items()):
        shared = _POOL.share(value)
        if shared is not value:
            constants[name] = shared


def pool() -> ConstantPool:
    """The process's pool (its ``saved_bytes`` say what sharing saved)."""
    return _POOL
