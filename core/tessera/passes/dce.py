"""Dead code elimination: drop nodes none of whose outputs is read by a node or the function."""

from __future__ import annotations

from tessera.ir.graph import Function
from tessera.passes.base import Pass


class DeadCodeElimination(Pass):
    """Remove every node whose outputs are all unused (chains of them too, in one sweep), in
    the function and in the sub-graphs its nodes hold (whose outputs are all used)."""

    name = "DeadCodeElimination"
    opt_level = 1

    def run(self, fn: Function) -> Function:
        live: set[int] = {id(v) for v in fn.outputs}
        kept = []
        # Nodes are topologically sorted: walking backwards sees every reader before its writer.
        for node in reversed(fn.nodes):
            if any(id(out) in live for out in node.outputs):
                kept.append(node)
                live.update(id(v) for v in node.inputs if v is not None)
        kept.reverse()
        fn.nodes = kept
        for node in kept:  # inside If branches and Loop/Scan bodies too
            for _, graph in node.subgraphs:
                self.run(graph)
        return fn
