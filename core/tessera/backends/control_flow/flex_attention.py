"""The control-flow backend's ``FlexAttention`` kernel: the attention in numpy (the op's own
computation, :func:`tessera.ops.flex_attention.flex_attention_compute`), the ``score_mod`` and
``prob_mod`` sub-graphs compiled for the module's target and run once per call on the whole
``(B, Hq, L, S)`` tensor, the captured outer values written into their trailing inputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.ir.graph import Node
from tessera.ops.flex_attention import MODS, ModFn, flex_attention_compute
from tessera.plugin.backend import KernelFn
from tessera.plugin.subgraphs import CompiledSubgraph


def _session_fn(sub: CompiledSubgraph | None, outer: list[np.ndarray]) -> ModFn | None:
    if sub is None:
        return None

    def apply(x: np.ndarray) -> np.ndarray:
        with sub.session() as s:
            for buf, value in zip(s.inputs, [x, *outer]):
                np.copyto(buf, value, casting="no")
            s.run()
            return np.array(s.outputs()[0])  # a copy: the session's buffers are reused

    return apply


def flex_attention_kernel(node: Node, compiled: dict[str, CompiledSubgraph]) -> KernelFn:
    """The kernel of one FlexAttention node, ``compiled`` holding its compiled modifiers."""
    scale, precision = node.attrs["scale"], node.attrs["softmax_precision"]
    score_sub, prob_sub = (compiled.get(key) for key in MODS)

    def run(ins: list[Any], outs: list[Any]) -> None:
        q, k, v, *outer = ins
        y = flex_attention_compute(q, k, v, scale=scale, softmax_precision=precision,
                                   score_fn=_session_fn(score_sub, outer),
                                   prob_fn=_session_fn(prob_sub, outer))
        np.copyto(outs[0], y, casting="no")

    return run


__all__ = ["flex_attention_kernel"]
