"""Linear-algebra ops (tessera.ops.linalg) and their ONNX converters, checked against onnxruntime
on one-node models over random data: shapes, broadcasting, transposes, opsets and element
types."""

from __future__ import annotations

import numpy as np
import pytest
from nn_support import F16, F32, RNG, check, rand
from onnx_node import one_node_model, run_tessera

from tessera.errors import ModelImportError
from tessera.frontend.onnx import import_onnx

# -- matrix products ----------------------------------------------------------------------------

GEMM_CASES = [
    ((3, 4), (4, 5), (5,), {}),
    ((4, 3), (4, 5), (3, 5), {"transA": 1, "alpha": 0.5, "beta": 2.0}),
    ((3, 4), (5, 4), (1, 5), {"transB": 1}),
    ((4, 3), (5, 4), (3, 1), {"transA": 1, "transB": 1, "beta": 0.0}),
    ((3, 4), (4, 5), (), {"alpha": -1.5}),
    ((3, 4), (4, 5), None, {}),
]


@pytest.mark.parametrize("sa,sb,sc,attrs", GEMM_CASES)
def test_gemm(sa: tuple, sb: tuple, sc: tuple | None, attrs: dict) -> None:
    c = rand(*sc) if sc is not None else None
    check("Gemm", [rand(*sa), rand(*sb), c], attrs, opset=13)


@pytest.mark.parametrize("opset", [7, 9, 11])
def test_gemm_old_opsets(opset: int) -> None:
    check("Gemm", [rand(3, 4), rand(5, 4), rand(3, 5)], {"transB": 1, "beta": 0.5},
          opset=opset, consts=(1, 2))


def test_gemm_float16_and_int32() -> None:
    check("Gemm", [rand(3, 4, dtype=F16), rand(4, 5, dtype=F16), rand(5, dtype=F16)], opset=13)
    a = RNG.integers(-9, 9, (4, 3)).astype(np.int32)
    b = RNG.integers(-9, 9, (4, 2)).astype(np.int32)
    c = np.array([1, 2], np.int32)  # onnxruntime has no int32 Gemm: compare with numpy
    (y,) = run_tessera(one_node_model("Gemm", [a, b, c], {"transA": 1, "alpha": 2.0}, opset=13),
                       {"x0": a, "x1": b, "x2": c})
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, 2 * a.T @ b + c)


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 5)),
                                   ((3, 4), (4,)), ((4,), (4,)), ((2, 1, 3, 4), (5, 4, 2)),
                                   ((4,), (2, 4, 3)), ((2, 3, 4), (4,))])
def test_matmul(sa: tuple, sb: tuple) -> None:
    check("MatMul", [rand(*sa), rand(*sb)], opset=13)


@pytest.mark.parametrize("dtype", [F16, np.int32, np.int64, np.float64])
def test_matmul_dtypes(dtype) -> None:
    a = (rand(2, 3, 4) * 8).astype(dtype)
    b = (rand(4, 3) * 8).astype(dtype)
    check("MatMul", [a, b], opset=13)


def test_matmul_shape_error() -> None:
    with pytest.raises(ModelImportError, match="inner dimensions"):
        import_onnx(one_node_model("MatMul", [rand(3, 4), rand(5, 6)], opset=13, consts=(1,)))


@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("ij->", [(3, 4)]),
    ("ij", [(3, 4)]),
    ("ji", [(3, 4)]),
    ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),
    ("i,i", [(5,), (5,)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
])
def test_einsum(eq: str, shapes: list[tuple]) -> None:
    check("Einsum", [rand(*s) for s in shapes], {"equation": eq}, opset=12)


# -- Det ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (2, 3, 1, 1), (5, 2, 2)])
def test_det(rng, shape):
    x = rng.standard_normal(shape).astype(F32)
    (want,) = check("Det", [x], opset=11, rtol=1e-4, atol=1e-5)
    # float64 (onnxruntime has a float32 kernel only): close to the float32 result
    x64 = x.astype(np.float64)
    (got,) = run_tessera(one_node_model("Det", [x64], opset=22), {"x0": x64})
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_det_float16_and_singular(rng):
    x = np.array([[1, 2], [2, 4]], dtype=np.float16)
    model = one_node_model("Det", [x], opset=22)
    (y,) = run_tessera(model, {"x0": x})
    assert y.dtype == np.float16 and y.shape == () and y == 0
