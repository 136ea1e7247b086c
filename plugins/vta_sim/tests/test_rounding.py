"""Requantizing shifts that round to nearest, ties to even (``rounding="half_even"``): the ALU
sequence in the compiled streams matches numpy's round-half-even on fsim and tsim."""

from __future__ import annotations

import numpy as np
import pytest

from tessera_vta.compiler import (
    Conv2dParams,
    choose_tiling,
    compile_conv2d,
    compile_dense,
    conv2d_reference,
    dense_reference,
)
from tessera_vta.compiler.reference import conv2d_accumulate, requantize
from tessera_vta.compiler.tiling import check_fits
from tessera_vta.config import DEFAULT_CONFIG
from tessera_vta.errors import CompileError
from tessera_vta.isa import Alu, AluOp
from tessera_vta.runner import run
from tessera_vta.tsim import unavailable_reason


def exact_round(acc: np.ndarray, shift: int, relu: bool) -> np.ndarray:
    """The oracle, written independently of the compiler's reference: x / 2^shift rounded half
    to even (np.rint) in float64, clipped."""
    value = np.rint(acc.astype(np.float64) / 2.0**shift)
    return np.clip(value, 0 if relu else -128, 127).astype(np.int8)


@pytest.mark.parametrize("shift", [1, 2, 5, 9, 16, 31])
@pytest.mark.parametrize("relu", [False, True])
def test_conv2d_rounds_half_to_even(shift: int, relu: bool) -> None:
    rng = np.random.default_rng(shift * 3 + relu)
    x = rng.integers(-128, 128, (2, 20, 7, 9), dtype=np.int8)
    weight = rng.integers(-128, 128, (33, 20, 3, 3), dtype=np.int8)
    # small values make ties (low bits exactly 100..0) frequent for small shifts
    if shift <= 2:
        x = (x // 32).astype(np.int8)
        weight = (weight // 32).astype(np.int8)
    bias = rng.integers(-5000, 5000, 33, dtype=np.int32)
    program = compile_conv2d(x.shape, weight, bias, padding=1, shift=shift, relu=relu,
                             rounding="half_even")
    out = run(program, x).output
    params0 = Conv2dParams(**{**program.params.__dict__, "shift": 0, "rounding": "floor"})
    acc = conv2d_accumulate(x, weight, params0).astype(np.int64) + bias[None, :, None, None]
    np.testing.assert_array_equal(out, exact_round(acc, shift, relu))
    np.testing.assert_array_equal(out, conv2d_reference(x, weight, bias, program.params))
    if shift == 1:
        ties = (acc % 2 == 1).sum()
        assert ties > 100  # the case does exercise ties
        assert not np.array_equal(out, requantize(acc, shift, relu, "floor"))


@pytest.mark.parametrize("shift", [1, 7, 12])
def test_dense_rounds_half_to_even(shift: int) -> None:
    rng = np.random.default_rng(shift)
    x = rng.integers(-128, 128, (3, 70), dtype=np.int8)
    weight = rng.integers(-128, 128, (40, 70), dtype=np.int8)
    bias = rng.integers(-999, 999, 40, dtype=np.int32)
    program = compile_dense(x.shape, weight, bias, shift=shift, rounding="half_even")
    acc = x.astype(np.int64) @ weight.T.astype(np.int64) + bias
    np.testing.assert_array_equal(run(program, x).output, exact_round(acc, shift, False))
    np.testing.assert_array_equal(run(program, x).output,
                                  dense_reference(x, weight, bias, shift, False, "half_even"))


def test_rounding_uses_scratch_rows_and_only_hardware_alu_ops() -> None:
    params = Conv2dParams(1, 16, 8, 8, 16, 3, 3, pad_top=1, pad_left=1, pad_bottom=1,
                          pad_right=1, shift=6, rounding="half_even")
    tiling = choose_tiling(params, DEFAULT_CONFIG)
    assert check_fits(tiling, params, DEFAULT_CONFIG) is None
    rng = np.random.default_rng(0)
    weight = rng.integers(-128, 128, params.weight_shape, dtype=np.int8)
    program = compile_conv2d(params.input_shape, weight, None, padding=1, shift=6,
                             rounding="half_even")
    ops = [insn.alu_opcode for insn in program.insns if isinstance(insn, Alu)]
    assert AluOp.MUL not in ops
    assert ops.count(AluOp.SHR) == 3 * len([i for i in program.insns if isinstance(i, Alu)
                                           and i.alu_opcode == AluOp.MIN])
    # no rounding needed for shift 0: the floor stream
    floor = compile_conv2d(params.input_shape, weight, None, padding=1, shift=0,
                           rounding="half_even")
    assert not any(isinstance(i, Alu) and i.alu_opcode == AluOp.SHR for i in floor.insns)


def test_bad_rounding_and_bias_overflow_are_compile_errors() -> None:
    weight = np.ones((16, 16, 1, 1), np.int8)
    with pytest.raises(CompileError, match="rounding = 'up'"):
        compile_conv2d((1, 16, 4, 4), weight, rounding="up")
    bias = np.full(16, np.iinfo(np.int32).max, np.int32)
    with pytest.raises(CompileError, match="overflows int32"):
        compile_conv2d((1, 16, 4, 4), weight, bias, shift=4, rounding="half_even")


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"tsim: {unavailable_reason()}")
def test_rounding_stream_matches_on_tsim() -> None:
    rng = np.random.default_rng(5)
    x = rng.integers(-16, 16, (1, 20, 6, 7), dtype=np.int8)
    weight = rng.integers(-16, 16, (24, 20, 3, 3), dtype=np.int8)
    bias = rng.integers(-500, 500, 24, dtype=np.int32)
    program = compile_conv2d(x.shape, weight, bias, padding=1, shift=2, relu=True,
                             rounding="half_even")
    tsim, fsim = run(program, x, "tsim"), run(program, x, "fsim")
    np.testing.assert_array_equal(tsim.output, fsim.output)
    np.testing.assert_array_equal(tsim.output, conv2d_reference(x, weight, bias, program.params))
