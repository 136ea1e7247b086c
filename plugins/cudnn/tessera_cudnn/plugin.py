"""The ``tessera.backends`` entry point of tessera-cudnn: the ``cudnn`` and ``cublas`` backends."""

from __future__ import annotations

from tessera.plugin import Backend, hookimpl


@hookimpl
def tessera_backends() -> list[Backend]:
    from .backend import CuBLASBackend, CuDNNBackend

    return [CuDNNBackend(), CuBLASBackend()]
