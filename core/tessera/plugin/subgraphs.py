"""The contract for backends that run nodes holding sub-graphs (``If``, ``Loop``, ``Scan``).

Such a backend does not compile the sub-graphs itself: the core compiles each one for the
module's own target (so a ``Loop`` body's matrix products run on ``llvm`` or ``cuda``, its
other nodes wherever the partitioner puts them) through ``CompileOptions.subgraphs``, a
:data:`SubgraphCompiler` every backend receives. What comes back is a
:class:`CompiledSubgraph`; the backend's kernels run it, one :class:`SubgraphSession` per
kernel call (so concurrent calls of the module never share buffers).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager

import numpy as np

from tessera.ir.graph import Function
from tessera.ir.types import TensorType


class SubgraphSession(ABC):
    """One execution state of a compiled sub-graph, owned by one caller at a time.

    ``inputs`` are the host buffers of the sub-graph's inputs, in order: write into them
    (``np.copyto``); they keep their contents between runs, so a value that does not change
    from one iteration to the next (a captured outer value) is written once. ``run()`` runs
    the sub-graph; ``outputs()`` are host arrays of its outputs, valid until the next run
    (read-only views where possible: copy what must outlive it)."""

    inputs: list[np.ndarray]

    @abstractmethod
    def run(self) -> None:
        """Run the sub-graph on the current contents of ``inputs``."""

    @abstractmethod
    def outputs(self) -> list[np.ndarray]:
        """The outputs of the last run, in order."""

    @property
    def outputs_alias_inputs(self) -> bool:
        """Whether an output may share memory with an input (a body that passes a value
        through): copy outputs aside before writing them into inputs."""
        return True


class CompiledSubgraph(ABC):
    """A sub-graph compiled for the module's target: its types and sessions to run it."""

    input_types: list[TensorType]
    output_types: list[TensorType]

    @abstractmethod
    def session(self) -> AbstractContextManager[SubgraphSession]:
        """``with sub.session() as s:`` owns an execution state for the block."""

    def describe(self) -> str:
        """A line for reports: how the sub-graph was compiled."""
        return ""


#: Compiles a closed sub-graph (its outer values are its inputs) for the module's target.
SubgraphCompiler = Callable[[Function], CompiledSubgraph]

