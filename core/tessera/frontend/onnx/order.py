"""A topological order of ONNX nodes (ONNX requires one; the importer is forgiving)."""

from __future__ import annotations

import onnx

from tessera.errors import ModelImportError

__all__ = ["_sorted_nodes", "_sorted_nodes_of"]


def _sorted_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The graph's nodes in a topological order (ONNX requires one; be forgiving)."""
    return _sorted_nodes_of(list(graph.node))


def _sorted_nodes_of(nodes: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """``nodes`` in a topological order (names defined outside them are not dependencies)."""
    produced = {out: i for i, n in enumerate(nodes) for out in n.output if out}
    order: list[int] = []
    state = [0] * len(nodes)
    for start in range(len(nodes)):
        if state[start]:
            continue
        stack = [(start, 0)]
        state[start] = 1
        while stack:
            i, k = stack.pop()
            inputs = [x for x in nodes[i].input if x]
            if k < len(inputs):
                stack.append((i, k + 1))
                j = produced.get(inputs[k])
                if j is not None and state[j] == 0:
                    state[j] = 1
                    stack.append((j, 0))
                elif j is not None and state[j] == 1 and j != i:
                    raise ModelImportError(f"the graph has a cycle through node "
                                           f"{nodes[j].name or nodes[j].op_type!r}")
            else:
                state[i] = 2
                order.append(i)
    return [nodes[i] for i in order]
