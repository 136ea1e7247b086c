"""Helpers every schedule template uses: walking a group's compute stages, the default
injective schedule, and the CPU facts schedules read.

Run-time extents ("compile once, serve any size"). An axis whose extent is an expression of
size variables is never assumed to divide anything: it is split by the fixed vector width
with a guard (``te.lower`` guards the last, partial vector; the loop partition of the TIR
pipeline peels it off, so the main loop is unguarded vector code), and it may be the parallel
loop (a run-time trip count). Decisions that need a number (is the stage worth a parallel
launch, how many leading axes to fuse for enough tasks) take each size variable at a
*representative* value (:func:`representative`): its upper bound in the size bounds the group
is scheduled with (:func:`representative_bounds`, ``schedule_group(size_bounds=...)``), else
:data:`REPRESENTATIVE_SIZE`. Structural decisions (what divides, what is a channel block) read
the exact extents (:func:`static_extents`, None where a run-time size). Workload keys name a
run-time extent by its expression's text (:func:`workload_dims`), so keys stay hashable and
JSON-friendly and a static workload's key is what it always was.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from tessera import te
from tessera.ir.symbolic import current_dim_bounds
from tessera.ops.layout import parse_layout
from tessera.tir.expr import IntImm, PrimExpr, Var
from tessera.tir.functor import post_order_visit, substitute
from tessera.tir.simplify import simplify

from .config import ConfigSpace, ScheduleConfig, largest_divisor


@dataclass(frozen=True)
class CPUInfo:
    """What schedules need to know about the CPU (see :func:`tessera_llvm.cpu.cpu_info`):
    vector width in float32 lanes, threads, the number of vector registers (16 with AVX2, 32
    with AVX-512 and NEON), FMA instructions issued per cycle, and the data cache sizes per
    core (L3: the part one core can count on)."""

    vector_lanes: int = 16
    num_threads: int = 2
    vector_registers: int = 32
    fma_units: int = 2
    l1d_bytes: int = 32 << 10
    l2_bytes: int = 1 << 20
    l3_bytes: int = 4 << 20
    #: ``x86_64`` or ``aarch64``
    arch: str = "x86_64"
    #: The LLVM CPU name the facts are for (the host's when no ``-mcpu`` is given).
    name: str = ""
    #: The CPU features code may use, as LLVM names them (``avx2``, ``avx512vnni``,
    #: ``avxvnni``, ``amx-int8``, ``dotprod``, ``i8mm``, ...): the host's, or those ``-mcpu``
    #: implies, with ``-mattr``'s changes (:func:`tessera_llvm.cpu.cpu_info`).
    features: frozenset[str] = frozenset()

    def has(self, *features: str) -> bool:
        """Whether the CPU has every one of ``features``."""
        return all(f in self.features for f in features)

    def max_accumulators(self, operand_registers: int, cap: int | None = None) -> int:
        """How many accumulator vectors a register tile may hold when ``operand_registers``
        more are live in its inner loop (weight vectors and the input broadcast), leaving one
        register for temporaries, and at most ``cap``."""
        room = self.vector_registers - operand_registers - 1
        return max(1, room if cap is None else min(cap, room))

    @property
    def peak_flops_per_cycle(self) -> int:
        """float32 operations per cycle per core: FMA units x lanes x 2."""
        return self.fma_units * self.vector_lanes * 2

    def lanes_for(self, dtype: str) -> int:
        bits = {"float64": 64, "int64": 64, "uint64": 64, "float16": 16, "int16": 16,
                "uint16": 16, "int8": 8, "uint8": 8, "bool": 8}.get(dtype, 32)
        return max(1, self.vector_lanes * 32 // bits)


compute_ops = te.compute_ops


#: Candidates of the ``parallel_min_elems`` knobs: from "parallel even when small" to "never
#: parallel" (a million elements), around the default 16384.
PARALLEL_MIN_ELEMS = [64, 4096, 16384, 65536, 1 << 20]


#: The value a size variable without an upper bound is taken at for schedule decisions
#: (module doc). The one place schedules read it.
REPRESENTATIVE_SIZE = 128

#: Size variable -> (low, high) of the group being scheduled (:func:`representative_bounds`).
_BOUNDS: ContextVar[Mapping[Var, tuple[int | None, int | None]] | None] = ContextVar(
    "tessera_llvm_size_bounds", default=None)


@contextmanager
def representative_bounds(bounds: Mapping[Var, tuple[int | None, int | None]] | None
                          ) -> Iterator[None]:
    """Within the block, size variables are represented by their upper bound in ``bounds``
    (``PrimFunc.size_bounds``' form: var -> (low, high), None for an open side)."""
    token = _BOUNDS.set(dict(bounds or {}))
    try:
        yield
    finally:
        _BOUNDS.reset(token)


def representative_value(var: Var) -> int:
    """The value size variable ``var`` is taken at: its upper bound when one is known (the
    group's size bounds, else the graph's ``dim_bounds`` in scope), else
    :data:`REPRESENTATIVE_SIZE` (at least its lower bound)."""
    lo, hi = (_BOUNDS.get() or {}).get(var, (None, None))
    if hi is None:  # the graph's declared bounds, by name (tessera.ir.symbolic.dim_bounds_scope)
        lo, hi = current_dim_bounds().get(var.name, (lo, None))
    if hi is not None:
        return int(hi)
    return max(int(lo or 0), REPRESENTATIVE_SIZE)


def static_extent(extent: Any) -> int | None:
    """An extent as an int, or None when it is a run-time size."""
    if isinstance(extent, int):
        return extent
    return extent.value if isinstance(extent, IntImm) else None


def representative(extent: Any) -> int:
    """An extent as an int: itself when static, else its value with every size variable at
    :func:`representative_value` (at least 1)."""
    v = static_extent(extent)
    if v is not None:
        return v
    free: dict[Var, PrimExpr] = {}

    def visit(n: Any) -> None:
        if type(n) is Var and n not in free:
            free[n] = IntImm(representative_value(n), n.dtype)

    post_order_visit(extent, visit)
    folded = simplify(substitute(extent, free))
    return max(folded.value, 1) if isinstance(folded, IntImm) else REPRESENTATIVE_SIZE


def extents(op: te.ComputeOp) -> list[int]:
    """The extents of ``op``'s axes, a run-time one at its :func:`representative` value (for
    size decisions; :func:`static_extents` for exact ones)."""
    return [representative(a.dom.extent) for a in op.axis]


def static_extents(op: te.ComputeOp) -> list[int | None]:
    """The extents of ``op``'s axes, None where a run-time size."""
    return [static_extent(a.dom.extent) for a in op.axis]


def reduce_extents(op: te.ComputeOp) -> list[int]:
    """The extents of ``op``'s reduce axes (run-time ones at their representative value)."""
    return [representative(a.dom.extent) for a in op.reduce_axis]


def workload_dim(extent: Any) -> int | str:
    """An extent in a workload key: the int, or the run-time expression's text."""
    v = static_extent(extent)
    return v if v is not None else str(extent)


def run_time_extents(*axis_lists: Any) -> dict[str, Any]:
    """The run-time extents of the axes, by the text :func:`workload_dim` names them by
    (``ConfigSpace.extents``)."""
    out: dict[str, Any] = {}
    for axes in axis_lists:
        for a in axes:
            if static_extent(a.dom.extent) is None:
                out.setdefault(str(a.dom.extent), a.dom.extent)
    return out


def workload_dims(axes: Any) -> tuple[int | str, ...]:
    """The extents of ``axes`` (iteration variables) for a workload key."""
    return tuple(workload_dim(a.dom.extent) for a in axes)


def is_symbolic(op: te.ComputeOp) -> bool:
    """Whether an axis or a reduce axis of ``op`` has a run-time extent."""
    return any(static_extent(a.dom.extent) is None for a in (*op.axis, *op.reduce_axis))


def inline_injective(s: Any, outputs: list[te.Tensor], keep: set[int]) -> None:
    """Inline every compute without a reduction that is not an output or in ``keep``."""
    out_ops = {id(t.op) for t in outputs}
    for op in compute_ops(outputs):
        if id(op) in out_ops or id(op) in keep or op.reduce_axis:
            continue
        s[op].compute_inline()


def _default_vector(last: int, lanes: int) -> int:
    """The vector width for a last dimension of ``last``: one vector when it divides, the whole
    dimension when it is at most four vectors, else the largest divisor up to a vector."""
    if last % lanes == 0:
        return lanes
    if 4 <= last <= 4 * lanes:
        return last
    d = largest_divisor(last, lanes)
    return d if d >= 4 else 1


def unblocking_block(ops: Any) -> int:
    """The channel block of a layout transform from a blocked layout (NCHW16c) to plain NCHW
    among ``ops`` (a group's computes), else 0."""
    for op in ops:
        if "layout_transform" in getattr(op, "tag", "") and \
                op.attrs.get("dst_layout") == "NCHW":
            block = parse_layout(str(op.attrs.get("src_layout", "NCHW")))
            if block:
                return block
    return 0


def injective_space(op: te.ComputeOp, cpu: CPUInfo, template: str = "injective",
                    unblock: int = 0) -> ConfigSpace:
    """Knobs of an elementwise or data-movement stage. ``unblock``: the stage (or a stage
    inlined into it) reads channel-blocked data (NCHWc, that block) and writes plain rows
    (NCHW, or a reshape of it): it may be tiled as a transpose (``unblock_tile``)."""
    shape = extents(op)
    exact = static_extents(op)
    symbolic = any(v is None for v in exact)
    unblock = unblock if not symbolic and len(shape) >= 3 and shape[1] % max(unblock, 1) == 0 \
        and shape[1] > 1 and shape[-1] >= 16 else 0
    key: tuple[Any, ...] = (workload_dims(op.axis), op.output(0).dtype)
    space = ConfigSpace(template, key + ((("unblock", unblock),) if unblock else ()))
    if unblock:
        space.define("unblock_block", [unblock], unblock,
                     "the channel block of the blocked data read (fixed)")
        space.define("unblock_tile", [0, 16, 32, 64, 128], 64,
                     "reading channel blocks into rows: each block of channels is written a "
                     "tile of this many row elements at a time, so that the blocks read stay "
                     "in the L1 cache (0: row by row)")
    last = shape[-1] if shape else 1
    lanes = cpu.lanes_for(op.output(0).dtype)
    if exact and exact[-1] is None:
        # a run-time last axis: split by the vector width with a guard (module doc)
        space.define("vector_width", sorted({1, lanes, 4, 8, 16, 32, 64}), lanes,
                     "innermost split vectorized (a run-time last dimension: the last, "
                     "partial vector guarded)")
    else:
        vec = _default_vector(last, lanes)
        space.define("vector_width", sorted({1, vec} | {d for d in (4, 8, 16, 32, 64)
                                                       if d <= last and last % d == 0}), vec,
                     "innermost split vectorized (divides the last dimension)")
    space.define("parallel_min_elems", PARALLEL_MIN_ELEMS, 16384,
                 "smallest output that is worth a parallel launch")
    # read only where the output is parallel: at least parallel_min_elems elements
    total = math.prod(shape)
    space.define("parallel_tasks", [2, 4, 8, 16], 4 * cpu.num_threads,
                 "outer iterations wanted in the parallel loop (fewer fused axes, no div/mod "
                 "in the rest)",
                 when={"parallel_min_elems": [v for v in PARALLEL_MIN_ELEMS if v <= total]})
    return space


#: The ``For`` annotation (a TE pragma) of a loop over the tiles of a run-time extent that
#: :func:`~.conv2d.specialize_width_tails` splits into whole tiles and one copy per remainder:
#: ``(f, n)``, the tile's width and the extent (an expression of sizes): a convolution's row of
#: column tiles, a Winograd product's tiles.
WIDTH_TAIL_PRAGMA = "tessera.conv_width_tail"
#: The annotation (a TE pragma) of a parallel loop whose stage has run-time extents:
#: ``(work, least)``; :func:`~.dense.specialize_tails` gives the loop a grain chosen at run
#: time that makes it one task (run by the caller, no worker woken) at the sizes where
#: ``work`` (an expression of the sizes: the stage's elements, or its products' operations) is
#: below ``least``.
PARALLEL_PRAGMA = "tessera.dense_parallel"
#: The ``parallel_grain`` of a gated loop (:data:`PARALLEL_PRAGMA`) below its least work:
#: at least every iteration in one chunk, which the thread pool runs in the calling thread.
SERIAL_GRAIN = 1 << 62


def gate_parallel(stage: Any, loop: Any, op: te.ComputeOp, least: int,
                  with_reduction: bool = False) -> None:
    """Annotate the parallel ``loop`` of ``op``'s stage when ``op`` has run-time extents
    (:data:`PARALLEL_PRAGMA`): its work (the output's elements, times the reduction's with
    ``with_reduction``) decides at run time whether the loop is worth a parallel launch (its
    ``parallel_grain`` becomes an expression of the sizes: :data:`SERIAL_GRAIN` below it),
    where a static stage decides at compile time (a symbolic stage is parallel at its
    representative sizes: at a request of 5 tokens, 9 layer norms each woke the workers for
    microseconds of work)."""
    if not is_symbolic(op):
        return
    work: Any = IntImm(1, "int64")
    axes = [*op.axis, *(op.reduce_axis if with_reduction else [])]
    for a in axes:
        ext = a.dom.extent
        work = work * (IntImm(ext, "int64") if isinstance(ext, int) else ext)
    stage.pragma(loop, PARALLEL_PRAGMA, (work, int(least)))


def parallel_prefix(stage: Any, axes: list[Any], sizes: list[int], tasks: int) -> Any:
    """Fuse the fewest leading ``axes`` whose product reaches ``tasks`` and mark the result
    parallel (the remaining axes stay plain loops, free of div/mod)."""
    count, total = 0, 1
    for size in sizes:
        count += 1
        total *= size
        if total >= tasks:
            break
    prefix = axes[:count]
    fused = stage.fuse(*prefix) if len(prefix) > 1 else prefix[0]
    stage.parallel(fused)
    return fused


def schedule_unblock_stage(s: Any, op: te.ComputeOp, cfg: ScheduleConfig) -> None:
    """A stage that turns channel blocks (NCHWc, block ``c``) into rows: channels split by
    the block, the last (row) axis by the tile, the block's channels looped inside the row
    tile: ``(n, c_outer, ..., w_outer, c_inner, w_inner)``, so the ``c`` x tile elements read
    (a few cache lines) serve ``c`` rows before they leave the L1 cache; row by row, every
    cache line of the input was read once per channel of its block. The row tile is
    vectorized when it divides the row; (n, c_outer) are parallel."""
    stage = s[op]
    axes = list(op.axis)
    shape = extents(op)
    block = int(cfg["unblock_block"])
    tile = min(int(cfg.get("unblock_tile", 0)), shape[-1])
    c_outer, c_inner = stage.split(axes[1], factor=block)
    w_outer, w_inner = stage.split(axes[-1], factor=tile)
    stage.reorder(axes[0], c_outer, *axes[2:-1], w_outer, c_inner, w_inner)
    if shape[-1] % tile == 0:
        stage.vectorize(w_inner)
    if math.prod(shape) >= int(cfg.get("parallel_min_elems", 16384)):
        fused = stage.fuse(axes[0], c_outer)
        stage.parallel(fused)


def schedule_injective_stage(s: Any, op: te.ComputeOp, cfg: ScheduleConfig) -> None:
    """Leading axes fused and parallel (when the output is big enough), the last axis
    vectorized; a stage that turns channel blocks into rows with ``unblock_tile`` set is
    tiled as a transpose (:func:`schedule_unblock_stage`)."""
    stage = s[op]
    axes = list(op.axis)
    if not axes:
        return
    if int(cfg.get("unblock_tile", 0)) > 0:
        schedule_unblock_stage(s, op, cfg)
        return
    shape = extents(op)
    total = math.prod(shape)
    vec = int(cfg.get("vector_width", 1))
    if static_extent(axes[-1].dom.extent) is None:
        _schedule_symbolic_last(stage, op, axes, shape, total, vec, cfg)
        return
    if vec > 1 and shape[-1] % vec == 0:
        if vec < shape[-1]:
            outer_last, inner = stage.split(axes[-1], factor=vec)
            stage.vectorize(inner)
            outer_axes, outer_sizes = axes[:-1] + [outer_last], shape[:-1] + [shape[-1] // vec]
        else:
            stage.vectorize(axes[-1])
            outer_axes, outer_sizes = axes[:-1], shape[:-1]
    else:
        outer_axes, outer_sizes = axes, shape
    if total >= int(cfg.get("parallel_min_elems", 16384)) and outer_axes:
        fused = parallel_prefix(stage, outer_axes, outer_sizes,
                                int(cfg.get("parallel_tasks", 8)))
        gate_parallel(stage, fused, op, int(cfg.get("parallel_min_elems", 16384)))


def _schedule_symbolic_last(stage: Any, op: te.ComputeOp, axes: list[Any], shape: list[int],
                            total: int, vec: int, cfg: ScheduleConfig) -> None:
    """:func:`schedule_injective_stage` of a stage whose last axis is a run-time size: that axis
    split by ``vec`` (guarded) and vectorized; the leading axes fused and parallel as for a
    static stage, or, without leading axes, the loop over the vectors itself (its guard stays
    linear in that loop, which the loop partition needs)."""
    outer_axes, outer_sizes = axes[:-1], shape[:-1]
    if vec > 1:
        outer_last, inner = stage.split(axes[-1], factor=vec)
        stage.vectorize(inner)
        if not outer_axes:
            outer_axes, outer_sizes = [outer_last], [-(-shape[-1] // vec)]
    elif not outer_axes:
        outer_axes, outer_sizes = axes, shape
    if total >= int(cfg.get("parallel_min_elems", 16384)) and outer_axes:
        fused = parallel_prefix(stage, outer_axes, outer_sizes,
                                int(cfg.get("parallel_tasks", 8)))
        gate_parallel(stage, fused, op, int(cfg.get("parallel_min_elems", 16384)))


def reduce_space(op: te.ComputeOp, cpu: CPUInfo) -> ConfigSpace:
    shape = extents(op)
    exact = static_extents(op)
    space = ConfigSpace("reduce", (workload_dims(op.axis), workload_dims(op.reduce_axis)))
    space.define("parallel_min_elems", PARALLEL_MIN_ELEMS, 16384,
                 "smallest reduction (output x reduced elements) worth a parallel launch")
    last = shape[-1] if shape else 1
    lanes = cpu.lanes_for(op.output(0).dtype)
    # a run-time last axis stays scalar: a vector of it would need a guard inside the
    # reduction
    rows = len(shape) > 1 and bool(op.reduce_axis) and last >= 4 and exact[-1] is not None
    vec = _default_vector(last, lanes) if rows else 1
    space.define("row_vector", sorted({1, vec}), vec,
                 "reductions keeping a last output axis (channel windows, sums over channels): "
                 "that axis innermost as vectors of this width (1: scalar)")
    return space


def schedule_reduce_stage(s: Any, op: te.ComputeOp, cfg: ScheduleConfig) -> None:
    """Data-parallel axes fused and parallel when the work is big enough; reduction serial."""
    stage = s[op]
    axes = list(op.axis)
    work = math.prod(extents(op)) * math.prod(reduce_extents(op))
    shape = extents(op)
    exact = static_extents(op)
    if exact and exact[-1] in (2, 4, 8, 16, 32) and len(axes) > 1:
        # a channel block (NCHWc pooling): reduce outside it, the block as one vector; a small
        # window unrolled; the row of outputs serial inside the parallel (n, c, h) loop, so
        # the loop indices need no division
        stage.reorder(*axes[:-1], *op.reduce_axis, axes[-1])
        stage.vectorize(axes[-1])
        window = math.prod(reduce_extents(op))
        if op.reduce_axis and window <= 16 and not is_symbolic(op):
            for r in op.reduce_axis:
                stage.unroll(r)
        axes = axes[:-1]
        if len(axes) > 1 and shape[-2] > 1:
            axes = axes[:-1]
    elif int(cfg.get("row_vector", 1)) > 1 and len(axes) > 1 and op.reduce_axis:
        # a reduction that keeps a last output axis (LRN's window over channels, a sum over
        # channels): reduce outside that axis, which runs as vectors
        vec = int(cfg["row_vector"])
        last = axes[-1]
        if vec < shape[-1]:
            last, inner = stage.split(last, factor=vec)
            stage.reorder(*axes[:-1], last, *op.reduce_axis, inner)
            stage.vectorize(inner)
        else:
            stage.reorder(*axes[:-1], *op.reduce_axis, last)
            stage.vectorize(last)
        axes = axes[:-1]
    if axes and work >= int(cfg.get("parallel_min_elems", 16384)) and math.prod(
            extents(op)) > 1:
        fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
        stage.parallel(fused)
        gate_parallel(stage, fused, op, int(cfg.get("parallel_min_elems", 16384)),
                      with_reduction=True)
