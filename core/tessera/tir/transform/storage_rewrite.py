"""Place and share temporary memory (TVM's ``StorageRewrite``).

1. **Hoisting.** Every ``Allocate`` with a constant size moves out of the loops around it to the
   top of its *home*: the body of the innermost enclosing ``PARALLEL`` (or thread-bound) loop,
   whose iterations each need private memory, or else the top of the function. The code
   generator can then allocate it once (an ``alloca`` in the entry block) instead of once per
   iteration. The same buffer allocated several times (copies made by unrolling) is allocated
   once. ``"shared"`` buffers and buffers with a symbolic size stay where they are.
2. **Reuse.** Within one home, 1-D buffers of the same dtype and scope whose lifetimes do not
   overlap share one allocation (as large as the largest of them). A lifetime is the span of
   the home's statements, in program order, from the first to the last access, where an
   access inside a loop counts as the whole loop (its iterations repeat).
"""

from __future__ import annotations

from typing import Any

from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer
from tessera.tir.functor import IRMutator, post_order_visit

__all__ = ["storage_rewrite"]

_HOME_KINDS = (S.ForKind.PARALLEL, S.ForKind.THREAD_BINDING)


def _const_size(b: Buffer) -> int | None:
    if not all(isinstance(d, E.IntImm) for d in b.shape):
        return None
    if b.strides is not None:
        return None
    return b.size()


class _Hoister(IRMutator):
    """Removes hoistable Allocates and wraps each home with them (after planning reuse)."""

    def __init__(self, reuse: bool) -> None:
        self.reuse = reuse
        self.homes: list[list[Buffer]] = []

    def hoistable(self, b: Buffer) -> bool:
        return b.scope != "shared" and _const_size(b) is not None

    def visit_Allocate(self, s: S.Allocate) -> S.Stmt:
        body = self.visit(s.body)
        if self.hoistable(s.buffer):
            home = self.homes[-1]
            if not any(b is s.buffer for b in home):
                home.append(s.buffer)
            return body
        return s if body is s.body else S.Allocate(s.buffer, body)

    def visit_For(self, s: S.For) -> S.Stmt:
        if s.kind not in _HOME_KINDS:
            return self.generic_visit(s)
        body = self.home(s.body)
        if body is s.body:
            return s
        return S.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, s.annotations)

    def home(self, body: S.Stmt) -> S.Stmt:
        self.homes.append([])
        try:
            new_body = self.visit(body)
            buffers = self.homes[-1]
        finally:
            self.homes.pop()
        if not buffers:
            return new_body
        if self.reuse:
            new_body, buffers = _plan_reuse(body, new_body, buffers)
        for b in reversed(buffers):
            new_body = S.Allocate(b, new_body)
        return new_body


# ---- lifetimes ------------------------------------------------------------------------------


class _Lifetimes:
    """Assigns program-order positions to the statements of a home and records, per buffer,
    the first and last position that touches it. An access inside a loop that began after the
    buffer's ``Allocate`` counts as the whole loop (its iterations repeat); loops around the
    ``Allocate`` do not extend it, since each of their iterations has a fresh buffer."""

    def __init__(self, buffers: list[Buffer]) -> None:
        self.ids = {id(b) for b in buffers}
        self.span: dict[int, list[int]] = {}
        self.pos = 0
        self.loops: list[tuple[int, set[int]]] = []  # (start position, buffers to extend)
        self.birth: dict[int, int] = {}  # buffer -> loop depth of its Allocate

    def touch(self, b: Buffer) -> None:
        self.touch_key(id(b))

    def touch_key(self, key: int) -> None:
        if key not in self.ids:
            return
        depth = self.birth.get(key, 0)
        if len(self.loops) > depth:
            self.loops[depth][1].add(key)
        else:
            self.extend(key, self.pos, self.pos)

    def extend(self, key: int, lo: int, hi: int) -> None:
        span = self.span.get(key)
        if span is None:
            self.span[key] = [lo, hi]
        else:
            span[0], span[1] = min(span[0], lo), max(span[1], hi)

    def expr(self, e: Any) -> None:
        post_order_visit(e, lambda n: self.touch(n.buffer) if isinstance(n, E.BufferLoad)
                         else None)

    def step(self) -> None:
        self.pos += 1

    def stmt(self, s: S.Stmt | None) -> None:
        if s is None:
            return
        if isinstance(s, S.SeqStmt):
            for x in s.seq:
                self.stmt(x)
        elif isinstance(s, S.For):
            self.expr(s.min)
            self.expr(s.extent)
            self.loops.append((self.pos, set()))
            self.step()
            self.stmt(s.body)
            start, touched = self.loops.pop()
            for key in touched:
                self.extend(key, start, self.pos)
            self.step()
        elif isinstance(s, S.BufferStore):
            self.expr(s.value)
            for i in s.indices:
                self.expr(i)
            self.touch(s.buffer)
            self.step()
        elif isinstance(s, S.IfThenElse):
            self.expr(s.condition)
            self.step()
            self.stmt(s.then_case)
            self.stmt(s.else_case)
            self.step()
        elif isinstance(s, S.LetStmt):
            self.expr(s.value)
            self.step()
            self.stmt(s.body)
        elif isinstance(s, S.Allocate):
            key = id(s.buffer)
            saved = self.birth.get(key)
            self.birth[key] = len(self.loops)
            self.stmt(s.body)
            if saved is None:
                self.birth.pop(key, None)
            else:
                self.birth[key] = saved
        elif isinstance(s, S.Evaluate):
            self.expr(s.value)
            self.step()
        else:  # an unknown statement: be conservative, it touches everything
            for key in self.ids:
                self.touch_key(key)
            self.step()


