"""fsim: GEMM, ALU, loads with padding and stores against numpy; tokens, errors, counters."""

from __future__ import annotations

import numpy as np
import pytest

from tessera_vta.asm import assemble
from tessera_vta.config import DEFAULT_CONFIG
from tessera_vta.errors import DeadlockError, SimulationError, TokenError
from tessera_vta.fsim import FunctionalSimulator
from tessera_vta.isa import AluOp, Uop, encode_uop
from tessera_vta.machine import alu_apply
from tessera_vta.timing import insn_cycles

CFG = DEFAULT_CONFIG
DRAM_BYTES = 1 << 16
# Byte offsets of the test regions in DRAM.
INP_AT, WGT_AT, ACC_AT, UOP_AT, OUT_AT = 0, 8192, 16384, 24576, 32768


def simulator() -> FunctionalSimulator:
    return FunctionalSimulator(CFG, np.zeros(DRAM_BYTES, dtype=np.uint8))


def put(sim: FunctionalSimulator, offset: int, array: np.ndarray) -> None:
    data = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
    sim.machine.dram[offset : offset + data.size] = data


def put_uops(sim: FunctionalSimulator, uops: list[Uop]) -> None:
    put(sim, UOP_AT, np.array([encode_uop(u, CFG) for u in uops], dtype="<u4"))


def wrap32(value: int) -> int:
    return (value + 2**31) % 2**32 - 2**31


def test_gemm_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    sim = simulator()
    inp = rng.integers(-128, 128, (64, 1, 16), dtype=np.int8)
    wgt = rng.integers(-128, 128, (8, 16, 16), dtype=np.int8)
    start = rng.integers(-(2**31), 2**31, (48, 1, 16), dtype=np.int64).astype(np.int32)
    uops = [
        Uop(acc=int(rng.integers(8)), inp=int(rng.integers(40)), wgt=int(rng.integers(4)))
        for _ in range(6)
    ]
    uops.append(uops[0])  # a repeated destination accumulates twice
    put(sim, INP_AT, inp)
    put(sim, WGT_AT, wgt)
    put(sim, ACC_AT, start)
    put_uops(sim, uops)
    counters = sim.run(
        assemble(f"""
        LOAD INP sram=0 dram={INP_AT // 16} y=1 x=64 stride=64
        LOAD WGT sram=0 dram={WGT_AT // 256} y=1 x=8 stride=8 push_next
        LOAD UOP sram=0 dram={UOP_AT // 4} y=1 x=7 stride=7
        LOAD ACC sram=0 dram={ACC_AT // 64} y=1 x=48 stride=48
        GEMM uop=0:7 iter=2x3 dst=20,5 src=3,7 wgt=1,2 pop_prev
        FINISH
    """)
    )
    expected = start.astype(np.int64)
    touched = set()
    for i in range(2):
        for j in range(3):
            for u in uops:
                a, x, w = u.acc + 20 * i + 5 * j, u.inp + 3 * i + 7 * j, u.wgt + i + 2 * j
                expected[a] += inp[x].astype(np.int64) @ wgt[w].astype(np.int64).T
                touched.add(a)
    expected = ((expected + 2**31) % 2**32 - 2**31).astype(np.int32)
    np.testing.assert_array_equal(sim.machine.acc[:48], expected)
    rows = sorted(touched)
    np.testing.assert_array_equal(sim.machine.out[rows], expected[rows].astype(np.int8))
    assert counters.gemm_macs == 2 * 3 * 7 * 256
    assert counters.bytes_loaded == {"uop": 28, "wgt": 2048, "inp": 1024, "acc": 3072}


def test_gemm_reset_zeroes_acc_and_out() -> None:
    sim = simulator()
    sim.machine.acc[:] = 7
    sim.machine.out[:] = 7
    put_uops(sim, [Uop(acc=4, inp=0)])
    sim.run(
        assemble(f"""
        LOAD UOP sram=0 dram={UOP_AT // 4} y=1 x=1 stride=1
        GEMM reset uop=0:1 iter=2x3 dst=10,1
        FINISH
    """)
    )
    zeroed = [4, 5, 6, 14, 15, 16]
    assert not sim.machine.acc[zeroed].any() and not sim.machine.out[zeroed].any()
    assert (np.delete(sim.machine.acc, zeroed, axis=0) == 7).all()


