"""VTA's instruction set: one dataclass per instruction kind, and their bit encodings.

Instructions are 128 bits and micro-ops 32 bits, fields LSB first, exactly as in shared/VTA.md
for the default configuration. The widths of the buffer-index fields (micro-op fields, GEMM/ALU
loop factors, ``uop_bgn``/``uop_end``) follow the buffer depths of the configuration, as in TVM's
``hw_spec.h``; every other field has a fixed position.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache

from .config import INSN_BITS, UOP_BITS, VTAConfig
from .errors import EncodingError


class Opcode(IntEnum):
    LOAD = 0
    STORE = 1
    GEMM = 2
    FINISH = 3
    ALU = 4


class MemType(IntEnum):
    UOP = 0
    WGT = 1
    INP = 2
    ACC = 3
    OUT = 4


class AluOp(IntEnum):
    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3
    #: Exists in the functional simulator only, as in VTA.
    MUL = 4


class Module(IntEnum):
    """The three execution modules; the order is the round-robin order of the simulators."""

    LOAD = 0
    COMPUTE = 1
    STORE = 2


# -- instruction dataclasses --------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class InsnBase:
    """Dependency flags common to every instruction.

    For the load module "next" is compute; for compute "prev" is load and "next" is store; for
    store "prev" is compute.
    """

    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    opcode = Opcode.FINISH  # overridden by every subclass

    @property
    def module(self) -> Module:
        """The module this instruction is dispatched to."""
        raise NotImplementedError

    def replace(self, **changes: object) -> InsnBase:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, kw_only=True)
class MemoryInsn(InsnBase):
    """A 2-D copy between DRAM and an SRAM buffer; addresses and sizes count elements.

    Row ``y`` of the copy reads ``x_size`` elements at ``dram_base + y * x_stride``. Only input
    loads pad: each SRAM row holds ``x_pad_0 + x_size + x_pad_1`` elements and ``y_pad_0`` /
    ``y_pad_1`` whole zero rows are added above and below. ``x_size == 0`` moves only tokens.
    """

    memory_type: MemType
    sram_base: int = 0
    dram_base: int = 0
    y_size: int = 0
    x_size: int = 0
    x_stride: int = 0
    y_pad_0: int = 0
    y_pad_1: int = 0
    x_pad_0: int = 0
    x_pad_1: int = 0

    @property
    def is_noop(self) -> bool:
        return self.x_size == 0

    @property
    def has_padding(self) -> bool:
        return bool(self.y_pad_0 or self.y_pad_1 or self.x_pad_0 or self.x_pad_1)


@dataclass(frozen=True, kw_only=True)
class Load(MemoryInsn):
    """LOAD: DRAM -> uop, weight, input or accumulator buffer."""

    memory_type: MemType = MemType.INP
    opcode = Opcode.LOAD

    def __post_init__(self) -> None:
        if self.memory_type == MemType.OUT:
            raise EncodingError("LOAD cannot target the output buffer (memory_type OUT)")

    @property
    def module(self) -> Module:
        if self.memory_type in (MemType.INP, MemType.WGT):
            return Module.LOAD
        return Module.COMPUTE


@dataclass(frozen=True, kw_only=True)
class Store(MemoryInsn):
    """STORE: output buffer -> DRAM."""

    memory_type: MemType = MemType.OUT
    opcode = Opcode.STORE

    def __post_init__(self) -> None:
        if self.memory_type != MemType.OUT:
            raise EncodingError(
                f"STORE reads the output buffer only; got memory_type {self.memory_type.name}"
            )

    @property
    def module(self) -> Module:
        return Module.STORE


@dataclass(frozen=True, kw_only=True)
class LoopInsn(InsnBase):
    """Fields GEMM and ALU share: the micro-op range and the two affine loops around it."""

    reset: bool = False
    uop_bgn: int = 0
    uop_end: int = 0
    iter_out: int = 1
    iter_in: int = 1
    dst_factor_out: int = 0
    dst_factor_in: int = 0
    src_factor_out: int = 0
    src_factor_in: int = 0

    @property
    def module(self) -> Module:
        return Module.COMPUTE

    @property
    def iterations(self) -> int:
        """Micro-op executions: iter_out x iter_in x (uop_end - uop_bgn)."""
        return self.iter_out * self.iter_in * max(self.uop_end - self.uop_bgn, 0)


@dataclass(frozen=True, kw_only=True)
class Gemm(LoopInsn):
    """GEMM: acc[a] = 0 if reset else acc[a] + inp[x] @ wgt[w].T, over the uop loops."""

    wgt_factor_out: int = 0
    wgt_factor_in: int = 0
    opcode = Opcode.GEMM


@dataclass(frozen=True, kw_only=True)
class Alu(LoopInsn):
    """ALU: acc[a] = op(acc[a], imm if use_imm else acc[x]), over the uop loops."""

    alu_opcode: AluOp = AluOp.ADD
    use_imm: bool = False
    imm: int = 0
    opcode = Opcode.ALU


@dataclass(frozen=True, kw_only=True)
class Finish(InsnBase):
    """FINISH: the end of the stream; executed by the compute module."""

    opcode = Opcode.FINISH

    @property
    def module(self) -> Module:
        return Module.COMPUTE


Instruction = Load | Store | Gemm | Alu | Finish


@dataclass(frozen=True)
class Uop:
    """A micro-op: accumulator index, input index (ALU: second accumulator index), weight index."""

    acc: int
    inp: int
    wgt: int = 0


# -- bit layouts --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BitField:
    """``width`` bits starting at bit ``lo``; ``signed`` fields hold two's complement values."""

    name: str
    lo: int
    width: int
    signed: bool = False

    @property
    def hi(self) -> int:
        return self.lo + self.width - 1

    def value_range(self) -> tuple[int, int]:
        if self.signed:
            return -(1 << (self.width - 1)), (1 << (self.width - 1)) - 1
        return 0, (1 << self.width) - 1

    def insert(self, word: int, value: int, owner: str) -> int:
        low, high = self.value_range()
        if not low <= value <= high:
            raise EncodingError(
                f"{owner}.{self.name} = {value} does not fit in {self.width} bits ({low}..{high})"
            )
        return word | ((value & ((1 << self.width) - 1)) << self.lo)

    def extract(self, word: int) -> int:
        value = (word >> self.lo) & ((1 << self.width) - 1)
        if self.signed and value >> (self.width - 1):
            value -= 1 << self.width
        return value


