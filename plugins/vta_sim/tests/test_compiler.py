"""The compiler: conv2d and dense layers bit-exact against the numpy int8 reference on fsim."""

from __future__ import annotations

import numpy as np
import pytest

from tessera_vta.compiler import (
    Conv2dParams,
    Tiling,
    choose_tiling,
    compile_conv2d,
    compile_dense,
    conv2d_reference,
    dense_reference,
)
from tessera_vta.compiler.packing import (
    pack_activation,
    pack_bias,
    pack_weight,
    unpack_activation,
)
from tessera_vta.compiler.tiling import check_fits
from tessera_vta.config import DEFAULT_CONFIG, VTAConfig
from tessera_vta.errors import CompileError
from tessera_vta.isa import Gemm, Load, MemType
from tessera_vta.runner import run

SMALL = VTAConfig(log_block=3, log_inp_buff_size=14, log_wgt_buff_size=16, log_acc_buff_size=16)


def random_layer(rng, n, c, h, w, o, kh, kw):
    x = rng.integers(-128, 128, (n, c, h, w), dtype=np.int8)
    weight = rng.integers(-128, 128, (o, c, kh, kw), dtype=np.int8)
    bias = rng.integers(-20000, 20000, o, dtype=np.int32)
    return x, weight, bias


# (batch, in_ch, height, width, out_ch, kernel, stride, padding, shift, relu)
CONV_CASES = [
    (1, 16, 8, 8, 16, (3, 3), 1, 1, 8, False),
    (1, 3, 9, 9, 5, (3, 3), 1, 1, 6, True),
    (1, 20, 9, 7, 33, (3, 3), 2, 1, 9, True),
    (2, 16, 5, 5, 16, (1, 1), 1, 0, 7, False),
    (1, 40, 14, 14, 70, (7, 7), 2, 3, 12, True),
    (1, 3, 23, 23, 8, (7, 7), 2, 3, 10, False),
    (1, 24, 10, 12, 40, (1, 1), 2, 0, 7, True),
    (1, 17, 6, 11, 18, (3, 5), (1, 2), (1, 2), 9, False),
    (3, 8, 7, 7, 9, (2, 2), 2, 1, 5, True),
    (1, 64, 12, 12, 64, (3, 3), 1, 1, 11, True),
    (1, 48, 6, 6, 128, (3, 3), 2, 1, 11, False),
    (1, 33, 4, 4, 17, (3, 3), 1, 2, 8, True),
    (1, 1, 5, 5, 1, (5, 5), 1, 4, 4, False),
    (1, 16, 1, 1, 16, (1, 1), 1, 0, 0, False),
    (1, 96, 9, 9, 48, (3, 3), 3, (0, 1, 2, 0), 10, True),
]


def run_conv_case(case, config=DEFAULT_CONFIG, tiling=None):
    n, c, h, w, o, (kh, kw), stride, padding, shift, relu = case
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    x, weight, bias = random_layer(rng, n, c, h, w, o, kh, kw)
    program = compile_conv2d(
        x.shape,
        weight,
        bias,
        stride=stride,
        padding=padding,
        shift=shift,
        relu=relu,
        config=config,
        tiling=tiling,
    )
    result = run(program, x, sim="fsim")
    expected = conv2d_reference(x, weight, bias, program.params)
    assert result.output.shape == expected.shape == program.output_shape
    np.testing.assert_array_equal(result.output, expected)
    return program, result


@pytest.mark.parametrize("case", CONV_CASES, ids=[str(i) for i in range(len(CONV_CASES))])
def test_conv2d_bit_exact(case) -> None:
    program, result = run_conv_case(case)
    padded_macs = result.counters.gemm_macs
    assert padded_macs >= program.macs
    assert result.cycles > 0


@pytest.mark.parametrize(
    "tiling",
    [Tiling(1, 1, 2, 3), Tiling(2, 2, 3, 5), Tiling(1, 3, 1, 1), Tiling(3, 1, 4, 4)],
    ids=str,
)
def test_conv2d_forced_tilings(tiling: Tiling) -> None:
    """Many tiles, edge tiles and reduction chunks exercise both virtual threads."""
    program, _ = run_conv_case((1, 40, 11, 13, 45, (3, 3), 1, 1, 9, True), tiling=tiling)
    assert program.tiling == tiling


