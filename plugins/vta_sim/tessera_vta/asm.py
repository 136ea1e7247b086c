"""Assembler and disassembler: a readable text form of VTA instruction streams.

One instruction a line; ``#`` starts a comment. Dependency flags (``pop_prev pop_next push_prev
push_next``) and ``reset`` are bare words; everything else is ``key=value``::

    LOAD INP sram=0 dram=128 y=4 x=8 stride=14 ypad=1,1 xpad=1,1 push_next
    LOAD WGT sram=0 dram=0 y=1 x=9 stride=9
    GEMM reset uop=0:1 iter=1x64 dst=0,1 src=0,0 wgt=0,0
    GEMM uop=1:10 iter=2x8 dst=64,8 src=0,10 wgt=9,0 pop_prev push_prev
    ALU ADD uop=10:11 iter=2x64 dst=64,1 src=1,0
    ALU SHR uop=11:12 iter=1x128 dst=1,0 src=1,0 imm=8
    STORE OUT sram=0 dram=0 y=8 x=8 stride=8 pop_prev
    FINISH

``iter=OUTxIN`` are the loop counts, ``dst``/``src``/``wgt`` the (out, in) loop factors and
``imm=`` selects an immediate ALU operand (``unused_imm=`` keeps immediate bits that are set
but not used, so that text round-trips any encoding). Omitted fields are zero (``iter``
defaults to 1x1).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from .errors import AsmError
from .isa import (
    Alu,
    AluOp,
    Finish,
    Gemm,
    Instruction,
    Load,
    LoopInsn,
    MemoryInsn,
    MemType,
    Store,
    Uop,
)

_DEP_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


# -- disassembler -------------------------------------------------------------------------------


def _flags(insn: Instruction) -> list[str]:
    return [flag for flag in _DEP_FLAGS if getattr(insn, flag)]


def _loop_text(insn: LoopInsn) -> list[str]:
    parts = ["reset"] if insn.reset else []
    parts += [
        f"uop={insn.uop_bgn}:{insn.uop_end}",
        f"iter={insn.iter_out}x{insn.iter_in}",
        f"dst={insn.dst_factor_out},{insn.dst_factor_in}",
        f"src={insn.src_factor_out},{insn.src_factor_in}",
    ]
    return parts


def disassemble(insn: Instruction) -> str:
    """One line of text for ``insn``."""
    if isinstance(insn, MemoryInsn):
        head = "LOAD" if isinstance(insn, Load) else "STORE"
        parts = [
            head,
            insn.memory_type.name,
            f"sram={insn.sram_base}",
            f"dram={insn.dram_base}",
            f"y={insn.y_size}",
            f"x={insn.x_size}",
            f"stride={insn.x_stride}",
        ]
        if insn.y_pad_0 or insn.y_pad_1:
            parts.append(f"ypad={insn.y_pad_0},{insn.y_pad_1}")
        if insn.x_pad_0 or insn.x_pad_1:
            parts.append(f"xpad={insn.x_pad_0},{insn.x_pad_1}")
    elif isinstance(insn, Gemm):
        parts = ["GEMM", *_loop_text(insn), f"wgt={insn.wgt_factor_out},{insn.wgt_factor_in}"]
    elif isinstance(insn, Alu):
        parts = ["ALU", insn.alu_opcode.name, *_loop_text(insn)]
        if insn.use_imm:
            parts.append(f"imm={insn.imm}")
        elif insn.imm:
            parts.append(f"unused_imm={insn.imm}")  # bits that are set but not used
    elif isinstance(insn, Finish):
        parts = ["FINISH"]
    else:
        raise TypeError(f"not a VTA instruction: {insn!r}")
    return " ".join(parts + _flags(insn))


def disassemble_stream(insns: list[Instruction], numbered: bool = False) -> str:
    """The text of a whole stream, optionally with ``#index`` comments."""
    lines = []
    for index, insn in enumerate(insns):
        text = disassemble(insn)
        lines.append(f"{text:<72} # {index}" if numbered else text)
    return "\n".join(lines) + ("\n" if lines else "")


def disassemble_uop(uop: Uop) -> str:
    return f"UOP acc={uop.acc} inp={uop.inp} wgt={uop.wgt}"


# -- assembler ----------------------------------------------------------------------------------


def _ints(text: str, count: int, key: str, sep: str = ",") -> list[int]:
    pieces = text.split(sep)
    if len(pieces) != count:
        raise AsmError(f"{key}= expects {count} integers separated by {sep!r}, got {text!r}")
    try:
        return [int(piece, 0) for piece in pieces]
    except ValueError:
        raise AsmError(f"{key}= expects integers, got {text!r}") from None


