"""Small integer tensors in the IR as ``leaf + constant`` per element.

A converter sees the IR built so far (``ctx.graph``; a value's ``producer``). For a small
integer tensor (a Slice's starts or ends) :func:`int_offsets` walks the producers and writes
each element as an :class:`Offset`: a constant (``leaf`` None), or an opaque run-time scalar
(one element of a graph input or of a node output it cannot see through) plus a constant.
Two elements with the same leaf differ by a constant known at compile time, whatever the
run-time values: ``Slice(x, i, i + 1)`` has static length 1 even though ``i`` is a loop counter.

Seen through: constants, ``Identity``/``Unsqueeze``/``Squeeze``/``Reshape``/``Flatten`` (the
elements in order), integer ``Cast``\\ s that keep every value, ``Add`` and ``Sub`` of a
constant (broadcast), ``Concat`` of vectors, and ``Gather``/``Slice`` of a vector at constant
positions. Anything else is a leaf of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tessera.ir.graph import Value
from tessera.ops.tensor import slice_tuple

#: Elements a tensor may have to be analysed (starts/ends have one per sliced axis).
MAX_ELEMENTS = 64
#: How many producers deep the walk goes before it calls a value a leaf.
MAX_DEPTH = 48

_SAME_ELEMENTS = {"Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten"}


@dataclass(frozen=True)
class Offset:
    """One element: ``leaf`` (None for a constant) plus ``offset``.

    ``leaf`` is ``(id of the value, flat index)`` of the run-time scalar the element adds
    ``offset`` to; the value lives in the graph being converted, which keeps the id unique.
    """

    leaf: tuple[int, int] | None
    offset: int

    def plus(self, c: int) -> Offset:
        return Offset(self.leaf, self.offset + c)


def _leaves(value: Value) -> list[Offset]:
    return [Offset((id(value), k), 0) for k in range(int(np.prod(value.type.shape)))]


def _broadcast_index(shape: tuple[int, ...], out: tuple[int, ...]) -> np.ndarray:
    """For each flat index of the output, the flat index of the broadcast operand read."""
    return np.broadcast_to(np.arange(int(np.prod(shape))).reshape(shape), out).reshape(-1)


def int_offsets(value: Value, depth: int = 0) -> list[Offset] | None:
    """The elements of a small integer tensor (flat order) as leaf-plus-constant, or None when
    the value is not a small integer tensor."""
    t = value.type
    if not t.dtype.is_int or int(np.prod(t.shape)) > MAX_ELEMENTS:
        return None
    if value.is_constant:
        if value.is_held:
            return _leaves(value)
        data = np.asarray(value.data)
        return [Offset(None, int(v)) for v in data.reshape(-1)]
    node = value.producer
    if node is None or depth >= MAX_DEPTH or len(node.outputs) != 1:
        return _leaves(value)
    ins = node.inputs
    found = _through(node.op, node.attrs, ins, value, depth + 1)
    return _leaves(value) if found is None else found


def _through(op: str, attrs: dict, ins: list[Value | None], out: Value,
             depth: int) -> list[Offset] | None:
    """The output's elements seen through one node, or None where the node is a leaf."""
    if any(v is None for v in ins):
        return None
    operands = [v for v in ins if v is not None]
    if op in _SAME_ELEMENTS or (op == "Cast" and _keeps_values(operands[0], out)):
        return int_offsets(operands[0], depth)
    if op in ("Add", "Sub") and len(operands) == 2:
        a, b = (int_offsets(v, depth) for v in operands)
        if a is None or b is None:
            return None
        ia = _broadcast_index(operands[0].type.shape, out.type.shape)
        ib = _broadcast_index(operands[1].type.shape, out.type.shape)
        found = []
        for x, y in zip((a[i] for i in ia), (b[i] for i in ib)):
            if y.leaf is None:
                found.append(x.plus(y.offset if op == "Add" else -y.offset))
            elif x.leaf is None and op == "Add":
                found.append(y.plus(x.offset))
            else:
                return None
        return found
    if op == "Concat" and out.type.ndim == 1:
        parts = [int_offsets(v, depth) for v in operands]
        if any(p is None for p in parts):
            return None
        return [e for p in parts for e in p or []]
    if op in ("Gather", "Slice") and operands[0].type.ndim == 1:
        elements = int_offsets(operands[0], depth)
        if elements is None:
            return None
        positions = np.arange(len(elements))
        try:
            if op == "Slice":
                picked = _apply_slice(positions, attrs)
            elif operands[1].is_constant and not operands[1].is_held:
                picked = np.take(positions, np.asarray(operands[1].data).astype(np.int64))
            else:
                return None
        except (IndexError, ValueError):
            return None
        return [elements[int(i)] for i in np.asarray(picked).reshape(-1)]
    return None


def _apply_slice(positions: np.ndarray, attrs: dict) -> np.ndarray:
    return positions[slice_tuple(positions.shape, list(attrs["starts"]), list(attrs["ends"]),
                                 attrs.get("axes"), attrs.get("steps"))]


def _keeps_values(src: Value, dst: Value) -> bool:
    """Whether an integer Cast from ``src`` to ``dst`` keeps every value."""
    a, b = src.type.dtype, dst.type.dtype
    return a.is_int and b.is_int and bool(np.can_cast(a.numpy, b.numpy, "safe"))


__all__ = ["MAX_DEPTH", "MAX_ELEMENTS", "Offset", "int_offsets"]
