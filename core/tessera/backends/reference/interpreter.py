"""Evaluate a function node by node with the registry's reference implementations.

No memory planning, no partitioning: the oracle for tests and the engine of constant folding.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tessera.errors import RunError
from tessera.ir.graph import Function, Value
from tessera.ops.registry import get_schema


def evaluate_function(fn: Function, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run ``fn`` on named inputs; returns its outputs by value name."""
    env: dict[int, np.ndarray] = {}
    for v in fn.inputs:
        if v.name not in inputs:
            raise RunError(f"missing input {v.name!r}")
        env[id(v)] = np.asarray(inputs[v.name])

    def get(v: Value) -> np.ndarray:
        if v.data is not None:
            return v.data
        return env[id(v)]

    for node in fn.nodes:
        if node.body is not None:
            raise RunError(f"node {node.name} ({node.op}) holds a region; run a Module instead")
        args = [get(v) if v is not None else None for v in node.inputs]
        try:
            results = get_schema(node.op).evaluate(args, node.attrs)
        except Exception as e:  # noqa: BLE001
            raise RunError(f"node {node.name} ({node.op}): {type(e).__name__}: {e}") from e
        for out, res in zip(node.outputs, results):
            env[id(out)] = res.astype(out.type.dtype.numpy, copy=False)
    return {v.name: get(v) for v in fn.outputs}
