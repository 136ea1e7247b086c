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

Run-time sizes ("compile once, serve any size"): a dimension that is a size expression (a
symbolic graph type) is never padded. Its rows are left to the kernel: the CPU's matrix-product
schedule keeps the register tile fixed and computes the last, partial tile with a copy of the
micro-kernel made for exactly that many rows (a switch on ``M % mr``), so an unpadded symbolic
``M`` costs no extra work, where padding at run time would add the padded rows' products (up to
``mr - 1`` rows: +71% at 7 rows of a 12-row tile) and two copies (the Pad of ``a`` and the
Slice of the result). Static columns of such a product may still be padded (a constant ``b``
padded at compile time); the slice then crops the columns only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.ir.graph import Function, Node, Value

__all__ = ["SelectFn", "matmul_sizes", "pad_matmul"]

#: ``select(matmul_node) -> (rows, columns)``: compute the product over that many rows and
#: columns (at least its own ``M`` and ``N``), or None to keep it. Where ``M`` or ``N`` is a
#: run-time size, its entry is ignored (that dimension is not padded).
SelectFn = Callable[[Node], "tuple[int, int] | None"]


def matmul_sizes(node: Node) -> tuple[Any, Any, Any] | None:
    """``(M, N, K)`` of a float ``MatMul`` of two operands of rank 2 or more, else None; each
    an ``int``, or a size expression where the graph's type is symbolic."""
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
        # a run-time size is never padded (module doc)
        extra_rows = max(choice[0], m) - m if isinstance(m, int) else 0
        extra_cols = max(choice[1], n) - n if isinstance(n, int) else 0
        if extra_rows == 0 and extra_cols == 0:
            fn.nodes.append(node)
            continue
        a, b = node.inputs
        assert a is not None and b is not None
        a = _pad_axis(fn, a, a.type.ndim - 2, extra_rows, f"{node.name}_pad_rows", made)
        b = _pad_axis(fn, b, b.type.ndim - 1, extra_cols, f"{node.name}_pad_cols", made)
        out = fn.op("MatMul", a, b, name=node.name)
        y = node.outputs[0]
        rank = y.type.ndim
        if isinstance(m, int):
            attrs = {"starts": [0, 0], "ends": [m, n], "axes": [rank - 2, rank - 1],
                     "steps": [1, 1]}
        else:  # the columns only (the rows, a run-time size, were not padded)
            attrs = {"starts": [0], "ends": [n], "axes": [rank - 1], "steps": [1]}
        back = Node("Slice", fn.fresh_node_name(f"{node.name}_crop"), [out], [y], attrs)
        fn.append(back)
    return fn
