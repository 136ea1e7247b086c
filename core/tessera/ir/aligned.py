"""Arrays whose data starts on a 64-byte boundary (a cache line; AVX-512's vector width).

Code-generating backends want their constants aligned (vector loads, and a weight that
starts a cache line streams in fewer lines); the importer reads initializers into such arrays,
so a backend that keeps a weight as it is can use the graph's array rather than copy it
(:func:`as_aligned`): a model's weights are then held once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["ALIGNMENT", "aligned_copy", "aligned_empty", "as_aligned", "is_aligned"]

#: Bytes: the data of the arrays made here starts at a multiple of it.
ALIGNMENT = 64


def aligned_empty(shape: Sequence[int] | int, dtype: np.dtype | type | str,
                  align: int = ALIGNMENT) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts at a multiple of ``align``.

    A large one comes from numpy, in transparent huge pages where the system gives them: a
    packed weight streamed at every call (a decoder's 2 GB per token) runs 2-4% faster in
    them. (On this project's 2-core VM, whose host backs guest memory on first touch, a fresh
    huge page costs about 2 ms to fault in: the 0.5 B decoder packs its 1.9 GB in 3.2 s
    instead of 1.2 s in small pages. Machines with their memory backed up front do not pay
    that, so the faster run time is kept.)"""
    dt = np.dtype(dtype)
    dims = (shape,) if isinstance(shape, int) else tuple(int(d) for d in shape)
    nbytes = int(np.prod(dims, dtype=np.int64)) * dt.itemsize
    raw = np.empty(nbytes + align, dtype=np.uint8)
    offset = (-raw.ctypes.data) % align
    return raw[offset:offset + nbytes].view(dt).reshape(dims)


def is_aligned(array: np.ndarray, align: int = ALIGNMENT) -> bool:
    """Whether ``array`` is C-contiguous, in native byte order and starts at a multiple of
    ``align``."""
    return bool(array.flags.c_contiguous and array.dtype.isnative
                and array.ctypes.data % align == 0)


def aligned_copy(array: np.ndarray, align: int = ALIGNMENT) -> np.ndarray:
    """A C-contiguous copy of ``array`` whose data starts at a multiple of ``align``."""
    array = np.asarray(array)
    out = aligned_empty(array.shape, array.dtype.newbyteorder("="), align)
    out[...] = array
    return out


def as_aligned(array: np.ndarray, align: int = ALIGNMENT) -> np.ndarray:
    """``array`` itself when :func:`is_aligned`, else :func:`aligned_copy`."""
    array = np.asarray(array)
    return array if is_aligned(array, align) else aligned_copy(array, align)
