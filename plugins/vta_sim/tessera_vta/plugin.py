"""The ``tessera.backends`` entry point of tessera-vta: registers the ``vta_sim`` backend.

Only Tessera loads this module (through the entry point); the rest of the package (ISA,
compiler, simulators) does not need Tessera.
"""

from __future__ import annotations

from tessera.plugin import Backend, hookimpl


@hookimpl
def tessera_backends() -> list[Backend]:
    from .backend import VTABackend

    return [VTABackend()]