class _Remap(IRMutator):
    def __init__(self, mapping: dict[int, Buffer]) -> None:
        self.mapping = mapping

    def visit_BufferLoad(self, e: E.BufferLoad) -> E.PrimExpr:
        new = self.generic_visit(e)
        b = self.mapping.get(id(e.buffer))
        return E.BufferLoad(b, new.indices) if b is not None else new

    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        new = self.generic_visit(s)
        b = self.mapping.get(id(s.buffer))
        return S.BufferStore(b, new.value, new.indices) if b is not None else new


def _plan_reuse(original: S.Stmt, body: S.Stmt,
                buffers: list[Buffer]) -> tuple[S.Stmt, list[Buffer]]:
    """Merge buffers with disjoint lifetimes (measured on ``original``, the home's body with
    its Allocates in place); returns ``body`` rewritten and the allocations to make."""
    lt = _Lifetimes(buffers)
    lt.stmt(original)
    unused = [b for b in buffers if id(b) not in lt.span]
    live = sorted((b for b in buffers if id(b) in lt.span), key=lambda b: lt.span[id(b)][0])
    # Each group: (dtype, scope, members, end of the last member's lifetime, size).
    groups: list[dict[str, Any]] = []
    for b in live:
        start, end = lt.span[id(b)]
        size = _const_size(b)
        choice = None
        if b.ndim == 1:
            free = [g for g in groups if g["dtype"] == b.dtype and g["scope"] == b.scope
                    and g["end"] < start and g["ndim1"]]
            fitting = [g for g in free if g["size"] >= size]
            if fitting:
                choice = min(fitting, key=lambda g: g["size"])
            elif free:
                choice = max(free, key=lambda g: g["size"])
        if choice is None:
            groups.append({"dtype": b.dtype, "scope": b.scope, "members": [b], "end": end,
                           "size": size, "ndim1": b.ndim == 1})
        else:
            choice["members"].append(b)
            choice["end"] = end
            choice["size"] = max(choice["size"], size)
    mapping: dict[int, Buffer] = {}
    allocs: list[Buffer] = []
    for g in groups:
        members = g["members"]
        first = members[0]
        if len(members) == 1:
            allocs.append(first)
            continue
        merged = Buffer(first.name, [g["size"]], first.dtype, scope=first.scope)
        allocs.append(merged)
        for m in members:
            mapping[id(m)] = merged
    # Buffers never accessed are dropped.
    del unused
    if mapping:
        body = _Remap(mapping).visit(body)
    return body, allocs


def storage_rewrite(func: S.PrimFunc, reuse: bool = True) -> S.PrimFunc:
    """``func`` with constant-size allocations hoisted to their home (function top or
    parallel loop body) and, with ``reuse``, memory shared between disjoint lifetimes."""
    hoister = _Hoister(reuse)
    return func.with_body(hoister.home(func.body))
