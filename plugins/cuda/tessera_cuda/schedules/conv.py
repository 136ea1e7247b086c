"""Direct 2-D convolutions (NCHW, one group) tiled through shared memory.

Each block computes ``toc * ty`` output channels over a ``bh x bw`` patch of output positions
of one image (``blockIdx.z`` = image x channel block, ``blockIdx.y`` / ``blockIdx.x`` = the
patch's row and column). Its threads are ``ty`` rows over the channels (``threadIdx.y``) by
``bh * bw`` columns over the positions (``threadIdx.x``, consecutive positions of a row on
consecutive threads, so global loads of a row and the final stores coalesce); each thread
accumulates ``toc`` output channels of one position in registers (``local``, unrolled). The
reduction runs over the input channels in steps of ``bk``: per step the block's threads fetch
the step's input patch (``bk`` channels x the patch's receptive field, padding included: the
padded input is computed by the fetch) and the ``toc * ty x bk x kh x kw`` weights into shared
memory cooperatively, a barrier, then every thread's ``bk * kh * kw * toc`` products from
shared memory. Each input value read from shared memory serves ``toc`` products and each weight
``bh * bw`` threads' products.

Every tile size divides its axis (the knobs offer divisors only), so no block has a partial
tile: the shared regions keep their size at the edges and no guard is needed. The fused
epilogue (bias, activation, residual) is the output stage, computed from the register tile.

The tiles are chosen from divisors of static extents: a convolution with a run-time extent
(a region compiled for every size) is not this template's (:func:`find_conv` passes it by);
the cuda backend refuses such convolutions before lowering
(:func:`tessera_cuda.backend.check_symbolic_ops`).
"""

from __future__ import annotations

from typing import Any

from tessera import te
from tessera.plugin.space import ConfigSpace, ScheduleConfig

from .common import BLOCK_X, BLOCK_Y, BLOCK_Z, THREAD_X, THREAD_Y, GPUInfo, extents, is_symbolic
from .dense import cooperative_fetch

TAGS = ("conv2d_nchw",)

#: Most output positions per block (the threads along x).
MAX_POSITIONS = 128


def _divisors(n: int, cap: int) -> list[int]:
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


def find_conv(ops: list[te.ComputeOp]) -> te.ComputeOp | None:
    """The group's 2-D one-group convolution, when it has a float type, a 4-D output and
    static extents."""
    for op in ops:
        if op.tag in TAGS and len(op.axis) == 4 and len(op.reduce_axis) == 3 and \
                str(op.output(0).dtype) == "float32" and not is_symbolic(op):
            return op
    return None


def shared_floats(conv: te.ComputeOp, toc: int, ty: int, bh: int, bw: int, bk: int) -> int:
    """The floats a block keeps in shared memory: the input patch and the weights of a step."""
    _, kh, kw = (int(r.dom.extent.value) for r in conv.reduce_axis)
    sh, sw = (tuple(conv.attrs.get("strides", (1, 1))) + (1, 1))[:2]
    dh, dw = (tuple(conv.attrs.get("dilation", (1, 1))) + (1, 1))[:2]
    rows = (bh - 1) * sh + (kh - 1) * dh + 1
    cols = (bw - 1) * sw + (kw - 1) * dw + 1
    return bk * rows * cols + toc * ty * bk * kh * kw


