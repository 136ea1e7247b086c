"""Registers the control-flow backend through the same hook third-party plugins use."""

from __future__ import annotations

from tessera.backends.control_flow.backend import ControlFlowBackend
from tessera.plugin.backend import Backend
from tessera.plugin.hookspecs import hookimpl


@hookimpl
def tessera_backends() -> list[Backend]:
    return [ControlFlowBackend()]
