"""Weights mapped from their files: arrays whose only copy is the file's pages.

An external-data tensor (:mod:`tessera.frontend.onnx.external_data`) of at least
:data:`MAP_MIN_BYTES` is mapped read-only from its file rather than read into memory
(:func:`map_readonly`): its pages come in from the page cache as code reads them, count in the
process's resident memory only while mapped and touched, and are shared by every process that
maps the same file. A weight a kernel reads as it is (an embedding table, of which a request
touches a few rows) then costs only the rows read; a weight a backend transforms (packed
panels, a transposed copy) is read once, and :func:`release_resident` lets its pages go when
the transformed copy is made (they come back from the page cache if read again), so the
compile never holds the file's form and the packed form of every weight at once.

A file a running module maps must be replaced, not rewritten in place: a mapping sees the
file's new bytes, and reading a page a truncation removed kills the process (SIGBUS). Write the
new file elsewhere and rename it over the old one (``Module.export`` does).
``TESSERA_MAP_WEIGHTS=0`` reads every tensor into memory instead.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.lib.array_utils import byte_bounds

from tessera.ir.aligned import aligned_empty, as_aligned

__all__ = ["MAP_MIN_BYTES", "as_aligned_unless_mapped", "map_readonly", "mapping_enabled",
           "mapped_region", "release_resident", "resident_bytes"]

#: Tensors of fewer bytes are read, not mapped (a mapping per bias vector is not worth it).
MAP_MIN_BYTES = 1 << 16


def mapping_enabled() -> bool:
    """Whether external tensors are mapped (``TESSERA_MAP_WEIGHTS``, default on)."""
    return os.environ.get("TESSERA_MAP_WEIGHTS", "1").strip().lower() not in (
        "0", "false", "no", "off")


class _FileMapping(mmap.mmap):
    """A read-only mapping of a file made here (what :func:`mapped_region` looks for: an
    anonymous mapping's pages must never be dropped, their contents would go with them)."""


def map_readonly(path: str | Path, start: int, shape: Sequence[int],
                 dtype: np.dtype) -> np.ndarray:
    """A read-only array of ``shape`` and ``dtype`` over the file's bytes from ``start`` (the
    mapping starts at the page holding ``start``; the array keeps it alive)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    page = start - start % mmap.ALLOCATIONGRANULARITY
    with open(path, "rb") as f:
        region = _FileMapping(f.fileno(), start - page + count * dtype.itemsize,
                              offset=page, access=mmap.ACCESS_READ)
    return np.frombuffer(region, dtype=dtype, count=count, offset=start - page).reshape(
        tuple(shape))


def mapped_region(array: np.ndarray) -> mmap.mmap | None:
    """The file mapping (:func:`map_readonly`'s) ``array``'s memory belongs to (None for
    any other memory)."""
    base = array
    while base is not None:
        if isinstance(base, _FileMapping):
            return base
        base = getattr(base, "base", None) if isinstance(base, np.ndarray) else \
            getattr(base, "obj", None) if isinstance(base, memoryview) else None
    return None


def release_resident(array: np.ndarray) -> None:
    """Drop this process's resident pages of a mapped ``array`` (the whole pages inside it);
    nothing for ordinary memory. Its contents stay: a later read brings the pages back from
    the file."""
    region = mapped_region(array)
    if region is None or not hasattr(mmap, "MADV_DONTNEED") or array.size == 0:
        return
    origin = np.frombuffer(region, dtype=np.uint8).ctypes.data
    low, high = byte_bounds(array)
    lo, hi = low - origin, high - origin
    first = -(-lo // mmap.PAGESIZE) * mmap.PAGESIZE
    last = hi // mmap.PAGESIZE * mmap.PAGESIZE
    if last > first:
        region.madvise(mmap.MADV_DONTNEED, first, last - first)


def as_aligned_unless_mapped(array: np.ndarray) -> np.ndarray:
    """A mapped array as it is when C-contiguous in native byte order: its pages are the
    file's, and a copy would hold the weight twice. Such an array may sit at any byte offset
    (a weight mapped from a model file is where protobuf put it), so whoever takes it must
    read it with loads that assume no alignment (the llvm backend's kernels do). Any other
    array as :func:`~tessera.ir.aligned.as_aligned` gives it (a mapped one's pages let go
    once copied)."""
    if mapped_region(array) is None:
        return as_aligned(array)
    if array.flags.c_contiguous and array.dtype.isnative:
        return array
    if not array.flags.c_contiguous:
        copy = as_aligned(array)
        release_resident(array)
        return copy
    # a few MiB at a time, each part's pages let go once copied: the copy is what stays
    copy = aligned_empty(array.shape, array.dtype.newbyteorder("="))
    src, dst = array.reshape(-1), copy.reshape(-1)
    step = max(1, (8 << 20) // max(1, array.dtype.itemsize))
    for start in range(0, src.size, step):
        dst[start:start + step] = src[start:start + step]
        release_resident(src[start:start + step])
    return copy


def resident_bytes(array: np.ndarray) -> int | None:
    """This process's resident bytes of the memory mapping that holds ``array``'s first
    byte (a file mapping's pages read so far), from ``/proc/self/smaps``; None where the
    system does not say (not Linux)."""
    address, inside = array.ctypes.data, False
    try:
        with open("/proc/self/smaps") as f:
            for line in f:
                head = line.split(maxsplit=1)[0]
                if "-" in head and not head.endswith(":"):
                    lo, hi = (int(x, 16) for x in head.split("-"))
                    inside = lo <= address < hi
                elif inside and head == "Rss:":
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
