"""Lowering one int8 conv2d (+ bias, shift, clip, optional ReLU) to a VTA instruction stream.

The output is cut into tiles (:mod:`.tiling`); each tile's reduction into one or more load
groups (input-channel chunks). Tiles and groups alternate between two virtual threads: group
``g`` uses half ``g % 2`` of the input and weight buffers, tile ``t`` half ``t % 2`` of the
accumulator buffer. Per group the load module loads the input planes (with padding) and the
weights; the compute module resets the accumulators (first group of a tile), runs one GEMM over
the whole reduction, and after the last group adds the bias, shifts and clips with the ALU; the
store module writes the tile out. The tokens:

- load -> compute: every group's last load pushes, its GEMM pops;
- compute -> load: the GEMM of group ``g`` pushes when group ``g + 2`` exists; that group's first
  load pops (its buffer half is free again);
- compute -> store: a tile's last ALU instruction pushes, its first STORE pops;
- store -> compute: a tile's last STORE pushes when tile ``t + 2`` exists (whose reset pops it)
  or when it is the last tile (FINISH pops it, so FINISH waits for the last store).

Rounding to nearest, ties to even (``rounding="half_even"``, shift ``s >= 1``) with only MIN,
MAX, ADD and SHR: the DRAM bias already holds ``bias + 2^(s-1)``, so after the bias add an
accumulator holds ``a' = a + 2^(s-1)``, and ``round_half_even(a / 2^s) = (a' - bit_s(a')) >> s``
(at a tie the low ``s`` bits of ``a'`` are zero and bit ``s`` is the parity of the rounded-up
value; elsewhere subtracting 0 or 1 does not change the floor). ``-bit_s(a')`` is computed in
scratch rows shared by all tiles (the compute module runs in order): GEMM reset, ADD a copy of the
tile, SHR by ``-(31 - s)`` (a left shift that wraps at 32 bits, leaving bit ``s`` as the sign),
SHR by 31 (0 or -1), and ADD it to the tile before the shift.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import VTAConfig
from ..isa import Alu, AluOp, Finish, Gemm, Load, MemType, Store, Uop
from .layers import Conv2dParams
from .packing import ceil_div
from .stream import StreamBuilder
from .tiling import Tiling


@dataclass(frozen=True)
class DramBases:
    """Element addresses of the layer's tensors in DRAM (each in its own element units)."""

    inp: int
    wgt: int
    bias: int
    out: int


@dataclass(frozen=True)
class Tile:
    """One output tile: batch block, first output-channel block / row / column, and sizes."""

    index: int
    nb: int
    ob0: int
    oh0: int
    ow0: int
    toc: int
    th: int
    tw: int

    @property
    def acc_rows(self) -> int:
        return self.toc * self.th * self.tw


