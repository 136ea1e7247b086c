"""Tests of the TIR reference interpreter (tessera.tir.interpreter)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import tir
from tessera.tir.interpreter import eval_expr, run

RNG = np.random.default_rng(0)


def _loop(var: tir.Var, extent: int, body: tir.Stmt,
          kind: tir.ForKind = tir.ForKind.SERIAL) -> tir.For:
    return tir.For(var, 0, extent, kind, body)


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (4, 8)])
def test_multi_dim_elementwise(shape: tuple[int, int]) -> None:
    A = tir.decl_buffer(shape, "float32", "A")
    B = tir.decl_buffer(shape, "float32", "B")
    i, j = tir.Var("i"), tir.Var("j")
    body = _loop(i, shape[0], _loop(j, shape[1], tir.BufferStore(
        B, tir.exp(A[i, j]) * 2.0 + tir.sqrt(tir.fabs(A[i, j])), [i, j])))
    a = RNG.standard_normal(shape).astype("float32")
    b = np.zeros_like(a)
    run(tir.PrimFunc("f", [A, B], body), [a, b])
    np.testing.assert_allclose(b, np.exp(a) * 2 + np.sqrt(np.abs(a)), rtol=1e-5)


def test_flat_buffer_accepts_multi_dim_array_and_dict_args() -> None:
    A = tir.decl_buffer((12,), "float32", "A")
    B = tir.decl_buffer((12,), "float32", "B")
    i = tir.Var("i")
    body = _loop(i, 12, tir.BufferStore(B, A[i] * A[i], [i]))
    a = RNG.standard_normal((3, 4)).astype("float32")
    b = np.zeros((3, 4), "float32")
    run(tir.PrimFunc("sq", [A, B], body), {"A": a, "B": b})
    np.testing.assert_allclose(b, a * a, rtol=1e-6)


def test_non_contiguous_output_is_written_back() -> None:
    A = tir.decl_buffer((4, 3), "float32", "A")
    i, j = tir.Var("i"), tir.Var("j")
    body = _loop(i, 4, _loop(j, 3, tir.BufferStore(A, A[i, j] + 1.0, [i, j])))
    base = RNG.standard_normal((3, 4)).astype("float32")
    view = base.T
    expected = view + 1
    run(tir.PrimFunc("inc", [A], body), [view])
    np.testing.assert_allclose(base.T, expected)


def test_vector_lanes_ramp_broadcast() -> None:
    A = tir.decl_buffer((32,), "float32", "A")
    B = tir.decl_buffer((32,), "float32", "B")
    i = tir.Var("i")
    idx = tir.Ramp(i * 8, 1, 8)
    one = tir.Broadcast(tir.const(1.5, "float32"), 8)
    body = _loop(i, 4, tir.BufferStore(B, tir.max_(A[idx], one) + one, [idx]))
    a = RNG.standard_normal(32).astype("float32") * 3
    b = np.zeros_like(a)
    run(tir.PrimFunc("v", [A, B], body), [a, b])
    np.testing.assert_allclose(b, np.maximum(a, 1.5) + 1.5)


def test_strided_ramp_gather_and_vector_select() -> None:
    A = tir.decl_buffer((16,), "float32", "A")
    B = tir.decl_buffer((8,), "float32", "B")
    idx = tir.Ramp(tir.const(1), 2, 8)
    val = A[idx]
    zero = tir.Broadcast(tir.const(0.0, "float32"), 8)
    body = tir.BufferStore(B, tir.select(val > zero, val, zero), [tir.Ramp(tir.const(0), 1, 8)])
    a = RNG.standard_normal(16).astype("float32")
    b = np.zeros(8, "float32")
    run(tir.PrimFunc("g", [A, B], body), [a, b])
    np.testing.assert_allclose(b, np.maximum(a[1::2], 0))


def test_integer_floor_semantics_and_casts() -> None:
    x = tir.Var("x")
    for v in (-7, -6, -1, 0, 5, 7):
        assert eval_expr(x // 3, {x: v}) == v // 3
        assert eval_expr(x % 3, {x: v}) == v % 3
        assert eval_expr(x // -3, {x: v}) == v // -3
        assert eval_expr(x % -3, {x: v}) == v % -3
    f = tir.Var("f", "float32")
    assert eval_expr(tir.cast("int32", f), {f: -2.7}) == -2
    assert eval_expr(tir.cast("int8", tir.cast("int32", x)), {x: 300}) == np.int64(300).astype(
        "int8")
    assert eval_expr(tir.round_even(f), {f: 2.5}) == 2.0
    r = eval_expr(tir.Ramp(x, 3, 4), {x: 2})
    assert r.tolist() == [2, 5, 8, 11]


def test_allocate_let_if_and_parallel_kinds() -> None:
    n = 6
    A = tir.decl_buffer((n,), "float32", "A")
    B = tir.decl_buffer((n,), "float32", "B")
    T = tir.decl_buffer((2,), "float32", "T", scope="local")
    i, k, t = tir.Var("i"), tir.Var("k"), tir.Var("t")
    inner = tir.seq(
        _loop(k, 2, tir.BufferStore(T, A[i] * tir.cast("float32", k + 1), [k]),
              tir.ForKind.UNROLLED),
        tir.LetStmt(t, i * 2, tir.IfThenElse(
            tir.LT(t, tir.const(6)),
            tir.BufferStore(B, T[0] + T[1], [i]),
            tir.BufferStore(B, T[1] - T[0], [i]))),
    )
    body = _loop(i, n, tir.Allocate(T, inner), tir.ForKind.PARALLEL)
    a = RNG.standard_normal(n).astype("float32")
    b = np.zeros_like(a)
    run(tir.PrimFunc("f", [A, B], body), [a, b])
    expected = np.where(np.arange(n) * 2 < 6, 3 * a, a)
    np.testing.assert_allclose(b, expected, rtol=1e-6)


def test_uninitialised_allocate_reads_nan() -> None:
    B = tir.decl_buffer((2,), "float32", "B")
    T = tir.decl_buffer((2,), "float32", "T", scope="local")
    body = tir.Allocate(T, tir.seq(tir.BufferStore(T, tir.const(1.0, "float32"), [0]),
                                   tir.BufferStore(B, T[0], [0]),
                                   tir.BufferStore(B, T[1], [1])))
    b = np.zeros(2, "float32")
    run(tir.PrimFunc("f", [B], body), [b])
    assert b[0] == 1.0 and np.isnan(b[1])


def test_out_of_bounds_access_raises() -> None:
    A = tir.decl_buffer((2, 3), "float32", "A")
    i = tir.Var("i")
    body = _loop(i, 4, tir.BufferStore(A, tir.const(0.0, "float32"), [0, i]))
    with pytest.raises(IndexError, match="A"):
        run(tir.PrimFunc("f", [A], body), [np.ones((2, 3), "float32")])


def test_dtype_and_arity_checks() -> None:
    A = tir.decl_buffer((2,), "float32", "A")
    f = tir.PrimFunc("f", [A], tir.Evaluate(tir.const(0)))
    with pytest.raises(TypeError, match="float32"):
        run(f, [np.ones(2, "float64")])
    with pytest.raises(ValueError):
        run(f, [])


def test_int_accumulation_with_reduction_loop() -> None:
    A = tir.decl_buffer((3, 5), "int32", "A")
    S = tir.decl_buffer((3,), "int32", "S")
    i, k = tir.Var("i"), tir.Var("k")
    body = _loop(i, 3, tir.seq(
        tir.BufferStore(S, tir.const(0, "int32"), [i]),
        _loop(k, 5, tir.BufferStore(S, S[i] + A[i, k] % tir.const(4, "int32"), [i]))))
    a = RNG.integers(-20, 20, (3, 5)).astype("int32")
    s = np.zeros(3, "int32")
    run(tir.PrimFunc("f", [A, S], body), [a, s])
    np.testing.assert_array_equal(s, (a % 4).sum(axis=1))
