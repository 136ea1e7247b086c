"""Insert barriers where the threads of a block share memory (TVM's ``ThreadSync``).

Inside the ``threadIdx``-bound loops of a kernel, code runs once per thread, and a ``shared``
buffer is seen by every thread of the block. A thread that reads what another wrote, or
overwrites what another may still be reading, needs a :class:`~tessera.tir.stmt.Barrier`
between the two. This pass places them, conservatively:

* in a sequence of statements, before the first statement that reads a buffer written since
  the last barrier (read after write) or writes one read since then (write after read);
* at the end of the body of a loop that both reads and writes a buffer (the next iteration's
  writes must wait for this one's reads).

A buffer a thread only ever touches at its own indices gets barriers it does not need; they
cost time, never correctness. Barriers are never placed under a condition that depends on the
thread (the GPU verifier rejects those); schedules keep such conditions inside the phases.
"""

from __future__ import annotations

from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.functor import IRMutator, post_order_visit

_THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


def _accesses(s: S.Stmt, scope: str) -> tuple[set[int], set[int]]:
    """The ids of ``scope`` buffers ``s`` writes and reads."""
    written: set[int] = set()
    read: set[int] = set()

    def visit(node: object) -> None:
        if isinstance(node, S.BufferStore) and node.buffer.scope == scope:
            written.add(id(node.buffer))
        elif isinstance(node, E.BufferLoad) and node.buffer.scope == scope:
            read.add(id(node.buffer))

    post_order_visit(s, visit)
    return written, read


class _ThreadSync(IRMutator):
    def __init__(self, scope: str) -> None:
        self.scope = scope
        self.depth = 0  # threadIdx-bound loops around the current statement

    def visit_For(self, s: S.For) -> S.Stmt:
        bound = s.kind == S.ForKind.THREAD_BINDING and s.thread_tag in _THREAD_TAGS
        self.depth += bound
        try:
            body = self.visit(s.body)
        finally:
            self.depth -= bound
        if self.depth and not bound:
            written, read = _accesses(body, self.scope)
            if written & read and not _ends_with_barrier(body):
                body = S.seq(body, S.Barrier(self.scope))
        if body is s.body:
            return s
        return S.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, s.annotations)

    def visit_SeqStmt(self, s: S.SeqStmt) -> S.Stmt:
        items = [self.visit(x) for x in s.seq]
        if not self.depth:
            return s if all(a is b for a, b in zip(items, s.seq)) else S.SeqStmt(items)
        out: list[S.Stmt] = []
        written: set[int] = set()
        read: set[int] = set()
        for item in items:
            if isinstance(item, S.Barrier):
                written.clear()
                read.clear()
                out.append(item)
                continue
            w, r = _accesses(item, self.scope)
            if (r & written) or (w & read):
                out.append(S.Barrier(self.scope))
                written.clear()
                read.clear()
            written |= w
            read |= r
            out.append(item)
        if len(out) == len(s.seq) and all(a is b for a, b in zip(out, s.seq)):
            return s
        return S.SeqStmt(out)


def _ends_with_barrier(s: S.Stmt) -> bool:
    if isinstance(s, S.SeqStmt):
        return bool(s.seq) and isinstance(s.seq[-1], S.Barrier)
    return isinstance(s, S.Barrier)


def thread_sync(func: S.PrimFunc, scope: str = "shared") -> S.PrimFunc:
    """``func`` with barriers for the ``scope`` buffers its threads share (module doc)."""
    body = _ThreadSync(scope).visit(func.body)
    return func if body is func.body else func.with_body(body)