def conv_space(conv: te.ComputeOp, gpu: GPUInfo) -> ConfigSpace:
    """The knobs, with defaults a block of at most 256 threads (and the device's limit), 64
    output positions and 16 to 32 output channels, whose shared tiles fit the device, and
    blocks enough to give every multiprocessor one where the tensor allows it."""
    n, oc, oh, ow = extents(conv)
    ic, kh, kw = (int(r.dom.extent.value) for r in conv.reduce_axis)
    attrs = conv.attrs
    space = ConfigSpace("cuda_conv2d_direct",
                        ((n, oc, oh, ow), ic, kh, kw, tuple(attrs.get("strides", ())),
                         tuple(attrs.get("dilation", ())), str(conv.output(0).dtype)))
    threads = min(gpu.max_threads_per_block, 256)
    tocs = _divisors(oc, 8)
    toc = max(d for d in tocs if d <= 4)
    bws = _divisors(ow, 32)
    bw = max(d for d in bws if d <= min(16, threads))
    bhs = [d for d in _divisors(oh, MAX_POSITIONS) if d * bw <= MAX_POSITIONS]
    bh = max(d for d in bhs if d * bw <= min(64, threads))
    tys = _divisors(oc // toc, 32)
    ty = max(d for d in tys if d <= 8 and d * bh * bw <= threads)
    # fill the device: while the grid has fewer blocks than multiprocessors (the deep layers
    # of a batch-1 network), give blocks fewer channel rows, then fewer output rows, then
    # fewer channels per thread, keeping at least a warp per block
    def blocks() -> int:
        return n * (oc // (toc * ty)) * (oh // bh) * (ow // bw)

    while blocks() < gpu.multiprocessors:
        if ty > 1 and (ty // 2) * bh * bw >= gpu.warp_size and (oc // toc) % (ty // 2) == 0:
            ty //= 2
        elif bh > 1 and min(d for d in bhs if d < bh or d == 1) * bw * ty >= gpu.warp_size:
            bh = max(d for d in bhs if d < bh)
        elif toc > 1:
            toc = max(d for d in tocs if d < toc)
            tys = _divisors(oc // toc, 32)
        else:
            break
    bks = _divisors(ic, 32)
    bk = max(d for d in bks if d <= 8)
    limit = gpu.max_shared_bytes // 4
    while shared_floats(conv, toc, ty, bh, bw, bk) > limit and bk > 1:
        bk = max(d for d in bks if d < bk)
    while shared_floats(conv, toc, ty, bh, bw, bk) > limit and bh > 1:
        bh = max(d for d in bhs if d < bh)
    space.define("toc", tocs, toc, "output channels per thread (register tile)")
    space.define("ty", tys, ty, "thread rows per block, each over toc output channels")
    space.define("bw", bws, bw, "output columns per block (consecutive threads)")
    space.define("bh", bhs, bh, "output rows per block")
    space.define("bk", bks, bk, "input channels per step through shared memory")
    return space


def schedule_conv(s: Any, conv: te.ComputeOp, last: te.ComputeOp, cfg: ScheduleConfig) -> None:
    """Schedule convolution ``conv`` and its epilogue, whose output stage is ``last`` (``conv``
    itself when there is none; it must have ``conv``'s shape)."""
    toc, ty, bh, bw, bk = (int(cfg[x]) for x in ("toc", "ty", "bh", "bw", "bk"))
    if last is conv:
        local = s.cache_write(conv.output(0), "local")
        out, acc = s[conv.output(0)], s[local]
    else:
        s[conv].set_scope("local")
        out, acc = s[last], s[conv]
    n, oc, oh, ow = out.op.axis
    oco, oci = out.split(oc, factor=toc * ty)
    oct, ocr = out.split(oci, factor=toc)
    oho, ohi = out.split(oh, factor=bh)
    owo, owi = out.split(ow, factor=bw)
    out.reorder(n, oco, oho, owo, oct, ohi, owi, ocr)
    bz = out.fuse(n, oco)
    pos = out.fuse(ohi, owi)
    out.bind(bz, BLOCK_Z)
    out.bind(oho, BLOCK_Y)
    out.bind(owo, BLOCK_X)
    out.bind(oct, THREAD_Y)
    out.bind(pos, THREAD_X)
    out.unroll(ocr)

    acc.compute_at(out, pos)
    rc, rh, rw = acc.op.reduce_axis
    rco, rci = acc.split(rc, factor=bk)
    data = list(acc.op.axis)
    acc.reorder(rco, rci, rh, rw, *data)
    acc.unroll(rw)
    for ax in data:
        acc.unroll(ax)
    for t in list(acc.op.input_tensors()):
        if not t.shape:
            continue
        shared = s.cache_read(t, "shared", [acc])
        s[shared].compute_at(acc, rco)
        cooperative_fetch(s[shared], ty, bh * bw)
