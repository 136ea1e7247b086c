"""The reference backend: every registry op (but those holding sub-graphs), one numpy kernel
per node.

It is the fallback for nodes no other backend claims and the oracle other backends are tested
against. Its kernels call the registry's reference implementations and write into the buffers the
runtime planned.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from tessera.backends.reference.blas import BLAS_THREADS
from tessera.errors import RunError
from tessera.ir.graph import Function, Node
from tessera.ops.registry import all_ops, get_schema
from tessera.plugin.backend import (
    Backend,
    CompiledRegion,
    CompileOptions,
    Kernel,
    contiguous_concat_offsets,
)
from tessera.plugin.patterns import Pattern
from tessera.plugin.target import TargetKind


def _node_kernel(node: Node) -> Kernel:
    schema = get_schema(node.op)
    attrs = dict(node.attrs)
    n_in = len(node.inputs)
    present = [i for i, v in enumerate(node.inputs) if v is not None]
    name, op = node.name, node.op

    def run(ins: list[Any], outs: list[Any]) -> None:
        args: list[Any] = [None] * n_in
        for i, buf in zip(present, ins):
            args[i] = buf
        try:
            results = schema.evaluate(args, attrs)
        except Exception as e:  # noqa: BLE001 - report which node failed
            raise RunError(f"node {name} ({op}) failed in the reference backend: "
                           f"{type(e).__name__}: {e}") from e
        for out, res in zip(outs, results):
            if out.shape != res.shape:
                raise RunError(f"node {name} ({op}) produced shape {list(res.shape)}, its "
                               f"inferred type says {list(out.shape)}")
            np.copyto(out, res, casting="unsafe")

    offsets = None
    if node.op == "Concat" and len(node.outputs) == 1 and all(v is not None for v in node.inputs):
        # the runtime may place the inputs inside the output and skip the copy
        offsets = contiguous_concat_offsets([v.type for v in node.inputs if v is not None],
                                            node.outputs[0].type)
    return Kernel(name=node.name, fn=run,
                  inputs=[v.name for v in node.inputs if v is not None],
                  outputs=[v.name for v in node.outputs], op=node.op, concat_offsets=offsets)


def _sequence_binder(kernels: list[Kernel]) -> Any:
    """``CompiledRegion.bind_sequence``: the region's kernels in order in one call, with numpy's
    BLAS threads limited meanwhile (:mod:`.blas`); kernels given None are skipped (the runtime
    does their work)."""

    def bind(calls: list[tuple[list[Any], list[Any]] | None]) -> Any:
        bound = [(k.fn, c[0], c[1]) for k, c in zip(kernels, calls) if c is not None]

        def run() -> None:
            with BLAS_THREADS:
                for fn, ins, outs in bound:
                    fn(ins, outs)

        return run

    return bind


@lru_cache(maxsize=1)
def _all_op_patterns() -> tuple[Pattern, ...]:
    # the registry is complete once imported; building ~300 patterns per compile showed up in
    # profiles of many small compiles (the conformance suite)
    # ops that hold sub-graphs (If, Loop, Scan) go to the control-flow backend, which runs
    # their bodies compiled for the module's target
    return tuple(Pattern(name) for name, schema in sorted(all_ops().items())
                 if not any(a.kind == "graph" for a in schema.attrs.values()))


class ReferenceBackend(Backend):
    """Numpy kernels for every op in the registry."""

    name = "ref"
    device = "cpu"
    default_rank = 0

    def claims(self, target: TargetKind) -> list[Pattern]:
        return list(_all_op_patterns())

    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        kernels = [_node_kernel(node) for node in region.nodes]
        constants = {v.name: v.data for v in region.constants()}
        tensors = {v.name: v.type for v in region.inputs}
        for node in region.nodes:
            for out in node.outputs:
                tensors[out.name] = out.type
        return CompiledRegion(self.name, region, kernels, tensors, constants,
                              {"kernels": len(kernels)},
                              bind_sequence=_sequence_binder(kernels))

    def host_threads(self) -> str | None:
        return BLAS_THREADS.describe()
