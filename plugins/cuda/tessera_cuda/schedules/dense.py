"""Matrix products (dense, matmul, batch matmul) tiled through shared memory.

Each block computes a ``bm x bn`` tile of the output (one batch entry per ``blockIdx.z``) with
``ty x tx`` threads, each accumulating a ``tm x tn`` register tile (``local`` memory, unrolled)
over the reduction in steps of ``bk``: per step the block's threads fetch the ``bm x bk`` slice
of A and the ``bk x bn`` slice of B into shared memory cooperatively (consecutive threads,
consecutive addresses), a barrier, then the register tile's products. A thread's tile is
contiguous (columns ``tx * tn + nj``): interleaving the tiles of neighbouring threads would make
warps read B and store the output contiguously, but needs virtual threads to keep the
register tile ``tm x tn`` (a plain interleaved split makes its region span the block). The
fused epilogue (bias, activation,
residual) is the output stage, computed from the register tile.
"""

from __future__ import annotations

from typing import Any

from tessera import te
from tessera.plugin.space import ConfigSpace, ScheduleConfig

from .common import (
    BLOCK_X,
    BLOCK_Y,
    BLOCK_Z,
    THREAD_X,
    THREAD_Y,
    GPUInfo,
    extents,
    representative,
    static_extent,
    workload_dims,
)

TAGS = ("dense", "matmul", "batch_matmul")


def find_dense(ops: list[te.ComputeOp]) -> te.ComputeOp | None:
    for op in ops:
        if op.tag in TAGS and len(op.reduce_axis) == 1 and len(op.axis) >= 2:
            return op
    return None


def _threads_for(n: int, tile: int, cap: int) -> int:
    """Threads along an axis of ``n`` elements with ``tile`` per thread: a power of two up
    to ``cap``, no more than needed."""
    t = 1
    while t < cap and t * tile < n:
        t *= 2
    return t


def dense_space(mm: te.ComputeOp, gpu: GPUInfo) -> ConfigSpace:
    shape = extents(mm)
    m, n = shape[-2], shape[-1]
    k = representative(mm.reduce_axis[0].dom.extent)
    space = ConfigSpace("cuda_dense", (workload_dims(mm.axis), *workload_dims(mm.reduce_axis),
                                       str(mm.output(0).dtype)))
    tm = space.define("tm", [1, 2, 4, 8], 4 if m >= 64 else 2 if m >= 16 else 1,
                      "rows of the output per thread (register tile)")
    tn = space.define("tn", [1, 2, 4, 8], 4 if n >= 64 else 1,
                      "columns of the output per thread (register tile)")
    space.define("ty", [1, 2, 4, 8, 16, 32], _threads_for(m, tm, 16), "thread rows per block")
    space.define("tx", [1, 2, 4, 8, 16, 32], _threads_for(n, tn, 16),
                 "thread columns per block")
    space.define("bk", [4, 8, 16, 32], 8 if k >= 8 else 4, "reduction step through shared memory")
    return space


def schedule_dense(s: Any, mm: te.ComputeOp, last: te.ComputeOp, cfg: ScheduleConfig) -> None:
    """Schedule product ``mm`` and its epilogue, whose output stage is ``last`` (``mm``
    itself when there is none; it must have ``mm``'s shape)."""
    tm, tn, ty, tx, bk = (int(cfg[x]) for x in ("tm", "tn", "ty", "tx", "bk"))
    rows, cols = (static_extent(a.dom.extent) for a in mm.axis[-2:])
    # the thread loops' real extents (a tile wider than the matrix is cut to it; a run-time
    # extent is split by the whole tile, its last one guarded)
    ty_real = -(-min(rows, tm * ty) // tm) if rows is not None else ty
    tx_real = -(-min(cols, tn * tx) // tn) if cols is not None else tx
    if last is mm:
        local = s.cache_write(mm.output(0), "local")
        out = s[mm.output(0)]
        acc = s[local]
    else:
        s[mm].set_scope("local")
        out, acc = s[last], s[mm]
    axes = list(out.op.axis)
    i, j = axes[-2], axes[-1]
    by, iy = out.split(i, factor=tm * ty)
    bx, jx = out.split(j, factor=tn * tx)
    ti, mi = out.split(iy, factor=tm)
    tj, nj = out.split(jx, factor=tn)
    batch = axes[:-2]
    if batch:
        bz = out.fuse(*batch) if len(batch) > 1 else batch[0]
        out.reorder(bz, by, bx, ti, tj, mi, nj)
        out.bind(bz, BLOCK_Z)
    else:
        out.reorder(by, bx, ti, tj, mi, nj)
    out.bind(by, BLOCK_Y)
    out.bind(bx, BLOCK_X)
    out.bind(ti, THREAD_Y)
    out.bind(tj, THREAD_X)
    out.unroll(mi)
    out.unroll(nj)

    acc.compute_at(out, tj)
    red = acc.op.reduce_axis[0]
    ko, ki = acc.split(red, factor=bk)
    data = list(acc.op.axis)
    acc.reorder(ko, ki, *data)
    acc.unroll(ki)
    for ax in data[-2:]:
        acc.unroll(ax)
    for t in list(acc.op.input_tensors()):
        if not t.shape:  # a scalar (a zero point): read directly
            continue
        shared = s.cache_read(t, "shared", [acc])
        s[shared].compute_at(acc, ko)
        cooperative_fetch(s[shared], ty_real, tx_real)


def cooperative_fetch(stage: Any, ty: int, tx: int) -> None:
    """Spread the elements of a shared stage over the block's ``ty x tx`` threads, consecutive
    threads on consecutive elements."""
    axes = list(stage.op.axis)
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    rest, fx = stage.split(fused, factor=tx)
    _, fy = stage.split(rest, factor=ty)
    stage.bind(fx, THREAD_X)
    stage.bind(fy, THREAD_Y)