@pytest.mark.parametrize("case", CONV_CASES[:6], ids=[str(i) for i in range(6)])
def test_conv2d_on_an_8x8_core(case) -> None:
    run_conv_case(case, config=SMALL)


@pytest.mark.parametrize(
    "n, k, m, shift, relu",
    [(1, 16, 16, 4, False), (3, 100, 37, 6, True), (16, 64, 10, 8, False), (5, 512, 100, 9, True)],
)
def test_dense_bit_exact(n: int, k: int, m: int, shift: int, relu: bool) -> None:
    rng = np.random.default_rng(n * 1000 + k)
    x = rng.integers(-128, 128, (n, k), dtype=np.int8)
    weight = rng.integers(-128, 128, (m, k), dtype=np.int8)
    bias = rng.integers(-20000, 20000, m, dtype=np.int32)
    program = compile_dense(x.shape, weight, bias, shift=shift, relu=relu)
    result = run(program, x)
    np.testing.assert_array_equal(result.output, dense_reference(x, weight, bias, shift, relu))
    assert program.macs == n * k * m


def test_program_structure() -> None:
    program, _ = run_conv_case((1, 32, 8, 8, 32, (3, 3), 1, 1, 8, True), tiling=Tiling(1, 2, 4, 8))
    insns = program.insns
    loads = [i for i in insns if isinstance(i, Load) and i.memory_type == MemType.INP]
    assert any(i.has_padding for i in loads)
    gemms = [i for i in insns if isinstance(i, Gemm) and not i.reset]
    assert len(gemms) == 4 and all(g.pop_prev for g in gemms)
    # compute -> load tokens are only pushed for groups that have a successor two later
    assert [g.push_prev for g in gemms] == [True, True, False, False]
    text = program.assembly()
    assert text.splitlines()[-1].startswith("FINISH pop_next")
    assert len(program.instruction_bytes()) == 16 * len(insns)


def test_chosen_tilings_fit_resnet_layers() -> None:
    for c, h, o, k, s in [
        (3, 224, 64, 7, 2),
        (64, 56, 64, 3, 1),
        (128, 28, 256, 3, 2),
        (256, 14, 512, 1, 2),
        (512, 7, 512, 3, 1),
    ]:
        params = Conv2dParams(1, c, h, h, o, k, k, s, s, k // 2, k // 2, k // 2, k // 2)
        tiling = choose_tiling(params, DEFAULT_CONFIG)
        assert check_fits(tiling, params, DEFAULT_CONFIG) is None


def test_packing_round_trips() -> None:
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (3, 20, 4, 5), dtype=np.int8)
    packed = pack_activation(x, batch=2, block=16)
    assert packed.shape == (2, 2, 4, 5, 2, 16)
    np.testing.assert_array_equal(unpack_activation(packed, 3, 20), x)
    assert packed[1, 1, :, :, 1].sum() == 0  # padded batch row and channels are zero
    weight = rng.integers(-128, 128, (20, 3, 3, 3), dtype=np.int8)
    wp = pack_weight(weight, 16)
    assert wp.shape == (2, 1, 3, 3, 16, 16)
    assert wp[1, 0, 2, 1, 3, 2] == weight[19, 2, 2, 1]
    assert pack_bias(np.arange(3, dtype=np.int32), 2, 16).shape == (1, 2, 16)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"padding": 3}, "pad_top = 3"),
        ({"shift": 40}, "shift = 40"),
    ],
)
def test_compile_errors(kwargs: dict, message: str) -> None:
    weight = np.zeros((16, 16, 3, 3), dtype=np.int8)
    with pytest.raises(CompileError, match=message):
        compile_conv2d((1, 16, 8, 8), weight, **kwargs)


def test_input_type_errors() -> None:
    weight = np.zeros((16, 16, 1, 1), dtype=np.int8)
    with pytest.raises(CompileError, match="weight must be int8"):
        compile_conv2d((1, 16, 4, 4), weight.astype(np.int16))
    program = compile_conv2d((1, 16, 4, 4), weight)
    with pytest.raises(CompileError, match=r"input must be int8 of shape \(1, 16, 4, 4\)"):
        run(program, np.zeros((1, 16, 4, 4), dtype=np.float32))
