"""The datapath of the functional simulator: DRAM, the five SRAM buffers, and what each
instruction does to them (numpy, vectorized over micro-op iterations).

DRAM is a flat ``uint8`` array; an instruction's DRAM addresses count elements of its memory
type (a 16-byte input row, a 256-byte weight block, ...), as in VTA. Out-of-range accesses raise
:class:`SimulationError`; the scheduler adds which instruction it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .config import VTAConfig
from .errors import SimulationError
from .isa import Alu, AluOp, Gemm, Load, LoopInsn, MemType, Store, isa_layout
from .timing import elem_bytes

#: Shift amounts of ALU SHR are clamped to this magnitude (a negative amount shifts left).
MAX_SHIFT = 31


@dataclass
class Counters:
    """What an instruction stream did; ``cycles`` is the timing model's estimate."""

    bytes_loaded: dict[str, int] = field(
        default_factory=lambda: {"uop": 0, "wgt": 0, "inp": 0, "acc": 0}
    )
    bytes_stored: int = 0
    gemm_macs: int = 0
    gemm_iterations: int = 0
    alu_ops: int = 0
    alu_iterations: int = 0
    instructions: dict[str, int] = field(default_factory=dict)
    cycles: int = 0

    def summary(self) -> str:
        loaded = ", ".join(f"{k} {v}" for k, v in self.bytes_loaded.items())
        return (
            f"cycles {self.cycles}, GEMM MACs {self.gemm_macs}, ALU ops {self.alu_ops}, "
            f"bytes loaded ({loaded}), bytes stored {self.bytes_stored}"
        )


