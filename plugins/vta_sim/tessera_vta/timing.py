"""The timing model fsim uses to estimate cycles; it follows the Verilog model (tsim).

Per instruction, a module spends ``INSN_OVERHEAD`` cycles to accept it (pop tokens, latch the
fields) and to complete it (push tokens), a LOAD that moves data ``LOAD_DRAIN`` more for its last
SRAM write to land, and in between:

- LOAD / STORE: one cycle per DRAM beat (``dram_bytes_per_cycle`` bytes, at least one beat per
  element) and one cycle per zero-padding element written;
- GEMM: one micro-op iteration (one batch x block by block x block product) per cycle;
- ALU: ``ALU_CYCLES_PER_ROW`` cycles per micro-op iteration (one accumulator read port);
- FINISH: nothing more.

Modules overlap only through the token queues: a pop waits until the push of that token.
"""

from __future__ import annotations

from .config import VTAConfig
from .isa import Alu, Finish, Gemm, Instruction, Load, MemoryInsn, MemType, Store

INSN_OVERHEAD = 2
LOAD_DRAIN = 1
ALU_CYCLES_PER_ROW = 2


def elem_bytes(config: VTAConfig, memory_type: MemType) -> int:
    """Bytes of one element of ``memory_type``: the unit of DRAM addresses and sizes."""
    return {
        MemType.UOP: config.uop_elem_bytes,
        MemType.WGT: config.wgt_elem_bytes,
        MemType.INP: config.inp_elem_bytes,
        MemType.ACC: config.acc_elem_bytes,
        MemType.OUT: config.out_elem_bytes,
    }[memory_type]


def beats_per_elem(config: VTAConfig, memory_type: MemType) -> int:
    """DRAM bus beats to move one element (a partial beat costs a whole one)."""
    size = elem_bytes(config, memory_type)
    return -(-size // config.dram_bytes_per_cycle)


def memory_cycles(insn: MemoryInsn, config: VTAConfig) -> int:
    """Cycles of a LOAD or STORE after the overhead cycle."""
    if insn.is_noop:
        return 0
    data = insn.y_size * insn.x_size
    total = (insn.y_pad_0 + insn.y_size + insn.y_pad_1) * (
        insn.x_pad_0 + insn.x_size + insn.x_pad_1
    )
    return data * beats_per_elem(config, insn.memory_type) + (total - data)


def insn_cycles(insn: Instruction, config: VTAConfig) -> int:
    """Estimated cycles the module that runs ``insn`` is busy with it."""
    if isinstance(insn, Load):
        body = memory_cycles(insn, config)
        if body:
            body += LOAD_DRAIN
    elif isinstance(insn, Store):
        body = memory_cycles(insn, config)
    elif isinstance(insn, Gemm):
        body = insn.iterations
    elif isinstance(insn, Alu):
        body = ALU_CYCLES_PER_ROW * insn.iterations
    elif isinstance(insn, Finish):
        body = 0
    else:
        raise TypeError(f"not a VTA instruction: {insn!r}")
    return INSN_OVERHEAD + body
