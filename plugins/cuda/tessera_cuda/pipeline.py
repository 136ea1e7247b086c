"""The TIR pipeline of the cuda backend (a :class:`~tessera.tir.transform.Pipeline`).

The CPU pipeline's passes without unrolling or storage rewriting: vectorized loops of up to 4
lanes become vector code (the code generator reads and writes contiguous aligned lanes of
4-byte types as one ``float4``/``int2``/... access and computes the lanes one by one), longer
ones run serially, unrolled loops stay loops that the CUDA compiler unrolls (``#pragma
unroll``), and allocations stay where the schedule put them, each in its scope. Then barriers
between the phases that share a block's ``shared`` memory
(:func:`~tessera.tir.transform.thread_sync.thread_sync`) and the IR verifier. The GPU verifier
(thread extents, shared memory and register budgets) runs per kernel in the code generator,
which splits a function into kernels first.

No loop partitioning at the guards of run-time extents: on the GPU those guards depend on the
thread index (the last, partial tile of a block), so a partitioned loop would have bounds that
differ between the threads of a block, and a barrier inside it (the shared tiles of a matrix
product over a run-time reduction) would deadlock; the guards stay (one comparison per
element).
"""

from __future__ import annotations

from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer
from tessera.tir.functor import IRMutator
from tessera.tir.transform.pipeline import Pipeline, default_pipeline
from tessera.tir.transform.thread_sync import thread_sync

__all__ = ["gpu_pipeline", "hoist_shared"]


class _TakeShared(IRMutator):
    def __init__(self) -> None:
        self.buffers: list[Buffer] = []

    def visit_Allocate(self, s: S.Allocate) -> S.Stmt:
        body = self.visit(s.body)
        if s.buffer.scope == "shared":
            self.buffers.append(s.buffer)
            return body
        return s if body is s.body else S.Allocate(s.buffer, body)


def hoist_shared(func: S.PrimFunc) -> S.PrimFunc:
    """Move every ``shared`` allocation of a kernel (a top-level statement) to the kernel's
    top. A ``__shared__`` array exists once per block whatever its position; hoisted, the
    phases that fill and read the tiles become one flat sequence, so ``thread_sync`` places
    one barrier after all the fetches of a step instead of one after each."""
    body = func.body
    outer: list[Buffer] = []
    while isinstance(body, S.Allocate) and body.buffer.scope == "global":
        outer.append(body.buffer)
        body = body.body
    items = list(body.seq) if isinstance(body, S.SeqStmt) else [body]
    out: list[S.Stmt] = []
    for item in items:
        take = _TakeShared()
        item = take.visit(item)
        for buf in reversed(take.buffers):
            item = S.Allocate(buf, item)
        out.append(item)
    new: S.Stmt = S.seq(*out)
    for buf in reversed(outer):
        new = S.Allocate(buf, new)
    return func.with_body(new)


def gpu_pipeline() -> Pipeline:
    """simplify, remove_redundant_checks, flatten_buffers, vectorize (4 lanes, no loop
    partitioning), simplify_again, hoist_shared, thread_sync, verify (no hoist_sizes, no
    name_size_quotients: a kernel's statements before its thread loops stay as they were)."""
    base = default_pipeline({"vectorize": True, "max_lanes": 4, "unroll": False,
                             "storage_rewrite": False, "loop_partition": False,
                             "hoist_sizes": False, "name_size_quotients": False})
    return base.insert_before("verify", "hoist_shared", hoist_shared) \
        .insert_before("verify", "thread_sync", thread_sync)
