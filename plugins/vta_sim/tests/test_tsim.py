"""tsim: the Verilog core is bit-exact with fsim on the same streams and counts cycles.

Skipped, with the reason, where Verilator or pyverilator is missing. The first test builds the
core (about 15 s on two cores) into the cache; later runs reuse it.
"""

from __future__ import annotations

import numpy as np
import pytest

from tessera_vta.asm import assemble
from tessera_vta.compiler import Tiling, compile_conv2d, compile_dense, conv2d_reference
from tessera_vta.config import DEFAULT_CONFIG
from tessera_vta.errors import TsimError
from tessera_vta.fsim import run_fsim
from tessera_vta.isa import Uop, encode_uop
from tessera_vta.runner import run
from tessera_vta.tsim import unavailable_reason

REASON = unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"tsim unavailable: {REASON}")

CFG = DEFAULT_CONFIG


@pytest.fixture(scope="module")
def tsim():
    from tessera_vta.tsim import load_model

    return load_model(CFG)


def compare(insns, dram, tsim) -> tuple[int, int]:
    """Run on both simulators; the whole final DRAM must match. Returns (fsim, tsim) cycles."""
    fsim_dram, counters = run_fsim(insns, dram, CFG)
    tsim_dram, cycles = tsim.run(insns, dram)
    np.testing.assert_array_equal(tsim_dram, fsim_dram)
    return counters.cycles, cycles


CONV_CASES = [
    # (batch, in_ch, h, w, out_ch, kernel, stride, padding, shift, relu, tiling)
    (1, 16, 8, 8, 16, 3, 1, 1, 8, True, None),
    (1, 3, 9, 9, 5, 3, 2, 1, 6, False, None),
    (1, 20, 7, 9, 33, 1, 1, 0, 9, True, None),
    (1, 8, 11, 11, 24, 7, 2, 3, 12, False, None),
    (2, 40, 9, 10, 45, 3, 1, 1, 10, True, Tiling(2, 2, 3, 4)),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=[str(i) for i in range(len(CONV_CASES))])
def test_conv2d_layers_match_fsim(case, tsim) -> None:
    n, c, h, w, o, k, stride, padding, shift, relu, tiling = case
    rng = np.random.default_rng(len(CONV_CASES) + c * 7 + o)
    x = rng.integers(-128, 128, (n, c, h, w), dtype=np.int8)
    weight = rng.integers(-128, 128, (o, c, k, k), dtype=np.int8)
    bias = rng.integers(-20000, 20000, o, dtype=np.int32)
    program = compile_conv2d(
        x.shape,
        weight,
        bias,
        stride=stride,
        padding=padding,
        shift=shift,
        relu=relu,
        tiling=tiling,
    )
    fsim_cycles, tsim_cycles = compare(program.insns, program.dram_with_input(x), tsim)
    result = run(program, x, sim="tsim")
    np.testing.assert_array_equal(result.output, conv2d_reference(x, weight, bias, program.params))
    assert result.cycles == tsim_cycles
    # fsim's timing model follows the RTL closely
    assert abs(fsim_cycles - tsim_cycles) <= 0.05 * tsim_cycles + 50


def test_dense_layer_matches_fsim(tsim) -> None:
    rng = np.random.default_rng(11)
    x = rng.integers(-128, 128, (4, 70), dtype=np.int8)
    weight = rng.integers(-128, 128, (30, 70), dtype=np.int8)
    program = compile_dense(x.shape, weight, rng.integers(-99, 99, 30, dtype=np.int32), shift=7)
    assert np.array_equal(run(program, x, "tsim").output, run(program, x, "fsim").output)


def test_alu_and_gemm_streams_match_fsim(tsim) -> None:
    """Hand-written stream: every ALU op (with imm and with a source), chained sources,
    GEMM with resets and loop factors, padded loads and strided stores."""
    rng = np.random.default_rng(2)
    dram = np.zeros(1 << 16, dtype=np.uint8)
    dram[:4096] = rng.integers(0, 256, 4096, dtype=np.uint8)  # inputs and weights
    acc = rng.integers(-(2**20), 2**20, (32, 16), dtype=np.int64).astype("<i4")
    acc[16:] = rng.integers(-40, 40, (16, 16))  # small values for SHR by a source
    dram[8192 : 8192 + acc.nbytes] = acc.view(np.uint8).reshape(-1)
    uops = [
        Uop(acc=0, inp=0, wgt=0),
        Uop(acc=1, inp=5, wgt=3),
        Uop(acc=2, inp=16, wgt=0),
        Uop(acc=1, inp=0, wgt=0),
    ]
    words = np.array([encode_uop(u, CFG) for u in uops], dtype="<u4")
    dram[12288 : 12288 + words.nbytes] = words.view(np.uint8)
    text = """
        LOAD INP sram=0 dram=0 y=3 x=4 stride=6 ypad=1,0 xpad=2,1
        LOAD WGT sram=0 dram=2 y=1 x=8 stride=8 push_next
        LOAD UOP sram=0 dram=3072 y=1 x=4 stride=4
        LOAD ACC sram=0 dram=128 y=1 x=32 stride=32
        ALU ADD uop=3:4 iter=1x6 dst=0,1 src=0,1
        ALU SHR uop=2:3 iter=2x3 dst=3,1 src=1,1
        ALU MIN uop=0:1 iter=1x8 dst=0,1 src=0,0 imm=1000
        ALU MAX uop=0:2 iter=2x2 dst=4,2 src=0,1 imm=-300
        ALU SHR uop=0:1 iter=1x4 dst=0,1 src=0,0 imm=-2
        GEMM uop=0:2 iter=2x3 dst=7,2 src=3,4 wgt=2,1 pop_prev
        GEMM reset uop=0:1 iter=1x2 dst=0,9
        ALU ADD uop=2:3 iter=1x3 dst=0,1 src=0,1 push_next
        STORE OUT sram=0 dram=1000 y=3 x=5 stride=7 pop_prev push_prev
        FINISH pop_next
    """
    compare(assemble(text), dram, tsim)


def test_deadlock_is_reported(tsim) -> None:
    stream = assemble("""
        LOAD INP sram=0 dram=0 y=1 x=1 stride=1 pop_next
        GEMM uop=0:0 pop_prev push_prev
        FINISH
    """)
    with pytest.raises(TsimError, match=r"stalled \(deadlock\)[\s\S]*waits at #0 'LOAD INP"):
        tsim.run(stream, np.zeros(4096, dtype=np.uint8))


def test_leftover_tokens_are_reported(tsim) -> None:
    with pytest.raises(TsimError, match="tokens left .*compute->store"):
        tsim.run(assemble("GEMM uop=0:0 push_next\nFINISH"), np.zeros(64, dtype=np.uint8))


def test_alu_mul_is_fsim_only(tsim) -> None:
    with pytest.raises(TsimError, match="MUL exists only in the functional simulator"):
        tsim.run(assemble("ALU MUL uop=0:0\nFINISH"), np.zeros(64, dtype=np.uint8))


def test_out_of_range_dram_is_reported(tsim) -> None:
    stream = assemble("LOAD INP sram=0 dram=100 y=1 x=1 stride=1 push_next\nFINISH pop_prev")
    with pytest.raises(TsimError, match="outside the 64-byte image"):
        tsim.run(stream, np.zeros(64, dtype=np.uint8))


def test_build_is_cached() -> None:
    from tessera_vta.tsim.build import build_key, build_model

    first = build_model(CFG)
    assert first.exists() and build_model(CFG) == first
    assert build_key(CFG) in str(first)
