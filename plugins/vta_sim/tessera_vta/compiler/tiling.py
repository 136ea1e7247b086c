"""Choosing conv2d tiles that fit VTA's buffers with double buffering.

A tile computes ``toc`` output-channel blocks x ``th`` output rows x ``tw`` output columns of
one batch block; its reduction runs over input-channel chunks of ``icc`` blocks (usually all of
them at once). Two virtual threads alternate, so the input and weight buffers are split in two
halves (one per load group in flight) and the accumulator buffer holds two tiles plus the bias
rows (and, when the requantizing shift rounds to nearest, a third tile's worth of scratch
rows). Among the tilings that fit, :func:`choose_tiling` takes the one with the lowest estimate
of ``max(load cycles, compute cycles)`` plus a per-tile synchronization cost.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import VTAConfig
from ..errors import CompileError
from ..isa import MemType
from ..timing import ALU_CYCLES_PER_ROW, beats_per_elem
from .layers import Conv2dParams
from .packing import ceil_div

#: GEMM micro-op kernels are kept to this fraction of the micro-op buffer so that several
#: kernels (two virtual threads, edge tiles) stay resident together.
UOP_KERNEL_FRACTION = 4
#: Estimated cycles of token hand-offs and instruction overheads per tile.
TILE_OVERHEAD_CYCLES = 24
#: ALU instructions per tile: bias add, shift, max, min.
ALU_PASSES = 4
#: More ALU instructions per tile when the shift rounds to nearest (copy, two shifts, add).
ROUNDING_ALU_PASSES = 4


def acc_tiles(params: Conv2dParams) -> int:
    """Accumulator tiles the buffer holds: two (double buffering), plus one of scratch rows
    for rounding to nearest."""
    return 3 if params.rounds else 2


@dataclass(frozen=True)
class Tiling:
    """Tile sizes in blocks (channels) and pixels (rows, columns)."""

    toc: int
    icc: int
    th: int
    tw: int

    def in_rows(self, params: Conv2dParams, th: int | None = None) -> int:
        """Input rows (with padding) a tile of ``th`` output rows reads."""
        return ((th or self.th) - 1) * params.stride_h + params.kernel_h

    def in_cols(self, params: Conv2dParams, tw: int | None = None) -> int:
        return ((tw or self.tw) - 1) * params.stride_w + params.kernel_w

    def plane(self, params: Conv2dParams) -> int:
        """Input-buffer rows reserved per input-channel block of a tile."""
        return self.in_rows(params) * self.in_cols(params)

    def acc_rows(self) -> int:
        return self.toc * self.th * self.tw


def check_fits(tiling: Tiling, params: Conv2dParams, config: VTAConfig) -> str | None:
    """Why ``tiling`` does not fit the buffers and instruction fields, or None if it does."""
    p, t = params, tiling
    taps = p.kernel_h * p.kernel_w
    if t.icc * t.plane(p) > config.inp_depth // 2:
        return f"input tile {t.icc}x{t.plane(p)} rows > half the input buffer"
    if t.toc * t.icc * taps > config.wgt_depth // 2:
        return f"weight tile {t.toc * t.icc * taps} blocks > half the weight buffer"
    if acc_tiles(p) * t.acc_rows() + t.toc > config.acc_depth:
        return f"{acc_tiles(p)} accumulator tiles of {t.acc_rows()} rows + bias do not fit"
    if t.icc * taps * t.tw > config.uop_depth // UOP_KERNEL_FRACTION:
        return f"GEMM kernel of {t.icc * taps * t.tw} micro-ops is too large"
    if p.stride_h * t.in_cols(p) >= config.inp_depth:
        return "input row stride does not fit the source loop factor"
    if t.icc * taps >= config.wgt_depth:
        return "weight loop factor does not fit"
    return None


def estimate_cycles(tiling: Tiling, params: Conv2dParams, config: VTAConfig) -> int:
    """A rough cycle estimate: loads overlap compute, so the larger of the two plus overhead."""
    p, t = params, tiling
    block = config.block
    ocb, icb = ceil_div(p.out_channels, block), ceil_div(p.in_channels, block)
    nb = ceil_div(p.batch, config.batch)
    n_oc, n_h, n_w = ceil_div(ocb, t.toc), ceil_div(p.out_height, t.th), ceil_div(p.out_width, t.tw)
    n_ic = ceil_div(icb, t.icc)
    taps = p.kernel_h * p.kernel_w
    rows = nb * ocb * p.out_height * p.out_width
    gemm = rows * icb * taps
    passes = ALU_PASSES + (ROUNDING_ALU_PASSES if p.rounds else 0)
    alu = passes * ALU_CYCLES_PER_ROW * rows + (rows if p.rounds else 0)
    inp_rows = nb * n_oc * icb * n_h * n_w * t.plane(p)
    wgt_blocks = nb * n_h * n_w * ocb * icb * taps
    load = inp_rows * beats_per_elem(config, MemType.INP) + wgt_blocks * beats_per_elem(
        config, MemType.WGT
    )
    tiles = nb * n_oc * n_h * n_w
    return max(load, gemm + alu) + TILE_OVERHEAD_CYCLES * tiles * n_ic


def _balanced(total: int, largest: int) -> int:
    """The smallest tile size that covers ``total`` in as few tiles as ``largest`` does."""
    return ceil_div(total, ceil_div(total, largest))


def _splits(total: int) -> list[int]:
    """Tile sizes worth trying for a dimension of ``total``: ceil(total / k) for every k."""
    return sorted({ceil_div(total, k) for k in range(1, total + 1)}, reverse=True)


def _largest_th(t: Tiling, params: Conv2dParams, config: VTAConfig) -> int:
    """The most output rows a tile with ``t``'s other sizes can have."""
    p = params
    in_cols = t.in_cols(p)
    rows_in = config.inp_depth // 2 // (t.icc * in_cols)
    by_inp = (rows_in - p.kernel_h) // p.stride_h + 1
    by_acc = (config.acc_depth - t.toc) // acc_tiles(p) // (t.toc * t.tw)
    return min(p.out_height, by_inp, by_acc)


def choose_tiling(params: Conv2dParams, config: VTAConfig) -> Tiling:
    """The cheapest tiling that fits; CompileError if even the smallest does not."""
    p = params
    ocb = ceil_div(p.out_channels, config.block)
    icb = ceil_div(p.in_channels, config.block)
    best: tuple[int, int, Tiling] | None = None
    for toc in _splits(ocb):
        for icc in _splits(icb):
            for tw in _splits(p.out_width):
                th = _largest_th(Tiling(toc, icc, 1, tw), p, config)
                if th < 1:
                    continue
                tiling = Tiling(toc, icc, _balanced(p.out_height, th), tw)
                if check_fits(tiling, p, config) is not None:
                    continue
                cost = estimate_cycles(tiling, p, config)
                key = (cost, -tiling.acc_rows())
                if best is None or key < best[:2]:
                    best = (cost, -tiling.acc_rows(), tiling)
    if best is None:
        smallest = Tiling(1, 1, 1, 1)
        raise CompileError(
            f"conv2d {p.weight_shape} does not fit VTA's buffers even with 1x1x1x1 tiles: "
            f"{check_fits(smallest, p, config)}"
        )
    return best[2]
