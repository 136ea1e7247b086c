"""The x86/AArch64 schedule of Winograd convolution (:mod:`tessera.topi.nn.winograd`), a
template choice of the blocked convolution's config space (knob ``template``).

Eligible convolutions: ``conv2d_NCHWc``, 3x3, stride 1, dilation 1, one group, float32, data
blocked like the weights' input channels. Their space (:func:`~.conv2d.conv_space`) gets the
knobs of :func:`define_knobs` on top of the direct template's; with ``template=winograd`` the
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
"""

from __future__ import annotations

from typing import Any

from tessera import te

from .common import CPUInfo
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
    """The tiles per register tile: at most ``limit``, wasting the fewest rounded-up tiles
    (ties: the widest)."""
    best, waste = 1, tiles
    for r in range(1, max(1, limit) + 1):
        w = -(-tiles // r) * r - tiles
        if w < waste or (w == waste and r > best):
            best, waste = r, w
    return best


def default_template(n: int, occ: int, oh: int, ow: int, ob: int, channels_in: int) -> str:
    """The template a shape gets without tuning records (see the measurements in
    :func:`define_knobs`)."""
    return "direct"


def define_knobs(space: ConfigSpace, n: int, occ: int, oh: int, ow: int, ob: int,
                 channels_in: int, cpu: CPUInfo) -> None:
    """The Winograd knobs of an eligible convolution's space."""
    space.define("template", ["direct", "winograd"],
                 default_template(n, occ, oh, ow, ob, channels_in),
                 "direct convolution or Winograd F(m x m, 3 x 3) (3x3, stride 1 only)")
    m = 2
    space.define("winograd_tile", [2, 4], m, "Winograd output tile m (F(m x m, 3 x 3))")
    lanes = cpu.lanes_for("float32")
    vectors = max(1, -(-ob // lanes))
    oc_tile = 2 if occ % 2 == 0 and vectors == 1 else 1
    space.define("winograd_oc_tile", [d for d in (1, 2, 4) if occ % d == 0], oc_tile,
                 "output-channel blocks per register tile of the Winograd product")
    weights = oc_tile * vectors
    limit = max(1, cpu.max_accumulators(weights + 1, cap=MAX_ACCUMULATORS) // weights)
    reg_n = default_reg_n(tile_count(n, oh, ow, m), limit)
    space.define("winograd_reg_n", sorted({2, 4, 6, 8, 12, 14, 16, reg_n}), reg_n,
                 "tiles per register tile of the Winograd product (the tile count is rounded "
                 "up to a multiple)")


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
    sr.unroll(r_eps)
    sr.unroll(r_s)
    sr.vectorize(r_ib)

    # the batched product: register tiles of oc_tile blocks x reg_n tiles per position
    reg_n = int(cfg.get("winograd_reg_n", 8))
    oc_tile = int(cfg.get("winograd_oc_tile", 1))
    acc = s.cache_write(prod.output(0), "local").op
    sp = s[prod]
    eps, nu, occ, tile, ob = prod.axis
    occo, occi = sp.split(occ, factor=oc_tile)
    to, ti = sp.split(tile, factor=reg_n)
    sp.reorder(eps, nu, occo, to, occi, ti, ob)
    par = sp.fuse(eps, nu, occo, to)
    sp.parallel(par)
    sp.vectorize(ob)
    sa = s[acc]
    sa.compute_at(sp, par)
    _, _, a_occ, a_tile, a_ob = acc.axis
    r_icc, r_ib = acc.reduce_axis
    sa.reorder(r_icc, r_ib, a_occ, a_tile, a_ob)
    sa.unroll(a_occ)
    sa.unroll(a_tile)
    sa.vectorize(a_ob)

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
    so.unroll(o_axes[4])
    so.unroll(o_axes[5])
    so.vectorize(o_axes[6])
