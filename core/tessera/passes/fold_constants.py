"""Constant folding: evaluate nodes whose inputs are all constants at compile time.

Each such node is run with the operator registry's reference implementation (the same oracle the
reference backend uses) and its outputs become constants: the output values keep their names and
their readers, they just gain data and lose their producer. Folding proceeds in node order, so
whole constant subgraphs collapse in one sweep.
"""

from __future__ import annotations

import numpy as np

from tessera.errors import PassError
from tessera.ir.graph import Function, Node
from tessera.ir.types import TensorType
from tessera.ops.registry import get_schema
from tessera.passes.base import Pass

#: Ops never folded: random generators (each run draws new numbers) and structural nodes.
NOT_FOLDABLE = frozenset({
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli",
    "Multinomial", "Region", "DeviceCopy",
})


class FoldConstants(Pass):
    """Replace every node whose inputs are all constants (or that has no inputs, as window
    generators) by constants; random generators are left alone."""

    name = "FoldConstants"
    opt_level = 1

    def run(self, fn: Function) -> Function:
        kept: list[Node] = []
        for node in fn.nodes:
            if self._foldable(node):
                self._fold(node)
            else:
                kept.append(node)
        fn.nodes = kept
        return fn

    @staticmethod
    def _foldable(node: Node) -> bool:
        return (node.body is None and node.op not in NOT_FOLDABLE
                and all(v is None or v.is_constant for v in node.inputs))

    @staticmethod
    def _fold(node: Node) -> None:
        schema = get_schema(node.op)
        args = [v.data if v is not None else None for v in node.inputs]
        try:
            results = schema.evaluate(args, node.attrs)
        except Exception as e:  # noqa: BLE001 - the reference refused these constants
            raise PassError(f"node {node.name} ({node.op}): constant folding failed: "
                            f"{type(e).__name__}: {e}") from e
        if len(results) < len(node.outputs):
            raise PassError(f"node {node.name} ({node.op}): the reference returned "
                            f"{len(results)} outputs, the node has {len(node.outputs)}")
        for out, result in zip(node.outputs, results):
            # np.require keeps 0-d arrays 0-d (np.ascontiguousarray would make them 1-d)
            data = np.require(np.asarray(result).astype(out.type.dtype.numpy, copy=False),
                              requirements="C")
            if TensorType.of(data) != out.type:
                raise PassError(f"node {node.name} ({node.op}): folding output {out.name} gave "
                                f"{TensorType.of(data)}, its type says {out.type}")
            out.data = data
            out.producer = None
