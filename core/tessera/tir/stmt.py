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
    reports (``"flops"``, ``"schedule"``).

    ``size_vars`` are the function's run-time extents: integer (``int64``) variables that
    buffer shapes, loop extents and indices may use, bound by the caller at every call (a
    sequence length, a batch size). Every size variable is non-negative; ``size_bounds`` may
    narrow one to ``(low, high)`` (either None for no bound), for instance the upper bound the
    runtime plans memory for. A function with no size variables is static, as before. Without
    ``size_vars`` given, they are the variables of the parameters' shapes in order of first
    appearance (parameter by parameter, dimension by dimension).

    Calling convention of code generators: the caller passes the buffers' data pointers in
    ``params`` order, then the workspace pointer (null when the function needs none), then,
    when ``size_vars`` is not empty, a pointer to ``len(size_vars)`` ``int64`` values in
    ``size_vars`` order."""

    def __init__(self, name: str, params: Sequence[Buffer], body: Stmt,
                 attrs: dict[str, Any] | None = None,
                 size_vars: Sequence[Var] | None = None,
                 size_bounds: dict[Var, tuple[int | None, int | None]] | None = None) -> None:
        self.name = name
        self.params = list(params)
        self.body = body
        self.attrs = dict(attrs or {})
        self.size_vars = list(size_vars) if size_vars is not None else shape_vars(self.params)
        self.size_bounds = dict(size_bounds or {})
        for v in self.size_bounds:
            if v not in self.size_vars:
                raise ValueError(f"PrimFunc {name}: size_bounds names {v.name}, which is not "
                                 f"one of its size_vars")

    @property
    def is_symbolic(self) -> bool:
        """Whether the function takes run-time extents."""
        return bool(self.size_vars)

    def with_body(self, body: Stmt) -> PrimFunc:
        return PrimFunc(self.name, self.params, body, self.attrs, self.size_vars,
                        self.size_bounds)

    def var_bounds(self) -> dict[Var, tuple[int | None, int | None]]:
        """Each size variable's range: ``size_bounds`` where given, else ``(0, None)``."""
        out: dict[Var, tuple[int | None, int | None]] = {}
        for v in self.size_vars:
            lo, hi = self.size_bounds.get(v, (0, None))
            out[v] = (max(0, lo) if lo is not None else 0, hi)
        return out

    def __repr__(self) -> str:
        return printer.func_to_str(self)


def shape_vars(buffers: Sequence[Buffer]) -> list[Var]:
    """The variables of the buffers' shapes, in order of first appearance."""
    found: list[Var] = []
    seen: set[int] = set()

    def visit(node: Any) -> None:
        if isinstance(node, Var):
            if id(node) not in seen and node.dtype != "handle":
                seen.add(id(node))
                found.append(node)
            return
        if isinstance(node, (list, tuple)):
            for item in node:
                visit(item)
            return
        if isinstance(node, PrimExpr):  # a shape holds index arithmetic: walk its operands
            for cls in type(node).__mro__:
                for slot in getattr(cls, "__slots__", ()):
                    if slot not in ("dtype", "lanes", "name"):
                        visit(getattr(node, slot, None))

    for b in buffers:
        visit(b.shape)
    return found
