"""Tests of tessera.tir.transform.vectorize: vector code where exact, safe fallbacks
otherwise."""

from __future__ import annotations

import pytest

from tessera import tir
from tessera.tir.functor import post_order_visit
from tessera.tir.transform import flatten_buffers, vectorize
from tessera.tir.verifier import verify

F = tir.ForKind


def _kinds(func: tir.PrimFunc) -> list[tir.ForKind]:
    out: list = []
    post_order_visit(func.body, lambda n: out.append(n.kind) if isinstance(n, tir.For) else None)
    return out


def _ramps(func: tir.PrimFunc) -> list[tir.Ramp]:
    out: list = []
    post_order_visit(func.body, lambda n: out.append(n) if isinstance(n, tir.Ramp) else None)
    return out


def _elementwise(n: int, lanes: int) -> tir.PrimFunc:
    A = tir.decl_buffer((n * lanes,), "float32", "A")
    B = tir.decl_buffer((n * lanes,), "float32", "B")
    C = tir.decl_buffer((n * lanes,), "float32", "C")
    io, ii = tir.Var("io"), tir.Var("ii")
    idx = io * lanes + ii
    x = A[idx]
    value = tir.select(x > tir.const(0.0, "float32"), tir.exp(x) * B[io * lanes], x * 0.5)
    value = value + tir.cast("float32", ii)
    body = tir.For(io, 0, n, F.PARALLEL, tir.For(ii, 0, lanes, F.VECTORIZED,
                                                 tir.BufferStore(C, value, [idx])))
    return tir.PrimFunc("ew", [A, B, C], body)


@pytest.mark.parametrize("n, lanes", [(1, 4), (3, 8), (2, 16)])
def test_vectorize_elementwise(n: int, lanes: int, same) -> None:
    f = _elementwise(n, lanes)
    g = vectorize(f)
    assert F.VECTORIZED not in _kinds(g)
    assert _kinds(g) == [F.PARALLEL]
    text = str(g)
    assert f"C[ramp((io * {lanes}), 1, {lanes})]" in text
    assert f"A[ramp((io * {lanes}), 1, {lanes})]" in text
    assert f"x{lanes}(B[(io * {lanes})])" in text  # invariant load broadcast
    verify(g, lowered=True)
    same(f, g)


def test_vectorize_strided_and_multi_dim(same) -> None:
    A = tir.decl_buffer((4, 16), "float32", "A")
    B = tir.decl_buffer((4, 8), "float32", "B")
    i, j = tir.Var("i"), tir.Var("j")
    body = tir.For(i, 0, 4, F.SERIAL, tir.For(j, 0, 8, F.VECTORIZED, tir.BufferStore(
        B, A[i, j * 2] + A[i, j * 2 + 1], [i, j])))
    f = flatten_buffers(tir.PrimFunc("pool", [A, B], body))
    g = vectorize(f)
    text = str(g)
    assert "A[ramp((i * 16), 2, 8)]" in text and "A[ramp(((i * 16) + 1), 2, 8)]" in text
    assert "B[ramp((i * 8), 1, 8)]" in text
    same(f, g)


