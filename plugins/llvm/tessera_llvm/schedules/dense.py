"""The x86/AArch64 schedule of matrix products (dense, matmul, batch matmul) with a fused
epilogue.

Each ``mr x nr`` tile of the output is accumulated in registers (``mr`` rows unrolled, ``nr``
columns as ``nr / lanes`` vectors), over the whole reduction; tiles are spread over threads by
fusing the batch, row-tile and column-tile axes into one parallel axis. The epilogue (bias,
activation, residual) runs when the tile is written out.
"""

from __future__ import annotations

import math
from typing import Any

from tessera import te

from .common import CPUInfo, extents
from .config import ConfigSpace, ScheduleConfig, largest_divisor

TAGS = ("dense", "matmul", "batch_matmul")


def find_dense(ops: list[te.ComputeOp]) -> te.ComputeOp | None:
    for op in ops:
        if op.tag in TAGS and len(op.reduce_axis) == 1:
            return op
    return None


def dense_space(mm: te.ComputeOp, cpu: CPUInfo) -> ConfigSpace:
    shape = extents(mm)
    m, n = shape[-2], shape[-1]
    k = mm.reduce_axis[0].dom.extent.value
    space = ConfigSpace("dense", (tuple(shape), k))
    lanes = cpu.lanes_for(mm.output(0).dtype)
    vec = next((v for v in (lanes, lanes // 2, lanes // 4) if v >= 4 and n % v == 0), 1)
    # two vectors of columns per tile when they divide (more for narrow vectors)
    nr_vecs = next((k for k in ((2,) if vec == lanes else (5, 4, 3, 2))
                    if vec > 1 and n % (k * vec) == 0), 1)
    nr = vec * nr_vecs
    # mr x nr_vecs accumulators, the nr_vecs vectors of b and one broadcast of a must fit the
    # register file: 12 x 2 with 32 vector registers, 6 x 2 with AVX2's 16
    if vec > 1:
        rows = min(24, cpu.max_accumulators(nr_vecs + 1)) // nr_vecs
    else:
        rows = 8
    mr = min(largest_divisor(m, max(1, rows)), 12)
    if vec > 1 and mr * nr_vecs < 4:
        # few rows (a batch-1 fully-connected layer): one accumulator chain per column vector
        # waits on the FMA latency at every step of k; more column vectors per tile give
        # independent chains (1000 columns: 5 vectors of 8); with packed weights the tile
        # stays a whole number of panels (vector loads that provably stay in one panel)
        cols = n // vec
        panel = int(mm.attrs.get("panel") or 1)
        fits = [d for d in range(1, 9)
                if cols % d == 0 and (d * vec) % panel == 0
                and mr * d <= cpu.max_accumulators(d + 1)]
        nr_vecs = max(fits, default=nr_vecs)
        nr = vec * nr_vecs
    space.define("nr", sorted({d for d in (1, 4, 8, 16, 32, 48, 64) if n % d == 0} | {nr}), nr,
                 "output columns per register tile (a multiple of the vector width)")
    space.define("mr", sorted({d for d in range(1, min(m, 16) + 1) if m % d == 0} | {mr}), mr,
                 "output rows per register tile")
    space.define("vector_width", [1, 4, 8, 16], vec if vec in (1, 4, 8, 16) else 1,
                 "vector lanes of the column loop")
    space.define("parallel_min_flops", [1 << 16, 1 << 18, 1 << 20], 1 << 18,
                 "smallest product worth a parallel launch")
    # Column tiles outside row tiles when b is the larger operand: each nr-wide strip of b
    # (k x nr, a few hundred KiB) is then read once and meets every row tile while it is in
    # the cache, and a (smaller) is what the caches re-serve; row tiles outside re-read all
    # of b from memory once per row tile (BERT's 768 x 3072 feed-forward weights: 9 MiB).
    space.define("cols_outer", [False, True], n > m, "column tiles outside row tiles")
    return space


def schedule_dense(s: Any, mm: te.ComputeOp, out: te.ComputeOp, cfg: ScheduleConfig) -> None:
    mr, nr, vec = int(cfg["mr"]), int(cfg["nr"]), int(cfg["vector_width"])
    if nr % max(vec, 1):
        vec = 1
    if out is mm:
        acc = s.cache_write(mm.output(0), "local").op
        writer = mm
    else:
        acc = mm
        writer = out
        s[mm].set_scope("local")
    ws = s[writer]
    axes = list(writer.axis)
    batch, (row, col) = axes[:-2], axes[-2:]
    ro, ri = ws.split(row, factor=mr)
    co, ci = ws.split(col, factor=nr)
    outer = [*batch, co, ro] if cfg.get("cols_outer") else [*batch, ro, co]
    ws.reorder(*outer, ri, ci)
    flops = 2 * math.prod(extents(mm)) * mm.reduce_axis[0].dom.extent.value
    par = ws.fuse(*outer) if len(outer) > 1 else outer[0]
    if flops >= int(cfg.get("parallel_min_flops", 1 << 18)):
        ws.parallel(par)
    if vec > 1:
        cio, cii = ws.split(ci, factor=vec)
        ws.vectorize(cii)
    s[acc].compute_at(ws, par)
    cs = s[acc]
    crow, ccol = acc.axis[-2], acc.axis[-1]
    (k,) = acc.reduce_axis
    if vec > 1:
        cco, cci = cs.split(ccol, factor=vec)
        cs.reorder(k, crow, cco, cci)
        cs.unroll(crow)
        cs.unroll(cco)
        cs.vectorize(cci)
    else:
        cs.reorder(k, crow, ccol)
        cs.unroll(crow)
