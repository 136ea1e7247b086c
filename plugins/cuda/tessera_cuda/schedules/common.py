"""What every cuda schedule template uses: the device facts schedules read, walking a group's
stages, and the thread-per-element schedules of injective and reduction stages."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tessera import te
from tessera.plugin.space import ConfigSpace, ScheduleConfig
from tessera.tir.expr import IntImm

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


def extents(op: te.ComputeOp) -> list[int]:
    return [int(ax.dom.extent.value) for ax in op.axis]


compute_ops = te.compute_ops


def _pow2_at_most(n: int) -> int:
    return 1 << max(0, n.bit_length() - 1)


#: Element types whose vector loads and stores the code generator emits (4 bytes a lane).
VECTOR_DTYPES = ("float32", "int32", "uint32")


def vector_lanes(op: te.ComputeOp) -> list[int]:
    """The lanes an injective stage can compute per thread with vector accesses: 2 and 4
    where its innermost extent is a multiple and its type 4 bytes wide."""
    ext = extents(op)
    if op.reduce_axis or not ext or str(op.output(0).dtype) not in VECTOR_DTYPES:
        return [1]
    return [1] + [v for v in (2, 4) if ext[-1] % v == 0]


def elementwise_space(op: te.ComputeOp, gpu: GPUInfo, template: str,
                      vectors: bool = True) -> ConfigSpace:
    """Knobs: ``vector``, the consecutive elements of the innermost axis a thread computes
    (vector loads and stores of 16 bytes where the axis allows: default the widest), and
    ``threads`` per block (a multiple of the warp, at most the thread count rounded up to a
    warp). Default 256 threads: enough warps per block to hide latency, blocks enough to fill
    the device for any tensor over a few hundred thousand elements. ``vectors=False``: one
    element per thread (an epilogue that computes its reduction in a register)."""
    total = math.prod(extents(op)) or 1
    space = ConfigSpace(template, (tuple(extents(op)), str(op.output(0).dtype), op.tag))
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
    return math.prod(int(r.dom.extent.value) for r in op.reduce_axis)


def block_reduce_space(op: te.ComputeOp, gpu: GPUInfo) -> ConfigSpace:
    """One knob: the threads (a power of two, at least a warp) that share each output
    element's reduction. Default: the reduction's length rounded up to a power of two, at most
    256 (each thread combines a few values in a register before the block's tree)."""
    k = reduce_extent(op)
    space = ConfigSpace("cuda_block_reduce", (tuple(extents(op)), k, str(op.output(0).dtype),
                                              op.tag))
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
