"""ISA: bit layouts per VTA.md, encode/decode and text round trips, range errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tessera_vta.asm import assemble, disassemble, disassemble_stream
from tessera_vta.config import DEFAULT_CONFIG, VTAConfig
from tessera_vta.errors import AsmError, EncodingError
from tessera_vta.isa import (
    Alu,
    AluOp,
    Finish,
    Gemm,
    Load,
    MemType,
    Module,
    Store,
    Uop,
    decode_insn,
    decode_stream,
    decode_uop,
    encode_insn,
    encode_stream,
    encode_uop,
    isa_layout,
)

CFG = DEFAULT_CONFIG
SMALL = VTAConfig(log_block=3, log_inp_buff_size=14, log_wgt_buff_size=16, log_acc_buff_size=16)


def bits(word: int, hi: int, lo: int) -> int:
    return (word >> lo) & ((1 << (hi - lo + 1)) - 1)


def test_memory_layout_matches_vta_md() -> None:
    insn = Load(
        memory_type=MemType.INP,
        sram_base=0xBEEF,
        dram_base=0xDEADBEEF,
        y_size=0x1234,
        x_size=0x5678,
        x_stride=0x9ABC,
        y_pad_0=1,
        y_pad_1=2,
        x_pad_0=3,
        x_pad_1=4,
        pop_next=True,
        push_prev=True,
    )
    word = encode_insn(insn, CFG)
    assert bits(word, 2, 0) == 0 and bits(word, 3, 3) == 0 and bits(word, 4, 4) == 1
    assert bits(word, 5, 5) == 1 and bits(word, 6, 6) == 0
    assert bits(word, 9, 7) == 2
    assert bits(word, 25, 10) == 0xBEEF
    assert bits(word, 57, 26) == 0xDEADBEEF
    assert bits(word, 79, 64) == 0x1234
    assert bits(word, 95, 80) == 0x5678
    assert bits(word, 111, 96) == 0x9ABC
    assert [bits(word, h, h - 3) for h in (115, 119, 123, 127)] == [1, 2, 3, 4]
    assert bits(encode_insn(Store(), CFG), 2, 0) == 1


def test_gemm_and_alu_layout_matches_vta_md() -> None:
    gemm = Gemm(
        reset=True,
        uop_bgn=0x1ABC,
        uop_end=0x2DEF,
        iter_out=0x3001,
        iter_in=0x2002,
        dst_factor_out=0x701,
        dst_factor_in=0x702,
        src_factor_out=0x703,
        src_factor_in=0x704,
        wgt_factor_out=0x305,
        wgt_factor_in=0x306,
    )
    word = encode_insn(gemm, CFG)
    assert bits(word, 2, 0) == 2 and bits(word, 7, 7) == 1
    assert bits(word, 20, 8) == 0x1ABC and bits(word, 34, 21) == 0x2DEF
    assert bits(word, 48, 35) == 0x3001 and bits(word, 62, 49) == 0x2002
    assert bits(word, 74, 64) == 0x701 and bits(word, 85, 75) == 0x702
    assert bits(word, 96, 86) == 0x703 and bits(word, 107, 97) == 0x704
    assert bits(word, 117, 108) == 0x305 and bits(word, 127, 118) == 0x306
    alu = Alu(alu_opcode=AluOp.SHR, use_imm=True, imm=-3, uop_end=1, src_factor_in=0x7FF)
    word = encode_insn(alu, CFG)
    assert bits(word, 2, 0) == 4
    assert bits(word, 107, 97) == 0x7FF
    assert bits(word, 110, 108) == 3 and bits(word, 111, 111) == 1
    assert bits(word, 127, 112) == 0xFFFD
    assert bits(encode_insn(Finish(), CFG), 2, 0) == 3


def test_uop_layout_matches_vta_md() -> None:
    word = encode_uop(Uop(acc=0x7FF, inp=0x555, wgt=0x3AA), CFG)
    assert bits(word, 10, 0) == 0x7FF and bits(word, 21, 11) == 0x555
    assert bits(word, 31, 22) == 0x3AA


def random_fields(kind: type, config: VTAConfig, rng: np.random.Generator) -> dict:
    opcode = kind.opcode
    fields = {}
    for field in isa_layout(config).fields_of(opcode):
        if field.name == "opcode":
            continue
        low, high = field.value_range()
        value = int(rng.integers(low, high + 1))
        if field.name in ("pop_prev", "pop_next", "push_prev", "push_next", "reset", "use_imm"):
            value = bool(value)
        fields[field.name] = value
    if "memory_type" in fields:
        allowed = [MemType.OUT] if kind is Store else [t for t in MemType if t != MemType.OUT]
        fields["memory_type"] = allowed[int(rng.integers(len(allowed)))]
    if "alu_opcode" in fields:
        fields["alu_opcode"] = AluOp(int(rng.integers(len(AluOp))))
    return fields


@pytest.mark.parametrize("config", [CFG, SMALL], ids=["default", "8x8"])
@pytest.mark.parametrize("kind", [Load, Store, Gemm, Alu, Finish])
def test_random_round_trips(kind: type, config: VTAConfig) -> None:
    rng = np.random.default_rng(hash(kind.__name__) % 2**32)
    for _ in range(200):
        insn = kind(**random_fields(kind, config, rng))
        word = encode_insn(insn, config)
        assert 0 <= word < 1 << 128
        assert decode_insn(word, config) == insn
        raw = word.to_bytes(16, "little")
        assert decode_insn(raw, config) == insn
        assert assemble(disassemble(insn)) == [insn]


def test_uop_random_round_trips() -> None:
    rng = np.random.default_rng(7)
    for _ in range(500):
        uop = Uop(
            acc=int(rng.integers(CFG.acc_depth)),
            inp=int(rng.integers(CFG.inp_depth)),
            wgt=int(rng.integers(CFG.wgt_depth)),
        )
        assert decode_uop(encode_uop(uop, CFG), CFG) == uop


STREAM_TEXT = """\
# a tiny stream
LOAD INP sram=0 dram=128 y=4 x=8 stride=14 ypad=1,1 xpad=1,1 push_next
LOAD WGT sram=0 dram=0 y=1 x=9 stride=9
LOAD UOP sram=0 dram=64 y=1 x=3 stride=3
GEMM reset uop=0:1 iter=1x64 dst=0,1 src=0,0 wgt=0,0
GEMM uop=1:10 iter=2x8 dst=64,8 src=0,10 wgt=9,0 pop_prev push_prev
ALU ADD uop=10:11 iter=2x64 dst=64,1 src=1,0
ALU SHR uop=11:12 iter=1x128 dst=1,0 src=1,0 imm=8
ALU MIN uop=11:12 iter=1x128 dst=1,0 src=1,0 imm=-1 push_next
STORE OUT sram=0 dram=0 y=8 x=8 stride=8 pop_prev
FINISH
"""


def test_text_bytes_text_round_trip() -> None:
    insns = assemble(STREAM_TEXT)
    assert len(insns) == 10
    assert [insn.module for insn in insns[:3]] == [Module.LOAD, Module.LOAD, Module.COMPUTE]
    data = encode_stream(insns, CFG)
    assert len(data) == 160
    assert decode_stream(data, CFG) == insns
    text = disassemble_stream(insns)
    assert assemble(text) == insns
    body = [line for line in STREAM_TEXT.splitlines() if not line.startswith("#")]
    assert text.splitlines() == body


def test_out_of_range_field_names_the_field() -> None:
    with pytest.raises(EncodingError, match=r"GEMM.iter_out = 20000 does not fit in 14 bits"):
        encode_insn(Gemm(iter_out=20000), CFG)
    with pytest.raises(EncodingError, match=r"ALU.imm = 40000 does not fit in 16 bits"):
        encode_insn(Alu(use_imm=True, imm=40000), CFG)
    with pytest.raises(EncodingError, match=r"UOP.acc = 2048 does not fit in 11 bits"):
        encode_uop(Uop(acc=2048, inp=0), CFG)
    with pytest.raises(EncodingError, match=r"LOAD.y_pad_0 = 16"):
        encode_insn(Load(y_pad_0=16), CFG)


def test_bad_words_do_not_decode() -> None:
    with pytest.raises(EncodingError, match="unknown opcode 5"):
        decode_insn(5, CFG)
    with pytest.raises(EncodingError, match="16 bytes"):
        decode_insn(b"\x00" * 8, CFG)
    bad_memory_type = 0 | (6 << 7)
    with pytest.raises(EncodingError, match="LOAD instruction"):
        decode_insn(bad_memory_type, CFG)


def test_memory_types_are_checked() -> None:
    with pytest.raises(EncodingError, match="output buffer"):
        Load(memory_type=MemType.OUT)
    with pytest.raises(EncodingError, match="STORE reads the output buffer only"):
        Store(memory_type=MemType.INP)


@pytest.mark.parametrize(
    "line, message",
    [
        ("JUMP 3", "unknown instruction 'JUMP'"),
        ("LOAD FOO sram=1", "unknown memory type 'FOO'"),
        ("GEMM uop=1", "uop= expects 2 integers"),
        ("GEMM bogus=1", "unknown operand 'bogus'"),
        ("ALU POW uop=0:1", "unknown ALU operation 'POW'"),
        ("FINISH pop_sideways", "unknown flag 'pop_sideways'"),
    ],
)
def test_assembler_errors_name_the_line(line: str, message: str) -> None:
    with pytest.raises(AsmError, match=message) as info:
        assemble("FINISH\n" + line)
    assert "line 2" in str(info.value)


def test_replace_keeps_kind() -> None:
    insn = Gemm(uop_end=3)
    changed = insn.replace(pop_prev=True)
    assert isinstance(changed, Gemm) and changed.pop_prev and changed.uop_end == 3
    assert dataclasses.replace(insn, reset=True).reset