class Machine:
    """DRAM plus the SRAM buffers of one VTA core, and the instruction semantics."""

    def __init__(self, config: VTAConfig, dram: np.ndarray) -> None:
        if dram.dtype != np.uint8 or dram.ndim != 1:
            raise SimulationError("DRAM must be a 1-D uint8 array")
        self.config = config
        self.dram = dram
        b, n = config.batch, config.block
        self.uop = np.zeros(config.uop_depth, dtype=np.uint32)
        self.inp = np.zeros((config.inp_depth, b, n), dtype=np.int8)
        self.wgt = np.zeros((config.wgt_depth, n, n), dtype=np.int8)
        self.acc = np.zeros((config.acc_depth, b, n), dtype=np.int32)
        self.out = np.zeros((config.out_depth, b, n), dtype=np.int8)
        self.counters = Counters()

    # -- DRAM as arrays of elements ------------------------------------------------------------

    def _buffer(self, memory_type: MemType) -> np.ndarray:
        return {
            MemType.UOP: self.uop,
            MemType.WGT: self.wgt,
            MemType.INP: self.inp,
            MemType.ACC: self.acc,
            MemType.OUT: self.out,
        }[memory_type]

    def dram_elements(self, memory_type: MemType) -> np.ndarray:
        """A view of DRAM as elements of ``memory_type`` (shape: count x element shape)."""
        buffer = self._buffer(memory_type)
        size = elem_bytes(self.config, memory_type)
        count = self.dram.size // size
        dtype = buffer.dtype.newbyteorder("<")
        return self.dram[: count * size].view(dtype).reshape((count, *buffer.shape[1:]))

    @staticmethod
    def _dram_indices(insn: Load | Store) -> np.ndarray:
        rows = np.arange(insn.y_size, dtype=np.int64)[:, None] * insn.x_stride
        return insn.dram_base + rows + np.arange(insn.x_size, dtype=np.int64)[None, :]

    def _check_sram(self, what: str, memory_type: MemType, first: int, count: int) -> None:
        depth = self._buffer(memory_type).shape[0]
        if first + count > depth:
            raise SimulationError(
                f"{what} SRAM rows [{first}, {first + count}) beyond the "
                f"{depth}-entry {memory_type.name} buffer"
            )

    def _check_dram(self, what: str, memory_type: MemType, indices: np.ndarray) -> None:
        count = self.dram.size // elem_bytes(self.config, memory_type)
        last = int(indices.max())
        if last >= count:
            raise SimulationError(
                f"{what} DRAM element {last} of type {memory_type.name} beyond the DRAM "
                f"({self.dram.size} bytes = {count} elements)"
            )

    # -- LOAD and STORE ------------------------------------------------------------------------

    def load(self, insn: Load) -> None:
        if insn.is_noop:
            return
        kind = insn.memory_type
        if insn.has_padding and kind != MemType.INP:
            raise SimulationError(f"only input loads pad; this {kind.name} load has padding")
        y_total = insn.y_pad_0 + insn.y_size + insn.y_pad_1
        x_total = insn.x_pad_0 + insn.x_size + insn.x_pad_1
        self._check_sram("LOAD writes", kind, insn.sram_base, y_total * x_total)
        indices = self._dram_indices(insn)
        self._check_dram("LOAD reads", kind, indices)
        data = self.dram_elements(kind)[indices]
        buffer = self._buffer(kind)
        tile = np.zeros((y_total, x_total, *buffer.shape[1:]), dtype=buffer.dtype)
        tile[
            insn.y_pad_0 : insn.y_pad_0 + insn.y_size, insn.x_pad_0 : insn.x_pad_0 + insn.x_size
        ] = data
        buffer[insn.sram_base : insn.sram_base + y_total * x_total] = tile.reshape(
            (y_total * x_total, *buffer.shape[1:])
        )
        self.counters.bytes_loaded[kind.name.lower()] += data.size * data.itemsize

    def store(self, insn: Store) -> None:
        if insn.is_noop:
            return
        if insn.has_padding:
            raise SimulationError("stores do not pad; this STORE has padding fields set")
        count = insn.y_size * insn.x_size
        self._check_sram("STORE reads", MemType.OUT, insn.sram_base, count)
        indices = self._dram_indices(insn)
        self._check_dram("STORE writes", MemType.OUT, indices)
        rows = self.out[insn.sram_base : insn.sram_base + count]
        self.dram_elements(MemType.OUT)[indices.reshape(-1)] = rows
        self.counters.bytes_stored += rows.size

    # -- GEMM and ALU --------------------------------------------------------------------------

    def _uop_indices(self, insn: LoopInsn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(dst, src, wgt) buffer indices of every micro-op iteration, in execution order."""
        if not insn.uop_bgn <= insn.uop_end <= self.config.uop_depth:
            raise SimulationError(
                f"micro-op range [{insn.uop_bgn}, {insn.uop_end}) outside the "
                f"{self.config.uop_depth}-entry micro-op buffer"
            )
        words = self.uop[insn.uop_bgn : insn.uop_end].astype(np.int64)
        acc_f, inp_f, wgt_f = isa_layout(self.config).uop
        fields = [(words >> f.lo) & ((1 << f.width) - 1) for f in (acc_f, inp_f, wgt_f)]
        i = np.arange(insn.iter_out, dtype=np.int64)[:, None, None]
        j = np.arange(insn.iter_in, dtype=np.int64)[None, :, None]
        dst = fields[0] + i * insn.dst_factor_out + j * insn.dst_factor_in
        src = fields[1] + i * insn.src_factor_out + j * insn.src_factor_in
        wgt_out = insn.wgt_factor_out if isinstance(insn, Gemm) else 0
        wgt_in = insn.wgt_factor_in if isinstance(insn, Gemm) else 0
        wgt = fields[2] + i * wgt_out + j * wgt_in
        return dst.reshape(-1), src.reshape(-1), wgt.reshape(-1)

    @staticmethod
    def _check_index(name: str, indices: np.ndarray, depth: int) -> None:
        if indices.size and int(indices.max()) >= depth:
            raise SimulationError(
                f"{name} index {int(indices.max())} beyond the {depth}-entry buffer"
            )

    def gemm(self, insn: Gemm) -> None:
        dst, src, wgt = self._uop_indices(insn)
        if dst.size == 0:
            return
        self._check_index("accumulator", dst, self.config.acc_depth)
        if insn.reset:
            self.acc[dst] = 0
            self.out[dst] = 0
            self.counters.gemm_iterations += dst.size
            return
        self._check_index("input", src, self.config.inp_depth)
        self._check_index("weight", wgt, self.config.wgt_depth)
        products = self._products(src, wgt)
        if np.unique(dst).size == dst.size:
            self.acc[dst] += products
        else:
            np.add.at(self.acc, dst, products)
        self.out[dst] = self.acc[dst].astype(np.int8)
        self.counters.gemm_iterations += dst.size
        self.counters.gemm_macs += dst.size * self.config.macs_per_cycle

    def _products(self, src: np.ndarray, wgt: np.ndarray) -> np.ndarray:
        """inp[src[k]] @ wgt[wgt[k]].T for every k, as int32, grouped by weight block.

        float32 is exact here: a product sums ``block`` terms of at most 2^14.
        """
        inputs = self.inp[src].astype(np.float32)  # (n, batch, block_in)
        result = np.empty((src.size, self.config.batch, self.config.block), dtype=np.float32)
        order = np.argsort(wgt, kind="stable")
        blocks, starts = np.unique(wgt[order], return_index=True)
        ends = np.append(starts[1:], order.size)
        for block, start, end in zip(blocks, starts, ends):
            rows = order[start:end]
            result[rows] = inputs[rows] @ self.wgt[block].astype(np.float32).T
        return result.astype(np.int32)

    def alu(self, insn: Alu) -> None:
        dst, src, _ = self._uop_indices(insn)
        if dst.size == 0:
            return
        depth = self.config.acc_depth
        self._check_index("accumulator (dst)", dst, depth)
        if not insn.use_imm:
            self._check_index("accumulator (src)", src, depth)
        if insn.reset:
            self.acc[dst] = 0
        elif self._alu_vectorizable(insn, dst, src):
            operand = np.int64(insn.imm) if insn.use_imm else self.acc[src].astype(np.int64)
            self.acc[dst] = alu_apply(insn.alu_opcode, self.acc[dst].astype(np.int64), operand)
        else:
            for d, s in zip(dst, src):
                operand = np.int64(insn.imm) if insn.use_imm else self.acc[s].astype(np.int64)
                self.acc[d] = alu_apply(insn.alu_opcode, self.acc[d].astype(np.int64), operand)
        self.out[dst] = self.acc[dst].astype(np.int8)
        self.counters.alu_iterations += dst.size
        self.counters.alu_ops += dst.size * self.config.batch * self.config.block

    def _alu_vectorizable(self, insn: Alu, dst: np.ndarray, src: np.ndarray) -> bool:
        """True when one vector operation equals the sequential loop: every destination is
        written once and no source is read after an earlier iteration wrote it."""
        if np.unique(dst).size != dst.size:
            return False
        if insn.use_imm:
            return True
        first_write = np.full(self.config.acc_depth, dst.size, dtype=np.int64)
        first_write[dst[::-1]] = np.arange(dst.size - 1, -1, -1)
        return bool(np.all(first_write[src] >= np.arange(src.size)))


def alu_apply(op: AluOp, a: np.ndarray, b: np.ndarray | np.int64) -> np.ndarray:
    """``op(a, b)`` on int64 copies of int32 values, wrapped back to int32."""
    if op == AluOp.MIN:
        result = np.minimum(a, b)
    elif op == AluOp.MAX:
        result = np.maximum(a, b)
    elif op == AluOp.ADD:
        result = a + b
    elif op == AluOp.SHR:
        shift = np.clip(b, -MAX_SHIFT, MAX_SHIFT)
        result = np.where(shift >= 0, a >> np.maximum(shift, 0), a << np.maximum(-shift, 0))
    elif op == AluOp.MUL:
        result = a * b
    else:
        raise SimulationError(f"unknown ALU operation {op}")
    return np.asarray(result).astype(np.int32)