def _sequential(start: int, *fields: tuple[str, int] | tuple[str, int, bool]) -> list[BitField]:
    """Lay fields out one after another from bit ``start``."""
    out = []
    lo = start
    for spec in fields:
        name, width = spec[0], spec[1]
        signed = bool(spec[2]) if len(spec) > 2 else False
        out.append(BitField(name, lo, width, signed))
        lo += width
    return out


@dataclass(frozen=True)
class IsaLayout:
    """Bit fields of every instruction kind and of the micro-op for one configuration."""

    common: tuple[BitField, ...]
    memory: tuple[BitField, ...]
    gemm: tuple[BitField, ...]
    alu: tuple[BitField, ...]
    uop: tuple[BitField, ...]

    def fields_of(self, opcode: Opcode) -> tuple[BitField, ...]:
        specific = {
            Opcode.LOAD: self.memory,
            Opcode.STORE: self.memory,
            Opcode.GEMM: self.gemm,
            Opcode.ALU: self.alu,
            Opcode.FINISH: (),
        }[opcode]
        return self.common + specific


@lru_cache(maxsize=16)
def isa_layout(config: VTAConfig) -> IsaLayout:
    """The bit layout for ``config`` (VTA.md's layout for the default configuration)."""
    acc, inp, wgt, uop = (
        config.log_acc_depth,
        config.log_inp_depth,
        config.log_wgt_depth,
        config.log_uop_depth,
    )
    common = _sequential(
        0, ("opcode", 3), ("pop_prev", 1), ("pop_next", 1), ("push_prev", 1), ("push_next", 1)
    )
    memory = _sequential(7, ("memory_type", 3), ("sram_base", 16), ("dram_base", 32))
    memory += _sequential(
        64,
        ("y_size", 16),
        ("x_size", 16),
        ("x_stride", 16),
        ("y_pad_0", 4),
        ("y_pad_1", 4),
        ("x_pad_0", 4),
        ("x_pad_1", 4),
    )
    loops = _sequential(
        7, ("reset", 1), ("uop_bgn", uop), ("uop_end", uop + 1), ("iter_out", 14), ("iter_in", 14)
    )
    gemm = loops + _sequential(
        64,
        ("dst_factor_out", acc),
        ("dst_factor_in", acc),
        ("src_factor_out", inp),
        ("src_factor_in", inp),
        ("wgt_factor_out", wgt),
        ("wgt_factor_in", wgt),
    )
    alu = loops + _sequential(
        64,
        ("dst_factor_out", acc),
        ("dst_factor_in", acc),
        ("src_factor_out", inp),
        ("src_factor_in", inp),
        ("alu_opcode", 3),
        ("use_imm", 1),
        ("imm", 16, True),
    )
    uop_fields = _sequential(0, ("acc", acc), ("inp", inp), ("wgt", wgt))
    for kind, fields, limit in (
        ("GEMM", gemm, INSN_BITS),
        ("ALU", alu, INSN_BITS),
        ("micro-op", uop_fields, UOP_BITS),
    ):
        if fields[-1].hi >= limit:
            raise EncodingError(f"{kind} fields need {fields[-1].hi + 1} bits, more than {limit}")
    if loops[-1].hi >= 64:
        raise EncodingError("GEMM/ALU loop fields overflow the first 64-bit word")
    return IsaLayout(tuple(common), tuple(memory), tuple(gemm), tuple(alu), tuple(uop_fields))


