"""What every cuda schedule template uses: the device facts schedules read, walking a group's
stages, and the thread-per-element schedules of injective and reduction stages.

Run-time extents (a region compiled once for every size: its graph types keep size
variables). An axis whose extent is an expression of size variables is never assumed to
divide anything: it is split by fixed factors (threads per block, a tile) with a guard on the
last, partial block (``te.lower`` emits it), so a kernel's block is a fixed shape and its grid
the ceiling division of a size expression, evaluated on the host per call. Decisions that
need a number (how many threads share a reduction, how large a tile) take each size variable
at a *representative* value (:func:`representative`: its upper bound in the graph's
``dim_bounds`` in scope, else :data:`REPRESENTATIVE_SIZE`); vector accesses need a static
innermost extent. Workload keys name a run-time extent by its expression's text
(:func:`workload_dims`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tessera import te
from tessera.ir.symbolic import current_dim_bounds
from tessera.plugin.space import ConfigSpace, ScheduleConfig
from tessera.tir.expr import IntImm, PrimExpr, Var
from tessera.tir.functor import post_order_visit, substitute
from tessera.tir.simplify import simplify

BLOCK_X = te.thread_axis("blockIdx.x")
BLOCK_Y = te.thread_axis("blockIdx.y")
BLOCK_Z = te.thread_axis("blockIdx.z")
THREAD_X = te.thread_axis("threadIdx.x")
THREAD_Y = te.thread_axis("threadIdx.y")

#: The largest grid x dimension of every CUDA device (2^31 - 1).
MAX_GRID_X = 2**31 - 1


@dataclass(frozen=True)
class GPUInfo:
    """What schedules need to know about the GPU: threads per block (``-max_threads_per_block``),
    streaming multiprocessors (to fill the device), warp size and static shared memory."""

    max_threads_per_block: int = 1024
    multiprocessors: int = 132
    warp_size: int = 32
    max_shared_bytes: int = 48 * 1024
    arch: str = "sm_90"


#: The value a size variable without an upper bound is taken at for schedule decisions.
REPRESENTATIVE_SIZE = 128


def static_extent(extent: Any) -> int | None:
    """An extent as an int, or None when it is a run-time size."""
    if isinstance(extent, int):
        return extent
    return int(extent.value) if isinstance(extent, IntImm) else None


def representative(extent: Any) -> int:
    """An extent as an int: itself when static, else its value with every size variable at
    its upper bound in the graph's ``dim_bounds`` in scope (else :data:`REPRESENTATIVE_SIZE`),
    at least 1."""
    v = static_extent(extent)
    if v is not None:
        return v
    bounds = current_dim_bounds()
    free: dict[Var, PrimExpr] = {}

    def visit(n: Any) -> None:
        if type(n) is Var and n not in free:
            lo, hi = bounds.get(n.name, (None, None))
            value = int(hi) if hi is not None else max(int(lo or 0), REPRESENTATIVE_SIZE)
            free[n] = IntImm(value, n.dtype)

    post_order_visit(extent, visit)
    folded = simplify(substitute(extent, free))
    return max(int(folded.value), 1) if isinstance(folded, IntImm) else REPRESENTATIVE_SIZE


def is_symbolic(op: te.ComputeOp) -> bool:
    """Whether an axis or a reduce axis of ``op`` has a run-time extent."""
    return any(static_extent(a.dom.extent) is None for a in (*op.axis, *op.reduce_axis))


def workload_dims(axes: Any) -> tuple[int | str, ...]:
    """The extents of ``axes`` for a workload key: ints, a run-time one as its text."""
    out: list[int | str] = []
    for a in axes:
        v = static_extent(a.dom.extent)
        out.append(v if v is not None else str(a.dom.extent))
    return tuple(out)


def same_extents(a: te.ComputeOp, b: te.ComputeOp) -> bool:
    """Whether two stages have the same data axes (run-time extents compared as
    expressions)."""
    if len(a.axis) != len(b.axis):
        return False
    for x, y in zip(a.axis, b.axis):
        sx, sy = static_extent(x.dom.extent), static_extent(y.dom.extent)
        if sx is not None or sy is not None:
            if sx != sy:
                return False
            continue
        diff = simplify(x.dom.extent - y.dom.extent)
        if not (isinstance(diff, IntImm) and int(diff.value) == 0):
            return False
    return True


def extents(op: te.ComputeOp) -> list[int]:
    """The extents of ``op``'s axes, a run-time one at its :func:`representative` value."""
    return [representative(ax.dom.extent) for ax in op.axis]


compute_ops = te.compute_ops


def _pow2_at_most(n: int) -> int:
    return 1 << max(0, n.bit_length() - 1)


#: Element types whose vector loads and stores the code generator emits (4 bytes a lane).
VECTOR_DTYPES = ("float32", "int32", "uint32")


def vector_lanes(op: te.ComputeOp) -> list[int]:
    """The lanes an injective stage can compute per thread with vector accesses: 2 and 4
    where its innermost extent is a multiple and its type 4 bytes wide."""
    if op.reduce_axis or not op.axis or str(op.output(0).dtype) not in VECTOR_DTYPES:
        return [1]
    last = static_extent(op.axis[-1].dom.extent)
    if last is None:  # a run-time innermost extent: one element per thread, guarded
        return [1]
    return [1] + [v for v in (2, 4) if last % v == 0]


