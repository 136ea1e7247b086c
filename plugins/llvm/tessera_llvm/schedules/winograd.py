"""The x86/AArch64 schedule of Winograd convolution (:mod:`tessera.topi.nn.winograd`), a
template choice of the blocked convolution's config space (knob ``template``).

Eligible convolutions: ``conv2d_NCHWc``, 3x3, stride 1, dilation 1, one group, float32, data
blocked like the weights' input channels. Their space (:func:`~.conv2d.conv_space`) gets the
knob ``template`` first (:func:`define_template`), the direct template's knobs, which have an
effect only with ``template=direct``, and the knobs of :func:`define_knobs`, which have one
only with ``template=winograd`` (``when``: a tuner does not measure one kernel under the
other template's knobs' values); with ``template=winograd`` the
llvm lowering (:func:`tessera_llvm.lowering.lower_group`) rebuilds the group with the weights
transformed at compile time and this schedule applies:

* the padded input: one parallel pass, the channel block as a vector;
* the input transform, parallel over (input-channel block, tile): ``B^T d`` of the tile into
  ``alpha x alpha`` vectors (a local buffer LLVM keeps in registers), then ``(B^T d) B`` stored
  to ``V``; both unrolled over the transform indices, vectorized over the channel block;
* the batched matrix product, the hot part, scheduled like the direct convolution's
  micro-kernel: for each transform position, ``oc_tile`` output-channel blocks times
  ``reg_n`` tiles of accumulators in registers, over the input channels, one broadcast of
  ``V`` times ``oc_tile`` vectors of ``U`` per step (``winograd_oc_tile``,
  ``winograd_reg_n``); the tile count is rounded up to a multiple of ``reg_n`` so no tile of
  the product has a tail;
* the output transform fused with the epilogue: per (image, output-channel block, tile row)
  task and tile, ``A^T M`` into ``m x alpha`` vectors, then ``(A^T M) A`` with the bias,
  residual and activation applied as the ``m x m`` outputs are stored.

Over run-time batch, height or width (a symbolic module) the same schedule applies to the
compute's run-time form (:func:`tessera.topi.nn.winograd.conv2d_winograd_NCHWc`): the tile
rows, columns and count are expressions of the sizes; the product walks the tiles ``reg_n``
at a time, its last, partial group of tiles one copy per remainder
(:func:`~.conv2d.specialize_width_tails`: no guard in its loops), and the output's split into
``m x m`` tiles guards the stores of the partial last tiles (only pixels inside are stored).
Those copies and guards make a symbolic CNN's code large: the serving CNN's compile takes
about 19 s against 8 s without Winograd (a static compile: about 2 s).
The knobs are chosen at the representative sizes (:func:`~.conv2d.symbolic_conv_space`).
"""

from __future__ import annotations

from typing import Any

from tessera import te

from .common import WIDTH_TAIL_PRAGMA, CPUInfo, static_extent
from .config import ConfigSpace, ScheduleConfig

TAG = "conv2d_NCHWc_winograd"
#: The stages of a Winograd convolution, by tag.
STAGES = ("winograd_input_rows", "winograd_input", "winograd_gemm", "winograd_output_rows")
#: Most accumulator vectors of the product's register tile (as the direct convolution's).
MAX_ACCUMULATORS = 16


def eligible(conv: te.ComputeOp) -> bool:
    """Whether a blocked convolution (direct or Winograd) can be computed by Winograd."""
    a = conv.attrs
    if conv.tag == TAG:
        return True
    return (conv.tag == "conv2d_NCHWc" and tuple(a.get("kernel_size", ())) == (3, 3)
            and tuple(a.get("strides", ())) == (1, 1) and tuple(a.get("dilation", ())) == (1, 1)
            and a.get("groups") == 1 and conv.output(0).dtype == "float32"
            and a.get("data") is not None and a["data"].dtype == "float32"
            and a.get("data_block") == a.get("ic_bn"))


