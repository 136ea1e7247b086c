"""The x86/AArch64 schedule of blocked (NCHWc) convolution with a fused epilogue.

The output is computed one row strip at a time: for each (batch, output-channel block, output
row) — fused into the parallel axis — and each chunk of ``reg_n`` output columns, a ``reg_n x
oc_bn`` accumulator tile lives in registers (a local buffer that LLVM promotes): the reduction
over input-channel blocks, kernel rows and columns runs outside, the ``ic_bn`` loop inside, and
innermost one broadcast input value times one vector of ``oc_bn`` weights per output column
(``ow`` unrolled, ``oc`` vectorized). The epilogue (bias, residual, activation) is applied when
the tile is written out. Padded input is materialised once per call (parallel) so the inner loop
has no bounds checks.

Rows that no tile width divides, and AVX2's 4 x 3 tiles, take consecutive pixels of the
flattened output (``flat_tiles``). A task may take a group of such tiles (``tile_group``) and
the input channels one cache block at a time (``ic_block``), the accumulators in memory between
blocks: that keeps a block of weights in cache for the whole group when a task's weights exceed
L2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tessera import te
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.arith import to_poly, uses_var
from tessera.tir.expr import bits
from tessera.tir.functor import IRMutator, post_order_visit, rebuild

from . import winograd
from .common import (
    WIDTH_TAIL_PRAGMA,
    CPUInfo,
    extents,
    run_time_extents,
    static_extent,
    workload_dims,
)
from .config import ConfigSpace, ScheduleConfig, divisors, largest_divisor
from .dense import fresh_copy

TAG = "conv2d_NCHWc"
TAGS = (TAG, "depthwise_conv2d_NCHWc")
#: Most accumulator vectors of a convolution's register tile, whatever the register file.
CONV_MAX_ACCUMULATORS = 16
#: Most accumulator vectors of a flat tile (16 spilled on AArch64: each pixel of a flat tile
#: has its own input address).
FLAT_MAX_ACCUMULATORS = 12


def out_extents(conv: te.ComputeOp) -> tuple[int, int, int, int, int]:
    """``(n, oc chunks, oh, ow, oc block)`` of a blocked convolution, whether its compute is
    written over output rows or over flattened pixels (``flat_spatial``)."""
    shape = extents(conv)
    if conv.attrs.get("flat_spatial") and len(shape) == 4:
        oh, ow = conv.attrs["out_hw"]
        return shape[0], shape[1], int(oh), int(ow), shape[3]
    n, occ, oh, ow, ob = shape
    return n, occ, oh, ow, ob


@dataclass(frozen=True)
class TilePlan:
    """The default register tile of a blocked convolution: ``oc_tile`` output-channel blocks
    times ``reg_n`` output columns of one row, or ``reg_n`` consecutive pixels of the
    flattened output rows when ``flat`` (a tile may then span two rows); ``row_oc_tile x
    row_n`` is the row tile either way (what a compute over rows gets). ``cache_blocked``:
    the tile's output blocks have more weights than L2 holds, so the tiles of a task take
    their input channels one cache block at a time (:func:`conv_space`'s ``ic_block`` and
    ``tile_group`` defaults)."""

    oc_tile: int
    reg_n: int
    flat: bool
    row_n: int
    row_oc_tile: int
    cache_blocked: bool = False


def tile_plan(occ: int, oh: int, ow: int, ob: int, dtype: str, cpu: CPUInfo,
              depthwise: bool, block_weight_bytes: int = 0) -> TilePlan:
    """The register tile for an output of ``occ`` blocks of ``ob`` channels and ``oh x ow``
    pixels; ``block_weight_bytes`` is the size of one output block's weights (0: unknown).

    ``oc_tile`` weight vectors share every input broadcast. The accumulators, the weight
    vectors and the broadcast must fit the register file (16 vectors with AVX2: 2 x 6
    accumulators) and stay at most 16 (measured on Zen 5 with 32: 2 x 7 beats 1 x 14, and 28
    accumulators spill). A row that no tile width divides (7, 13, 14 columns) leaves a last
    tile that recomputes columns (7 = 4 + 4 computes 8): such outputs get flat tiles, which
    keep one register more for the pixel addresses and at most 12 accumulators (2 x 5 with
    AVX2, where 2 x 6 spilled; 2 x 8 spilled on AArch64). Measured on a Zen 1 AVX2 host,
    ResNet-50's 7x7 3x3 conv went from 62 to 69 GFLOP/s.

    With 16 vector registers a tile of 4 output blocks by 3 pixels is preferred
    (:func:`_narrow_tile`): it loads 7 vectors per 12 FMAs where 2 x 5 loads 7 per 10 and
    2 x 4 6 per 8; when the 4 blocks' weights exceed L2 it comes with cache blocking."""
    lanes = cpu.lanes_for(dtype)
    vectors_per_col = max(1, -(-ob // lanes))
    oc_tile = 2 if not depthwise and occ % 2 == 0 and vectors_per_col == 1 else 1
    weights = oc_tile * vectors_per_col
    limit = max(1, cpu.max_accumulators(weights + 1, cap=CONV_MAX_ACCUMULATORS) // weights)
    reg_n = largest_divisor(ow, limit)
    if reg_n < 4 and ow > limit:
        # awkward widths (13, 27): as few tiles as the limit allows, as even as possible, the
        # last one shifted back to end at the row's end
        tiles = -(-ow // limit)
        reg_n = -(-ow // tiles)
    if depthwise or oh == 1:
        return TilePlan(oc_tile, reg_n, False, reg_n, oc_tile)
    if _narrow_tile(occ, oh * ow, vectors_per_col, dtype, cpu, block_weight_bytes):
        return TilePlan(NARROW_OC_TILE, NARROW_PIXELS, True, reg_n, oc_tile,
                        NARROW_OC_TILE * block_weight_bytes > cpu.l2_bytes)
    if ow % reg_n == 0:
        return TilePlan(oc_tile, reg_n, False, reg_n, oc_tile)
    flat_n = max(1, cpu.max_accumulators(weights + 2, cap=FLAT_MAX_ACCUMULATORS) // weights)
    return TilePlan(oc_tile, min(flat_n, oh * ow), True, reg_n, oc_tile)


#: The flat tile of 16-register files: output blocks x consecutive pixels.
NARROW_OC_TILE, NARROW_PIXELS = 4, 3


def _narrow_tile(occ: int, pixels: int, vectors_per_col: int, dtype: str, cpu: CPUInfo,
                 block_weight_bytes: int) -> bool:
    """Whether a float32 convolution gets the 4 x 3 flat tile: on a 16-register file (AVX2)
    it fits as 12 accumulators, the 3 pixels' broadcasts and one weight vector at a time
    (no spills: ``plugins/llvm/tests/test_register_tiles.py``), and loads fewer operands per
    FMA than
    the 2 x 4 and 2 x 5 tiles (0.58 against 0.75 and 0.7), which on Zen 1 also issue twice
    as many broadcasts per FMA. A task then streams 4 output blocks' weights; where they do
    not fit in L2 (ResNet-50's 3x3 convs with 512 channels: 576 KiB), the plan is
    ``cache_blocked``.

    Measured on Zen 1 (one conv + relu against onnxruntime, 2 threads): the 1x1 convs with
    512 or more input channels gain 8 to 17%, the 3x3 ones 0 to 4%; ResNet-50's 3x3 convs
    with 512 channels lost 3 to 4% without cache blocking and gain 3 to 6% with it.
    32-register files keep the tiles measured on Zen 5."""
    return (cpu.vector_registers <= 16 and dtype == "float32" and vectors_per_col == 1
            and occ % NARROW_OC_TILE == 0 and pixels >= NARROW_PIXELS
            and block_weight_bytes > 0)


def _block_weight_bytes(conv: te.ComputeOp) -> int:
    if "block_weight_bytes" in conv.attrs:  # a Winograd convolution: its direct weights
        return int(conv.attrs["block_weight_bytes"])
    kernel = conv.attrs.get("kernel")
    if kernel is None:
        return 0
    shape = [d.value for d in kernel.shape]
    return math.prod(shape[1:]) * max(1, bits(kernel.dtype) // 8)


def conv_space(conv: te.ComputeOp, cpu: CPUInfo) -> ConfigSpace:
    """The knobs of a blocked convolution; the flat-tile choice is made before the compute is
    built (:func:`tile_plan` sets the ConvNCHWc node's ``flat_spatial``), so a compute over
    flattened pixels offers both tilings and one over rows only row tiles.

    A convolution that Winograd can compute has the knob ``template`` first; this template's
    knobs then have an effect only with ``template=direct`` (:func:`schedule_conv` and
    :func:`prefetch_plan` read them, :func:`~.winograd.schedule_winograd` none of them: it
    pads in parallel always), the Winograd knobs only with ``template=winograd``; and
    ``tile_group`` only with ``flat_tiles`` (row tiles are never grouped).

    A convolution with run-time extents has the knobs of :func:`symbolic_conv_space`."""
    if is_symbolic(conv):
        return symbolic_conv_space(conv, cpu)
    n, occ, oh, ow, ob = out_extents(conv)
    red = _reduce_extents(conv)
    space = ConfigSpace(TAG, ((n, occ, oh, ow, ob), tuple(red.values()),
                              conv.attrs.get("strides")))
    depthwise = conv.tag not in (TAG, winograd.TAG)
    block_bytes = _block_weight_bytes(conv)
    plan = tile_plan(occ, oh, ow, ob, conv.output(0).dtype, cpu, depthwise, block_bytes)
    flat = bool(conv.attrs.get("flat_spatial"))
    oc_tile, reg_n = (plan.oc_tile, plan.reg_n) if flat else (plan.row_oc_tile, plan.row_n)
    blocked = flat and plan.flat and plan.cache_blocked
    wino = winograd.eligible(conv)
    if wino:
        winograd.define_template(space, n, occ, oh, ow, ob, red["icc"] * red["ib"], cpu)
    direct = dict(winograd.DIRECT_ONLY) if wino else {}
    cands = sorted({d for d in divisors(ow) if d <= 32} | {reg_n}
                   | ({NARROW_PIXELS} if flat else set()))
    space.define("reg_n", cands, reg_n, "output columns per register tile (pixels with "
                 "flat_tiles)", when=direct)
    space.define("flat_tiles", [False, True] if flat else [False], flat and plan.flat,
                 "register tiles of consecutive pixels across output rows (a tile may span "
                 "two rows) instead of pieces of one row", when=direct)
    space.define("oc_tile", [d for d in (1, 2, 4) if occ % d == 0], oc_tile,
                 "output-channel blocks per register tile (they share each input broadcast)",
                 when=direct)
    if flat:
        tiles = -(-oh * ow // reg_n)
        group = 1
        if blocked:
            # a whole image per task, unless that leaves fewer than 4 tasks per thread
            parts = -(-4 * cpu.num_threads // (n * max(1, occ // oc_tile)))
            group = -(-tiles // parts)
        space.define("tile_group", sorted({g for g in (1, 2, 4, 8) if g <= tiles}
                                          | {group, tiles}),
                     group, "flat register tiles per parallel task; they share each "
                     "input-channel block's weights (ic_block)",
                     when={**direct, "flat_tiles": [True]})
    if "icc" in red:
        icc = red["icc"]
        # Measured on Zen 1: no gain from blocks whose weights fill half of L1 where a task's
        # weights fit in L2 (the prefetchers stream them), so the default is no blocking
        # there; where they do not fit, blocks of at most a quarter of L2
        ic_block = icc
        if blocked:
            per_icc = oc_tile * block_bytes // icc
            ic_block = largest_divisor(icc, max(1, cpu.l2_bytes // 4 // max(1, per_icc)))
        space.define("ic_block", divisors(icc), ic_block, "input-channel blocks per cache "
                     "block: a task's tiles accumulate one block at a time, in memory between "
                     "blocks (all: no blocking)", when=direct)
    # knobs a workload never reads offer their one value: the kernel-column loop of a
    # depthwise or 1-column kernel, weight prefetching of a depthwise convolution, padding of
    # an unpadded input
    space.define("unroll_kw", [False, True] if not depthwise and red.get("kw", 1) > 1
                 else [False], False, "unroll the kernel-column loop", when=direct)
    # a cache-blocked task's slice of weights fills L2 already: prefetching the next one
    # evicts it (measured on Zen 1: ResNet-50's 7x7 3x3 conv 74 -> 59 GFLOP/s)
    space.define("prefetch_weights", [False] if depthwise else [False, True],
                 occ * block_bytes > (2 << 20) and not blocked and not depthwise,
                 "prefetch the next output-channel slice's weights (weights that stream from "
                 "memory: more than 2 MiB, unless cache-blocked)", when=direct)
    space.define("pad_parallel", [True, False] if any(conv.attrs.get("pads") or ()) else [True],
                 True, "materialise padding with a parallel loop", when=direct)
    if wino:
        winograd.define_knobs(space, n, occ, oh, ow, ob, red["icc"] * red["ib"], cpu)
    return space


# -- run-time extents ---------------------------------------------------------------------------

def is_symbolic(conv: te.ComputeOp) -> bool:
    """Whether an output axis of the convolution (batch, height, width) is a run-time size."""
    return any(static_extent(a.dom.extent) is None for a in conv.axis)


#: Whether a 3x3 stride-1 convolution over run-time sizes may take the Winograd template
#: (:func:`symbolic_conv_space`; :mod:`.winograd` over run-time tile counts).
SYMBOLIC_WINOGRAD = True


def symbolic_conv_space(conv: te.ComputeOp, cpu: CPUInfo) -> ConfigSpace:
    """The knobs of a blocked convolution over run-time sizes (batch, height, width; the
    channels and the kernel are static): row tiles only (a flat tile divides by the width),
    no cache blocking or weight prefetching; an eligible 3x3 stride-1 convolution gets the
    knob ``template`` and the Winograd knobs as a static one does (:mod:`.winograd`, its
    tile count a run-time expression), chosen at the representative sizes. The register tile is
    :func:`tile_plan`'s row tile at the :func:`~.common.representative` sizes (the bounds, when
    known); over a run-time width its column count is the register file's limit (at most the
    width's bound): a fixed tile whose last, partial one :func:`schedule_conv` leaves to
    :func:`specialize_width_tails` (one copy of the tile per remainder, no guards)."""
    n, occ, oh, ow, ob = extents(conv)
    red = _reduce_extents(conv)
    space = ConfigSpace(TAG, (workload_dims(conv.axis), tuple(red.values()),
                              conv.attrs.get("strides")), extents=run_time_extents(conv.axis))
    depthwise = conv.tag not in (TAG, winograd.TAG)
    dtype = conv.output(0).dtype
    plan = tile_plan(occ, oh, ow, ob, dtype, cpu, depthwise, _block_weight_bytes(conv))
    oc_tile, reg_n = plan.row_oc_tile, plan.row_n
    wino = SYMBOLIC_WINOGRAD and winograd.eligible(conv)
    if wino:
        winograd.define_template(space, n, occ, oh, ow, ob, red["icc"] * red["ib"], cpu)
    direct = dict(winograd.DIRECT_ONLY) if wino else {}
    if static_extent(conv.axis[3].dom.extent) is None:
        weights = oc_tile * max(1, -(-ob // cpu.lanes_for(dtype)))
        limit = cpu.max_accumulators(weights + 1, cap=CONV_MAX_ACCUMULATORS) // weights
        reg_n = max(1, min(limit, ow))
    space.define("reg_n", sorted({d for d in (1, 2, 4, 6, 8, 12, 16) if d <= max(ow, reg_n)}
                                 | {reg_n}), reg_n,
                 "output columns per register tile (a run-time width: its last, partial tile "
                 "one copy per remainder)", when=direct)
    space.define("flat_tiles", [False], False, "register tiles of consecutive pixels (never "
                 "over run-time sizes)", when=direct)
    space.define("oc_tile", [d for d in (1, 2, 4) if occ % d == 0], oc_tile,
                 "output-channel blocks per register tile (they share each input broadcast)",
                 when=direct)
    space.define("unroll_kw", [False, True] if not depthwise and red.get("kw", 1) > 1
                 else [False], False, "unroll the kernel-column loop", when=direct)
    space.define("pad_parallel", [True, False] if any(conv.attrs.get("pads") or ()) else [True],
                 True, "materialise padding with a parallel loop", when=direct)
    if wino:
        # the tile at half the representative (largest) sizes, a typical size of the range:
        # F(4x4) where even that is large (F(4x4) streams 2.25 times the transformed weights,
        # which a few tiles per image do not repay: see :mod:`.winograd`'s measurements)
        winograd.define_knobs(space, n, occ, max(1, oh // 2), max(1, ow // 2), ob,
                              red["icc"] * red["ib"], cpu)
    return space


def _schedule_symbolic(s: Any, conv: te.ComputeOp, out: te.ComputeOp, cfg: ScheduleConfig,
                       pad: te.ComputeOp | None) -> None:
    """:func:`schedule_conv` over run-time sizes: the images, output-channel tiles and rows
    fused into the parallel loop (a run-time extent; the rows inside, so a task's weights
    serve consecutive rows; a batch of 8 small images is one launch of 8x the tasks, not 8
    launches: ResNet-style CNNs at batch 8 ran at 1.5-2x a static compile's time before),
    each row in tiles of ``reg_n``
    columns (the loop over them marked for :func:`specialize_width_tails` where the width is
    a run-time size), the register tile as for static sizes."""
    reg_n = int(cfg["reg_n"])
    if pad is not None:
        _schedule_pad(s, pad, cfg)
    acc, writer = _accumulator(s, conv, out)
    ws = s[writer]
    n, occ, oh, ow, ob = writer.axis
    oc_tile = int(cfg.get("oc_tile", 1))
    tile_o, tile_i = ws.split(ow, factor=reg_n)
    if static_extent(ow.dom.extent) is None:
        ws.pragma(tile_o, WIDTH_TAIL_PRAGMA, (reg_n, ow.dom.extent))
    if oc_tile > 1:
        occo, occi = ws.split(occ, factor=oc_tile)
        ws.reorder(n, occo, oh, tile_o, occi, tile_i, ob)
    else:
        occo = occ
        ws.reorder(n, occ, oh, tile_o, tile_i, ob)
    par = ws.fuse(n, occo, oh)
    ws.parallel(par)
    ws.vectorize(ob)
    # the tile written out in straight-line code, as it is accumulated (see
    # schedules.dense.schedule_dense: a loop reading the accumulator keeps it in memory)
    ws.unroll(tile_i)
    if oc_tile > 1:
        ws.unroll(occi)
    cs = s[acc]
    cs.compute_at(ws, tile_o)
    cocc, cow, cob = acc.axis[1], acc.axis[-2], acc.axis[-1]
    roles = _reduce_axes(acc)
    kh, kw = roles["kh"], roles["kw"]
    icc = roles.get("icc")
    if icc is None:  # depthwise
        cs.reorder(kh, kw, cow, cob)
    elif cfg.get("unroll_kw", False):
        cs.reorder(icc, kh, roles["ib"], kw, cocc, cow, cob)
        cs.unroll(kw)
    else:
        cs.reorder(icc, kh, kw, roles["ib"], cocc, cow, cob)
    if oc_tile > 1:
        cs.unroll(cocc)
    cs.unroll(cow)
    cs.vectorize(cob)




def specialize_width_tails(func: S.PrimFunc) -> S.PrimFunc:
    """Replace each loop over the ``ceil(n / f)`` column tiles of a run-time width ``n`` that
    :func:`schedule_conv` marked (:data:`WIDTH_TAIL_PRAGMA`) by its ``n // f`` whole tiles
    (their guards always hold: the TIR pipeline drops them) and the last, partial tile as one
    copy per remainder ``r = n % f`` in ``1 .. f - 1``, chosen at run time: in the copy for
    ``r``, with ``q = n // f`` the tile's index, each guard on the tile's columns, ``q * f +
    i < n``, is rewritten as ``q * f + i - n + (n - q * f - r) < 0``, which collects to ``i <
    r`` (a constant comparison that unrolling decides). Every column a tile computes is in the
    row (none is computed twice: an epilogue may read what the output overwrites).

    Run on ``te.lower``'s loop nest, before the TIR pipeline; a guard whose width is not the
    mark's expression keeps its run-time test. Functions without marks come back unchanged."""
    found: list[S.For] = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, S.For)
                     and WIDTH_TAIL_PRAGMA in n.annotations else None)
    if not found:
        return func
    return func.with_body(_WidthTails().visit(func.body))


class _WidthTails(IRMutator):
    def visit_For(self, s: S.For) -> S.Stmt:
        spec = s.annotations.get(WIDTH_TAIL_PRAGMA)
        if spec is None:
            return rebuild(s, self.visit)
        body = self.visit(s.body)
        notes = {k: v for k, v in s.annotations.items() if k != WIDTH_TAIL_PRAGMA}
        f, n = int(spec[0]), spec[1]
        v = s.loop_var
        if not (isinstance(s.min, E.IntImm) and s.min.value == 0) or f < 2:
            return S.For(v, s.min, s.extent, s.kind, body, s.thread_tag, notes)
        n = E.cast(v.dtype, n) if n.dtype != v.dtype else n
        tiles = E.FloorDiv(n, E.IntImm(f, n.dtype))
        whole = S.For(v, E.IntImm(0, v.dtype), tiles, s.kind, body, s.thread_tag, notes)
        q = E.Var(f"{v.name}_last", v.dtype)
        rem = E.FloorMod(n, E.IntImm(f, n.dtype))
        chain: S.Stmt | None = None
        for r in range(f - 1, 0, -1):
            zero = n - (q * f + r)  # zero where this copy runs
            copy = _Guards(q, zero).visit(fresh_copy(body, {v: q}))
            chain = S.IfThenElse(E.EQ(rem, E.IntImm(r, n.dtype)), copy, chain)
        assert chain is not None
        return S.seq(whole, S.LetStmt(q, tiles, chain))


class _Guards(IRMutator):
    """Each integer comparison conjunct of ``if``/``select`` conditions that uses ``var``
    with ``zero`` added to its left side and its terms collected (a comparison that becomes
    constant is decided; true conjuncts are dropped, an ``if`` that becomes true is its
    body, one that becomes false its ``else``)."""

    def __init__(self, var: E.Var, zero: E.PrimExpr) -> None:
        self.var, self.zero = var, zero

    def fix(self, c: E.PrimExpr) -> E.PrimExpr:
        ops = {E.LT: lambda x, y: x < y, E.LE: lambda x, y: x <= y,
               E.GT: lambda x, y: x > y, E.GE: lambda x, y: x >= y}
        op = ops.get(type(c))
        if op is None or not uses_var(c, self.var) or not E.is_int(c.a.dtype) or c.a.lanes != 1:
            return c
        zero = self.zero if self.zero.dtype == c.a.dtype else E.cast(c.a.dtype, self.zero)
        p = to_poly(c.a - c.b + zero)
        k = p.const
        p.const = 0
        if p.is_const():
            return E.IntImm(int(op(0, -k)), "bool")
        return type(c)(p.to_expr(), E.IntImm(-k, c.a.dtype))

    def cond(self, c: E.PrimExpr) -> E.PrimExpr:
        parts = [self.fix(x) for x in E.conjuncts(c)]
        if any(isinstance(x, E.IntImm) and not x.value for x in parts):
            return E.IntImm(0, "bool")
        return E.all_of(*(x for x in parts if not (isinstance(x, E.IntImm) and x.value)))

    def visit_IfThenElse(self, s: S.IfThenElse) -> S.Stmt:
        c = self.cond(s.condition)
        then, other = self.visit(s.then_case), self.visit(s.else_case)
        if isinstance(c, E.IntImm):
            return then if c.value else (other or S.Evaluate(E.IntImm(0, "int32")))
        return S.IfThenElse(c, then, other)

    def visit_For(self, s: S.For) -> S.Stmt:
        """``for i in range(c): [for ...:] if i < k && rest: body`` (``k`` a constant, the
        inner loops' bodies nothing but the ``if``) runs ``min(c, k)`` times, guarded by
        ``rest`` only (the partial tile's columns written out)."""
        s = rebuild(s, self.visit)
        chain = [s]
        node = s.body
        while isinstance(node, S.For):
            chain.append(node)
            node = node.body
        if not (isinstance(node, S.IfThenElse) and node.else_case is None
                and isinstance(s.extent, E.IntImm) and isinstance(s.min, E.IntImm)
                and s.min.value == 0):
            return s
        parts = E.conjuncts(node.condition)
        limit = next((x for x in parts if isinstance(x, E.LT) and x.a is s.loop_var
                      and isinstance(x.b, E.IntImm)), None)
        if limit is None:
            return s
        rest = [y for y in parts if y is not limit]
        inner: S.Stmt = node.then_case if not rest else S.IfThenElse(E.all_of(*rest),
                                                                    node.then_case)
        for loop in reversed(chain[1:]):
            inner = S.For(loop.loop_var, loop.min, loop.extent, loop.kind, inner,
                          loop.thread_tag, loop.annotations)
        extent = E.IntImm(max(0, min(s.extent.value, limit.b.value)), s.extent.dtype)
        return S.For(s.loop_var, s.min, extent, s.kind, inner, s.thread_tag, s.annotations)

    def visit_Select(self, e: E.Select) -> E.PrimExpr:
        c = self.cond(e.condition)
        t, f = self.visit(e.true_value), self.visit(e.false_value)
        if isinstance(c, E.IntImm):
            return t if c.value else f
        return E.Select(c, t, f)


def _schedule_pad(s: Any, pad: te.ComputeOp, cfg: ScheduleConfig) -> None:
    """The padded input, materialised once per call: images, channel blocks and rows fused
    (in parallel with ``pad_parallel``), the channel block vectorized when it is a vector."""
    ps = s[pad]
    pax = list(pad.axis)
    fused = ps.fuse(*pax[:3])
    if cfg.get("pad_parallel", True):
        ps.parallel(fused)
    if static_extent(pad.axis[-1].dom.extent) in (4, 8, 16, 32, 64):
        ps.vectorize(pax[-1])


def _accumulator(s: Any, conv: te.ComputeOp, out: te.ComputeOp
                 ) -> tuple[te.ComputeOp, te.ComputeOp]:
    """(the stage accumulating the convolution's register tile, the stage writing it out):
    a local cache of ``conv`` when it is the output, else ``conv`` itself, made local, under
    its epilogue ``out``."""
    if out is conv:
        return s.cache_write(conv.output(0), "local").op, conv
    s[conv].set_scope("local")
    return conv, out


def find_conv(ops: list[te.ComputeOp]) -> te.ComputeOp | None:
    for op in ops:
        if op.tag in TAGS:
            return op
    return None


def _reduce_extents(conv: te.ComputeOp) -> dict[str, int]:
    """The extents of the reduce axes by role (:func:`_reduce_axes`); a Winograd convolution
    gives those of the direct convolution it replaces (attr ``reduce_extents``)."""
    if "reduce_extents" in conv.attrs:
        return dict(zip(("icc", "kh", "kw", "ib"), conv.attrs["reduce_extents"]))
    return {k: a.dom.extent.value for k, a in _reduce_axes(conv).items()}


def _reduce_axes(conv: te.ComputeOp) -> dict[str, Any]:
    """The reduce axes by role: input-channel block ``icc``, kernel row ``kh`` and column
    ``kw``, channel lane ``ib`` (depthwise convolutions have only ``kh`` and ``kw``)."""
    names = conv.attrs.get("reduce_roles") or ("icc", "kh", "kw", "ib")
    return dict(zip(names, conv.reduce_axis))


def prefetch_plan(conv: te.ComputeOp, cfg: ScheduleConfig) -> tuple[str, int, int, int] | None:
    """(weight name, slices, elements per slice, tasks per slice) for
    :func:`tessera_llvm.prefetch.prefetch_next_slice`, when the config asks for weight
    prefetching: a slice is the ``oc_tile`` output-channel blocks one parallel task computes,
    and the tasks of a slice are its output rows."""
    kernel = conv.attrs.get("kernel")
    if not cfg.get("prefetch_weights") or kernel is None or conv.tag != TAG:
        return None
    shape = [d.value for d in kernel.shape]
    oc_tile = int(cfg.get("oc_tile", 1))
    _, occ, oh, ow, _ = out_extents(conv)
    per_block = math.prod(shape[1:])
    if cfg.get("flat_tiles"):
        tiles = -(-oh * ow // int(cfg["reg_n"]))
        tasks = -(-tiles // int(cfg.get("tile_group", 1)))
    else:
        tasks = oh
    return kernel.name, occ // oc_tile, oc_tile * per_block, tasks


def schedule_conv(s: Any, conv: te.ComputeOp, out: te.ComputeOp, cfg: ScheduleConfig,
                  pad: te.ComputeOp | None) -> None:
    """Apply the schedule: ``out`` is the last stage of the epilogue (``conv`` itself when
    there is none)."""
    if is_symbolic(conv):
        _schedule_symbolic(s, conv, out, cfg, pad)
        return
    reg_n = int(cfg["reg_n"])
    if pad is not None:
        _schedule_pad(s, pad, cfg)
    acc, writer = _accumulator(s, conv, out)
    ws = s[writer]
    n, occ, oh, ow, ob = writer.axis
    oc_tile = int(cfg.get("oc_tile", 1))
    flat = bool(cfg.get("flat_tiles"))
    group = int(cfg.get("tile_group", 1)) if flat else 1
    if flat:
        # consecutive pixels of the flattened output rows (every tile but the last is full);
        # groups of ``tile_group`` tiles are the parallel tasks
        tile_o, tile_i = ws.split(ws.fuse(oh, ow), factor=reg_n)
        rows = []
        if group > 1:
            grp, tile_o = ws.split(tile_o, factor=group)
            rows = [grp]
    else:
        tile_o, tile_i = ws.split(ow, factor=reg_n)
        rows = [oh]
    if oc_tile > 1:
        occo, occi = ws.split(occ, factor=oc_tile)
        ws.reorder(n, occo, *rows, tile_o, occi, tile_i, ob)
        outer = [n, occo, *rows]
    else:
        ws.reorder(n, occ, *rows, tile_o, tile_i, ob)
        outer = [n, occ, *rows]
    par = ws.fuse(*outer, tile_o) if flat and group == 1 else ws.fuse(*outer)
    ws.parallel(par)
    ws.vectorize(ob)
    cs = s[acc]
    # the accumulator's axes: (n, occ, pixel, ob) for a flat compute, else (n, occ, oh, ow, ob)
    cocc, cow, cob = acc.axis[1], acc.axis[-2], acc.axis[-1]
    roles = _reduce_axes(acc)
    kh, kw = roles["kh"], roles["kw"]
    icc = roles.get("icc")
    blocked = (icc is not None
               and int(cfg.get("ic_block", icc.dom.extent.value)) < icc.dom.extent.value)
    outer_red = []
    if blocked or group > 1:
        # the accumulators of the task's row or tiles (in memory) take one input-channel
        # block at a time; each register tile loads, accumulates the block and stores them
        cs.compute_at(ws, par)
        tile_co, cow = cs.split(cow, factor=reg_n)
        outer_red = [tile_co]
        if blocked:
            icco, icc = cs.split(icc, factor=int(cfg["ic_block"]))
            outer_red.insert(0, icco)
    else:
        cs.compute_at(ws, par if flat else tile_o)
    if icc is None:  # depthwise
        cs.reorder(kh, kw, cow, cob)
    elif cfg.get("unroll_kw", False):
        cs.reorder(*outer_red, icc, kh, roles["ib"], kw, cocc, cow, cob)
        cs.unroll(kw)
    else:
        cs.reorder(*outer_red, icc, kh, kw, roles["ib"], cocc, cow, cob)
    if oc_tile > 1:
        cs.unroll(cocc)
    cs.unroll(cow)
    cs.vectorize(cob)
