"""Masked partial vectors in the llvm backend: a symbolic kernel whose last vector is guarded,
lowered with the backend's pipeline options (``predicate_tails``), compiled to
``llvm.masked.load``/``llvm.masked.store`` and run at sizes around the vector width against the
TIR interpreter, with the memory right after each buffer watched: the lanes outside the mask
read and write nothing."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import tir
from tessera.tir import interpreter
from tessera.tir.transform import lower_pipeline
from tessera_llvm.build import build_module
from tessera_llvm.lowering import PIPELINE_OPTIONS

F = tir.ForKind
W = 16
SIZES = [0, 1, 5, W - 1, W, W + 1, 2 * W + 7, 100]
DTYPES = ["float32", "float64", "float16", "int8", "int32"]


def _kernel(dtype: str) -> tir.PrimFunc:
    """Per row r < 3 of run-time length n: ``C[r, i] = A[r, i] * B[i] + M[r] + i``, split by
    W with the last, partial vector guarded (exp for floats)."""
    n = tir.Var("n", "int64")
    r, io, ii = (tir.Var(x, "int64") for x in ("r", "io", "ii"))
    A, C = tir.Buffer("A", (3, n), dtype), tir.Buffer("C", (3, n), dtype)
    B, M = tir.Buffer("B", (n,), dtype), tir.Buffer("M", (3,), dtype)
    i = io * W + ii
    x = A[r, i] * B[i] + M[r] + tir.cast(dtype, i % 7)
    value = tir.exp(x * 0.01) if dtype.startswith("float") else x
    body = tir.For(r, 0, 3, F.SERIAL, tir.For(io, 0, (n + W - 1) // W, F.SERIAL, tir.For(
        ii, 0, W, F.VECTORIZED, tir.IfThenElse(i < n, tir.BufferStore(C, value, [r, i])))))
    return tir.PrimFunc(f"masked_{dtype}", [A, B, M, C], body, size_bounds={n: (0, 4096)})


@pytest.fixture(scope="module")
def built():  # noqa: ANN201 - a BuiltModule
    funcs = [lower_pipeline(_kernel(d), PIPELINE_OPTIONS) for d in DTYPES]
    return build_module(funcs, "masked")


def _watched(shape: tuple[int, ...], dtype: str, rng: np.random.Generator,
             fill: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(an array of ``shape`` with 64 elements of known values right after it in memory, the
    whole block)."""
    count = int(np.prod(shape))
    block = np.full(count + 64, 77, dtype)
    values = rng.standard_normal(count) * 4 if fill is None else np.full(count, fill)
    block[:count] = values.astype(dtype)
    return block[:count].reshape(shape), block


def test_the_tails_compile_to_masked_loads_and_stores(built) -> None:
    assert "llvm.masked.load" in built.source_ir and "llvm.masked.store" in built.source_ir


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_tails_match_the_interpreter_and_touch_nothing_past_the_end(
        built, dtype: str) -> None:
    lib = built.load()
    func = _kernel(dtype)
    rng = np.random.default_rng(7)
    for n in SIZES:
        (a, ablock), (b, bblock) = _watched((3, n), dtype, rng), _watched((n,), dtype, rng)
        m, _ = _watched((3,), dtype, rng)
        c, cblock = _watched((3, n), dtype, rng, fill=0)
        want = np.zeros((3, n), dtype)
        interpreter.run(func, [a.copy(), b.copy(), m.copy(), want], sizes={"n": n})
        lib.get(func.name)([a, b, m, c])
        if dtype.startswith("float"):
            np.testing.assert_allclose(c, want, rtol=2e-3 if dtype == "float16" else 1e-5,
                                       err_msg=f"n={n}")
        else:
            np.testing.assert_array_equal(c, want, err_msg=f"n={n}")
        for block, count in ((ablock, 3 * n), (bblock, n), (cblock, 3 * n)):
            assert (block[count:] == 77).all(), f"n={n}: memory past a buffer changed"


def test_a_transposes_last_vector_is_one_masked_store_of_a_gather() -> None:
    """``C[r, i] = A[i, r] + i`` for i < n: the partial vector's strided load of A reads
    the first lane's element in the lanes outside the mask (in the buffer), the store is
    masked; exact at every size, nothing written past C."""
    n = tir.Var("n", "int64")
    r, io, ii = (tir.Var(x, "int64") for x in ("r", "io", "ii"))
    A, C = tir.Buffer("A", (n, 3), "float32"), tir.Buffer("C", (3, n), "float32")
    i = io * W + ii
    body = tir.For(r, 0, 3, F.SERIAL, tir.For(io, 0, (n + W - 1) // W, F.SERIAL, tir.For(
        ii, 0, W, F.VECTORIZED, tir.IfThenElse(i < n, tir.BufferStore(
            C, A[i, r] + tir.cast("float32", i), [r, i])))))
    func = tir.PrimFunc("gathered", [A, C], body, size_bounds={n: (0, 4096)})
    built = build_module([lower_pipeline(func, PIPELINE_OPTIONS)], "gathered")
    assert "llvm.masked.store" in built.source_ir
    fn = built.load().get("gathered")
    rng = np.random.default_rng(3)
    for size in SIZES:
        a, _ = _watched((size, 3), "float32", rng)
        c, cblock = _watched((3, size), "float32", rng, fill=0)
        want = np.zeros((3, size), "float32")
        interpreter.run(func, [a.copy(), want], sizes={"n": size})
        fn([a, c])
        np.testing.assert_array_equal(c, want, err_msg=f"n={size}")
        assert (cblock[3 * size:] == 77).all(), f"n={size}: memory past C changed"
