"""The files a backend's ``save`` writes and its ``load`` reads back, in one place.

The llvm, cuda and cudnn backends save the same shape of region: binary files (object code,
a cubin, the CUDA C), one JSON table (``kernels.json``, ``plans.json``) that records the
format, hashes of the binaries, the backend's own entries and the region's tensor types, and
the constants the kernels read, as arrays under ``constants/<name>`` (the artifact stores each
distinct array once; see :meth:`tessera.plugin.backend.Backend.save`). :class:`ArtifactFiles`
describes such a layout once; ``save`` builds the dict ``Backend.save`` returns, ``load``
checks what ``Backend.load`` got (every file present, the table's format, the hashes) and
returns the table, the files, the constants and the tensor types, every failure an
:class:`~tessera.errors.ArtifactError` worded ``"<backend> region <name>: ..."``.

The table's ``format`` is the backend's ``artifact_version`` (one number, not a second one of
the plugin's). The core already refuses an artifact whose manifest records another
``artifact_version`` (:meth:`Backend.accepts_artifact`); the table's copy is still read
because it is what ``load`` parses: it catches artifacts saved before the manifest recorded
versions and a table that does not belong to the manifest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.errors import ArtifactError
from tessera.ir.symbolic import dim_from_json, dim_to_json
from tessera.ir.types import TensorType
from tessera.plugin.backend import Backend, CompiledRegion

__all__ = ["CONSTANT_KEY", "ArtifactFiles", "SavedFiles", "artifact_format"]

#: Prefix of the keys of the constants ``save`` returns as arrays.
CONSTANT_KEY = "constants/"


def artifact_format(backend: Backend) -> int | str:
    """The ``format`` a table records: the backend's ``artifact_version``, as an int when it
    is one (``"3"`` -> 3)."""
    version = str(backend.artifact_version)
    return int(version) if version.isdigit() else version


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class SavedFiles:
    """What :meth:`ArtifactFiles.load` read: the table (parsed JSON), the binary files by
    name, the constants (name -> array, without the ``constants/`` prefix) and the saved
    tensor types."""

    table: dict[str, Any]
    files: dict[str, bytes]
    constants: dict[str, np.ndarray]
    tensors: dict[str, TensorType]


@dataclass(frozen=True)
class ArtifactFiles:
    """The layout of a backend's saved region: the JSON ``table``, the other ``files`` it
    needs, ``hashes`` (table key -> the file whose SHA-256 it records), the ``keys`` every
    table has, and what the saved files are called in messages (``"kernels"``: "cannot read
    the saved kernels")."""

    table: str
    files: tuple[str, ...] = ()
    hashes: Mapping[str, str] = field(default_factory=dict)
    keys: tuple[str, ...] = ("tensors",)
    what: str = "kernels"

    # -- save ------------------------------------------------------------------------------
    def handle(self, backend: Backend, compiled: CompiledRegion,
               check: type | Callable[[Any], bool], missing: str = "") -> Any:
        """``compiled.handle`` when it is this backend's (an instance of ``check``, or
        ``check(handle)`` true), else an ArtifactError (``missing`` says what is lacking)."""
        handle = compiled.handle
        ok = isinstance(handle, check) if isinstance(check, type) else check(handle)
        if not ok:
            raise ArtifactError(f"{backend.name} region {compiled.region.name}: not compiled by "
                                f"this backend{f' ({missing})' if missing else ''}")
        return handle

    def save(self, backend: Backend, table: Mapping[str, Any], files: Mapping[str, bytes],
             constants: Mapping[str, np.ndarray], tensors: Mapping[str, TensorType]
             ) -> dict[str, bytes | np.ndarray]:
        """What ``Backend.save`` returns: the constants as arrays, the ``files`` and the JSON
        table (the format, the hashes of the files, ``table``'s entries, the tensor types)."""
        meta: dict[str, Any] = {"format": artifact_format(backend)}
        meta.update((key, _sha256(files[name])) for key, name in self.hashes.items())
        meta.update(table)
        meta["tensors"] = {k: [[dim_to_json(d) for d in t.shape], str(t.dtype)]
                           for k, t in tensors.items()}  # size expressions as JSON
        saved: dict[str, bytes | np.ndarray] = {
            CONSTANT_KEY + k: np.asarray(v) for k, v in constants.items()}
        saved.update(files)
        saved[self.table] = json.dumps(meta, indent=1).encode()
        return saved

    # -- load ------------------------------------------------------------------------------
    @contextmanager
    def reading(self, backend: Backend, region: str) -> Iterator[None]:
        """Turn any error but an ArtifactError raised inside into "<backend> region <region>:
        cannot read the saved <what>" (a damaged artifact)."""
        try:
            yield
        except ArtifactError:
            raise
        except Exception as err:  # noqa: BLE001 - a damaged artifact
            raise ArtifactError(f"{backend.name} region {region}: cannot read the saved "
                                f"{self.what} ({', '.join((*self.files, self.table))}): "
                                f"{err}") from err

    def load(self, backend: Backend, region: str, files: Mapping[str, bytes | np.ndarray],
             copy: Callable[[np.ndarray], np.ndarray] = np.ascontiguousarray) -> SavedFiles:
        """Check and read what ``Backend.load`` got for region ``region``; constants are
        copied with ``copy`` (the arrays come back read-only)."""
        for name in (*self.files, self.table):
            if not isinstance(files.get(name), bytes):
                raise ArtifactError(f"{backend.name} region {region}: the artifact has no "
                                    f"{name}")
        binaries = {name: files[name] for name in self.files}
        with self.reading(backend, region):
            meta = json.loads(files[self.table])
            if not isinstance(meta, dict):
                raise ValueError(f"{self.table} is not a JSON object")
            expected = artifact_format(backend)
            if meta.get("format") != expected:
                raise ArtifactError(f"{backend.name} region {region}: {self.table} has "
                                    f"artifact format {meta.get('format')}, this plugin reads "
                                    f"{expected}; compile the model again with this version "
                                    f"of the plugin")
            for key in self.keys:
                if key not in meta:
                    raise ValueError(f"{self.table} has no {key!r}")
            for key, name in self.hashes.items():
                data = binaries[name]
                assert isinstance(data, bytes)
                if _sha256(data) != meta.get(key):
                    raise ArtifactError(f"{backend.name} region {region}: {name} does not "
                                        f"match the hash {self.table} records")
            constants = {k[len(CONSTANT_KEY):]: copy(v) for k, v in files.items()
                         if k.startswith(CONSTANT_KEY) and isinstance(v, np.ndarray)}
            tensors = {k: TensorType(tuple(dim_from_json(x) for x in s), d)
                       for k, (s, d) in meta["tensors"].items()}
        return SavedFiles(meta, binaries, constants, tensors)  # type: ignore[arg-type]
