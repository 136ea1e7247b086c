"""Grouped 1x1 convolutions as batched matrix products.

A grouped pointwise convolution (ShuffleNet's, ResNeXt's) with ``G`` groups is ``G``
independent matrix products: ``y[n, g] = W[g] @ x[n, g]`` with ``W[g]`` of shape
``(OC/G, IC/G)`` and ``x[n, g]`` of shape ``(IC/G, H*W)``. When the channels per group are not a
multiple of a CPU's vector width, a channel-blocked convolution can only use narrow blocks (34
channels per group: blocks of 2); as a product it vectorizes over the ``H*W`` pixels instead.
:func:`grouped_pointwise_to_matmul` rewrites the convolutions a backend selects::

    Conv(x, w, b)  ->  Reshape(Add(MatMul(W, Reshape(x, (N, G, IC/G, H*W))), B), (N, OC, H, W))

with the constants ``W = w.reshape(G, OC/G, IC/G)`` and ``B = b.reshape(G, OC/G, 1)``. The
backend's ``select`` also says how many pixel columns to compute: ``H*W`` or more, in which case
the pixels are zero-padded before the product and the extra columns sliced off after it (a
product over 196 pixels vectorizes 16 wide over 208). The rewritten function computes the same
values and keeps every value the rest of the graph reads.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from tessera.ir.graph import Function, Node
from tessera.kernel.conv_match import constant_weight_conv
from tessera.ops.spatial import spatial_params

#: ``select(conv_node) -> columns``: rewrite this (eligible) convolution computing that many
#: pixel columns (at least ``H*W``), or ``None`` to keep it.
SelectFn = Callable[[Node], "int | None"]


def is_grouped_pointwise(node: Node) -> bool:
    """A float 2-D ``Conv`` with ``group > 1``, more than one input channel per group, a
    constant 1x1 weight (constant or no bias), unit strides and no padding."""
    operands = constant_weight_conv(node)
    if operands is None:
        return False
    w = operands.w
    group = int(node.attrs.get("group", 1) or 1)
    if group <= 1 or w.type.shape[1] <= 1 or tuple(w.type.shape[2:]) != (1, 1):
        return False
    a = node.attrs
    _, strides, pads, _ = spatial_params(2, a.get("kernel_shape"), a.get("strides"),
                                         a.get("pads"), a.get("dilations"), "Conv")
    return all(s == 1 for s in strides) and not any(pads)


def grouped_pointwise_to_matmul(func: Function, select: SelectFn) -> Function:
    """A copy of ``func`` in which every grouped pointwise convolution that ``select`` accepts
    is a batched matrix product (see the module doc); ``func`` itself is not changed."""
    fn = func.copy()
    old = fn.nodes
    fn.nodes = []
    for node in old:
        cols = select(node) if is_grouped_pointwise(node) else None
        if cols is None or cols < math.prod(node.outputs[0].type.shape[2:]):
            fn.nodes.append(node)
            continue
        operands = constant_weight_conv(node)
        assert operands is not None and operands.w.data is not None
        x, w, b = operands
        n, c, h, wd = x.type.shape
        group = int(node.attrs["group"])
        oc, icg = w.type.shape[:2]
        y = node.outputs[0]
        weight = fn.constant(np.asarray(w.data).reshape(group, oc // group, icg),
                             f"{w.name}_groups")
        rows = fn.op("Reshape", x, shape=[n, group, icg, h * wd], name=f"{node.name}_in")
        extra = cols - h * wd
        if extra:
            rows = fn.op("Pad", rows, pads=[0, 0, 0, 0, 0, 0, 0, extra],
                         name=f"{node.name}_pad")
        out = fn.op("MatMul", weight, rows, name=node.name)
        if b is not None and b.data is not None:
            bias = fn.constant(np.asarray(b.data).reshape(group, oc // group, 1),
                               f"{b.name}_groups")
            out = fn.op("Add", out, bias, name=f"{node.name}_bias")
        if extra:
            out = fn.op("Slice", out, starts=[0], ends=[h * wd], axes=[3],
                        name=f"{node.name}_crop")
        back = Node("Reshape", fn.fresh_node_name(f"{node.name}_out"), [out],
                    [y], {"shape": list(y.type.shape), "allowzero": 0})
        fn.append(back)
    return fn


__all__ = ["SelectFn", "grouped_pointwise_to_matmul", "is_grouped_pointwise"]
