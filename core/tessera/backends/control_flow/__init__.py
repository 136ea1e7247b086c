"""The built-in control-flow backend (target kind ``controlflow``): runs ``If``, ``Loop`` and
``Scan`` around their sub-graphs, which the core compiles for the module's own target."""

from tessera.backends.control_flow.backend import ControlFlowBackend

__all__ = ["ControlFlowBackend"]