def _parse_operands(tokens: list[str], allowed: set[str]) -> tuple[dict[str, str], set[str]]:
    values: dict[str, str] = {}
    flags: set[str] = set()
    for token in tokens:
        if "=" in token:
            key, _, value = token.partition("=")
            key = key.lower()
            if key not in allowed:
                raise AsmError(f"unknown operand {key!r}; expected one of {sorted(allowed)}")
            if key in values:
                raise AsmError(f"operand {key!r} given twice")
            values[key] = value
        else:
            flag = token.lower()
            if flag not in _DEP_FLAGS and flag != "reset":
                raise AsmError(f"unknown flag {token!r}; expected reset or one of {_DEP_FLAGS}")
            flags.add(flag)
    return values, flags


def _enum_member(enum_type: type[IntEnum], name: str, what: str) -> Any:
    try:
        return enum_type[name.upper()]
    except KeyError:
        names = ", ".join(member.name for member in enum_type)
        raise AsmError(f"unknown {what} {name!r}; expected one of {names}") from None


def _assemble_memory(head: str, tokens: list[str]) -> Instruction:
    if not tokens:
        raise AsmError(f"{head} needs a memory type")
    memory_type = _enum_member(MemType, tokens[0], "memory type")
    values, flags = _parse_operands(
        tokens[1:], {"sram", "dram", "y", "x", "stride", "ypad", "xpad"}
    )
    if "reset" in flags:
        raise AsmError(f"{head} has no reset flag")
    fields = {
        "sram_base": int(values.get("sram", "0"), 0),
        "dram_base": int(values.get("dram", "0"), 0),
        "y_size": int(values.get("y", "0"), 0),
        "x_size": int(values.get("x", "0"), 0),
        "x_stride": int(values.get("stride", "0"), 0),
    }
    fields["y_pad_0"], fields["y_pad_1"] = _ints(values.get("ypad", "0,0"), 2, "ypad")
    fields["x_pad_0"], fields["x_pad_1"] = _ints(values.get("xpad", "0,0"), 2, "xpad")
    kind = Load if head == "LOAD" else Store
    return kind(memory_type=memory_type, **fields, **{flag: True for flag in flags})


def _loop_fields(values: dict[str, str]) -> dict[str, int]:
    fields: dict[str, int] = {}
    fields["uop_bgn"], fields["uop_end"] = _ints(values.get("uop", "0:0"), 2, "uop", ":")
    fields["iter_out"], fields["iter_in"] = _ints(values.get("iter", "1x1"), 2, "iter", "x")
    fields["dst_factor_out"], fields["dst_factor_in"] = _ints(values.get("dst", "0,0"), 2, "dst")
    fields["src_factor_out"], fields["src_factor_in"] = _ints(values.get("src", "0,0"), 2, "src")
    return fields


def assemble_line(line: str) -> Instruction | None:
    """The instruction on one line of text, or None for a blank or comment-only line."""
    tokens = line.split("#", 1)[0].split()
    if not tokens:
        return None
    head = tokens[0].upper()
    if head in ("LOAD", "STORE"):
        return _assemble_memory(head, tokens[1:])
    if head == "GEMM":
        values, flags = _parse_operands(tokens[1:], {"uop", "iter", "dst", "src", "wgt"})
        fields = _loop_fields(values)
        fields["wgt_factor_out"], fields["wgt_factor_in"] = _ints(
            values.get("wgt", "0,0"), 2, "wgt"
        )
        return Gemm(**fields, **{flag: True for flag in flags})
    if head == "ALU":
        if len(tokens) < 2:
            raise AsmError("ALU needs an operation (MIN, MAX, ADD, SHR, MUL)")
        alu_opcode = _enum_member(AluOp, tokens[1], "ALU operation")
        values, flags = _parse_operands(
            tokens[2:], {"uop", "iter", "dst", "src", "imm", "unused_imm"}
        )
        fields = _loop_fields(values)
        use_imm = "imm" in values
        if use_imm and "unused_imm" in values:
            raise AsmError("give either imm= (used) or unused_imm=, not both")
        imm = int(values["imm"] if use_imm else values.get("unused_imm", "0"), 0)
        return Alu(
            alu_opcode=alu_opcode,
            use_imm=use_imm,
            imm=imm,
            **fields,
            **{flag: True for flag in flags},
        )
    if head == "FINISH":
        values, flags = _parse_operands(tokens[1:], set())
        if "reset" in flags:
            raise AsmError("FINISH has no reset flag")
        return Finish(**{flag: True for flag in flags})
    raise AsmError(f"unknown instruction {tokens[0]!r}; expected LOAD, STORE, GEMM, ALU, FINISH")


def assemble(text: str) -> list[Instruction]:
    """The instructions of a whole text; errors name the line."""
    insns: list[Instruction] = []
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            insn = assemble_line(line)
        except (AsmError, ValueError) as err:
            raise AsmError(f"line {number}: {line.strip()!r}: {err}") from None
        if insn is not None:
            insns.append(insn)
    return insns
