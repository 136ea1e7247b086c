"""The ``tessera.backends`` entry point of tessera-cuda: registers the ``cuda`` backend."""

from __future__ import annotations

from tessera.plugin import Backend, hookimpl


@hookimpl
def tessera_backends() -> list[Backend]:
    from .backend import CUDABackend

    return [CUDABackend()]