def test_vectorize_nonzero_min_and_split_index(same) -> None:
    # index (o*8 + v) // 8 and % 8 with v in [0, 8) simplify to broadcast and ramp
    A = tir.decl_buffer((4, 8), "float32", "A")
    B = tir.decl_buffer((32,), "float32", "B")
    o, v = tir.Var("o"), tir.Var("v")
    flat = o * 8 + v
    body = tir.For(o, 0, 4, F.SERIAL, tir.For(v, 0, 8, F.VECTORIZED, tir.BufferStore(
        B, A[flat // 8, flat % 8] * 2.0, [flat])))
    f = tir.PrimFunc("f", [A, B], body)
    g = vectorize(f)
    assert F.VECTORIZED not in _kinds(g) and F.UNROLLED not in _kinds(g)
    same(f, g)
    A2 = tir.decl_buffer((8,), "float32", "A")
    B2 = tir.decl_buffer((8,), "float32", "B")
    body = tir.For(v, 2, 4, F.VECTORIZED, tir.BufferStore(B2, A2[v] + 1.0, [v]))
    f2 = tir.PrimFunc("g", [A2, B2], body)
    g2 = vectorize(f2)
    assert "B[ramp(2, 1, 4)]" in str(g2)
    same(f2, g2)


def test_int_and_cast_vectors(same) -> None:
    A = tir.decl_buffer((16,), "int32", "A")
    B = tir.decl_buffer((16,), "float32", "B")
    v = tir.Var("v")
    x = A[v]
    value = tir.cast("float32", tir.max_(x % tir.const(7, "int32"), tir.const(2, "int32")))
    body = tir.For(v, 0, 16, F.VECTORIZED, tir.BufferStore(B, value, [v]))
    f = tir.PrimFunc("f", [A, B], body)
    g = vectorize(f)
    assert len(_ramps(g)) >= 2 and F.VECTORIZED not in _kinds(g)
    verify(g, lowered=True)
    same(f, g)


def _reduction() -> tir.PrimFunc:
    A = tir.decl_buffer((4, 8), "float32", "A")
    S = tir.decl_buffer((4,), "float32", "S")
    i, k = tir.Var("i"), tir.Var("k")
    body = tir.For(i, 0, 4, F.SERIAL, tir.For(k, 0, 8, F.VECTORIZED, tir.BufferStore(
        S, S[i] + A[i, k], [i])))
    return tir.PrimFunc("rsum", [A, S], body)


def _shift() -> tir.PrimFunc:
    A = tir.decl_buffer((9,), "float32", "A")
    v = tir.Var("v")
    body = tir.For(v, 0, 8, F.VECTORIZED, tir.BufferStore(A, A[v] * 2.0 + 1.0, [v + 1]))
    return tir.PrimFunc("shift", [A], body)


def _if_on_var() -> tir.PrimFunc:
    A = tir.decl_buffer((8,), "float32", "A")
    v = tir.Var("v")
    body = tir.For(v, 0, 8, F.VECTORIZED, tir.IfThenElse(
        v < 5, tir.BufferStore(A, A[v] + 1.0, [v])))
    return tir.PrimFunc("guarded", [A], body)


def _nested_loop() -> tir.PrimFunc:
    A = tir.decl_buffer((8, 3), "float32", "A")
    v, k = tir.Var("v"), tir.Var("k")
    body = tir.For(v, 0, 8, F.VECTORIZED, tir.For(k, 0, 3, F.SERIAL, tir.BufferStore(
        A, A[v, k] + 1.0, [v, k])))
    return tir.PrimFunc("nested", [A], body)


def _non_affine() -> tir.PrimFunc:
    A = tir.decl_buffer((64,), "float32", "A")
    B = tir.decl_buffer((8,), "float32", "B")
    v = tir.Var("v")
    body = tir.For(v, 0, 8, F.VECTORIZED, tir.BufferStore(B, A[v * v] + A[v // 3], [v]))
    return tir.PrimFunc("gather", [A, B], body)


def _long() -> tir.PrimFunc:
    A = tir.decl_buffer((200,), "float32", "A")
    v = tir.Var("v")
    body = tir.For(v, 0, 200, F.VECTORIZED, tir.BufferStore(A, A[v] + 1.0, [v]))
    return tir.PrimFunc("long", [A], body)


@pytest.mark.parametrize("make", [_reduction, _shift, _if_on_var, _nested_loop, _non_affine])
def test_unvectorizable_loops_fall_back(make, same) -> None:
    f = make()
    g = vectorize(f)
    assert F.VECTORIZED not in _kinds(g)
    assert not _ramps(g)
    assert F.UNROLLED in _kinds(g) or F.SERIAL in _kinds(g)
    same(f, g)


def test_reduction_falls_back_to_serial(same) -> None:
    g = vectorize(_reduction())
    assert _kinds(g) == [F.SERIAL, F.SERIAL]
    h = vectorize(_if_on_var())
    assert _kinds(h) == [F.UNROLLED]


def test_long_loop_falls_back_to_serial(same) -> None:
    f = _long()
    g = vectorize(f)
    assert _kinds(g) == [F.SERIAL]
    same(f, g)
    g8 = vectorize(f, max_lanes=256)
    assert _ramps(g8)
    same(f, g8)


def test_same_index_read_modify_write_vectorizes(same) -> None:
    # acc[v] = acc[v] + ... reads exactly the lanes it writes: no dependence between lanes
    A = tir.decl_buffer((3, 8), "float32", "A")
    Acc = tir.decl_buffer((8,), "float32", "Acc")
    k, v = tir.Var("k"), tir.Var("v")
    body = tir.For(k, 0, 3, F.SERIAL, tir.For(v, 0, 8, F.VECTORIZED, tir.BufferStore(
        Acc, Acc[v] + A[k, v], [v])))
    f = tir.PrimFunc("acc", [A, Acc], body)
    g = vectorize(f)
    assert _ramps(g)
    same(f, g)


def test_let_and_invariant_if_in_vector_body(same) -> None:
    A = tir.decl_buffer((4, 8), "float32", "A")
    B = tir.decl_buffer((4, 8), "float32", "B")
    i, v, t, s = tir.Var("i"), tir.Var("v"), tir.Var("t", "float32"), tir.Var("s")
    body = tir.For(i, 0, 4, F.SERIAL, tir.LetStmt(s, i * 2, tir.For(
        v, 0, 8, F.VECTORIZED, tir.LetStmt(t, A[i, v] * 2.0, tir.IfThenElse(
            s < 5, tir.BufferStore(B, t + t, [i, v]),
            tir.BufferStore(B, t - 1.0, [i, v]))))))
    f = tir.PrimFunc("f", [A, B], body)
    g = vectorize(f)
    assert _ramps(g) and F.VECTORIZED not in _kinds(g)
    same(f, g)
