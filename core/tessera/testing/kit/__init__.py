"""The backend test kit: what a vendor's package (and Tessera's own backends) test with.

- :func:`register_backend` puts a backend into this process's registry as its entry point
  would, without pip (undone with ``remove()`` or at the end of a ``with`` block);
- :func:`check_backend` checks a backend's static contract (name, device, claims, options);
  :func:`check_compiled` checks what its ``compile`` returned (Tessera calls it after every
  ``compile`` and ``load`` too);
- :class:`NodeConformance` runs the ONNX node conformance cases for one backend in
  claimed-only mode: each case counts only if the backend ran some of its nodes, the nodes it
  ran are counted per backend, a case it ran no node of is declined (with the reason it
  gave), fallback failed or unclaimed, never its failure (a case of an op it claims whose
  nodes it did not take, with no reason, fails), and known failures come from a baseline
  file of the backend's own;
- :func:`check_symbolic_shapes` compiles models with symbolic dimensions for the backend's
  target (specialised per size on first use, and split with a cache length open): the kit's
  whose ops the backend claims (attention, convolution) and the backend's own
  (:class:`SymbolicModel`), and checks them against onnx's reference at several sizes;
- ``pytest_plugins = ["tessera.testing.kit.pytest_plugin"]`` in a ``conftest.py`` makes
  contract warnings errors during the tests and prints the per-backend counts at the end.
"""

from tessera.plugin.contract import check_compiled, strict_contracts
from tessera.testing.kit.checks import check_backend
from tessera.testing.kit.node_conformance import (
    ClaimedResult,
    NodeConformance,
    Tally,
    session_tally,
)
from tessera.testing.kit.registration import RegisteredBackend, register_backend
from tessera.testing.kit.symbolic import (
    SymbolicModel,
    SymbolicModelCheck,
    SymbolicShapesResult,
    check_symbolic_shapes,
)

__all__ = ["ClaimedResult", "SymbolicModelCheck", "NodeConformance", "RegisteredBackend",
           "SymbolicModel", "SymbolicShapesResult", "Tally", "check_backend", "check_compiled",
           "check_symbolic_shapes", "register_backend", "session_tally", "strict_contracts"]
