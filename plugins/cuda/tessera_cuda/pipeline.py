"""The TIR pipeline of the cuda backend (a :class:`~tessera.tir.transform.Pipeline`).

The CPU pipeline's passes without CPU vectors, unrolling or storage rewriting: vectorized loops
run serially (a GPU thread is the vector lane), unrolled loops stay loops that the CUDA compiler
unrolls (``#pragma unroll``), and allocations stay where the schedule put them, each in its
scope. Then barriers between the phases that share a block's ``shared`` memory
(:func:`~tessera.tir.transform.thread_sync.thread_sync`) and the IR verifier. The GPU verifier
(thread extents, shared memory and register budgets) runs per kernel in the code generator,
which splits a function into kernels first.
"""

from __future__ import annotations

from tessera.tir.transform.pipeline import Pipeline, default_pipeline
from tessera.tir.transform.thread_sync import thread_sync

__all__ = ["gpu_pipeline"]


def gpu_pipeline() -> Pipeline:
    """simplify, remove_redundant_checks, flatten_buffers, devectorize, simplify_again,
    thread_sync, verify."""
    base = default_pipeline({"vectorize": False, "unroll": False, "storage_rewrite": False})
    return base.insert_before("verify", "thread_sync", thread_sync)
