"""Artifact members read in place: large arrays mapped from the ``.tar`` itself.

A tar stores each member's bytes contiguously, at a multiple of 512 bytes, and an ``.npy``
file's header pads its data to a multiple of 64: an array member of an uncompressed artifact
is therefore a 64-byte aligned array sitting in the file, which :func:`load_npy` maps
read-only (:mod:`tessera.ir.mapped`) instead of reading. A loaded module's weights are then
the file's pages: resident only as the kernels read them, shared by every process that loads
the same artifact, and never copied at load. :func:`member_sha256` checks a mapped member's
hash through the mapping a few MiB at a time, letting each part's pages go once hashed.

The artifact file must not be rewritten in place while a module loaded from it runs
(``Module.export`` replaces a file atomically: a module keeps the file it mapped).
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass

import numpy as np

from tessera.ir.mapped import map_readonly, release_resident

__all__ = ["Member", "MappedMember", "load_npy", "member_bytes", "member_sha256"]

#: Bytes hashed (and then let go) at a time.
_CHUNK = 8 << 20


@dataclass(frozen=True)
class MappedMember:
    """A member's bytes left in the artifact file: ``size`` bytes from ``offset``."""

    path: str
    offset: int
    size: int

    def __len__(self) -> int:
        return self.size

    def view(self) -> np.ndarray:
        """The member's bytes, mapped (``uint8``, read-only); read where the file cannot be
        mapped (some network file systems)."""
        try:
            return map_readonly(self.path, self.offset, (self.size,), np.dtype(np.uint8))
        except (OSError, ValueError):
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(self.size)
            if len(data) != self.size:
                raise OSError(f"{self.path}: {len(data)} of {self.size} bytes at "
                              f"{self.offset} (the artifact changed while it loaded?)") from None
            return np.frombuffer(data, dtype=np.uint8)


#: An artifact member as :func:`tessera.runtime.artifact.read_members` gives it.
Member = bytes | MappedMember


def member_bytes(data: Member) -> bytes:
    """The member's bytes, read."""
    return data.view().tobytes() if isinstance(data, MappedMember) else data


def member_sha256(data: Member) -> str:
    """The SHA-256 (hex) of a member's bytes."""
    if not isinstance(data, MappedMember):
        return hashlib.sha256(data).hexdigest()
    digest = hashlib.sha256()
    view = data.view()
    for start in range(0, data.size, _CHUNK):
        part = view[start:start + _CHUNK]
        digest.update(part)
        release_resident(part)
    return digest.hexdigest()


def load_npy(data: Member) -> np.ndarray:
    """The array of an ``.npy`` member (``allow_pickle=False``): mapped from the file when it
    is a plain array there, else read."""
    if isinstance(data, MappedMember):
        mapped = _mapped_npy(data)
        if mapped is not None:
            return mapped
    return np.load(io.BytesIO(member_bytes(data)), allow_pickle=False)  # type: ignore[no-any-return]


def _mapped_npy(data: MappedMember) -> np.ndarray | None:
    """The mapped array of an ``.npy`` member, None when it is not a plain C-ordered array
    of a format version this reads (then :func:`load_npy` reads it, with numpy's checks)."""
    view = data.view()
    head = io.BytesIO(view[:min(data.size, 1 << 16)].tobytes())
    try:
        version = np.lib.format.read_magic(head)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(head)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(head)
        else:
            return None
    except (ValueError, OSError):
        return None
    start = head.tell()
    count = int(np.prod(shape, dtype=np.int64))
    if fortran or dtype.hasobject or count == 0 or start + count * dtype.itemsize != data.size:
        return None
    del view
    try:
        return map_readonly(data.path, data.offset + start, shape, dtype)
    except (OSError, ValueError):
        return None  # read instead
