"""Software prefetch of convolution weights that stream from memory.

In the last stages of a CNN the weights of one convolution (megabytes) no longer fit in the
caches, so each parallel task that starts a new output-channel slice first waits on DRAM, then
computes on cached weights for the remaining output rows: memory and arithmetic alternate
instead of overlapping. :func:`prefetch_next_slice` makes each task of a slice prefetch an equal
share of the *next* slice's weights, so the next slice arrives while this one computes.
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
    total = buf.const_shape()[0]

    class Insert(IRMutator):
        done = False

        def visit_For(self, node: S.For) -> S.Stmt:
            if self.done or node.kind != S.ForKind.PARALLEL or not _reads(node.body, buf):
                return self.generic_visit(node)
            self.done = True
            p = node.loop_var
            nxt = (p // tasks_per_slice) % slices + 1
            q = E.Var("pf", p.dtype)
            idx = nxt * slice_elems + (p % tasks_per_slice) * chunk + q * LINE_ELEMS
            body = S.IfThenElse(
                E.all_of(nxt < slices, idx < total),
                S.Evaluate(E.Call("prefetch", [E.BufferLoad(buf, [idx])], "int32")))
            loop = S.For(q, 0, lines, S.ForKind.SERIAL, body)
            return S.For(node.loop_var, node.min, node.extent, node.kind,
                         S.SeqStmt([loop, node.body]), node.thread_tag, node.annotations)

    return func.with_body(Insert().visit(func.body))
