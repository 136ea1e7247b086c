"""Software prefetch of convolution weights that stream from memory.

In the last stages of a CNN the weights of one convolution (megabytes) no longer fit in the
caches, so each parallel task that starts a new output-channel slice first waits on DRAM, then
computes on cached weights for the remaining output rows: memory and arithmetic alternate
instead of overlapping. :func:`prefetch_next_slice` makes each task of a slice prefetch an equal
share of the *next* slice's weights, so the next slice arrives while this one computes. The
prefetches are spread over the task's reduction loop (a few cache lines per iteration) rather
than issued in one burst at its start: a burst of hundreds fills the core's miss queue and
stalls the arithmetic behind it.
"""

from __future__ import annotations

from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer
from tessera.tir.functor import IRMutator, post_order_visit

#: float32 elements per 64-byte cache line.
LINE_ELEMS = 16


def _reads(node: S.Stmt, buf: Buffer) -> bool:
    found = []

    def visit(n: object) -> None:
        if isinstance(n, E.BufferLoad) and n.buffer is buf:
            found.append(n)

    post_order_visit(node, visit)
    return bool(found)


def prefetch_next_slice(func: S.PrimFunc, weight: str, slices: int, slice_elems: int,
                        tasks_per_slice: int) -> S.PrimFunc:
    """Insert the prefetches into the first parallel loop of ``func`` that reads ``weight``.

    That loop's task ``p`` works on weight slice ``(p // tasks_per_slice) % slices`` (elements
    ``[k * slice_elems, (k + 1) * slice_elems)`` of the flattened weight); it prefetches part
    ``p % tasks_per_slice`` of slice ``k + 1``. Returns ``func`` unchanged when no such loop
    exists."""
    params = {b.name: b for b in func.params}
    buf = params.get(weight)
    if buf is None or buf.ndim != 1 or tasks_per_slice < 1:
        return func
    chunk = -(-slice_elems // tasks_per_slice)
    lines = -(-chunk // LINE_ELEMS)
    # the weight's length: a constant, or for a symbolic function an expression of its size
    # variables (the guard below is then evaluated at run time)
    extent = buf.shape[0]
    total: int | E.PrimExpr = extent.value if isinstance(extent, E.IntImm) else extent

    class Insert(IRMutator):
        done = False

        def visit_For(self, node: S.For) -> S.Stmt:
            if self.done or node.kind != S.ForKind.PARALLEL or not _reads(node.body, buf):
                return self.generic_visit(node)
            self.done = True
            p = node.loop_var
            nxt = (p // tasks_per_slice) % slices + 1
            start = nxt * slice_elems + (p % tasks_per_slice) * chunk
            spread = _SpreadInto(buf, start, lines, nxt < slices, total)
            body = spread.visit(node.body)
            if not spread.done:  # no serial loop reads the weight: one burst up front
                q = E.Var("pf", p.dtype)
                body = S.SeqStmt([S.For(q, 0, lines, S.ForKind.SERIAL,
                                        _prefetch(buf, start, q, lines, nxt < slices, total)),
                                  body])
            return S.For(node.loop_var, node.min, node.extent, node.kind, body,
                         node.thread_tag, node.annotations)

    return func.with_body(Insert().visit(func.body))


def _prefetch(buf: Buffer, start: E.PrimExpr, line: E.PrimExpr, lines: int,
              live: E.PrimExpr, total: int | E.PrimExpr) -> S.Stmt:
    """Prefetch cache line ``line`` (of ``lines``) from element ``start`` of ``buf``."""
    idx = start + line * LINE_ELEMS
    return S.IfThenElse(E.all_of(live, line < lines, idx < total),
                        S.Evaluate(E.Call("prefetch", [E.BufferLoad(buf, [idx])], "int32")))


class _SpreadInto(IRMutator):
    """Put ``lines`` prefetches into the first serial loop (of at least 4 iterations) that
    reads ``buf``: ``ceil(lines / extent)`` at the top of each iteration."""

    def __init__(self, buf: Buffer, start: E.PrimExpr, lines: int, live: E.PrimExpr,
                 total: int | E.PrimExpr) -> None:
        self.buf, self.start, self.lines, self.live, self.total = buf, start, lines, live, total
        self.done = False

    def visit_For(self, node: S.For) -> S.Stmt:
        extent = node.extent.value if isinstance(node.extent, E.IntImm) else 0
        if (self.done or node.kind != S.ForKind.SERIAL or extent < 4
                or not _reads(node.body, self.buf)):
            return self.generic_visit(node)
        self.done = True
        per = -(-self.lines // extent)
        zero = isinstance(node.min, E.IntImm) and node.min.value == 0
        it = node.loop_var if zero else node.loop_var - node.min
        pf = [_prefetch(self.buf, self.start, it * per + j, self.lines, self.live, self.total)
              for j in range(per)]
        return S.For(node.loop_var, node.min, node.extent, node.kind,
                     S.SeqStmt([*pf, node.body]), node.thread_tag, node.annotations)