def tile_count(n: int, oh: int, ow: int, m: int) -> int:
    return n * -(-oh // m) * -(-ow // m)


def default_reg_n(tiles: int, limit: int) -> int:
    """The tiles per register tile: from half of ``limit`` to ``limit`` (all the tiles when
    there are fewer), the one that rounds the tile count up the least (ties: the widest)."""
    limit = max(1, limit)
    if tiles <= limit:
        return tiles
    best, waste = limit, tiles
    for r in range(limit, max(1, limit // 2) - 1, -1):
        w = -(-tiles // r) * r - tiles
        if w < waste:
            best, waste = r, w
    return best


# Measured on this project's 2-core Zen 4 (AVX-512, 1 MiB L2 per core, a shared 32 MiB L3),
# 2 threads, conv 3x3 pad 1 + bias + relu, batch 1, ms per call, median of 15 (first four
# rows) or 9 interleaved rounds (benchmarks/winograd_layers.py; other jobs ran on the machine
# at times, see below):
#
#   in x size x out     direct    F(2x2)   F(4x4)
#   64 x 56 x 64         1.067     0.631    0.356    ResNet-50's 3x3 stride-1 layers
#   128 x 28 x 128       1.031     0.518    0.301
#   256 x 14 x 256       1.026     0.485    0.477
#   512 x 7 x 512        1.061     0.646    0.992
#   64 x 7 x 64          0.022     0.020    0.025
#   64 x 14 x 64         0.072     0.047    0.050
#   64 x 28 x 64         0.270     0.158    0.102
#   128 x 14 x 128       0.268     0.156    0.148
#   128 x 56 x 128       4.11      2.27     1.33
#   256 x 28 x 256       4.32      2.28     1.41
#   512 x 14 x 512       4.19      2.25     2.43
#   512 x 28 x 512       16.7      8.5      5.0
#   64 x 112 x 64        4.22      2.74     1.92
#   48 x 28 x 48         0.157     0.106    0.068
#   32 x 56 x 32         0.273     0.170    0.116    (0.315, 0.67, 0.43 in a busy period)
#   64 x 56 x 32         0.612     1.14     0.53     (busy period)
#   32 x 14 x 32         0.028     0.054    0.056
#   16 x 56 x 16         0.071     0.082    0.058    (0.071, 0.092, 0.071 in a busy period)
#   8 x 56 x 64          0.141     0.142    0.093
#   3 x 56 x 64          0.060     0.126    0.086
#   16 x 112 x 32        0.53      1.50     0.97
#
# Winograd's transformed tiles (up to 4 times the input for F(2x2), 2.25 times for F(4x4))
# pass through L3: in periods when other jobs on the machine loaded the caches and memory,
# the 64 x 56 x 64 layer took 0.75 to 0.9 ms with F(4x4) against 1.2 ms direct, and layers
# with fewer than 64 channels lost to the direct convolution. The rule on 16-lane CPUs:
# Winograd where the input and the output have at least 64 channels (it won on every such
# shape measured, in quiet and busy periods), F(4x4) where the output is at least 16 x 16 (no
# tile wasted at 28 and 56, and the 2.25 times larger transformed weights are shared by many
# tiles), F(2x2) below (at 7 x 7 F(4x4) computes 8 x 8 and streams 36 transformed weight
# matrices for 4 tiles; at 14 x 14 the two are even).
#
# AVX2 code (8 lanes, 16 registers: -mcpu=znver3 on the same Zen 4, which runs 256-bit FMAs
# at the rate a Zen 3 does; benchmarks/winograd_layers.py --mcpu znver3, medians of 9-11
# interleaved rounds, ms):
#
#   in x size x out     direct    F(2x2)   F(4x4)
#   64 x 56 x 64         1.140     0.722    0.402
#   128 x 28 x 128       1.116     0.558    0.346
#   256 x 14 x 256       1.118     0.512    0.507
#   512 x 7 x 512        1.139     0.701    0.670
#   64 x 7 x 64          0.024     0.022    0.015
#   64 x 14 x 64         0.078     0.057    0.052
#   64 x 28 x 64         0.291     0.188    0.109
#   128 x 14 x 128       0.294     0.148    0.147
#   48 x 28 x 48         0.168     0.126    0.075
#   32 x 56 x 32         0.319     0.209    0.133
#   64 x 56 x 32         0.622     0.422    0.226
#   128 x 56 x 128       4.403     2.385    1.412
#   256 x 28 x 256       4.397     2.116    1.283
#   512 x 14 x 512       4.488     2.145    2.387
#
# The direct convolution reaches about 90% of the AVX2 peak, half the AVX-512 rate, so the
# transforms' memory traffic weighs less against the product's saving: Winograd won on every
# shape measured with at least 32 channels, and F(4x4) on all but 512 channels at 14 x 14.
# The rule on 8-lane CPUs: Winograd from 32 channels in and out; F(4x4) except below 16 x 16
# with 256 or more input channels. Narrower vectors (NEON's 4 lanes) are not measured: they
# keep the direct convolution unless tuning records choose Winograd.

#: The fewest input and output channels for which a CPU of this many float32 lanes gets
#: Winograd by default (measurements above); lane counts not listed keep the direct
#: convolution.
MIN_CHANNELS = {16: 64, 8: 32}


def default_template(n: int, occ: int, oh: int, ow: int, ob: int, channels_in: int,
                     cpu: CPUInfo) -> str:
    """The template a shape gets without tuning records (measurements above)."""
    least = MIN_CHANNELS.get(cpu.vector_lanes)
    if least is None:
        return "direct"
    return "winograd" if channels_in >= least and occ * ob >= least else "direct"


def default_tile(oh: int, ow: int, channels_in: int = 0, lanes: int = 16) -> int:
    """The output tile m a Winograd convolution gets without tuning records (measurements
    above)."""
    if min(oh, ow) >= 16:
        return 4
    return 4 if lanes < 16 and channels_in < 256 else 2


#: The condition of the knobs that only the direct template reads, and of the Winograd knobs.
DIRECT_ONLY = {"template": ["direct"]}
WINOGRAD_ONLY = {"template": ["winograd"]}


def define_template(space: ConfigSpace, n: int, occ: int, oh: int, ow: int, ob: int,
                    channels_in: int, cpu: CPUInfo) -> None:
    """The knob that chooses the template of an eligible convolution (before the knobs of
    either template: their conditions name it)."""
    space.define("template", ["direct", "winograd"],
                 default_template(n, occ, oh, ow, ob, channels_in, cpu),
                 "direct convolution or Winograd F(m x m, 3 x 3) (3x3, stride 1 only)")


def define_knobs(space: ConfigSpace, n: int, occ: int, oh: int, ow: int, ob: int,
                 channels_in: int, cpu: CPUInfo) -> None:
    """The Winograd knobs of an eligible convolution's space (after ``template``): only
    :func:`schedule_winograd` and the Winograd lowering read them."""
    m = default_tile(oh, ow, channels_in, cpu.vector_lanes)
    space.define("winograd_tile", [2, 4], m, "Winograd output tile m (F(m x m, 3 x 3))",
                 when=WINOGRAD_ONLY)
    lanes = cpu.lanes_for("float32")
    vectors = max(1, -(-ob // lanes))
    oc_tile = 2 if occ % 2 == 0 and vectors == 1 else 1
    space.define("winograd_oc_tile", [d for d in (1, 2, 4) if occ % d == 0], oc_tile,
                 "output-channel blocks per register tile of the Winograd product",
                 when=WINOGRAD_ONLY)
    weights = oc_tile * vectors
    limit = max(1, cpu.max_accumulators(weights + 1, cap=MAX_ACCUMULATORS) // weights)
    reg_n = default_reg_n(tile_count(n, oh, ow, m), limit)
    space.define("winograd_reg_n", sorted({2, 4, 6, 8, 12, 14, 16, reg_n}), reg_n,
                 "tiles per register tile of the Winograd product (the tile count is rounded "
                 "up to a multiple)", when=WINOGRAD_ONLY)


def find_winograd(ops: list[te.ComputeOp]) -> te.ComputeOp | None:
    for op in ops:
        if op.tag == TAG:
            return op
    return None


def schedule_winograd(s: Any, conv: te.ComputeOp, ops: list[te.ComputeOp],
                      out: te.ComputeOp, cfg: ScheduleConfig) -> None:
    """Apply the schedule to the stages of the Winograd convolution ``conv`` (its output stage)
    whose epilogue ends in ``out`` (``conv`` itself when there is none); ``ops`` are the
    group's computes."""
    m = int(conv.attrs["tile"])
    stages = {op.tag: op for op in ops if op.tag in STAGES}
    rows, v = stages["winograd_input_rows"], stages["winograd_input"]
    prod, out_rows = stages["winograd_gemm"], stages["winograd_output_rows"]
    pad = conv.attrs.get("data_pad")
    if pad is not None:
        ps = s[pad.op]
        pax = list(pad.op.axis)
        ps.parallel(ps.fuse(*pax[:3]))
        ps.vectorize(pax[-1])

    # input transform: parallel over (input-channel block, tile)
    sv = s[v]
    eps, nu, icc, tile, ib = v.axis
    sv.reorder(icc, tile, eps, nu, ib)
    par = sv.fuse(icc, tile)
    sv.parallel(par)
    sv.unroll(eps)
    sv.unroll(nu)
    sv.vectorize(ib)
    sr = s[rows]
    sr.set_scope("local")
    sr.compute_at(sv, par)
    _, _, r_eps, r_s, r_ib = rows.axis
    # the index a stage's select picks by innermost: its unrolled copies fold first
    sr.reorder(r_s, r_eps, r_ib)
    sr.unroll(r_eps)
    sr.unroll(r_s)
    sr.vectorize(r_ib)

    # the batched product: register tiles of oc_tile blocks x reg_n tiles per position
    reg_n = int(cfg.get("winograd_reg_n", 8))
    oc_tile = int(cfg.get("winograd_oc_tile", 1))
    _schedule_product(s, prod, reg_n, oc_tile,
                      runtime=static_extent(prod.axis[3].dom.extent) is None)
    _schedule_output(s, conv, ops, out, pad, out_rows, m)


def _schedule_product(s: Any, prod: te.ComputeOp, reg_n: int, oc_tile: int,
                      runtime: bool = False) -> None:
    """The batched product: register tiles of ``oc_tile`` output blocks x ``reg_n`` tiles,
    parallel over (position, output-channel tile, tile group). Over a run-time tile count
    (``runtime``) the tile groups run inside each task instead, the last, partial group one
    copy per remainder (:func:`~.conv2d.specialize_width_tails`, no guards)."""
    acc = s.cache_write(prod.output(0), "local").op
    sp = s[prod]
    eps, nu, occ, tile, ob = prod.axis
    occo, occi = sp.split(occ, factor=oc_tile)
    to, ti = sp.split(tile, factor=reg_n)
    sp.reorder(eps, nu, occo, to, occi, ti, ob)
    par = sp.fuse(eps, nu, occo) if runtime else sp.fuse(eps, nu, occo, to)
    sp.parallel(par)
    if runtime:
        sp.pragma(to, WIDTH_TAIL_PRAGMA, (reg_n, tile.dom.extent))
    sp.vectorize(ob)
    sa = s[acc]
    sa.compute_at(sp, to if runtime else par)
    _, _, a_occ, a_tile, a_ob = acc.axis
    r_icc, r_ib = acc.reduce_axis
    sa.reorder(r_icc, r_ib, a_occ, a_tile, a_ob)
    sa.unroll(a_occ)
    sa.unroll(a_tile)
    sa.vectorize(a_ob)


def _schedule_output(s: Any, conv: te.ComputeOp, ops: list[te.ComputeOp], out: te.ComputeOp,
                     pad: Any, out_rows: te.ComputeOp, m: int) -> None:
    # output transform and epilogue: per (image, output-channel block, tile row) task
    for op in ops:
        if op is not out and not op.reduce_axis and op.tag not in STAGES \
                and (pad is None or op is not pad.op):
            s[op].compute_inline()
    ws = s[out]
    n, occ, oh, ow, ob = out.axis
    th, mh = ws.split(oh, factor=m)
    tw, mw = ws.split(ow, factor=m)
    ws.reorder(n, occ, th, tw, mh, mw, ob)
    ws.parallel(ws.fuse(n, occ, th))
    ws.unroll(mh)
    ws.unroll(mw)
    ws.vectorize(ob)
    so = s[out_rows]
    so.set_scope("local")
    so.compute_at(ws, tw)
    o_axes = out_rows.axis
    so.reorder(o_axes[5], o_axes[4], o_axes[6])
    so.unroll(o_axes[4])
    so.unroll(o_axes[5])
    so.vectorize(o_axes[6])
