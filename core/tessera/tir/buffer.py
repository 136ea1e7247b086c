"""Buffers: named, typed, multi-dimensional views of memory that loads and stores address."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tessera.tir.expr import INDEX_DTYPE, BufferLoad, IntImm, PrimExpr, Var, convert


class Buffer:
    """A region of memory: ``shape`` (ints or expressions), element ``dtype``, optional
    ``strides`` (row-major when None) and a storage ``scope`` (``"global"`` for function
    parameters and heap memory, ``"local"`` for per-thread scratch that lives in registers or
    on the stack, ``"shared"`` for GPU shared memory). ``data`` is the pointer variable."""

    def __init__(self, name: str, shape: Sequence[Any], dtype: str,
                 strides: Sequence[Any] | None = None, scope: str = "global",
                 elem_offset: Any = 0) -> None:
        self.name = name
        self.shape = tuple(convert(s) for s in shape)
        self.dtype = dtype
        self.strides = tuple(convert(s) for s in strides) if strides is not None else None
        self.scope = scope
        self.elem_offset = convert(elem_offset)
        self.data = Var(name, "handle")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def const_shape(self) -> tuple[int, ...]:
        """The shape as ints (an error when a dimension is not constant)."""
        out = []
        for s in self.shape:
            if not isinstance(s, IntImm):
                raise ValueError(f"buffer {self.name} has a non-constant dimension {s}")
            out.append(s.value)
        return tuple(out)

    def size(self) -> int:
        return math.prod(self.const_shape())

    def row_major_strides(self) -> tuple[PrimExpr, ...]:
        strides: list[PrimExpr] = []
        acc: PrimExpr = IntImm(1, INDEX_DTYPE)
        for s in reversed(self.shape):
            strides.append(acc)
            acc = acc * s
        return tuple(reversed(strides))

    def vload(self, indices: Sequence[Any]) -> BufferLoad:
        return BufferLoad(self, [convert(i) for i in indices])

    def __getitem__(self, indices: Any) -> BufferLoad:
        if not isinstance(indices, tuple):
            indices = (indices,)
        return self.vload(indices)

    def __repr__(self) -> str:
        dims = ", ".join(str(s) for s in self.shape)
        return f"Buffer({self.name}: {self.dtype}[{dims}], {self.scope})"


def decl_buffer(shape: Sequence[Any], dtype: str = "float32", name: str = "buf",
                scope: str = "global") -> Buffer:
    """A new buffer (TVM's ``tvm.tir.decl_buffer``)."""
    return Buffer(name, shape, dtype, scope=scope)
