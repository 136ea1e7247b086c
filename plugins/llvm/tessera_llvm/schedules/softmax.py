"""The CPU schedule of a softmax (or log-softmax) along the last axis, one row at a time.

With the row form of the computes (``tessera.topi.nn.softmax.row_softmax_computes``) every
statistic of a row (its maximum, its exponentials, their sum) is computed inside the loop over
rows of the output, so a row (a few KiB) is read from memory once and its exponentials stay in
the L1 cache; computed at root instead, each of the five stages walked the whole tensor (a
Whisper encoder's 6 x 500 x 500 scores: 36 MB of traffic for 12). The partial maxima and sums
run as vectors of the CPU's lanes, the exponentials and the output as vectors along the row;
the rows are the parallel loop.

Run-time extents: the rows (any leading axis) may be run-time sizes (their fused loop is the
parallel one, decided at representative sizes, :func:`~.common.representative`), and so may
the row length: the row's elements are then vectors of the CPU's width, split with a guard on
the last, partial vector (the loop partition peels it off the unguarded main loop).
"""

from __future__ import annotations

import math
from typing import Any

from tessera import te
from tessera.kernel.schedule import GroupContext

from .common import extents, gate_parallel, static_extent, workload_dims
from .config import ConfigSpace

#: Tags of the row form's stages, in the order they are computed within a row.
ROW_STAGES = ("softmax_max_lanes", "softmax_max", "softmax_exp", "softmax_sum_lanes",
              "softmax_sum", "softmax_rsum")
OUTPUT_TAGS = ("softmax_output", "log_softmax_output")


def find_softmax(ops: list[te.ComputeOp]) -> te.ComputeOp | None:
    """The output stage of a row-form softmax (its statistics in lanes), else None."""
    tags = {t for op in ops for t in op.tag.split(",")}
    if "softmax_max_lanes" not in tags:
        return None
    for op in ops:
        if op.tag in OUTPUT_TAGS and int(op.attrs.get("axis", -1)) == len(op.axis) - 1:
            return op
    return None


def softmax_space(out: te.ComputeOp, cpu: Any) -> ConfigSpace:
    shape = extents(out)
    space = ConfigSpace("softmax_rows", (workload_dims(out.axis), out.output(0).dtype))
    last = shape[-1]
    lanes = cpu.lanes_for(out.output(0).dtype)
    if static_extent(out.axis[-1].dom.extent) is None:
        space.define("vector_width", sorted({1, 4, 8, 16, lanes}), lanes,
                     "the row's elements as vectors of this width (a run-time row: the last, "
                     "partial vector guarded)")
    else:
        # a row of whole vectors: vectors of the CPU's width; otherwise (500 = 50 x 10) plain
        # loops, which LLVM's loop vectorizer runs at full width with a remainder loop,
        # instead of vectors of an odd width that fill part of a register
        vec = 1 if last % lanes else lanes
        space.define("vector_width", sorted({1, vec} | {d for d in (4, 8, 16)
                                                       if d <= last and last % d == 0}), vec,
                     "the row's elements as vectors of this width (divides the row)")
    space.define("parallel_min_elems", [4096, 16384, 65536], 16384,
                 "smallest tensor worth a parallel loop over its rows")
    return space


def _row_loops(stage: Any, lead: list[Any]) -> tuple[Any, Any]:
    """The loops over the rows (the leading axes ``lead``): (the parallel loop, the loop the
    row statistics are computed at). Static rows are fused into one loop, both. With run-time
    leading axes, the first of them goes outermost and is fused with the static ones (whose
    indices it then recovers with constant divisions, which bound inference follows: a
    division by a run-time extent would make every row compute every row's statistics); the
    other run-time axes stay loops inside it, the innermost being where the statistics go."""
    symbolic = [a for a in lead if static_extent(a.dom.extent) is None]
    if not symbolic:
        rows = stage.fuse(*lead) if len(lead) > 1 else lead[0]
        return rows, rows
    static = [a for a in lead if static_extent(a.dom.extent) is not None]
    order = [symbolic[0], *static, *symbolic[1:]]
    if order != lead:
        stage.reorder(*order)
    outer = stage.fuse(symbolic[0], *static) if static else symbolic[0]
    return outer, (symbolic[-1] if len(symbolic) > 1 else outer)


def schedule_softmax(ctx: GroupContext, out: te.ComputeOp) -> None:
    """Rows of ``out`` fused and parallel; every row statistic computed within a row."""
    s = ctx.schedule
    cfg = ctx.pick(softmax_space(out, ctx.target))
    stage = s[out]
    axes = list(out.axis)
    shape = extents(out)
    par, rows = _row_loops(stage, axes[:-1])
    vec = int(cfg["vector_width"])
    # a run-time row length: split by the vector width, the last vector guarded
    symbolic_row = static_extent(axes[-1].dom.extent) is None and vec > 1
    if symbolic_row:
        _, inner = stage.split(axes[-1], factor=vec)
        stage.vectorize(inner)
    elif vec > 1 and shape[-1] % vec == 0:
        if vec < shape[-1]:
            _, inner = stage.split(axes[-1], factor=vec)
            stage.vectorize(inner)
        else:
            stage.vectorize(axes[-1])
    if math.prod(shape) >= int(cfg["parallel_min_elems"]) and math.prod(shape[:-1]) > 1:
        stage.parallel(par)
        gate_parallel(stage, par, out, int(cfg["parallel_min_elems"]))
    by_tag = {}
    for op in ctx.ops:
        names = op.tag.split(",")
        tag = next((t for t in names if t in ROW_STAGES), None)
        if tag is not None:
            by_tag[tag] = op
        elif op is not out and not op.reduce_axis:
            s[op].compute_inline()  # a scale or mask before the softmax: read in place
    for tag in ROW_STAGES:
        op = by_tag.get(tag)
        if op is None:
            continue
        st = s[op]
        st.compute_at(stage, rows)
        st.set_scope("local")  # on the stack, per row: not a heap buffer per iteration
        if tag.endswith("_lanes"):  # the partial results of a row: one vector of lanes
            st.reorder(*op.axis[:-1], *op.reduce_axis, op.axis[-1])
            st.vectorize(op.axis[-1])
        elif tag == "softmax_exp" and (symbolic_row or vec > 1 and shape[-1] % vec == 0):
            _, inner = st.split(op.axis[-1], factor=vec)
            st.vectorize(inner)
    ctx.result.configs.append(cfg)
