"""Statements of the loop-level IR and the function that holds them."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from tessera.tir import printer
from tessera.tir.expr import PrimExpr, Var, convert

if TYPE_CHECKING:
    from tessera.tir.buffer import Buffer


class Stmt:
    """Base class of every TIR statement."""

    def __repr__(self) -> str:
        return printer.stmt_to_str(self)


class ForKind(StrEnum):
    """How a loop runs: in order, split over threads, as one vector operation, fully unrolled,
    or bound to a GPU thread axis (``thread_tag`` names it: ``blockIdx.x``, ``threadIdx.y``)."""

    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD_BINDING = "thread_binding"


class For(Stmt):
    """``for loop_var in range(min, min + extent): body``.

    ``annotations`` carries schedule hints, e.g. ``{"parallel_grain": 4}``."""

    def __init__(self, loop_var: Var, min: Any, extent: Any, kind: ForKind, body: Stmt,
                 thread_tag: str = "", annotations: dict[str, Any] | None = None) -> None:
        self.loop_var = loop_var
        self.min = convert(min)
        self.extent = convert(extent)
        self.kind = ForKind(kind)
        self.body = body
        self.thread_tag = thread_tag
        self.annotations = dict(annotations or {})


class BufferStore(Stmt):
    """``buffer[indices] = value`` (a vector store when the last index is a Ramp)."""

    def __init__(self, buffer: Buffer, value: PrimExpr, indices: Sequence[Any]) -> None:
        self.buffer = buffer
        self.value = value
        self.indices = tuple(convert(i) for i in indices)


class SeqStmt(Stmt):
    """Statements run one after another."""

    def __init__(self, seq: Sequence[Stmt]) -> None:
        flat: list[Stmt] = []
        for s in seq:
            if isinstance(s, SeqStmt):
                flat.extend(s.seq)
            elif s is not None:
                flat.append(s)
        self.seq = flat


class IfThenElse(Stmt):
    def __init__(self, condition: PrimExpr, then_case: Stmt,
                 else_case: Stmt | None = None) -> None:
        self.condition = condition
        self.then_case = then_case
        self.else_case = else_case


class LetStmt(Stmt):
    """``var = value`` for the statements in ``body``."""

    def __init__(self, var: Var, value: PrimExpr, body: Stmt) -> None:
        self.var = var
        self.value = value
        self.body = body


class Allocate(Stmt):
    """Memory for ``buffer`` (in its scope) that lives for ``body``."""

    def __init__(self, buffer: Buffer, body: Stmt) -> None:
        self.buffer = buffer
        self.body = body


class Evaluate(Stmt):
    """An expression evaluated for its effect (an extern call)."""

    def __init__(self, value: PrimExpr) -> None:
        self.value = value


class Barrier(Stmt):
    """Every thread of a GPU thread block waits here until all have arrived, and the writes
    each made to ``scope`` memory before it are visible to all after it (CUDA's
    ``__syncthreads()``). Every thread of the block must reach it: the GPU verifier rejects a
    barrier under a condition that depends on the thread."""

    def __init__(self, scope: str = "shared") -> None:
        if scope not in ("shared", "global"):
            raise ValueError(f"barrier scope {scope!r}: expected 'shared' or 'global'")
        self.scope = scope


def seq(*stmts: Stmt | None) -> Stmt:
    """A SeqStmt of the non-None statements, or the only one."""
    items = [s for s in stmts if s is not None]
    if len(items) == 1:
        return items[0]
    return SeqStmt(items)


class PrimFunc:
    """A compiled unit: ``params`` are the buffers the caller passes (inputs then outputs, in
    that order), ``body`` the loop nest. ``attrs`` holds facts for the code generator and for
    reports (``"flops"``, ``"schedule"``)."""

    def __init__(self, name: str, params: Sequence[Buffer], body: Stmt,
                 attrs: dict[str, Any] | None = None) -> None:
        self.name = name
        self.params = list(params)
        self.body = body
        self.attrs = dict(attrs or {})

    def with_body(self, body: Stmt) -> PrimFunc:
        return PrimFunc(self.name, self.params, body, self.attrs)

    def __repr__(self) -> str:
        return printer.func_to_str(self)
