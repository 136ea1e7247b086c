"""Recognising convolutions that graph passes may rewrite.

The layout pass and the grouped-pointwise rewrite both need a float 2-D ``Conv`` whose weight
(and bias, if any) are constants, so that they can re-lay the weights out at compile time:
:func:`constant_weight_conv` returns its operands, or None for any other node.
"""

from __future__ import annotations

from typing import NamedTuple

from tessera.ir.graph import Node, Value


class ConvOperands(NamedTuple):
    """The data, the constant weight and the constant bias (or None) of a conv node."""

    x: Value
    w: Value
    b: Value | None


def constant_weight_conv(node: Node) -> ConvOperands | None:
    """The operands of ``node`` when it is a one-output float ``Conv`` on 4-D (NCHW) data with
    a constant weight and a constant or absent bias; None otherwise."""
    if node.op != "Conv" or len(node.outputs) != 1 or len(node.inputs) < 2:
        return None
    x, w = node.inputs[0], node.inputs[1]
    b = node.inputs[2] if len(node.inputs) > 2 else None
    if (x is None or w is None or x.type.ndim != 4 or not x.type.dtype.is_float
            or w.data is None or (b is not None and b.data is None)):
        return None
    return ConvOperands(x, w, b)


__all__ = ["ConvOperands", "constant_weight_conv"]
