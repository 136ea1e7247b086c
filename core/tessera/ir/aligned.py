"""Arrays whose data starts on a 64-byte boundary (a cache line; AVX-512's vector width).

Code-generating backends want their constants aligned (vector loads, and a weight that
starts a cache line streams in fewer lines); the importer reads initializers into such arrays,
so a backend that keeps a weight as it is can use the graph's array rather than copy it
(:func:`as_aligned`): a model's weights are then held once.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence

import numpy as np

__all__ = ["ALIGNMENT", "SMALL_PAGES_MIN_BYTES", "aligned_copy", "aligned_empty", "as_aligned",
           "is_aligned"]

#: Bytes: the data of the arrays made here starts at a multiple of it.
ALIGNMENT = 64


#: Arrays of at least this many bytes get memory of their own, in small pages (see
#: :func:`aligned_empty`).
SMALL_PAGES_MIN_BYTES = 4 << 20


def aligned_empty(shape: Sequence[int] | int, dtype: np.dtype | type | str,
                  align: int = ALIGNMENT) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts at a multiple of ``align``.

    An array of :data:`SMALL_PAGES_MIN_BYTES` or more (a packed weight) is an anonymous
    mapping of its own in small pages, given back to the system when the array goes: numpy
    asks for transparent huge pages on large arrays, and on a virtual machine whose memory the
    host backs on first touch a fresh huge page cost about 2 ms to fault in (the 0.5 B
    decoder's 1.9 GB of packed weights: 3.2 s to pack, 1.2 s in small pages; its run time
    the same either way)."""
    dt = np.dtype(dtype)
    dims = (shape,) if isinstance(shape, int) else tuple(int(d) for d in shape)
    nbytes = int(np.prod(dims, dtype=np.int64)) * dt.itemsize
    if nbytes >= SMALL_PAGES_MIN_BYTES and align <= mmap.PAGESIZE and \
            hasattr(mmap, "MAP_ANONYMOUS"):
        region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if hasattr(mmap, "MADV_NOHUGEPAGE"):
            region.madvise(mmap.MADV_NOHUGEPAGE)
        return np.frombuffer(region, dtype=dt, count=nbytes // dt.itemsize).reshape(dims)
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
