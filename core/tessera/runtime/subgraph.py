"""A compiled sub-graph (``If`` branch, ``Loop``/``Scan`` body) as the control-flow contract
sees it (:mod:`tessera.plugin.subgraphs`): a :class:`~tessera.runtime.module.Module` of the
sub-graph, whose execution states serve as sessions.

A session writes inputs straight into the state's host input buffers and reads outputs from
its output buffers without copies: the sub-graph's inputs and outputs are planned on the host
and live for the whole run (inputs keep their contents between runs), so a loop writes its
captured values once and each carried value once per iteration.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from tessera.plugin.subgraphs import CompiledSubgraph, SubgraphSession
from tessera.runtime.executor import Executor
from tessera.runtime.module import Module


class _ExecutorSession(SubgraphSession):
    def __init__(self, module: Module, executor: Executor):
        self._executor = executor
        plan = module.plan
        self.inputs = [executor.buffers[name] for name in plan.inputs]
        self._outputs: list[np.ndarray] = []
        for name in module.signature.output_tensors:
            if name in plan.output_constants:
                array = np.asarray(plan.output_constants[name])
            else:
                array = executor.buffers[name]
            self._outputs.append(array)
        ids = {id(b) for b in self.inputs}
        self._alias = any(id(o) in ids or any(np.shares_memory(o, i) for i in self.inputs)
                          for o in self._outputs)

    def run(self) -> None:
        self._executor.run()

    def outputs(self) -> list[np.ndarray]:
        return self._outputs

    @property
    def outputs_alias_inputs(self) -> bool:
        return self._alias


class ModuleSubgraph(CompiledSubgraph):
    """A sub-graph compiled into a module (every input and output on the host)."""

    def __init__(self, module: Module):
        self.module = module
        self.input_types = list(module.input_types.values())
        self.output_types = [v.type for v in module.graph.outputs]

    @contextmanager
    def session(self) -> Iterator[SubgraphSession]:
        executor = self.module.states.acquire()
        try:
            # a state keeps its session (its buffers' views) for as long as the pool keeps it
            session = getattr(executor, "subgraph_session", None)
            if session is None:
                session = _ExecutorSession(self.module, executor)
                executor.subgraph_session = session  # type: ignore[attr-defined]
            yield session
        finally:
            self.module.states.release(executor)

    def describe(self) -> str:
        regions = ", ".join(f"{r.name} on {r.backend}" for r in self.module.report.regions)
        return f"{len(self.module.plan.steps)} steps ({regions})"