def reference_alu(acc: np.ndarray, op: AluOp, pairs: list[tuple[int, int]], imm: int | None):
    acc = acc.astype(np.int64).copy()
    for d, s in pairs:
        b = np.int64(imm) if imm is not None else acc[s]
        if op == AluOp.MIN:
            r = np.minimum(acc[d], b)
        elif op == AluOp.MAX:
            r = np.maximum(acc[d], b)
        elif op == AluOp.ADD:
            r = acc[d] + b
        elif op == AluOp.MUL:
            r = acc[d] * b
        else:
            shift = np.clip(b, -31, 31)
            r = np.where(shift >= 0, acc[d] >> np.abs(shift), acc[d] << np.abs(shift))
        acc[d] = (r + 2**31) % 2**32 - 2**31
    return acc.astype(np.int32)


@pytest.mark.parametrize("op", list(AluOp))
@pytest.mark.parametrize("imm", [None, -7, 5, 40])
def test_alu_matches_numpy(op: AluOp, imm: int | None) -> None:
    rng = np.random.default_rng(int(op) * 10 + (imm or 0) % 7)
    sim = simulator()
    start = rng.integers(-(2**31), 2**31, (64, 1, 16), dtype=np.int64).astype(np.int32)
    if op == AluOp.SHR and imm is None:  # shift amounts from the source rows, some negative
        start[32:] = rng.integers(-40, 40, (32, 1, 16))
    put(sim, ACC_AT, start)
    put_uops(sim, [Uop(acc=0, inp=32), Uop(acc=1, inp=40)])
    imm_text = f"imm={imm}" if imm is not None else ""
    sim.run(
        assemble(f"""
        LOAD UOP sram=0 dram={UOP_AT // 4} y=1 x=2 stride=2
        LOAD ACC sram=0 dram={ACC_AT // 64} y=1 x=64 stride=64
        ALU {op.name} uop=0:2 iter=2x4 dst=8,2 src=1,2 {imm_text}
        FINISH
    """)
    )
    pairs = [
        (u_acc + 8 * i + 2 * j, u_src + i + 2 * j)
        for i in range(2)
        for j in range(4)
        for u_acc, u_src in ((0, 32), (1, 40))
    ]
    expected = reference_alu(start, op, pairs, imm)
    np.testing.assert_array_equal(sim.machine.acc[:64], expected)
    assert sim.counters.alu_ops == 16 * 16


def test_alu_chain_runs_sequentially() -> None:
    """Sources written by earlier iterations of the same instruction (a running sum)."""
    sim = simulator()
    start = np.arange(16 * 10, dtype=np.int32).reshape(10, 1, 16)
    put(sim, ACC_AT, start)
    put_uops(sim, [Uop(acc=1, inp=0)])
    sim.run(
        assemble(f"""
        LOAD UOP sram=0 dram={UOP_AT // 4} y=1 x=1 stride=1
        LOAD ACC sram=0 dram={ACC_AT // 64} y=1 x=10 stride=10
        ALU ADD uop=0:1 iter=1x9 dst=0,1 src=0,1
        FINISH
    """)
    )
    np.testing.assert_array_equal(sim.machine.acc[:10], np.cumsum(start, axis=0))


def test_alu_apply_wraps_and_clamps_shifts() -> None:
    a = np.array([2**31 - 1, -8, 1], dtype=np.int64)
    assert list(alu_apply(AluOp.ADD, a, np.int64(1))) == [-(2**31), -7, 2]
    assert list(alu_apply(AluOp.SHR, a, np.int64(100))) == [0, -1, 0]
    assert list(alu_apply(AluOp.SHR, a, np.int64(-1))) == [-2, -16, 2]


def test_input_load_pads_with_zeros() -> None:
    rng = np.random.default_rng(3)
    sim = simulator()
    image = rng.integers(-128, 128, (6, 9, 1, 16), dtype=np.int8)  # rows x cols of elements
    put(sim, INP_AT, image)
    sim.machine.inp[:] = 99  # padding must overwrite stale data
    sim.run(
        assemble(f"""
        LOAD INP sram=5 dram={INP_AT // 16 + 9 + 2} y=4 x=5 stride=9 ypad=1,2 xpad=3,1 push_next
        FINISH pop_prev
    """)
    )
    expected = np.pad(image[1:5, 2:7], ((1, 2), (3, 1), (0, 0), (0, 0)))
    got = sim.machine.inp[5 : 5 + 7 * 9].reshape(7, 9, 1, 16)
    np.testing.assert_array_equal(got, expected)
    assert (sim.machine.inp[5 + 63] == 99).all() and (sim.machine.inp[4] == 99).all()
    assert sim.counters.bytes_loaded["inp"] == 4 * 5 * 16


