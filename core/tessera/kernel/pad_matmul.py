"""Matrix products padded to the register tile.

A CPU's matrix-product schedule keeps an ``mr x nr`` tile of the output in registers, ``nr``
columns as whole vectors; it needs the rows to be a multiple of ``mr`` and the columns of the
vector width. Sizes that are not (a ViT's 197 tokens: a prime) leave it one row per tile and
scalar columns, at a tenth of the speed. :func:`pad_matmul` rewrites the products a backend
selects so that the sizes fit::

    MatMul(a, b)  ->  Slice(MatMul(Pad(a, rows), Pad(b, columns)), [..., :M, :N])

A constant ``b`` is padded at compile time (then packed like any other weight); the padding
is zeros, so the extra rows and columns hold zeros and are sliced off; the product of the
original sizes is unchanged. The rewritten function computes the same values and keeps every
value the rest of the graph reads.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tessera.ir.graph import Function, Node, Value

__all__ = ["SelectFn", "matmul_sizes", "pad_matmul"]

#: ``select(matmul_node) -> (rows, columns)``: compute the product over that many rows and
#: columns (at least its own ``M`` and ``N``), or None to keep it.
SelectFn = Callable[[Node], "tuple[int, int] | None"]


def matmul_sizes(node: Node) -> tuple[int, int, int] | None:
    """``(M, N, K)`` of a float ``MatMul`` of two operands of rank 2 or more, else None."""
    if node.op != "MatMul" or len(node.inputs) != 2 or len(node.outputs) != 1:
        return None
    a, b = node.inputs
    if (a is None or b is None or a.type.ndim < 2 or b.type.ndim < 2
            or not a.type.dtype.is_float or a.type.dtype != b.type.dtype):
        return None
    return a.type.shape[-2], b.type.shape[-1], a.type.shape[-1]


def _pad_axis(fn: Function, v: Value, axis: int, extra: int, name: str,
              made: dict[tuple[int, int, int], Value]) -> Value:
    """``v`` with ``extra`` zeros appended along ``axis`` (a new constant for a constant);
    ``made`` keeps the padded values already made, so that products reading the same value
    (an attention's query, key and value projections) share one pad."""
    if extra <= 0:
        return v
    key = (id(v), axis, extra)
    if key in made:
        return made[key]
    made[key] = _new_pad(fn, v, axis, extra, name)
    return made[key]


def _new_pad(fn: Function, v: Value, axis: int, extra: int, name: str) -> Value:
    rank = v.type.ndim
    if v.data is not None:
        widths = [(0, 0)] * rank
        widths[axis] = (0, extra)
        return fn.constant(np.pad(np.asarray(v.data), widths), f"{v.name}_padded")
    pads = [0] * (2 * rank)
    pads[rank + axis] = extra
    return fn.op("Pad", v, pads=pads, name=name)


def pad_matmul(func: Function, select: SelectFn) -> Function:
    """A copy of ``func`` in which every product ``select`` pads computes over the padded
    sizes between pads and a slice (module doc); ``func`` itself is not changed."""
    fn = func.copy()
    old = fn.nodes
    fn.nodes = []
    made: dict[tuple[int, int, int], Value] = {}
    for node in old:
        sizes = matmul_sizes(node)
        choice = select(node) if sizes is not None else None
        if sizes is None or choice is None:
            fn.nodes.append(node)
            continue
        m, n, _ = sizes
        rows, cols = max(choice[0], m), max(choice[1], n)
        if (rows, cols) == (m, n):
            fn.nodes.append(node)
            continue
        a, b = node.inputs
        assert a is not None and b is not None
        a = _pad_axis(fn, a, a.type.ndim - 2, rows - m, f"{node.name}_pad_rows", made)
        b = _pad_axis(fn, b, b.type.ndim - 1, cols - n, f"{node.name}_pad_cols", made)
        out = fn.op("MatMul", a, b, name=node.name)
        y = node.outputs[0]
        rank = y.type.ndim
        back = Node("Slice", fn.fresh_node_name(f"{node.name}_crop"), [out], [y],
                    {"starts": [0, 0], "ends": [m, n], "axes": [rank - 2, rank - 1],
                     "steps": [1, 1]})
        fn.append(back)
    return fn
