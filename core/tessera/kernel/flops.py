"""Operation counts of fused groups, for profiles and the tuner's GFLOP/s."""

from __future__ import annotations

import math

from tessera.ir.graph import Node

__all__ = ["group_flops"]


def group_flops(nodes: list[Node]) -> int:
    """Estimated operations of a group: 2 per multiply-add of a convolution or matrix product
    (``Conv``, ``ConvInteger`` weights ``(O, I/g, KH, KW)``, ``QLinearConv``'s at input 3,
    blocked ``ConvNCHWc`` weights ``(O/ob, I/ib, KH, KW, ib, ob)``; ``MatMul``, ``Gemm``,
    ``MatMulPacked`` and the integer products ``MatMulInteger``, ``MatMulIntegerPacked``
    (whose weight words hold two products each), ``QLinearMatMul``: K from the data's last
    axis), one per output element otherwise."""
    total = 0
    for node in nodes:
        out = node.outputs[0].type
        if node.op in ("Conv", "ConvNCHWc", "ConvInteger", "QLinearConv"):
            w = node.inputs[3 if node.op == "QLinearConv" else 1].type.shape
            per_out = math.prod(w[1:5]) if node.op == "ConvNCHWc" else math.prod(w[1:])
            total += 2 * out.size * per_out
        elif node.op in ("MatMul", "Gemm", "MatMulPacked", "MatMulInteger",
                         "MatMulIntegerPacked", "QLinearMatMul"):
            k = node.inputs[0].type.shape[-1]
            if node.op == "Gemm" and node.attrs.get("transA"):
                k = node.inputs[0].type.shape[0]
            total += 2 * out.size * k
        else:
            total += out.size
    return total