# -- encoding and decoding ----------------------------------------------------------------------

_KIND_OF_OPCODE: dict[Opcode, type] = {
    Opcode.LOAD: Load,
    Opcode.STORE: Store,
    Opcode.GEMM: Gemm,
    Opcode.ALU: Alu,
    Opcode.FINISH: Finish,
}


def _field_value(insn: Instruction, name: str) -> int:
    if name == "opcode":
        return int(insn.opcode)
    return int(getattr(insn, name))


def encode_insn(insn: Instruction, config: VTAConfig) -> int:
    """The 128-bit encoding of ``insn`` as an int; raises EncodingError on out-of-range fields."""
    word = 0
    owner = type(insn).__name__.upper()
    for field in isa_layout(config).fields_of(insn.opcode):
        word = field.insert(word, _field_value(insn, field.name), owner)
    return word


def decode_insn(word: int | bytes, config: VTAConfig) -> Instruction:
    """The instruction that ``word`` (an int or 16 little-endian bytes) encodes."""
    if isinstance(word, bytes | bytearray):
        if len(word) != INSN_BITS // 8:
            raise EncodingError(f"an instruction is {INSN_BITS // 8} bytes, got {len(word)}")
        word = int.from_bytes(word, "little")
    if not 0 <= word < (1 << INSN_BITS):
        raise EncodingError(f"an instruction word must fit in {INSN_BITS} bits: {word:#x}")
    raw_opcode = word & 0x7
    try:
        opcode = Opcode(raw_opcode)
    except ValueError:
        raise EncodingError(f"unknown opcode {raw_opcode} in instruction {word:#034x}") from None
    kind = _KIND_OF_OPCODE[opcode]
    kwargs: dict[str, object] = {}
    for field in isa_layout(config).fields_of(opcode):
        if field.name == "opcode":
            continue
        kwargs[field.name] = field.extract(word)
    for flag in ("pop_prev", "pop_next", "push_prev", "push_next", "reset", "use_imm"):
        if flag in kwargs:
            kwargs[flag] = bool(kwargs[flag])
    try:
        if "memory_type" in kwargs:
            kwargs["memory_type"] = MemType(kwargs["memory_type"])
        if "alu_opcode" in kwargs:
            kwargs["alu_opcode"] = AluOp(kwargs["alu_opcode"])
    except ValueError as err:
        raise EncodingError(f"{opcode.name} instruction {word:#034x}: {err}") from None
    return kind(**kwargs)


def insn_to_bytes(insn: Instruction, config: VTAConfig) -> bytes:
    return encode_insn(insn, config).to_bytes(INSN_BITS // 8, "little")


def encode_stream(insns: list[Instruction], config: VTAConfig) -> bytes:
    """The instructions as consecutive 16-byte little-endian words."""
    return b"".join(insn_to_bytes(insn, config) for insn in insns)


def decode_stream(data: bytes, config: VTAConfig) -> list[Instruction]:
    size = INSN_BITS // 8
    if len(data) % size:
        raise EncodingError(f"an instruction stream is a multiple of {size} bytes: {len(data)}")
    return [decode_insn(data[i : i + size], config) for i in range(0, len(data), size)]


def encode_uop(uop: Uop, config: VTAConfig) -> int:
    word = 0
    for field in isa_layout(config).uop:
        word = field.insert(word, getattr(uop, field.name), "UOP")
    return word


def decode_uop(word: int, config: VTAConfig) -> Uop:
    if not 0 <= word < (1 << UOP_BITS):
        raise EncodingError(f"a micro-op must fit in {UOP_BITS} bits: {word:#x}")
    fields = isa_layout(config).uop
    return Uop(**{field.name: field.extract(word) for field in fields})


def validate_insn(insn: Instruction, config: VTAConfig) -> None:
    """Raise EncodingError if any field of ``insn`` does not fit its width under ``config``."""
    encode_insn(insn, config)
