"""int8 matrix products through dp4a (``tessera_cuda.computes``): packed words in the
shared-memory product template, executed on the host through the project's CUDA header (the
prelude's byte-wise ``ts_dp4a_*``) and compiled by NVRTC (the GPU's ``__dp4a`` and the mixed
sign ``dp4a`` PTX), exactly equal to the int64 reference; products that do not qualify keep
the int32 template."""

from __future__ import annotations

import numpy as np
import pytest
from backend_cases.support import Case, build_function

from plugins.cuda.tests.conftest import needs_cxx, needs_nvrtc
from tessera.ops.registry import get_schema
from tessera_cuda.emulate import run_on_host
from tessera_cuda.lowering import lower_region
from tessera_cuda.nvrtc import compile_cuda
from tessera_cuda.schedules import GPUInfo

pytestmark = [needs_cxx, needs_nvrtc]
RNG = np.random.default_rng(31)
LIMITS = {"int8": (-128, 127), "uint8": (0, 255)}


def ints(dtype: str, *shape: int) -> np.ndarray:
    return RNG.integers(*LIMITS[dtype], shape, endpoint=True).astype(dtype)


def run(case: Case) -> tuple[np.ndarray, list[np.ndarray], str]:
    g, nodes, feeds, outs = build_function([case])
    lowered = lower_region(g, GPUInfo())
    assert compile_cuda(lowered.source.text, "sm_90").cubin
    got = run_on_host(lowered, feeds)[outs[0][0]]
    want = get_schema(case.op).evaluate([np.asarray(a) for a in case.inputs], nodes[0].attrs)
    kernels = "\n".join(k.text for grp in lowered.groups for k in grp.kernels.kernels)
    return got, want, kernels


@pytest.mark.parametrize("da,db", [("int8", "int8"), ("uint8", "int8"), ("uint8", "uint8"),
                                   ("int8", "uint8")])
def test_matmul_integer_through_dp4a(da: str, db: str) -> None:
    a, b = ints(da, 2, 7, 44), ints(db, 44, 20)
    got, want, kernels = run(Case("MatMulInteger", [a, b], consts=(1,)))
    sign = {"int8": "s", "uint8": "u"}
    assert f"ts_dp4a_{sign[da]}{sign[db]}(" in kernels
    np.testing.assert_array_equal(got, want[0])
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.parametrize("k,zero_point", [(30, 0), (32, 3)])
def test_products_that_do_not_qualify_keep_int32_multiply_adds(k: int, zero_point: int) -> None:
    a, b = ints("int8", 5, k), ints("int8", k, 9)
    inputs = [a, b] + ([np.array(zero_point, np.int8)] if zero_point else [])
    got, want, kernels = run(Case("MatMulInteger", inputs, consts=(1, 2)))
    assert "ts_dp4a" not in kernels
    np.testing.assert_array_equal(got, want[0])


@pytest.mark.parametrize("a_zero", [0, 128])
def test_qlinear_matmul(a_zero: int) -> None:
    """Zero points of 0 (symmetric quantization) use dp4a under the requantization; a
    non-zero one keeps the int32 template. Requantized outputs equal the reference exactly."""
    a, b = ints("uint8", 6, 64), ints("int8", 64, 16)
    f32 = np.float32
    inputs = [a, np.array(0.02, f32), np.array(a_zero, np.uint8), b, np.array(0.01, f32),
              np.array(0, np.int8), np.array(0.05, f32), np.array(10, np.uint8)]
    got, want, kernels = run(Case("QLinearMatMul", inputs, consts=(1, 2, 3, 4, 5, 6, 7)))
    assert ("ts_dp4a_us(" in kernels) == (a_zero == 0)
    np.testing.assert_array_equal(got, want[0])