class Conv2dLowering:
    """Emits the instruction stream of one conv2d layer into a :class:`StreamBuilder`."""

    def __init__(
        self,
        params: Conv2dParams,
        tiling: Tiling,
        config: VTAConfig,
        bases: DramBases,
        builder: StreamBuilder,
    ) -> None:
        self.p = params
        self.t = tiling
        self.config = config
        self.bases = bases
        self.b = builder
        self.icb = ceil_div(params.in_channels, config.block)
        self.ocb = ceil_div(params.out_channels, config.block)
        self.taps = params.kernel_h * params.kernel_w
        self.plane = tiling.plane(params)
        self.acc_half = tiling.acc_rows()
        self.bias_base = 2 * self.acc_half
        #: Scratch rows for rounding to nearest (after the bias rows of the widest tile).
        self.scratch_base = self.bias_base + tiling.toc
        self._bias_loaded: tuple[int, int] | None = None

    # -- iteration space ---------------------------------------------------------------------

    def tiles(self) -> list[Tile]:
        p, t = self.p, self.t
        tiles = []
        for nb in range(ceil_div(p.batch, self.config.batch)):
            for ob0 in range(0, self.ocb, t.toc):
                for oh0 in range(0, p.out_height, t.th):
                    for ow0 in range(0, p.out_width, t.tw):
                        tiles.append(
                            Tile(
                                index=len(tiles),
                                nb=nb,
                                ob0=ob0,
                                oh0=oh0,
                                ow0=ow0,
                                toc=min(t.toc, self.ocb - ob0),
                                th=min(t.th, p.out_height - oh0),
                                tw=min(t.tw, p.out_width - ow0),
                            )
                        )
        return tiles

    def chunks(self) -> list[tuple[int, int]]:
        """(first input-channel block, block count) of each reduction chunk."""
        return [(ib0, min(self.t.icc, self.icb - ib0)) for ib0 in range(0, self.icb, self.t.icc)]

    # -- the whole stream --------------------------------------------------------------------

    def emit(self) -> None:
        tiles, chunks = self.tiles(), self.chunks()
        groups = len(tiles) * len(chunks)
        for tile in tiles:
            for c, chunk in enumerate(chunks):
                g = tile.index * len(chunks) + c
                self._load_group(g, tile, chunk)
                self._gemm_group(g, groups, tile, chunk, first=c == 0)
            self._epilogue(tile)
            self._store(tile, last=tile.index == len(tiles) - 1, tiles=len(tiles))
        self.b.emit(Finish(pop_next=True))

    # -- per group / tile --------------------------------------------------------------------

    def _load_group(self, g: int, tile: Tile, chunk: tuple[int, int]) -> None:
        p = self.p
        ib0, icc = chunk
        inp_base = (g % 2) * (self.config.inp_depth // 2)
        rows_in, cols_in = self.t.in_rows(p, tile.th), self.t.in_cols(p, tile.tw)
        ih0 = tile.oh0 * p.stride_h - p.pad_top
        iw0 = tile.ow0 * p.stride_w - p.pad_left
        y_pad_0, y_pad_1 = max(0, -ih0), max(0, ih0 + rows_in - p.height)
        x_pad_0, x_pad_1 = max(0, -iw0), max(0, iw0 + cols_in - p.width)
        first = True
        for cb in range(icc):
            plane_start = ((tile.nb * self.icb + ib0 + cb) * p.height + ih0 + y_pad_0) * p.width
            self.b.emit(
                Load(
                    memory_type=MemType.INP,
                    sram_base=inp_base + cb * self.plane,
                    dram_base=self.bases.inp + plane_start + iw0 + x_pad_0,
                    y_size=rows_in - y_pad_0 - y_pad_1,
                    x_size=cols_in - x_pad_0 - x_pad_1,
                    x_stride=p.width,
                    y_pad_0=y_pad_0,
                    y_pad_1=y_pad_1,
                    x_pad_0=x_pad_0,
                    x_pad_1=x_pad_1,
                    pop_next=first and g >= 2,
                )
            )
            first = False
        self.b.emit(
            Load(
                memory_type=MemType.WGT,
                sram_base=(g % 2) * (self.config.wgt_depth // 2),
                dram_base=self.bases.wgt + (tile.ob0 * self.icb + ib0) * self.taps,
                y_size=tile.toc,
                x_size=icc * self.taps,
                x_stride=self.icb * self.taps,
                push_next=True,
            )
        )

    def _acc_base(self, tile: Tile) -> int:
        return (tile.index % 2) * self.acc_half

    def _gemm_group(
        self, g: int, groups: int, tile: Tile, chunk: tuple[int, int], first: bool
    ) -> None:
        p = self.p
        acc_base = self._acc_base(tile)
        if first:
            bgn, end = self.b.kernel((Uop(acc=acc_base, inp=0, wgt=0),))
            self.b.emit(
                Gemm(
                    reset=True,
                    uop_bgn=bgn,
                    uop_end=end,
                    iter_out=1,
                    iter_in=tile.acc_rows,
                    dst_factor_in=1,
                    pop_next=tile.index >= 2,
                )
            )
        _, icc = chunk
        inp_base = (g % 2) * (self.config.inp_depth // 2)
        wgt_base = (g % 2) * (self.config.wgt_depth // 2)
        pitch = self.t.in_cols(p, tile.tw)
        uops = tuple(
            Uop(
                acc=acc_base + x,
                inp=inp_base + cb * self.plane + kh * pitch + kw + x * p.stride_w,
                wgt=wgt_base + (cb * p.kernel_h + kh) * p.kernel_w + kw,
            )
            for cb in range(icc)
            for kh in range(p.kernel_h)
            for kw in range(p.kernel_w)
            for x in range(tile.tw)
        )
        bgn, end = self.b.kernel(uops)
        self.b.emit(
            Gemm(
                uop_bgn=bgn,
                uop_end=end,
                iter_out=tile.toc,
                iter_in=tile.th,
                dst_factor_out=tile.th * tile.tw,
                dst_factor_in=tile.tw,
                src_factor_out=0,
                src_factor_in=p.stride_h * pitch,
                wgt_factor_out=icc * self.taps,
                wgt_factor_in=0,
                pop_prev=True,
                push_prev=g + 2 < groups,
            )
        )

    def _epilogue(self, tile: Tile) -> None:
        """Bias add, requantizing shift and clip (ReLU) on the tile's accumulators."""
        p = self.p
        acc_base = self._acc_base(tile)
        if self._bias_loaded != (tile.ob0, tile.toc):
            self.b.emit(
                Load(
                    memory_type=MemType.ACC,
                    sram_base=self.bias_base,
                    dram_base=self.bases.bias + tile.ob0,
                    y_size=1,
                    x_size=tile.toc,
                    x_stride=tile.toc,
                )
            )
            self._bias_loaded = (tile.ob0, tile.toc)
        pixels = tile.th * tile.tw
        bgn, end = self.b.kernel((Uop(acc=acc_base, inp=self.bias_base),))
        self.b.emit(
            Alu(
                alu_opcode=AluOp.ADD,
                uop_bgn=bgn,
                uop_end=end,
                iter_out=tile.toc,
                iter_in=pixels,
                dst_factor_out=pixels,
                dst_factor_in=1,
                src_factor_out=1,
                src_factor_in=0,
            )
        )
        if p.rounds:
            self._round_half_even(tile)
        passes = [(AluOp.MAX, 0 if p.relu else -128), (AluOp.MIN, 127)]
        if p.shift:
            passes.insert(0, (AluOp.SHR, p.shift))
        bgn, end = self.b.kernel((Uop(acc=acc_base, inp=acc_base),))
        for n, (op, imm) in enumerate(passes):
            self.b.emit(
                Alu(
                    alu_opcode=op,
                    use_imm=True,
                    imm=imm,
                    uop_bgn=bgn,
                    uop_end=end,
                    iter_out=1,
                    iter_in=tile.acc_rows,
                    dst_factor_in=1,
                    src_factor_in=1,
                    push_next=n == len(passes) - 1,
                )
            )

    def _round_half_even(self, tile: Tile) -> None:
        """Subtract bit ``shift`` from every accumulator of the tile (see the module docs)."""
        acc_base, scratch, rows = self._acc_base(tile), self.scratch_base, tile.acc_rows
        bgn, end = self.b.kernel((Uop(acc=scratch, inp=0, wgt=0),))
        self.b.emit(
            Gemm(reset=True, uop_bgn=bgn, uop_end=end, iter_out=1, iter_in=rows, dst_factor_in=1)
        )
        steps: list[tuple[int, int, AluOp, int | None]] = [
            (scratch, acc_base, AluOp.ADD, None),
            (scratch, scratch, AluOp.SHR, -(31 - self.p.shift)),
            (scratch, scratch, AluOp.SHR, 31),
            (acc_base, scratch, AluOp.ADD, None),
        ]
        for dst, src, op, imm in steps:
            if imm == 0:
                continue
            bgn, end = self.b.kernel((Uop(acc=dst, inp=src),))
            self.b.emit(
                Alu(
                    alu_opcode=op,
                    use_imm=imm is not None,
                    imm=imm or 0,
                    uop_bgn=bgn,
                    uop_end=end,
                    iter_out=1,
                    iter_in=rows,
                    dst_factor_in=1,
                    src_factor_in=1,
                )
            )

    def _store(self, tile: Tile, last: bool, tiles: int) -> None:
        p = self.p
        acc_base = self._acc_base(tile)
        for ob in range(tile.toc):
            row = ((tile.nb * self.ocb + tile.ob0 + ob) * p.out_height + tile.oh0) * p.out_width
            self.b.emit(
                Store(
                    sram_base=acc_base + ob * tile.th * tile.tw,
                    dram_base=self.bases.out + row + tile.ow0,
                    y_size=tile.th,
                    x_size=tile.tw,
                    x_stride=p.out_width,
                    pop_prev=ob == 0,
                    push_prev=ob == tile.toc - 1 and (tile.index + 2 < tiles or last),
                )
            )
