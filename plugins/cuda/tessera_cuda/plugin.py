"""The ``tessera.backends`` entry point of tessera-cuda: registers the ``cuda`` backend."""

from __future__ import annotations

from tessera.plugin import Backend, hookimpl


@hookimpl
def tessera_backends() -> list[Backend]:
    # the entry point imports only the contract: a backend module that fails to import (its
    # dependencies) is then reported as this hook's error, naming the plugin
    # local import: the backend module loads when the registry asks this hook for backends
    from .backend import CUDABackend

    return [CUDABackend()]
