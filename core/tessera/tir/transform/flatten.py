"""Flatten multi-dimensional buffers to one dimension (TVM's ``FlattenBuffer``).

Every buffer with more than one dimension (or none, or explicit strides/offset) is replaced by a
1-D buffer of the same name, dtype and scope holding ``prod(shape)`` elements; each access
``B[i0, ..., in]`` becomes ``B[elem_offset + i0*s0 + ... + in*sn]`` with the row-major strides
(or the buffer's own), and the indices are simplified under the enclosing loop ranges so that
they come out as clean affine sums (``((n*C + c)*H + h)*W + w`` -> ``n*CHW + c*HW + h*W + w``).
Parameters keep their order; an arrays' memory layout is unchanged, so callers pass the same
arrays before and after.
"""

from __future__ import annotations

import math

from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer
from tessera.tir.simplify import simplify
from tessera.tir.transform._util import ScopedMutator

__all__ = ["flatten_buffers", "flat_buffer"]


def _needs_flatten(b: Buffer) -> bool:
    offset = b.elem_offset
    return (b.ndim != 1 or b.strides is not None
            or not (isinstance(offset, E.IntImm) and offset.value == 0))


def flat_buffer(b: Buffer) -> Buffer:
    """The 1-D buffer that replaces ``b`` (``b`` itself when it already is one)."""
    if not _needs_flatten(b):
        return b
    if b.strides is not None:
        # The extent of the strided region: 1 + sum((d - 1) * stride).
        size: E.PrimExpr = E.IntImm(1)
        for d, s in zip(b.shape, b.strides):
            size = size + (d - 1) * s
    else:
        size = E.IntImm(1)
        for d in b.shape:
            size = size * d
    size = simplify(size + b.elem_offset)
    if all(isinstance(d, E.IntImm) for d in b.shape) and b.strides is None and isinstance(
            b.elem_offset, E.IntImm):
        size = E.IntImm(math.prod(d.value for d in b.shape) + b.elem_offset.value)
    return Buffer(b.name, [size], b.dtype, scope=b.scope)


class _Flattener(ScopedMutator):
    def __init__(self, func: S.PrimFunc | None = None) -> None:
        super().__init__(func)
        self.map: dict[int, tuple[Buffer, Buffer]] = {}

    def new_buffer(self, b: Buffer) -> Buffer:
        entry = self.map.get(id(b))
        if entry is None:
            entry = (b, flat_buffer(b))
            self.map[id(b)] = entry
        return entry[1]

    def flat_index(self, b: Buffer, indices: tuple[E.PrimExpr, ...]) -> list[E.PrimExpr]:
        if not _needs_flatten(b):
            return list(indices)
        if len(indices) != b.ndim:
            raise ValueError(f"buffer {b.name} has {b.ndim} dimension(s) but is indexed with "
                             f"{len(indices)} index(es)")
        strides = b.strides if b.strides is not None else b.row_major_strides()
        index: E.PrimExpr = b.elem_offset
        for i, s in zip(indices, strides):
            index = index + i * s
        return [self.simplifier().visit(index)]

    def visit_BufferLoad(self, e: E.BufferLoad) -> E.PrimExpr:
        indices = tuple(self.visit(i) for i in e.indices)
        return E.BufferLoad(self.new_buffer(e.buffer), self.flat_index(e.buffer, indices))

    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        value = self.visit(s.value)
        indices = tuple(self.visit(i) for i in s.indices)
        return S.BufferStore(self.new_buffer(s.buffer), value,
                             self.flat_index(s.buffer, indices))

    def visit_Allocate(self, s: S.Allocate) -> S.Stmt:
        return S.Allocate(self.new_buffer(s.buffer), self.visit(s.body))


def flatten_buffers(func: S.PrimFunc) -> S.PrimFunc:
    """``func`` with every buffer (parameters and allocations) one-dimensional."""
    fl = _Flattener(func)
    params = [fl.new_buffer(b) for b in func.params]
    body = fl.visit(func.body)
    return S.PrimFunc(func.name, params, body, func.attrs, func.size_vars, func.size_bounds)


