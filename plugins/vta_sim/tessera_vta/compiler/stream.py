"""Building blocks of code generation: the DRAM image, the instruction list, micro-op kernels."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..config import VTAConfig
from ..isa import Instruction, Load, MemType, Uop, encode_uop
from .packing import round_up


class DramImage:
    """Named, aligned segments of a DRAM image; offsets are in bytes."""

    def __init__(self, alignment: int) -> None:
        self.alignment = alignment
        self.size = 0
        self.segments: dict[str, tuple[int, bytes | None]] = {}

    def allocate(self, name: str, nbytes: int, data: bytes | None = None) -> int:
        """Reserve ``nbytes`` (filled with ``data`` if given, zeros otherwise)."""
        if data is not None and len(data) != nbytes:
            raise ValueError(f"segment {name}: {len(data)} bytes of data for {nbytes} bytes")
        offset = round_up(self.size, self.alignment)
        self.segments[name] = (offset, data)
        self.size = offset + round_up(max(nbytes, 1), self.alignment)
        return offset

    def to_array(self) -> np.ndarray:
        image = np.zeros(self.size, dtype=np.uint8)
        for offset, data in self.segments.values():
            if data is not None:
                image[offset : offset + len(data)] = np.frombuffer(data, dtype=np.uint8)
        return image


class StreamBuilder:
    """The instruction list being generated, with micro-op kernels loaded on demand.

    Kernels are cached in the micro-op buffer: a kernel already resident is reused; one that
    does not fit clears the cache (safe, since LOAD UOP runs in order with GEMM and ALU on the
    compute module). Kernel contents go to a DRAM segment whose base is known only at the end,
    so LOAD UOP addresses are relative until :meth:`relocate_uops`.
    """

    def __init__(self, config: VTAConfig) -> None:
        self.config = config
        self.insns: list[Instruction] = []
        self._kernel_dram: dict[tuple[Uop, ...], int] = {}
        self._uop_words: list[int] = []
        self._resident: dict[tuple[Uop, ...], int] = {}
        self._next_free = 0
        self._uop_loads: list[int] = []

    def emit(self, insn: Instruction) -> int:
        self.insns.append(insn)
        return len(self.insns) - 1

    def set_flags(self, index: int, **flags: bool) -> None:
        """Set dependency flags on an instruction already emitted."""
        self.insns[index] = dataclasses.replace(self.insns[index], **flags)

    def kernel(self, uops: tuple[Uop, ...]) -> tuple[int, int]:
        """(uop_bgn, uop_end) of ``uops`` in the micro-op buffer, loading it if needed."""
        if uops in self._resident:
            start = self._resident[uops]
            return start, start + len(uops)
        if len(uops) > self.config.uop_depth:
            raise ValueError(f"a kernel of {len(uops)} micro-ops exceeds the micro-op buffer")
        if self._next_free + len(uops) > self.config.uop_depth:
            self._resident.clear()
            self._next_free = 0
        if uops not in self._kernel_dram:
            self._kernel_dram[uops] = len(self._uop_words)
            self._uop_words.extend(encode_uop(uop, self.config) for uop in uops)
        start = self._next_free
        index = self.emit(
            Load(
                memory_type=MemType.UOP,
                sram_base=start,
                dram_base=self._kernel_dram[uops],
                y_size=1,
                x_size=len(uops),
                x_stride=len(uops),
            )
        )
        self._uop_loads.append(index)
        self._resident[uops] = start
        self._next_free += len(uops)
        return start, start + len(uops)

    def uop_segment(self) -> bytes:
        """The micro-op words of every kernel, for the DRAM image."""
        return np.asarray(self._uop_words, dtype="<u4").tobytes()

    def relocate_uops(self, segment_offset: int) -> None:
        """Make LOAD UOP addresses absolute once the segment's byte offset is known."""
        base = segment_offset // self.config.uop_elem_bytes
        for index in self._uop_loads:
            insn = self.insns[index]
            self.insns[index] = dataclasses.replace(insn, dram_base=insn.dram_base + base)