def test_weight_load_with_padding_is_an_error() -> None:
    with pytest.raises(SimulationError, match=r"#0 'LOAD WGT .*only input loads pad"):
        simulator().run(assemble("LOAD WGT sram=0 dram=0 y=1 x=1 stride=1 xpad=1,0\nFINISH"))


def test_store_writes_rows_with_stride() -> None:
    sim = simulator()
    rows = np.arange(6 * 16, dtype=np.int8).reshape(6, 1, 16)
    sim.machine.out[10:16] = rows
    counters = sim.run(
        assemble(f"""
        STORE OUT sram=10 dram={OUT_AT // 16} y=2 x=3 stride=5 push_prev
        FINISH pop_next
    """)
    )
    dram_rows = sim.machine.dram[OUT_AT : OUT_AT + 10 * 16].view(np.int8).reshape(10, 1, 16)
    np.testing.assert_array_equal(dram_rows[[0, 1, 2, 5, 6, 7]], rows)
    assert not dram_rows[[3, 4, 8, 9]].any()
    assert counters.bytes_stored == 96


def test_deadlock_names_the_waiting_instructions() -> None:
    stream = assemble("""
        LOAD INP sram=0 dram=0 y=1 x=1 stride=1 pop_next
        GEMM uop=0:0 pop_prev push_prev
        FINISH
    """)
    with pytest.raises(DeadlockError) as info:
        simulator().run(stream)
    message = str(info.value)
    assert "load module waits at #0 'LOAD INP sram=0" in message
    assert "compute->load" in message
    assert "compute module waits at #1 'GEMM uop=0:0" in message
    assert "load->compute" in message


def test_leftover_tokens_are_an_error() -> None:
    with pytest.raises(
        TokenError, match=r"tokens left at FINISH #1 .*compute->store \(pushed by #0\)"
    ):
        simulator().run(assemble("GEMM uop=0:0 push_next\nFINISH"))


def test_finish_must_wait_for_stores() -> None:
    stream = assemble("STORE OUT sram=0 dram=0 y=1 x=1 stride=1\nFINISH")
    with pytest.raises(TokenError, match=r"not ordered after #0 'STORE OUT"):
        simulator().run(stream)


@pytest.mark.parametrize(
    "text, message",
    [
        ("GEMM uop=0:0", "no FINISH"),
        ("FINISH\nGEMM uop=0:0", "#1 'GEMM uop=0:0 .*comes after FINISH"),
        ("LOAD INP x=1 y=1 pop_prev\nFINISH", "has no 'prev' module"),
        (f"LOAD INP dram={DRAM_BYTES} y=1 x=1 stride=1\nFINISH", "#0 'LOAD INP.*beyond the DRAM"),
        ("LOAD ACC sram=2047 y=1 x=2 stride=2\nFINISH", "beyond the 2048-entry ACC buffer"),
    ],
)
def test_bad_streams(text: str, message: str) -> None:
    with pytest.raises(SimulationError, match=message):
        simulator().run(assemble(text))


def test_timing_overlaps_modules_through_tokens() -> None:
    """Two loads and two GEMMs double-buffered: the second load overlaps the first GEMM."""
    stream = assemble(f"""
        LOAD UOP sram=0 dram={UOP_AT // 4} y=1 x=1 stride=1
        LOAD INP sram=0 dram=0 y=1 x=100 stride=100 push_next
        LOAD INP sram=1000 dram=0 y=1 x=100 stride=100 push_next
        GEMM uop=0:1 iter=1x300 dst=0,1 src=0,0 pop_prev
        GEMM uop=0:1 iter=1x300 dst=0,1 src=0,0 pop_prev
        FINISH
    """)
    sim = simulator()
    counters = sim.run(stream)
    cost = [insn_cycles(insn, CFG) for insn in stream]
    load, gemm = cost[1], cost[3]
    # compute: uop load, then waits for the first input load, then two GEMMs back to back
    assert counters.cycles == max(cost[0], load) + 2 * gemm + cost[5]
    assert counters.cycles < sum(cost)
    assert counters.instructions == {"LOAD": 3, "GEMM": 2, "FINISH": 1}
