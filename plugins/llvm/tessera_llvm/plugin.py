"""The ``tessera.backends`` entry point of tessera-llvm: registers the ``llvm`` backend."""

from __future__ import annotations

from tessera.plugin import Backend, hookimpl


@hookimpl
def tessera_backends() -> list[Backend]:
    from .backend import LLVMBackend

    return [LLVMBackend()]
