"""Constant folding: evaluate nodes whose inputs are all constants at compile time.

Each such node is run with the operator registry's reference implementation (the same oracle the
reference backend uses) and its outputs become constants: the output values keep their names and
their readers, they just gain data and lose their producer. Folding proceeds in node order, so
whole constant subgraphs collapse in one sweep. An ``If`` whose condition is a constant is
replaced by the nodes of the branch it takes.

In a graph with symbolic shapes, a node whose attributes or output types hold size expressions
is not folded, even when its inputs are constants: its value depends on the sizes.
"""

from __future__ import annotations

import numpy as np

from tessera.errors import PassError
from tessera.ir.graph import Function, Node, Value
from tessera.ir.symbolic import has_dim_expr
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
            if node.op == "If" and node.inputs[0] is not None and node.inputs[0].is_constant:
                kept += self._take_branch(fn, node)
            elif self._foldable(node):
                self._fold(node)
            else:
                kept.append(node)
        fn.nodes = kept
        return fn

    @staticmethod
    def _take_branch(fn: Function, node: Node) -> list[Node]:
        """The nodes of the branch an ``If`` with a constant condition takes, its inputs bound
        to the node's captured values; an Identity per output keeps the If's output values
        (names and readers). Constant nodes among them fold in this same sweep."""
        cond = np.asarray(node.inputs[0].data).reshape(-1)  # type: ignore[union-attr]
        if cond.size != 1:
            raise PassError(f"node {node.name} (If): the condition has {cond.size} elements")
        branch: Function = node.attrs["then_branch" if bool(cond[0]) else "else_branch"]
        env: dict[int, Value | None] = {id(v): a for v, a in zip(branch.inputs, node.inputs[1:])}
        nodes: list[Node] = []
        for inner in branch.nodes:
            outs = [Value(fn.fresh_name(o.name), o.type) for o in inner.outputs]
            copy = Node(inner.op, fn.fresh_node_name(inner.name),
                        [env.get(id(v), v) if v is not None else None for v in inner.inputs],
                        outs, dict(inner.attrs))
            env.update((id(o), n) for o, n in zip(inner.outputs, outs))
            nodes.append(copy)
        for out, value in zip(node.outputs, branch.outputs):
            source = env.get(id(value), value)
            nodes.append(Node("Identity", fn.fresh_node_name(f"{node.name}_{out.name}"),
                              [source], [out]))
        kept = []
        for n in nodes:
            if FoldConstants._foldable(n):
                FoldConstants._fold(n)
            else:
                kept.append(n)
        return kept

    @staticmethod
    def _foldable(node: Node) -> bool:
        """All inputs constant, and nothing that depends on the sizes (a size expression in
        an attribute or an output type: a ``Range(0, seq)``): folding that would fix one size
        in a graph that serves every size."""
        return (node.body is None and node.op not in NOT_FOLDABLE
                and all(v is None or v.is_constant for v in node.inputs)
                and all(o.type.is_static for o in node.outputs)
                and not any(has_dim_expr(a) for a in node.attrs.values()))

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
