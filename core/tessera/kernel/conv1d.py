"""1-D convolutions as 2-D ones of height 1.

Speech models (wav2vec2's feature encoder, Whisper's stem) run 1-D convolutions over long
sequences: ``Conv`` on ``(N, C, W)`` data with a ``(OC, C/G, K)`` weight. A code-generating
backend's tuned convolution path (channel-blocked layouts, register tiles, packed weights)
is written for 2-D data; :func:`conv1d_as_conv2d` rewrites each eligible 1-D convolution so
that it takes that path::

    Conv(x, w, b)  ->  Reshape(Conv(Reshape(x, (N, C, 1, W)), w[:, :, None, :], b),
                               (N, OC, OW))

with kernel ``(1, K)``, strides ``(1, s)``, dilations ``(1, d)`` and pads ``(0, p0, 0, p1)``.
The weight is reshaped at compile time (it must be a constant, as must a bias); the reshapes
of the data change no element's position. The rewritten function computes the same values and
keeps every value the rest of the graph reads.
"""

from __future__ import annotations

import numpy as np

from tessera.ir.graph import Function, Node
from tessera.ops.spatial import spatial_params

__all__ = ["conv1d_as_conv2d", "is_conv1d"]


def is_conv1d(node: Node) -> bool:
    """A one-output float ``Conv`` on 3-D (NCW) data with a constant weight and a constant or
    absent bias."""
    if node.op != "Conv" or len(node.outputs) != 1 or len(node.inputs) < 2:
        return False
    x, w = node.inputs[0], node.inputs[1]
    b = node.inputs[2] if len(node.inputs) > 2 else None
    return (x is not None and w is not None and x.type.ndim == 3 and x.type.dtype.is_float
            and w.data is not None and (b is None or b.data is not None))


def conv1d_as_conv2d(func: Function) -> Function:
    """A copy of ``func`` in which every 1-D convolution :func:`is_conv1d` accepts is a 2-D
    convolution of height 1 between two reshapes (module doc); ``func`` is not changed."""
    fn = func.copy()
    old = fn.nodes
    fn.nodes = []
    for node in old:
        if not is_conv1d(node):
            fn.nodes.append(node)
            continue
        x, w = node.inputs[0], node.inputs[1]
        b = node.inputs[2] if len(node.inputs) > 2 else None
        assert x is not None and w is not None and w.data is not None
        a = node.attrs
        kernel, strides, pads, dilations = spatial_params(
            1, a.get("kernel_shape") or [w.type.shape[2]], a.get("strides"), a.get("pads"),
            a.get("dilations"), f"Conv {node.name!r}")
        n, c, width = x.type.shape
        y = node.outputs[0]
        rows = fn.op("Reshape", x, shape=[n, c, 1, width], name=f"{node.name}_as2d")
        weight = fn.constant(np.asarray(w.data)[:, :, None, :], f"{w.name}_2d")
        inputs = [rows, weight] + ([b] if b is not None else [])
        attrs = {"kernel_shape": [1, kernel[0]], "strides": [1, strides[0]],
                 "dilations": [1, dilations[0]], "pads": [0, pads[0], 0, pads[1]],
                 "group": int(a.get("group", 1) or 1)}
        conv = fn.op("Conv", *inputs, name=node.name, **attrs)
        back = Node("Reshape", fn.fresh_node_name(f"{node.name}_as1d"), [conv], [y],
                    {"shape": list(y.type.shape), "allowzero": 0})
        fn.append(back)
    return fn