def elementwise_space(op: te.ComputeOp, gpu: GPUInfo, template: str,
                      vectors: bool = True) -> ConfigSpace:
    """Knobs: ``vector``, the consecutive elements of the innermost axis a thread computes
    (vector loads and stores of 16 bytes where the axis allows: default the widest), and
    ``threads`` per block (a multiple of the warp, at most the thread count rounded up to a
    warp). Default 256 threads: enough warps per block to hide latency, blocks enough to fill
    the device for any tensor over a few hundred thousand elements. ``vectors=False``: one
    element per thread (an epilogue that computes its reduction in a register)."""
    total = math.prod(extents(op)) or 1
    space = ConfigSpace(template, (workload_dims(op.axis), str(op.output(0).dtype), op.tag))
    lanes = vector_lanes(op) if vectors else [1]
    vec = space.define("vector", lanes, lanes[-1],
                       "consecutive elements per thread, read and written as one vector")
    per_thread = -(-total // vec)
    cap = min(gpu.max_threads_per_block, max(gpu.warp_size,
                                             -(-per_thread // gpu.warp_size) * gpu.warp_size))
    cands = [t for t in (32, 64, 128, 256, 512, 1024) if t <= cap] or [gpu.warp_size]
    default = min(256, _pow2_at_most(cap)) if cap >= 32 else cands[0]
    space.define("threads", cands, default if default in cands else cands[-1],
                 "threads per block")
    return space


def bind_flat(s: Any, op: te.ComputeOp, threads: int) -> tuple[Any, Any]:
    """Fuse every data axis of ``op``'s stage and spread the elements one per thread:
    ``blockIdx.x`` x ``threadIdx.x`` (a guard covers the last block). Returns (block, thread)
    loops."""
    stage = s[op]
    axes = list(stage.op.axis)
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    bx, tx = stage.split(fused, factor=threads)
    stage.bind(bx, BLOCK_X)
    stage.bind(tx, THREAD_X)
    return bx, tx


def schedule_elementwise(s: Any, op: te.ComputeOp, cfg: ScheduleConfig) -> None:
    """An injective stage (``vector`` consecutive elements per thread, a vectorized loop), or
    a reduction computed one output element per thread (its reduce loops serial in the
    thread)."""
    if not op.axis:  # a scalar result: the code generator runs it on one thread
        return
    vec = int(cfg.values.get("vector", 1))
    if vec == 1:
        bind_flat(s, op, int(cfg["threads"]))
        return
    stage = s[op]
    axes = list(stage.op.axis)
    outer, lanes = stage.split(axes[-1], factor=vec)
    fused = stage.fuse(*axes[:-1], outer) if len(axes) > 1 else outer
    bx, tx = stage.split(fused, factor=int(cfg["threads"]))
    stage.bind(bx, BLOCK_X)
    stage.bind(tx, THREAD_X)
    stage.vectorize(lanes)


#: Reductions at least this long are computed by a block of threads per output element.
BLOCK_REDUCE_MIN = 32


def reduce_extent(op: te.ComputeOp) -> int:
    """How many values each output element of reduction ``op`` combines."""
    return math.prod(representative(r.dom.extent) for r in op.reduce_axis)


def block_reduce_space(op: te.ComputeOp, gpu: GPUInfo) -> ConfigSpace:
    """One knob: the threads (a power of two, at least a warp) that share each output
    element's reduction. Default: the reduction's length rounded up to a power of two, at most
    256 (each thread combines a few values in a register before the block's tree)."""
    k = reduce_extent(op)
    red = workload_dims(op.reduce_axis)
    space = ConfigSpace("cuda_block_reduce",
                        (workload_dims(op.axis), k if all(isinstance(x, int) for x in red)
                         else red, str(op.output(0).dtype), op.tag))
    cands = [t for t in (32, 64, 128, 256, 512, 1024) if t <= gpu.max_threads_per_block]
    want = 1 << max(0, (k - 1).bit_length())
    default = max(t for t in cands if t <= max(min(want, 256), cands[0]))
    space.define("threads", cands, default, "threads per output element's reduction")
    return space


def schedule_block_reduce(s: Any, op: te.ComputeOp, cfg: ScheduleConfig) -> None:
    """A reduction computed by a block per output element (``blockIdx.x`` over the fused
    data axes): its reduce axes fused and split so that ``threadIdx.x`` strides through
    them (consecutive threads on consecutive values, coalesced where the reduction is over
    the innermost axis), each thread's share combined in a register, then across the block
    through shared memory (``te.lower``'s cross-thread reduction)."""
    stage = s[op]
    red = list(op.reduce_axis)
    r = stage.fuse(*red) if len(red) > 1 else red[0]
    _, ki = stage.split(r, factor=int(cfg["threads"]))
    data = list(op.axis)
    if data:
        b = stage.fuse(*data) if len(data) > 1 else data[0]
        stage.bind(b, BLOCK_X)
    stage.bind(ki, THREAD_X)


def const_int(e: Any) -> int:
    return int(e.value) if isinstance(e, IntImm) else int(e)
